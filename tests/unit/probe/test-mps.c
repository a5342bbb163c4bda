/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-mps.c — the probe's MPS controller (daemons/probe/mps.c) driving the fake
 * nvidia-smi and nvidia-cuda-mps-control of tests/fake-nvidia/: the exact commands, their
 * environment, limits and order (from the fake's command log), the fake's state (compute
 * mode, daemon, limits), the directories, state changes, re-adoption by a new
 * controller, the request queue, and failures: a missing tool, a MIG GPU refusing the
 * compute mode, a daemon dying (restarted once with its limits, then "failed").
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "daemons/probe/mps.h"
#include "daemons/probe/mps-systemd.h"
#include "tests/unit/test-main.h"

#define UUID "GPU-00000000-0000-0000-0000-000000000000"
#define GIB (UINT64_C(1) << 30)
/* What the probe fills in from its configuration and the GPU (probe-dbus.c): the l40s
 * scenario's GPU, under MPS in the configuration. */
#define ALLOWED .in_mps_config = true, .gpu_memory_bytes = 48 * GIB

static char tmpdir[] = "/tmp/test-mps-XXXXXX";
static char *fake_smi, *fake_mps, *log_path, *state_path, *mps_dir, *pipe_dir, *log_dir;
static sd_event *event;

typedef struct Done {
        int calls;
        int error;
        char *message;
        int order;              /* global completion counter when it ran */
} Done;

static int completions;

typedef struct States {
        char seen[256];         /* "starting,running,..." */
        char last_pipe[256];
        char last_message[1100];
} States;

static States states;

static void on_done(Mps *m, int error, const char *message, void *userdata) {
        Done *d = userdata;

        d->calls++;
        d->error = error;
        free(d->message);
        d->message = message ? strdup(message) : NULL;
        d->order = ++completions;
}

static void on_state(Mps *m, const char *uuid, MpsState state, const char *pipe, const char *message, void *userdata) {
        const char *s = mps_state_to_string(state);

        ck_assert_str_eq(uuid, UUID);
        if (states.seen[0])
                strncat(states.seen, ",", sizeof(states.seen) - strlen(states.seen) - 1);
        strncat(states.seen, *s ? s : "off", sizeof(states.seen) - strlen(states.seen) - 1);
        snprintf(states.last_pipe, sizeof(states.last_pipe), "%s", pipe);
        snprintf(states.last_message, sizeof(states.last_message), "%s", message ? message : "");
}

static void run_until_idle(Mps *m) {
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + 60ULL * 1000 * 1000;

        while (mps_pending(m) > 0) {
                ck_assert_uint_lt(now_usec(CLOCK_MONOTONIC), deadline);
                ck_assert_int_ge(sd_event_run(event, 100 * 1000), 0);
        }
        /* Deferred kicks with nothing queued are harmless; one more round settles them. */
        ck_assert_int_ge(sd_event_run(event, 0), 0);
}

static char *slurp(const char *path) {
        char *s = NULL;

        if (read_one_line_file_at(AT_FDCWD, path, 1 << 20, &s) < 0)
                return strdup("");
        return s;
}

/* The command log since the last call (then emptied). */
static char *take_commands(void) {
        char *s = slurp(log_path);

        (void) truncate(log_path, 0);
        return s;
}

static void setup(void) {
        const char *root = getenv("KGPU_SOURCE_ROOT");

        ck_assert_ptr_nonnull(root);
        ck_assert_ptr_nonnull(mkdtemp(tmpdir));
        ck_assert_int_ge(asprintf(&fake_smi, "%s/tests/fake-nvidia/nvidia-smi", root), 0);
        ck_assert_int_ge(asprintf(&fake_mps, "%s/tests/fake-nvidia/nvidia-cuda-mps-control", root), 0);
        ck_assert_int_ge(asprintf(&log_path, "%s/commands.log", tmpdir), 0);
        ck_assert_int_ge(asprintf(&state_path, "%s/state.json", tmpdir), 0);
        ck_assert_int_ge(asprintf(&mps_dir, "%s/run/mps", tmpdir), 0);
        ck_assert_int_ge(asprintf(&pipe_dir, "%s/" UUID "/pipe", mps_dir), 0);
        ck_assert_int_ge(asprintf(&log_dir, "%s/" UUID "/log", mps_dir), 0);
        setenv("KGPU_FAKE_NVIDIA_LOG", log_path, 1);
        setenv("KGPU_FAKE_NVIDIA_STATE", state_path, 1);
        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "l40s", 1);
        unsetenv("KGPU_FAKE_NVIDIA_LOST");
        unsetenv("KGPU_FAKE_NVIDIA_DELAY");
        /* Must not leak into the tool's environment. */
        setenv("CUDA_VISIBLE_DEVICES", "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff", 1);
        setenv("CUDA_MPS_PIPE_DIRECTORY", "/nonexistent", 1);
        ck_assert_int_ge(sd_event_new(&event), 0);
        memset(&states, 0, sizeof(states));
        completions = 0;
}

static void teardown(void) {
        _cleanup_free_ char *cmd = NULL;

        event = sd_event_unref(event);
        ck_assert_int_ge(asprintf(&cmd, "rm -rf '%s'", tmpdir), 0);
        (void) system(cmd);
        strcpy(tmpdir, "/tmp/test-mps-XXXXXX");
        fake_smi = mfree(fake_smi);
        fake_mps = mfree(fake_mps);
        log_path = mfree(log_path);
        state_path = mfree(state_path);
        mps_dir = mfree(mps_dir);
        pipe_dir = mfree(pipe_dir);
        log_dir = mfree(log_dir);
}

static Mps *new_mps(void) {
        Mps *m = NULL;

        ck_assert_int_eq(mps_new(event, mps_dir, on_state, NULL, &m), 0);
        ck_assert_int_eq(mps_set_tools(m, fake_smi, fake_mps), 0);
        return m;
}

static int set_and_wait(Mps *m, bool enabled, uint64_t pinned, uint32_t pct, char **ret_message) {
        MpsRequest req = { .uuid = UUID, ALLOWED, .index = 0, .enabled = enabled, .pinned_memory_bytes = pinned,
                           .active_thread_percentage = pct };
        Done d = {};

        ck_assert_int_eq(mps_set(m, &req, on_done, &d), 0);
        /* Never synchronous. */
        ck_assert_int_eq(d.calls, 0);
        run_until_idle(m);
        ck_assert_int_eq(d.calls, 1);
        if (ret_message)
                *ret_message = d.message;
        else
                free(d.message);
        return d.error;
}

static char *expect_line_ctl(const char *args) {
        char *s;

        ck_assert_int_ge(asprintf(&s, "nvidia-cuda-mps-control%s [CUDA_MPS_PIPE_DIRECTORY=%s CUDA_VISIBLE_DEVICES=" UUID "]",
                                  args, pipe_dir), 0);
        return s;
}

static void assert_mode_0755(const char *path) {
        struct stat st;

        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert(S_ISDIR(st.st_mode));
        ck_assert_uint_eq(st.st_mode & 07777, 0755);
}

/* Kills the fake daemon behind our back (as a crash would), keeping the command log clean. */
static void kill_daemon(void) {
        _cleanup_free_ char *cmd = NULL;

        ck_assert_int_ge(asprintf(&cmd, "printf 'quit\\n' | env -u KGPU_FAKE_NVIDIA_LOG CUDA_MPS_PIPE_DIRECTORY='%s' '%s' >/dev/null",
                                  pipe_dir, fake_mps), 0);
        ck_assert_int_eq(system(cmd), 0);
}

/* Starts a daemon for the pipe directory behind the controller's back (another probe's,
 * or an operator's), keeping the command log clean. */
static void start_daemon_behind(void) {
        _cleanup_free_ char *cmd = NULL;

        ck_assert_int_ge(asprintf(&cmd, "env -u KGPU_FAKE_NVIDIA_LOG CUDA_MPS_PIPE_DIRECTORY='%s' CUDA_MPS_LOG_DIRECTORY='%s' "
                                  "'%s' -d", pipe_dir, log_dir, fake_mps), 0);
        ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_enable_change_disable) {
        _cleanup_(mps_freep) Mps *m = new_mps();
        _cleanup_free_ char *cmds = NULL, *state = NULL, *want = NULL, *ctl = expect_line_ctl(""),
                            *ctl_d = expect_line_ctl(" -d"), *control_log = NULL, *p = NULL;

        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_OFF);
        ck_assert_int_eq(set_and_wait(m, true, 2 * GIB, 50, NULL), 0);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_RUNNING);
        ck_assert_str_eq(states.seen, "starting,running");
        ck_assert_str_eq(states.last_pipe, pipe_dir);

        cmds = take_commands();
        ck_assert_int_ge(asprintf(&want,
                                  "nvidia-smi -i 0 --query-gpu=compute_mode --format=csv,noheader\n"
                                  "nvidia-smi -i 0 -c EXCLUSIVE_PROCESS\n"
                                  "%s\n"
                                  "nvidia-cuda-mps-control < get_server_list\n"
                                  "%s\n"
                                  "%s\n"
                                  "nvidia-cuda-mps-control < set_default_device_pinned_mem_limit 0 2048M\n"
                                  "nvidia-cuda-mps-control < set_default_active_thread_percentage 50",
                                  ctl, ctl_d, ctl), 0);
        ck_assert_str_eq(cmds, want);

        state = slurp(state_path);
        ck_assert_ptr_nonnull(strstr(state, "\"0\": \"Exclusive_Process\""));
        ck_assert_ptr_nonnull(strstr(state, "\"active_thread_percentage\": \"50.0\""));
        ck_assert_ptr_nonnull(strstr(state, "\"0\": \"2048M\""));
        ck_assert_ptr_nonnull(strstr(state, "\"running\": true"));
        ck_assert_ptr_nonnull(strstr(state, "\"visible\": \"" UUID "\""));

        assert_mode_0755(mps_dir);
        assert_mode_0755(pipe_dir);
        assert_mode_0755(log_dir);
        /* The daemon got CUDA_MPS_LOG_DIRECTORY: it wrote its control.log there. */
        ck_assert_int_ge(asprintf(&p, "%s/control.log", log_dir), 0);
        control_log = slurp(p);
        ck_assert_ptr_nonnull(strstr(control_log, "Starting control daemon"));

        /* Same limits: nothing to do. */
        ck_assert_int_eq(set_and_wait(m, true, 2 * GIB, 50, NULL), 0);
        free(cmds);
        cmds = take_commands();
        ck_assert_str_eq(cmds, "");

        /* Other limits: sent to the running daemon, nothing else. */
        ck_assert_int_eq(set_and_wait(m, true, 4 * GIB + 12345, 25, NULL), 0);
        free(cmds);
        cmds = take_commands();
        free(want);
        ck_assert_int_ge(asprintf(&want,
                                  "%s\n"
                                  "nvidia-cuda-mps-control < set_default_device_pinned_mem_limit 0 4096M\n"
                                  "nvidia-cuda-mps-control < set_default_active_thread_percentage 25", ctl), 0);
        ck_assert_str_eq(cmds, want);
        free(state);
        state = slurp(state_path);
        ck_assert_ptr_nonnull(strstr(state, "\"0\": \"4096M\""));
        ck_assert_ptr_nonnull(strstr(state, "\"active_thread_percentage\": \"25.0\""));
        ck_assert_str_eq(states.seen, "starting,running");

        /* Disable: quit, compute mode Default, directories gone. */
        ck_assert_int_eq(set_and_wait(m, false, 0, 0, NULL), 0);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_OFF);
        ck_assert_str_eq(states.seen, "starting,running,off");
        ck_assert_str_eq(states.last_pipe, "");
        free(cmds);
        cmds = take_commands();
        free(want);
        ck_assert_int_ge(asprintf(&want, "%s\nnvidia-cuda-mps-control < quit\nnvidia-smi -i 0 -c DEFAULT", ctl), 0);
        ck_assert_str_eq(cmds, want);
        free(state);
        state = slurp(state_path);
        ck_assert_ptr_nonnull(strstr(state, "\"0\": \"Default\""));
        ck_assert_ptr_nonnull(strstr(state, "\"running\": false"));
        ck_assert_int_lt(access(pipe_dir, F_OK), 0);
        free(p);
        ck_assert_int_ge(asprintf(&p, "%s/" UUID, mps_dir), 0);
        ck_assert_int_lt(access(p, F_OK), 0);

        /* Disable again: idempotent, nothing run. */
        ck_assert_int_eq(set_and_wait(m, false, 0, 0, NULL), 0);
        free(cmds);
        cmds = take_commands();
        ck_assert_str_eq(cmds, "");
}
END_TEST

START_TEST(test_readopt_after_restart) {
        _cleanup_free_ char *cmds = NULL, *want = NULL, *ctl = expect_line_ctl("");
        Mps *m = new_mps();

        ck_assert_int_eq(set_and_wait(m, true, 2 * GIB, 50, NULL), 0);
        /* The probe exits: its daemons stay. */
        m = mps_free(m);
        free(take_commands());

        /* A new probe: the broker sends SetMps again; the daemon is re-adopted, not started. */
        m = new_mps();
        ck_assert_int_eq(set_and_wait(m, true, 2 * GIB, 50, NULL), 0);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_RUNNING);
        cmds = take_commands();
        ck_assert_int_ge(asprintf(&want,
                                  "nvidia-smi -i 0 -c EXCLUSIVE_PROCESS\n"
                                  "%s\n"
                                  "nvidia-cuda-mps-control < get_server_list\n"
                                  "%s\n"
                                  "nvidia-cuda-mps-control < set_default_device_pinned_mem_limit 0 2048M\n"
                                  "nvidia-cuda-mps-control < set_default_active_thread_percentage 50",
                                  ctl, ctl), 0);
        ck_assert_str_eq(cmds, want);
        m = mps_free(m);

        /* A new probe whose config has no MPS for it: disabled although its state was off. */
        m = new_mps();
        ck_assert_int_eq(set_and_wait(m, false, 0, 0, NULL), 0);
        free(cmds);
        cmds = take_commands();
        free(want);
        ck_assert_int_ge(asprintf(&want, "%s\nnvidia-cuda-mps-control < quit\nnvidia-smi -i 0 -c DEFAULT", ctl), 0);
        ck_assert_str_eq(cmds, want);
        ck_assert_int_lt(access(pipe_dir, F_OK), 0);
        mps_free(m);
}
END_TEST

/* test_adopt, step by step: probes come and go while the fake MPS daemon of the last
 * step stays (or died, or another took its place). ctl and ctl_d are the command lines
 * expect_line_ctl() gives. */

/* A first probe finds nothing to adopt and starts the daemon with limits. */
static void step_first_probe_starts_daemon(void) {
        Mps *m = new_mps();

        ck_assert_int_eq(mps_adopt(m), 0);      /* nothing there yet */
        ck_assert_int_eq(set_and_wait(m, true, 2 * GIB, 50, NULL), 0);
        m = mps_free(m);
        free(take_commands());
        memset(&states, 0, sizeof(states));
}

/* A new probe finds the daemon and holds it as running, without a SetMps, with the
 * limits the earlier one sent (its limits file names this very daemon's pid). */
static Mps *step_new_probe_adopts(const char *ctl) {
        _cleanup_free_ char *cmds = NULL, *want = NULL;
        Mps *m = new_mps();

        ck_assert_int_eq(mps_adopt(m), 1);
        run_until_idle(m);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_RUNNING);
        ck_assert_str_eq(mps_get_pipe_directory(m, UUID), pipe_dir);
        ck_assert_str_eq(states.seen, "running");
        cmds = take_commands();
        ck_assert_int_ge(asprintf(&want, "%s\nnvidia-cuda-mps-control < get_server_list", ctl), 0);
        ck_assert_str_eq(cmds, want);
        /* Adopting again changes nothing. */
        ck_assert_int_eq(mps_adopt(m), 0);
        return m;
}

/* The broker's SetMps with the limits in force: nothing runs. */
static void step_same_limits_run_nothing(Mps *m) {
        _cleanup_free_ char *cmds = NULL;

        ck_assert_int_eq(set_and_wait(m, true, 2 * GIB, 50, NULL), 0);
        cmds = take_commands();
        ck_assert_str_eq(cmds, "");
}

/* Dead: restarted with those limits. */
static void step_dead_restarted_with_limits(Mps *m, const char *ctl, const char *ctl_d) {
        _cleanup_free_ char *cmds = NULL, *want = NULL;

        kill_daemon();
        ck_assert_int_eq(mps_check_all(m), 1);
        run_until_idle(m);
        cmds = take_commands();
        ck_assert_int_ge(asprintf(&want,
                                  "%s\n"
                                  "nvidia-cuda-mps-control < get_server_list\n"
                                  "%s\n"
                                  "%s\n"
                                  "nvidia-cuda-mps-control < set_default_device_pinned_mem_limit 0 2048M\n"
                                  "nvidia-cuda-mps-control < set_default_active_thread_percentage 50",
                                  ctl, ctl_d, ctl), 0);
        ck_assert_str_eq(cmds, want);
}

/* While no probe ran, another daemon took the pipe directory (not the one the
 * limits file names): adopted, limits unknown. */
static Mps *step_other_daemon_adopted(void) {
        Mps *m;

        kill_daemon();
        start_daemon_behind();
        memset(&states, 0, sizeof(states));
        m = new_mps();
        ck_assert_int_eq(mps_adopt(m), 1);
        run_until_idle(m);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_RUNNING);
        free(take_commands());
        return m;
}

/* Its limits are unknown: a restart starts it without sending any. */
static void step_unknown_limits_restart(Mps *m, const char *ctl, const char *ctl_d) {
        _cleanup_free_ char *cmds = NULL, *want = NULL;

        kill_daemon();
        ck_assert_int_eq(mps_check_all(m), 1);
        run_until_idle(m);
        cmds = take_commands();
        ck_assert_int_ge(asprintf(&want, "%s\nnvidia-cuda-mps-control < get_server_list\n%s", ctl, ctl_d), 0);
        ck_assert_str_eq(cmds, want);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_RUNNING);
}

/* The broker's SetMps: only the limits. */
static void step_setmps_sends_only_limits(Mps *m, const char *ctl) {
        _cleanup_free_ char *cmds = NULL, *want = NULL;

        ck_assert_int_eq(set_and_wait(m, true, 2 * GIB, 50, NULL), 0);
        cmds = take_commands();
        ck_assert_int_ge(asprintf(&want,
                                  "%s\n"
                                  "nvidia-cuda-mps-control < set_default_device_pinned_mem_limit 0 2048M\n"
                                  "nvidia-cuda-mps-control < set_default_active_thread_percentage 50", ctl), 0);
        ck_assert_str_eq(cmds, want);
}

/* The daemon died while no probe ran: not adopted, stays off; a disable cleans up. */
static void step_dead_daemon_not_adopted(void) {
        Mps *m;

        kill_daemon();
        free(take_commands());
        memset(&states, 0, sizeof(states));
        m = new_mps();
        ck_assert_int_eq(mps_adopt(m), 1);
        run_until_idle(m);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_OFF);
        ck_assert_str_eq(mps_get_pipe_directory(m, UUID), "");
        ck_assert_str_eq(states.seen, "");
        ck_assert_int_eq(set_and_wait(m, false, 0, 0, NULL), 0);
        ck_assert_int_lt(access(pipe_dir, F_OK), 0);
        m = mps_free(m);
}

START_TEST(test_adopt) {
        _cleanup_free_ char *ctl = expect_line_ctl(""), *ctl_d = expect_line_ctl(" -d");
        Mps *m;

        step_first_probe_starts_daemon();

        m = step_new_probe_adopts(ctl);
        step_same_limits_run_nothing(m);
        step_dead_restarted_with_limits(m, ctl, ctl_d);
        m = mps_free(m);

        m = step_other_daemon_adopted();
        step_unknown_limits_restart(m, ctl, ctl_d);
        step_setmps_sends_only_limits(m, ctl);
        m = mps_free(m);

        step_dead_daemon_not_adopted();

        m = new_mps();
        ck_assert_int_eq(mps_adopt(m), 0);
        mps_free(m);
}
END_TEST

static Done *tick_watch;

static int on_tick(sd_event_source *s, uint64_t usec, void *userdata) {
        int *fired = userdata;

        /* 1: the tick came while the tools still ran (the request not done yet). */
        *fired = tick_watch->calls == 0 ? 1 : -1;
        return 0;
}

START_TEST(test_never_blocks_and_timeout) {
        _cleanup_(mps_freep) Mps *m = new_mps();
        _cleanup_(sd_event_source_unrefp) sd_event_source *tick = NULL;
        MpsRequest req = { .uuid = UUID, ALLOWED, .enabled = true, .pinned_memory_bytes = GIB, .active_thread_percentage = 50 };
        Done d = {};
        int fired = 0;
        uint64_t t0;

        /* Each tool answers after 0.3 s: the loop keeps running meanwhile. */
        setenv("KGPU_FAKE_NVIDIA_DELAY", "0.3", 1);
        t0 = now_usec(CLOCK_MONOTONIC);
        ck_assert_int_eq(mps_set(m, &req, on_done, &d), 0);
        ck_assert_uint_lt(now_usec(CLOCK_MONOTONIC) - t0, 100 * 1000);
        tick_watch = &d;
        ck_assert_int_ge(sd_event_add_time_relative(event, &tick, CLOCK_MONOTONIC, 50 * 1000, 0, on_tick, &fired), 0);
        run_until_idle(m);
        ck_assert_int_eq(d.calls, 1);
        ck_assert_int_eq(d.error, 0);
        ck_assert_int_eq(fired, 1);
        free(d.message);

        /* A tool past the timeout: MpsFailed-style error naming the timeout, state failed. */
        setenv("KGPU_FAKE_NVIDIA_DELAY", "2", 1);
        mps_set_timeout(m, 200 * 1000);
        req.pinned_memory_bytes = 2 * GIB;
        d = (Done) {};
        t0 = now_usec(CLOCK_MONOTONIC);
        ck_assert_int_eq(mps_set(m, &req, on_done, &d), 0);
        run_until_idle(m);
        ck_assert_uint_lt(now_usec(CLOCK_MONOTONIC) - t0, 1500 * 1000);
        ck_assert_int_eq(d.error, -ETIME);
        ck_assert_msg(strstr(d.message, "timed out"), "message: %s", d.message);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_FAILED);
        free(d.message);
        unsetenv("KGPU_FAKE_NVIDIA_DELAY");
}
END_TEST

START_TEST(test_check_timer) {
        _cleanup_(mps_freep) Mps *m = new_mps();
        _cleanup_free_ char *cmds = NULL;
        uint64_t end;

        /* No daemon runs: no timer, no wakeup at all. */
        ck_assert_int_eq(mps_set_check_interval(m, 50 * 1000), 0);
        ck_assert_int_eq(sd_event_run(event, 200 * 1000), 0);

        /* Running: checked every interval by the controller's own timer. */
        ck_assert_int_eq(set_and_wait(m, true, GIB, 50, NULL), 0);
        free(take_commands());
        end = now_usec(CLOCK_MONOTONIC) + 10ULL * 1000 * 1000;
        for (;;) {
                ck_assert_int_ge(sd_event_run(event, 50 * 1000), 0);
                free(cmds);
                cmds = slurp(log_path);
                if (strstr(cmds, "get_server_list") && mps_pending(m) == 0)
                        break;
                ck_assert_uint_lt(now_usec(CLOCK_MONOTONIC), end);
        }

        /* Off again: the timer stops. */
        ck_assert_int_eq(set_and_wait(m, false, 0, 0, NULL), 0);
        free(take_commands());
        ck_assert_int_eq(sd_event_run(event, 200 * 1000), 0);
        free(cmds);
        cmds = take_commands();
        ck_assert_str_eq(cmds, "");
}
END_TEST

START_TEST(test_tool_missing) {
        _cleanup_(mps_freep) Mps *m = new_mps();
        _cleanup_free_ char *msg = NULL, *missing = NULL;

        ck_assert_int_ge(asprintf(&missing, "%s/no-such-tool", tmpdir), 0);
        ck_assert_int_eq(mps_set_tools(m, fake_smi, missing), 0);
        ck_assert_int_lt(set_and_wait(m, true, 2 * GIB, 50, &msg), 0);
        ck_assert_ptr_nonnull(msg);
        ck_assert_msg(strstr(msg, "no-such-tool"), "message: %s", msg);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_FAILED);
        ck_assert_str_eq(states.seen, "starting,failed");
        ck_assert_str_eq(states.last_message, msg);

        /* No nvidia-smi found at all. */
        ck_assert_int_eq(mps_set_tools(m, NULL, fake_mps), 0);
        free(msg);
        msg = NULL;
        ck_assert_int_lt(set_and_wait(m, true, 2 * GIB, 50, &msg), 0);
        ck_assert_msg(strstr(msg, "not found"), "message: %s", msg);

        /* Both found again: the failed GPU can be enabled. */
        ck_assert_int_eq(mps_set_tools(m, fake_smi, fake_mps), 0);
        ck_assert_int_eq(set_and_wait(m, true, 2 * GIB, 50, NULL), 0);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_RUNNING);
}
END_TEST

START_TEST(test_mig_refused) {
        _cleanup_(mps_freep) Mps *m = NULL;
        _cleanup_free_ char *msg = NULL, *cmds = NULL, *state = NULL;
        MpsRequest req = { .uuid = UUID, ALLOWED, .index = 0, .mig_enabled = true, .enabled = true,
                           .pinned_memory_bytes = GIB, .active_thread_percentage = 50 };
        char *why = NULL;

        /* Known MIG: refused before anything runs. */
        ck_assert_int_eq(mps_request_validate(&req, &why), -EINVAL);
        ck_assert_ptr_nonnull(strstr(why, "MIG"));
        free(why);

        /* MIG turned on behind the probe's back: nvidia-smi refuses, MpsFailed with its words. */
        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "h100-mig", 1);
        m = new_mps();
        ck_assert_int_lt(set_and_wait(m, true, 2 * GIB, 50, &msg), 0);
        ck_assert_msg(strstr(msg, "Not Supported"), "message: %s", msg);
        ck_assert_msg(strstr(msg, "MIG-enabled"), "message: %s", msg);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_FAILED);
        cmds = take_commands();
        ck_assert_str_eq(cmds, "nvidia-smi -i 0 --query-gpu=compute_mode --format=csv,noheader\n"
                               "nvidia-smi -i 0 -c EXCLUSIVE_PROCESS");
        state = slurp(state_path);
        ck_assert_ptr_null(strstr(state, "Exclusive_Process"));
}
END_TEST

START_TEST(test_health_restart_then_failed) {
        _cleanup_(mps_freep) Mps *m = new_mps();
        _cleanup_free_ char *cmds = NULL, *want = NULL, *state = NULL, *ctl = expect_line_ctl(""),
                            *ctl_d = expect_line_ctl(" -d");

        ck_assert_int_eq(set_and_wait(m, true, 3 * GIB, 30, NULL), 0);
        free(take_commands());

        /* Alive: one get_server_list, nothing else. */
        ck_assert_int_eq(mps_check_all(m), 1);
        run_until_idle(m);
        cmds = take_commands();
        ck_assert_int_ge(asprintf(&want, "%s\nnvidia-cuda-mps-control < get_server_list", ctl), 0);
        ck_assert_str_eq(cmds, want);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_RUNNING);

        /* Dies: restarted once with its limits, still running. */
        kill_daemon();
        ck_assert_int_eq(mps_check_all(m), 1);
        run_until_idle(m);
        free(cmds);
        cmds = take_commands();
        free(want);
        ck_assert_int_ge(asprintf(&want,
                                  "%s\n"
                                  "nvidia-cuda-mps-control < get_server_list\n"
                                  "%s\n"
                                  "%s\n"
                                  "nvidia-cuda-mps-control < set_default_device_pinned_mem_limit 0 3072M\n"
                                  "nvidia-cuda-mps-control < set_default_active_thread_percentage 30",
                                  ctl, ctl_d, ctl), 0);
        ck_assert_str_eq(cmds, want);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_RUNNING);
        ck_assert_str_eq(states.seen, "starting,running");
        state = slurp(state_path);
        ck_assert_ptr_nonnull(strstr(state, "\"running\": true"));
        ck_assert_ptr_nonnull(strstr(state, "\"0\": \"3072M\""));
        ck_assert_ptr_nonnull(strstr(state, "\"active_thread_percentage\": \"30.0\""));

        /* Dies again: failed, with the tool's words. */
        kill_daemon();
        ck_assert_int_eq(mps_check_all(m), 1);
        run_until_idle(m);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_FAILED);
        ck_assert_str_eq(states.seen, "starting,running,failed");
        ck_assert_msg(strstr(states.last_message, "Cannot find MPS control daemon"), "message: %s", states.last_message);
        free(cmds);
        cmds = take_commands();
        free(want);
        ck_assert_int_ge(asprintf(&want, "%s\nnvidia-cuda-mps-control < get_server_list", ctl), 0);
        ck_assert_str_eq(cmds, want);

        /* A failed daemon is not checked; a new SetMps brings it back. */
        ck_assert_int_eq(mps_check_all(m), 0);
        ck_assert_int_eq(set_and_wait(m, true, 3 * GIB, 30, NULL), 0);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_RUNNING);
}
END_TEST

START_TEST(test_restart_fails) {
        _cleanup_(mps_freep) Mps *m = new_mps();
        _cleanup_free_ char *missing = NULL;

        ck_assert_int_eq(set_and_wait(m, true, 3 * GIB, 30, NULL), 0);
        kill_daemon();
        /* The restart cannot run: failed at once. */
        ck_assert_int_ge(asprintf(&missing, "%s/gone", tmpdir), 0);
        ck_assert_int_eq(mps_set_tools(m, fake_smi, missing), 0);
        ck_assert_int_eq(mps_check_all(m), 1);
        run_until_idle(m);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_FAILED);
}
END_TEST

START_TEST(test_queue_in_order) {
        _cleanup_(mps_freep) Mps *m = new_mps();
        _cleanup_free_ char *state = NULL;
        MpsRequest a = { .uuid = UUID, ALLOWED, .enabled = true, .pinned_memory_bytes = 2 * GIB,
                         .active_thread_percentage = 50 };
        MpsRequest b = { .uuid = UUID, ALLOWED, .enabled = true, .pinned_memory_bytes = GIB,
                         .active_thread_percentage = 10 };
        MpsRequest c = { .uuid = UUID, ALLOWED, .enabled = false };
        Done da = {}, db = {}, dc = {}, dd = {};

        ck_assert_int_eq(mps_set(m, &a, on_done, &da), 0);
        ck_assert_int_eq(mps_set(m, &b, on_done, &db), 0);
        ck_assert_int_eq(mps_set(m, &c, on_done, &dc), 0);
        ck_assert_int_eq(mps_set(m, &b, on_done, &dd), 0);
        ck_assert_uint_eq(mps_pending(m), 4);
        run_until_idle(m);
        ck_assert_int_eq(da.calls + db.calls + dc.calls + dd.calls, 4);
        ck_assert_int_eq(da.error | db.error | dc.error | dd.error, 0);
        ck_assert_int_eq(da.order, 1);
        ck_assert_int_eq(db.order, 2);
        ck_assert_int_eq(dc.order, 3);
        ck_assert_int_eq(dd.order, 4);
        ck_assert_str_eq(states.seen, "starting,running,off,starting,running");
        state = slurp(state_path);
        ck_assert_ptr_nonnull(strstr(state, "\"0\": \"1024M\""));
        ck_assert_ptr_nonnull(strstr(state, "\"active_thread_percentage\": \"10.0\""));

        /* The queue is bounded. */
        for (unsigned i = 0; i < MPS_QUEUE_MAX; i++)
                ck_assert_int_eq(mps_set(m, &b, NULL, NULL), 0);
        ck_assert_int_eq(mps_set(m, &b, NULL, NULL), -EBUSY);
        run_until_idle(m);
        free(da.message);
        free(db.message);
        free(dc.message);
        free(dd.message);
}
END_TEST

START_TEST(test_check_gives_way) {
        _cleanup_(mps_freep) Mps *m = new_mps();

        ck_assert_int_eq(set_and_wait(m, true, 2 * GIB, 50, NULL), 0);
        ck_assert_int_eq(mps_check_all(m), 1);
        /* Immediately a request: the check is abandoned, the request runs. */
        ck_assert_int_eq(set_and_wait(m, false, 0, 0, NULL), 0);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_OFF);
}
END_TEST

START_TEST(test_validate_and_cancel) {
        MpsRequest r = { .uuid = UUID, ALLOWED, .enabled = true, .pinned_memory_bytes = GIB, .active_thread_percentage = 50 };
        Done d = {};
        char *why = NULL;
        Mps *m = new_mps();

        ck_assert_int_eq(mps_request_validate(&r, NULL), 0);
        r.active_thread_percentage = 0;
        ck_assert_int_eq(mps_request_validate(&r, &why), -EINVAL);
        ck_assert_ptr_nonnull(strstr(why, "1..100"));
        free(why);
        r.active_thread_percentage = 101;
        ck_assert_int_eq(mps_set(m, &r, on_done, &d), -EINVAL);
        r.active_thread_percentage = 100;
        r.pinned_memory_bytes = (1 << 20) - 1;
        ck_assert_int_eq(mps_request_validate(&r, NULL), -EINVAL);
        r.pinned_memory_bytes = 0;
        r.enabled = false;      /* limits do not matter to disable */
        ck_assert_int_eq(mps_request_validate(&r, NULL), 0);
        r.uuid = "GPU-../../etc";
        ck_assert_int_eq(mps_request_validate(&r, &why), -EINVAL);
        free(why);
        r.uuid = "MIG-00000000-0000-0000-0000-000000000000";
        ck_assert_int_eq(mps_request_validate(&r, NULL), -EINVAL);

        /* The probe's own policy, whoever asks. A GPU the configuration does not put under
         * MPS: refused (-EPERM), and mps_set() refuses it too, nothing queued. */
        r = (MpsRequest) { .uuid = UUID, .gpu_memory_bytes = 48 * GIB, .enabled = true,
                           .pinned_memory_bytes = GIB, .active_thread_percentage = 50 };
        ck_assert_int_eq(mps_request_validate(&r, &why), -EPERM);
        ck_assert_msg(strstr(why, "not under MPS in the configuration"), "message: %s", why);
        why = mfree(why);
        ck_assert_int_eq(mps_set(m, &r, on_done, &d), -EPERM);
        ck_assert_uint_eq(mps_pending(m), 0);
        /* Turning it off is always allowed: it restores the GPU. */
        r.enabled = false;
        ck_assert_int_eq(mps_request_validate(&r, NULL), 0);
        /* Limits beyond the GPU: its whole memory is the most a slice can pin. */
        r = (MpsRequest) { .uuid = UUID, ALLOWED, .enabled = true, .pinned_memory_bytes = 48 * GIB,
                           .active_thread_percentage = 100 };
        ck_assert_int_eq(mps_request_validate(&r, NULL), 0);
        r.pinned_memory_bytes = 48 * GIB + 1;
        ck_assert_int_eq(mps_request_validate(&r, &why), -EINVAL);
        ck_assert_msg(strstr(why, "more than the"), "message: %s", why);
        why = mfree(why);
        /* The pinned limit of the attack: 17592186044415M. */
        r.pinned_memory_bytes = UINT64_C(17592186044415) << 20;
        ck_assert_int_eq(mps_set(m, &r, on_done, &d), -EINVAL);
        /* A GPU of unknown memory: no limit can be checked. */
        r.pinned_memory_bytes = GIB;
        r.gpu_memory_bytes = 0;
        ck_assert_int_eq(mps_request_validate(&r, &why), -EINVAL);
        ck_assert_msg(strstr(why, "unknown"), "message: %s", why);
        why = mfree(why);
        ck_assert_uint_eq(mps_pending(m), 0);
        ck_assert_int_eq(d.calls, 0);
        ck_assert_int_eq(mps_new(event, "relative/dir", NULL, NULL, &m) < 0 ? 0 : 1, 0);

        /* Freed with a request queued: its callback runs with -ECANCELED. */
        r = (MpsRequest) { .uuid = UUID, ALLOWED, .enabled = true, .pinned_memory_bytes = GIB, .active_thread_percentage = 50 };
        ck_assert_int_eq(mps_set(m, &r, on_done, &d), 0);
        mps_free(m);
        ck_assert_int_eq(d.calls, 1);
        ck_assert_int_eq(d.error, -ECANCELED);
        free(d.message);
}
END_TEST

/* Writes the fake tools' state file: GPU 0 in compute mode `mode` before MPS. */
static void set_fake_compute_mode(const char *mode) {
        _cleanup_free_ char *text = NULL;

        ck_assert_int_ge(asprintf(&text, "{\"compute_mode\": {\"0\": \"%s\"}}\n", mode), 0);
        ck_assert_int_eq(write_file_atomic_at(AT_FDCWD, state_path, text, strlen(text), 0644), 0);
}

static char *mode_record(void) {
        _cleanup_free_ char *p = NULL;

        ck_assert_int_ge(asprintf(&p, "%s/" UUID "/compute-mode", mps_dir), 0);
        return slurp(p);
}

START_TEST(test_restore_compute_mode) {
        _cleanup_free_ char *cmds = NULL, *state = NULL, *want = NULL, *record = NULL, *ctl = expect_line_ctl("");
        Mps *m = new_mps();

        /* The GPU was Prohibited before MPS: that is what a disable sets again, not Default. */
        set_fake_compute_mode("Prohibited");
        ck_assert_int_eq(set_and_wait(m, true, 2 * GIB, 50, NULL), 0);
        record = mode_record();
        ck_assert_str_eq(record, "PROHIBITED");
        state = slurp(state_path);
        ck_assert_ptr_nonnull(strstr(state, "\"0\": \"Exclusive_Process\""));
        free(take_commands());

        /* Other limits, then the same enable again: the record is not read anew (the GPU
         * is ours in EXCLUSIVE_PROCESS now). */
        ck_assert_int_eq(set_and_wait(m, true, GIB, 25, NULL), 0);
        cmds = take_commands();
        ck_assert_ptr_null(strstr(cmds, "compute_mode"));
        free(record);
        record = mode_record();
        ck_assert_str_eq(record, "PROHIBITED");

        /* The probe exits and a new one adopts the daemon: it has no memory of its own of
         * the mode before, only the record. */
        m = mps_free(m);
        m = new_mps();
        ck_assert_int_eq(mps_adopt(m), 1);
        run_until_idle(m);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_RUNNING);
        free(take_commands());
        ck_assert_int_eq(set_and_wait(m, false, 0, 0, NULL), 0);
        free(cmds);
        cmds = take_commands();
        ck_assert_int_ge(asprintf(&want, "%s\nnvidia-cuda-mps-control < quit\nnvidia-smi -i 0 -c PROHIBITED", ctl), 0);
        ck_assert_str_eq(cmds, want);
        free(state);
        state = slurp(state_path);
        ck_assert_ptr_nonnull(strstr(state, "\"0\": \"Prohibited\""));
        /* The record went with the directories: the next MPS session reads the mode again. */
        free(record);
        record = mode_record();
        ck_assert_str_eq(record, "");

        /* Exclusive_Process before MPS (an operator's choice): kept after it. */
        set_fake_compute_mode("Exclusive_Process");
        ck_assert_int_eq(set_and_wait(m, true, GIB, 50, NULL), 0);
        free(record);
        record = mode_record();
        ck_assert_str_eq(record, "EXCLUSIVE_PROCESS");
        ck_assert_int_eq(set_and_wait(m, false, 0, 0, NULL), 0);
        free(state);
        state = slurp(state_path);
        ck_assert_ptr_nonnull(strstr(state, "\"0\": \"Exclusive_Process\""));

        /* A directory without a record (a daemon an earlier probe version left): Default,
         * as that version restored. */
        set_fake_compute_mode("Default");
        start_daemon_behind();
        free(take_commands());
        ck_assert_int_eq(set_and_wait(m, false, 0, 0, NULL), 0);
        free(cmds);
        cmds = take_commands();
        ck_assert_ptr_nonnull(strstr(cmds, "nvidia-smi -i 0 -c DEFAULT"));

        /* A record holding garbage: DEFAULT too, the garbage never reaches a command. */
        set_fake_compute_mode("Prohibited");
        start_daemon_behind();
        {
                _cleanup_free_ char *p = NULL;

                ck_assert_int_ge(asprintf(&p, "%s/" UUID "/compute-mode", mps_dir), 0);
                ck_assert_int_eq(write_file_atomic_at(AT_FDCWD, p, "$(reboot) -f\n", 13, 0644), 0);
        }
        free(take_commands());
        ck_assert_int_eq(set_and_wait(m, false, 0, 0, NULL), 0);
        free(cmds);
        cmds = take_commands();
        ck_assert_ptr_nonnull(strstr(cmds, "nvidia-smi -i 0 -c DEFAULT"));
        ck_assert_ptr_null(strstr(cmds, "reboot"));
        mps_free(m);
}
END_TEST

/* Plays a pod with a read-write mount of the pipe directory, or root on the host: what it
 * leaves there (a subdirectory with files, a deeper tree, a symlink to a file elsewhere, a
 * FIFO, things owned by another user) must not make the disable fail, nor reach outside. */
START_TEST(test_pod_files_cannot_fail_stop) {
        _cleanup_free_ char *p = NULL, *victim = NULL, *text = NULL, *base = NULL;
        Mps *m = new_mps();

        ck_assert_int_eq(set_and_wait(m, true, 2 * GIB, 50, NULL), 0);
        ck_assert_int_ge(asprintf(&victim, "%s/victim", tmpdir), 0);
        ck_assert_int_eq(write_file_atomic_at(AT_FDCWD, victim, "keep\n", 5, 0644), 0);

        ck_assert_int_ge(asprintf(&p, "%s/sub", pipe_dir), 0);
        ck_assert_int_eq(mkdir(p, 0777), 0);
        free(p);
        ck_assert_int_ge(asprintf(&p, "%s/sub/file", pipe_dir), 0);
        ck_assert_int_eq(write_file_atomic_at(AT_FDCWD, p, "x", 1, 0600), 0);
        free(p);
        ck_assert_int_ge(asprintf(&p, "%s/sub/deeper", pipe_dir), 0);
        ck_assert_int_eq(mkdir(p, 0700), 0);
        free(p);
        ck_assert_int_ge(asprintf(&p, "%s/sub/deeper/link", pipe_dir), 0);
        ck_assert_int_eq(symlink(victim, p), 0);
        free(p);
        ck_assert_int_ge(asprintf(&p, "%s/dirlink", pipe_dir), 0);
        ck_assert_int_eq(symlink(tmpdir, p), 0);
        free(p);
        ck_assert_int_ge(asprintf(&p, "%s/fifo", pipe_dir), 0);
        ck_assert_int_eq(mkfifo(p, 0666), 0);
        if (geteuid() == 0) {
                free(p);
                ck_assert_int_ge(asprintf(&p, "%s/sub/deeper", pipe_dir), 0);
                ck_assert_int_eq(chown(p, 65534, 65534), 0);
        }

        ck_assert_int_eq(set_and_wait(m, false, 0, 0, NULL), 0);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_OFF);
        ck_assert_str_eq(states.seen, "starting,running,off");
        ck_assert_int_ge(asprintf(&base, "%s/" UUID, mps_dir), 0);
        ck_assert_int_lt(access(base, F_OK), 0);
        /* Nothing followed out of the directory. */
        ck_assert_int_eq(read_one_line_file_at(AT_FDCWD, victim, 64, &text), 0);
        ck_assert_str_eq(text, "keep");
        ck_assert_int_eq(access(tmpdir, F_OK), 0);

        /* And MPS starts again there afterwards. */
        ck_assert_int_eq(set_and_wait(m, true, 2 * GIB, 50, NULL), 0);
        ck_assert_int_eq(mps_get_state(m, UUID), MPS_STATE_RUNNING);
        ck_assert_int_eq(set_and_wait(m, false, 0, 0, NULL), 0);
        mps_free(m);
}
END_TEST

/* The systemd launcher's pure parts: the instance name and the unit's environment file. */
START_TEST(test_systemd_unit_and_environment) {
        _cleanup_free_ char *unit = NULL, *base = NULL, *env = NULL, *p = NULL;
        const char *bad = NULL;
        Mps *m = new_mps();

        ck_assert_int_eq(mps_systemd_unit_name(UUID, &unit), 0);
        /* The UUID as it is: %i in the template, no escaping needed. */
        ck_assert_str_eq(unit, "kgpu-mps@" UUID ".service");
        ck_assert_int_eq(mps_systemd_unit_name("GPU-0/../x", &p), -EINVAL);
        ck_assert_int_eq(mps_systemd_unit_name("a b", &p), -EINVAL);
        ck_assert_int_eq(mps_systemd_unit_name("", &p), -EINVAL);
        ck_assert_ptr_null(p);

        ck_assert_int_ge(asprintf(&base, "%s/" UUID, mps_dir), 0);
        ck_assert_int_ge(asprintf(&p, "%s/run", tmpdir), 0);
        ck_assert_int_eq(mkdir(p, 0755), 0);
        p = mfree(p);
        ck_assert_int_eq(mkdir(mps_dir, 0755), 0);
        ck_assert_int_eq(mkdir(base, 0755), 0);
        ck_assert_int_eq(mps_systemd_write_environment(base, UUID, pipe_dir, log_dir, "/usr/bin/nvidia-cuda-mps-control",
                                                       NULL, &bad), 0);
        ck_assert_int_ge(asprintf(&p, "%s/environment", base), 0);
        ck_assert_int_eq(read_one_line_file_at(AT_FDCWD, p, 4096, &env), 0);
        ck_assert_ptr_nonnull(strstr(env, "\nCUDA_VISIBLE_DEVICES=" UUID "\n"));
        ck_assert_ptr_nonnull(strstr(env, "\nKGPU_NVIDIA_MPS_CONTROL=/usr/bin/nvidia-cuda-mps-control"));
        ck_assert_ptr_nonnull(strstr(env, pipe_dir));
        /* A value that would need quoting is refused, naming the variable; the file stays. */
        ck_assert_int_eq(mps_systemd_write_environment(base, UUID, pipe_dir, log_dir, "/opt/my tools/mps-control", NULL, &bad),
                         -EINVAL);
        ck_assert_str_eq(bad, "KGPU_NVIDIA_MPS_CONTROL");
        ck_assert_int_eq(mps_systemd_write_environment(base, UUID, "/run/$(x)", log_dir, fake_mps, NULL, &bad), -EINVAL);
        ck_assert_str_eq(bad, "CUDA_MPS_PIPE_DIRECTORY");
        ck_assert_int_eq(mps_systemd_write_environment(base, UUID, pipe_dir, log_dir, NULL, NULL, &bad), -EINVAL);
        ck_assert_int_eq(access(p, F_OK), 0);
        /* The control daemon of a driver root gets that root's libraries (issue 13). */
        env = mfree(env);
        ck_assert_int_eq(mps_systemd_write_environment(base, UUID, pipe_dir, log_dir,
                                                       "/run/nvidia/driver/usr/bin/nvidia-cuda-mps-control",
                                                       "/run/nvidia/driver/usr/lib/x86_64-linux-gnu:/run/nvidia/driver/lib",
                                                       &bad), 0);
        ck_assert_int_eq(read_one_line_file_at(AT_FDCWD, p, 4096, &env), 0);
        ck_assert_ptr_nonnull(strstr(env, "\nLD_LIBRARY_PATH=/run/nvidia/driver/usr/lib/x86_64-linux-gnu:"
                                          "/run/nvidia/driver/lib"));
        ck_assert_int_eq(mps_systemd_write_environment(base, UUID, pipe_dir, log_dir, fake_mps, "/x y", &bad), -EINVAL);
        ck_assert_str_eq(bad, "LD_LIBRARY_PATH");

        /* An MPS directory that is not the one the template reads: "auto" runs -d itself,
         * without asking any bus. */
        ck_assert_int_eq(mps_set_launcher(m, MPS_LAUNCHER_AUTO), 0);
        ck_assert(!mps_uses_systemd(m));
        ck_assert_int_eq(mps_set_launcher(m, MPS_LAUNCHER_DIRECT), 0);
        /* The disable removes what the launcher wrote there too. */
        ck_assert_int_eq(set_and_wait(m, true, GIB, 50, NULL), 0);
        ck_assert_int_eq(set_and_wait(m, false, 0, 0, NULL), 0);
        ck_assert_int_lt(access(base, F_OK), 0);
        mps_free(m);
}
END_TEST

static Suite *mps_suite(void) {
        Suite *s = suite_create("mps");
        TCase *tc = tcase_create("mps");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_enable_change_disable);
        tcase_add_test(tc, test_readopt_after_restart);
        tcase_add_test(tc, test_adopt);
        tcase_add_test(tc, test_never_blocks_and_timeout);
        tcase_add_test(tc, test_check_timer);
        tcase_add_test(tc, test_tool_missing);
        tcase_add_test(tc, test_mig_refused);
        tcase_add_test(tc, test_health_restart_then_failed);
        tcase_add_test(tc, test_restart_fails);
        tcase_add_test(tc, test_queue_in_order);
        tcase_add_test(tc, test_check_gives_way);
        tcase_add_test(tc, test_validate_and_cancel);
        tcase_add_test(tc, test_systemd_unit_and_environment);
        tcase_add_test(tc, test_restore_compute_mode);
        tcase_add_test(tc, test_pod_files_cannot_fail_stop);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(mps_suite)
