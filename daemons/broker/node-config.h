/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * node-config.h — the named NVIDIA config in force on this node (Broker1.SetNodeConfig,
 * the properties NodeConfig, NodeConfigRequested, NodeConfigError), see
 * common/config-overlay.h for what a named config is.
 *
 * Contract:
 * - SetNodeConfig(name) is for root and Config.cluster_user (and the broker's own uid),
 *   else io.kgpu.Error.AccessDenied. name is the node label's value, "" when unset; more
 *   than CONFIG_NAME_MAX bytes: io.kgpu.Error.InvalidArgs, nothing recorded. Otherwise the
 *   request is recorded (NodeConfigRequested) and resolved: "" -> nvidiaConfigs.default,
 *   or kgpu.yaml's own NVIDIA settings ("") when no default is set. The same name as the
 *   one in force changes nothing (as upstream's config manager skips an unchanged link).
 *   Else kgpu.yaml and the named file are loaded and applied like a reload
 *   (broker_apply_config(): resources rebuilt, ResourcesChanged, allocations kept, MPS
 *   synced with the probe). A name with characters no config can have: InvalidArgs;
 *   no such file (also a default that names none: no fallback, as upstream):
 *   io.kgpu.Error.UnknownConfig; a file or kgpu.yaml refused: io.kgpu.Error.InvalidConfig
 *   with FILE:LINE: KEY. On every refusal the config in force stays and NodeConfigError
 *   says why; on success it is "". PropertiesChanged for whichever of the three changed.
 * - The name in force is kept in <stateDirectory>/nvidia-config (one line, written
 *   atomically, mode 0600) and put back in force at start (node_config_restore()): a
 *   file that cannot be read or holds anything but a valid name, or a named config that
 *   is gone or refused now, is logged at warning, kgpu.yaml's own settings are used,
 *   NodeConfigError says why and the file is rewritten empty (it follows NodeConfig). Until SetNodeConfig is called, NodeConfigRequested is "".
 * - A reload (SIGHUP, Broker1.Reload) re-reads kgpu.yaml and re-resolves the last
 *   request (a new default, a file that has appeared); when that cannot be loaded the
 *   name in force is re-read instead (NodeConfigError says why the request is not in
 *   force); when neither can, the reload is refused as any invalid configuration.
 */
#pragma once

#include <systemd/sd-bus.h>

#include "common/config.h"

#define KGPU_ERROR_UNKNOWN_CONFIG "io.kgpu.Error.UnknownConfig"
#define NODE_CONFIG_STATE_FILE "nvidia-config"

typedef struct Manager Manager;

typedef struct NodeConfig {
        char *in_force;         /* "" : kgpu.yaml's own NVIDIA settings */
        char *requested;        /* NULL: SetNodeConfig not called since start */
        char *error;            /* NULL: none */
        uid_t cluster_uid;      /* (uid_t) -1: Config.cluster_user does not exist */
        char *emitted[3];       /* the three as last announced (NULL: ""), for PropertiesChanged */
} NodeConfig;

void node_config_done(NodeConfig *n);
/* Resolves Config.cluster_user (start and reload). */
void node_config_set_user(Manager *m, const Config *c);

/* At start, before the GPUs are read: puts the persisted name back in force
 * (m->config and m->resources replaced). Logs; never fails but on -ENOMEM. */
int node_config_restore(Manager *m);

/* For broker_reload(): kgpu.yaml with the named config to use now; *ret_name (new) is
 * the name loaded, *ret_note (new or NULL) why the request is not the one loaded. */
int node_config_load_for_reload(Manager *m, Config **ret, char **ret_name, char **ret_note, char **ret_error);
/* After a successful apply: name is in force (persisted when it changed), note the error. */
void node_config_commit(Manager *m, const char *name, const char *note);

int node_config_set_method(sd_bus_message *msg, void *userdata, sd_bus_error *error);
int node_config_property_get(sd_bus *bus, const char *path, const char *interface, const char *property,
                             sd_bus_message *reply, void *userdata, sd_bus_error *error);
