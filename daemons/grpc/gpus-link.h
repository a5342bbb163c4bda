/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gpus-link.h — kgpu-grpcd follows the root probe's GPU objects (io.kgpu.Gpu1 under the
 * ObjectManager at /io/kgpu/Probe1) into Manager.gpus, the reference of the gate
 * (gate.h) every Allocate answer of the broker passes.
 *
 * Contract: gpus_link_start() installs the matches (NameOwnerChanged of io.kgpu.Probe1,
 * InterfacesAdded/InterfacesRemoved at /io/kgpu/Probe1, PropertiesChanged of
 * io.kgpu.Gpu1 below it) and asks who owns io.kgpu.Probe1. Each new owner is believed
 * only if its uid is root's or grpcd's own (the bus policy lets root alone own the name;
 * grpcd checks again, as every daemon does), then its GetManagedObjects reply replaces
 * the whole inventory; from then on only signals whose sender is that owner change it,
 * so a process that owns io.kgpu.Broker1, or any other, cannot widen it. A GPU object
 * with invalid properties is dropped (it grants nothing) and read again with GetAll
 * at its next change. While the probe is away the last inventory stays in force; before
 * the first one was read the gate refuses every answer. All calls are asynchronous and
 * never auto-start the probe. What is refused is logged at warning, the rest at debug
 * and info.
 */
#pragma once

typedef struct Manager Manager;

int gpus_link_start(Manager *m);
void gpus_link_stop(Manager *m);
