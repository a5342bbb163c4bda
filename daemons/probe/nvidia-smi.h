/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-smi.h — pure parsers for the output of nvidia-smi and nvidia-cuda-mps-control.
 *
 * Contract: every parser takes the raw bytes a tool wrote (hostile: any bytes, any
 * length, CRLF or LF, ANSI escapes, a missing final newline) and never spawns, reads
 * files or logs above debug. Results are plain structs with fixed-size, NUL-terminated,
 * validated fields, returned in one calloc'ed array the caller free()s. On failure the
 * ret_* arguments are not written, except *ret_error (optional, may be NULL), which
 * receives a malloc'ed one-line explanation ("line 3: memory.total: 'x' is not a
 * number") suitable for the caller's log line.
 * Errors: -EBADMSG garbage or an unexpected format; -E2BIG input or a count over the
 * limits below; -ENOMEM; and for recognised nvidia-smi error outputs the errno of
 * nvidia_smi_error_to_errno() (-ENODEV no devices, -ENXIO driver unreachable or NVML
 * failed, -EIO a lost GPU, -EINVAL an option the tool refused).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/cleanup.h"

#define NVIDIA_SMI_OUTPUT_MAX   (4U * 1024U * 1024U)
#define NVIDIA_SMI_LINE_MAX     16384U
#define NVIDIA_GPUS_MAX         64U
#define NVIDIA_MIG_DEVICES_MAX  (NVIDIA_GPUS_MAX * 8U * 8U)
#define NVIDIA_QUERY_FIELDS_MAX 512U
#define NVIDIA_TOPO_COLUMNS_MAX 256U
#define NVIDIA_MPS_SERVERS_MAX  4096U

/* Fixed field sizes (including the NUL). */
#define NVIDIA_UUID_MAX         80U     /* "MIG-GPU-<36>/<gi>/<ci>" is the longest form */
#define NVIDIA_NAME_MAX         96U
#define NVIDIA_PROFILE_MAX      32U
#define NVIDIA_VERSION_MAX      32U
#define NVIDIA_PCI_ADDRESS_MAX  20U     /* "dddd:bb:dd.f", domain up to 8 digits */
#define NVIDIA_CPU_AFFINITY_MAX 128U
#define NVIDIA_MESSAGE_MAX      256U

typedef enum NvidiaComputeMode {
        NVIDIA_COMPUTE_MODE_UNKNOWN = 0,
        NVIDIA_COMPUTE_MODE_DEFAULT,
        NVIDIA_COMPUTE_MODE_EXCLUSIVE_THREAD,
        NVIDIA_COMPUTE_MODE_PROHIBITED,
        NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS,
} NvidiaComputeMode;

typedef enum NvidiaMigMode {
        NVIDIA_MIG_MODE_UNSUPPORTED = 0,        /* "[N/A]": not a MIG-capable GPU */
        NVIDIA_MIG_MODE_DISABLED,
        NVIDIA_MIG_MODE_ENABLED,
} NvidiaMigMode;

typedef struct NvidiaGpu {
        uint32_t index;
        char uuid[NVIDIA_UUID_MAX];             /* "GPU-xxxxxxxx-...", "" unknown */
        char name[NVIDIA_NAME_MAX];             /* "" unknown */
        uint64_t memory_mib;                    /* 0 unknown */
        char pci_address[NVIDIA_PCI_ADDRESS_MAX]; /* sysfs form, lower case, "" unknown */
        uint32_t pci_device_id;                 /* 0x233010DE (device << 16 | vendor), 0 unknown */
        NvidiaComputeMode compute_mode;
        NvidiaMigMode mig_mode;
        char driver_version[NVIDIA_VERSION_MAX];
        char compute_cap[NVIDIA_VERSION_MAX];   /* "9.0" (query field compute_cap), "" unknown */
} NvidiaGpu;

typedef struct NvidiaMigDevice {
        uint32_t gpu_index;                     /* the GPU line it belongs to (-L) */
        uint32_t device_index;                  /* "Device N", restarts at 0 per GPU */
        char profile[NVIDIA_PROFILE_MAX];       /* "1g.10gb", "1c.3g.71gb", "1g.10gb+me" */
        char uuid[NVIDIA_UUID_MAX];             /* "MIG-<uuid>" or R450 "MIG-GPU-<uuid>/7/0" */
        int32_t gi_id, ci_id;                   /* -1 unless the UUID carries them */
} NvidiaMigDevice;

/* One row of `nvidia-smi mig -lgi` (ci_id == -1) or `-lci`. */
typedef struct NvidiaMigInstance {
        uint32_t gpu_index;
        uint32_t gi_id;
        int32_t ci_id;
        char profile[NVIDIA_PROFILE_MAX];       /* without the "MIG " prefix */
        uint32_t profile_id;
        uint32_t placement_start, placement_size;
} NvidiaMigInstance;

typedef enum NvidiaLinkType {
        NVIDIA_LINK_UNKNOWN = 0,
        NVIDIA_LINK_SELF,       /* X */
        NVIDIA_LINK_NVLINK,     /* NV# */
        NVIDIA_LINK_PIX,
        NVIDIA_LINK_PXB,
        NVIDIA_LINK_PHB,
        NVIDIA_LINK_NODE,
        NVIDIA_LINK_SYS,
} NvidiaLinkType;

typedef struct NvidiaLink {
        uint8_t type;           /* NvidiaLinkType */
        uint8_t nvlinks;        /* bonded NVLinks for NVIDIA_LINK_NVLINK */
} NvidiaLink;

typedef struct NvidiaTopology {
        uint32_t n_gpus;
        NvidiaLink link[NVIDIA_GPUS_MAX][NVIDIA_GPUS_MAX];
        int32_t numa_node[NVIDIA_GPUS_MAX];     /* -1 unknown ("N/A", empty, old drivers) */
        char cpu_affinity[NVIDIA_GPUS_MAX][NVIDIA_CPU_AFFINITY_MAX]; /* "0-51,104-155" or "" */
} NvidiaTopology;

typedef struct NvidiaVersions {
        char driver[NVIDIA_VERSION_MAX];        /* "535.129.03" (KMD version on Windows R610) */
        char cuda[NVIDIA_VERSION_MAX];          /* "12.2", "" when not printed (R390 and older) */
} NvidiaVersions;

typedef enum NvidiaSmiErrorKind {
        NVIDIA_SMI_ERROR_NONE = 0,
        NVIDIA_SMI_ERROR_NO_DEVICES,            /* "No devices were found" */
        NVIDIA_SMI_ERROR_DRIVER,                /* "couldn't communicate with the NVIDIA driver" */
        NVIDIA_SMI_ERROR_NVML,                  /* "Failed to initialize NVML: ..." */
        NVIDIA_SMI_ERROR_GPU_LOST,              /* "Unable to determine the device handle for GPU ..." */
        NVIDIA_SMI_ERROR_INVALID_OPTION,        /* "ERROR: Option ..." */
} NvidiaSmiErrorKind;

typedef struct NvidiaSmiError {
        NvidiaSmiErrorKind kind;
        char pci_address[NVIDIA_PCI_ADDRESS_MAX]; /* the lost GPU, when named */
        char message[NVIDIA_MESSAGE_MAX];       /* the tool's line, sanitised, maybe cut */
} NvidiaSmiError;

/* The field list the probe asks for (--query-gpu=... --format=csv,noheader,nounits). */
#define NVIDIA_SMI_QUERY_FIELDS \
        "index,uuid,name,memory.total,pci.bus_id,pci.device_id,compute_mode,mig.mode.current,driver_version"

const char *nvidia_compute_mode_to_string(NvidiaComputeMode m);
/* "Default", "Exclusive_Process", "E. Process", "EXCLUSIVE_PROCESS", "3", ... */
int nvidia_compute_mode_from_string(const char *s, NvidiaComputeMode *ret);
const char *nvidia_link_type_to_string(NvidiaLinkType t);

/* "GPU-" + 8-4-4-4-12 hex digits. */
bool nvidia_gpu_uuid_is_valid(const char *s);
/* "MIG-" + 8-4-4-4-12 hex, or "MIG-GPU-<gpu uuid>/<gi>/<ci>". */
bool nvidia_mig_uuid_is_valid(const char *s);
/* "00000000:83:00.0", "0000:04:00.0", "00002C74:00:00.0" -> "0000:83:00.0" (sysfs form). */
int nvidia_pci_address_normalize(const char *s, char ret[static NVIDIA_PCI_ADDRESS_MAX]);

/* Recognises the error outputs of nvidia-smi anywhere in text. Returns 1 and fills
 * *ret when one is found, 0 when none is (ret->kind = NONE), <0 on bad input. */
int nvidia_smi_parse_error(const char *text, size_t len, NvidiaSmiError *ret);
int nvidia_smi_error_to_errno(NvidiaSmiErrorKind kind);

/* --query-gpu CSV. fields: the comma-separated list given to --query-gpu when the output
 * has no header (noheader), or NULL when the first line is the header. Values with or
 * without units (nounits) are accepted; unknown fields are ignored; fields not queried
 * stay unknown; without "index" the row number is the index. */
int nvidia_smi_parse_query_gpu(const char *text, size_t len, const char *fields,
                               NvidiaGpu **ret, size_t *ret_n, char **ret_error);

/* The same for health polls: a GPU that nvidia-smi reports lost ("Unable to determine
 * the device handle for GPU<bus>: ...") is returned in *ret_lost (kind GPU_LOST, its PCI
 * address when named) instead of failing the whole answer; the other GPUs' rows are
 * parsed as usual (*ret may be NULL with *ret_n 0 when every GPU is lost). Any other
 * error output still fails. */
int nvidia_smi_parse_query_gpu_health(const char *text, size_t len, const char *fields,
                                      NvidiaGpu **ret, size_t *ret_n, NvidiaSmiError **ret_lost,
                                      size_t *ret_n_lost, char **ret_error);

/* nvidia-smi -L: GPUs (index, name, uuid set; the rest unknown) and their MIG devices.
 * ret_migs/ret_n_migs may be NULL. */
int nvidia_smi_parse_list(const char *text, size_t len,
                          NvidiaGpu **ret_gpus, size_t *ret_n_gpus,
                          NvidiaMigDevice **ret_migs, size_t *ret_n_migs, char **ret_error);

/* One row of `nvidia-smi mig -lgip` (GPU instance profiles). */
typedef struct NvidiaMigProfile {
        uint32_t gpu_index;
        char profile[NVIDIA_PROFILE_MAX];       /* "1g.10gb", "1g.10gb+me" */
        uint32_t profile_id;
        uint32_t free, total;                   /* instances */
        uint64_t memory_mib;                    /* "9.50" GiB -> 9728 */
        bool p2p;
        uint32_t sm;
} NvidiaMigProfile;

/* nvidia-smi mig -lgip. */
int nvidia_smi_parse_mig_profiles(const char *text, size_t len, NvidiaMigProfile **ret, size_t *ret_n,
                                  char **ret_error);

/* One "MIG Device" block of `nvidia-smi -q`: it ties the -L device index to its GPU
 * and compute instance (which name the MIG capability device nodes). */
typedef struct NvidiaQMigDevice {
        char pci_address[NVIDIA_PCI_ADDRESS_MAX];       /* of the GPU block */
        uint32_t device_index;
        uint32_t gi_id, ci_id;
        uint64_t memory_mib;                            /* its (Shared) FB Memory Usage Total, 0 unknown */
} NvidiaQMigDevice;

/* nvidia-smi -q: the MIG devices of every GPU block (0 when MIG is off). */
int nvidia_smi_parse_q_mig_devices(const char *text, size_t len, NvidiaQMigDevice **ret, size_t *ret_n,
                                   char **ret_error);
/* One GPU block of `nvidia-smi -q`: its PCI address and the minor number of its
 * /dev/nvidiaN node. */
typedef struct NvidiaQGpu {
        char pci_address[NVIDIA_PCI_ADDRESS_MAX];
        int32_t minor_number;                           /* -1 when not printed or N/A */
} NvidiaQGpu;

/* nvidia-smi -q: every GPU block with its "Minor Number" (0..255). */
int nvidia_smi_parse_q_gpus(const char *text, size_t len, NvidiaQGpu **ret, size_t *ret_n, char **ret_error);

/* The plain nvidia-smi table: its "MIG devices:" box (GPU, GI ID, CI ID, MIG Dev and the
 * memory cell), each device's pci_address the bus id the GPU box gives that GPU index;
 * memory_mib 0 where the cell is shared with the row above. No MIG box (or "No MIG
 * devices found"): 0 devices, *ret NULL. -EBADMSG when there is no GPU box, a MIG row
 * is malformed, names a GPU the GPU box lacks or repeats a device. */
int nvidia_smi_parse_summary_mig_devices(const char *text, size_t len, NvidiaQMigDevice **ret, size_t *ret_n,
                                         char **ret_error);

/* Sets gi_id/ci_id of each -L MIG device from -q, going through the GPU's PCI address
 * (gpus: from --query-gpu, with index and pci_address). Returns how many were set;
 * -ENXIO when a MIG device has no match (the two answers disagree: query again). */
int nvidia_mig_devices_set_instance_ids(NvidiaMigDevice *migs, size_t n_migs, const NvidiaGpu *gpus,
                                        size_t n_gpus, const NvidiaQMigDevice *q, size_t n_q);

/* nvidia-smi mig -lgi / -lci tables; "No GPU instances found" and "No compute
 * instances found" are empty lists (0 returned, *ret NULL). */
int nvidia_smi_parse_mig_instances(const char *text, size_t len, bool compute_instances,
                                   NvidiaMigInstance **ret, size_t *ret_n, char **ret_error);

/* nvidia-smi topo -m (tab-separated or tab-expanded copies, NIC columns ignored). */
int nvidia_smi_parse_topology(const char *text, size_t len, NvidiaTopology **ret, char **ret_error);

/* Driver and CUDA versions from the plain nvidia-smi table or from -q. */
int nvidia_smi_parse_versions(const char *text, size_t len, NvidiaVersions *ret, char **ret_error);

/* nvidia-smi [-i N] -c MODE reply: 0 and the mode set ("Set compute mode to X for GPU
 * ... All done."), -EOPNOTSUPP when refused ("Unable to set the compute mode ...: Not
 * Supported", MIG), -EBADMSG otherwise. */
int nvidia_smi_parse_compute_mode_reply(const char *text, size_t len, NvidiaComputeMode *ret_mode,
                                        char **ret_error);

/* nvidia-smi -i N --query-gpu=compute_mode --format=csv,noheader: the one GPU's mode
 * ("Default", "Exclusive_Process", ...). The errno of a recognised nvidia-smi error
 * (a lost GPU: -EIO), -EBADMSG for anything else, none or more than one line. */
int nvidia_smi_parse_compute_mode_query(const char *text, size_t len, NvidiaComputeMode *ret_mode,
                                        char **ret_error);

/* nvidia-cuda-mps-control answers. A command with no answer (quit,
 * set_default_device_pinned_mem_limit, -d) prints nothing: 0. "Cannot find MPS control
 * daemon process" (the real tool writes it on stderr, so parse both streams): -ESRCH.
 * "An instance of this daemon is already running" (-d): -EEXIST. Anything else
 * unexpected: -EBADMSG. */
int nvidia_mps_parse_reply(const char *text, size_t len, char **ret_error);
/* The answer to set_default_active_thread_percentage (after any number of commands that
 * print nothing): the percentage in force, which the tool prints back ("8.0", "33.5";
 * the old one when it refused the new value), in tenths of a percent. -ESRCH as above,
 * -EBADMSG for anything else, none or more than one. */
int nvidia_mps_parse_percentage_reply(const char *text, size_t len, uint32_t *ret_tenths, char **ret_error);
/* get_server_list: one PID per line (possibly none). */
int nvidia_mps_parse_server_list(const char *text, size_t len, pid_t **ret, size_t *ret_n, char **ret_error);
