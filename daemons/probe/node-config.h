/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * node-config.h — the probe follows the named NVIDIA config the broker has in force
 * (io.kgpu.Broker1's NodeConfig, see common/config-overlay.h), so that its MPS policy
 * (which GPUs SetMps may put under MPS) and its NVIDIA node labels (replicas,
 * sharing-strategy) are those of the config the broker advertises.
 *
 * Contract: probe_node_config_start() (once the bus is up) follows the broker: on every
 * new owner of io.kgpu.Broker1 it reads NodeConfig, and on PropertiesChanged of it takes
 * the new value. A value that is not a valid config name is logged and ignored. A new
 * name is applied as a reload (probe_reload() loads kgpu.yaml with that named file,
 * config_load_selected()); if that is refused the probe keeps its settings and name.
 * The broker gone changes nothing. The value is the broker's, but the probe only ever
 * reads files of the operator's nvidiaConfigs.directory, each validated as a config.
 */
#pragma once

typedef struct Manager Manager;
typedef struct DaemonArgs DaemonArgs;
typedef struct ProbeNodeConfig ProbeNodeConfig;

int probe_node_config_start(Manager *m, const DaemonArgs *args);
ProbeNodeConfig *probe_node_config_free(ProbeNodeConfig *p);
/* The name in force in the probe ("" : kgpu.yaml's own), never NULL. */
const char *probe_node_config_name(const Manager *m);
