/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reload.h — re-read kgpu.yaml without dropping allocations (SIGHUP, Broker1.Reload).
 *
 * Contract: broker_reload() loads the configuration exactly as at start (same --config
 * and command-line overrides: the daemon skeleton's DaemonArgs, Manager.args, and
 * the same loader, daemon_config_load()), builds the resources from it and the
 * GPUs the probe last reported, and only when all of that succeeded swaps them in, emits
 * ResourcesChanged for every resource whose device list changed (appeared, disappeared,
 * ids, health or NUMA) and logs what changed. The store and every allocation are kept;
 * a new broker.maxAllocations applies to the next Allocate (a lower one drops nothing).
 * An invalid configuration is refused: the running one stays in force, nothing changes,
 * -EINVAL is returned with the file:line:key message in *ret_error. stateDirectory and
 * the users are read only at start: a change is logged as needing a restart.
 */
#pragma once

#include <systemd/sd-bus.h>

typedef struct Manager Manager;

#include "common/config.h"

#define KGPU_ERROR_INVALID_CONFIG "io.kgpu.Error.InvalidConfig"

int broker_reload(Manager *m, char **ret_error);

/* The second half of a reload, also a SetNodeConfig's (node-config.h): takes config,
 * builds the resources from it and the GPUs last reported, and only when that worked
 * swaps them in, puts the named NVIDIA config name in force with note as NodeConfigError
 * (node_config_commit(): PropertiesChanged, before any SetMps to the probe), emits
 * ResourcesChanged, syncs MPS with the probe; allocations are kept.
 * -EINVAL and *ret_error when the resources cannot be built (nothing changed). */
int broker_apply_config(Manager *m, Config *config, const char *name, const char *note, char **ret_error);

/* Broker1.Reload(): only root, Config.grpc_user and the broker's uid;
 * io.kgpu.Error.InvalidConfig with the message on refusal. */
int reload_method(sd_bus_message *msg, void *userdata, sd_bus_error *error);
