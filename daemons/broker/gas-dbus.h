/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gas-dbus.h — the Intel resource manager mode (intel.resourceManager) on the bus:
 * Broker1.SetGasPods, and the GAS choice inside Allocate and GetPreferredAllocation.
 *
 * Contract (docs/INTEL.md, "Resource manager"):
 *  - SetGasPods is allowed to root, the broker's own user and cluster.user only
 *    (io.kgpu.Error.AccessDenied). Its argument is read with the bounds of gas.h while
 *    reading (a longer array is refused before more is copied) and validated by
 *    gas_set_new(); io.kgpu.Error.InvalidArgs otherwise, and the pods in force stay.
 *    Accepted pods replace the whole set; what was served of a pod still in the set is
 *    kept. Accepted in every mode (kgpu-clusterd need not know the broker's options).
 *  - gas_applies(): resource-manager mode is on and resource is gpu.intel.com/i915 or
 *    gpu.intel.com/xe (the two the Intel plugin's resource manager serves).
 *  - gas_allocate_choose(): one container request only; picks the pod and container
 *    (gas.h gas_pick(), containers already served counted from the in-memory set and from
 *    the holders PodResources reported for the broker's records), maps its cards to this
 *    node's GPUs (the GPU whose DRM card node is /dev/dri/cardN) and checks that the
 *    request's ids are one device on each of those GPUs. Refusals: io.kgpu.Error.NoGasPod
 *    with the reason. On success *ret holds the pod and the affinity mask (or NULL).
 *  - gas_allocate_done(): after the commit, marks the container served.
 *  - gas_preferred(): one id per chosen card (must_include first, then available in the
 *    kubelet's order); an empty list when no pod fits.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>

#include "daemons/broker/gas.h"

typedef struct Manager Manager;

int gas_method_set_pods(sd_bus_message *msg, void *userdata, sd_bus_error *error);

bool gas_applies(const Manager *m, const char *resource);

typedef struct GasChoice {
        const GasPod *pod;
        size_t container;
        const char *mask;               /* borrowed from the pod; NULL: no tiles */
} GasChoice;

int gas_allocate_choose(Manager *m, const char *resource, char ** const *lists, size_t n, GasChoice *ret,
                        sd_bus_error *error);
void gas_allocate_done(Manager *m, const GasChoice *c);
int gas_preferred(Manager *m, const char *resource, char * const *available, char * const *must,
                  int32_t size, char ***ret);
