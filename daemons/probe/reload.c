/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reload.c — kgpu-probed re-reads kgpu.yaml on SIGHUP (systemctl reload).
 *
 * Contract: see reload.h. manager_configure() validates every value before it changes
 * anything, so a refused file leaves the running settings as they were.
 */

#include <errno.h>
#include <signal.h>
#include <string.h>

#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>

#include "common/config.h"
#include "common/config-overlay.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/node-config.h"
#include "daemons/probe/reload.h"

int probe_reload(ProbeReload *p) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *error = NULL;
        const char *key = NULL;
        int r;

        (void) sd_notify(false, "RELOADING=1");
        /* kgpu.yaml, with the named NVIDIA config the broker has in force (node-config.h). */
        r = config_load_selected(p->args->config_path, p->args->overrides, p->args->n_overrides,
                                 probe_node_config_name(p->manager), &c, &error);
        if (r == -ENOMEM)
                log_oom();
        else if (r < 0)
                log_error("Invalid configuration: %s", error ?: strerror(-r));
        else if (!isempty(c->log_level)) {
                int level = log_level_from_string(c->log_level);

                if (level >= 0)
                        log_set_max_level(level);
        }
        if (r >= 0) {
                r = manager_configure(p->manager, c, &key);
                if (r == -EINVAL)
                        log_error("Invalid configuration: %s.", key);
                else if (r < 0)
                        log_oom();
        }
        if (r < 0) {
                log_error("Refusing to reload the configuration, the running one stays in force.");
                (void) sd_notify(false, "READY=1");
                return r;
        }

        r = manager_rescan(p->manager);
        if (r < 0)
                log_warning_errno(r, "Failed to rescan the GPUs after the reload, ignoring: %m");
        r = manager_write_outputs(p->manager);
        if (r < 0)
                log_warning_errno(r, "Failed to rewrite the labels or CDI spec after the reload, ignoring: %m");
        log_info("Reloaded the configuration from %s%s%s.", c->file ?: "defaults",
                 isempty(probe_node_config_name(p->manager)) ? "" : " with the named NVIDIA config ",
                 probe_node_config_name(p->manager));
        (void) sd_notify(false, "READY=1");
        return 0;
}
