/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kubelet-dbus.h — io.kgpu.Kubelet1 on /io/kgpu/Probe1, served from a KubeletDir.
 *
 * Contract: kubelet_dbus_add() registers the vtable with the KubeletDir as userdata
 * (the probe's manager does it with its own; tests serve a KubeletDir alone).
 * kubelet_dbus_emit() sends PropertiesChanged for every property (0 without a bus).
 */
#pragma once

#include <systemd/sd-bus.h>

typedef struct KubeletDir KubeletDir;

extern const sd_bus_vtable kubelet_dbus_vtable[];

int kubelet_dbus_add(sd_bus *bus, KubeletDir *k);
int kubelet_dbus_emit(sd_bus *bus);
