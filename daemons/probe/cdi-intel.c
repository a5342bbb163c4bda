/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cdi-intel.c — the Intel CDI spec (see cdi-intel.h).
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "daemons/probe/cdi-intel.h"
#include "daemons/probe/outputs.h"

/* Device node paths come from udev and were checked (absolute, bounded); JSON-escape
 * the two characters that could still break the document. */
static int json_append_str(char **buf, const char *s) {
        _cleanup_free_ char *e = calloc(1, strlen(s) * 6 + 1);
        size_t k = 0;
        char *n;

        if (!e)
                return -ENOMEM;
        for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
                if (*p == '"' || *p == '\\') {
                        e[k++] = '\\';
                        e[k++] = (char) *p;
                } else if (*p < 0x20) {
                        k += (size_t) sprintf(e + k, "\\u%04x", *p);
                } else
                        e[k++] = (char) *p;
        }
        if (asprintf(&n, "%s\"%s\"", *buf, e) < 0)
                return -ENOMEM;
        free(*buf);
        *buf = n;
        return 0;
}

static int append(char **buf, const char *s) {
        char *n;

        if (asprintf(&n, "%s%s", *buf, s) < 0)
                return -ENOMEM;
        free(*buf);
        *buf = n;
        return 0;
}

int cdi_intel_spec(Gpu * const *gpus, size_t n, char **ret) {
        _cleanup_free_ char *b = strdup("");
        bool first = true;
        int r, n_devices = 0;

        if (!b)
                return -ENOMEM;
        if ((r = append(&b, "{\n  \"cdiVersion\": \"" OUTPUTS_CDI_VERSION "\",\n"
                            "  \"kind\": \"" CDI_INTEL_KIND "\",\n  \"devices\": [")) < 0)
                return r;

        for (size_t i = 0; i < n; i++) {
                const Gpu *g = gpus[i];

                if (!streq(g->vendor, "intel"))         /* the others have their own spec */
                        continue;
                if (!streq(g->health, GPU_HEALTHY) || !outputs_cdi_name_is_valid(g->id) ||
                    strv_length(g->device_nodes) == 0)
                        continue;
                if ((r = append(&b, first ? "\n    {\n      \"name\": " : ",\n    {\n      \"name\": ")) < 0 ||
                    (r = json_append_str(&b, g->id)) < 0 ||
                    (r = append(&b, ",\n      \"containerEdits\": {\n        \"deviceNodes\": [")) < 0)
                        return r;
                first = false;
                n_devices++;
                for (size_t k = 0; g->device_nodes[k]; k++) {
                        if ((r = append(&b, k ? ",\n          { \"path\": " : "\n          { \"path\": ")) < 0 ||
                            (r = json_append_str(&b, g->device_nodes[k])) < 0 ||
                            (r = append(&b, ", \"type\": \"c\" }")) < 0)
                                return r;
                }
                if ((r = append(&b, "\n        ]\n      }\n    }")) < 0)
                        return r;
        }
        if ((r = append(&b, first ? "]\n}\n" : "\n  ]\n}\n")) < 0)
                return r;

        *ret = TAKE_PTR(b);
        return n_devices;
}

int cdi_intel_write(const char *directory, Gpu * const *gpus, size_t n) {
        _cleanup_free_ char *spec = NULL, *path = NULL;
        int r;

        if (isempty(directory))
                return 0;
        r = cdi_intel_spec(gpus, n, &spec);
        if (r < 0)
                return r;
        if (asprintf(&path, "%s/%s", directory, CDI_INTEL_FILE) < 0)
                return -ENOMEM;
        if (r == 0)
                return unlink(path) < 0 && errno != ENOENT ? negative_errno() : 0;
        return outputs_write_atomic(path, spec, strlen(spec));
}
