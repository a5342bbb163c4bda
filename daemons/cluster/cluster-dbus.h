/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cluster-dbus.h — io.kgpu.Cluster1 at /io/kgpu/Cluster1: kgpu-clusterd's read-only
 * status (contract: dbus/io.kgpu.Cluster1.xml).
 *
 * Contract: cluster_dbus_register() exports the object; manager_properties_changed()
 * (manager.h) compares what the properties show with what was last announced and emits
 * one PropertiesChanged with the values that differ. cluster_dbus_introspect() prints
 * the XML generated from the vtable (--introspect).
 */
#pragma once

#include "daemons/cluster/manager.h"

int cluster_dbus_register(Manager *m);
int cluster_dbus_introspect(void);
