/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia.h — the probe's NVIDIA module: inventory and health through nvidia-smi.
 *
 * Contract (issue 4, see the NVIDIA contract of io.kgpu.Gpu1):
 * - Inventory: nvidia_probe_inventory() runs, one after the other and each as a child on
 *   the sd-event loop (nvidia-runner, never blocking), `nvidia-smi --query-gpu=
 *   NVIDIA_INVENTORY_FIELDS`, `-L`, `-q` (minor numbers, MIG GI/CI, versions; the plain
 *   summary when -q has no CUDA version) and `topo -m` (cached: read at the first
 *   inventory and on every later one that asks for it: start, Rescan, reload), then builds
 *   one Gpu per NVIDIA GPU and hands it to the manager's add/update path; GPUs that
 *   nvidia-smi no longer lists (and does not report lost) are removed from the bus.
 *   Only the --query-gpu answer is required; -L, -q and topo -m failing leaves MIG
 *   devices, minor numbers / versions and links unknown (logged).
 * - Health: a timer every health_interval_ms (0: none, no wakeups) runs --query-gpu
 *   (never two at once: a tick while a poll or an inventory runs is skipped; a poll past
 *   its timeout fails). A GPU named lost or missing from the answer turns Unhealthy
 *   "gpu-lost"; a failing poll turns every NVIDIA GPU Unhealthy "nvidia-smi-failed: <msg>";
 *   recover_polls good polls in a row make it Healthy again. Other reasons (e.g. M's
 *   "mps-failed") are left alone. PropertiesChanged goes out in the same dispatch.
 * - No tool found: one notice, no NVIDIA GPU, nothing else (no timer either).
 * Functions return negative errno and log at the boundaries (tool failures at warning).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>

#include "common/cleanup.h"
#include "common/config.h"
#include "daemons/probe/gpu.h"
#include "daemons/probe/nvidia-smi.h"

struct Manager;

#define NVIDIA_INVENTORY_FIELDS NVIDIA_SMI_QUERY_FIELDS ",compute_cap"
#define NVIDIA_CAPS_MIG_MINORS_DEFAULT "/proc/driver/nvidia-caps/mig-minors"
#define NVIDIA_CAPS_MIG_MINORS_MAX (1024U * 1024U)
#define NVIDIA_REASON_GPU_LOST "gpu-lost"
#define NVIDIA_REASON_SMI_FAILED "nvidia-smi-failed"
/* The Id of a GPU nvidia-smi reported lost before its UUID was read: this + its PCI
 * address ("nvidia-pci-0000:02:00.0"). */
#define NVIDIA_LOST_ID_PREFIX "nvidia-pci-"

typedef struct NvidiaProbe NvidiaProbe;

int nvidia_probe_new(struct Manager *m, NvidiaProbe **ret);
NvidiaProbe *nvidia_probe_free(NvidiaProbe *p);
DEFINE_CLEANUP_FUNC(NvidiaProbe, nvidia_probe_free);

/* Before a configuration is taken (start, reload): with nvidia.enabled, the tools the
 * probe would run as root (nvidia.smiPath / nvidia.mpsControlPath, else the first found
 * under flags.nvidiaDriverRoot) and the driver and device roots (whenever set, used or not) must be
 * trusted (nvidia_path_check_trusted()). -EPERM and *ret_error (caller frees) naming the key and
 * the path ("nvidia.smiPath: refusing to run nvidia-smi as root: /opt/x/nvidia-smi is
 * owned by uid 1000, not root"); a tool not found is no error here. */
int nvidia_tools_check(const Config *c, char **ret_error);

/* flags.nvidiaDriverRoot ("/" when unset) and flags.nvidiaDevRoot (the driver root when
 * unset), as last configured. */
const char *nvidia_probe_driver_root(const NvidiaProbe *p);
const char *nvidia_probe_dev_root(const NvidiaProbe *p);

/* Takes nvidia.enabled, the driver root, nvidia.smiPath, failOnInitError and the health
 * settings; finds nvidia-smi (nvidia_tool_find) and (re)arms the health timer. */
int nvidia_probe_configure(NvidiaProbe *p, const Config *c);

/* Starts an inventory (no-op without a tool; when one runs, another follows it). */
int nvidia_probe_inventory(NvidiaProbe *p, bool refresh_topology);

/* Whether an inventory is under way. */
bool nvidia_probe_busy(const NvidiaProbe *p);

/* Runs the event loop until the inventory started by the manager's first rescan ended.
 * Returns 0, or the inventory's error when failOnInitError is set (logged clearly). */
int nvidia_probe_wait_initial(NvidiaProbe *p);

/* Replies to message (a Rescan call) when the current inventory ended: method return,
 * or org.freedesktop.DBus.Error.Failed with nvidia-smi's message. Returns 1 if queued,
 * 0 when no inventory runs (the caller replies itself). */
int nvidia_probe_reply_when_done(NvidiaProbe *p, sd_bus_message *message);

/* What the NVIDIA labels and the SetMps policy read of the configuration
 * (labels_nvidia_config_copy()); NULL before the first configuration. set takes c. */
const Config *nvidia_probe_config(const NvidiaProbe *p);
void nvidia_probe_set_config(NvidiaProbe *p, Config *c);

/* The last inventory's error (0 if it succeeded) and message ("" if none). */
int nvidia_probe_last_error(const NvidiaProbe *p, const char **ret_message);

/* Number of health polls completed so far (tests). */
uint64_t nvidia_probe_n_polls(const NvidiaProbe *p);

/* D-Bus strings must be UTF-8: bytes of invalid sequences (overlong forms, surrogates,
 * code points past U+10FFFF included) become '?', in place. */
void nvidia_utf8_sanitize(char *s);

/* Pure: the capability minor of "gpu<minor>/gi<gi>/access" (ci < 0) or
 * "gpu<minor>/gi<gi>/ci<ci>/access" in a mig-minors file text; -ENOENT if absent. */
int nvidia_mig_minor_lookup(const char *text, uint32_t gpu_minor, uint32_t gi, int32_t ci, uint32_t *ret);

/* Pure: builds the Gpu objects (sorted as given) from parsed answers. migs/q_migs/
 * q_gpus/topo/versions/mig_minors may be NULL/0 (unknown). */
int nvidia_build_gpus(const NvidiaGpu *gpus, size_t n_gpus,
                      const NvidiaMigDevice *migs, size_t n_migs,
                      const NvidiaQMigDevice *q_migs, size_t n_q_migs,
                      const NvidiaQGpu *q_gpus, size_t n_q_gpus,
                      const NvidiaTopology *topo, const NvidiaVersions *versions,
                      const char *mig_minors, Gpu ***ret, size_t *ret_n);
