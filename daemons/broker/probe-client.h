/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * probe-client.h — follows io.kgpu.Probe1's GPU objects into the Manager's Resources.
 *
 * Contract: probe_client_start() installs the match rules (NameOwnerChanged for the
 * probe's name, ObjectManager signals and PropertiesChanged under /io/kgpu/Probe1) and
 * asks for GetManagedObjects; it asks again whenever the name gets a new owner. Only
 * signals and replies from the current owner are applied. A GetManagedObjects reply
 * replaces the inventory (objects it lacks are removed); when the probe leaves the bus
 * the last known inventory is kept as it is. Every change that alters a resource's
 * ListAndWatch view emits Broker1.ResourcesChanged at once. Malformed objects are
 * logged and ignored; nothing the probe sends can stop the broker.
 */
#pragma once

#include <systemd/sd-bus.h>

#include "daemons/broker/gpu-properties.h"
#include "daemons/broker/resources.h"

typedef struct Manager Manager;

int probe_client_start(Manager *m);
void probe_client_stop(Manager *m);
