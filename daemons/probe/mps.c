/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mps.c — per-GPU NVIDIA MPS controller (see mps.h).
 *
 * Each GPU has an entry with its state, the limits in force, the operation under way and
 * a FIFO of requests. An operation is a small state machine of steps, each one tool run
 * whose callback parses the answer and starts the next step or ends the operation.
 * Requests are started from a defer source, so mps_set() never calls back synchronously.
 * This file keeps the entries and the requests; the steps are in mps-steps.c, the
 * directories and records in mps-files.c (mps-internal.h).
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
#include "daemons/probe/mps-internal.h"
#include "daemons/probe/nvidia-driver-files.h"

static void mps_arm_check(Mps *m);

int mps_asprintf_safe(char **p, const char *fmt, ...) {
        va_list ap;
        int k;

        va_start(ap, fmt);
        k = vasprintf(p, fmt, ap);
        va_end(ap);
        if (k < 0)
                *p = NULL;
        return k;
}

const char *mps_strna(const char *s) {
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
        free(m->library_path);
        return mfree(m);
}



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
        r = sd_event_add_defer(event, &m->kick_source, mps_on_kick, m);
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
                (void) mps_asprintf_safe(&msg, "GPU %s is not under MPS in the configuration (sharing.mps.resources): "
                                     "refusing to enable MPS there.", req->uuid);
                r = -EPERM;
        } else if (req->mig_enabled)
                (void) mps_asprintf_safe(&msg, "GPU %s has MIG enabled: MPS needs a GPU without MIG.", req->uuid);
        else if (req->active_thread_percentage < 1 || req->active_thread_percentage > 100)
                (void) mps_asprintf_safe(&msg, "Active thread percentage %" PRIu32 " is not within 1..100.",
                                req->active_thread_percentage);
        else if (req->pinned_memory_bytes < (UINT64_C(1) << 20))
                (void) mps_asprintf_safe(&msg, "Pinned memory limit of %" PRIu64 " bytes is below 1 MiB.",
                                req->pinned_memory_bytes);
        else if (req->gpu_memory_bytes == 0)
                (void) mps_asprintf_safe(&msg, "The memory of GPU %s is unknown: no pinned memory limit can be checked.",
                                     req->uuid);
        else if (req->pinned_memory_bytes > req->gpu_memory_bytes)
                (void) mps_asprintf_safe(&msg, "Pinned memory limit of %" PRIu64 " bytes is more than the %" PRIu64
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
            mps_asprintf_safe(&e->base_dir, "%s/%s", m->directory, uuid) < 0 ||
            mps_asprintf_safe(&e->pipe_dir, "%s/pipe", e->base_dir) < 0 ||
            mps_asprintf_safe(&e->log_dir, "%s/log", e->base_dir) < 0 ||
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

void mps_entry_set_state(Entry *e, MpsState state, const char *message) {
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
char *mps_tool_message(const char *what, const NvidiaRunResult *res, int error) {
        _cleanup_free_ char *raw = NULL;
        char *msg, *p;
        size_t k = 0;

        if (error == -ETIME)
                (void) mps_asprintf_safe(&raw, "%s timed out", what);
        else if (res && res->signal > 0)
                (void) mps_asprintf_safe(&raw, "%s killed by signal %d: %s %s", what, res->signal, res->out, res->err);
        else if (res)
                (void) mps_asprintf_safe(&raw, "%s (exit status %d): %s %s", what, res->exit_status, res->out, res->err);
        else
                (void) mps_asprintf_safe(&raw, "%s failed: %s", what, strerror(-error));
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

void mps_entry_finish_op(Entry *e, int error, const char *message) {
        Op *op = TAKE_PTR(e->op);

        if (op && op->done)
                op->done(e->mps, error, message, op->userdata);
        free(op);
        if (e->queue)
                mps_schedule_kick(e->mps);
}



/* A health check found the daemon gone (or could not ask it): restart it once with its
 * limits; gone again after that: failed. */
void mps_entry_check_failed(Entry *e, int r, const char *msg) {
        Op *op = e->op;

        if (!e->restarted) {
                e->restarted = true;
                log_struct(LOG_WARNING, KGPU_MESSAGE_GPU_HEALTH,
                           "MPS control daemon of GPU %s is gone (%s), restarting it with its limits.",
                           e->uuid, mps_strna(msg));
                op->kind = OP_RESTART;
                op->pinned_mib = e->pinned_mib;
                op->pct = e->pct;
                mps_entry_op_begin(e);
                return;
        }
        mps_entry_set_state(e, MPS_STATE_FAILED, msg);
        log_struct(LOG_WARNING, KGPU_MESSAGE_GPU_HEALTH,
                   "MPS control daemon of GPU %s is gone again after its restart, MPS failed: %s", e->uuid,
                   mps_strna(msg));
        mps_entry_finish_op(e, r, msg);
}

void mps_entry_fail_op(Entry *e, int error, const char *message) {
        Op *op = e->op;

        if (op && op->kind == OP_CHECK) {
                mps_entry_check_failed(e, error, message);
                return;
        }
        if (op && op->kind == OP_ADOPT) {
                mps_entry_finish_op(e, 0, NULL);
                return;
        }
        if (op)
                mps_entry_set_state(e, MPS_STATE_FAILED, message);
        if (op && op->kind == OP_RESTART)
                log_struct(LOG_WARNING, KGPU_MESSAGE_GPU_HEALTH,
                           "MPS control daemon of GPU %s could not be restarted, MPS failed: %s", e->uuid,
                           mps_strna(message));
        mps_entry_finish_op(e, error, message);
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
                mps_entry_op_begin(e);
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

                if (mps_asprintf_safe(&dir, "%s/mps", isempty(c->runtime_directory) ? "/run/kgpu" : c->runtime_directory) < 0)
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
        /* Tools of a driver root load that root's libraries (nvidia-driver-files.h). */
        (*mps)->library_path = mfree((*mps)->library_path);
        if (!isempty(c->nvidia_driver_root) && !streq(c->nvidia_driver_root, "/")) {
                const char *rest = control ? startswith(control, c->nvidia_driver_root) : NULL;

                if (!rest && smi)
                        rest = startswith(smi, c->nvidia_driver_root);
                if (rest && rest[0] == '/') {
                        r = nvidia_driver_library_path(c->nvidia_driver_root, &(*mps)->library_path);
                        if (r == -ENOMEM)
                                return r;
                        if (r < 0)
                                log_notice_errno(r, "No library directories in the ld cache of the driver root %s, "
                                                 "the MPS tools run with the host's libraries: %m",
                                                 c->nvidia_driver_root);
                }
        }
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
