/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * config.c — kgpu.yaml (libyaml), environment and flags through one option table.
 *
 * See config.h for the contract. Values from every source go through the same
 * config_option_set() (config-value.c) so a value is validated the same way whether it
 * came from the file, the environment or the command line; only the error prefix
 * differs. The NVIDIA v1 sections that are lists of mappings are read by
 * config-nvidia.c.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

#include "common/config.h"
#include "common/config-internal.h"
#include "common/log.h"
#include "common/util.h"

static const ConfigOption options[] = {
        { "logLevel", { "KGPU_LOG_LEVEL" }, "log-level", OPTION_LOG_LEVEL, OFF(log_level), "info", 0, 0,
          "log level: debug, info, notice, warning, err" },
        { "stateDirectory", { "KGPU_STATE_DIRECTORY", "STATE_DIRECTORY" }, "state-directory", OPTION_PATH,
          OFF(state_directory), KGPU_LOCALSTATEDIR "/lib/kgpu", 0, 0, "broker state directory" },
        { "runtimeDirectory", { "KGPU_RUNTIME_DIRECTORY", "RUNTIME_DIRECTORY" }, "runtime-directory", OPTION_PATH,
          OFF(runtime_directory), "/run/kgpu", 0, 0, "runtime directory" },
        { "kubelet.devicePluginPath", { "KGPU_DEVICE_PLUGIN_PATH" }, "device-plugin-path", OPTION_PATH,
          OFF(device_plugin_path), "/var/lib/kubelet/device-plugins", 0, 0,
          "kubelet device plugin socket directory" },
        { "kubelet.socket", { "KGPU_KUBELET_SOCKET" }, "kubelet-socket", OPTION_PATH,
          OFF(kubelet_socket), NULL, 0, 0, "kubelet registration socket (default: DIR/kubelet.sock)" },
        { "kubelet.podResourcesSocket", { "KGPU_POD_RESOURCES_SOCKET" }, "pod-resources-socket", OPTION_PATH,
          OFF(pod_resources_socket), "/var/lib/kubelet/pod-resources/kubelet.sock", 0, 0,
          "kubelet PodResources socket" },
        { "kubelet.reconcileIntervalSec", { "KGPU_RECONCILE_INTERVAL_SEC" }, "reconcile-interval-sec", OPTION_UINT32,
          OFF(reconcile_interval_sec), "30", 0, 86400, "seconds between PodResources reconciliations (0: only at start)" },
        { "broker.reconcileGraceSec", { "KGPU_RECONCILE_GRACE_SEC" }, "reconcile-grace-sec", OPTION_UINT32,
          OFF(reconcile_grace_sec), "60", 0, 86400,
          "allocations never reported by PodResources and younger than this survive a reconciliation" },
        { "broker.maxAllocations", { "KGPU_MAX_ALLOCATIONS" }, "max-allocations", OPTION_UINT32,
          OFF(max_allocations), "16384", 1, 65536,
          "allocations the broker keeps at most; Allocate beyond it is refused" },
        { "kubelet.registerTimeoutMs", { "KGPU_REGISTER_TIMEOUT_MS" }, "register-timeout-ms", OPTION_UINT32,
          OFF(register_timeout_ms), "5000", 10, 600000, "deadline of one Register call" },
        { "grpc.user", { "KGPU_GRPC_USER" }, "grpc-user", OPTION_STRING, OFF(grpc_user), "kgpu", 0, 0,
          "user kgpu-grpcd runs as" },
        { "grpc.maxConnections", { "KGPU_GRPC_MAX_CONNECTIONS" }, "grpc-max-connections", OPTION_UINT32,
          OFF(grpc_max_connections), "64", 1, 4096, "connections per plugin socket" },
        { "grpc.maxStreamsPerConnection", { NULL }, "grpc-max-streams", OPTION_UINT32,
          OFF(grpc_max_streams), "32", 1, 1024, "concurrent streams per connection" },
        { "grpc.maxMessageSize", { NULL }, "grpc-max-message-size", OPTION_UINT32,
          OFF(grpc_max_message_size), "4194304", 1024, 64U * 1024U * 1024U, "largest gRPC message accepted" },
        { "grpc.brokerTimeoutMs", { "KGPU_BROKER_TIMEOUT_MS" }, "broker-timeout-ms", OPTION_UINT32,
          OFF(broker_timeout_ms), "2000", 10, 600000, "deadline of a call to the broker" },
        { "broker.user", { "KGPU_BROKER_USER" }, "broker-user", OPTION_STRING, OFF(broker_user), "kgpu-broker", 0, 0,
          "user kgpu-brokerd runs as" },
        { "intel.enabled", { "KGPU_INTEL_ENABLED" }, "intel", OPTION_BOOL, OFF(intel_enabled), "true", 0, 0,
          "serve Intel GPUs" },
        { "intel.sharedDevNum", { "SHARED_DEV_NUM" }, "shared-dev-num", OPTION_UINT32,
          OFF(intel_shared_dev_num), "1", 1, 1024, "containers that may share one Intel GPU" },
        { "intel.allocationPolicy", { "ALLOCATION_POLICY" }, "allocation-policy", OPTION_ALLOCATION_POLICY,
          OFF(intel_allocation_policy), "none", 0, 0, "none, balanced or packed" },
        { "intel.allowIDs", { NULL }, "allow-ids", OPTION_PCI_IDS, OFF(intel_allow_ids), NULL, 0, 0,
          "PCI device ids to serve, like 0x56c0 (comma separated; empty: all; not with deny-ids)" },
        { "intel.denyIDs", { NULL }, "deny-ids", OPTION_PCI_IDS, OFF(intel_deny_ids), NULL, 0, 0,
          "PCI device ids never to serve, like 0x56c0 (comma separated; not with allow-ids)" },
        { "intel.enableMonitoring", { NULL }, "enable-monitoring", OPTION_BOOL,
          OFF(intel_enable_monitoring), "false", 0, 0,
          "advertise the monitoring resource(s) granting every Intel GPU (see monitoring-mode)" },
        { "intel.monitoringMode", { NULL }, "monitoring-mode", OPTION_ENUM, OFF(intel_monitoring_mode), "single", 0, 0,
          "monitoring resources: single (gpu.intel.com/monitoring) or split (i915_monitoring, xe_monitoring)",
          config_intel_monitoring_mode_names },
        { "intel.resourceManager", { NULL }, "resource-manager", OPTION_BOOL, OFF(intel_resource_manager),
          "false", 0, 0, "Intel resource manager: Allocate of i915/xe hands out the cards (and tiles) GPU Aware Scheduling chose, from the pod annotations kgpu-clusterd sends" },
        { "intel.healthManagement", { NULL }, "health-management", OPTION_BOOL, OFF(intel_health_management),
          "false", 0, 0, "Intel Level-Zero health (accepted for compatibility; health comes from udev)" },
        { "intel.byPath", { NULL }, "bypath", OPTION_BY_PATH, OFF(intel_by_path), "single", 0, 0,
          "/dev/dri/by-path mounts: single, all or none" },
        { "intel.cdiDevices", { NULL }, "cdi-devices", OPTION_BOOL, OFF(intel_cdi_devices), "false", 0, 0,
          "name the GPUs' CDI devices in Allocate answers" },
        { "intel.memoryOverride", { "GPU_MEMORY_OVERRIDE" }, "memory-override", OPTION_STRING,
          OFF(intel_memory_override), NULL, 0, 0, "bytes of memory for a GPU whose amount cannot be read" },
        { "intel.memoryReserved", { "GPU_MEMORY_RESERVED" }, "memory-reserved", OPTION_STRING,
          OFF(intel_memory_reserved), NULL, 0, 0, "bytes of each GPU's memory left out of memory.max" },
        { "intel.pciGroupingLevel", { "GPU_PCI_GROUPING_LEVEL" }, "pci-grouping-level", OPTION_UINT32,
          OFF(intel_pci_grouping_level), "0", 0, 64, "PCI path depth for the pci-groups label (0: none)" },
        /* NVIDIA: the NVIDIA device plugin's `version: v1` file, its variables and flags. */
        { "version", { NULL }, NULL, OPTION_VERSION, OFF(nvidia_config_version), NULL, 0, 0,
          "format of the NVIDIA device plugin's config file (v1)" },
        { "nvidia.enabled", { "KGPU_NVIDIA_ENABLED" }, "nvidia", OPTION_BOOL, OFF(nvidia_enabled), "true", 0, 0,
          "serve NVIDIA GPUs" },
        { "flags.migStrategy", { "MIG_STRATEGY" }, "mig-strategy", OPTION_ENUM, OFF(nvidia_mig_strategy), "none", 0, 0,
          "MIG strategy: none, single or mixed", config_mig_strategy_names },
        { "flags.failOnInitError", { "FAIL_ON_INIT_ERROR" }, "fail-on-init-error", OPTION_BOOL,
          OFF(nvidia_fail_on_init_error), "true", 0, 0, "fail when NVIDIA GPUs cannot be read at start" },
        { "flags.nvidiaDriverRoot", { "NVIDIA_DRIVER_ROOT" }, "nvidia-driver-root", OPTION_PATH,
          OFF(nvidia_driver_root), "/", 0, 0, "root of the NVIDIA driver installation (nvidia-smi is looked up there)" },
        { "flags.nvidiaDevRoot", { "NVIDIA_DEV_ROOT" }, "nvidia-dev-root", OPTION_PATH,
          OFF(nvidia_dev_root), NULL, 0, 0, "root of the NVIDIA device nodes (default: the driver root)" },
        { "flags.plugin.passDeviceSpecs", { "PASS_DEVICE_SPECS" }, "pass-device-specs", OPTION_BOOL,
          OFF(nvidia_pass_device_specs), "false", 0, 0, "pass the NVIDIA device nodes in Allocate answers" },
        { "flags.plugin.deviceListStrategy", { "DEVICE_LIST_STRATEGY" }, "device-list-strategy",
          OPTION_DEVICE_LIST_STRATEGY, OFF(nvidia_device_list_strategy), "envvar", 0, 0,
          "how devices reach a container: envvar, volume-mounts, cdi-annotations, cdi-cri (comma separated)" },
        { "flags.plugin.deviceIDStrategy", { "DEVICE_ID_STRATEGY" }, "device-id-strategy", OPTION_ENUM,
          OFF(nvidia_device_id_strategy), "uuid", 0, 0, "NVIDIA device IDs: uuid or index", config_device_id_strategy_names },
        { "flags.plugin.cdiAnnotationPrefix", { "CDI_ANNOTATION_PREFIX" }, "cdi-annotation-prefix",
          OPTION_ANNOTATION_PREFIX, OFF(nvidia_cdi_annotation_prefix), "cdi.k8s.io/", 0, 0,
          "prefix of the CDI annotation keys (cdi-annotations strategy)" },
        { "nvidia.smiPath", { "KGPU_NVIDIA_SMI" }, "nvidia-smi-path", OPTION_PATH, OFF(nvidia_smi_path), NULL, 0, 0,
          "nvidia-smi to run (default: found under the driver root)" },
        { "nvidia.mpsControlPath", { "KGPU_NVIDIA_MPS_CONTROL" }, "nvidia-mps-control-path", OPTION_PATH,
          OFF(nvidia_mps_control_path), NULL, 0, 0, "nvidia-cuda-mps-control to run (default: found under the driver root)" },
        { "nvidia.mpsLauncher", { "KGPU_NVIDIA_MPS_LAUNCHER" }, "nvidia-mps-launcher", OPTION_ENUM,
          OFF(nvidia_mps_launcher), "auto", 0, 0,
          "how MPS control daemons run: auto, systemd (kgpu-mps@.service units) or direct (children of the probe)",
          config_mps_launcher_names },
        { "nvidia.healthIntervalMs", { "KGPU_NVIDIA_HEALTH_INTERVAL_MS" }, "nvidia-health-interval-ms", OPTION_UINT32,
          OFF(nvidia_health_interval_ms), "10000", 0, 86400000, "milliseconds between nvidia-smi health polls (0: none)" },
        { "nvidia.healthRecoverPolls", { "KGPU_NVIDIA_HEALTH_RECOVER_POLLS" }, "nvidia-health-recover-polls",
          OPTION_UINT32, OFF(nvidia_health_recover_polls), "3", 1, 1000,
          "consecutive good polls before an unhealthy NVIDIA GPU is healthy again" },
        /* Upstream's name for the same policy (before: kgpu's own variable wins over upstream's). */
        { "flags.plugin.sharedDevicesAllocationPolicy", { "SHARED_DEVICES_ALLOCATION_POLICY" },
          "shared-devices-allocation-policy", OPTION_ENUM, OFF(nvidia_replica_policy), NULL, 0, 0,
          "same as nvidia.replicaPolicy", config_replica_policy_names, true },
        { "nvidia.replicaPolicy", { "KGPU_NVIDIA_REPLICA_POLICY" }, "replica-policy", OPTION_ENUM,
          OFF(nvidia_replica_policy), "distributed", 0, 0, "preferred replicas: distributed or packed",
          config_replica_policy_names },
        { "sharing.timeSlicing.renameByDefault", { NULL }, NULL, OPTION_BOOL,
          OFF(nvidia_time_slicing.rename_by_default), "false", 0, 0, "time-sliced resources are <name>.shared" },
        { "sharing.timeSlicing.failRequestsGreaterThanOne", { NULL }, NULL, OPTION_BOOL,
          OFF(nvidia_time_slicing.fail_requests_greater_than_one), "false", 0, 0,
          "refuse requests for more than one time-sliced replica" },
        { "sharing.mps.renameByDefault", { NULL }, NULL, OPTION_BOOL,
          OFF(nvidia_mps.rename_by_default), "false", 0, 0, "MPS resources are <name>.shared" },
        /* The NVIDIA plugin refuses MPS requests for more than one replica unless told otherwise. */
        { "sharing.mps.failRequestsGreaterThanOne", { NULL }, NULL, OPTION_BOOL,
          OFF(nvidia_mps.fail_requests_greater_than_one), "true", 0, 0,
          "refuse requests for more than one MPS replica" },
        { "sharing.timeSlicing.resources", { NULL }, NULL, OPTION_SHARED_RESOURCES, OFF(nvidia_time_slicing), NULL,
          0, 0, "resources to time-slice: name, rename, replicas, devices" },
        { "sharing.mps.resources", { NULL }, NULL, OPTION_SHARED_RESOURCES, OFF(nvidia_mps), NULL, 0, 0,
          "resources to share with MPS: name, rename, replicas, devices, memoryGB" },
        { "resources.gpus", { NULL }, NULL, OPTION_RESOURCE_PATTERNS, 0, NULL, 0, 0,
          "custom resource names are not supported: whole GPUs are nvidia.com/gpu" },
        { "resources.mig", { NULL }, NULL, OPTION_RESOURCE_PATTERNS, 0, NULL, 0, 0,
          "custom resource names are not supported: MIG devices are nvidia.com/mig-<profile>" },
        { "flags.plugin.kubeletSocket", { NULL }, NULL, OPTION_PATH, OFF(kubelet_socket), NULL, 0, 0,
          "same as kubelet.socket", NULL, true },
        /* Keys of the NVIDIA file kgpu accepts without using them. */
        { "flags.mpsRoot", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "MPS pipes and logs are under runtimeDirectory/mps" },
        { "flags.restartOnDeviceUnhealthy", { NULL }, NULL, OPTION_NO_EFFECT_BOOL, 0, NULL, 0, 0,
          "unhealthy devices are reported, nothing is restarted" },
        { "flags.useNodeFeatureAPI", { NULL }, NULL, OPTION_NO_EFFECT_BOOL, 0, NULL, 0, 0,
          "node labels go to labels.featureFile, not to NodeFeature objects" },
        { "flags.deviceDiscoveryStrategy", { NULL }, NULL, OPTION_DISCOVERY_STRATEGY, 0, NULL, 0, 0,
          "GPUs are found with nvidia-smi" },
        { "flags.gdsEnabled", { NULL }, NULL, OPTION_NO_EFFECT_BOOL, 0, NULL, 0, 0,
          "GPUDirect Storage devices are not passed to containers" },
        { "flags.mofedEnabled", { NULL }, NULL, OPTION_NO_EFFECT_BOOL, 0, NULL, 0, 0,
          "MOFED devices are not passed to containers" },
        { "flags.gdrcopyEnabled", { NULL }, NULL, OPTION_NO_EFFECT_BOOL, 0, NULL, 0, 0,
          "GDRCopy devices are not passed to containers" },
        { "flags.plugin.nvidiaCTKPath", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "the probe writes the CDI spec itself" },
        { "flags.plugin.containerDriverRoot", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "the probe writes the CDI spec itself" },
        { "flags.plugin.cdiFeatureFlags", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "the probe writes the CDI spec itself" },
        { "flags.gfd.oneshot", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0, "labels come from the probe" },
        { "flags.gfd.noTimestamp", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0, "labels come from the probe" },
        { "flags.gfd.sleepInterval", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0, "labels come from the probe" },
        { "flags.gfd.outputFile", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "labels come from the probe (labels.featureFile)" },
        { "flags.gfd.machineTypeFile", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0, "labels come from the probe" },
        { "health.disabled", { NULL }, NULL, OPTION_NO_EFFECT_BOOL, 0, NULL, 0, 0,
          "health comes from nvidia-smi polls, nvidia.healthIntervalMs: 0 turns them off" },
        { "health.eventTypes", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "health comes from nvidia-smi polls (nvidia.healthIntervalMs)" },
        { "health.ignoredXIDs", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "health comes from nvidia-smi polls (nvidia.healthIntervalMs)" },
        { "health.criticalXIDs", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "health comes from nvidia-smi polls (nvidia.healthIntervalMs)" },
        { "imex.channelIDs", { NULL }, NULL, OPTION_IMEX_CHANNEL_IDS, 0, NULL, 0, 0,
          "IMEX channels are not passed to containers" },
        { "imex.required", { NULL }, NULL, OPTION_NO_EFFECT_BOOL, 0, NULL, 0, 0,
          "IMEX channels are not passed to containers" },
        /* The cluster side (kgpu-clusterd) and the named NVIDIA configs a node label selects. */
        { "cluster.user", { "KGPU_CLUSTER_USER" }, "cluster-user", OPTION_STRING, OFF(cluster_user), "kgpu-cluster", 0, 0,
          "user kgpu-clusterd runs as; the only one besides root the broker takes cluster facts from" },
        { "cluster.kubeconfig", { "KUBECONFIG" }, "kubeconfig", OPTION_PATH, OFF(cluster_kubeconfig), NULL, 0, 0,
          "kubeconfig kgpu-clusterd reads (default: the in-cluster service account files)" },
        { "cluster.nodeName", { "NODE_NAME" }, "node-name", OPTION_STRING, OFF(cluster_node_name), NULL, 0, 0,
          "this node's name in the cluster (default: the host name)" },
        { "cluster.configLabel", { "NODE_LABEL" }, "config-label", OPTION_STRING, OFF(cluster_config_label),
          "nvidia.com/device-plugin.config", 0, 0, "node label that names the NVIDIA config to use" },
        { "cluster.requestTimeoutSec", { "KGPU_CLUSTER_REQUEST_TIMEOUT_SEC" }, "cluster-request-timeout-sec",
          OPTION_UINT32, OFF(cluster_request_timeout_sec), "30", 1, 600,
          "seconds a connection or a list request to the API server may take" },
        { "cluster.minWatchTimeoutSec", { "KGPU_CLUSTER_MIN_WATCH_TIMEOUT_SEC" }, "cluster-min-watch-timeout-sec",
          OPTION_UINT32, OFF(cluster_min_watch_timeout_sec), "300", 1, 3600,
          "a watch asks the API server to end it after this to twice this many seconds (random)" },
        { "nvidiaConfigs.directory", { "CONFIG_FILE_SRCDIR" }, "config-file-srcdir", OPTION_PATH,
          OFF(nvidia_configs_directory), KGPU_SYSCONFDIR "/kgpu/nvidia-configs.d", 0, 0,
          "directory of named NVIDIA configs (NAME.yaml) a node label selects" },
        { "nvidiaConfigs.default", { "DEFAULT_CONFIG" }, "default-config", OPTION_STRING, OFF(nvidia_configs_default),
          NULL, 0, 0, "named NVIDIA config used when the node label is unset (default: kgpu.yaml's own)" },
        { "labels.featureFile", { "KGPU_LABELS_FEATURE_FILE" }, "labels-feature-file", OPTION_PATH,
          OFF(labels_feature_file), "/etc/kubernetes/node-feature-discovery/features.d/kgpu", 0, 0,
          "NFD local feature file the probe writes the node labels to (empty: none)" },
        { "cdi.specDirectory", { "KGPU_CDI_SPEC_DIRECTORY" }, "cdi-spec-directory", OPTION_PATH,
          OFF(cdi_spec_directory), "/var/run/cdi", 0, 0,
          "directory of the probe's CDI spec for Intel GPUs (empty: none)" },
};

Config *config_free(Config *c) {
        if (!c)
                return NULL;
        free(c->file);
        for (size_t i = 0; i < ELEMENTSOF(options); i++) {
                void *p = (uint8_t *) c + options[i].offset;

                if (options[i].alias)
                        continue;
                switch (options[i].type) {
                case OPTION_STRING:
                case OPTION_PATH:
                case OPTION_LOG_LEVEL:
                case OPTION_VERSION:
                case OPTION_ANNOTATION_PREFIX:
                        free(*(char **) p);
                        break;
                case OPTION_STRV:
                case OPTION_PCI_IDS:
                        strv_free(*(char ***) p);
                        break;
                case OPTION_SHARED_RESOURCES: {
                        ConfigSharing *sh = p;

                        config_shared_resources_free(sh->resources, sh->n_resources);
                        break;
                }
                default:
                        break;
                }
        }
        free(c);
        return NULL;
}

static const ConfigOption *option_by_key(const char *key) {
        for (size_t i = 0; i < ELEMENTSOF(options); i++)
                if (streq(options[i].key, key))
                        return &options[i];
        return NULL;
}

static const ConfigOption *option_by_flag(const char *flag) {
        for (size_t i = 0; i < ELEMENTSOF(options); i++)
                if (options[i].flag && streq(options[i].flag, flag))
                        return &options[i];
        return NULL;
}

bool config_flag_known(const char *flag) {
        return option_by_flag(flag);
}

static int set_defaults(Config *c) {
        for (size_t i = 0; i < ELEMENTSOF(options); i++) {
                const char *why = NULL;
                int r;

                if (!options[i].def || options[i].alias)
                        continue;
                r = config_option_set(c, &options[i], options[i].def, &why);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int parse_error_va(ParseContext *ctx, size_t line, const char *key, const char *fmt, va_list ap) _printf_(4, 0);
static int parse_error_va(ParseContext *ctx, size_t line, const char *key, const char *fmt, va_list ap) {
        _cleanup_free_ char *what = NULL;

        if (vasprintf(&what, fmt, ap) < 0)
                return -ENOMEM;
        free(ctx->error);
        if (asprintf(&ctx->error, "%s:%zu: %s%s%s", ctx->name, line, key ?: "", key ? ": " : "", what) < 0) {
                ctx->error = NULL;
                return -ENOMEM;
        }
        return -EINVAL;
}

int config_parse_error(ParseContext *ctx, const yaml_node_t *node, const char *key, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = parse_error_va(ctx, node ? node->start_mark.line + 1 : 0, key, fmt, ap);
        va_end(ap);
        return r;
}

int config_parse_error_line(ParseContext *ctx, size_t line, const char *key, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = parse_error_va(ctx, line, key, fmt, ap);
        va_end(ap);
        return r;
}

/* Whether key is a mapping of keys in the table ("sharing", "flags.plugin"). */
static bool key_is_section(const char *key) {
        size_t n = strlen(key);

        for (size_t i = 0; i < ELEMENTSOF(options); i++)
                if (strncmp(options[i].key, key, n) == 0 && options[i].key[n] == '.')
                        return true;
        return false;
}

static void log_ignored(ParseContext *ctx, const ConfigOption *o, const char *key, yaml_node_t *node) {
        log_notice("%s:%zu: %s: accepted and ignored: %s.", ctx->name, node->start_mark.line + 1, key, o->help);
}

static void log_no_effect(ParseContext *ctx, const char *key, yaml_node_t *node, const char *why) {
        log_warning("%s:%zu: %s: accepted, no effect in kgpu: %s.", ctx->name, node->start_mark.line + 1, key, why);
}

/* The sections of the NVIDIA device plugin's v1 file (and health, which kgpu reads too). */
static const char * const nvidia_sections[] = { "version", "flags", "resources", "sharing", "imex", "health", NULL };

bool config_key_is_nvidia(const ParseContext *ctx, const char *key) {
        size_t n = strcspn(key, ".");

        for (size_t i = 0; nvidia_sections[i]; i++)
                if (strlen(nvidia_sections[i]) == n && strncmp(nvidia_sections[i], key, n) == 0)
                        return true;
        /* A top-level key of an NVIDIA file: one a newer plugin added. */
        return key[n] == 0 && ctx->nvidia_file;
}

bool config_node_is_null(const yaml_node_t *node) {
        const char *v;

        if (!node || node->type != YAML_SCALAR_NODE)
                return false;
        if (node->tag && streq((const char *) node->tag, YAML_NULL_TAG))
                return true;
        if (node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
                return false;
        v = (const char *) node->data.scalar.value;
        return node->data.scalar.length == 0 || streq(v, "~") || streq(v, "null") || streq(v, "Null") ||
               streq(v, "NULL");
}

bool config_top_key_is_nvidia_setting(const ParseContext *ctx, const char *key) {
        size_t n = strcspn(key, ".");

        for (size_t i = 0; nvidia_sections[i]; i++)
                if (strlen(nvidia_sections[i]) == n && strncmp(nvidia_sections[i], key, n) == 0)
                        return true;
        /* A key of a newer plugin in an NVIDIA file (warned about and ignored), not one of kgpu's. */
        return ctx->nvidia_file && !option_by_key(key) && !key_is_section(key);
}

static void log_unknown_nvidia_key(ParseContext *ctx, const char *key, const yaml_node_t *node) {
        log_warning("%s:%zu: %s: unknown key, ignored (as the NVIDIA device plugin ignores keys it does not know).",
                    ctx->name, node->start_mark.line + 1, key);
}

/* imex.channelIDs: a list of integers, [] or [0] as upstream checks at start. */
static int parse_imex_channel_ids(ParseContext *ctx, const char *key, yaml_node_t *node) {
        size_t n = 0;

        for (yaml_node_item_t *i = node->data.sequence.items.start; i < node->data.sequence.items.top; i++, n++) {
                yaml_node_t *item = yaml_document_get_node(ctx->doc, *i);
                int32_t id;

                if (!item || item->type != YAML_SCALAR_NODE ||
                    safe_atoi32((char *) item->data.scalar.value, &id) < 0)
                        return config_parse_error(ctx, item ?: node, key, "expected a list of integers, [] or [0]");
                if (id != 0 || n > 0)
                        return config_parse_error(ctx, node, key, "channelIDs must be [] or [0] (as the NVIDIA device plugin requires)");
        }
        if (n > 0)
                log_no_effect(ctx, key, node, "IMEX channels are not passed to containers");
        return 0;
}

/* A YAML list for o: the list types, the strategies and the accepted-and-ignored keys. */
static int parse_list(ParseContext *ctx, const ConfigOption *o, const char *key, yaml_node_t *node) {
        _cleanup_strv_free_ char **l = NULL;
        uint32_t set = 0;

        if (o->type == OPTION_IMEX_CHANNEL_IDS)
                return parse_imex_channel_ids(ctx, key, node);
        if (o->type != OPTION_STRV && o->type != OPTION_DEVICE_LIST_STRATEGY &&
            o->type != OPTION_IGNORED && o->type != OPTION_PCI_IDS)
                return config_parse_error(ctx, node, key, "expected a single value, got a list");
        for (yaml_node_item_t *i = node->data.sequence.items.start; i < node->data.sequence.items.top; i++) {
                yaml_node_t *n = yaml_document_get_node(ctx->doc, *i);

                if (!n || n->type != YAML_SCALAR_NODE)
                        return config_parse_error(ctx, n ?: node, key, "list items must be plain values");
                if (n->data.scalar.length > CONFIG_SCALAR_MAX || strlen((char *) n->data.scalar.value) != n->data.scalar.length)
                        return config_parse_error(ctx, n, key, "invalid list item");
                if (o->type == OPTION_DEVICE_LIST_STRATEGY) {
                        uint32_t bit;

                        if (config_device_list_strategy_from_string((char *) n->data.scalar.value, &bit) < 0)
                                return config_parse_error(ctx, n, key, "expected envvar, volume-mounts, cdi-annotations or cdi-cri, got '%s'",
                                                   (char *) n->data.scalar.value);
                        set |= bit;
                        continue;
                }
                if (o->type == OPTION_IGNORED && o->names && !config_names_contain(o->names, (char *) n->data.scalar.value))
                        return config_parse_error(ctx, n, key, "not supported by kgpu, got '%s'", (char *) n->data.scalar.value);
                if (o->type == OPTION_PCI_IDS) {
                        const char *why = NULL;
                        char *id = NULL;
                        int r = config_pci_id_item((char *) n->data.scalar.value, n->data.scalar.length, &id, &why);

                        if (r == -ENOMEM)
                                return r;
                        if (r < 0)
                                return config_parse_error(ctx, n, key, "%s, got '%s'", why, (char *) n->data.scalar.value);
                        if (strv_consume(&l, id) < 0)
                                return -ENOMEM;
                        continue;
                }
                if (strv_extend(&l, (char *) n->data.scalar.value) < 0)
                        return -ENOMEM;
        }
        switch (o->type) {
        case OPTION_DEVICE_LIST_STRATEGY:
                if (set == 0)
                        return config_parse_error(ctx, node, key, "expected at least one of envvar, volume-mounts, cdi-annotations, cdi-cri");
                *(uint32_t *) ((uint8_t *) ctx->config + o->offset) = set;
                return 0;
        case OPTION_IGNORED:
                log_ignored(ctx, o, key, node);
                return 0;
        default:
                break;
        }
        strv_free(*(char ***) ((uint8_t *) ctx->config + o->offset));
        *(char ***) ((uint8_t *) ctx->config + o->offset) = TAKE_PTR(l);
        return 0;
}

static int parse_value(ParseContext *ctx, const char *key, yaml_node_t *node) {
        const ConfigOption *o = option_by_key(key);
        const char *why = NULL;
        int r;

        if (!o) {
                if (key_is_section(key)) {
                        /* "sharing:" or "mps: null" is unset, as upstream; except timeSlicing,
                         * which upstream reads with its own reader, and that needs resources. */
                        if (config_node_is_null(node) && streq(key, "sharing.timeSlicing"))
                                return config_parse_error(ctx, node, key, "no resources specified");
                        if (config_node_is_null(node))
                                return 0;
                        return config_parse_error(ctx, node, key, "expected a mapping");
                }
                if (config_key_is_nvidia(ctx, key)) {
                        log_unknown_nvidia_key(ctx, key, node);
                        return 0;
                }
                return config_parse_error(ctx, node, NULL, "unknown key '%s'", key);
        }
        /* An NVIDIA key set to null is unset (what upstream's marshalling writes for unset
         * flags); the lists of resources read their null themselves. */
        if (config_node_is_null(node) && config_key_is_nvidia(ctx, key) &&
            o->type != OPTION_SHARED_RESOURCES && o->type != OPTION_RESOURCE_PATTERNS)
                return 0;
        if (o->type == OPTION_SHARED_RESOURCES)
                return config_parse_shared_resources(ctx, o, key, node);
        if (o->type == OPTION_RESOURCE_PATTERNS)
                return config_parse_resource_patterns(ctx, o, key, node);

        if (node->type == YAML_SEQUENCE_NODE)
                return parse_list(ctx, o, key, node);
        if (node->type != YAML_SCALAR_NODE)
                return config_parse_error(ctx, node, key, "expected a value, got a mapping");
        if (strlen((char *) node->data.scalar.value) != node->data.scalar.length)
                return config_parse_error(ctx, node, key, "value contains a NUL byte");

        r = config_option_set(ctx->config, o, (char *) node->data.scalar.value, &why);
        if (r == -ENOMEM)
                return r;
        if (r == -EOPNOTSUPP)
                return config_parse_error(ctx, node, key, "%s (%s), got '%s'", why, o->help, (char *) node->data.scalar.value);
        if (r < 0)
                return config_parse_error(ctx, node, key, "%s, got '%s'", why, (char *) node->data.scalar.value);
        if (r == CONFIG_NO_EFFECT)
                log_no_effect(ctx, key, node, why);
        else if (o->type == OPTION_IGNORED || o->type == OPTION_DISCOVERY_STRATEGY)
                log_ignored(ctx, o, key, node);
        return 0;
}

static int parse_mapping(ParseContext *ctx, const char *prefix, yaml_node_t *node, unsigned depth) {
        if (depth > CONFIG_DEPTH_MAX)
                return config_parse_error(ctx, node, prefix, "nesting too deep");
        if (node->type != YAML_MAPPING_NODE)
                return config_parse_error(ctx, node, prefix, "expected a mapping");

        for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
                yaml_node_t *k = yaml_document_get_node(ctx->doc, p->key);
                yaml_node_t *v = yaml_document_get_node(ctx->doc, p->value);
                _cleanup_free_ char *key = NULL;
                int r;

                if (!k || !v)
                        return config_parse_error(ctx, node, prefix, "malformed mapping");
                if (k->type != YAML_SCALAR_NODE || k->data.scalar.length == 0 ||
                    k->data.scalar.length > 128 || strlen((char *) k->data.scalar.value) != k->data.scalar.length)
                        return config_parse_error(ctx, k, prefix, "keys must be short plain names");
                if (!config_is_printable((char *) k->data.scalar.value))
                        return config_parse_error(ctx, k, prefix, "key contains control characters");

                if (prefix) {
                        if (asprintf(&key, "%s.%s", prefix, (char *) k->data.scalar.value) < 0)
                                return -ENOMEM;
                } else {
                        key = strdup((char *) k->data.scalar.value);
                        if (!key)
                                return -ENOMEM;
                }

                if (!prefix && ctx->mode != CONFIG_PARSE_ALL) {
                        bool nvidia = config_top_key_is_nvidia_setting(ctx, key);

                        if (ctx->mode == CONFIG_PARSE_SKIP_NVIDIA && nvidia)
                                continue;       /* the named config's instead */
                        if (ctx->mode == CONFIG_PARSE_NVIDIA_ONLY && !nvidia)
                                return config_parse_error(ctx, k, key, "a setting of kgpu.yaml, not of a named NVIDIA "
                                                          "config (only version, flags, sharing, resources, imex and "
                                                          "health are taken from it)");
                }
                if (v->type == YAML_MAPPING_NODE && streq(key, "sharing.timeSlicing")) {
                        ctx->time_slicing_line = v->start_mark.line + 1;
                        ctx->time_slicing_empty = v->data.mapping.pairs.top == v->data.mapping.pairs.start;
                } else if (v->type == YAML_MAPPING_NODE && streq(key, "sharing.mps"))
                        ctx->mps_line = v->start_mark.line + 1;
                if (v->type != YAML_SCALAR_NODE && !option_by_key(key) && !key_is_section(key) &&
                    config_key_is_nvidia(ctx, key)) {
                        log_unknown_nvidia_key(ctx, key, k);    /* a newer plugin's section: skipped whole */
                        continue;
                }
                if (v->type == YAML_MAPPING_NODE && !option_by_key(key))
                        r = parse_mapping(ctx, key, v, depth + 1);
                else
                        r = parse_value(ctx, key, v);
                if (r < 0)
                        return r;
        }
        return 0;
}


static int parse_yaml(Config *c, const char *text, size_t len, const char *name, ConfigParseMode mode,
                      char **ret_error) {
        ParseContext ctx = { .config = c, .name = name, .mode = mode };
        yaml_parser_t parser;
        yaml_document_t doc;
        yaml_node_t *root;
        int r;

        if (len > CONFIG_FILE_MAX) {
                if (asprintf(ret_error, "%s: file too large (over %u bytes)", name, CONFIG_FILE_MAX) < 0)
                        *ret_error = NULL;
                return -EFBIG;
        }
        if (!yaml_parser_initialize(&parser))
                return -ENOMEM;
        yaml_parser_set_input_string(&parser, (const unsigned char *) text, len);
        if (!yaml_parser_load(&parser, &doc)) {
                if (asprintf(ret_error, "%s:%zu: YAML syntax error: %s", name,
                             parser.problem_mark.line + 1, parser.problem ?: "unknown") < 0)
                        *ret_error = NULL;
                yaml_parser_delete(&parser);
                return -EINVAL;
        }
        ctx.doc = &doc;
        root = yaml_document_get_root_node(&doc);
        if (root && root->type == YAML_MAPPING_NODE)
                for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
                        yaml_node_t *k = yaml_document_get_node(&doc, p->key);

                        if (k && k->type == YAML_SCALAR_NODE && strlen((char *) k->data.scalar.value) == k->data.scalar.length &&
                            !strchr((char *) k->data.scalar.value, '.') && config_key_is_nvidia(&ctx, (char *) k->data.scalar.value))
                                ctx.nvidia_file = true;
                }
        if (!root)
                r = 0;  /* empty file: all defaults */
        else if (root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0)
                r = 0;
        else
                r = parse_mapping(&ctx, NULL, root, 0);
        if (r >= 0)
                r = config_check_sharing_sections(&ctx);
        yaml_document_delete(&doc);
        yaml_parser_delete(&parser);
        if (r < 0)
                *ret_error = TAKE_PTR(ctx.error);
        free(ctx.error);
        return r;
}

static int apply_environment(Config *c, char **ret_error) {
        for (size_t i = 0; i < ELEMENTSOF(options); i++)
                for (size_t j = 0; j < ELEMENTSOF(options[i].env) && options[i].env[j]; j++) {
                        const char *v = getenv(options[i].env[j]), *why = NULL;
                        _cleanup_free_ char *first = NULL;
                        int r;

                        if (!v)
                                continue;
                        /* systemd passes STATE_DIRECTORY/RUNTIME_DIRECTORY as colon lists. */
                        if (options[i].type == OPTION_PATH && strchr(v, ':')) {
                                first = strndup(v, strcspn(v, ":"));
                                if (!first)
                                        return -ENOMEM;
                                v = first;
                        }
                        r = config_option_set(c, &options[i], v, &why);
                        if (r == -ENOMEM)
                                return r;
                        if (r < 0) {
                                if (asprintf(ret_error, "environment variable %s: %s, got '%s'",
                                             options[i].env[j], why, v) < 0)
                                        *ret_error = NULL;
                                return r;
                        }
                        if (r == CONFIG_NO_EFFECT)
                                log_warning("Environment variable %s: accepted, no effect in kgpu: %s.", options[i].env[j], why);
                        break;
                }
        return 0;
}

static int apply_overrides(Config *c, const ConfigOverride *ov, size_t n, char **ret_error) {
        for (size_t i = 0; i < n; i++) {
                const ConfigOption *o = option_by_flag(ov[i].flag);
                const char *why = NULL;
                int r;

                if (!o) {
                        if (asprintf(ret_error, "--%s: unknown option", ov[i].flag) < 0)
                                *ret_error = NULL;
                        return -EINVAL;
                }
                /* A boolean flag without a value ("-enable-monitoring") means true. */
                r = config_option_set(c, o, ov[i].value ?: (o->type == OPTION_BOOL ? "true" : ""), &why);
                if (r == -ENOMEM)
                        return r;
                if (r < 0) {
                        if (asprintf(ret_error, "--%s: %s, got '%s'", ov[i].flag, why, ov[i].value ?: "") < 0)
                                *ret_error = NULL;
                        return r;
                }
                if (r == CONFIG_NO_EFFECT)
                        log_warning("--%s: accepted, no effect in kgpu: %s.", ov[i].flag, why);
        }
        return 0;
}

static int finish(Config *c) {
        if (!c->kubelet_socket) {
                if (asprintf(&c->kubelet_socket, "%s/kubelet.sock", c->device_plugin_path) < 0) {
                        c->kubelet_socket = NULL;
                        return -ENOMEM;
                }
        }
        return 0;
}

static int config_build(const char *text, size_t len, const char *name,
                        const char *overlay, size_t overlay_len, const char *overlay_name,
                        const ConfigOverride *overrides, size_t n_overrides,
                        Config **ret, char **ret_error) {
        _cleanup_(config_freep) Config *c = NULL;
        char *error = NULL;
        int r;

        c = calloc(1, sizeof(Config));
        if (!c)
                return -ENOMEM;
        r = set_defaults(c);
        if (r < 0)
                return r;
        if (text) {
                r = parse_yaml(c, text, len, name, overlay ? CONFIG_PARSE_SKIP_NVIDIA : CONFIG_PARSE_ALL, &error);
                if (r < 0)
                        goto fail;
                c->file = strdup(name);
                if (!c->file)
                        return -ENOMEM;
        }
        if (overlay) {
                r = parse_yaml(c, overlay, overlay_len, overlay_name, CONFIG_PARSE_NVIDIA_ONLY, &error);
                if (r < 0)
                        goto fail;
        }
        r = apply_environment(c, &error);
        if (r < 0)
                goto fail;
        r = apply_overrides(c, overrides, n_overrides, &error);
        if (r < 0)
                goto fail;
        r = config_intel_check(c, &error);
        if (r < 0)
                goto fail;
        r = finish(c);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(c);
        return 0;
fail:
        if (ret_error)
                *ret_error = error ?: strdup("out of memory");
        else
                free(error);
        return r;
}

int config_load_string(const char *text, size_t len, const char *name,
                       const ConfigOverride *overrides, size_t n_overrides,
                       Config **ret, char **ret_error) {
        return config_build(text, len, name ?: "<string>", NULL, 0, NULL, overrides, n_overrides, ret, ret_error);
}

int config_load(const char *config_path,
                const ConfigOverride *overrides, size_t n_overrides,
                Config **ret, char **ret_error) {
        return config_load_with_overlay(config_path, overrides, n_overrides, NULL, 0, NULL, ret, ret_error);
}

int config_load_with_overlay(const char *config_path,
                             const ConfigOverride *overrides, size_t n_overrides,
                             const char *overlay, size_t overlay_len, const char *overlay_name,
                             Config **ret, char **ret_error) {
        _cleanup_free_ char *text = NULL;
        const char *path = config_path;
        bool explicit = true;
        size_t len = 0;
        int r;

        if (!path)
                path = getenv("KGPU_CONFIG");
        if (!path)
                path = getenv("CONFIG_FILE");
        if (!path) {
                path = KGPU_CONFIG_FILE_DEFAULT;
                explicit = false;
        }

        if (!isempty(path)) {
                _cleanup_fclose_ FILE *f = fopen(path, "re");
                struct stat st;

                if (!f) {
                        r = negative_errno();
                        if (r == -ENOENT && !explicit)
                                return config_build(NULL, 0, path, overlay, overlay_len, overlay_name,
                                                    overrides, n_overrides, ret, ret_error);
                        if (ret_error && asprintf(ret_error, "%s: cannot open: %s", path, strerror(-r)) < 0)
                                *ret_error = NULL;
                        return r;
                }
                if (fstat(fileno(f), &st) < 0)
                        return negative_errno();
                if (!S_ISREG(st.st_mode)) {
                        if (ret_error && asprintf(ret_error, "%s: not a regular file", path) < 0)
                                *ret_error = NULL;
                        return -EINVAL;
                }
                if ((size_t) st.st_size > CONFIG_FILE_MAX) {
                        if (ret_error && asprintf(ret_error, "%s: file too large (over %u bytes)", path, CONFIG_FILE_MAX) < 0)
                                *ret_error = NULL;
                        return -EFBIG;
                }
                text = malloc((size_t) st.st_size + 1);
                if (!text)
                        return -ENOMEM;
                len = fread(text, 1, (size_t) st.st_size, f);
                if (ferror(f)) {
                        if (ret_error && asprintf(ret_error, "%s: read error", path) < 0)
                                *ret_error = NULL;
                        return -EIO;
                }
                text[len] = 0;
                return config_build(text, len, path, overlay, overlay_len, overlay_name,
                                    overrides, n_overrides, ret, ret_error);
        }
        return config_build(NULL, 0, "", overlay, overlay_len, overlay_name, overrides, n_overrides, ret, ret_error);
}

const struct option *config_getopt_options(void) {
        static struct option opts[ELEMENTSOF(options) + 1];

        if (!opts[0].name)
                for (size_t i = 0, n = 0; i < ELEMENTSOF(options); i++) {
                        if (!options[i].flag)
                                continue;       /* file only */
                        opts[n++] = (struct option) {
                                .name = options[i].flag,
                                .has_arg = options[i].type == OPTION_BOOL ? optional_argument
                                                                          : required_argument,
                                .val = CONFIG_OPTION_VAL_BASE + (int) i,
                        };
                }
        return opts;
}

const char *config_flag_by_val(int val) {
        if (val < CONFIG_OPTION_VAL_BASE || (size_t) (val - CONFIG_OPTION_VAL_BASE) >= ELEMENTSOF(options))
                return NULL;
        return options[val - CONFIG_OPTION_VAL_BASE].flag;     /* NULL for file-only keys */
}

void config_print_flags_help(void) {
        printf("\nConfiguration (flag > environment > %s > default):\n", KGPU_CONFIG_FILE_DEFAULT);
        for (size_t i = 0; i < ELEMENTSOF(options); i++) {
                char flag[64];

                if (!options[i].flag)
                        continue;
                (void) snprintf(flag, sizeof(flag), "--%s=VALUE", options[i].flag);
                printf("  %-32s %s\n  %-32s key %s%s%s%s%s\n", flag, options[i].help, "", options[i].key,
                       options[i].env[0] ? ", env " : "", options[i].env[0] ?: "",
                       options[i].def ? ", default " : "", options[i].def ?: "");
        }
}

