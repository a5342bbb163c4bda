/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * broker-dbus.h — the io.kgpu.Broker1 object (vtable and signal), see dbus/io.kgpu.Broker1.xml.
 *
 * Contract: methods answer io.kgpu.Error.* errors (bus-names.h) with a message naming the
 * culprit: UnknownResource, UnknownDevice, Unhealthy, InvalidArgs (bounds: resources.h),
 * AccessDenied (Allocate, PreStartContainer from a uid other than 0, Config.grpc_user's
 * or the broker's own), StateUnavailable (Allocate, ListAllocations without a usable
 * store, or a failed commit), Exhausted (Allocate over a sharing limit, sharing.h),
 * TooManyAllocations (Allocate that would leave more than broker.maxAllocations
 * recorded, after what it supersedes). Allocate replies only after the store committed
 * the call's allocations and deleted those it supersedes (store.h).
 */
#pragma once

#include <sys/types.h>

#include <systemd/sd-bus.h>

typedef struct Manager Manager;

extern const sd_bus_vtable broker_vtable[];

int broker_dbus_register(Manager *m);
/* 0 if the sender may mutate (root, Config.grpc_user, the broker's own uid), else sets
 * io.kgpu.Error.AccessDenied in error and returns its negative errno; logs refusals. */
int broker_dbus_check_caller(Manager *m, sd_bus_message *msg, const char *method, sd_bus_error *error);
/* The caller's uid as the bus daemon tells it (remembered per unique name). */
int broker_dbus_caller_uid(Manager *m, sd_bus_message *msg, uid_t *ret);
/* Emits ResourcesChanged(names) if names is not empty. */
int broker_dbus_emit_resources_changed(Manager *m, char * const *names);
/* For --introspect. */
int broker_dbus_introspect(void);
