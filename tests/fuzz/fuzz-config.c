/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-config.c — libFuzzer target for the kgpu.yaml parser (config_load_string()).
 *
 * Contract: the input is the file text. The environment is cleared once, so only the
 * input decides. Either a Config comes back and no error text, or an error code and a
 * non-empty error text naming the file, and path options are absolute or unset;
 * anything else, a crash, a leak or a sanitizer report is a bug. The same text is also
 * read as a named NVIDIA config over an empty kgpu.yaml (config_load_with_overlay(),
 * common/config-overlay.h): the same rules, and no kgpu key (logLevel, stateDirectory,
 * intel.*, cluster.*, nvidiaConfigs.*) ever changes from its default.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "common/config.h"
#include "common/config-internal.h"
#include "common/log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        (void) clearenv();
        log_set_max_level(LOG_CRIT);
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static int initialized;
        Config *c = NULL;
        char *error = NULL;
        int r;

        if (!initialized) {     /* the replay runner has no LLVMFuzzerInitialize() call */
                LLVMFuzzerInitialize(NULL, NULL);
                initialized = 1;
        }
        r = config_load_string((const char *) data, size, "fuzz.yaml", NULL, 0, &c, &error);
        if (r < 0) {
                if (c)
                        abort();        /* nothing half-configured comes back */
                if (error && strncmp(error, "fuzz.yaml", 9) != 0)
                        abort();        /* every error names the file */
        } else {
                /* A path option given an empty value is unset (NULL); a set one is absolute. */
                if (!c || !c->log_level || c->intel_shared_dev_num < 1 ||
                    (c->state_directory && c->state_directory[0] != '/') ||
                    (c->runtime_directory && c->runtime_directory[0] != '/') ||
                    (c->device_plugin_path && c->device_plugin_path[0] != '/'))
                        abort();
        }
        free(error);
        config_free(c);
        c = NULL;
        error = NULL;

        r = config_load_with_overlay("", NULL, 0, (const char *) data, size, "named.yaml", &c, &error);
        if (r < 0) {
                if (c)
                        abort();
                if (error && strncmp(error, "named.yaml", 10) != 0)
                        abort();
        } else if (!c || !c->log_level || strcmp(c->log_level, "info") != 0 || c->intel_shared_dev_num != 1 ||
                   !c->state_directory || strcmp(c->state_directory, KGPU_LOCALSTATEDIR "/lib/kgpu") != 0 ||
                   !c->cluster_user || strcmp(c->cluster_user, "kgpu-cluster") != 0 ||
                   c->nvidia_configs_default || !c->intel_enabled || !c->nvidia_enabled)
                abort();        /* a named config changed one of kgpu's own keys */
        free(error);
        config_free(c);
        return 0;
}
