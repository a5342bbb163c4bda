/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mps-steps.c — the steps of an MPS operation: one nvidia-smi / nvidia-cuda-mps-control run or systemd job each, and what its answer leads to (see mps.h, mps-internal.h).
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/mps-internal.h"

extern char **environ;

static char **control_env(Entry *e) {
        _cleanup_strv_free_ char **env = NULL;
        char *s;

        for (char **v = environ; v && *v; v++) {
                if (startswith(*v, "CUDA_MPS_PIPE_DIRECTORY=") || startswith(*v, "CUDA_MPS_LOG_DIRECTORY=") ||
                    startswith(*v, "CUDA_VISIBLE_DEVICES=") || (e->mps->library_path && startswith(*v, "LD_LIBRARY_PATH=")))
                        continue;
                if (strv_extend(&env, *v) < 0)
                        return NULL;
        }
        if (e->mps->library_path &&
            (asprintf(&s, "LD_LIBRARY_PATH=%s", e->mps->library_path) < 0 || strv_consume(&env, s) < 0))
                return NULL;
        if (asprintf(&s, "CUDA_MPS_PIPE_DIRECTORY=%s", e->pipe_dir) < 0 || strv_consume(&env, s) < 0)
                return NULL;
        if (asprintf(&s, "CUDA_MPS_LOG_DIRECTORY=%s", e->log_dir) < 0 || strv_consume(&env, s) < 0)
                return NULL;
        if (asprintf(&s, "CUDA_VISIBLE_DEVICES=%s", e->uuid) < 0 || strv_consume(&env, s) < 0)
                return NULL;
        return TAKE_PTR(env);
}

/* environ with LD_LIBRARY_PATH set to the driver root's libraries (library_path set). */
static char **smi_env(Entry *e) {
        _cleanup_strv_free_ char **env = NULL;
        char *s;

        for (char **v = environ; v && *v; v++)
                if (!startswith(*v, "LD_LIBRARY_PATH=") && strv_extend(&env, *v) < 0)
                        return NULL;
        if (asprintf(&s, "LD_LIBRARY_PATH=%s", e->mps->library_path) < 0 || strv_consume(&env, s) < 0)
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
                (void) mps_asprintf_safe(&msg, "%s %s: systemd does not answer on the system bus "
                                     "(nvidia.mpsLauncher is systemd)", step_name(step), e->unit);
                mps_entry_fail_op(e, -EHOSTDOWN, msg ?: "Out of memory.");
                return;
        }
        if (step == STEP_UNIT_START) {
                if (!streq(e->mps->directory, MPS_SYSTEMD_DIRECTORY))
                        (void) mps_asprintf_safe(&msg, "%s %s: the unit reads %s/%s/%s, but the MPS directory is %s "
                                             "(runtimeDirectory); set nvidia.mpsLauncher to direct",
                                             step_name(step), e->unit, MPS_SYSTEMD_DIRECTORY, e->uuid,
                                             MPS_SYSTEMD_ENVIRONMENT_FILE, e->mps->directory);
                else if (!e->mps->control_path)
                        (void) mps_asprintf_safe(&msg, "%s %s: nvidia-cuda-mps-control was not found", step_name(step),
                                             e->unit);
                else {
                        r = mps_systemd_write_environment(e->base_dir, e->uuid, e->pipe_dir, e->log_dir,
                                                          e->mps->control_path, e->mps->library_path, &bad);
                        if (r == -EINVAL)
                                (void) mps_asprintf_safe(&msg, "%s %s: %s cannot go into %s/%s: only letters, digits "
                                                     "and / . _ : + , @ - are taken", step_name(step), e->unit,
                                                     mps_strna(bad), e->base_dir, MPS_SYSTEMD_ENVIRONMENT_FILE);
                        else if (r < 0)
                                (void) mps_asprintf_safe(&msg, "%s %s: cannot write %s/%s: %s", step_name(step), e->unit,
                                                     e->base_dir, MPS_SYSTEMD_ENVIRONMENT_FILE, strerror(-r));
                        if (r >= 0)
                                goto queue;
                }
                mps_entry_fail_op(e, -EINVAL, msg ?: "Out of memory.");
                return;
        }
queue:
        r = mps_systemd_job(e->mps->bus, step == STEP_UNIT_START ? "RestartUnit" : "StopUnit", e->unit,
                            3 * (e->mps->timeout_usec > 0 ? e->mps->timeout_usec : NVIDIA_RUN_TIMEOUT_USEC_DEFAULT),
                            on_job_done, e, &e->job);
        if (r < 0) {
                (void) mps_asprintf_safe(&msg, "%s %s: %s", step_name(step), e->unit, strerror(-r));
                mps_entry_fail_op(e, r, msg ?: "Out of memory.");
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
                                                                         : mps_compute_mode_argument(e->op->restore)),
                                     NULL };
                char *argv_read[] = { (char *) "nvidia-smi", (char *) "-i", index,
                                      (char *) "--query-gpu=compute_mode", (char *) "--format=csv,noheader", NULL };

                path = e->mps->smi_path;
                if (e->mps->library_path) {
                        /* nvidia-smi of a driver root: that root's libraries. */
                        env = smi_env(e);
                        if (!env) {
                                mps_entry_fail_op(e, -ENOMEM, "Out of memory.");
                                return;
                        }
                        o.env = env;
                }
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
                        (void) mps_asprintf_safe(&stdin_text,
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
                        mps_entry_fail_op(e, -ENOMEM, "Out of memory.");
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
                        (void) mps_asprintf_safe(&msg, "%s: the tool was not found", step_name(step));
                else
                        (void) mps_asprintf_safe(&msg, "%s: cannot run %s: %s", step_name(step), path, strerror(-r));
                mps_entry_fail_op(e, r, msg ? msg : "Out of memory.");
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
        e->op->restore = mps_entry_load_compute_mode(e, NULL);
        entry_run_step(e, STEP_COMPUTE_RESTORE);
}

/* Starts the daemon as the launcher does: -d here, or the unit through systemd. */
static void entry_start_daemon(Entry *e) {
        entry_run_step(e, mps_launcher_is_systemd(e->mps) ? STEP_UNIT_START : STEP_START);
}

void mps_entry_op_begin(Entry *e) {
        Op *op = e->op;
        bool found;
        int r;

        switch (op->kind) {
        case OP_ENABLE:
                if (e->state == MPS_STATE_RUNNING) {
                        if (op->pinned_mib == e->pinned_mib && op->pct == e->pct) {
                                mps_entry_finish_op(e, 0, NULL);
                                return;
                        }
                        entry_run_step(e, STEP_LIMITS);
                        return;
                }
                mps_entry_set_state(e, MPS_STATE_STARTING, NULL);
                /* The mode to restore is read once per MPS session: a record left by an
                 * earlier enable (this GPU is ours in EXCLUSIVE_PROCESS since) stays. */
                (void) mps_entry_load_compute_mode(e, &found);
                entry_run_step(e, found ? STEP_COMPUTE_MODE : STEP_COMPUTE_READ);
                return;
        case OP_DISABLE:
                if (e->state == MPS_STATE_OFF && access(e->base_dir, F_OK) < 0) {
                        mps_entry_finish_op(e, 0, NULL);
                        return;
                }
                entry_run_step(e, STEP_QUIT);
                return;
        case OP_CHECK:
        case OP_ADOPT:
                entry_run_step(e, STEP_CHECK);
                return;
        case OP_RESTART:
                r = mps_entry_make_dirs(e);
                if (r < 0) {
                        mps_entry_fail_op(e, r, "Cannot create the MPS directories.");
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
        mps_entry_op_begin(e);
}

int mps_on_kick(sd_event_source *s, void *userdata) {
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
        mps_entry_set_state(e, MPS_STATE_RUNNING, NULL);
        mps_entry_finish_op(e, 0, NULL);
}

/* The control tool's answer: -ESRCH when either stream says no daemon runs (the real
 * tool writes that on stderr), else what stdout says (nvidia_mps_parse_reply()). */
static int reply_status(const NvidiaRunResult *res, char **perr) {
        if (nvidia_mps_parse_reply(res->err, res->err_len, NULL) == -ESRCH)
                return -ESRCH;
        return nvidia_mps_parse_reply(res->out, res->out_len, perr);
}

/* What a step's answer leads to: the next step or the operation's end were started
 * (OK), or the operation fails (FAIL), or, when no daemon answered, a check or an
 * adoption ends its own way (FAIL_OR_DEAD). */
typedef enum StepResult {
        STEP_RESULT_OK,
        STEP_RESULT_FAIL,
        STEP_RESULT_FAIL_OR_DEAD,
} StepResult;

/* Replaces *msg (the tool's answer) by a message of our own. */
#define set_msg(msg, ...) do { *(msg) = mfree(*(msg)); (void) mps_asprintf_safe((msg), __VA_ARGS__); } while (0)

static StepResult on_compute_read(Entry *e, const NvidiaRunResult *res, char **msg, int *ret_r) {
        _cleanup_free_ char *perr = NULL;
        NvidiaComputeMode mode = NVIDIA_COMPUTE_MODE_UNKNOWN;
        int r;

        r = res->exit_status == 0 ? nvidia_smi_parse_compute_mode_query(res->out, res->out_len, &mode, &perr)
                                  : -EIO;
        if (r >= 0 && mode == NVIDIA_COMPUTE_MODE_UNKNOWN)
                r = -EBADMSG;
        if (r >= 0) {
                /* Saved before anything changes, for whichever probe turns MPS off. */
                r = mps_entry_make_dirs(e);
                if (r >= 0)
                        r = mps_entry_save_compute_mode(e, mode);
                if (r < 0)
                        set_msg(msg, "Cannot record the compute mode of GPU %s in %s/%s: %s",
                                e->uuid, e->base_dir, MPS_MODE_FILE, strerror(-r));
        }
        if (r < 0) {
                *ret_r = r;
                return STEP_RESULT_FAIL;
        }
        entry_run_step(e, STEP_COMPUTE_MODE);
        return STEP_RESULT_OK;
}

/* -c EXCLUSIVE_PROCESS on the way up, -c <the mode before> on the way down. */
static StepResult on_compute_set(Entry *e, const NvidiaRunResult *res, char **msg, int *ret_r) {
        _cleanup_free_ char *perr = NULL;
        Op *op = e->op;
        NvidiaComputeMode mode = NVIDIA_COMPUTE_MODE_UNKNOWN;
        NvidiaComputeMode want = op->step == STEP_COMPUTE_MODE ? NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS
                                                                : op->restore;
        int r;

        r = res->exit_status == 0 ? nvidia_smi_parse_compute_mode_reply(res->out, res->out_len, &mode, &perr)
                                  : -EIO;
        if (r >= 0 && mode != want)
                r = -EBADMSG;
        if (r < 0) {
                *ret_r = r;
                return STEP_RESULT_FAIL;
        }
        if (op->step == STEP_COMPUTE_RESTORE) {
                mps_entry_remove_dirs(e);
                mps_entry_set_state(e, MPS_STATE_OFF, NULL);
                e->restarted = false;
                mps_entry_finish_op(e, 0, NULL);
                return STEP_RESULT_OK;
        }
        r = mps_entry_make_dirs(e);
        if (r < 0) {
                set_msg(msg, "Cannot create %s: %s", e->pipe_dir, strerror(-r));
                *ret_r = r;
                return STEP_RESULT_FAIL;
        }
        entry_run_step(e, STEP_PROBE);
        return STEP_RESULT_OK;
}

/* Left by an earlier probe: ours again, with the limits that probe sent if its record
 * names this very daemon, else unknown until the next SetMps sends them. */
static void entry_adopted(Entry *e) {
        mps_entry_load_limits(e);
        if (e->pinned_mib > 0)
                log_info("Adopted the running MPS control daemon of GPU %s (limits %" PRIu64
                         " MiB, %" PRIu32 " %%).", e->uuid, e->pinned_mib, e->pct);
        else
                log_info("Adopted the running MPS control daemon of GPU %s (limits unknown).", e->uuid);
        mps_entry_set_state(e, MPS_STATE_RUNNING, NULL);
        mps_entry_finish_op(e, 0, NULL);
}

/* get_server_list: before starting a daemon (PROBE) or to see it alive (CHECK). */
static StepResult on_server_list(Entry *e, const NvidiaRunResult *res, char **msg, int *ret_r) {
        _cleanup_free_ pid_t *pids = NULL;
        Op *op = e->op;
        size_t n = 0;
        int r;

        if (res->exit_status == 0 && nvidia_mps_parse_server_list(res->out, res->out_len, &pids, &n, NULL) >= 0) {
                /* A daemon serves this pipe directory. */
                if (op->step == STEP_PROBE)
                        entry_run_step(e, STEP_LIMITS);
                else if (op->kind == OP_ADOPT)
                        entry_adopted(e);
                else
                        mps_entry_finish_op(e, 0, NULL);
                return STEP_RESULT_OK;
        }
        r = reply_status(res, NULL);
        if (r == -ESRCH && op->step == STEP_PROBE) {
                entry_start_daemon(e);
                return STEP_RESULT_OK;
        }
        if (r >= 0)
                r = -EBADMSG;
        *ret_r = r;
        return STEP_RESULT_FAIL_OR_DEAD;
}

static StepResult on_started(Entry *e, const NvidiaRunResult *res, char **msg, int *ret_r) {
        Op *op = e->op;

        /* "already running": another daemon took this pipe directory just now; it
         * answers from there, so it is the one to send the limits to. */
        if (res->exit_status != 0 && reply_status(res, NULL) != -EEXIST) {
                *ret_r = -EIO;
                return STEP_RESULT_FAIL;
        }
        op->started = true;
        if (op->kind == OP_RESTART && op->pinned_mib == 0) {
                /* An adopted daemon whose limits were never sent: its defaults. */
                entry_enabled_ok(e);
                return STEP_RESULT_OK;
        }
        entry_run_step(e, STEP_LIMITS);
        return STEP_RESULT_OK;
}

static StepResult on_limits(Entry *e, const NvidiaRunResult *res, char **msg, int *ret_r) {
        _cleanup_free_ char *perr = NULL;
        Op *op = e->op;
        uint32_t tenths = 0;
        int r;

        /* The daemon prints the percentage in force back: one it did not take
         * shows there (mps-H100-set-percentage-3.txt). */
        r = nvidia_mps_parse_reply(res->err, res->err_len, NULL) == -ESRCH ? -ESRCH :
            nvidia_mps_parse_percentage_reply(res->out, res->out_len, &tenths, &perr);
        if (r >= 0 && res->exit_status != 0)
                r = -EIO;
        if (r == -ESRCH && !op->started) {
                /* The daemon we thought running is gone: start it. */
                entry_start_daemon(e);
                return STEP_RESULT_OK;
        }
        if (r >= 0 && tenths != op->pct * 10) {
                set_msg(msg, "%s: the daemon kept an active thread percentage of %" PRIu32
                        ".%" PRIu32 " instead of %" PRIu32, step_name(op->step), tenths / 10,
                        tenths % 10, op->pct);
                r = -EBADMSG;
        }
        if (r < 0) {
                *ret_r = r;
                return STEP_RESULT_FAIL;
        }
        entry_enabled_ok(e);
        mps_entry_save_limits(e);
        return STEP_RESULT_OK;
}

static StepResult on_quit(Entry *e, const NvidiaRunResult *res, char **msg, int *ret_r) {
        _cleanup_free_ char *perr = NULL;
        int r;

        r = reply_status(res, &perr);
        if (r >= 0 && res->exit_status != 0)
                r = -EIO;
        if (r < 0 && r != -ESRCH) {
                *ret_r = r;
                return STEP_RESULT_FAIL;
        }
        if (mps_launcher_is_systemd(e->mps))
                entry_run_step(e, STEP_UNIT_STOP);
        else
                entry_restore_compute_mode(e);
        return STEP_RESULT_OK;
}

static StepResult on_step_answer(Entry *e, const NvidiaRunResult *res, char **msg, int *ret_r) {
        switch (e->op->step) {
        case STEP_COMPUTE_READ:
                return on_compute_read(e, res, msg, ret_r);
        case STEP_COMPUTE_MODE:
        case STEP_COMPUTE_RESTORE:
                return on_compute_set(e, res, msg, ret_r);
        case STEP_PROBE:
        case STEP_CHECK:
                return on_server_list(e, res, msg, ret_r);
        case STEP_START:
                return on_started(e, res, msg, ret_r);
        case STEP_LIMITS:
                return on_limits(e, res, msg, ret_r);
        case STEP_QUIT:
                return on_quit(e, res, msg, ret_r);
        case STEP_UNIT_START:
        case STEP_UNIT_STOP:
                /* systemd jobs, not tool runs: they end in on_job_done(). */
                break;
        }
        *ret_r = -EINVAL;
        return STEP_RESULT_FAIL;
}

static void on_run_done(NvidiaRun *run, int error, const NvidiaRunResult *res, void *userdata) {
        /* Freed when this returns: res points into it; the next step has its own run. */
        _cleanup_(nvidia_run_freep) _unused_ NvidiaRun *finished = run;
        _cleanup_free_ char *msg = NULL;
        Entry *e = userdata;
        Op *op = e->op;
        StepResult result;
        int r = 0;

        e->run = NULL;
        msg = mps_tool_message(step_name(op->step), error < 0 ? NULL : res, error);
        if (error < 0) {
                r = error;
                result = STEP_RESULT_FAIL_OR_DEAD;
        } else
                result = on_step_answer(e, res, &msg, &r);
        if (result == STEP_RESULT_OK)
                return;

        if (result == STEP_RESULT_FAIL_OR_DEAD && op->kind == OP_ADOPT) {
                /* Nothing serves that directory: stays off (a disable removes it). */
                log_debug("No MPS control daemon for the directory of GPU %s, not adopted: %s", e->uuid,
                          mps_strna(msg));
                mps_entry_finish_op(e, 0, NULL);
                return;
        }
        if (result == STEP_RESULT_FAIL_OR_DEAD && op->kind == OP_CHECK) {
                mps_entry_check_failed(e, r, msg);
                return;
        }
        mps_entry_fail_op(e, r, msg ? msg : "Out of memory.");
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
                mps_entry_fail_op(e, error, message ?: "The systemd job failed.");
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
