/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reload.h — kgpu-probed re-reads kgpu.yaml on SIGHUP (systemctl reload); the daemon
 * skeleton (common/daemon.c) catches the signal and calls probe_reload() through its hook.
 *
 * Contract: probe_reload() loads the configuration with the command line of the start.
 * An invalid file (file:line:key, or a bad byte count) is logged and changes nothing.
 * Otherwise manager_configure() takes over the probe's settings (memory override and
 * reservation, PCI grouping level, labels file, CDI directory), the GPUs are rescanned
 * with them (changed properties are signalled as usual) and the outputs rewritten.
 * broker.user is read only at start.
 */
#pragma once

typedef struct Manager Manager;
typedef struct DaemonArgs DaemonArgs;

typedef struct ProbeReload {
        Manager *manager;
        const DaemonArgs *args;
} ProbeReload;

int probe_reload(ProbeReload *p);
