/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * config.h — kgpu.yaml, environment and command-line options, one table for all.
 *
 * Every option has a dotted YAML key ("kubelet.devicePluginPath"), optionally an
 * environment variable and a long command-line flag. Precedence, lowest first:
 * built-in default < file < environment < command line. config_load() applies them in
 * that order into a fresh Config; on any error nothing is returned, so a daemon never
 * runs half-configured. Errors are logged once by the caller from ret_error, which names
 * the file, line and key ("/etc/kgpu/kgpu.yaml:12: intel.sharedDevNum: expected an
 * unsigned integer, got 'x'"), the variable or the flag.
 *
 * Unknown keys in kgpu's own sections are errors. The file may be absent only when it
 * is the default path; a path given by flag or environment must exist.
 *
 * The NVIDIA device plugin's `version: v1` file is a kgpu.yaml as it is: its flags.*,
 * sharing.*, resources.*, imex.* and health.* keys are in the same table, and kgpu
 * accepts every file upstream accepts. In those sections a null value leaves a key unset
 * and an unknown key is logged at warning and ignored, as upstream. Keys kgpu has no use
 * for are logged at notice; values asking for what kgpu does not do (gdsEnabled: true,
 * custom resource names, IMEX channel 0, a tegra device discovery, a devices count) are
 * accepted and logged at warning ("accepted, no effect in kgpu"). Both sharing sections:
 * MPS wins, as upstream. A sharing section present needs a non-empty resources list.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <getopt.h>

#include "common/cleanup.h"

#define KGPU_CONFIG_FILE_DEFAULT KGPU_SYSCONFDIR "/kgpu/kgpu.yaml"

typedef enum ConfigAllocationPolicy {
        ALLOCATION_POLICY_NONE,
        ALLOCATION_POLICY_BALANCED,
        ALLOCATION_POLICY_PACKED,
} ConfigAllocationPolicy;

/* intel.byPath: how /dev/dri/by-path links reach a container (the Intel plugin's -bypath). */
typedef enum ConfigByPath {
        BY_PATH_SINGLE,                 /* each allocated GPU's links, read-only bind mounts */
        BY_PATH_ALL,                    /* the whole /dev/dri/by-path directory, read-only */
        BY_PATH_NONE,
} ConfigByPath;

/* intel.monitoringMode (the Intel plugin's -monitoring-mode): the monitoring resource(s)
 * that intel.enableMonitoring advertises. */
typedef enum ConfigIntelMonitoringMode {
        INTEL_MONITORING_MODE_SINGLE,   /* one gpu.intel.com/monitoring for every Intel GPU (default) */
        INTEL_MONITORING_MODE_SPLIT,    /* gpu.intel.com/i915_monitoring and xe_monitoring, per driver */
} ConfigIntelMonitoringMode;

/* flags.migStrategy (the NVIDIA plugin's -mig-strategy, MIG_STRATEGY). */
typedef enum ConfigMigStrategy {
        MIG_STRATEGY_NONE,              /* every GPU is one nvidia.com/gpu, MIG ignored */
        MIG_STRATEGY_SINGLE,            /* every GPU has MIG on with one profile: its MIG devices are nvidia.com/gpu */
        MIG_STRATEGY_MIXED,             /* nvidia.com/gpu for non-MIG GPUs, nvidia.com/mig-<profile> per MIG device */
} ConfigMigStrategy;

/* flags.plugin.deviceIDStrategy (DEVICE_ID_STRATEGY, --device-id-strategy). */
typedef enum ConfigDeviceIdStrategy {
        DEVICE_ID_STRATEGY_UUID,        /* GPU-..., MIG-... */
        DEVICE_ID_STRATEGY_INDEX,       /* "0", MIG: "<gpu index>:<mig device index>" */
} ConfigDeviceIdStrategy;

/* flags.plugin.deviceListStrategy: a set (the NVIDIA plugin accepts one value or a list). */
#define DEVICE_LIST_STRATEGY_ENVVAR          (1U << 0)  /* NVIDIA_VISIBLE_DEVICES=<ids> */
#define DEVICE_LIST_STRATEGY_VOLUME_MOUNTS   (1U << 1)  /* /dev/null mounted at /var/run/nvidia-container-devices/<id> */
#define DEVICE_LIST_STRATEGY_CDI_ANNOTATIONS (1U << 2)  /* <cdiAnnotationPrefix>nvidia-device-plugin_<uid> = nvidia.com/gpu=<id>,... */
#define DEVICE_LIST_STRATEGY_CDI_CRI         (1U << 3)  /* ContainerAllocateResponse.cdi_devices */

/* replica placement for GetPreferredAllocation of shared (replicated) NVIDIA resources. */
/* How the probe runs MPS control daemons (mps.c, mps-systemd.c). */
typedef enum ConfigMpsLauncher {
        MPS_LAUNCHER_AUTO,              /* systemd when it answers on the probe's bus, else direct */
        MPS_LAUNCHER_SYSTEMD,           /* kgpu-mps@<uuid>.service through systemd's D-Bus API */
        MPS_LAUNCHER_DIRECT,            /* nvidia-cuda-mps-control -d from the probe */
} ConfigMpsLauncher;

typedef enum ConfigReplicaPolicy {
        REPLICA_POLICY_DISTRIBUTED,     /* spread over the GPUs with the fewest replicas in use */
        REPLICA_POLICY_PACKED,          /* fill the GPU with the most replicas in use first */
} ConfigReplicaPolicy;

/* One entry of sharing.timeSlicing.resources[] or sharing.mps.resources[]. Names are
 * always full ("gpu" in the file is stored as "nvidia.com/gpu", as the NVIDIA plugin does).
 * Within one section, no two entries advertise the same name on overlapping devices, and a
 * time-sliced device has one entry per name; MPS entries of one GPU may differ in size. */
typedef struct ConfigSharedResource {
        char *name;             /* "nvidia.com/gpu", "nvidia.com/mig-1g.10gb" (required; MPS: gpu only) */
        char *rename;           /* NULL: name, or "<name>.shared" with renameByDefault (an explicit rename wins) */
        uint32_t replicas;      /* required; time-slicing 2..1024 (as the NVIDIA plugin), MPS 1..1024 (nos fork) */
        uint64_t memory_bytes;  /* MPS only (nos fork): memoryGB * 2^30 per replica; 0: GPU memory / replicas */
        char **devices;         /* NULL: "all"; else GPU indexes ("0", never "007"), MIG indexes ("0:1"),
                                 * GPU UUIDs or MIG UUIDs, each once (MPS: no MIG ones) */
} ConfigSharedResource;

/* sharing.timeSlicing or sharing.mps. */
typedef struct ConfigSharing {
        bool rename_by_default;                 /* renameByDefault */
        bool fail_requests_greater_than_one;    /* failRequestsGreaterThanOne (default: false, MPS true) */
        ConfigSharedResource *resources;        /* resources[] */
        size_t n_resources;
} ConfigSharing;

typedef struct Config {
        char *file;                     /* file read, NULL if none */

        char *log_level;                /* logLevel, KGPU_LOG_LEVEL, --log-level */

        /* Directories and sockets. */
        char *state_directory;          /* stateDirectory, STATE_DIRECTORY */
        char *runtime_directory;        /* runtimeDirectory, RUNTIME_DIRECTORY */
        char *device_plugin_path;       /* kubelet.devicePluginPath, KGPU_DEVICE_PLUGIN_PATH, --device-plugin-path */
        char *kubelet_socket;           /* kubelet.socket; default: device_plugin_path/kubelet.sock */
        char *pod_resources_socket;     /* kubelet.podResourcesSocket, KGPU_POD_RESOURCES_SOCKET, --pod-resources-socket */

        /* Users the daemons drop to when started as root. */
        char *grpc_user;                /* grpc.user, KGPU_GRPC_USER, --user (grpcd) */
        char *broker_user;              /* broker.user, KGPU_BROKER_USER, --user (brokerd) */

        /* grpcd tuning. */
        uint32_t grpc_max_connections;  /* grpc.maxConnections (default 64) */
        uint32_t grpc_max_streams;      /* grpc.maxStreamsPerConnection (default 32) */
        uint32_t grpc_max_message_size; /* grpc.maxMessageSize (default 4 MiB) */
        uint32_t register_timeout_ms;   /* kubelet.registerTimeoutMs (default 5000) */
        uint32_t broker_timeout_ms;     /* grpc.brokerTimeoutMs (default 2000) */
        uint32_t reconcile_interval_sec; /* kubelet.reconcileIntervalSec (default 30, 0: at start only) */
        uint32_t reconcile_grace_sec;   /* broker.reconcileGraceSec (default 60) */
        uint32_t max_allocations;       /* broker.maxAllocations (default 16384) */

        /* Intel. */
        bool intel_enabled;             /* intel.enabled (default true) */
        uint32_t intel_shared_dev_num;  /* intel.sharedDevNum, --shared-dev-num (default 1) */
        ConfigAllocationPolicy intel_allocation_policy; /* intel.allocationPolicy, --allocation-policy */
        char **intel_allow_ids;         /* intel.allowIDs: PCI device ids "0x56c0", empty = all */
        char **intel_deny_ids;          /* intel.denyIDs (never both lists: config_load() refuses it) */
        bool intel_enable_monitoring;   /* intel.enableMonitoring, -enable-monitoring */
        ConfigIntelMonitoringMode intel_monitoring_mode; /* intel.monitoringMode, -monitoring-mode (default single) */
        bool intel_resource_manager;    /* intel.resourceManager, -resource-manager: GAS's choice (gas-dbus.c) */
        bool intel_health_management;   /* intel.healthManagement, -health-management (accepted; health is udev's) */
        ConfigByPath intel_by_path;     /* intel.byPath, -bypath (default single) */
        bool intel_cdi_devices;         /* intel.cdiDevices: name CDI devices in Allocate answers */
        char *intel_memory_override;    /* intel.memoryOverride, GPU_MEMORY_OVERRIDE (bytes, probe parses) */
        char *intel_memory_reserved;    /* intel.memoryReserved, GPU_MEMORY_RESERVED (bytes, probe parses) */
        uint32_t intel_pci_grouping_level; /* intel.pciGroupingLevel, GPU_PCI_GROUPING_LEVEL (0..64) */

        /* NVIDIA (the NVIDIA device plugin's `version: v1` file, flags and variables). */
        char *nvidia_config_version;    /* version ("v1"; absent: NULL) */
        bool nvidia_enabled;            /* nvidia.enabled (default true; no nvidia-smi found = no NVIDIA GPUs) */
        ConfigMigStrategy nvidia_mig_strategy; /* flags.migStrategy, MIG_STRATEGY, --mig-strategy (default none) */
        bool nvidia_fail_on_init_error; /* flags.failOnInitError, FAIL_ON_INIT_ERROR, --fail-on-init-error (default true) */
        char *nvidia_driver_root;       /* flags.nvidiaDriverRoot, NVIDIA_DRIVER_ROOT, --nvidia-driver-root (default /) */
        char *nvidia_dev_root;          /* flags.nvidiaDevRoot, NVIDIA_DEV_ROOT, --nvidia-dev-root (NULL: the driver root) */
        bool nvidia_pass_device_specs;  /* flags.plugin.passDeviceSpecs, PASS_DEVICE_SPECS, --pass-device-specs (default false) */
        uint32_t nvidia_device_list_strategy; /* DEVICE_LIST_STRATEGY_* set; flags.plugin.deviceListStrategy,
                                               * DEVICE_LIST_STRATEGY, --device-list-strategy (default envvar) */
        ConfigDeviceIdStrategy nvidia_device_id_strategy; /* flags.plugin.deviceIDStrategy, DEVICE_ID_STRATEGY,
                                                           * --device-id-strategy (default uuid) */
        char *nvidia_cdi_annotation_prefix; /* flags.plugin.cdiAnnotationPrefix, CDI_ANNOTATION_PREFIX (default "cdi.k8s.io/") */
        char *nvidia_smi_path;          /* nvidia.smiPath, KGPU_NVIDIA_SMI (default: found under the driver root) */
        char *nvidia_mps_control_path;  /* nvidia.mpsControlPath, KGPU_NVIDIA_MPS_CONTROL (default: found likewise) */
        ConfigMpsLauncher nvidia_mps_launcher; /* nvidia.mpsLauncher, KGPU_NVIDIA_MPS_LAUNCHER: auto (default) | systemd | direct */
        uint32_t nvidia_health_interval_ms; /* nvidia.healthIntervalMs, KGPU_NVIDIA_HEALTH_INTERVAL_MS (default 10000, 0: no polling) */
        uint32_t nvidia_health_recover_polls; /* nvidia.healthRecoverPolls (default 3): good polls before Healthy again */
        ConfigReplicaPolicy nvidia_replica_policy; /* nvidia.replicaPolicy, flags.plugin.sharedDevicesAllocationPolicy:
                                                    * distributed (default) | packed */
        ConfigSharing nvidia_time_slicing;      /* sharing.timeSlicing */
        ConfigSharing nvidia_mps;               /* sharing.mps */
        /* The cluster side: kgpu-clusterd and the named NVIDIA configs a node label selects. */
        char *cluster_user;             /* cluster.user, KGPU_CLUSTER_USER (default kgpu-cluster) */
        char *cluster_kubeconfig;       /* cluster.kubeconfig, KUBECONFIG (NULL: in-cluster files) */
        char *cluster_node_name;        /* cluster.nodeName, NODE_NAME (NULL: the host name) */
        char *cluster_config_label;     /* cluster.configLabel, NODE_LABEL (default nvidia.com/device-plugin.config) */
        uint32_t cluster_request_timeout_sec;   /* cluster.requestTimeoutSec (default 30) */
        uint32_t cluster_min_watch_timeout_sec; /* cluster.minWatchTimeoutSec (default 300) */
        char *nvidia_configs_directory; /* nvidiaConfigs.directory, CONFIG_FILE_SRCDIR */
        char *nvidia_configs_default;   /* nvidiaConfigs.default, DEFAULT_CONFIG (NULL: kgpu.yaml's own) */
        /* Probe outputs; NULL (empty value) disables. */
        char *labels_feature_file;      /* labels.featureFile, KGPU_LABELS_FEATURE_FILE */
        char *cdi_spec_directory;       /* cdi.specDirectory, KGPU_CDI_SPEC_DIRECTORY (default /var/run/cdi) */
} Config;

Config *config_free(Config *c);
DEFINE_CLEANUP_FUNC(Config, config_free);

/* A command-line override collected by a daemon's main() before loading. */
typedef struct ConfigOverride {
        const char *flag;       /* long option name without "--" */
        const char *value;
} ConfigOverride;

/*
 * Builds the configuration. config_path: the file named by --config, or NULL (then
 * KGPU_CONFIG, CONFIG_FILE, then the default path). overrides: command-line values.
 * On failure returns negative errno and sets *ret_error to a message for the operator
 * (caller frees); *ret is untouched.
 */
int config_load(const char *config_path,
                const ConfigOverride *overrides, size_t n_overrides,
                Config **ret, char **ret_error);

/* Same, from a string (file name used in messages only). For tests and fuzzing. */
int config_load_string(const char *text, size_t len, const char *name,
                       const ConfigOverride *overrides, size_t n_overrides,
                       Config **ret, char **ret_error);

/* True if "--flag" is a config flag (takes a value). */
bool config_flag_known(const char *flag);

/* getopt_long entries for every config flag, terminated by a zero entry; val is
 * CONFIG_OPTION_VAL_BASE + index. Static storage. Boolean flags take an optional
 * argument ("--enable-monitoring" alone means true). Used with getopt_long_only(), the
 * Intel plugin's Go-style single-dash flags (-shared-dev-num 2, -enable-monitoring,
 * -bypath=all) are the same options. */
#define CONFIG_OPTION_VAL_BASE 0x1000
const struct option *config_getopt_options(void);
const char *config_flag_by_val(int val);
/* Prints "  --flag=VALUE    description" lines for --help. */
void config_print_flags_help(void);

const char *config_allocation_policy_to_string(ConfigAllocationPolicy p);
const char *config_by_path_to_string(ConfigByPath b);
const char *config_intel_monitoring_mode_to_string(ConfigIntelMonitoringMode m);
const char *config_mig_strategy_to_string(ConfigMigStrategy s);
const char *config_device_id_strategy_to_string(ConfigDeviceIdStrategy s);
const char *config_replica_policy_to_string(ConfigReplicaPolicy p);
/* "envvar,cdi-cri" for a DEVICE_LIST_STRATEGY_* set (written into buf). */
const char *config_device_list_strategy_to_string(uint32_t set, char *buf, size_t size);
/* The resource name a shared entry is advertised under: rename, else name + ".shared"
 * when rename_by_default, else name. Static storage is not used: returns a new string. */
char *config_shared_resource_name(const ConfigSharing *s, const ConfigSharedResource *r);
