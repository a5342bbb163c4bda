/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reload.c — kgpu-grpcd re-reads kgpu.yaml on SIGHUP (systemctl reload).
 *
 * Contract: see reload.h. The running Config stays the same object (plugins hold no
 * pointers into it that a swap would invalidate); only plain values and the pod
 * resources socket path are replaced.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "common/daemon.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/grpc/broker-client.h"
#include "daemons/grpc/manager.h"
#include "daemons/grpc/podresources.h"
#include "daemons/grpc/reload.h"

#define SWAP_TWO(a, b) do { char *_t = (a); (a) = (b); (b) = _t; } while (0)

static void note_restart(const char *key, const char *a, const char *b) {
        if (!streq_ptr(a, b))
                log_notice("%s changed; kgpu-grpcd uses the new value after a restart.", key);
}

int grpcd_reload(Manager *m, const DaemonArgs *args) {
        _cleanup_(config_freep) Config *c = NULL;
        Config *cur = m->config;
        int r;

        (void) sd_notify(false, "RELOADING=1");
        r = daemon_load_config(args, &c);  /* logs file:line:key */
        if (r < 0) {
                log_error("Refusing to reload the configuration, the running one stays in force.");
                (void) sd_notify(false, "READY=1");
                return r;
        }

        note_restart("grpc.user", c->grpc_user, cur->grpc_user);
        note_restart("runtimeDirectory", c->runtime_directory, cur->runtime_directory);
        if (c->grpc_max_connections != cur->grpc_max_connections ||
            c->grpc_max_streams != cur->grpc_max_streams ||
            c->grpc_max_message_size != cur->grpc_max_message_size)
                log_notice("grpc.* limits changed; kgpu-grpcd uses the new values after a restart.");

        SWAP_TWO(cur->log_level, c->log_level);
        /* What the gate accepts as annotation keys follows the broker's (gate.h). */
        SWAP_TWO(cur->nvidia_cdi_annotation_prefix, c->nvidia_cdi_annotation_prefix);
        cur->reconcile_interval_sec = c->reconcile_interval_sec;
        cur->register_timeout_ms = c->register_timeout_ms;
        cur->broker_timeout_ms = c->broker_timeout_ms;

        if (m->pod_resources) {
                r = pod_resources_client_start(m->pod_resources);
                if (r < 0)
                        log_warning_errno(r, "Failed to restart the reconciliation timer, ignoring: %m");
                (void) pod_resources_sync(m->pod_resources, NULL, NULL);
        }
        if (m->broker_present) {
                r = broker_client_relist(m);
                if (r < 0)
                        log_warning_errno(r, "Failed to list the broker's resources again, ignoring: %m");
        }
        log_info("Reloaded the configuration from %s.", cur->file ?: "defaults");
        (void) sd_notify(false, "READY=1");
        return 0;
}
