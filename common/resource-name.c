/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * resource-name.c — resource names and their socket names (see resource-name.h).
 */

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/resource-name.h"
#include "common/util.h"

bool resource_name_valid(const char *name) {
        size_t l, slashes = 0;

        if (isempty(name))
                return false;
        l = strlen(name);
        if (l > RESOURCE_NAME_MAX)
                return false;
        if (name[0] == '.' || name[0] == '-' || name[0] == '/' || name[l - 1] == '/')
                return false;
        for (const char *p = name; *p; p++) {
                char c = *p;

                if (c == '/') {
                        slashes++;
                        /* The name part must not start with '.' either ("x/.." etc.). */
                        if (p[1] == '.' || p[1] == '-')
                                return false;
                        continue;
                }
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
                        return false;
        }
        return slashes == 1;
}

int resource_socket_name(const char *resource, char **ret) {
        char *s;

        if (!resource_name_valid(resource))
                return -EINVAL;
        if (asprintf(&s, RESOURCE_SOCKET_PREFIX "%s" RESOURCE_SOCKET_SUFFIX, resource) < 0)
                return -ENOMEM;
        for (char *p = s; *p; p++)
                if (*p == '/')
                        *p = '-';
        *ret = s;
        return 0;
}

bool resource_socket_name_is_ours(const char *name) {
        size_t l, lp = strlen(RESOURCE_SOCKET_PREFIX), ls = strlen(RESOURCE_SOCKET_SUFFIX);

        if (!name || !startswith(name, RESOURCE_SOCKET_PREFIX) || strchr(name, '/'))
                return false;
        l = strlen(name);
        return l > lp + ls && streq(name + l - ls, RESOURCE_SOCKET_SUFFIX);
}

bool resource_domain_enabled(const Config *c, const char *name) {
        static const struct {
                const char *domain;
                size_t enabled;         /* offset of the bool in Config */
        } domains[] = {
                { "gpu.intel.com/", offsetof(Config, intel_enabled) },
                { "nvidia.com/", offsetof(Config, nvidia_enabled) },
        };

        if (!c || !name)
                return false;
        for (size_t i = 0; i < ELEMENTSOF(domains); i++)
                if (startswith(name, domains[i].domain))
                        return *(const bool *) ((const char *) c + domains[i].enabled);
        return false;
}
