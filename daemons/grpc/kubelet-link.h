/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kubelet-link.h — kgpu-grpcd's only way to the kubelet: the root probe's
 * io.kgpu.Kubelet1 (dbus/io.kgpu.Probe1.xml).
 *
 * grpcd has no access to the kubelet's directories (0750 root:root, sockets made under
 * umask 0022). The probe makes grpcd's listening sockets there and connects to the
 * kubelet's registration and PodResources sockets, handing over descriptors, and
 * publishes what is in the directory as properties.
 *
 * Contract: kubelet_link_start() follows io.kgpu.Probe1 (NameOwnerChanged) and the
 * Kubelet1 properties (GetAll when the probe appears, PropertiesChanged after); every
 * time they were applied, manager_kubelet_update() runs with the previous
 * registration socket inode. Calls never auto-start the probe. Connect results reach
 * the handler exactly once unless its slot is released first: a connected fd (the
 * handler owns it) or a negative errno with the probe's message (-EHOSTDOWN: no probe,
 * -EPERM: the probe refused what it found, -ECONNREFUSED: nobody listens or absent,
 * -EACCES: not allowed, -ETIMEDOUT). Failures worth an operator's eye are logged by
 * kubelet_link_log_failure(): at warning when the text changed or a minute passed,
 * else at debug, with grpcd's user.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <systemd/sd-bus.h>

typedef struct Manager Manager;
typedef struct Plugin Plugin;

typedef enum KubeletLinkSocket {
        KUBELET_LINK_REGISTRATION,
        KUBELET_LINK_POD_RESOURCES,
} KubeletLinkSocket;

typedef void (*KubeletLinkConnected)(int fd, const char *message, void *userdata);

int kubelet_link_start(Manager *m);
void kubelet_link_stop(Manager *m);

/* Asks the probe for a socket connected to the kubelet. *ret_slot cancels it. */
int kubelet_link_connect(Manager *m, KubeletLinkSocket which, KubeletLinkConnected cb, void *userdata,
                         sd_bus_slot **ret_slot);
/* Asks the probe for p's listening socket; the answer goes to plugin_socket_ready() or
 * plugin_socket_failed(). */
int kubelet_link_open_socket(Plugin *p);
/* Asks the probe to remove p's socket if it is still the one it made for p (best effort). */
void kubelet_link_close_socket(Plugin *p);
/* True if the probe lists the socket name with that inode in the device-plugins
 * directory (true while the probe is away: nothing is known then). */
bool kubelet_link_socket_listed(Manager *m, const char *name, uint64_t inode);

/* Logs why reaching the kubelet failed (what: "registration of gpu.intel.com/i915", ...). */
void kubelet_link_log_failure(Manager *m, const char *what, const char *message);
