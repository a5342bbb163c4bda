/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mps.c — per-GPU NVIDIA MPS controller (see mps.h).
 *
 * Each GPU has an entry with its state, the limits in force, the operation under way and
 * a FIFO of requests. An operation is a small state machine of steps, each one tool run
 * whose callback parses the answer and starts the next step or ends the operation.
 * Requests are started from a defer source, so mps_set() never calls back synchronously.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/mps.h"
#include "daemons/probe/mps-systemd.h"
#include "daemons/probe/nvidia-runner.h"
#include "daemons/probe/nvidia-smi.h"

#define MPS_ENTRIES_MAX NVIDIA_GPUS_MAX
#define MPS_OUTPUT_MAX  (64U * 1024U)
#define MPS_PID_FILE    "nvidia-cuda-mps-control.pid"   /* the daemon's, in its pipe directory */
#define MPS_LIMITS_FILE "limits"                        /* ours: "<pid> <MiB> <pct>" */
#define MPS_MODE_FILE   "compute-mode"                  /* ours: the mode to restore ("DEFAULT") */
#define MPS_REMOVE_DEPTH_MAX 16U

extern char **environ;

typedef enum OpKind {
        OP_ENABLE,
        OP_DISABLE,
        OP_CHECK,
        OP_RESTART,
        OP_ADOPT,
} OpKind;

typedef enum Step {
        STEP_COMPUTE_READ,      /* --query-gpu=compute_mode: the mode to restore */
        STEP_COMPUTE_MODE,      /* -c EXCLUSIVE_PROCESS */
        STEP_PROBE,             /* get_server_list: a daemon there already? */
        STEP_START,             /* -d */
        STEP_UNIT_START,        /* RestartUnit kgpu-mps@<uuid>.service */
        STEP_LIMITS,
        STEP_QUIT,
        STEP_UNIT_STOP,         /* StopUnit kgpu-mps@<uuid>.service */
        STEP_COMPUTE_RESTORE,   /* -c <the mode found before MPS> */
        STEP_CHECK,             /* get_server_list: still alive? */
} Step;

typedef struct Op {
        OpKind kind;
        bool enabled;
        uint32_t index;
        uint64_t pinned_mib;
        uint32_t pct;
        Step step;
        bool started;           /* ran -d in this operation */
        NvidiaComputeMode restore; /* STEP_COMPUTE_RESTORE: the mode to set */
        MpsDoneCallback done;
        void *userdata;
        struct Op *next;
} Op;

typedef struct Entry {
        Mps *mps;
        char *uuid;
        char *base_dir, *pipe_dir, *log_dir;
        char *unit;             /* kgpu-mps@<uuid>.service */
        MpsState state;
        uint64_t pinned_mib;    /* limits in force while running */
        uint32_t pct;
        bool restarted;         /* the health check restarted it once already */
        Op *op;
        NvidiaRun *run;
        MpsSystemdJob *job;
        Op *queue;
        unsigned n_queued;
} Entry;

struct Mps {
        sd_event *event;
        char *directory;
        char *smi_path;
        char *control_path;
        uint64_t timeout_usec;
        ConfigMpsLauncher launcher; /* as configured, until decided */
        bool launcher_set;      /* decided (mps_set_launcher()) */
        bool systemd;           /* the decision: kgpu-mps@.service units */
        MpsSystemd *bus;        /* NULL with systemd: no systemd on the bus (each start fails) */
        Entry **entries;
        size_t n_entries;
        sd_event_source *kick_source;
        sd_event_source *check_source;
        uint64_t check_usec;
        MpsStateCallback state_cb;
        void *userdata;
};

static void mps_arm_check(Mps *m);

/* asprintf() that leaves NULL behind on failure (plain asprintf leaves it undefined). */
static int asprintf_safe(char **p, const char *fmt, ...) _printf_(2, 3);
static int asprintf_safe(char **p, const char *fmt, ...) {
        va_list ap;
        int k;

        va_start(ap, fmt);
        k = vasprintf(p, fmt, ap);
        va_end(ap);
        if (k < 0)
                *p = NULL;
        return k;
}

static const char *strna(const char *s) {
        return s ? s : "";
}

const char *mps_state_to_string(MpsState s) {
        switch (s) {
        case MPS_STATE_STARTING: return "starting";
        case MPS_STATE_RUNNING:  return "running";
        case MPS_STATE_FAILED:   return "failed";
        default:                 return "";
        }
}

static void op_free_list(Op *op, int error) {
        while (op) {
                Op *next = op->next;

                if (op->done)
                        op->done(NULL, error, "MPS controller shut down", op->userdata);
                free(op);
                op = next;
        }
}

static Entry *entry_free(Entry *e) {
        if (!e)
                return NULL;
        e->run = nvidia_run_free(e->run);
        e->job = mps_systemd_job_free(e->job);
        op_free_list(e->op, -ECANCELED);
        op_free_list(e->queue, -ECANCELED);
        free(e->uuid);
        free(e->base_dir);
        free(e->pipe_dir);
        free(e->log_dir);
        free(e->unit);
        return mfree(e);
}

Mps *mps_free(Mps *m) {
        if (!m)
                return NULL;
        for (size_t i = 0; i < m->n_entries; i++)
                entry_free(m->entries[i]);
        free(m->entries);
        sd_event_source_disable_unref(m->kick_source);
        sd_event_source_disable_unref(m->check_source);
        mps_systemd_free(m->bus);
        sd_event_unref(m->event);
        free(m->directory);
        free(m->smi_path);
        free(m->control_path);
        return mfree(m);
}

static int on_kick(sd_event_source *s, void *userdata);

int mps_new(sd_event *event, const char *mps_directory, MpsStateCallback state_cb, void *userdata, Mps **ret) {
        _cleanup_(mps_freep) Mps *m = NULL;
        int r;

        if (!event || !ret || isempty(mps_directory) || mps_directory[0] != '/' || strlen(mps_directory) > 512)
                return -EINVAL;
        m = calloc(1, sizeof(Mps));
        if (!m)
                return -ENOMEM;
        m->event = sd_event_ref(event);
        m->launcher = MPS_LAUNCHER_DIRECT;
        m->state_cb = state_cb;
        m->userdata = userdata;
        m->directory = strdup(mps_directory);
        if (!m->directory)
                return -ENOMEM;
        r = sd_event_add_defer(event, &m->kick_source, on_kick, m);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(m->kick_source, "mps-kick");
        r = sd_event_source_set_enabled(m->kick_source, SD_EVENT_OFF);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(m);
        return 0;
}

int mps_set_tools(Mps *m, const char *smi_path, const char *control_path) {
        if ((smi_path && smi_path[0] != '/') || (control_path && control_path[0] != '/'))
                return -EINVAL;
        if (free_and_strdup(&m->smi_path, smi_path) < 0 || free_and_strdup(&m->control_path, control_path) < 0)
                return -ENOMEM;
        return 0;
}

void mps_set_timeout(Mps *m, uint64_t usec) {
        m->timeout_usec = usec;
}

int mps_request_validate(const MpsRequest *req, char **ret_message) {
        char *msg = NULL;
        int r = -EINVAL;

        if (!req || !nvidia_gpu_uuid_is_valid(req->uuid))
                msg = strdup("Not an NVIDIA GPU UUID.");
        else if (!req->enabled)
                return 0;       /* off is always allowed: it restores the GPU */
        else if (!req->in_mps_config) {
                (void) asprintf_safe(&msg, "GPU %s is not under MPS in the configuration (sharing.mps.resources): "
                                     "refusing to enable MPS there.", req->uuid);
                r = -EPERM;
        } else if (req->mig_enabled)
                (void) asprintf_safe(&msg, "GPU %s has MIG enabled: MPS needs a GPU without MIG.", req->uuid);
        else if (req->active_thread_percentage < 1 || req->active_thread_percentage > 100)
                (void) asprintf_safe(&msg, "Active thread percentage %" PRIu32 " is not within 1..100.",
                                req->active_thread_percentage);
        else if (req->pinned_memory_bytes < (UINT64_C(1) << 20))
                (void) asprintf_safe(&msg, "Pinned memory limit of %" PRIu64 " bytes is below 1 MiB.",
                                req->pinned_memory_bytes);
        else if (req->gpu_memory_bytes == 0)
                (void) asprintf_safe(&msg, "The memory of GPU %s is unknown: no pinned memory limit can be checked.",
                                     req->uuid);
        else if (req->pinned_memory_bytes > req->gpu_memory_bytes)
                (void) asprintf_safe(&msg, "Pinned memory limit of %" PRIu64 " bytes is more than the %" PRIu64
                                     " bytes of GPU %s.", req->pinned_memory_bytes, req->gpu_memory_bytes, req->uuid);
        else
                return 0;
        if (ret_message)
                *ret_message = msg;
        else
                free(msg);
        return r;
}

static Entry *mps_find(Mps *m, const char *uuid) {
        for (size_t i = 0; i < m->n_entries; i++)
                if (streq(m->entries[i]->uuid, uuid))
                        return m->entries[i];
        return NULL;
}

const char *mps_get_pipe_directory(Mps *m, const char *uuid) {
        Entry *e = m ? mps_find(m, uuid) : NULL;

        return e && e->state != MPS_STATE_OFF ? e->pipe_dir : "";
}

MpsState mps_get_state(Mps *m, const char *uuid) {
        Entry *e = m ? mps_find(m, uuid) : NULL;

        return e ? e->state : MPS_STATE_OFF;
}

unsigned mps_pending(Mps *m) {
        unsigned n = 0;

        for (size_t i = 0; m && i < m->n_entries; i++)
                n += (m->entries[i]->op ? 1 : 0) + m->entries[i]->n_queued;
        return n;
}

static int mps_get_entry(Mps *m, const char *uuid, Entry **ret) {
        _cleanup_free_ Entry *e = NULL;
        Entry **a;

        *ret = mps_find(m, uuid);
        if (*ret)
                return 0;
        if (m->n_entries >= MPS_ENTRIES_MAX)
                return -E2BIG;
        e = calloc(1, sizeof(Entry));
        if (!e)
                return -ENOMEM;
        e->mps = m;
        if (!(e->uuid = strdup(uuid)) ||
            asprintf_safe(&e->base_dir, "%s/%s", m->directory, uuid) < 0 ||
            asprintf_safe(&e->pipe_dir, "%s/pipe", e->base_dir) < 0 ||
            asprintf_safe(&e->log_dir, "%s/log", e->base_dir) < 0 ||
            mps_systemd_unit_name(uuid, &e->unit) < 0) {
                entry_free(TAKE_PTR(e));
                return -ENOMEM;
        }
        a = reallocarray(m->entries, m->n_entries + 1, sizeof(Entry *));
        if (!a) {
                entry_free(TAKE_PTR(e));
                return -ENOMEM;
        }
        m->entries = a;
        m->entries[m->n_entries++] = e;
        *ret = TAKE_PTR(e);
        return 0;
}

static void entry_set_state(Entry *e, MpsState state, const char *message) {
        if (e->state == state)
                return;
        e->state = state;
        mps_arm_check(e->mps);
        if (e->mps->state_cb)
                e->mps->state_cb(e->mps, e->uuid, state, state == MPS_STATE_OFF ? "" : e->pipe_dir,
                                 message, e->mps->userdata);
}

static void mps_schedule_kick(Mps *m) {
        (void) sd_event_source_set_enabled(m->kick_source, SD_EVENT_ONESHOT);
}

/* The tool's answer as one printable line for a D-Bus error message and the log. */
static char *tool_message(const char *what, const NvidiaRunResult *res, int error) {
        _cleanup_free_ char *raw = NULL;
        char *msg, *p;
        size_t k = 0;

        if (error == -ETIME)
                (void) asprintf_safe(&raw, "%s timed out", what);
        else if (res && res->signal > 0)
                (void) asprintf_safe(&raw, "%s killed by signal %d: %s %s", what, res->signal, res->out, res->err);
        else if (res)
                (void) asprintf_safe(&raw, "%s (exit status %d): %s %s", what, res->exit_status, res->out, res->err);
        else
                (void) asprintf_safe(&raw, "%s failed: %s", what, strerror(-error));
        if (!raw)
                return NULL;
        msg = malloc(MPS_MESSAGE_MAX + 1);
        if (!msg)
                return NULL;
        for (p = raw; *p && k < MPS_MESSAGE_MAX; p++) {
                unsigned char c = (unsigned char) *p;

                if (c == '\n' || c == '\r' || c == '\t')
                        c = ' ';
                else if (c < 0x20 || c >= 0x7f)
                        c = '?';
                if (c == ' ' && (k == 0 || msg[k - 1] == ' '))
                        continue;
                msg[k++] = (char) c;
        }
        while (k > 0 && msg[k - 1] == ' ')
                k--;
        msg[k] = 0;
        return msg;
}

static void entry_finish_op(Entry *e, int error, const char *message) {
        Op *op = TAKE_PTR(e->op);

        if (op && op->done)
                op->done(e->mps, error, message, op->userdata);
        free(op);
        if (e->queue)
                mps_schedule_kick(e->mps);
}

static void entry_op_begin(Entry *e);

/* A health check found the daemon gone (or could not ask it): restart it once with its
 * limits; gone again after that: failed. */
static void entry_check_failed(Entry *e, int r, const char *msg) {
        Op *op = e->op;

        if (!e->restarted) {
                e->restarted = true;
                log_struct(LOG_WARNING, KGPU_MESSAGE_GPU_HEALTH,
                           "MPS control daemon of GPU %s is gone (%s), restarting it with its limits.",
                           e->uuid, strna(msg));
                op->kind = OP_RESTART;
                op->pinned_mib = e->pinned_mib;
                op->pct = e->pct;
                entry_op_begin(e);
                return;
        }
        entry_set_state(e, MPS_STATE_FAILED, msg);
        log_struct(LOG_WARNING, KGPU_MESSAGE_GPU_HEALTH,
                   "MPS control daemon of GPU %s is gone again after its restart, MPS failed: %s", e->uuid,
                   strna(msg));
        entry_finish_op(e, r, msg);
}

static void entry_fail_op(Entry *e, int error, const char *message) {
        Op *op = e->op;

        if (op && op->kind == OP_CHECK) {
                entry_check_failed(e, error, message);
                return;
        }
        if (op && op->kind == OP_ADOPT) {
                entry_finish_op(e, 0, NULL);
                return;
        }
        if (op)
                entry_set_state(e, MPS_STATE_FAILED, message);
        if (op && op->kind == OP_RESTART)
                log_struct(LOG_WARNING, KGPU_MESSAGE_GPU_HEALTH,
                           "MPS control daemon of GPU %s could not be restarted, MPS failed: %s", e->uuid,
                           strna(message));
        entry_finish_op(e, error, message);
}

static int mkdir_mode(const char *path) {
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
                return -errno;
        /* Whatever the umask was: containers must reach the socket. */
        if (chmod(path, 0755) < 0)
                return -errno;
        return 0;
}

static int entry_make_dirs(Entry *e) {
        _cleanup_free_ char *p = strdup(e->mps->directory);
        int r;

        if (!p)
                return -ENOMEM;
        /* Parents of the mps directory as needed, then the mps directory itself. */
        for (char *s = p + 1; *s; s++) {
                if (*s != '/')
                        continue;
                *s = 0;
                if (mkdir(p, 0755) < 0 && errno != EEXIST)
                        return -errno;
                *s = '/';
        }
        if ((r = mkdir_mode(e->mps->directory)) < 0 ||
            (r = mkdir_mode(e->base_dir)) < 0 ||
            (r = mkdir_mode(e->pipe_dir)) < 0 ||
            (r = mkdir_mode(e->log_dir)) < 0)
                return r;
        return 0;
}

/* Removes everything below the directory fd (closed here), never following a symlink:
 * a subdirectory is opened O_NOFOLLOW relative to its parent and emptied first. Depth is
 * bounded; what is deeper stays. Returns the first error, after trying everything. */
static int remove_below(int fd, unsigned depth) {
        struct dirent *de;
        DIR *d;
        int r = 0;

        d = fdopendir(fd);
        if (!d) {
                r = -errno;
                safe_close(fd);
                return r;
        }
        while ((de = readdir(d))) {
                int k = 0;

                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                if (unlinkat(dirfd(d), de->d_name, 0) >= 0 || errno == ENOENT)
                        continue;
                if (errno != EISDIR)
                        k = -errno;
                else if (depth >= MPS_REMOVE_DEPTH_MAX)
                        k = -ELOOP;
                else {
                        int sub = openat(dirfd(d), de->d_name, O_RDONLY|O_DIRECTORY|O_CLOEXEC|O_NOFOLLOW);

                        k = sub < 0 ? -errno : remove_below(sub, depth + 1);
                        if (unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT && k >= 0)
                                k = -errno;
                }
                if (k < 0 && r >= 0)
                        r = k;
        }
        closedir(d);
        return r;
}

/* Removes dir and everything in it (a symlink is removed, never followed). */
static int remove_tree(const char *dir) {
        int fd, r;

        fd = open(dir, O_RDONLY|O_DIRECTORY|O_CLOEXEC|O_NOFOLLOW);
        if (fd < 0)
                return errno == ENOENT ? 0 : -errno;
        r = remove_below(fd, 0);
        if (rmdir(dir) < 0 && errno != ENOENT && r >= 0)
                r = -errno;
        return r;
}

/* Best effort: a disable that has stopped the daemon and restored the compute mode has
 * done what matters. The pipe directory was mounted into pods (read-only, but a future
 * runtime or a privileged pod may differ), so whatever is left there is logged, not
 * turned into a failure that would mark the GPU unhealthy. */
static void entry_remove_dirs(Entry *e) {
        int r;

        r = remove_tree(e->base_dir);
        if (r < 0)
                log_warning_errno(r, "MPS of GPU %s is off, but %s could not be removed completely, leaving it: %m",
                                  e->uuid, e->base_dir);
}

static const char *compute_mode_argument(NvidiaComputeMode mode) {
        switch (mode) {
        case NVIDIA_COMPUTE_MODE_EXCLUSIVE_THREAD:  return "EXCLUSIVE_THREAD";
        case NVIDIA_COMPUTE_MODE_PROHIBITED:        return "PROHIBITED";
        case NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS: return "EXCLUSIVE_PROCESS";
        default:                                    return "DEFAULT";
        }
}

/* The compute mode found before MPS, kept in <base dir>/compute-mode until MPS is off
 * again (so a probe restart in between still restores it); DEFAULT when there is no
 * valid record (a daemon an earlier probe version started, which restored Default). */
static NvidiaComputeMode entry_load_compute_mode(Entry *e, bool *ret_found) {
        _cleanup_free_ char *p = NULL, *line = NULL;
        NvidiaComputeMode mode;

        if (ret_found)
                *ret_found = false;
        if (asprintf_safe(&p, "%s/%s", e->base_dir, MPS_MODE_FILE) < 0 ||
            read_one_line_file_at(AT_FDCWD, p, 32, &line) < 0 ||
            nvidia_compute_mode_from_string(line, &mode) < 0 || mode == NVIDIA_COMPUTE_MODE_UNKNOWN)
                return NVIDIA_COMPUTE_MODE_DEFAULT;
        if (ret_found)
                *ret_found = true;
        return mode;
}

/* Records the mode to restore, in a directory only root can write (not the pipe
 * directory pods see). Makes the GPU's directory first. */
static int entry_save_compute_mode(Entry *e, NvidiaComputeMode mode) {
        _cleanup_free_ char *p = NULL, *text = NULL;

        if (asprintf_safe(&p, "%s/%s", e->base_dir, MPS_MODE_FILE) < 0 ||
            asprintf_safe(&text, "%s\n", compute_mode_argument(mode)) < 0)
                return -ENOMEM;
        return write_file_atomic_at(AT_FDCWD, p, text, strlen(text), 0644);
}

/* The daemon's pid from the pid file it keeps in its pipe directory, 0 if unreadable. */
static pid_t entry_daemon_pid(Entry *e) {
        _cleanup_free_ char *p = NULL, *line = NULL;
        uint32_t v;

        if (asprintf_safe(&p, "%s/%s", e->pipe_dir, MPS_PID_FILE) < 0 ||
            read_one_line_file_at(AT_FDCWD, p, 32, &line) < 0 ||
            safe_atou32(line, &v) < 0 || v == 0 || v > INT32_MAX)
                return 0;
        return (pid_t) v;
}

/* Remembers the limits sent to the daemon now running, for a later probe's adoption. */
static void entry_save_limits(Entry *e) {
        _cleanup_free_ char *p = NULL, *text = NULL;
        pid_t pid = entry_daemon_pid(e);
        int r;

        if (asprintf_safe(&p, "%s/%s", e->base_dir, MPS_LIMITS_FILE) < 0)
                return;
        if (pid <= 0) {
                (void) unlink(p);
                return;
        }
        if (asprintf_safe(&text, "%d %" PRIu64 " %" PRIu32 "\n", (int) pid, e->pinned_mib, e->pct) < 0)
                return;
        r = write_file_atomic_at(AT_FDCWD, p, text, strlen(text), 0644);
        if (r < 0)
                log_debug_errno(r, "Failed to write %s, ignoring: %m", p);
}

/* The limits an earlier probe sent to the daemon that runs now (same pid), or 0/0. */
static void entry_load_limits(Entry *e) {
        _cleanup_free_ char *p = NULL, *line = NULL;
        unsigned long long mib = 0;
        unsigned pct = 0;
        int pid = 0;

        e->pinned_mib = 0;
        e->pct = 0;
        if (asprintf_safe(&p, "%s/%s", e->base_dir, MPS_LIMITS_FILE) < 0 ||
            read_one_line_file_at(AT_FDCWD, p, 128, &line) < 0 ||
            sscanf(line, "%d %llu %u", &pid, &mib, &pct) != 3)
                return;
        if (pid <= 0 || pid != entry_daemon_pid(e) || mib == 0 || pct < 1 || pct > 100)
                return;
        e->pinned_mib = mib;
        e->pct = pct;
}

/* environ without the MPS variables, plus ours for this GPU. */
static char **control_env(Entry *e) {
        _cleanup_strv_free_ char **env = NULL;
        char *s;

        for (char **v = environ; v && *v; v++) {
                if (startswith(*v, "CUDA_MPS_PIPE_DIRECTORY=") || startswith(*v, "CUDA_MPS_LOG_DIRECTORY=") ||
                    startswith(*v, "CUDA_VISIBLE_DEVICES="))
                        continue;
                if (strv_extend(&env, *v) < 0)
                        return NULL;
        }
        if (asprintf(&s, "CUDA_MPS_PIPE_DIRECTORY=%s", e->pipe_dir) < 0 || strv_consume(&env, s) < 0)
                return NULL;
        if (asprintf(&s, "CUDA_MPS_LOG_DIRECTORY=%s", e->log_dir) < 0 || strv_consume(&env, s) < 0)
                return NULL;
        if (asprintf(&s, "CUDA_VISIBLE_DEVICES=%s", e->uuid) < 0 || strv_consume(&env, s) < 0)
                return NULL;
        return TAKE_PTR(env);
}

static const char *step_name(Step s) {
        switch (s) {
        case STEP_COMPUTE_READ:    return "nvidia-smi --query-gpu=compute_mode";
        case STEP_COMPUTE_MODE:    return "nvidia-smi -c EXCLUSIVE_PROCESS";
        case STEP_PROBE:           return "nvidia-cuda-mps-control get_server_list";
        case STEP_START:           return "nvidia-cuda-mps-control -d";
        case STEP_UNIT_START:      return "systemd RestartUnit";
        case STEP_LIMITS:          return "nvidia-cuda-mps-control set_default_*";
        case STEP_QUIT:            return "nvidia-cuda-mps-control quit";
        case STEP_UNIT_STOP:       return "systemd StopUnit";
        case STEP_COMPUTE_RESTORE: return "nvidia-smi -c (the mode before MPS)";
        case STEP_CHECK:           return "nvidia-cuda-mps-control get_server_list";
        }
        return "?";
}

static void on_run_done(NvidiaRun *run, int error, const NvidiaRunResult *res, void *userdata);
static void on_job_done(MpsSystemdJob *job, int error, const char *message, void *userdata);

/* A step of the systemd launcher: the unit's environment file, then the job. */
static void entry_run_job(Entry *e, Step step) {
        _cleanup_free_ char *msg = NULL;
        const char *bad = NULL;
        int r;

        if (!e->mps->bus) {
                (void) asprintf_safe(&msg, "%s %s: systemd does not answer on the system bus "
                                     "(nvidia.mpsLauncher is systemd)", step_name(step), e->unit);
                entry_fail_op(e, -EHOSTDOWN, msg ?: "Out of memory.");
                return;
        }
        if (step == STEP_UNIT_START) {
                if (!streq(e->mps->directory, MPS_SYSTEMD_DIRECTORY))
                        (void) asprintf_safe(&msg, "%s %s: the unit reads %s/%s/%s, but the MPS directory is %s "
                                             "(runtimeDirectory); set nvidia.mpsLauncher to direct",
                                             step_name(step), e->unit, MPS_SYSTEMD_DIRECTORY, e->uuid,
                                             MPS_SYSTEMD_ENVIRONMENT_FILE, e->mps->directory);
                else if (!e->mps->control_path)
                        (void) asprintf_safe(&msg, "%s %s: nvidia-cuda-mps-control was not found", step_name(step),
                                             e->unit);
                else {
                        r = mps_systemd_write_environment(e->base_dir, e->uuid, e->pipe_dir, e->log_dir,
                                                          e->mps->control_path, &bad);
                        if (r == -EINVAL)
                                (void) asprintf_safe(&msg, "%s %s: %s cannot go into %s/%s: only letters, digits "
                                                     "and / . _ : + , @ - are taken", step_name(step), e->unit,
                                                     strna(bad), e->base_dir, MPS_SYSTEMD_ENVIRONMENT_FILE);
                        else if (r < 0)
                                (void) asprintf_safe(&msg, "%s %s: cannot write %s/%s: %s", step_name(step), e->unit,
                                                     e->base_dir, MPS_SYSTEMD_ENVIRONMENT_FILE, strerror(-r));
                        if (r >= 0)
                                goto queue;
                }
                entry_fail_op(e, -EINVAL, msg ?: "Out of memory.");
                return;
        }
queue:
        r = mps_systemd_job(e->mps->bus, step == STEP_UNIT_START ? "RestartUnit" : "StopUnit", e->unit,
                            3 * (e->mps->timeout_usec > 0 ? e->mps->timeout_usec : NVIDIA_RUN_TIMEOUT_USEC_DEFAULT),
                            on_job_done, e, &e->job);
        if (r < 0) {
                (void) asprintf_safe(&msg, "%s %s: %s", step_name(step), e->unit, strerror(-r));
                entry_fail_op(e, r, msg ?: "Out of memory.");
        }
}

static void entry_run_step(Entry *e, Step step) {
        _cleanup_strv_free_ char **env = NULL;
        _cleanup_free_ char *stdin_text = NULL, *msg = NULL;
        char index[16];
        const char *path;
        NvidiaRunOptions o = { .timeout_usec = e->mps->timeout_usec, .output_max = MPS_OUTPUT_MAX };
        int r;

        e->op->step = step;
        if (step == STEP_UNIT_START || step == STEP_UNIT_STOP) {
                entry_run_job(e, step);
                return;
        }
        (void) snprintf(index, sizeof(index), "%" PRIu32, e->op->index);

        if (step == STEP_COMPUTE_READ || step == STEP_COMPUTE_MODE || step == STEP_COMPUTE_RESTORE) {
                char *argv_set[] = { (char *) "nvidia-smi", (char *) "-i", index, (char *) "-c",
                                     (char *) (step == STEP_COMPUTE_MODE ? "EXCLUSIVE_PROCESS"
                                                                         : compute_mode_argument(e->op->restore)),
                                     NULL };
                char *argv_read[] = { (char *) "nvidia-smi", (char *) "-i", index,
                                      (char *) "--query-gpu=compute_mode", (char *) "--format=csv,noheader", NULL };

                path = e->mps->smi_path;
                r = path ? nvidia_run_start(e->mps->event, path, step == STEP_COMPUTE_READ ? argv_read : argv_set, &o,
                                            on_run_done, e, &e->run)
                         : -ENOENT;
        } else {
                char *argv_d[] = { (char *) "nvidia-cuda-mps-control", (char *) "-d", NULL };
                char *argv_in[] = { (char *) "nvidia-cuda-mps-control", NULL };

                switch (step) {
                case STEP_PROBE:
                case STEP_CHECK:
                        stdin_text = strdup("get_server_list\n");
                        break;
                case STEP_LIMITS:
                        (void) asprintf_safe(&stdin_text,
                                        "set_default_device_pinned_mem_limit 0 %" PRIu64 "M\n"
                                        "set_default_active_thread_percentage %" PRIu32 "\n",
                                        e->op->pinned_mib, e->op->pct);
                        break;
                case STEP_QUIT:
                        stdin_text = strdup("quit\n");
                        break;
                default:
                        break;
                }
                env = control_env(e);
                if (!env || (step != STEP_START && !stdin_text)) {
                        entry_fail_op(e, -ENOMEM, "Out of memory.");
                        return;
                }
                o.env = env;
                o.stdin_data = stdin_text;
                o.stdin_len = stdin_text ? strlen(stdin_text) : 0;
                path = e->mps->control_path;
                r = path ? nvidia_run_start(e->mps->event, path, step == STEP_START ? argv_d : argv_in, &o,
                                            on_run_done, e, &e->run)
                         : -ENOENT;
        }
        if (r < 0) {
                if (!path)
                        (void) asprintf_safe(&msg, "%s: the tool was not found", step_name(step));
                else
                        (void) asprintf_safe(&msg, "%s: cannot run %s: %s", step_name(step), path, strerror(-r));
                entry_fail_op(e, r, msg ? msg : "Out of memory.");
        }
}

/* The launcher, decided the first time a daemon is started or stopped: a node that
 * never runs MPS never asks the bus about systemd. */
static bool mps_launcher_is_systemd(Mps *m) {
        if (!m->launcher_set)
                (void) mps_set_launcher(m, m->launcher);
        return m->systemd;
}

/* The last step of a disable: the compute mode found before MPS (its record, else
 * DEFAULT), then the directories go. */
static void entry_restore_compute_mode(Entry *e) {
        e->op->restore = entry_load_compute_mode(e, NULL);
        entry_run_step(e, STEP_COMPUTE_RESTORE);
}

/* Starts the daemon as the launcher does: -d here, or the unit through systemd. */
static void entry_start_daemon(Entry *e) {
        entry_run_step(e, mps_launcher_is_systemd(e->mps) ? STEP_UNIT_START : STEP_START);
}

static void entry_op_begin(Entry *e) {
        Op *op = e->op;
        bool found;
        int r;

        switch (op->kind) {
        case OP_ENABLE:
                if (e->state == MPS_STATE_RUNNING) {
                        if (op->pinned_mib == e->pinned_mib && op->pct == e->pct) {
                                entry_finish_op(e, 0, NULL);
                                return;
                        }
                        entry_run_step(e, STEP_LIMITS);
                        return;
                }
                entry_set_state(e, MPS_STATE_STARTING, NULL);
                /* The mode to restore is read once per MPS session: a record left by an
                 * earlier enable (this GPU is ours in EXCLUSIVE_PROCESS since) stays. */
                (void) entry_load_compute_mode(e, &found);
                entry_run_step(e, found ? STEP_COMPUTE_MODE : STEP_COMPUTE_READ);
                return;
        case OP_DISABLE:
                if (e->state == MPS_STATE_OFF && access(e->base_dir, F_OK) < 0) {
                        entry_finish_op(e, 0, NULL);
                        return;
                }
                entry_run_step(e, STEP_QUIT);
                return;
        case OP_CHECK:
        case OP_ADOPT:
                entry_run_step(e, STEP_CHECK);
                return;
        case OP_RESTART:
                r = entry_make_dirs(e);
                if (r < 0) {
                        entry_fail_op(e, r, "Cannot create the MPS directories.");
                        return;
                }
                entry_start_daemon(e);
                return;
        }
}

static void entry_kick(Entry *e) {
        if (e->op || !e->queue)
                return;
        e->op = e->queue;
        e->queue = e->op->next;
        e->op->next = NULL;
        e->n_queued--;
        entry_op_begin(e);
}

static int on_kick(sd_event_source *s, void *userdata) {
        Mps *m = userdata;

        for (size_t i = 0; i < m->n_entries; i++)
                entry_kick(m->entries[i]);
        return 0;
}

static void entry_enabled_ok(Entry *e) {
        e->pinned_mib = e->op->pinned_mib;
        e->pct = e->op->pct;
        if (e->op->kind == OP_ENABLE)
                e->restarted = false;
        entry_set_state(e, MPS_STATE_RUNNING, NULL);
        entry_finish_op(e, 0, NULL);
}

/* The control tool's answer: -ESRCH when either stream says no daemon runs (the real
 * tool writes that on stderr), else what stdout says (nvidia_mps_parse_reply()). */
static int reply_status(const NvidiaRunResult *res, char **perr) {
        if (nvidia_mps_parse_reply(res->err, res->err_len, NULL) == -ESRCH)
                return -ESRCH;
        return nvidia_mps_parse_reply(res->out, res->out_len, perr);
}

static void on_run_done(NvidiaRun *run, int error, const NvidiaRunResult *res, void *userdata) {
        /* Freed when this returns: res points into it; the next step has its own run. */
        _cleanup_(nvidia_run_freep) _unused_ NvidiaRun *finished = run;
        Entry *e = userdata;
        Op *op = e->op;
        _cleanup_free_ char *msg = NULL, *perr = NULL;
        NvidiaComputeMode mode = NVIDIA_COMPUTE_MODE_UNKNOWN;
        int r;

        e->run = NULL;
        msg = tool_message(step_name(op->step), error < 0 ? NULL : res, error);
        if (error < 0) {
                r = error;
                goto fail_or_dead;
        }

        switch (op->step) {
        case STEP_COMPUTE_READ:
                r = res->exit_status == 0 ? nvidia_smi_parse_compute_mode_query(res->out, res->out_len, &mode, &perr)
                                          : -EIO;
                if (r >= 0 && mode == NVIDIA_COMPUTE_MODE_UNKNOWN)
                        r = -EBADMSG;
                if (r >= 0) {
                        /* Saved before anything changes, for whichever probe turns MPS off. */
                        r = entry_make_dirs(e);
                        if (r >= 0)
                                r = entry_save_compute_mode(e, mode);
                        if (r < 0) {
                                free(msg);
                                msg = NULL;
                                (void) asprintf_safe(&msg, "Cannot record the compute mode of GPU %s in %s/%s: %s",
                                                     e->uuid, e->base_dir, MPS_MODE_FILE, strerror(-r));
                        }
                }
                if (r < 0)
                        goto fail;
                entry_run_step(e, STEP_COMPUTE_MODE);
                break;
        case STEP_COMPUTE_MODE:
        case STEP_COMPUTE_RESTORE: {
                NvidiaComputeMode want = op->step == STEP_COMPUTE_MODE ? NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS
                                                                        : op->restore;

                r = res->exit_status == 0 ? nvidia_smi_parse_compute_mode_reply(res->out, res->out_len, &mode, &perr)
                                          : -EIO;
                if (r >= 0 && mode != want)
                        r = -EBADMSG;
                if (r < 0)
                        goto fail;
                if (op->step == STEP_COMPUTE_RESTORE) {
                        entry_remove_dirs(e);
                        entry_set_state(e, MPS_STATE_OFF, NULL);
                        e->restarted = false;
                        entry_finish_op(e, 0, NULL);
                        break;
                }
                r = entry_make_dirs(e);
                if (r < 0) {
                        free(msg);
                        msg = NULL;
                        (void) asprintf_safe(&msg, "Cannot create %s: %s", e->pipe_dir, strerror(-r));
                        goto fail;
                }
                entry_run_step(e, STEP_PROBE);
                break;
        }
        case STEP_PROBE:
        case STEP_CHECK: {
                _cleanup_free_ pid_t *pids = NULL;
                size_t n = 0;

                if (res->exit_status == 0 &&
                    nvidia_mps_parse_server_list(res->out, res->out_len, &pids, &n, NULL) >= 0) {
                        /* A daemon serves this pipe directory. */
                        if (op->step == STEP_PROBE)
                                entry_run_step(e, STEP_LIMITS);
                        else if (op->kind == OP_ADOPT) {
                                /* Left by an earlier probe: ours again, with the limits that
                                 * probe sent if its record names this very daemon, else
                                 * unknown until the next SetMps sends them. */
                                entry_load_limits(e);
                                if (e->pinned_mib > 0)
                                        log_info("Adopted the running MPS control daemon of GPU %s (limits %" PRIu64
                                                 " MiB, %" PRIu32 " %%).", e->uuid, e->pinned_mib, e->pct);
                                else
                                        log_info("Adopted the running MPS control daemon of GPU %s (limits unknown).",
                                                 e->uuid);
                                entry_set_state(e, MPS_STATE_RUNNING, NULL);
                                entry_finish_op(e, 0, NULL);
                        } else
                                entry_finish_op(e, 0, NULL);
                        break;
                }
                r = reply_status(res, NULL);
                if (r == -ESRCH && op->step == STEP_PROBE) {
                        entry_start_daemon(e);
                        break;
                }
                if (r >= 0)
                        r = -EBADMSG;
                goto fail_or_dead;
        }
        case STEP_START:
                /* "already running": another daemon took this pipe directory just now; it
                 * answers from there, so it is the one to send the limits to. */
                if (res->exit_status != 0 && reply_status(res, NULL) != -EEXIST) {
                        r = -EIO;
                        goto fail;
                }
                op->started = true;
                if (op->kind == OP_RESTART && op->pinned_mib == 0) {
                        /* An adopted daemon whose limits were never sent: its defaults. */
                        entry_enabled_ok(e);
                        break;
                }
                entry_run_step(e, STEP_LIMITS);
                break;
        case STEP_LIMITS: {
                uint32_t tenths = 0;

                /* The daemon prints the percentage in force back: one it did not take
                 * shows there (mps-H100-set-percentage-3.txt). */
                r = nvidia_mps_parse_reply(res->err, res->err_len, NULL) == -ESRCH ? -ESRCH :
                    nvidia_mps_parse_percentage_reply(res->out, res->out_len, &tenths, &perr);
                if (r >= 0 && res->exit_status != 0)
                        r = -EIO;
                if (r == -ESRCH && !op->started) {
                        /* The daemon we thought running is gone: start it. */
                        entry_start_daemon(e);
                        break;
                }
                if (r >= 0 && tenths != op->pct * 10) {
                        free(msg);
                        msg = NULL;
                        (void) asprintf_safe(&msg, "%s: the daemon kept an active thread percentage of %" PRIu32
                                             ".%" PRIu32 " instead of %" PRIu32, step_name(op->step), tenths / 10,
                                             tenths % 10, op->pct);
                        r = -EBADMSG;
                }
                if (r < 0)
                        goto fail;
                entry_enabled_ok(e);
                entry_save_limits(e);
                break;
        }
        case STEP_QUIT:
                r = reply_status(res, &perr);
                if (r >= 0 && res->exit_status != 0)
                        r = -EIO;
                if (r < 0 && r != -ESRCH)
                        goto fail;
                if (mps_launcher_is_systemd(e->mps))
                        entry_run_step(e, STEP_UNIT_STOP);
                else
                        entry_restore_compute_mode(e);
                break;
        case STEP_UNIT_START:
        case STEP_UNIT_STOP:
                /* systemd jobs, not tool runs: they end in on_job_done(). */
                r = -EINVAL;
                goto fail;
        }
        return;

fail_or_dead:
        if (op->kind == OP_ADOPT) {
                /* Nothing serves that directory: stays off (a disable removes it). */
                log_debug("No MPS control daemon for the directory of GPU %s, not adopted: %s", e->uuid, strna(msg));
                entry_finish_op(e, 0, NULL);
                return;
        }
        if (op->kind == OP_CHECK) {
                entry_check_failed(e, r, msg);
                return;
        }
fail:
        entry_fail_op(e, r, msg ? msg : "Out of memory.");
}

static void on_job_done(MpsSystemdJob *job, int error, const char *message, void *userdata) {
        /* The job is done with: freed when this returns. */
        _cleanup_(mps_systemd_job_freep) _unused_ MpsSystemdJob *finished = job;
        Entry *e = userdata;
        Op *op = e->op;

        e->job = NULL;
        /* A unit systemd does not know is not running: stopped is what was asked for. */
        if (error == -ENOENT && op->step == STEP_UNIT_STOP)
                error = 0;
        if (error < 0) {
                entry_fail_op(e, error, message ?: "The systemd job failed.");
                return;
        }
        if (op->step == STEP_UNIT_STOP) {
                entry_restore_compute_mode(e);
                return;
        }
        /* Type=forking: the job is done once -d returned, i.e. the daemon listens. */
        op->started = true;
        if (op->kind == OP_RESTART && op->pinned_mib == 0) {
                /* An adopted daemon whose limits were never sent: its defaults. */
                entry_enabled_ok(e);
                return;
        }
        entry_run_step(e, STEP_LIMITS);
}

int mps_set(Mps *m, const MpsRequest *req, MpsDoneCallback done, void *userdata) {
        Entry *e;
        Op *op, **tail;
        int r;

        if (!m || !req)
                return -EINVAL;
        r = mps_request_validate(req, NULL);
        if (r < 0)
                return r;
        r = mps_get_entry(m, req->uuid, &e);
        if (r < 0)
                return r;
        if (e->n_queued >= MPS_QUEUE_MAX)
                return -EBUSY;
        op = calloc(1, sizeof(Op));
        if (!op)
                return -ENOMEM;
        *op = (Op) {
                .kind = req->enabled ? OP_ENABLE : OP_DISABLE,
                .enabled = req->enabled,
                .index = req->index,
                .pinned_mib = req->pinned_memory_bytes >> 20,
                .pct = req->active_thread_percentage,
                .done = done,
                .userdata = userdata,
        };
        for (tail = &e->queue; *tail; tail = &(*tail)->next)
                ;
        *tail = op;
        e->n_queued++;

        /* A health check in progress gives way: it only reads. */
        if (e->op && e->op->kind == OP_CHECK) {
                e->run = nvidia_run_free(e->run);
                e->op = mfree(e->op);
        }
        mps_schedule_kick(m);
        return 0;
}

int mps_check_all(Mps *m) {
        int n = 0;

        for (size_t i = 0; i < m->n_entries; i++) {
                Entry *e = m->entries[i];
                Op *op;

                if (e->state != MPS_STATE_RUNNING || e->op || e->queue)
                        continue;
                op = calloc(1, sizeof(Op));
                if (!op)
                        return -ENOMEM;
                *op = (Op) { .kind = OP_CHECK, .index = 0 };
                e->op = op;
                entry_op_begin(e);
                n++;
        }
        return n;
}

static int on_check_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Mps *m = userdata;
        int r;

        r = mps_check_all(m);
        if (r < 0)
                log_debug_errno(r, "Failed to start the MPS health checks, ignoring: %m");
        mps_arm_check(m);
        return 0;
}

/* The check timer runs only while some daemon runs: no wakeups on a node without MPS. */
static void mps_arm_check(Mps *m) {
        bool any = false;
        int r = 0;

        for (size_t i = 0; i < m->n_entries && !any; i++)
                any = m->entries[i]->state == MPS_STATE_RUNNING;
        if (!any || m->check_usec == 0) {
                if (m->check_source)
                        (void) sd_event_source_set_enabled(m->check_source, SD_EVENT_OFF);
                return;
        }
        if (!m->check_source) {
                r = sd_event_add_time_relative(m->event, &m->check_source, CLOCK_MONOTONIC, m->check_usec, 0,
                                               on_check_timer, m);
                if (r >= 0)
                        (void) sd_event_source_set_description(m->check_source, "mps-check");
        } else if (sd_event_source_get_enabled(m->check_source, NULL) <= 0) {
                r = sd_event_source_set_time_relative(m->check_source, m->check_usec);
                if (r >= 0)
                        r = sd_event_source_set_enabled(m->check_source, SD_EVENT_ONESHOT);
        }
        if (r < 0)
                log_warning_errno(r, "Failed to arm the MPS health check timer, ignoring: %m");
}

int mps_set_check_interval(Mps *m, uint64_t usec) {
        if (usec != m->check_usec)
                m->check_source = sd_event_source_disable_unref(m->check_source);
        m->check_usec = usec;
        mps_arm_check(m);
        return 0;
}

bool mps_uses_systemd(Mps *m) {
        return m && m->systemd;
}

int mps_set_launcher(Mps *m, ConfigMpsLauncher launcher) {
        _cleanup_(mps_systemd_freep) MpsSystemd *bus = NULL;
        int r = 0;

        m->launcher_set = true;
        if (launcher == MPS_LAUNCHER_DIRECT ||
            (launcher == MPS_LAUNCHER_AUTO && !streq(m->directory, MPS_SYSTEMD_DIRECTORY))) {
                log_info("MPS control daemons run as children of the probe (nvidia.mpsLauncher %s%s).",
                         launcher == MPS_LAUNCHER_DIRECT ? "direct" : "auto: the MPS directory is not ",
                         launcher == MPS_LAUNCHER_DIRECT ? "" : MPS_SYSTEMD_DIRECTORY);
                goto direct;
        }
        r = mps_systemd_open(m->event, &bus);
        if (r <= 0 && launcher == MPS_LAUNCHER_AUTO) {
                log_info("MPS control daemons run as children of the probe (nvidia.mpsLauncher auto: %s).",
                         r == 0 ? "systemd does not own its name on the system bus" : "no system bus");
                goto direct;
        }
        if (r < 0)
                log_warning_errno(r, "nvidia.mpsLauncher is systemd, but the system bus cannot be reached, "
                                  "MPS will fail: %m");
        else if (r == 0)
                log_warning("nvidia.mpsLauncher is systemd, but systemd does not own its name on the system bus, "
                            "MPS will fail.");
        else
                log_info("MPS control daemons run as %s instances.", MPS_SYSTEMD_TEMPLATE);
        m->bus = mps_systemd_free(m->bus);
        m->bus = TAKE_PTR(bus);
        m->systemd = true;
        return 1;
direct:
        m->bus = mps_systemd_free(m->bus);
        m->systemd = false;
        return 0;
}

int mps_configure(Mps **mps, sd_event *event, const Config *c, MpsStateCallback state_cb, void *userdata) {
        _cleanup_free_ char *smi = NULL, *control = NULL;
        bool adopt = false;
        int r;

        if (!*mps) {
                _cleanup_free_ char *dir = NULL;

                if (asprintf_safe(&dir, "%s/mps", isempty(c->runtime_directory) ? "/run/kgpu" : c->runtime_directory) < 0)
                        return -ENOMEM;
                r = mps_new(event, dir, state_cb, userdata, mps);
                if (r < 0)
                        return r;
                adopt = true;
        }
        if (c->nvidia_enabled) {
                /* Not found: SetMps fails with MpsFailed naming the missing tool. */
                /* A tool refused as untrusted is not used either (manager_configure() refused
                 * the configuration naming it already: nvidia_tools_check()). */
                (void) nvidia_tool_find(c->nvidia_driver_root, c->nvidia_smi_path, "nvidia-smi", &smi, NULL);
                (void) nvidia_tool_find(c->nvidia_driver_root, c->nvidia_mps_control_path, "nvidia-cuda-mps-control",
                                        &control, NULL);
        }
        r = mps_set_tools(*mps, smi, control);
        if (r < 0)
                return r;
        if (!(*mps)->launcher_set)
                (*mps)->launcher = c->nvidia_mps_launcher;
        if (adopt) {
                r = mps_adopt(*mps);
                if (r < 0)
                        log_warning_errno(r, "Failed to look for MPS daemons of an earlier probe, ignoring: %m");
        }
        return mps_set_check_interval(*mps, (uint64_t) c->nvidia_health_interval_ms * 1000U);
}

int mps_adopt(Mps *m) {
        _cleanup_close_ int fd = -EBADF;
        struct dirent *de;
        DIR *d;
        int n = 0, r = 0;

        fd = open(m->directory, O_RDONLY|O_DIRECTORY|O_CLOEXEC|O_NOFOLLOW);
        if (fd < 0)
                return errno == ENOENT ? 0 : -errno;
        d = fdopendir(fd);
        if (!d)
                return -errno;
        TAKE_FD(fd);
        while ((de = readdir(d))) {
                Entry *e;
                Op *op, **tail;

                if (!nvidia_gpu_uuid_is_valid(de->d_name) || (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN))
                        continue;
                r = mps_get_entry(m, de->d_name, &e);
                if (r < 0)
                        break;
                if (e->op || e->queue || e->state != MPS_STATE_OFF)
                        continue;
                op = calloc(1, sizeof(Op));
                if (!op) {
                        r = -ENOMEM;
                        break;
                }
                op->kind = OP_ADOPT;
                for (tail = &e->queue; *tail; tail = &(*tail)->next)
                        ;
                *tail = op;
                e->n_queued++;
                n++;
        }
        closedir(d);
        if (n > 0)
                mps_schedule_kick(m);
        return r < 0 ? r : n;
}
