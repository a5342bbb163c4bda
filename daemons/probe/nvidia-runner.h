/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-runner.h — runs an NVIDIA tool (nvidia-smi, nvidia-cuda-mps-control) as a
 * child process on sd-event, without a shell, with a timeout and bounded output.
 *
 * Contract: nvidia_run_start() spawns path with argv (posix_spawn: no shell, empty
 * signal mask and default SIGPIPE in the child, stdin from `stdin_data` or /dev/null,
 * stdout and stderr on non-blocking O_CLOEXEC pipes) and returns at once. The callback
 * runs exactly once, from the event loop, when the child has exited (or was killed
 * because it ran past the timeout or wrote more than output_max bytes on one stream);
 * result->out/err hold what it wrote (NUL-terminated, at most output_max bytes each).
 * error is 0 or a negative errno: -ETIME timeout, -EMSGSIZE output over the limit,
 * -ENOMEM; a non-zero exit status is not an error (nvidia-smi reports failures that
 * way and the parser reads its words): check result->exit_status.
 * The callback may free the run. Freeing a run that is still going kills the child
 * with SIGKILL and reaps it (no callback). The runner blocks SIGCHLD (sd-event needs it
 * blocked to watch children; the daemons are single-threaded) and ignores SIGPIPE in
 * the calling process when they were at their defaults.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "common/cleanup.h"

#define NVIDIA_RUN_TIMEOUT_USEC_DEFAULT   (10U * 1000U * 1000U)
#define NVIDIA_RUN_OUTPUT_MAX_DEFAULT     (1U * 1024U * 1024U)
#define NVIDIA_RUN_ARGV_MAX               64U
#define NVIDIA_RUN_STDIN_MAX              (64U * 1024U)

typedef struct NvidiaRun NvidiaRun;

typedef struct NvidiaRunResult {
        int exit_status;        /* exit code; -1 when killed by a signal */
        int signal;             /* the signal that ended it, 0 if it exited */
        bool timed_out;
        bool truncated;         /* wrote more than output_max on a stream: killed */
        char *out;
        size_t out_len;
        char *err;
        size_t err_len;
        uint64_t duration_usec;
} NvidiaRunResult;

typedef struct NvidiaRunOptions {
        uint64_t timeout_usec;          /* 0: NVIDIA_RUN_TIMEOUT_USEC_DEFAULT */
        size_t output_max;              /* per stream; 0: NVIDIA_RUN_OUTPUT_MAX_DEFAULT */
        const char *stdin_data;         /* written to the child's stdin, then closed */
        size_t stdin_len;
        char * const *env;              /* NULL: the caller's environment */
} NvidiaRunOptions;

typedef void (*NvidiaRunCallback)(NvidiaRun *run, int error, const NvidiaRunResult *result, void *userdata);

/* path must be absolute; argv[0] is passed as is. */
int nvidia_run_start(sd_event *event, const char *path, char * const *argv, const NvidiaRunOptions *opts,
                     NvidiaRunCallback callback, void *userdata, NvidiaRun **ret);
NvidiaRun *nvidia_run_free(NvidiaRun *run);
DEFINE_CLEANUP_FUNC(NvidiaRun, nvidia_run_free);
/* The child's pid (0 once reaped). */
int nvidia_run_get_pid(const NvidiaRun *run);

/* The probe runs these tools as root: only root (or the probe's own user, when it runs
 * as another one in a test) may be able to change what runs. path (absolute) and every
 * directory a name of it is looked up in, through each symlink, must be owned by uid 0
 * or geteuid() and not writable by group or others (a directory with the sticky bit
 * may be); the last component must be a regular file (want_dir: a directory).
 * -EPERM with a one-line reason naming the path that fails ("/opt/x/nvidia-smi is
 * owned by uid 1000, not root", "... is writable by group or others (mode 0775)") in
 * *ret_reason (optional, caller frees); -ENOENT, -ELOOP, -EINVAL (not absolute). */
int nvidia_path_check_trusted(const char *path, bool want_dir, char **ret_reason);

/* Finds a tool: `configured` when set (must be absolute and executable), else `name` in
 * <driver_root>/{usr/bin,usr/sbin,bin,sbin,usr/local/nvidia/bin} (driver_root NULL or
 * "" means "/"), the first executable one. -ENOENT when none is executable, -EINVAL for
 * a relative path, -EPERM (reason in *ret_reason, as nvidia_path_check_trusted()) when
 * the driver root or the tool found is not trusted: refused, the search stops there. */
int nvidia_tool_find(const char *driver_root, const char *configured, const char *name, char **ret,
                     char **ret_reason);
