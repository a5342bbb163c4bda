/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reload.c — kgpu-probed re-reads kgpu.yaml on SIGHUP (systemctl reload).
 *
 * Contract: see reload.h. manager_configure() validates every value before it changes
 * anything, so a refused file leaves the running settings as they were.
 */

#include <errno.h>
#include <signal.h>

#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>

#include "common/config.h"
#include "common/daemon.h"
#include "common/log.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/reload.h"

int probe_reload(ProbeReload *p) {
        _cleanup_(config_freep) Config *c = NULL;
        const char *key = NULL;
        int r;

        (void) sd_notify(false, "RELOADING=1");
        r = daemon_load_config(p->args, &c);   /* logs file:line:key */
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
        log_info("Reloaded the configuration from %s.", c->file ?: "defaults");
        (void) sd_notify(false, "READY=1");
        return 0;
}
