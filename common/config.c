/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * config.c — kgpu.yaml (libyaml), environment and flags through one option table.
 *
 * See config.h for the contract. Values from every source go through the same
 * option_set() so a value is validated the same way whether it came from the file, the
 * environment or the command line; only the error prefix differs.
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
#include "common/log.h"
#include "common/util.h"

#define CONFIG_FILE_MAX (1024U * 1024U)
#define CONFIG_DEPTH_MAX 16
#define CONFIG_SCALAR_MAX 4096

typedef enum OptionType {
        OPTION_STRING,
        OPTION_PATH,            /* absolute path */
        OPTION_BOOL,
        OPTION_UINT32,
        OPTION_STRV,            /* YAML sequence of scalars, or comma separated */
        OPTION_ALLOCATION_POLICY,
        OPTION_BY_PATH,
        OPTION_LOG_LEVEL,
        OPTION_VERSION,         /* the NVIDIA file's "version": only v1 */
        OPTION_ENUM,            /* one of names[], stored as the enum's int */
        OPTION_DEVICE_LIST_STRATEGY, /* DEVICE_LIST_STRATEGY_* set: one value, a list or comma separated */
        OPTION_ANNOTATION_PREFIX, /* non-empty annotation key prefix */
        OPTION_IGNORED,         /* accepted (names[]: these values only), logged at notice, not stored */
        OPTION_FALSE_ONLY,      /* a boolean kgpu does not implement: only false is accepted */
        OPTION_EMPTY_ONLY,      /* a list kgpu does not implement: only an empty list is accepted */
        OPTION_SHARED_RESOURCES, /* sharing.*.resources: a list of mappings into the ConfigSharing at offset */
        OPTION_RESOURCE_PATTERNS, /* resources.gpus/mig: {pattern, name} mappings; only the default names */
} OptionType;

typedef struct ConfigOption {
        const char *key;        /* dotted YAML key */
        const char *env[3];     /* environment variables, first found wins */
        const char *flag;       /* long option name */
        OptionType type;
        size_t offset;
        const char *def;        /* default as text, NULL: none */
        uint32_t min, max;      /* OPTION_UINT32 bounds */
        const char *help;       /* OPTION_IGNORED, OPTION_FALSE_ONLY: why */
        const char * const *names; /* OPTION_ENUM values in enum order; OPTION_IGNORED accepted values (NULL: any) */
        bool alias;             /* another key for a field an earlier entry owns (not freed, no default) */
} ConfigOption;

#define OFF(f) offsetof(Config, f)

static const char * const mig_strategy_names[] = {
        [MIG_STRATEGY_NONE] = "none",
        [MIG_STRATEGY_SINGLE] = "single",
        [MIG_STRATEGY_MIXED] = "mixed",
        NULL
};

static const char * const device_id_strategy_names[] = {
        [DEVICE_ID_STRATEGY_UUID] = "uuid",
        [DEVICE_ID_STRATEGY_INDEX] = "index",
        NULL
};

static const char * const replica_policy_names[] = {
        [REPLICA_POLICY_DISTRIBUTED] = "distributed",
        [REPLICA_POLICY_PACKED] = "packed",
        NULL
};

/* Bit i of a DEVICE_LIST_STRATEGY_* set is device_list_strategy_names[i]. */
static const char * const device_list_strategy_names[] = {
        "envvar", "volume-mounts", "cdi-annotations", "cdi-cri", NULL
};

static const char * const mps_launcher_names[] = {
        [MPS_LAUNCHER_AUTO] = "auto",
        [MPS_LAUNCHER_SYSTEMD] = "systemd",
        [MPS_LAUNCHER_DIRECT] = "direct",
        NULL
};

static const char * const device_discovery_strategy_names[] = { "auto", "nvml", NULL };

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
        { "intel.allowIDs", { NULL }, "allow-ids", OPTION_STRV, OFF(intel_allow_ids), NULL, 0, 0,
          "PCI device ids to serve (comma separated; empty: all)" },
        { "intel.denyIDs", { NULL }, "deny-ids", OPTION_STRV, OFF(intel_deny_ids), NULL, 0, 0,
          "PCI device ids never to serve" },
        { "intel.enableMonitoring", { NULL }, "enable-monitoring", OPTION_BOOL,
          OFF(intel_enable_monitoring), "false", 0, 0,
          "advertise <driver>_monitoring: one device granting every Intel GPU" },
        { "intel.resourceManager", { NULL }, "resource-manager", OPTION_BOOL, OFF(intel_resource_manager),
          "false", 0, 0, "Intel fractional resource manager (accepted for compatibility, not supported)" },
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
          "MIG strategy: none, single or mixed", mig_strategy_names },
        { "flags.failOnInitError", { "FAIL_ON_INIT_ERROR" }, "fail-on-init-error", OPTION_BOOL,
          OFF(nvidia_fail_on_init_error), "true", 0, 0, "fail when NVIDIA GPUs cannot be read at start" },
        { "flags.nvidiaDriverRoot", { "NVIDIA_DRIVER_ROOT" }, "nvidia-driver-root", OPTION_PATH,
          OFF(nvidia_driver_root), "/", 0, 0, "root of the NVIDIA driver installation (nvidia-smi is looked up there)" },
        { "flags.plugin.passDeviceSpecs", { "PASS_DEVICE_SPECS" }, "pass-device-specs", OPTION_BOOL,
          OFF(nvidia_pass_device_specs), "false", 0, 0, "pass the NVIDIA device nodes in Allocate answers" },
        { "flags.plugin.deviceListStrategy", { "DEVICE_LIST_STRATEGY" }, "device-list-strategy",
          OPTION_DEVICE_LIST_STRATEGY, OFF(nvidia_device_list_strategy), "envvar", 0, 0,
          "how devices reach a container: envvar, volume-mounts, cdi-annotations, cdi-cri (comma separated)" },
        { "flags.plugin.deviceIDStrategy", { "DEVICE_ID_STRATEGY" }, "device-id-strategy", OPTION_ENUM,
          OFF(nvidia_device_id_strategy), "uuid", 0, 0, "NVIDIA device IDs: uuid or index", device_id_strategy_names },
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
          mps_launcher_names },
        { "nvidia.healthIntervalMs", { "KGPU_NVIDIA_HEALTH_INTERVAL_MS" }, "nvidia-health-interval-ms", OPTION_UINT32,
          OFF(nvidia_health_interval_ms), "10000", 0, 86400000, "milliseconds between nvidia-smi health polls (0: none)" },
        { "nvidia.healthRecoverPolls", { "KGPU_NVIDIA_HEALTH_RECOVER_POLLS" }, "nvidia-health-recover-polls",
          OPTION_UINT32, OFF(nvidia_health_recover_polls), "3", 1, 1000,
          "consecutive good polls before an unhealthy NVIDIA GPU is healthy again" },
        { "nvidia.replicaPolicy", { "KGPU_NVIDIA_REPLICA_POLICY" }, "replica-policy", OPTION_ENUM,
          OFF(nvidia_replica_policy), "distributed", 0, 0, "preferred replicas: distributed or packed",
          replica_policy_names },
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
        { "flags.nvidiaDevRoot", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "NVIDIA device nodes are always read from /dev" },
        { "flags.restartOnDeviceUnhealthy", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "unhealthy devices are reported, nothing is restarted" },
        { "flags.useNodeFeatureAPI", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "node labels go to labels.featureFile" },
        { "flags.deviceDiscoveryStrategy", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "GPUs are found with nvidia-smi; auto and nvml are accepted", device_discovery_strategy_names },
        { "flags.gdsEnabled", { NULL }, NULL, OPTION_FALSE_ONLY, 0, NULL, 0, 0,
          "GPUDirect Storage devices are not passed to containers" },
        { "flags.mofedEnabled", { NULL }, NULL, OPTION_FALSE_ONLY, 0, NULL, 0, 0,
          "MOFED devices are not passed to containers" },
        { "flags.gdrcopyEnabled", { NULL }, NULL, OPTION_FALSE_ONLY, 0, NULL, 0, 0,
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
        { "health.disabled", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "health comes from nvidia-smi polls (nvidia.healthIntervalMs)" },
        { "health.eventTypes", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "health comes from nvidia-smi polls (nvidia.healthIntervalMs)" },
        { "health.ignoredXIDs", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "health comes from nvidia-smi polls (nvidia.healthIntervalMs)" },
        { "health.criticalXIDs", { NULL }, NULL, OPTION_IGNORED, 0, NULL, 0, 0,
          "health comes from nvidia-smi polls (nvidia.healthIntervalMs)" },
        { "imex.channelIDs", { NULL }, NULL, OPTION_EMPTY_ONLY, 0, NULL, 0, 0,
          "IMEX channels are not passed to containers" },
        { "imex.required", { NULL }, NULL, OPTION_FALSE_ONLY, 0, NULL, 0, 0,
          "IMEX channels are not passed to containers" },
        { "labels.featureFile", { "KGPU_LABELS_FEATURE_FILE" }, "labels-feature-file", OPTION_PATH,
          OFF(labels_feature_file), "/etc/kubernetes/node-feature-discovery/features.d/kgpu", 0, 0,
          "NFD local feature file the probe writes the node labels to (empty: none)" },
        { "cdi.specDirectory", { "KGPU_CDI_SPEC_DIRECTORY" }, "cdi-spec-directory", OPTION_PATH,
          OFF(cdi_spec_directory), "/var/run/cdi", 0, 0,
          "directory of the probe's CDI spec for Intel GPUs (empty: none)" },
};

static const char * const allocation_policy_names[] = {
        [ALLOCATION_POLICY_NONE] = "none",
        [ALLOCATION_POLICY_BALANCED] = "balanced",
        [ALLOCATION_POLICY_PACKED] = "packed",
};

static const char * const by_path_names[] = {
        [BY_PATH_SINGLE] = "single",
        [BY_PATH_ALL] = "all",
        [BY_PATH_NONE] = "none",
};

const char *config_by_path_to_string(ConfigByPath b) {
        if ((size_t) b >= ELEMENTSOF(by_path_names))
                return NULL;
        return by_path_names[b];
}

const char *config_allocation_policy_to_string(ConfigAllocationPolicy p) {
        if ((size_t) p >= ELEMENTSOF(allocation_policy_names))
                return NULL;
        return allocation_policy_names[p];
}

const char *config_mig_strategy_to_string(ConfigMigStrategy m) {
        if ((size_t) m >= ELEMENTSOF(mig_strategy_names) - 1)
                return NULL;
        return mig_strategy_names[m];
}

const char *config_device_id_strategy_to_string(ConfigDeviceIdStrategy d) {
        if ((size_t) d >= ELEMENTSOF(device_id_strategy_names) - 1)
                return NULL;
        return device_id_strategy_names[d];
}

const char *config_replica_policy_to_string(ConfigReplicaPolicy p) {
        if ((size_t) p >= ELEMENTSOF(replica_policy_names) - 1)
                return NULL;
        return replica_policy_names[p];
}

const char *config_device_list_strategy_to_string(uint32_t set, char *buf, size_t size) {
        size_t n = 0;

        if (!buf || size == 0)
                return NULL;
        buf[0] = 0;
        for (size_t i = 0; device_list_strategy_names[i]; i++) {
                int k;

                if (!(set & (1U << i)))
                        continue;
                k = snprintf(buf + n, size - n, "%s%s", n > 0 ? "," : "", device_list_strategy_names[i]);
                if (k < 0 || (size_t) k >= size - n)
                        return NULL;
                n += (size_t) k;
        }
        return buf;
}

char *config_shared_resource_name(const ConfigSharing *s, const ConfigSharedResource *r) {
        char *n = NULL;

        if (!s || !r || !r->name)
                return NULL;
        if (r->rename)
                return strdup(r->rename);
        if (s->rename_by_default)
                return asprintf(&n, "%s.shared", r->name) < 0 ? NULL : n;
        return strdup(r->name);
}

static void shared_resources_free(ConfigSharedResource *r, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(r[i].name);
                free(r[i].rename);
                strv_free(r[i].devices);
        }
        free(r);
}

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
                        strv_free(*(char ***) p);
                        break;
                case OPTION_SHARED_RESOURCES: {
                        ConfigSharing *sh = p;

                        shared_resources_free(sh->resources, sh->n_resources);
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

static bool is_printable(const char *s) {
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                        return false;
        return true;
}

static bool names_contain(const char * const *names, const char *s) {
        for (size_t i = 0; names[i]; i++)
                if (streq(names[i], s))
                        return true;
        return false;
}

static int device_list_strategy_from_string(const char *s, uint32_t *ret) {
        for (size_t i = 0; device_list_strategy_names[i]; i++)
                if (streq(s, device_list_strategy_names[i])) {
                        *ret = 1U << i;
                        return 0;
                }
        return -EINVAL;
}

/* Sets one option from text. On failure returns -EINVAL and a message in *ret_why. */
static int option_set(Config *c, const ConfigOption *o, const char *value, const char **ret_why) {
        void *p = (uint8_t *) c + o->offset;
        int r;

        if (strlen(value) > CONFIG_SCALAR_MAX) {
                *ret_why = "value too long";
                return -EINVAL;
        }
        if (!is_printable(value)) {
                *ret_why = "value contains control characters";
                return -EINVAL;
        }

        switch (o->type) {
        case OPTION_PATH:
                if (!isempty(value) && value[0] != '/') {
                        *ret_why = "expected an absolute path";
                        return -EINVAL;
                }
                /* A path with a default cannot be unset, the daemon would run without it;
                 * except the generated files, where empty means "do not write". */
                if (isempty(value) && o->def &&
                    !streq(o->key, "labels.featureFile") && !streq(o->key, "cdi.specDirectory")) {
                        *ret_why = "expected an absolute path, not an empty value";
                        return -EINVAL;
                }
                _fallthrough_;
        case OPTION_STRING:
                if (free_and_strdup((char **) p, isempty(value) ? NULL : value) < 0)
                        return -ENOMEM;
                return 0;

        case OPTION_LOG_LEVEL:
                if (log_level_from_string(value) < 0) {
                        *ret_why = "expected one of debug, info, notice, warning, err";
                        return -EINVAL;
                }
                return free_and_strdup((char **) p, value) < 0 ? -ENOMEM : 0;

        case OPTION_BOOL:
                r = parse_boolean(value);
                if (r < 0) {
                        *ret_why = "expected a boolean (true or false)";
                        return -EINVAL;
                }
                *(bool *) p = r;
                return 0;

        case OPTION_UINT32: {
                uint32_t v;

                if (safe_atou32(value, &v) < 0) {
                        *ret_why = "expected an unsigned integer";
                        return -EINVAL;
                }
                if (v < o->min || v > o->max) {
                        *ret_why = "value out of range";
                        return -ERANGE;
                }
                *(uint32_t *) p = v;
                return 0;
        }

        case OPTION_ALLOCATION_POLICY:
                for (size_t i = 0; i < ELEMENTSOF(allocation_policy_names); i++)
                        if (streq(value, allocation_policy_names[i])) {
                                *(ConfigAllocationPolicy *) p = (ConfigAllocationPolicy) i;
                                return 0;
                        }
                *ret_why = "expected none, balanced or packed";
                return -EINVAL;

        case OPTION_BY_PATH:
                for (size_t i = 0; i < ELEMENTSOF(by_path_names); i++)
                        if (streq(value, by_path_names[i])) {
                                *(ConfigByPath *) p = (ConfigByPath) i;
                                return 0;
                        }
                *ret_why = "expected single, all or none";
                return -EINVAL;

        case OPTION_VERSION:
                if (!streq(value, "v1")) {
                        *ret_why = "expected v1 (the only version of the NVIDIA device plugin's config file)";
                        return -EINVAL;
                }
                return free_and_strdup((char **) p, value) < 0 ? -ENOMEM : 0;

        case OPTION_ENUM:
                for (size_t i = 0; o->names[i]; i++)
                        if (streq(value, o->names[i])) {
                                *(int *) p = (int) i;
                                return 0;
                        }
                *ret_why = o->names == mig_strategy_names ? "expected none, single or mixed" :
                           o->names == device_id_strategy_names ? "expected uuid or index" :
                           o->names == mps_launcher_names ? "expected auto, systemd or direct" :
                           "expected distributed or packed";
                return -EINVAL;

        case OPTION_DEVICE_LIST_STRATEGY: {
                _cleanup_free_ char *copy = strdup(value);
                char *save = NULL;
                uint32_t set = 0;

                if (!copy)
                        return -ENOMEM;
                for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                        uint32_t bit;

                        while (*t == ' ')
                                t++;
                        r = device_list_strategy_from_string(t, &bit);
                        if (r < 0) {
                                *ret_why = "expected envvar, volume-mounts, cdi-annotations or cdi-cri";
                                return r;
                        }
                        set |= bit;
                }
                if (set == 0) {
                        *ret_why = "expected envvar, volume-mounts, cdi-annotations or cdi-cri";
                        return -EINVAL;
                }
                *(uint32_t *) p = set;
                return 0;
        }

        case OPTION_ANNOTATION_PREFIX:
                if (isempty(value) || strlen(value) > 253 ||
                    strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._/") != strlen(value)) {
                        *ret_why = "expected an annotation key prefix (letters, digits, '-', '.', '_', '/')";
                        return -EINVAL;
                }
                return free_and_strdup((char **) p, value) < 0 ? -ENOMEM : 0;

        case OPTION_IGNORED:
                if (o->names && !names_contain(o->names, value)) {
                        *ret_why = "not supported by kgpu";
                        return -EOPNOTSUPP;
                }
                return 0;

        case OPTION_FALSE_ONLY:
                r = parse_boolean(value);
                if (r < 0) {
                        *ret_why = "expected a boolean (true or false)";
                        return -EINVAL;
                }
                if (r > 0) {
                        *ret_why = "not supported by kgpu, only false is accepted";
                        return -EOPNOTSUPP;
                }
                return 0;

        case OPTION_SHARED_RESOURCES:
        case OPTION_RESOURCE_PATTERNS:
                *ret_why = "expected a list of mappings";       /* file only: parse_value() reads them */
                return -EINVAL;

        case OPTION_EMPTY_ONLY:
                if (isempty(value))
                        return 0;
                *ret_why = "not supported by kgpu, only an empty list is accepted";
                return -EOPNOTSUPP;

        case OPTION_STRV: {
                _cleanup_strv_free_ char **l = NULL;
                _cleanup_free_ char *copy = strdup(value);
                char *save = NULL;

                if (!copy)
                        return -ENOMEM;
                for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                        while (*t == ' ')
                                t++;
                        if (*t && strv_extend(&l, t) < 0)
                                return -ENOMEM;
                }
                strv_free(*(char ***) p);
                *(char ***) p = TAKE_PTR(l);
                return 0;
        }
        }
        return -EINVAL;
}

static int set_defaults(Config *c) {
        for (size_t i = 0; i < ELEMENTSOF(options); i++) {
                const char *why = NULL;
                int r;

                if (!options[i].def || options[i].alias)
                        continue;
                r = option_set(c, &options[i], options[i].def, &why);
                if (r < 0)
                        return r;
        }
        return 0;
}

typedef struct ParseContext {
        Config *config;
        yaml_document_t *doc;
        const char *name;
        char *error;
        /* Lines (1-based, 0: absent) of the sharing sections and their resources lists. */
        size_t time_slicing_line, time_slicing_resources_line;
        size_t mps_line, mps_resources_line;
} ParseContext;

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

static int parse_error(ParseContext *ctx, const yaml_node_t *node, const char *key, const char *fmt, ...) _printf_(4, 5);
static int parse_error(ParseContext *ctx, const yaml_node_t *node, const char *key, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = parse_error_va(ctx, node ? node->start_mark.line + 1 : 0, key, fmt, ap);
        va_end(ap);
        return r;
}

static int parse_error_line(ParseContext *ctx, size_t line, const char *key, const char *fmt, ...) _printf_(4, 5);
static int parse_error_line(ParseContext *ctx, size_t line, const char *key, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = parse_error_va(ctx, line, key, fmt, ap);
        va_end(ap);
        return r;
}

#define CONFIG_LIST_MAX 256U            /* entries of a resources list */
#define CONFIG_DEVICES_MAX 1024U        /* items of one devices list */
#define CONFIG_DEVICES_TOTAL_MAX 4096U  /* items of all devices lists of one section (bounds the overlap checks) */
#define RESOURCE_NAME_PREFIX "nvidia.com/"

static const char *scalar(const yaml_node_t *n) {
        return (const char *) n->data.scalar.value;
}

/* A plain value: a scalar without NUL bytes, bounded, printable. */
static bool scalar_ok(const yaml_node_t *n) {
        return n && n->type == YAML_SCALAR_NODE && n->data.scalar.length <= CONFIG_SCALAR_MAX &&
               strlen(scalar(n)) == n->data.scalar.length && is_printable(scalar(n));
}

/* The part of a Kubernetes resource name after "nvidia.com/": a DNS label-ish name of at most
 * 63 characters (lower case letters, digits, '-' and '.', alphanumeric at both ends). */
static bool resource_suffix_ok(const char *s) {
        size_t n = strlen(s);

        if (n == 0 || n > 63)
                return false;
        if (strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-.") != n)
                return false;
        if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789", s[0]) ||
            !strchr("abcdefghijklmnopqrstuvwxyz0123456789", s[n - 1]))
                return false;
        return !strstr(s, "..");
}

/* "1g.10gb", "1c.2g.20gb", "1g.10gb.me" (the NVIDIA plugin's '+' already turned into '.'). */
static bool mig_profile_ok(const char *s) {
        const char *p = s;
        size_t k;

        k = strspn(p, "0123456789");
        if (k > 0 && p[k] == 'c' && p[k + 1] == '.')
                p += k + 2;
        k = strspn(p, "0123456789");
        if (k == 0 || p[k] != 'g' || p[k + 1] != '.')
                return false;
        p += k + 2;
        k = strspn(p, "0123456789");
        if (k == 0 || p[k] != 'g' || p[k + 1] != 'b')
                return false;
        p += k + 2;
        return *p == 0 || (*p == '.' && resource_suffix_ok(p + 1));
}

/* A resource name as the NVIDIA plugin takes it: "gpu" means "nvidia.com/gpu". Returns the
 * full name in *ret, or NULL with *ret_why. */
static int resource_name_parse(const char *value, char **ret, const char **ret_why) {
        const char *suffix = startswith(value, RESOURCE_NAME_PREFIX) ?: value;
        char *n = NULL;

        if (strchr(suffix, '/')) {
                *ret_why = "expected a resource name under " RESOURCE_NAME_PREFIX;
                return -EINVAL;
        }
        if (!resource_suffix_ok(suffix)) {
                *ret_why = "expected a resource name (" RESOURCE_NAME_PREFIX " and up to 63 lower case letters, digits, '-' or '.')";
                return -EINVAL;
        }
        if (asprintf(&n, RESOURCE_NAME_PREFIX "%s", suffix) < 0)
                return -ENOMEM;
        *ret = n;
        return 0;
}

static bool is_hex_run(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!strchr("0123456789abcdefABCDEF", s[i]))
                        return false;
        return true;
}

/* 8-4-4-4-12 hex digits, nothing after. */
static bool uuid_ok(const char *s, size_t len) {
        static const size_t runs[] = { 8, 4, 4, 4, 12 };

        for (size_t i = 0; i < ELEMENTSOF(runs); i++) {
                if (len < runs[i] || !is_hex_run(s, runs[i]))
                        return false;
                s += runs[i];
                len -= runs[i];
                if (i < ELEMENTSOF(runs) - 1) {
                        if (len == 0 || *s != '-')
                                return false;
                        s++;
                        len--;
                }
        }
        return len == 0;
}

static bool digits_ok(const char *s, size_t len) {
        return len > 0 && len <= 9 && strspn(s, "0123456789") >= len;
}

typedef enum DeviceRefKind {
        DEVICE_REF_INVALID,
        DEVICE_REF_GPU,         /* "0", "GPU-<uuid>" */
        DEVICE_REF_MIG,         /* "0:1", "MIG-<uuid>", "MIG-GPU-<uuid>/1/0" */
} DeviceRefKind;

/* The forms the NVIDIA plugin accepts in a devices list. */
static DeviceRefKind device_ref_kind(const char *s) {
        const char *p, *colon, *rest;
        size_t len = strlen(s);

        if (digits_ok(s, len))
                return DEVICE_REF_GPU;
        colon = strchr(s, ':');
        if (colon && digits_ok(s, (size_t) (colon - s)) && digits_ok(colon + 1, strlen(colon + 1)))
                return DEVICE_REF_MIG;
        if ((p = startswith(s, "GPU-")) && uuid_ok(p, strlen(p)))
                return DEVICE_REF_GPU;
        if (!(p = startswith(s, "MIG-")))
                return DEVICE_REF_INVALID;
        if (uuid_ok(p, strlen(p)))
                return DEVICE_REF_MIG;
        /* MIG-GPU-<uuid>/<gi>/<ci> */
        if (!(p = startswith(p, "GPU-")) || strlen(p) < 36 || !uuid_ok(p, 36) || p[36] != '/')
                return DEVICE_REF_INVALID;
        rest = p + 37;
        p = strchr(rest, '/');
        if (!p || !digits_ok(rest, (size_t) (p - rest)) || !digits_ok(p + 1, strlen(p + 1)))
                return DEVICE_REF_INVALID;
        return DEVICE_REF_MIG;
}

/* Whether two devices selections (NULL: all) can name the same device, as far as the
 * text tells (an index and a UUID of one GPU are not matched: the inventory is not known here). */
static bool devices_overlap(char * const *a, char * const *b) {
        if (!a || !b)
                return true;
        for (char * const *i = a; *i; i++)
                if (strv_contains(b, *i))
                        return true;
        return false;
}

typedef struct EntryContext {
        ParseContext *ctx;
        const char *key;        /* "sharing.mps.resources" */
        size_t index;
        size_t n_devices;       /* devices listed so far in this section */
} EntryContext;

static int entry_error(EntryContext *e, const yaml_node_t *node, const char *field, const char *fmt, ...) _printf_(4, 5);
static int entry_error(EntryContext *e, const yaml_node_t *node, const char *field, const char *fmt, ...) {
        _cleanup_free_ char *what = NULL, *key = NULL;
        va_list ap;
        int k;

        va_start(ap, fmt);
        k = vasprintf(&what, fmt, ap);
        va_end(ap);
        if (k < 0)
                return -ENOMEM;
        if (asprintf(&key, "%s[%zu]%s%s", e->key, e->index, field ? "." : "", field ?: "") < 0)
                return -ENOMEM;
        return parse_error(e->ctx, node, key, "%s", what);
}

static int entry_devices(EntryContext *e, const yaml_node_t *v, bool mps, char ***ret) {
        _cleanup_strv_free_ char **l = NULL;
        size_t n = 0;

        if (v->type == YAML_SCALAR_NODE) {
                uint32_t count;

                if (!scalar_ok(v))
                        return entry_error(e, v, "devices", "invalid value");
                if (streq(scalar(v), "all")) {
                        *ret = NULL;
                        return 0;
                }
                if (safe_atou32(scalar(v), &count) >= 0)
                        return entry_error(e, v, "devices", "a count of devices is not supported, "
                                           "expected \"all\" or a list of devices, got '%s'", scalar(v));
                return entry_error(e, v, "devices", "expected \"all\" or a list of GPU indexes, MIG indexes or UUIDs, got '%s'",
                                   scalar(v));
        }
        if (v->type != YAML_SEQUENCE_NODE)
                return entry_error(e, v, "devices", "expected \"all\" or a list of devices, got a mapping");

        for (yaml_node_item_t *i = v->data.sequence.items.start; i < v->data.sequence.items.top; i++, n++) {
                yaml_node_t *d = yaml_document_get_node(e->ctx->doc, *i);
                _cleanup_free_ char *norm = NULL;
                const char *ref;
                DeviceRefKind kind;

                if (n >= CONFIG_DEVICES_MAX)
                        return entry_error(e, v, "devices", "more than %u devices", CONFIG_DEVICES_MAX);
                if (++e->n_devices > CONFIG_DEVICES_TOTAL_MAX)
                        return entry_error(e, v, "devices", "more than %u devices in all entries", CONFIG_DEVICES_TOTAL_MAX);
                if (!d || !scalar_ok(d))
                        return entry_error(e, d ?: v, "devices", "list items must be GPU indexes, MIG indexes or UUIDs");
                ref = scalar(d);
                kind = device_ref_kind(ref);
                if (kind == DEVICE_REF_INVALID)
                        return entry_error(e, d, "devices", "expected a GPU index (0), a MIG index (0:1), a GPU UUID (GPU-...) "
                                           "or a MIG UUID (MIG-...), got '%s'", ref);
                if (mps && kind == DEVICE_REF_MIG)
                        return entry_error(e, d, "devices", "MPS is not supported on MIG devices, got '%s'", ref);
                if (kind == DEVICE_REF_GPU && digits_ok(ref, strlen(ref))) {
                        uint32_t idx;

                        /* 007 and 7 are the same GPU (the NVIDIA plugin reads integers). */
                        if (safe_atou32(ref, &idx) < 0 || asprintf(&norm, "%" PRIu32, idx) < 0) {
                                norm = NULL;
                                return -ENOMEM;
                        }
                        ref = norm;
                }
                if (strv_contains(l, ref))
                        return entry_error(e, d, "devices", "'%s' listed twice", ref);
                if (strv_extend(&l, ref) < 0)
                        return -ENOMEM;
        }
        if (!l)
                return entry_error(e, v, "devices", "expected \"all\" or a non-empty list of devices");
        *ret = TAKE_PTR(l);
        return 0;
}

/* One entry of sharing.timeSlicing.resources[] / sharing.mps.resources[]. */
static int parse_shared_resource(EntryContext *e, yaml_node_t *node, bool mps, ConfigSharedResource *r) {
        static const char * const fields[] = { "name", "rename", "replicas", "devices", "memoryGB", NULL };
        bool seen[ELEMENTSOF(fields)] = {};
        int k;

        if (node->type != YAML_MAPPING_NODE)
                return entry_error(e, node, NULL, "expected a mapping (name, replicas, ...)");

        for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
                yaml_node_t *k_node = yaml_document_get_node(e->ctx->doc, p->key);
                yaml_node_t *v = yaml_document_get_node(e->ctx->doc, p->value);
                const char *why = NULL;
                size_t f;

                if (!k_node || !v)
                        return entry_error(e, node, NULL, "malformed mapping");
                if (!scalar_ok(k_node) || k_node->data.scalar.length == 0 || k_node->data.scalar.length > 128)
                        return entry_error(e, k_node, NULL, "keys must be short plain names");
                for (f = 0; fields[f]; f++)
                        if (streq(fields[f], scalar(k_node)))
                                break;
                if (!fields[f])
                        return entry_error(e, k_node, NULL, "unknown key '%s'", scalar(k_node));
                if (seen[f])
                        return entry_error(e, k_node, fields[f], "given twice");
                seen[f] = true;

                if (streq(fields[f], "devices")) {
                        k = entry_devices(e, v, mps, &r->devices);
                        if (k < 0)
                                return k;
                        continue;
                }
                if (!scalar_ok(v))
                        return entry_error(e, v, fields[f], "expected a single value");

                if (streq(fields[f], "name") || streq(fields[f], "rename")) {
                        char **dst = streq(fields[f], "name") ? &r->name : &r->rename;

                        k = resource_name_parse(scalar(v), dst, &why);
                        if (k == -ENOMEM)
                                return k;
                        if (k < 0)
                                return entry_error(e, v, fields[f], "%s, got '%s'", why, scalar(v));
                        if (dst == &r->name) {
                                const char *suffix = *dst + strlen(RESOURCE_NAME_PREFIX);
                                const char *profile = startswith(suffix, "mig-");

                                if (!streq(suffix, "gpu") && !(profile && mig_profile_ok(profile)))
                                        return entry_error(e, v, fields[f], "expected nvidia.com/gpu or nvidia.com/mig-<profile>, got '%s'",
                                                           scalar(v));
                                if (mps && profile)
                                        return entry_error(e, v, fields[f], "MPS is not supported on MIG devices, "
                                                           "only nvidia.com/gpu can be shared, got '%s'", scalar(v));
                        }
                } else if (streq(fields[f], "replicas")) {
                        if (safe_atou32(scalar(v), &r->replicas) < 0 || r->replicas < 1 || r->replicas > 1024)
                                return entry_error(e, v, fields[f], "expected an integer from 1 to 1024, got '%s'", scalar(v));
                } else {        /* memoryGB */
                        uint32_t gb;

                        if (!mps)
                                return entry_error(e, v, fields[f], "only sharing.mps resources have a memory size");
                        if (safe_atou32(scalar(v), &gb) < 0 || gb < 1 || gb > 65536)
                                return entry_error(e, v, fields[f], "expected a whole number of GiB from 1 to 65536, got '%s'",
                                                   scalar(v));
                        r->memory_bytes = (uint64_t) gb << 30;
                }
        }
        if (!r->name)
                return entry_error(e, node, "name", "required, not given");
        if (r->replicas == 0)
                return entry_error(e, node, "replicas", "required, not given");
        return 0;
}

/* Cross-entry checks of one sharing section, as the NVIDIA plugin's semantics need them. */
static int check_shared_resources(EntryContext *e, ConfigSharing *sh, yaml_node_t **nodes, bool mps) {
        for (size_t i = 0; i < sh->n_resources; i++) {
                _cleanup_free_ char *name_i = config_shared_resource_name(sh, &sh->resources[i]);

                if (!name_i)
                        return -ENOMEM;
                for (size_t j = 0; j < i; j++) {
                        _cleanup_free_ char *name_j = config_shared_resource_name(sh, &sh->resources[j]);

                        if (!name_j)
                                return -ENOMEM;
                        if (!streq(name_i, name_j) && (mps || !streq(sh->resources[i].name, sh->resources[j].name)))
                                continue;
                        if (!devices_overlap(sh->resources[i].devices, sh->resources[j].devices))
                                continue;
                        e->index = i;
                        if (streq(name_i, name_j))
                                return entry_error(e, nodes[i], NULL, "'%s' is already advertised for the same devices by "
                                                   "%s[%zu]", name_i, e->key, j);
                        /* MPS slices of one GPU may differ (the nos fork); a time-sliced device has one replica set. */
                        if (!mps && streq(sh->resources[i].name, sh->resources[j].name))
                                return entry_error(e, nodes[i], NULL, "'%s' on the same devices is already time-sliced by "
                                                   "%s[%zu]", sh->resources[i].name, e->key, j);
                }
        }
        return 0;
}

static int parse_shared_resources(ParseContext *ctx, const ConfigOption *o, const char *key, yaml_node_t *node) {
        ConfigSharing *sh = (ConfigSharing *) ((uint8_t *) ctx->config + o->offset);
        bool mps = o->offset == OFF(nvidia_mps);
        EntryContext e = { .ctx = ctx, .key = key };
        ConfigSharedResource *list = NULL;
        yaml_node_t *nodes[CONFIG_LIST_MAX];
        size_t n = 0;
        int r;

        if (node->type != YAML_SEQUENCE_NODE)
                return parse_error(ctx, node, key, "expected a list of resources (name, replicas, ...)");
        if (node->data.sequence.items.top - node->data.sequence.items.start > (ptrdiff_t) CONFIG_LIST_MAX)
                return parse_error(ctx, node, key, "more than %u resources", CONFIG_LIST_MAX);
        if (node->data.sequence.items.top == node->data.sequence.items.start)
                return parse_error(ctx, node, key, "no resources specified");

        list = calloc((size_t) (node->data.sequence.items.top - node->data.sequence.items.start), sizeof(*list));
        if (!list)
                return -ENOMEM;
        for (yaml_node_item_t *i = node->data.sequence.items.start; i < node->data.sequence.items.top; i++) {
                yaml_node_t *item = yaml_document_get_node(ctx->doc, *i);

                e.index = n;
                nodes[n] = item ?: node;
                n++;
                r = item ? parse_shared_resource(&e, item, mps, &list[n - 1]) :
                           entry_error(&e, node, NULL, "malformed list");
                if (r < 0) {
                        shared_resources_free(list, n);
                        return r;
                }
        }
        shared_resources_free(sh->resources, sh->n_resources);   /* a key given twice: the last one counts */
        sh->resources = list;
        sh->n_resources = n;
        if (mps)
                ctx->mps_resources_line = node->start_mark.line + 1;
        else
                ctx->time_slicing_resources_line = node->start_mark.line + 1;
        return check_shared_resources(&e, sh, nodes, mps);
}

/* resources.gpus / resources.mig: the NVIDIA plugin's custom resource names. Only entries
 * naming the resource kgpu advertises anyway are accepted. */
static int parse_resource_patterns(ParseContext *ctx, const ConfigOption *o, const char *key, yaml_node_t *node) {
        bool mig = streq(key, "resources.mig");
        EntryContext e = { .ctx = ctx, .key = key };

        if (node->type == YAML_SCALAR_NODE && node->data.scalar.length == 0)
                return 0;       /* null */
        if (node->type != YAML_SEQUENCE_NODE)
                return parse_error(ctx, node, key, "expected a list of {pattern, name}");
        for (yaml_node_item_t *i = node->data.sequence.items.start; i < node->data.sequence.items.top; i++, e.index++) {
                yaml_node_t *item = yaml_document_get_node(ctx->doc, *i);
                const yaml_node_t *pattern = NULL, *name = NULL;
                _cleanup_free_ char *full = NULL, *want = NULL;
                const char *why = NULL;
                int r;

                if (e.index >= CONFIG_LIST_MAX)
                        return parse_error(ctx, node, key, "more than %u entries", CONFIG_LIST_MAX);
                if (!item || item->type != YAML_MAPPING_NODE)
                        return entry_error(&e, item ?: node, NULL, "expected a mapping (pattern, name)");
                for (yaml_node_pair_t *p = item->data.mapping.pairs.start; p < item->data.mapping.pairs.top; p++) {
                        yaml_node_t *k = yaml_document_get_node(ctx->doc, p->key);
                        yaml_node_t *v = yaml_document_get_node(ctx->doc, p->value);

                        if (!k || !v || !scalar_ok(k))
                                return entry_error(&e, item, NULL, "malformed mapping");
                        if (!scalar_ok(v))
                                return entry_error(&e, v, scalar(k), "expected a single value");
                        if (streq(scalar(k), "pattern"))
                                pattern = v;
                        else if (streq(scalar(k), "name"))
                                name = v;
                        else
                                return entry_error(&e, k, NULL, "unknown key '%s'", scalar(k));
                }
                if (!pattern)
                        return entry_error(&e, item, "pattern", "required, not given");
                if (!name)
                        return entry_error(&e, item, "name", "required, not given");
                r = resource_name_parse(scalar(name), &full, &why);
                if (r == -ENOMEM)
                        return r;
                if (r < 0)
                        return entry_error(&e, name, "name", "%s, got '%s'", why, scalar(name));
                if (mig) {
                        if (asprintf(&want, RESOURCE_NAME_PREFIX "mig-%s", scalar(pattern)) < 0) {
                                want = NULL;
                                return -ENOMEM;
                        }
                } else if (!(want = strdup(RESOURCE_NAME_PREFIX "gpu")))
                        return -ENOMEM;
                if (!streq(full, want))
                        return entry_error(&e, name, "name", "%s, got '%s'", o->help, scalar(name));
        }
        log_notice("%s:%zu: %s: only default names, accepted.", ctx->name, node->start_mark.line + 1, key);
        return 0;
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

static int parse_value(ParseContext *ctx, const char *key, yaml_node_t *node) {
        const ConfigOption *o = option_by_key(key);
        const char *why = NULL;
        int r;

        if (!o) {
                /* "sharing:" or "mps:" with nothing under it is null, as in the NVIDIA plugin. */
                if (node->type == YAML_SCALAR_NODE && node->data.scalar.length == 0 &&
                    node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && key_is_section(key))
                        return 0;
                return parse_error(ctx, node, NULL, "unknown key '%s'", key);
        }
        if (o->type == OPTION_SHARED_RESOURCES)
                return parse_shared_resources(ctx, o, key, node);
        if (o->type == OPTION_RESOURCE_PATTERNS)
                return parse_resource_patterns(ctx, o, key, node);

        if (node->type == YAML_SEQUENCE_NODE) {
                _cleanup_strv_free_ char **l = NULL;
                uint32_t set = 0;

                if (o->type != OPTION_STRV && o->type != OPTION_DEVICE_LIST_STRATEGY &&
                    o->type != OPTION_IGNORED && o->type != OPTION_EMPTY_ONLY)
                        return parse_error(ctx, node, key, "expected a single value, got a list");
                for (yaml_node_item_t *i = node->data.sequence.items.start; i < node->data.sequence.items.top; i++) {
                        yaml_node_t *n = yaml_document_get_node(ctx->doc, *i);

                        if (!n || n->type != YAML_SCALAR_NODE)
                                return parse_error(ctx, n ?: node, key, "list items must be plain values");
                        if (n->data.scalar.length > CONFIG_SCALAR_MAX || strlen((char *) n->data.scalar.value) != n->data.scalar.length)
                                return parse_error(ctx, n, key, "invalid list item");
                        if (o->type == OPTION_DEVICE_LIST_STRATEGY) {
                                uint32_t bit;

                                if (device_list_strategy_from_string((char *) n->data.scalar.value, &bit) < 0)
                                        return parse_error(ctx, n, key, "expected envvar, volume-mounts, cdi-annotations or cdi-cri, got '%s'",
                                                           (char *) n->data.scalar.value);
                                set |= bit;
                                continue;
                        }
                        if (o->type == OPTION_IGNORED && o->names && !names_contain(o->names, (char *) n->data.scalar.value))
                                return parse_error(ctx, n, key, "not supported by kgpu, got '%s'", (char *) n->data.scalar.value);
                        if (strv_extend(&l, (char *) n->data.scalar.value) < 0)
                                return -ENOMEM;
                }
                switch (o->type) {
                case OPTION_DEVICE_LIST_STRATEGY:
                        if (set == 0)
                                return parse_error(ctx, node, key, "expected at least one of envvar, volume-mounts, cdi-annotations, cdi-cri");
                        *(uint32_t *) ((uint8_t *) ctx->config + o->offset) = set;
                        return 0;
                case OPTION_IGNORED:
                        log_ignored(ctx, o, key, node);
                        return 0;
                case OPTION_EMPTY_ONLY:
                        if (l)
                                return parse_error(ctx, node, key, "not supported by kgpu (%s), only an empty list is accepted", o->help);
                        return 0;
                default:
                        break;
                }
                strv_free(*(char ***) ((uint8_t *) ctx->config + o->offset));
                *(char ***) ((uint8_t *) ctx->config + o->offset) = TAKE_PTR(l);
                return 0;
        }
        if (node->type != YAML_SCALAR_NODE)
                return parse_error(ctx, node, key, "expected a value, got a mapping");
        if (strlen((char *) node->data.scalar.value) != node->data.scalar.length)
                return parse_error(ctx, node, key, "value contains a NUL byte");

        r = option_set(ctx->config, o, (char *) node->data.scalar.value, &why);
        if (r == -ENOMEM)
                return r;
        if (r == -EOPNOTSUPP)
                return parse_error(ctx, node, key, "%s (%s), got '%s'", why, o->help, (char *) node->data.scalar.value);
        if (r < 0)
                return parse_error(ctx, node, key, "%s, got '%s'", why, (char *) node->data.scalar.value);
        if (o->type == OPTION_IGNORED)
                log_ignored(ctx, o, key, node);
        return 0;
}

static int parse_mapping(ParseContext *ctx, const char *prefix, yaml_node_t *node, unsigned depth) {
        if (depth > CONFIG_DEPTH_MAX)
                return parse_error(ctx, node, prefix, "nesting too deep");
        if (node->type != YAML_MAPPING_NODE)
                return parse_error(ctx, node, prefix, "expected a mapping");

        for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
                yaml_node_t *k = yaml_document_get_node(ctx->doc, p->key);
                yaml_node_t *v = yaml_document_get_node(ctx->doc, p->value);
                _cleanup_free_ char *key = NULL;
                int r;

                if (!k || !v)
                        return parse_error(ctx, node, prefix, "malformed mapping");
                if (k->type != YAML_SCALAR_NODE || k->data.scalar.length == 0 ||
                    k->data.scalar.length > 128 || strlen((char *) k->data.scalar.value) != k->data.scalar.length)
                        return parse_error(ctx, k, prefix, "keys must be short plain names");
                if (!is_printable((char *) k->data.scalar.value))
                        return parse_error(ctx, k, prefix, "key contains control characters");

                if (prefix) {
                        if (asprintf(&key, "%s.%s", prefix, (char *) k->data.scalar.value) < 0)
                                return -ENOMEM;
                } else {
                        key = strdup((char *) k->data.scalar.value);
                        if (!key)
                                return -ENOMEM;
                }

                if (v->type == YAML_MAPPING_NODE && streq(key, "sharing.timeSlicing"))
                        ctx->time_slicing_line = v->start_mark.line + 1;
                else if (v->type == YAML_MAPPING_NODE && streq(key, "sharing.mps"))
                        ctx->mps_line = v->start_mark.line + 1;
                if (v->type == YAML_MAPPING_NODE && !option_by_key(key))
                        r = parse_mapping(ctx, key, v, depth + 1);
                else
                        r = parse_value(ctx, key, v);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* What the NVIDIA plugin checks across the sharing sections. */
static int check_sharing_sections(ParseContext *ctx) {
        if (ctx->time_slicing_line && !ctx->time_slicing_resources_line)
                return parse_error_line(ctx, ctx->time_slicing_line, "sharing.timeSlicing", "no resources specified");
        if (ctx->mps_line && !ctx->mps_resources_line)
                return parse_error_line(ctx, ctx->mps_line, "sharing.mps", "no resources specified");
        if (ctx->time_slicing_resources_line && ctx->mps_resources_line)
                return parse_error_line(ctx, ctx->mps_line, "sharing.mps",
                                        "time-slicing and MPS are mutually exclusive (sharing.timeSlicing is at line %zu)",
                                        ctx->time_slicing_line);
        return 0;
}

static int parse_yaml(Config *c, const char *text, size_t len, const char *name, char **ret_error) {
        ParseContext ctx = { .config = c, .name = name };
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
        if (!root)
                r = 0;  /* empty file: all defaults */
        else if (root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0)
                r = 0;
        else
                r = parse_mapping(&ctx, NULL, root, 0);
        if (r >= 0)
                r = check_sharing_sections(&ctx);
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
                        r = option_set(c, &options[i], v, &why);
                        if (r == -ENOMEM)
                                return r;
                        if (r < 0) {
                                if (asprintf(ret_error, "environment variable %s: %s, got '%s'",
                                             options[i].env[j], why, v) < 0)
                                        *ret_error = NULL;
                                return r;
                        }
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
                r = option_set(c, o, ov[i].value ?: (o->type == OPTION_BOOL ? "true" : ""), &why);
                if (r == -ENOMEM)
                        return r;
                if (r < 0) {
                        if (asprintf(ret_error, "--%s: %s, got '%s'", ov[i].flag, why, ov[i].value ?: "") < 0)
                                *ret_error = NULL;
                        return r;
                }
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
                r = parse_yaml(c, text, len, name, &error);
                if (r < 0)
                        goto fail;
                c->file = strdup(name);
                if (!c->file)
                        return -ENOMEM;
        }
        r = apply_environment(c, &error);
        if (r < 0)
                goto fail;
        r = apply_overrides(c, overrides, n_overrides, &error);
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
        return config_build(text, len, name ?: "<string>", overrides, n_overrides, ret, ret_error);
}

int config_load(const char *config_path,
                const ConfigOverride *overrides, size_t n_overrides,
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
                                return config_build(NULL, 0, path, overrides, n_overrides, ret, ret_error);
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
                return config_build(text, len, path, overrides, n_overrides, ret, ret_error);
        }
        return config_build(NULL, 0, "", overrides, n_overrides, ret, ret_error);
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
