/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-nvidia-inventory.c — the probe's NVIDIA module (daemons/probe/nvidia.c) run on a
 * real sd-event loop against the fake nvidia-smi (tests/fake-nvidia) replaying the
 * recorded scenarios: the Gpu objects it builds (every value written out here), start
 * failures, health polls (lost GPU, failed poll, recovery), a MIG layout change on
 * rescan and the NVIDIA CDI spec.
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "common/util.h"
#include "daemons/probe/cdi-nvidia.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/nvidia.h"
#include "tests/unit/test-main.h"

static char workdir[] = "/tmp/test-nvidia-inventory.XXXXXX";
static char smi[4096];

/* A mig-minors file in the driver's format ("<name> <minor>"); minors as the driver
 * numbers them: 3 + 9 per GI (its access node, then ci0..ci7). */
static const char mig_minors[] =
        "config 1\n"
        "monitor 2\n"
        "gpu0/gi0/access 3\n"
        "gpu0/gi0/ci0/access 4\n"
        "gpu0/gi2/access 21\n"
        "gpu0/gi2/ci0/access 22\n"
        "gpu0/gi3/access 30\n"
        "gpu0/gi3/ci0/access 31\n"
        "gpu0/gi9/access 84\n"
        "gpu0/gi9/ci0/access 85\n"
        "gpu0/gi10/access 93\n"
        "gpu0/gi10/ci0/access 94\n"
        /* the 7x 1g layout of h100-mig-7x1g: GPU instances 7-13 */
        "gpu0/gi7/access 66\n"
        "gpu0/gi7/ci0/access 67\n"
        "gpu0/gi8/access 75\n"
        "gpu0/gi8/ci0/access 76\n"
        "gpu0/gi11/access 102\n"
        "gpu0/gi11/ci0/access 103\n"
        "gpu0/gi12/access 111\n"
        "gpu0/gi12/ci0/access 112\n"
        "gpu0/gi13/access 120\n"
        "gpu0/gi13/ci0/access 121\n";

static void write_file(const char *name, const char *text) {
        char path[4200];
        FILE *f;

        (void) snprintf(path, sizeof(path), "%s/%s", workdir, name);
        f = fopen(path, "we");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(fputs(text, f) >= 0, 1);
        ck_assert_int_eq(fclose(f), 0);
}

static void setup_env(const char *scenario) {
        char path[4200];
        const char *src = getenv("KGPU_SOURCE_ROOT");

        ck_assert_ptr_nonnull(src);
        ck_assert_ptr_nonnull(mkdtemp(workdir));
        (void) snprintf(smi, sizeof(smi), "%s/tests/fake-nvidia/nvidia-smi", src);
        setenv("KGPU_FAKE_NVIDIA_SCENARIO", scenario, 1);
        (void) snprintf(path, sizeof(path), "%s/fake-nvidia.log", workdir);
        setenv("KGPU_FAKE_NVIDIA_LOG", path, 1);
        (void) snprintf(path, sizeof(path), "%s/fake-nvidia-state.json", workdir);
        setenv("KGPU_FAKE_NVIDIA_STATE", path, 1);
        unsetenv("KGPU_FAKE_NVIDIA_LOST");
        write_file("mig-minors", mig_minors);
        (void) snprintf(path, sizeof(path), "%s/mig-minors", workdir);
        setenv("KGPU_NVIDIA_CAPS_MIG_MINORS", path, 1);
}

static Manager *start(const char *scenario, bool fail_on_init, uint32_t interval_ms, int *ret_wait) {
        Manager *m = NULL;
        Config c = {};
        const char *key = NULL;
        char cdi[4200];

        setup_env(scenario);
        (void) snprintf(cdi, sizeof(cdi), "%s/cdi", workdir);
        c.nvidia_enabled = true;
        c.nvidia_smi_path = smi;
        c.nvidia_fail_on_init_error = fail_on_init;
        c.nvidia_health_interval_ms = interval_ms;
        c.nvidia_health_recover_polls = 2;
        c.cdi_spec_directory = cdi;
        /* Hermetic on a host with an NVIDIA driver: a driver root without one (the CDI
         * spec names device nodes only), the device nodes the host's. */
        c.nvidia_driver_root = workdir;
        c.nvidia_dev_root = (char *) "/";
        ck_assert_int_eq(manager_new(&m), 0);
        ck_assert_int_eq(manager_configure(m, &c, &key), 0);
        ck_assert_int_eq(nvidia_probe_inventory(m->nvidia, true), 0);
        ck_assert(nvidia_probe_busy(m->nvidia));
        *ret_wait = nvidia_probe_wait_initial(m->nvidia);
        ck_assert(!nvidia_probe_busy(m->nvidia));
        return m;
}

static void run_until_polls(Manager *m, uint64_t n) {
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + 20U * 1000U * 1000U;

        while (nvidia_probe_n_polls(m->nvidia) < n) {
                ck_assert_int_ge(sd_event_run(m->event, 100000), 0);
                ck_assert_msg(now_usec(CLOCK_MONOTONIC) < deadline, "no health poll within 20 s");
        }
}

START_TEST(test_h100_mig) {
        _cleanup_(manager_freep) Manager *m = NULL;
        const GpuMigDevice *d;
        Gpu *g;
        int w;

        m = start("h100-mig", true, 0, &w);
        ck_assert_int_eq(w, 0);
        ck_assert_uint_eq(m->n_gpus, 1);
        g = m->gpus[0];
        ck_assert_str_eq(g->id, "GPU-00000000-0000-0000-0000-000000000000");
        ck_assert_str_eq(g->uuid, "GPU-00000000-0000-0000-0000-000000000000");
        ck_assert_str_eq(g->vendor, "nvidia");
        ck_assert_str_eq(g->driver, "nvidia");
        ck_assert_str_eq(g->pci_address, "0000:00:09.0");
        ck_assert_uint_eq(g->vendor_id, 0x10de);
        ck_assert_uint_eq(g->device_id, 0x2330);
        ck_assert_str_eq(g->product, "NVIDIA H100 80GB HBM3");
        ck_assert_uint_eq(g->memory_bytes, UINT64_C(81559) << 20);
        ck_assert_uint_eq(g->tiles, 1);
        ck_assert_int_eq(g->numa_node, 0);
        ck_assert_uint_eq(g->pci_class, 0x030200);
        ck_assert_str_eq(g->card_node, "");
        ck_assert_str_eq(g->render_node, "");
        ck_assert_uint_eq(strv_length(g->device_nodes), 4);
        ck_assert_str_eq(g->device_nodes[0], "/dev/nvidia0");    /* -q Minor Number 0 */
        ck_assert_str_eq(g->device_nodes[1], "/dev/nvidiactl");
        ck_assert_str_eq(g->device_nodes[2], "/dev/nvidia-uvm");
        ck_assert_str_eq(g->device_nodes[3], "/dev/nvidia-uvm-tools");
        ck_assert_uint_eq(strv_length(g->by_path_nodes), 0);
        ck_assert_str_eq(g->health, "Healthy");
        ck_assert_int_eq(g->index, 0);
        ck_assert_str_eq(g->compute_mode, "Default");
        ck_assert_str_eq(g->mig_mode, "Enabled");
        ck_assert_str_eq(g->compute_capability, "9.0");
        ck_assert_str_eq(g->driver_version, "590.48.01");
        ck_assert_str_eq(g->cuda_version, "13.1");
        ck_assert_uint_eq(g->n_links, 0);
        ck_assert_str_eq(g->mps_state, "");

        ck_assert_uint_eq(g->n_mig_devices, 4);
        d = &g->mig_devices[0];
        ck_assert_uint_eq(d->device_index, 0);
        ck_assert_str_eq(d->uuid, "MIG-00000000-0000-0000-0000-000000000000");
        ck_assert_str_eq(d->profile, "3g.40gb");
        ck_assert_uint_eq(d->gi_id, 2);
        ck_assert_uint_eq(d->ci_id, 0);
        ck_assert_uint_eq(strv_length(d->device_nodes), 2);
        ck_assert_str_eq(d->device_nodes[0], "/dev/nvidia-caps/nvidia-cap21");
        ck_assert_str_eq(d->device_nodes[1], "/dev/nvidia-caps/nvidia-cap22");
        ck_assert_uint_eq(d->memory_bytes, UINT64_C(40448) << 20);
        d = &g->mig_devices[1];
        ck_assert_str_eq(d->profile, "2g.20gb");
        ck_assert_uint_eq(d->gi_id, 3);
        ck_assert_str_eq(d->device_nodes[0], "/dev/nvidia-caps/nvidia-cap30");
        ck_assert_str_eq(d->device_nodes[1], "/dev/nvidia-caps/nvidia-cap31");
        ck_assert_uint_eq(d->memory_bytes, UINT64_C(20096) << 20);
        d = &g->mig_devices[3];
        ck_assert_uint_eq(d->device_index, 3);
        ck_assert_str_eq(d->uuid, "MIG-00000003-0000-0000-0000-000000000003");
        ck_assert_str_eq(d->profile, "1g.10gb");
        ck_assert_uint_eq(d->gi_id, 10);
        ck_assert_str_eq(d->device_nodes[0], "/dev/nvidia-caps/nvidia-cap93");
        ck_assert_str_eq(d->device_nodes[1], "/dev/nvidia-caps/nvidia-cap94");
        ck_assert_uint_eq(d->memory_bytes, UINT64_C(9984) << 20);
}
END_TEST

START_TEST(test_l40s) {
        _cleanup_(manager_freep) Manager *m = NULL;
        Gpu *g;
        int w;

        m = start("l40s", true, 0, &w);
        ck_assert_int_eq(w, 0);
        ck_assert_uint_eq(m->n_gpus, 1);
        g = m->gpus[0];
        ck_assert_str_eq(g->product, "NVIDIA L40S");
        ck_assert_uint_eq(g->device_id, 0x26b9);
        ck_assert_str_eq(g->pci_address, "0000:01:00.0");
        ck_assert_uint_eq(g->memory_bytes, UINT64_C(46068) << 20);
        ck_assert_str_eq(g->mig_mode, "");              /* [N/A]: not MIG capable */
        ck_assert_uint_eq(g->n_mig_devices, 0);
        ck_assert_str_eq(g->compute_capability, "8.9");
        ck_assert_str_eq(g->driver_version, "595.80");
        ck_assert_str_eq(g->cuda_version, "13.2");      /* no -q recording: from the summary table */
        ck_assert_str_eq(g->device_nodes[0], "/dev/nvidia0");
        ck_assert_int_eq(g->numa_node, 0);

        /* healthIntervalMs 0: no polls and no wakeups at all (once the pending label/CDI
         * write ran). */
        for (int i = 0; i < 10 && sd_event_run(m->event, 0) > 0; i++)
                ;
        ck_assert_int_eq(sd_event_run(m->event, 300000), 0);
        ck_assert_uint_eq(nvidia_probe_n_polls(m->nvidia), 0);
}
END_TEST

START_TEST(test_8xh100_nvlink) {
        _cleanup_(manager_freep) Manager *m = NULL;
        Gpu *g;
        int w;

        m = start("8xh100-nvlink", true, 0, &w);
        ck_assert_int_eq(w, 0);
        ck_assert_uint_eq(m->n_gpus, 8);
        for (size_t i = 0; i < 8; i++) {
                char id[64], node[32];

                g = m->gpus[i];         /* sorted by id = by index here */
                (void) snprintf(id, sizeof(id), "GPU-0000000%zu-0000-0000-0000-00000000000%zu", i, i);
                (void) snprintf(node, sizeof(node), "/dev/nvidia%zu", i);
                ck_assert_str_eq(g->id, id);
                ck_assert_int_eq(g->index, (int) i);
                ck_assert_str_eq(g->device_nodes[0], node);   /* no -q: minor = index */
                ck_assert_int_eq(g->numa_node, i < 4 ? 0 : 1);
                ck_assert_str_eq(g->mig_mode, "Disabled");
                ck_assert_str_eq(g->cuda_version, "");  /* neither -q nor summary recorded */
                ck_assert_uint_eq(g->n_links, 7);
                for (size_t k = 0; k < 7; k++) {
                        ck_assert_str_eq(g->links[k].type, "NV");
                        ck_assert_uint_eq(g->links[k].nvlinks, 18);
                        ck_assert_str_ne(g->links[k].peer_id, g->id);
                }
        }
        ck_assert_str_eq(m->gpus[0]->pci_address, "0000:18:00.0");
        ck_assert_str_eq(m->gpus[7]->pci_address, "0000:db:00.0");
        ck_assert_str_eq(m->gpus[0]->links[0].peer_id, "GPU-00000001-0000-0000-0000-000000000001");
        ck_assert_str_eq(m->gpus[7]->links[6].peer_id, "GPU-00000006-0000-0000-0000-000000000006");
}
END_TEST

static unsigned count_log(const char *needle) {
        char path[4200], line[8192];
        unsigned c = 0;
        FILE *f;

        (void) snprintf(path, sizeof(path), "%s/fake-nvidia.log", workdir);
        f = fopen(path, "re");
        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f))
                if (strstr(line, needle))
                        c++;
        fclose(f);
        return c;
}

START_TEST(test_no_compute_cap) {
        _cleanup_(manager_freep) Manager *m = NULL;
        Gpu *g;
        int w;

        /* A driver that refuses the compute_cap field: asked again without it. */
        m = start("gtx1660-no-compute-cap", true, 0, &w);
        ck_assert_int_eq(w, 0);
        ck_assert_uint_eq(m->n_gpus, 1);
        g = m->gpus[0];
        ck_assert_str_eq(g->id, "GPU-43b14c17-b685-e8ad-ab90-abc0d70fca06");
        ck_assert_str_eq(g->product, "NVIDIA GeForce GTX 1660 SUPER");
        ck_assert_uint_eq(g->memory_bytes, UINT64_C(6144) << 20);
        ck_assert_uint_eq(g->device_id, 0x21c4);
        ck_assert_str_eq(g->compute_capability, "");
        ck_assert_str_eq(g->driver_version, "591.86");
        ck_assert_str_eq(g->mig_mode, "");
        ck_assert_uint_eq(count_log("compute_cap"), 1);
        /* The next read does not try it again. */
        ck_assert_int_eq(nvidia_probe_inventory(m->nvidia, true), 0);
        ck_assert_int_eq(nvidia_probe_wait_initial(m->nvidia), 0);
        ck_assert_uint_eq(m->n_gpus, 1);
        ck_assert_uint_eq(count_log("compute_cap"), 1);
        ck_assert_uint_eq(count_log("--query-gpu="), 3);
}
END_TEST

START_TEST(test_no_devices) {
        _cleanup_(manager_freep) Manager *m = NULL;
        int w;

        m = start("no-devices", true, 0, &w);
        ck_assert_int_eq(w, 0);
        ck_assert_uint_eq(m->n_gpus, 0);
        ck_assert_int_eq(nvidia_probe_last_error(m->nvidia, NULL), 0);
}
END_TEST

START_TEST(test_no_driver_fail_on_init) {
        _cleanup_(manager_freep) Manager *m = NULL;
        const char *msg = NULL;
        int w;

        m = start("no-driver", true, 0, &w);
        ck_assert_int_lt(w, 0);
        ck_assert_uint_eq(m->n_gpus, 0);
        ck_assert_int_lt(nvidia_probe_last_error(m->nvidia, &msg), 0);
        ck_assert_ptr_nonnull(strstr(msg, "couldn't communicate with the NVIDIA driver"));
}
END_TEST

START_TEST(test_no_driver_no_fail) {
        _cleanup_(manager_freep) Manager *m = NULL;
        int w;

        m = start("no-driver", false, 0, &w);
        ck_assert_int_eq(w, 0);
        ck_assert_uint_eq(m->n_gpus, 0);
        ck_assert_int_lt(nvidia_probe_last_error(m->nvidia, NULL), 0);

        /* The next rescan retries: the driver is back. */
        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "l40s", 1);
        ck_assert_int_eq(nvidia_probe_inventory(m->nvidia, true), 0);
        ck_assert_int_eq(nvidia_probe_wait_initial(m->nvidia), 0);
        ck_assert_uint_eq(m->n_gpus, 1);
        ck_assert_int_eq(nvidia_probe_last_error(m->nvidia, NULL), 0);
}
END_TEST

START_TEST(test_no_tool) {
        _cleanup_(manager_freep) Manager *m = NULL;
        Config c = {};
        const char *key = NULL;

        /* No nvidia-smi under the driver root: nothing runs, no GPU, no timer. */
        ck_assert_ptr_nonnull(mkdtemp(workdir));
        c.nvidia_enabled = true;
        c.nvidia_driver_root = workdir;
        c.nvidia_health_interval_ms = 50;
        c.nvidia_health_recover_polls = 1;
        ck_assert_int_eq(manager_new(&m), 0);
        ck_assert_int_eq(manager_configure(m, &c, &key), 0);
        ck_assert_int_eq(nvidia_probe_inventory(m->nvidia, true), 0);
        ck_assert(!nvidia_probe_busy(m->nvidia));
        ck_assert_int_eq(nvidia_probe_wait_initial(m->nvidia), 0);
        ck_assert_uint_eq(m->n_gpus, 0);
        /* No wakeups: the loop has nothing to dispatch within 200 ms. */
        ck_assert_int_eq(sd_event_run(m->event, 200000), 0);
        ck_assert_uint_eq(nvidia_probe_n_polls(m->nvidia), 0);
}
END_TEST

START_TEST(test_switched_off) {
        _cleanup_(manager_freep) Manager *m = NULL;
        Config c = {};
        const char *key = NULL;
        int w;

        m = start("l40s", true, 0, &w);
        ck_assert_int_eq(w, 0);
        ck_assert_uint_eq(m->n_gpus, 1);

        /* A reload with nvidia.enabled false while a rescan reads: the read is dropped,
         * the GPUs leave, nothing comes back. */
        ck_assert_int_eq(nvidia_probe_inventory(m->nvidia, true), 0);
        ck_assert(nvidia_probe_busy(m->nvidia));
        c.nvidia_enabled = false;
        ck_assert_int_eq(manager_configure(m, &c, &key), 0);
        ck_assert(!nvidia_probe_busy(m->nvidia));
        ck_assert_uint_eq(m->n_gpus, 0);
        ck_assert_int_eq(nvidia_probe_inventory(m->nvidia, true), 0);
        ck_assert(!nvidia_probe_busy(m->nvidia));
        for (int i = 0; i < 5; i++)
                ck_assert_int_ge(sd_event_run(m->event, 50000), 0);
        ck_assert_uint_eq(m->n_gpus, 0);
}
END_TEST

static bool printable_ascii(const char *s) {
        for (; *s; s++)
                if ((unsigned char) *s < 0x20 || (unsigned char) *s >= 0x7f)
                        return false;
        return true;
}

START_TEST(test_hostile_output) {
        _cleanup_(manager_freep) Manager *m = NULL;
        char script[4200];
        const char *msg = NULL;
        Config c = {};
        const char *key = NULL;
        uint64_t n;
        int w;
        FILE *f;

        /* An nvidia-smi printing bytes that are not UTF-8 and escapes: whatever ends up
         * in HealthReason or an error reply must stay a valid D-Bus string. */
        m = start("l40s", false, 100, &w);
        ck_assert_int_eq(w, 0);
        ck_assert_uint_eq(m->n_gpus, 1);
        (void) snprintf(script, sizeof(script), "%s/hostile-smi", workdir);
        f = fopen(script, "we");
        ck_assert_ptr_nonnull(f);
        fputs("#!/bin/sh\nprintf 'Failed to initialize NVML: \\377\\376\\033[31m\\300\\257 x\\n'\nexit 0\n", f);
        ck_assert_int_eq(fclose(f), 0);
        ck_assert_int_eq(chmod(script, 0755), 0);

        c.nvidia_enabled = true;
        c.nvidia_smi_path = script;
        c.nvidia_fail_on_init_error = false;
        c.nvidia_health_interval_ms = 100;
        c.nvidia_health_recover_polls = 1;
        ck_assert_int_eq(manager_configure(m, &c, &key), 0);
        n = nvidia_probe_n_polls(m->nvidia);
        run_until_polls(m, n + 1);
        ck_assert_str_eq(m->gpus[0]->health, "Unhealthy");
        ck_assert_ptr_nonnull(startswith(m->gpus[0]->health_reason, "nvidia-smi-failed: "));
        ck_assert_msg(printable_ascii(m->gpus[0]->health_reason), "reason '%s'", m->gpus[0]->health_reason);

        ck_assert_int_eq(nvidia_probe_inventory(m->nvidia, true), 0);
        ck_assert_int_eq(nvidia_probe_wait_initial(m->nvidia), 0);
        ck_assert_int_lt(nvidia_probe_last_error(m->nvidia, &msg), 0);
        ck_assert_msg(printable_ascii(msg), "message '%s'", msg);
        ck_assert_ptr_nonnull(strstr(msg, "NVML"));
        ck_assert_uint_eq(m->n_gpus, 1);        /* a failed read removes nothing */
}
END_TEST

static Gpu *gpu_by_index(Manager *m, int index) {
        for (size_t i = 0; i < m->n_gpus; i++)
                if (m->gpus[i]->index == index)
                        return m->gpus[i];
        return NULL;
}

START_TEST(test_health_lost_and_recovery) {
        _cleanup_(manager_freep) Manager *m = NULL;
        uint64_t n;
        int w;

        m = start("8xh100-nvlink", true, 100, &w);
        ck_assert_int_eq(w, 0);
        ck_assert_uint_eq(m->n_gpus, 8);

        /* GPU 3 lost from the next poll on. */
        setenv("KGPU_FAKE_NVIDIA_LOST", "3", 1);
        n = nvidia_probe_n_polls(m->nvidia);
        run_until_polls(m, n + 1);
        ck_assert_str_eq(gpu_by_index(m, 3)->health, "Unhealthy");
        ck_assert_str_eq(gpu_by_index(m, 3)->health_reason, "gpu-lost");
        for (int i = 0; i < 8; i++)
                if (i != 3)
                        ck_assert_str_eq(gpu_by_index(m, i)->health, "Healthy");

        /* Back: one good poll is not enough (recover after 2). */
        unsetenv("KGPU_FAKE_NVIDIA_LOST");
        n = nvidia_probe_n_polls(m->nvidia);
        run_until_polls(m, n + 1);
        ck_assert_str_eq(gpu_by_index(m, 3)->health, "Unhealthy");
        run_until_polls(m, n + 2);
        ck_assert_str_eq(gpu_by_index(m, 3)->health, "Healthy");
        ck_assert_str_eq(gpu_by_index(m, 3)->health_reason, "");

        /* The whole poll failing: every GPU unhealthy with nvidia-smi's message. */
        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "no-driver", 1);
        n = nvidia_probe_n_polls(m->nvidia);
        run_until_polls(m, n + 1);
        for (int i = 0; i < 8; i++) {
                ck_assert_str_eq(gpu_by_index(m, i)->health, "Unhealthy");
                ck_assert_ptr_nonnull(startswith(gpu_by_index(m, i)->health_reason, "nvidia-smi-failed: "));
                ck_assert_ptr_nonnull(strstr(gpu_by_index(m, i)->health_reason, "NVIDIA driver"));
        }
        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "8xh100-nvlink", 1);
        n = nvidia_probe_n_polls(m->nvidia);
        run_until_polls(m, n + 2);
        for (int i = 0; i < 8; i++)
                ck_assert_str_eq(gpu_by_index(m, i)->health, "Healthy");
}
END_TEST

/* Health polls the fake nvidia-smi logged so far (it logs before its delay). */
static unsigned count_polls(void) {
        char path[4200], line[8192];
        unsigned c = 0;
        FILE *f;

        (void) snprintf(path, sizeof(path), "%s/fake-nvidia.log", workdir);
        f = fopen(path, "re");
        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f))
                if (strstr(line, "--query-gpu=") && !strstr(line, "compute_cap"))
                        c++;
        fclose(f);
        return c;
}

START_TEST(test_health_timeout) {
        _cleanup_(manager_freep) Manager *m = NULL;
        unsigned before;
        uint64_t n;
        int w;

        m = start("l40s", true, 100, &w);
        ck_assert_int_eq(w, 0);
        /* The fake answers after 3 s; a poll gives up after max(interval, 1 s). */
        setenv("KGPU_FAKE_NVIDIA_DELAY", "3", 1);
        n = nvidia_probe_n_polls(m->nvidia);
        before = count_polls();
        run_until_polls(m, n + 1);
        unsetenv("KGPU_FAKE_NVIDIA_DELAY");
        ck_assert_str_eq(m->gpus[0]->health, "Unhealthy");
        ck_assert_str_eq(m->gpus[0]->health_reason, "nvidia-smi-failed: timed out");
        /* About ten ticks passed while it ran: they were skipped, no second poll. */
        ck_assert_uint_eq(count_polls(), before + 1);
}
END_TEST

START_TEST(test_rescan_mig_layout_change) {
        _cleanup_(manager_freep) Manager *m = NULL;
        Gpu *g;
        int w;

        m = start("h100-mig-mixed", true, 0, &w);
        ck_assert_int_eq(w, 0);
        ck_assert_uint_eq(m->n_gpus, 1);
        g = m->gpus[0];
        ck_assert_str_eq(g->id, "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4");
        ck_assert_uint_eq(g->n_mig_devices, 4);
        ck_assert_str_eq(g->mig_devices[0].profile, "3g.40gb");
        ck_assert_str_eq(g->mig_devices[0].uuid, "MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde");
        ck_assert_uint_eq(g->mig_devices[0].memory_bytes, UINT64_C(40448) << 20); /* the table's cell */
        ck_assert_uint_eq(g->mig_devices[0].gi_id, 2);          /* no -q: from the table's MIG box */

        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "h100-mig-7x1g", 1);
        ck_assert_int_eq(nvidia_probe_inventory(m->nvidia, true), 0);
        ck_assert_int_eq(nvidia_probe_wait_initial(m->nvidia), 0);
        ck_assert_uint_eq(m->n_gpus, 1);
        ck_assert_ptr_eq(m->gpus[0], g);        /* the same object, updated in place */
        ck_assert_uint_eq(g->n_mig_devices, 7);
        for (size_t i = 0; i < 7; i++) {
                ck_assert_uint_eq(g->mig_devices[i].device_index, i);
                ck_assert_str_eq(g->mig_devices[i].profile, "1g.10gb");
                ck_assert_uint_eq(g->mig_devices[i].gi_id, 7 + i);
        }
        ck_assert_str_eq(g->mig_devices[6].uuid, "MIG-981c86e9-3607-57d7-9426-295347e4b925");
}
END_TEST

static char *read_text(const char *path) {
        char *buf = calloc(1, 65536);
        FILE *f = fopen(path, "re");
        size_t n;

        if (!f) {
                free(buf);
                return NULL;
        }
        n = fread(buf, 1, 65535, f);
        buf[n] = 0;
        fclose(f);
        return buf;
}

START_TEST(test_cdi) {
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_free_ char *text = NULL;
        char path[4200];
        int w;

        m = start("h100-mig", true, 0, &w);
        ck_assert_int_eq(w, 0);
        m->publishing = true;   /* as manager_start() once the bus name is ours */
        ck_assert_int_eq(manager_write_outputs(m), 0);
        (void) snprintf(path, sizeof(path), "%s/cdi/kgpu-nvidia.yaml", workdir);
        text = read_text(path);
        ck_assert_ptr_nonnull(text);
        ck_assert_str_eq(text,
                "# Written by kgpu-probed: the node's NVIDIA GPUs. Do not edit.\n"
                "cdiVersion: \"0.5.0\"\n"
                "kind: \"nvidia.com/gpu\"\n"
                "containerEdits:\n"
                "  env:\n"
                "  - \"NVIDIA_VISIBLE_DEVICES=void\"\n"
                "  deviceNodes:\n"
                "  - path: \"/dev/nvidiactl\"\n"
                "  - path: \"/dev/nvidia-uvm\"\n"
                "  - path: \"/dev/nvidia-uvm-tools\"\n"
                "devices:\n"
                "- name: \"0\"\n"
                "  containerEdits:\n"
                "    deviceNodes:\n"
                "    - path: \"/dev/nvidia0\"\n"
                "- name: \"GPU-00000000-0000-0000-0000-000000000000\"\n"
                "  containerEdits:\n"
                "    deviceNodes:\n"
                "    - path: \"/dev/nvidia0\"\n"
                "- name: \"0:0\"\n"
                "  containerEdits:\n"
                "    deviceNodes:\n"
                "    - path: \"/dev/nvidia0\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap21\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap22\"\n"
                "- name: \"MIG-00000000-0000-0000-0000-000000000000\"\n"
                "  containerEdits:\n"
                "    deviceNodes:\n"
                "    - path: \"/dev/nvidia0\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap21\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap22\"\n"
                "- name: \"0:1\"\n"
                "  containerEdits:\n"
                "    deviceNodes:\n"
                "    - path: \"/dev/nvidia0\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap30\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap31\"\n"
                "- name: \"MIG-00000001-0000-0000-0000-000000000001\"\n"
                "  containerEdits:\n"
                "    deviceNodes:\n"
                "    - path: \"/dev/nvidia0\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap30\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap31\"\n"
                "- name: \"0:2\"\n"
                "  containerEdits:\n"
                "    deviceNodes:\n"
                "    - path: \"/dev/nvidia0\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap84\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap85\"\n"
                "- name: \"MIG-00000002-0000-0000-0000-000000000002\"\n"
                "  containerEdits:\n"
                "    deviceNodes:\n"
                "    - path: \"/dev/nvidia0\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap84\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap85\"\n"
                "- name: \"0:3\"\n"
                "  containerEdits:\n"
                "    deviceNodes:\n"
                "    - path: \"/dev/nvidia0\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap93\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap94\"\n"
                "- name: \"MIG-00000003-0000-0000-0000-000000000003\"\n"
                "  containerEdits:\n"
                "    deviceNodes:\n"
                "    - path: \"/dev/nvidia0\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap93\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap94\"\n");

        /* No NVIDIA GPU left (nvidia-smi lists none): the GPU leaves, the file goes. */
        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "no-devices", 1);
        ck_assert_int_eq(nvidia_probe_inventory(m->nvidia, true), 0);
        ck_assert_int_eq(nvidia_probe_wait_initial(m->nvidia), 0);
        ck_assert_uint_eq(m->n_gpus, 0);
        ck_assert_int_eq(manager_write_outputs(m), 0);
        ck_assert_int_eq(access(path, F_OK), -1);
        ck_assert_int_eq(errno, ENOENT);
}
END_TEST

START_TEST(test_mig_minor_lookup) {
        uint32_t v = 0;

        ck_assert_int_eq(nvidia_mig_minor_lookup(mig_minors, 0, 2, -1, &v), 0);
        ck_assert_uint_eq(v, 21);
        ck_assert_int_eq(nvidia_mig_minor_lookup(mig_minors, 0, 2, 0, &v), 0);
        ck_assert_uint_eq(v, 22);
        /* "gpu0/gi1" must not match "gpu0/gi10". */
        ck_assert_int_eq(nvidia_mig_minor_lookup(mig_minors, 0, 1, -1, &v), -ENOENT);
        ck_assert_int_eq(nvidia_mig_minor_lookup(mig_minors, 1, 2, -1, &v), -ENOENT);
        ck_assert_int_eq(nvidia_mig_minor_lookup("gpu0/gi2/access x\n", 0, 2, -1, &v), -EBADMSG);
        ck_assert_int_eq(nvidia_mig_minor_lookup(NULL, 0, 2, -1, &v), -ENOENT);
}
END_TEST

static void setup(void) {
        /* Also when Check does not fork (CK_FORK=no, for LeakSanitizer). */
        strcpy(workdir, "/tmp/test-nvidia-inventory.XXXXXX");
        unsetenv("KGPU_FAKE_NVIDIA_LOST");
        unsetenv("KGPU_FAKE_NVIDIA_DELAY");
}

static void teardown(void) {
        char cmd[4200];

        if (strstr(workdir, "XXXXXX"))
                return;
        (void) snprintf(cmd, sizeof(cmd), "rm -rf '%s'", workdir);
        (void) system(cmd);
}

static Suite *suite(void) {
        Suite *s = suite_create("nvidia-inventory");
        TCase *tc = tcase_create("core");

        tcase_set_timeout(tc, 60);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_h100_mig);
        tcase_add_test(tc, test_l40s);
        tcase_add_test(tc, test_8xh100_nvlink);
        tcase_add_test(tc, test_no_compute_cap);
        tcase_add_test(tc, test_no_devices);
        tcase_add_test(tc, test_no_driver_fail_on_init);
        tcase_add_test(tc, test_no_driver_no_fail);
        tcase_add_test(tc, test_no_tool);
        tcase_add_test(tc, test_switched_off);
        tcase_add_test(tc, test_hostile_output);
        tcase_add_test(tc, test_health_lost_and_recovery);
        tcase_add_test(tc, test_health_timeout);
        tcase_add_test(tc, test_rescan_mig_layout_change);
        tcase_add_test(tc, test_cdi);
        tcase_add_test(tc, test_mig_minor_lookup);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(suite)
