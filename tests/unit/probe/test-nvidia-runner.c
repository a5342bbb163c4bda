/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-nvidia-runner.c — the NVIDIA tool runner (daemons/probe/nvidia-runner.c) running
 * the fake nvidia-smi / nvidia-cuda-mps-control of tests/fake-nvidia/: output, exit
 * status, the command log, state changes, timeouts, output bounds, tool lookup.
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "daemons/probe/nvidia-runner.h"
#include "daemons/probe/nvidia-smi.h"
#include "tests/unit/test-main.h"

static char tmpdir[] = "/tmp/test-nvidia-runner-XXXXXX";
static char *fake_smi, *fake_mps, *log_path, *state_path;

typedef struct Outcome {
        int error;
        int calls;
        NvidiaRunResult result;  /* out/err copied */
        bool free_in_callback;
} Outcome;

static void on_done(NvidiaRun *run, int error, const NvidiaRunResult *result, void *userdata) {
        Outcome *o = userdata;

        o->calls++;
        o->error = error;
        o->result = *result;
        o->result.out = strdup(result->out);
        o->result.err = strdup(result->err);
        ck_assert_ptr_nonnull(o->result.out);
        ck_assert_ptr_nonnull(o->result.err);
        ck_assert_uint_eq(strlen(result->out), result->out_len);
        if (o->free_in_callback)
                nvidia_run_free(run);
}

static int on_exit_check(sd_event_source *s, void *userdata) {
        Outcome *o = userdata;

        if (o->calls > 0)
                return sd_event_exit(sd_event_source_get_event(s), 0);
        return 0;
}

/* Runs one command to completion; returns the outcome (caller frees out/err). */
static Outcome run_sync(const char *path, char **argv, const NvidiaRunOptions *opts, bool free_in_callback) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        sd_event_source *post = NULL;
        NvidiaRun *run = NULL;
        Outcome o = { .free_in_callback = free_in_callback };

        ck_assert_int_ge(sd_event_new(&e), 0);
        ck_assert_int_eq(nvidia_run_start(e, path, argv, opts, on_done, &o, &run), 0);
        ck_assert_int_gt(nvidia_run_get_pid(run), 0);
        ck_assert_int_ge(sd_event_add_post(e, &post, on_exit_check, &o), 0);
        ck_assert_int_ge(sd_event_loop(e), 0);
        ck_assert_int_eq(o.calls, 1);
        sd_event_source_unref(post);
        if (!free_in_callback) {
                ck_assert_int_eq(nvidia_run_get_pid(run), 0);
                nvidia_run_free(run);
        }
        return o;
}

static void outcome_done(Outcome *o) {
        free(o->result.out);
        free(o->result.err);
}

static char *read_file(const char *path) {
        char *s = NULL;

        if (read_one_line_file_at(AT_FDCWD, path, 1 << 20, &s) < 0)
                return strdup("");
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
        setenv("KGPU_FAKE_NVIDIA_LOG", log_path, 1);
        setenv("KGPU_FAKE_NVIDIA_STATE", state_path, 1);
        unsetenv("KGPU_FAKE_NVIDIA_LOST");
        unsetenv("KGPU_FAKE_NVIDIA_DELAY");
        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "l40s", 1);
}

static void teardown(void) {
        _cleanup_free_ char *cmd = NULL;

        ck_assert_int_ge(asprintf(&cmd, "rm -rf '%s'", tmpdir), 0);
        (void) system(cmd);
        strcpy(tmpdir, "/tmp/test-nvidia-runner-XXXXXX");
        fake_smi = mfree(fake_smi);
        fake_mps = mfree(fake_mps);
        log_path = mfree(log_path);
        state_path = mfree(state_path);
}

START_TEST(test_query_gpu) {
        char *argv[] = { "nvidia-smi", "--query-gpu=" NVIDIA_SMI_QUERY_FIELDS, "--format=csv,noheader,nounits", NULL };
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        _cleanup_free_ char *log = NULL, *err = NULL;
        size_t n = 0;
        Outcome o;

        o = run_sync(fake_smi, argv, NULL, false);
        ck_assert_int_eq(o.error, 0);
        ck_assert_int_eq(o.result.exit_status, 0);
        ck_assert_int_eq(o.result.signal, 0);
        ck_assert(!o.result.timed_out && !o.result.truncated);
        ck_assert_int_eq(nvidia_smi_parse_query_gpu(o.result.out, o.result.out_len, NVIDIA_SMI_QUERY_FIELDS, &gpus,
                                                    &n, &err), 0);
        ck_assert_uint_eq(n, 1);
        ck_assert_str_eq(gpus[0].name, "NVIDIA L40S");
        ck_assert_str_eq(gpus[0].pci_address, "0000:01:00.0");
        ck_assert_uint_eq(gpus[0].memory_mib, 46068);
        ck_assert_int_eq(gpus[0].mig_mode, NVIDIA_MIG_MODE_UNSUPPORTED);
        outcome_done(&o);

        log = read_file(log_path);
        ck_assert_str_eq(log, "nvidia-smi --query-gpu=" NVIDIA_SMI_QUERY_FIELDS " --format=csv,noheader,nounits");
}
END_TEST

START_TEST(test_models) {
        static const struct {
                const char *scenario;
                size_t n_gpus, n_migs;
                NvidiaMigMode mig;
                const char *name;
        } cases[] = {
                { "h100-mig", 1, 4, NVIDIA_MIG_MODE_ENABLED, "NVIDIA H100 80GB HBM3" },
                { "h200-mig", 1, 5, NVIDIA_MIG_MODE_ENABLED, "NVIDIA H200" },
                { "l40s", 1, 0, NVIDIA_MIG_MODE_UNSUPPORTED, "NVIDIA L40S" },
                { "8xh100-nvlink", 8, 0, NVIDIA_MIG_MODE_DISABLED, "NVIDIA H100 80GB HBM3" },
        };
        char *q[] = { "nvidia-smi", "--query-gpu=" NVIDIA_SMI_QUERY_FIELDS, "--format=csv,noheader,nounits", NULL };
        char *l[] = { "nvidia-smi", "-L", NULL };
        char *t[] = { "nvidia-smi", "topo", "-m", NULL };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ NvidiaGpu *gpus = NULL, *listed = NULL;
                _cleanup_free_ NvidiaMigDevice *migs = NULL;
                _cleanup_free_ NvidiaTopology *topo = NULL;
                size_t n = 0, nl = 0, nm = 0;
                Outcome o;

                setenv("KGPU_FAKE_NVIDIA_SCENARIO", cases[i].scenario, 1);
                o = run_sync(fake_smi, q, NULL, false);
                ck_assert_int_eq(o.result.exit_status, 0);
                ck_assert_int_eq(nvidia_smi_parse_query_gpu(o.result.out, o.result.out_len, NVIDIA_SMI_QUERY_FIELDS,
                                                            &gpus, &n, NULL), 0);
                outcome_done(&o);
                o = run_sync(fake_smi, l, NULL, false);
                ck_assert_int_eq(nvidia_smi_parse_list(o.result.out, o.result.out_len, &listed, &nl, &migs, &nm, NULL),
                                 0);
                outcome_done(&o);
                o = run_sync(fake_smi, t, NULL, false);
                ck_assert_int_eq(nvidia_smi_parse_topology(o.result.out, o.result.out_len, &topo, NULL), 0);
                outcome_done(&o);

                ck_assert_uint_eq(n, cases[i].n_gpus);
                ck_assert_uint_eq(nl, cases[i].n_gpus);
                ck_assert_uint_eq(nm, cases[i].n_migs);
                ck_assert_uint_eq(topo->n_gpus, cases[i].n_gpus);
                for (size_t k = 0; k < n; k++) {
                        ck_assert_str_eq(gpus[k].name, cases[i].name);
                        ck_assert_int_eq(gpus[k].mig_mode, cases[i].mig);
                        /* -L and the CSV agree on each GPU. */
                        ck_assert_str_eq(gpus[k].uuid, listed[k].uuid);
                }
        }
}
END_TEST

START_TEST(test_mig_instance_ids) {
        char *q[] = { "nvidia-smi", "--query-gpu=" NVIDIA_SMI_QUERY_FIELDS, "--format=csv,noheader,nounits", NULL };
        char *l[] = { "nvidia-smi", "-L", NULL };
        char *qq[] = { "nvidia-smi", "-q", NULL };
        char *lgi[] = { "nvidia-smi", "mig", "-lgi", NULL };
        _cleanup_free_ NvidiaGpu *gpus = NULL, *listed = NULL;
        _cleanup_free_ NvidiaMigDevice *migs = NULL;
        _cleanup_free_ NvidiaQMigDevice *qm = NULL;
        static const int32_t gi[] = { 2, 3, 9, 10 };
        size_t n = 0, nl = 0, nm = 0, nq = 0;
        Outcome o;

        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "h100-mig", 1);
        o = run_sync(fake_smi, q, NULL, false);
        ck_assert_int_eq(nvidia_smi_parse_query_gpu(o.result.out, o.result.out_len, NVIDIA_SMI_QUERY_FIELDS, &gpus, &n,
                                                    NULL), 0);
        outcome_done(&o);
        o = run_sync(fake_smi, l, NULL, false);
        ck_assert_int_eq(nvidia_smi_parse_list(o.result.out, o.result.out_len, &listed, &nl, &migs, &nm, NULL), 0);
        outcome_done(&o);
        o = run_sync(fake_smi, qq, NULL, false);
        ck_assert_int_eq(nvidia_smi_parse_q_mig_devices(o.result.out, o.result.out_len, &qm, &nq, NULL), 0);
        outcome_done(&o);

        ck_assert_uint_eq(nm, 4);
        ck_assert_int_eq(nvidia_mig_devices_set_instance_ids(migs, nm, gpus, n, qm, nq), 4);
        for (size_t i = 0; i < nm; i++) {
                ck_assert_int_eq(migs[i].gi_id, gi[i]);
                ck_assert_int_eq(migs[i].ci_id, 0);
        }

        /* A scenario without the recording says so (exit 255), it does not invent one. */
        o = run_sync(fake_smi, lgi, NULL, false);
        ck_assert_int_eq(o.result.exit_status, 255);
        ck_assert_uint_eq(o.result.out_len, 0);
        ck_assert_ptr_nonnull(strstr(o.result.err, "no recording"));
        outcome_done(&o);
}
END_TEST

START_TEST(test_lost_gpu) {
        char *q[] = { "nvidia-smi", "--query-gpu=" NVIDIA_SMI_QUERY_FIELDS, "--format=csv,noheader,nounits", NULL };
        _cleanup_free_ char *err = NULL;
        NvidiaGpu *gpus = NULL;
        NvidiaSmiError e;
        size_t n = 0;
        Outcome o;

        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "8xh100-nvlink", 1);
        setenv("KGPU_FAKE_NVIDIA_LOST", "5", 1);
        o = run_sync(fake_smi, q, NULL, false);
        ck_assert_int_eq(o.error, 0);
        ck_assert_int_eq(o.result.exit_status, 15);
        ck_assert_int_eq(nvidia_smi_parse_query_gpu(o.result.out, o.result.out_len, NVIDIA_SMI_QUERY_FIELDS, &gpus, &n,
                                                    &err), -EIO);
        ck_assert_int_eq(nvidia_smi_parse_error(o.result.out, o.result.out_len, &e), 1);
        ck_assert_int_eq(e.kind, NVIDIA_SMI_ERROR_GPU_LOST);
        ck_assert_str_eq(e.pci_address, "0000:ab:00.0");
        outcome_done(&o);

        /* Two lost: the health parser keeps the other six rows. */
        setenv("KGPU_FAKE_NVIDIA_LOST", "3,5", 1);
        o = run_sync(fake_smi, q, NULL, false);
        ck_assert_int_eq(o.result.exit_status, 15);
        {
                _cleanup_free_ NvidiaSmiError *lost = NULL;
                size_t nl = 0;

                ck_assert_int_eq(nvidia_smi_parse_query_gpu_health(o.result.out, o.result.out_len,
                                                                   NVIDIA_SMI_QUERY_FIELDS, &gpus, &n, &lost, &nl,
                                                                   NULL), 0);
                ck_assert_uint_eq(n, 6);
                ck_assert_uint_eq(nl, 2);
                ck_assert_str_eq(lost[0].pci_address, "0000:5d:00.0");
                ck_assert_str_eq(lost[1].pci_address, "0000:ab:00.0");
                for (size_t k = 0; k < n; k++)
                        ck_assert(gpus[k].index != 3 && gpus[k].index != 5);
                gpus = mfree(gpus);
        }
        outcome_done(&o);

        /* Back again. */
        setenv("KGPU_FAKE_NVIDIA_LOST", "", 1);
        o = run_sync(fake_smi, q, NULL, false);
        ck_assert_int_eq(o.result.exit_status, 0);
        ck_assert_int_eq(nvidia_smi_parse_query_gpu(o.result.out, o.result.out_len, NVIDIA_SMI_QUERY_FIELDS, &gpus, &n,
                                                    NULL), 0);
        ck_assert_uint_eq(n, 8);
        free(gpus);
        outcome_done(&o);
}
END_TEST

START_TEST(test_no_devices) {
        char *l[] = { "nvidia-smi", "-L", NULL };
        NvidiaGpu *gpus = NULL;
        size_t n;
        Outcome o;

        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "no-devices", 1);
        o = run_sync(fake_smi, l, NULL, true);  /* also: the callback frees the run */
        ck_assert_int_eq(o.error, 0);
        ck_assert_int_eq(o.result.exit_status, 6);
        ck_assert_int_eq(nvidia_smi_parse_list(o.result.out, o.result.out_len, &gpus, &n, NULL, NULL, NULL), -ENODEV);
        outcome_done(&o);

        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "no-driver", 1);
        o = run_sync(fake_smi, l, NULL, false);
        ck_assert_int_eq(o.result.exit_status, 9);
        ck_assert_int_eq(nvidia_smi_parse_list(o.result.out, o.result.out_len, &gpus, &n, NULL, NULL, NULL), -ENXIO);
        outcome_done(&o);
}
END_TEST

START_TEST(test_compute_mode) {
        char *set[] = { "nvidia-smi", "-i", "0", "-c", "EXCLUSIVE_PROCESS", NULL };
        char *q[] = { "nvidia-smi", "--query-gpu=index,compute_mode", "--format=csv,noheader", NULL };
        _cleanup_free_ char *log = NULL, *err = NULL;
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        NvidiaComputeMode m = NVIDIA_COMPUTE_MODE_UNKNOWN;
        size_t n;
        Outcome o;

        o = run_sync(fake_smi, set, NULL, false);
        ck_assert_int_eq(o.result.exit_status, 0);
        ck_assert_int_eq(nvidia_smi_parse_compute_mode_reply(o.result.out, o.result.out_len, &m, &err), 0);
        ck_assert_int_eq(m, NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS);
        outcome_done(&o);

        o = run_sync(fake_smi, q, NULL, false);
        ck_assert_int_eq(nvidia_smi_parse_query_gpu(o.result.out, o.result.out_len, "index,compute_mode", &gpus, &n,
                                                    NULL), 0);
        ck_assert_int_eq(gpus[0].compute_mode, NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS);
        outcome_done(&o);

        /* A MIG-enabled GPU refuses. */
        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "h100-mig", 1);
        o = run_sync(fake_smi, set, NULL, false);
        ck_assert_int_eq(nvidia_smi_parse_compute_mode_reply(o.result.out, o.result.out_len, &m, &err), -EOPNOTSUPP);
        outcome_done(&o);

        log = read_file(log_path);
        ck_assert_ptr_nonnull(strstr(log, "nvidia-smi -i 0 -c EXCLUSIVE_PROCESS\nnvidia-smi --query-gpu="));
}
END_TEST

START_TEST(test_mps) {
        char *d[] = { "nvidia-cuda-mps-control", "-d", NULL };
        char *c[] = { "nvidia-cuda-mps-control", NULL };
        static const char limits[] =
                "set_default_device_pinned_mem_limit 0 2048M\n"
                "set_default_active_thread_percentage 50\n";
        NvidiaRunOptions opts = { .stdin_data = limits, .stdin_len = strlen(limits) };
        _cleanup_free_ char *log = NULL, *state = NULL, *pipe_dir = NULL;
        Outcome o;

        ck_assert_int_ge(asprintf(&pipe_dir, "%s/mps-0", tmpdir), 0);
        setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_dir, 1);

        /* No daemon yet: the recorded refusal, on stderr as the real tool writes it. */
        o = run_sync(fake_mps, c, &opts, false);
        ck_assert_int_eq(o.result.exit_status, 1);
        ck_assert_uint_eq(o.result.out_len, 0);
        ck_assert_int_eq(nvidia_mps_parse_reply(o.result.err, o.result.err_len, NULL), -ESRCH);
        outcome_done(&o);

        /* -d returns once the daemon listens (its grandchild keeps running). */
        o = run_sync(fake_mps, d, NULL, false);
        ck_assert_int_eq(o.result.exit_status, 0);
        outcome_done(&o);
        o = run_sync(fake_mps, c, &opts, false);
        ck_assert_int_eq(o.result.exit_status, 0);
        {
                uint32_t tenths = 0;

                /* The percentage in force, printed back. */
                ck_assert_int_eq(nvidia_mps_parse_percentage_reply(o.result.out, o.result.out_len, &tenths, NULL), 0);
                ck_assert_uint_eq(tenths, 500);
        }
        outcome_done(&o);

        log = read_file(log_path);
        ck_assert_ptr_nonnull(strstr(log, "nvidia-cuda-mps-control -d [CUDA_MPS_PIPE_DIRECTORY="));
        ck_assert_ptr_nonnull(strstr(log, "nvidia-cuda-mps-control < set_default_device_pinned_mem_limit 0 2048M\n"
                                          "nvidia-cuda-mps-control < set_default_active_thread_percentage 50"));
        state = read_file(state_path);
        ck_assert_ptr_nonnull(strstr(state, "\"0\": \"2048M\""));
        ck_assert_ptr_nonnull(strstr(state, "\"active_thread_percentage\": \"50.0\""));
        /* quit: the daemon is gone. */
        opts = (NvidiaRunOptions) { .stdin_data = "quit\n", .stdin_len = 5 };
        o = run_sync(fake_mps, c, &opts, false);
        ck_assert_int_eq(o.result.exit_status, 0);
        outcome_done(&o);
        opts = (NvidiaRunOptions) { .stdin_data = "get_server_list\n", .stdin_len = 16 };
        o = run_sync(fake_mps, c, &opts, false);
        ck_assert_int_eq(o.result.exit_status, 1);
        ck_assert_int_eq(nvidia_mps_parse_reply(o.result.err, o.result.err_len, NULL), -ESRCH);
        outcome_done(&o);
        unsetenv("CUDA_MPS_PIPE_DIRECTORY");
}
END_TEST

START_TEST(test_timeout) {
        char *l[] = { "nvidia-smi", "-L", NULL };
        NvidiaRunOptions opts = { .timeout_usec = 300 * 1000 };
        Outcome o;

        setenv("KGPU_FAKE_NVIDIA_DELAY", "20", 1);
        o = run_sync(fake_smi, l, &opts, false);
        ck_assert_int_eq(o.error, -ETIME);
        ck_assert(o.result.timed_out);
        ck_assert_int_eq(o.result.signal, SIGKILL);
        ck_assert_int_eq(o.result.exit_status, -1);
        ck_assert_uint_ge(o.result.duration_usec, 300 * 1000);
        ck_assert_uint_lt(o.result.duration_usec, 5 * 1000 * 1000);
        outcome_done(&o);
}
END_TEST

START_TEST(test_output_bounded) {
        char *yes[] = { "yes", "0, GPU-00000000-0000-0000-0000-000000000000, NVIDIA H100", NULL };
        NvidiaRunOptions opts = { .output_max = 4096 };
        Outcome o;

        o = run_sync("/usr/bin/yes", yes, &opts, false);
        ck_assert_int_eq(o.error, -EMSGSIZE);
        ck_assert(o.result.truncated);
        ck_assert_uint_eq(o.result.out_len, 4096);
        ck_assert_int_eq(o.result.signal, SIGKILL);
        outcome_done(&o);
}
END_TEST

START_TEST(test_stderr_and_status) {
        char *sh[] = { "sh", "-c", "echo out; echo err >&2; exit 3", NULL };
        Outcome o;

        /* Not a shell of ours: sh is the program run, with argv as given. */
        o = run_sync("/bin/sh", sh, NULL, false);
        ck_assert_int_eq(o.error, 0);
        ck_assert_int_eq(o.result.exit_status, 3);
        ck_assert_str_eq(o.result.out, "out\n");
        ck_assert_str_eq(o.result.err, "err\n");
        outcome_done(&o);
}
END_TEST

START_TEST(test_free_running) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        char *l[] = { "nvidia-smi", "-L", NULL };
        NvidiaRun *run = NULL;
        Outcome o = {};
        pid_t pid;

        setenv("KGPU_FAKE_NVIDIA_DELAY", "20", 1);
        ck_assert_int_ge(sd_event_new(&e), 0);
        ck_assert_int_eq(nvidia_run_start(e, fake_smi, l, NULL, on_done, &o, &run), 0);
        pid = nvidia_run_get_pid(run);
        ck_assert_int_gt(pid, 0);
        ck_assert_int_eq(kill(pid, 0), 0);
        nvidia_run_free(run);
        /* Killed and reaped: the pid is gone, no callback. */
        ck_assert_int_eq(kill(pid, 0), -1);
        ck_assert_int_eq(errno, ESRCH);
        ck_assert_int_eq(o.calls, 0);
}
END_TEST

START_TEST(test_bad_arguments) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        char *argv[] = { "nvidia-smi", NULL };
        char *many[NVIDIA_RUN_ARGV_MAX + 2];
        NvidiaRun *run = NULL;
        Outcome o = {};

        ck_assert_int_ge(sd_event_new(&e), 0);
        ck_assert_int_eq(nvidia_run_start(e, "/nonexistent/nvidia-smi", argv, NULL, on_done, &o, &run), -ENOENT);
        ck_assert_int_eq(nvidia_run_start(e, "nvidia-smi", argv, NULL, on_done, &o, &run), -EINVAL);
        for (size_t i = 0; i < ELEMENTSOF(many) - 1; i++)
                many[i] = "x";
        many[ELEMENTSOF(many) - 1] = NULL;
        ck_assert_int_eq(nvidia_run_start(e, fake_smi, many, NULL, on_done, &o, &run), -E2BIG);
        ck_assert_ptr_null(run);
}
END_TEST

START_TEST(test_tool_find) {
        _cleanup_free_ char *bin = NULL, *link = NULL, *found = NULL, *root = NULL;

        ck_assert_int_ge(asprintf(&root, "%s/driver", tmpdir), 0);
        ck_assert_int_ge(asprintf(&bin, "%s/driver/usr/bin", tmpdir), 0);
        ck_assert_int_ge(asprintf(&link, "%s/nvidia-smi", bin), 0);
        ck_assert_int_eq(mkdir(root, 0755), 0);
        {
                _cleanup_free_ char *usr = NULL;

                ck_assert_int_ge(asprintf(&usr, "%s/driver/usr", tmpdir), 0);
                ck_assert_int_eq(mkdir(usr, 0755), 0);
                ck_assert_int_eq(mkdir(bin, 0755), 0);
        }
        ck_assert_int_eq(nvidia_tool_find(root, NULL, "nvidia-smi", &found, NULL), -ENOENT);
        ck_assert_int_eq(symlink(fake_smi, link), 0);
        ck_assert_int_eq(nvidia_tool_find(root, NULL, "nvidia-smi", &found, NULL), 0);
        ck_assert_str_eq(found, link);
        found = mfree(found);
        ck_assert_int_eq(nvidia_tool_find(root, fake_mps, "nvidia-smi", &found, NULL), 0);
        ck_assert_str_eq(found, fake_mps);
        found = mfree(found);
        ck_assert_int_eq(nvidia_tool_find(root, "bin/nvidia-smi", "nvidia-smi", &found, NULL), -EINVAL);
        ck_assert_int_eq(nvidia_tool_find(root, NULL, "../nvidia-smi", &found, NULL), -EINVAL);
        ck_assert_int_eq(nvidia_tool_find("relative", NULL, "nvidia-smi", &found, NULL), -EINVAL);
        ck_assert_ptr_null(found);
}
END_TEST

static char *make_file(const char *dir, const char *name, mode_t mode) {
        char *p;

        ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
        ck_assert_int_eq(write_file_atomic_at(AT_FDCWD, p, "#!/bin/sh\n", 10, mode), 0);
        return p;
}

static char *make_dir(const char *dir, const char *name, mode_t mode) {
        char *p;

        ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
        ck_assert_int_eq(mkdir(p, mode), 0);
        ck_assert_int_eq(chmod(p, mode), 0);
        return p;
}

/* The probe runs the tools as root: only root (or its own user) may be able to change
 * them, the directories on their way and the driver root. */
START_TEST(test_tool_trust) {
        _cleanup_free_ char *ok = NULL, *loose = NULL, *open_dir = NULL, *in_open = NULL, *sticky = NULL,
                            *in_sticky = NULL, *link = NULL, *found = NULL, *why = NULL, *root = NULL,
                            *usr = NULL, *bin = NULL, *tool = NULL, *lax_root = NULL;
        bool as_root = geteuid() == 0;

        /* tmpdir: 0700 under /tmp (root's, sticky): trusted. */
        ok = make_file(tmpdir, "ok", 0755);
        ck_assert_int_eq(nvidia_path_check_trusted(ok, false, &why), 0);
        ck_assert_int_eq(nvidia_tool_find(NULL, ok, "nvidia-smi", &found, &why), 0);
        ck_assert_str_eq(found, ok);
        found = mfree(found);

        /* Writable by group: refused, the reason names the file and its mode. */
        loose = make_file(tmpdir, "loose", 0775);
        ck_assert_int_eq(chmod(loose, 0775), 0);
        ck_assert_int_eq(nvidia_tool_find(NULL, loose, "nvidia-smi", &found, &why), -EPERM);
        ck_assert_ptr_null(found);
        ck_assert_msg(strstr(why, loose) && strstr(why, "writable by group or others (mode 0775)"), "why: %s", why);
        why = mfree(why);

        /* A trusted file in a directory others may write (no sticky bit): anyone could
         * replace it. Refused naming the directory. */
        open_dir = make_dir(tmpdir, "open", 0777);
        in_open = make_file(open_dir, "tool", 0755);
        ck_assert_int_eq(nvidia_path_check_trusted(in_open, false, &why), -EPERM);
        ck_assert_msg(strstr(why, open_dir) && strstr(why, "mode 0777"), "why: %s", why);
        why = mfree(why);
        /* ... but with the sticky bit (as /tmp) others cannot replace our files there. */
        sticky = make_dir(tmpdir, "sticky", 01777);
        in_sticky = make_file(sticky, "tool", 0755);
        ck_assert_int_eq(nvidia_path_check_trusted(in_sticky, false, NULL), 0);

        /* Through a symlink: the directory holding the link is checked too. */
        ck_assert_int_ge(asprintf(&link, "%s/link", open_dir), 0);
        ck_assert_int_eq(symlink(ok, link), 0);
        ck_assert_int_eq(nvidia_path_check_trusted(link, false, &why), -EPERM);
        ck_assert_msg(strstr(why, open_dir), "why: %s", why);
        why = mfree(why);
        ck_assert_int_eq(nvidia_path_check_trusted(fake_smi, false, NULL), 0);

        /* Not a regular file; missing; relative. */
        ck_assert_int_eq(nvidia_path_check_trusted(tmpdir, false, &why), -EPERM);
        ck_assert_msg(strstr(why, "not a regular file"), "why: %s", why);
        why = mfree(why);
        ck_assert_int_eq(nvidia_path_check_trusted(tmpdir, true, NULL), 0);
        ck_assert_int_eq(nvidia_path_check_trusted("/nonexistent/nvidia-smi", false, NULL), -ENOENT);
        ck_assert_int_eq(nvidia_path_check_trusted("usr/bin/nvidia-smi", false, NULL), -EINVAL);

        /* A driver root others may write: refused before looking for the tools in it. */
        lax_root = make_dir(tmpdir, "lax-root", 0757);
        ck_assert_int_eq(nvidia_tool_find(lax_root, NULL, "nvidia-smi", &found, &why), -EPERM);
        ck_assert_msg(strstr(why, lax_root), "why: %s", why);
        why = mfree(why);

        /* A driver root with an untrusted nvidia-smi in usr/bin and a good one in bin: the
         * first one found is refused, not skipped for the next. */
        root = make_dir(tmpdir, "driver", 0755);
        usr = make_dir(root, "usr", 0755);
        bin = make_dir(usr, "bin", 0755);
        tool = make_file(bin, "nvidia-smi", 0777);
        ck_assert_int_eq(chmod(tool, 0777), 0);
        free(make_dir(root, "bin", 0755));
        {
                _cleanup_free_ char *p = NULL, *good = NULL;

                ck_assert_int_ge(asprintf(&p, "%s/bin", root), 0);
                good = make_file(p, "nvidia-smi", 0755);
        }
        ck_assert_int_eq(nvidia_tool_find(root, NULL, "nvidia-smi", &found, &why), -EPERM);
        ck_assert_msg(strstr(why, tool), "why: %s", why);
        why = mfree(why);
        ck_assert_int_eq(chmod(tool, 0755), 0);
        ck_assert_int_eq(nvidia_tool_find(root, NULL, "nvidia-smi", &found, NULL), 0);
        ck_assert_str_eq(found, tool);
        found = mfree(found);

        if (!as_root)
                return;         /* the owner cases need chown */

        /* Owned by another user, mode 0755: that user could rewrite it. */
        ck_assert_int_eq(chown(ok, 65534, 65534), 0);
        ck_assert_int_eq(nvidia_tool_find(NULL, ok, "nvidia-smi", &found, &why), -EPERM);
        ck_assert_msg(strstr(why, ok) && strstr(why, "owned by uid 65534, not root"), "why: %s", why);
        why = mfree(why);
        /* A root-owned tool in a directory another user owns. */
        ck_assert_int_eq(chown(ok, 0, 0), 0);
        ck_assert_int_eq(chown(sticky, 65534, 65534), 0);
        ck_assert_int_eq(nvidia_path_check_trusted(in_sticky, false, &why), -EPERM);
        ck_assert_msg(strstr(why, sticky) && strstr(why, "owned by uid 65534"), "why: %s", why);
        why = mfree(why);
        /* The driver root owned by another user. */
        ck_assert_int_eq(chown(root, 65534, 65534), 0);
        ck_assert_int_eq(nvidia_tool_find(root, NULL, "nvidia-smi", &found, &why), -EPERM);
        ck_assert_msg(strstr(why, root) && strstr(why, "owned by uid 65534"), "why: %s", why);
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("nvidia-runner");
        TCase *tc = tcase_create("fake-tools");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_query_gpu);
        tcase_add_test(tc, test_models);
        tcase_add_test(tc, test_mig_instance_ids);
        tcase_add_test(tc, test_lost_gpu);
        tcase_add_test(tc, test_no_devices);
        tcase_add_test(tc, test_compute_mode);
        tcase_add_test(tc, test_tool_trust);
        tcase_add_test(tc, test_mps);
        tcase_add_test(tc, test_timeout);
        tcase_add_test(tc, test_output_bounded);
        tcase_add_test(tc, test_stderr_and_status);
        tcase_add_test(tc, test_free_running);
        tcase_add_test(tc, test_bad_arguments);
        tcase_add_test(tc, test_tool_find);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(suite)
