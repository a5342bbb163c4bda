/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mps-systemd.h — MPS control daemons as instances of kgpu-mps@.service, through
 * systemd's D-Bus API (org.freedesktop.systemd1.Manager), for the probe's MPS
 * controller (mps.c).
 *
 * Why units: a daemon that `nvidia-cuda-mps-control -d` forks from the probe lives in
 * the probe's cgroup, so stopping or restarting kgpu-probed.service (a package upgrade
 * does) kills the MPS servers of running pods. An instance of the template lives in its
 * own cgroup, with its own sandbox (CAP_SETUID/CAP_SETGID, which the probe does not
 * hold and the daemon needs to start a server for a non-root client), survives the
 * probe, and shows up in `systemctl status kgpu-mps@<uuid>.service`.
 *
 * How the per-GPU values reach the unit: the template is fixed (operator-inspectable)
 * and reads EnvironmentFile=MPS_SYSTEMD_DIRECTORY/%i/environment, which the probe writes
 * before each start (mps_systemd_write_environment()): CUDA_VISIBLE_DEVICES (the UUID),
 * CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY and KGPU_NVIDIA_MPS_CONTROL (the tool,
 * configurable, so ExecStart= runs it through /bin/sh: systemd does not take a variable
 * as the program to run), and LD_LIBRARY_PATH for a tool of a driver root (its
 * libraries, nvidia-driver-files.h). Values are validated, not quoted: each may only hold
 * characters that need no quoting in an EnvironmentFile or a shell word. The instance
 * is the GPU UUID itself ("GPU-" and hex digits and dashes, all valid in a unit name, so
 * no escaping is needed); the template uses %i, never %I, which would turn '-' into '/'.
 * StartTransientUnit was not chosen: a transient unit's settings exist only in the
 * manager's memory and are gone from `systemctl cat`, and the sandbox would be code in
 * the probe instead of a file an operator can read and override with a drop-in.
 *
 * Jobs: mps_systemd_job() calls RestartUnit or StopUnit (mode "replace") and calls back
 * once, from the event loop, when systemd's JobRemoved signal for that job arrives: 0
 * for result "done", -EIO with a message naming the unit and the result otherwise,
 * -ETIME when no result came within the timeout, or the D-Bus error of the call (-ENOENT
 * for org.freedesktop.systemd1.NoSuchUnit: no such unit file, nothing loaded). systemd
 * sends JobRemoved for a job to the client that queued it without a Subscribe(). The
 * callback may free the job; freeing a job before that cancels the callback (not the
 * job in systemd).
 *
 * Functions return negative errno; helpers here log at debug at most.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "common/cleanup.h"

/* The template reads its EnvironmentFile under this directory (units/kgpu-mps@.service.in). */
#define MPS_SYSTEMD_DIRECTORY "/run/kgpu/mps"
#define MPS_SYSTEMD_TEMPLATE  "kgpu-mps@.service"
#define MPS_SYSTEMD_ENVIRONMENT_FILE "environment"

typedef struct MpsSystemd MpsSystemd;
typedef struct MpsSystemdJob MpsSystemdJob;

typedef void (*MpsSystemdJobCallback)(MpsSystemdJob *job, int error, const char *message, void *userdata);

/* Connects to the system bus (the probe's, DBUS_SYSTEM_BUS_ADDRESS honoured) and watches
 * JobRemoved. Returns 1 and *ret when org.freedesktop.systemd1 owns its name there, 0 and
 * *ret NULL when it does not (no systemd as PID 1 on that bus), or a negative errno
 * (no bus at all). */
int mps_systemd_open(sd_event *event, MpsSystemd **ret);
MpsSystemd *mps_systemd_free(MpsSystemd *s);
DEFINE_CLEANUP_FUNC(MpsSystemd, mps_systemd_free);

/* "kgpu-mps@<uuid>.service"; -EINVAL for an instance that is no valid unit name part. */
int mps_systemd_unit_name(const char *uuid, char **ret);

/* Writes <base_dir>/environment (0644, atomically); library_path (NULL: none) is
 * LD_LIBRARY_PATH, for a control daemon of a driver root. -EINVAL and *ret_bad (a static
 * string naming the variable) for a value that cannot be written unquoted. */
int mps_systemd_write_environment(const char *base_dir, const char *uuid, const char *pipe_dir,
                                  const char *log_dir, const char *control_path, const char *library_path,
                                  const char **ret_bad);

/* method: "RestartUnit" or "StopUnit". timeout_usec: 0 for the default (60 s). */
int mps_systemd_job(MpsSystemd *s, const char *method, const char *unit, uint64_t timeout_usec,
                    MpsSystemdJobCallback callback, void *userdata, MpsSystemdJob **ret);
MpsSystemdJob *mps_systemd_job_free(MpsSystemdJob *j);
DEFINE_CLEANUP_FUNC(MpsSystemdJob, mps_systemd_job_free);
