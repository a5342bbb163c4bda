/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * probe-dbus.h — the io.kgpu.Probe1 and io.kgpu.Gpu1 vtables (contract: dbus/io.kgpu.Probe1.xml).
 *
 * /io/kgpu/Probe1 carries io.kgpu.Probe1, io.kgpu.Kubelet1 and the ObjectManager; each GPU is a child
 * object served by one fallback vtable that looks the Gpu up by its decoded path. The
 * emit helpers are no-ops (returning 0) while the manager has no bus.
 */
#pragma once

#include <systemd/sd-bus.h>

#include "common/bus-introspect.h"
#include "daemons/probe/kubelet.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/mps.h"

/* Registers the vtables, node enumerator and ObjectManager on m->bus. */
int probe_dbus_register(Manager *m);

/* The (path, interface, vtable) entries for bus_introspect_print(). */
const BusIntrospectEntry *probe_dbus_introspect_entries(size_t *ret_n);

/* Object path of a GPU (caller frees). */
int probe_dbus_gpu_path(const char *id, char **ret);

int probe_dbus_emit_gpu_added(Manager *m, const Gpu *g);
/* names: NULL-terminated list of Gpu1 property names; empty list: nothing sent. */
int probe_dbus_emit_gpu_changed(Manager *m, const Gpu *g, char **names);
/* InterfacesRemoved; call while manager_find_gpu() still finds g. */
int probe_dbus_emit_gpu_removed(Manager *m, const Gpu *g);

/* Allows uid 0 and the broker's uid; otherwise sets io.kgpu.Error.AccessDenied.
 * Returns 0 if allowed, negative errno (with error set) if not. */
int probe_dbus_check_sender(Manager *m, sd_bus_message *message, sd_bus_error *error);

/* KubeletDirChanged of the manager's KubeletDir (userdata: the Manager): emits
 * PropertiesChanged for io.kgpu.Kubelet1 (kubelet-dbus.c). */
void probe_dbus_kubelet_changed(KubeletDir *k, void *userdata);

/* MpsStateCallback of the manager's Mps (userdata: the Manager): sets MpsState and
 * MpsPipeDirectory of the GPU, Unhealthy "mps-failed" while MPS failed (Healthy again
 * when it is running or off), and emits PropertiesChanged. */
void probe_dbus_mps_state_changed(Mps *mps, const char *uuid, MpsState state, const char *pipe_directory,
                                  const char *message, void *userdata);
