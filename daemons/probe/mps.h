/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mps.h — the probe's per-GPU NVIDIA MPS controller (Probe1.SetMps), on sd-event.
 *
 * Every step runs an NVIDIA tool through nvidia-runner (never blocking the loop), or
 * queues a systemd job through mps-systemd (the "systemd" launcher, below):
 *   enable:  the compute mode to restore: nvidia-smi -i <index> --query-gpu=compute_mode,
 *            recorded in <mps dir>/<uuid>/compute-mode (written atomically, kept until
 *            MPS is off again, so a probe restarted in between restores it; an existing
 *            record is kept and the mode not read again), then nvidia-smi -i <index> -c
 *            EXCLUSIVE_PROCESS (reply checked), directories
 *            <mps dir>/<uuid>/{pipe,log} (0755), `get_server_list` to the control tool
 *            to find a daemon already serving that pipe directory (re-adoption), else
 *            the daemon is started: with CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY
 *            and CUDA_VISIBLE_DEVICES=<uuid>, either as `nvidia-cuda-mps-control -d` run
 *            by the probe (launcher "direct") or as kgpu-mps@<uuid>.service, restarted
 *            through systemd after <mps dir>/<uuid>/environment was written (launcher
 *            "systemd"). Then the limits on the control tool's stdin in one run:
 *              set_default_device_pinned_mem_limit 0 <MiB>M
 *              set_default_active_thread_percentage <pct>
 *            (the daemon prints the percentage in force back: one it did not take is an
 *            error). The limits and the daemon's pid (its nvidia-cuda-mps-control.pid)
 *            are kept in <mps dir>/<uuid>/limits for adoption.
 *            State "starting" while this runs, "running" at the end.
 *            Again with other limits while running: only the limits are sent; with the
 *            same limits: nothing is run.
 *   disable: `quit` to the daemon ("no daemon" is fine), under systemd StopUnit of its
 *            unit (ends what quit left: MPS servers, a hung daemon), nvidia-smi -i
 *            <index> -c <the recorded mode; DEFAULT without a record> (reply checked),
 *            <mps dir>/<uuid> removed with all in it (no symlink followed; what cannot
 *            be removed is logged and left: a file a pod placed never fails the
 *            disable nor marks the GPU unhealthy); state "" (off). A
 *            GPU that is off but still has its directories (a daemon left by an earlier
 *            probe) is disabled the same way; one without them: nothing is run.
 *   check:   (mps_check_all(), on the probe's health tick) `get_server_list` to every
 *            running daemon; one that is gone is restarted once (as it was started,
 *            then its limits); gone again later, or the restart failing: state "failed".
 * The control tool's "no daemon" answer is read from stderr too, where the real tool
 * writes it (tests/data/nvidia/mps-H100-no-daemon-1.txt).
 * The pipe directory is mounted read-only into the containers of MPS slices (the
 * broker's Allocate answer), whose CUDA clients connect to the control daemon's socket
 * in it: the directories are 0755 root, so any container uid can reach the socket and
 * none can write there; the daemon creates its sockets, its lock, pid file and log FIFO
 * with its own modes, and neither clients nor the MPS servers create anything there
 * (seen on an H100, driver 580: clients of uid 0 and 65534 through a read-only bind
 * mount at another path). Everything of ours that is not for pods (the compute-mode
 * record, limits, the unit's environment) is in <mps dir>/<uuid>, never in the pipe
 * directory.
 * On probe exit the daemons are left running: pods using MPS keep their server while
 * the probe restarts (under systemd that needs the "systemd" launcher: a daemon started
 * with -d is in the probe's cgroup, which systemd kills when it stops the probe). A new
 * probe adopts them (mps_adopt(): each <mps dir>/<uuid> whose daemon answers
 * get_server_list is "running" again, with the limits of its limits file when that file
 * names the daemon's current pid, else limits unknown); the broker calls SetMps again
 * when the probe reappears: the same limits run nothing, others (or unknown ones) are
 * sent to the adopted daemon, and a config without MPS for the GPU sees MpsState
 * "running" and disables it, stopping its unit (a disable also runs for an "off" GPU
 * whose directories exist). No second daemon is ever started next to one that answers.
 *
 * Launchers (nvidia.mpsLauncher as configured when it is decided: once, the first time
 * a daemon is started or stopped, so a node without MPS never asks the bus; that one
 * GetNameOwner call is synchronous): "systemd" uses kgpu-mps@.service (mps-systemd.h:
 * why, and how the values reach the unit); "direct" runs -d itself; "auto" is
 * "systemd" when org.freedesktop.systemd1 owns its name on the probe's system bus and
 * the MPS directory is the one the template reads (MPS_SYSTEMD_DIRECTORY), else
 * "direct" (tests on a private bus, hosts without systemd as PID 1).
 *
 * Requests for one GPU run one at a time in arrival order (a queue of at most
 * MPS_QUEUE_MAX per GPU; a running health check is abandoned for a request).
 * mps_set() returns at once; its callback runs exactly once from the event loop with 0,
 * or a negative errno and a one-line message holding the tool's output (printable
 * ASCII, at most MPS_MESSAGE_MAX bytes); or with -ECANCELED from mps_free(). A failed
 * enable or disable leaves the GPU "failed". The state callback reports every state
 * change (pipe directory "" when off; message set for "failed").
 * Errors of mps_set(): -EPERM, -EINVAL (see mps_request_validate()), -EBUSY queue full,
 * -ENOMEM.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "common/cleanup.h"
#include "common/config.h"

#define MPS_QUEUE_MAX   16U
#define MPS_MESSAGE_MAX 1024U

typedef enum MpsState {
        MPS_STATE_OFF,
        MPS_STATE_STARTING,
        MPS_STATE_RUNNING,
        MPS_STATE_FAILED,
} MpsState;

typedef struct Mps Mps;

typedef struct MpsRequest {
        const char *uuid;               /* GPU UUID: names the directories, CUDA_VISIBLE_DEVICES */
        uint32_t index;                 /* nvidia-smi -i */
        bool mig_enabled;               /* refused: MPS needs a GPU without MIG */
        bool in_mps_config;             /* the configuration puts this GPU under MPS
                                         * (config_nvidia_mps_names_gpu()); else enabling is refused */
        uint64_t gpu_memory_bytes;      /* the GPU's memory (Gpu1.MemoryBytes), 0 unknown: enabling refused */
        bool enabled;
        uint64_t pinned_memory_bytes;   /* enabled: 1 MiB..gpu_memory_bytes (sent in whole MiB) */
        uint32_t active_thread_percentage; /* enabled: 1..100 */
} MpsRequest;

typedef void (*MpsDoneCallback)(Mps *mps, int error, const char *message, void *userdata);
typedef void (*MpsStateCallback)(Mps *mps, const char *uuid, MpsState state, const char *pipe_directory,
                                 const char *message, void *userdata);

/* "", "starting", "running", "failed" (the Gpu1.MpsState values). */
const char *mps_state_to_string(MpsState s);

/* mps_directory: "<runtime directory>/mps" (absolute). */
int mps_new(sd_event *event, const char *mps_directory, MpsStateCallback state_cb, void *userdata, Mps **ret);
/* Kills tools still running (not the MPS daemons), cancels requests. */
Mps *mps_free(Mps *m);
DEFINE_CLEANUP_FUNC(Mps, mps_free);

/* The tools (absolute paths; NULL: not found, every step needing it fails). */
int mps_set_tools(Mps *m, const char *smi_path, const char *control_path);
/* Per tool run; 0: the runner's default. */
void mps_set_timeout(Mps *m, uint64_t usec);

/* Runs mps_check_all() every usec (0: no timer; the caller may call it from its own
 * health tick instead). */
int mps_set_check_interval(Mps *m, uint64_t usec);

/* Decides the launcher now (see above; otherwise the first start or stop does, with the
 * configured one, "direct" after mps_new()). Returns 1 for systemd units, 0 for direct.
 * With MPS_LAUNCHER_SYSTEMD and no systemd on the bus it still returns 1: every start
 * then fails with a message saying why. Logs the choice (info). */
int mps_set_launcher(Mps *m, ConfigMpsLauncher launcher);
bool mps_uses_systemd(Mps *m);

/* For the probe: creates *mps on the first call (directory "<runtimeDirectory>/mps"; it
 * is kept on later calls, as running daemons' pipe directories cannot move), then sets
 * the tools (nvidia.mpsControlPath / nvidia.smiPath, else found under the driver root;
 * none when nvidia.enabled is false) and the check interval (nvidia.healthIntervalMs);
 * and the launcher to use (nvidia.mpsLauncher) until it is decided (a change after that
 * takes effect at the next start of the probe: running daemons stay where they are). */
int mps_configure(Mps **mps, sd_event *event, const Config *c, MpsStateCallback state_cb, void *userdata);

/* The probe's own policy, whoever asks (the bus policy and the caller's uid are checked
 * before): -EPERM with a message (caller frees) for enabling a GPU the configuration does
 * not put under MPS; -EINVAL for a UUID that is no GPU UUID, or enabling with a
 * MIG-enabled GPU, a percentage outside 1..100, less than 1 MiB of pinned memory, more
 * than the GPU's memory or a GPU of unknown memory. Disabling is always allowed. */
int mps_request_validate(const MpsRequest *req, char **ret_message);

int mps_set(Mps *m, const MpsRequest *req, MpsDoneCallback done, void *userdata);

/* Starts a check of every running daemon not busy. Returns how many were started. */
int mps_check_all(Mps *m);

MpsState mps_get_state(Mps *m, const char *uuid);
/* The pipe directory while not off, else "". */
const char *mps_get_pipe_directory(Mps *m, const char *uuid);

/* Queues a check of every <mps dir>/<uuid> directory of a GPU that is off here (done
 * by mps_configure() when it creates the controller). Returns how many. */
int mps_adopt(Mps *m);
/* Tool runs and requests under way or queued, over all GPUs (tests run the loop until 0). */
unsigned mps_pending(Mps *m);
