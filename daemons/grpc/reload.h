/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reload.h — kgpu-grpcd re-reads kgpu.yaml on SIGHUP (systemctl reload).
 *
 * Contract: grpcd_reload() loads the configuration with the command line of the start
 * (the daemon skeleton keeps it, common/daemon.h), as start-up does. An invalid file is logged (file:line:key) and changes nothing.
 * Otherwise the settings that apply to a running grpcd are taken over: logLevel,
 * kubelet.podResourcesSocket, kubelet.reconcileIntervalSec (timer restarted),
 * kubelet.registerTimeoutMs, grpc.brokerTimeoutMs, flags.plugin.cdiAnnotationPrefix (the
 * annotation keys the gate lets through, gate.h); the others (directories, users,
 * socket limits) are logged as needing a restart. Then the broker's resources are
 * listed again, so that a resource whose options changed registers again with the
 * kubelet, and a reconciliation round is requested.
 */
#pragma once

typedef struct Manager Manager;
typedef struct DaemonArgs DaemonArgs;

/* SIGHUP (common/daemon.c calls it through DaemonHooks.reload). */
int grpcd_reload(Manager *m, const DaemonArgs *args);
