/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-nvidia-findings.c — the probe's NVIDIA inventory (daemons/probe/nvidia.c) against
 * the fake nvidia-smi replaying recorded outputs that once went wrong: a GPU lost before
 * it was ever read (error-GPU-lost-1.txt; alone, or one of eight), MIG devices whose GPU
 * and compute instances only the plain table gives (summary-H200-MIG-1.txt, no -q), MIG
 * devices nothing places (no -q, no table; a mig-minors file without their nodes), and
 * output kgpu does not recognise (error-libnvidia-ml-1.txt).
 */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/util.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/nvidia.h"
#include "tests/unit/test-main.h"

static char workdir[] = "/tmp/test-nvidia-findings.XXXXXX";
static char smi[4096];

/* The driver's numbering: 3 + 9 per GPU instance (its access node, then ci0..ci7), 15
 * GPU instances per GPU. */
static uint32_t cap_minor(uint32_t gpu, uint32_t gi, int32_t ci) {
        return 3 + gpu * 15 * 9 + gi * 9 + (ci < 0 ? 0 : 1 + (uint32_t) ci);
}

/* mig-minors in the driver's format; skip_gi >= 0 leaves that GPU instance of GPU 0 out. */
static void write_mig_minors(int skip_gi) {
        char path[4200];
        FILE *f;

        (void) snprintf(path, sizeof(path), "%s/mig-minors", workdir);
        f = fopen(path, "we");
        ck_assert_ptr_nonnull(f);
        fputs("config 1\nmonitor 2\n", f);
        for (uint32_t g = 0; g < 2; g++)
                for (uint32_t gi = 0; gi < 15; gi++) {
                        if (g == 0 && (int) gi == skip_gi)
                                continue;
                        fprintf(f, "gpu%u/gi%u/access %u\n", g, gi, cap_minor(g, gi, -1));
                        for (int32_t ci = 0; ci < 8; ci++)
                                fprintf(f, "gpu%u/gi%u/ci%d/access %u\n", g, gi, ci, cap_minor(g, gi, ci));
                }
        ck_assert_int_eq(fclose(f), 0);
        setenv("KGPU_NVIDIA_CAPS_MIG_MINORS", path, 1);
}

static Manager *start(const char *scenario, bool fail_on_init, uint32_t interval_ms, int *ret_wait) {
        const char *src = getenv("KGPU_SOURCE_ROOT");
        Manager *m = NULL;
        Config c = {};
        const char *key = NULL;
        char path[4200], cdi[4200];

        ck_assert_ptr_nonnull(src);
        ck_assert_ptr_nonnull(mkdtemp(workdir));
        (void) snprintf(smi, sizeof(smi), "%s/tests/fake-nvidia/nvidia-smi", src);
        setenv("KGPU_FAKE_NVIDIA_SCENARIO", scenario, 1);
        (void) snprintf(path, sizeof(path), "%s/fake-nvidia.log", workdir);
        setenv("KGPU_FAKE_NVIDIA_LOG", path, 1);
        (void) snprintf(path, sizeof(path), "%s/fake-nvidia-state.json", workdir);
        setenv("KGPU_FAKE_NVIDIA_STATE", path, 1);
        write_mig_minors(-1);

        (void) snprintf(cdi, sizeof(cdi), "%s/cdi", workdir);
        c.nvidia_enabled = true;
        c.nvidia_smi_path = smi;
        c.nvidia_fail_on_init_error = fail_on_init;
        c.nvidia_health_interval_ms = interval_ms;
        c.nvidia_health_recover_polls = 1;
        c.cdi_spec_directory = cdi;
        ck_assert_int_eq(manager_new(&m), 0);
        ck_assert_int_eq(manager_configure(m, &c, &key), 0);
        ck_assert_int_eq(nvidia_probe_inventory(m->nvidia, true), 0);
        *ret_wait = nvidia_probe_wait_initial(m->nvidia);
        ck_assert(!nvidia_probe_busy(m->nvidia));
        return m;
}

static void rescan(Manager *m) {
        ck_assert_int_eq(nvidia_probe_inventory(m->nvidia, true), 0);
        (void) nvidia_probe_wait_initial(m->nvidia);
}

static char *read_text(const char *path) {
        char *buf = calloc(1, 65536);
        FILE *f = fopen(path, "re");
        size_t n;

        ck_assert_ptr_nonnull(buf);
        if (!f) {
                free(buf);
                return NULL;
        }
        n = fread(buf, 1, 65535, f);
        buf[n] = 0;
        fclose(f);
        return buf;
}

/* ---- a GPU lost before it was ever read ---- */

static void check_lost_gpu(Manager *m) {
        Gpu *g;

        ck_assert_uint_eq(m->n_gpus, 1);
        g = m->gpus[0];
        ck_assert_str_eq(g->id, "nvidia-pci-0000:02:00.0");
        ck_assert_str_eq(g->pci_address, "0000:02:00.0");
        ck_assert_str_eq(g->vendor, "nvidia");
        ck_assert_str_eq(g->uuid, "");
        ck_assert_int_eq(g->index, -1);
        ck_assert_str_eq(g->health, "Unhealthy");
        ck_assert_str_eq(g->health_reason, "gpu-lost");
        ck_assert_uint_eq(g->n_mig_devices, 0);
}

START_TEST(test_lost_at_start) {
        _cleanup_(manager_freep) Manager *m = NULL;
        const char *msg = NULL;
        Gpu *g;
        int w;

        /* failOnInitError false: the start goes on, the lost GPU is advertised Unhealthy
         * under an id made of its PCI address, and stays so through polls and rescans. */
        m = start("gpu-lost-at-start", false, 100, &w);
        ck_assert_int_eq(w, 0);
        check_lost_gpu(m);
        g = m->gpus[0];
        ck_assert_int_eq(nvidia_probe_last_error(m->nvidia, &msg), -EIO);
        ck_assert_ptr_nonnull(strstr(msg, "every NVIDIA GPU is lost"));
        ck_assert_ptr_nonnull(strstr(msg, "GPU is lost. Reboot the system"));

        for (uint64_t n = nvidia_probe_n_polls(m->nvidia) + 2; nvidia_probe_n_polls(m->nvidia) < n; )
                ck_assert_int_ge(sd_event_run(m->event, 100000), 0);
        rescan(m);
        check_lost_gpu(m);
        ck_assert_ptr_eq(m->gpus[0], g);

        /* It comes back (after the reboot nvidia-smi asks for): the placeholder goes, the
         * GPU is read under its UUID. */
        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "l40s", 1);
        rescan(m);
        ck_assert_int_eq(nvidia_probe_last_error(m->nvidia, NULL), 0);
        ck_assert_uint_eq(m->n_gpus, 1);
        ck_assert_str_eq(m->gpus[0]->id, "GPU-00000000-0000-0000-0000-000000000000");
        ck_assert_str_eq(m->gpus[0]->health, "Healthy");
}
END_TEST

START_TEST(test_lost_at_start_fail_on_init) {
        _cleanup_(manager_freep) Manager *m = NULL;
        const char *msg = NULL;
        int w;

        /* failOnInitError true: every GPU lost is an initialization failure. */
        m = start("gpu-lost-at-start", true, 0, &w);
        ck_assert_int_eq(w, -EIO);
        ck_assert_int_eq(nvidia_probe_last_error(m->nvidia, &msg), -EIO);
        ck_assert_ptr_nonnull(strstr(msg, "every NVIDIA GPU is lost"));
}
END_TEST

START_TEST(test_one_lost_at_start) {
        _cleanup_(manager_freep) Manager *m = NULL;
        const char *msg = NULL;
        Gpu *lost = NULL;
        size_t healthy = 0;
        int w;

        /* GPU 3 of eight lost before the first read (the fake's lost line names its bus
         * 00000000:5D:00.0): seven GPUs as usual, GPU 3 Unhealthy under its PCI id; no
         * initialization failure, even with failOnInitError. */
        setenv("KGPU_FAKE_NVIDIA_LOST", "3", 1);
        m = start("8xh100-nvlink", true, 0, &w);
        ck_assert_int_eq(w, 0);
        ck_assert_int_eq(nvidia_probe_last_error(m->nvidia, &msg), 0);
        ck_assert_uint_eq(m->n_gpus, 8);
        for (size_t i = 0; i < m->n_gpus; i++) {
                if (streq(m->gpus[i]->id, "nvidia-pci-0000:5d:00.0"))
                        lost = m->gpus[i];
                else if (streq(m->gpus[i]->health, "Healthy"))
                        healthy++;
        }
        ck_assert_ptr_nonnull(lost);
        ck_assert_str_eq(lost->health, "Unhealthy");
        ck_assert_str_eq(lost->health_reason, "gpu-lost");
        ck_assert_uint_eq(healthy, 7);
}
END_TEST

/* ---- MIG devices: GPU and compute instances without -q ---- */

static void check_caps(const GpuMigDevice *d, uint32_t gi, uint32_t ci) {
        char a[64], b[64];

        (void) snprintf(a, sizeof(a), "/dev/nvidia-caps/nvidia-cap%u", cap_minor(0, gi, -1));
        (void) snprintf(b, sizeof(b), "/dev/nvidia-caps/nvidia-cap%u", cap_minor(0, gi, (int32_t) ci));
        ck_assert_uint_eq(d->gi_id, gi);
        ck_assert_uint_eq(d->ci_id, ci);
        ck_assert_uint_eq(strv_length(d->device_nodes), 2);
        ck_assert_str_eq(d->device_nodes[0], a);
        ck_assert_str_eq(d->device_nodes[1], b);
}

START_TEST(test_lost_beside_mig_at_start) {
        _cleanup_(manager_freep) Manager *m = NULL;
        Gpu *mig = NULL, *lost = NULL;
        int w;

        /* GPU 1 of h100-mig-and-h100 lost before the first read: nvidia-smi -L prints its
         * lost line in place of its GPU line; GPU 0's MIG devices are still read. */
        setenv("KGPU_FAKE_NVIDIA_LOST", "1", 1);
        m = start("h100-mig-and-h100", true, 0, &w);
        ck_assert_int_eq(w, 0);
        ck_assert_uint_eq(m->n_gpus, 2);
        for (size_t i = 0; i < m->n_gpus; i++)
                if (streq(m->gpus[i]->id, "GPU-00000000-0000-0000-0000-000000000000"))
                        mig = m->gpus[i];
                else if (streq(m->gpus[i]->id, "nvidia-pci-0000:0a:00.0"))
                        lost = m->gpus[i];
        ck_assert_ptr_nonnull(mig);
        ck_assert_ptr_nonnull(lost);
        ck_assert_str_eq(lost->health, "Unhealthy");
        ck_assert_uint_eq(mig->n_mig_devices, 4);
        check_caps(&mig->mig_devices[3], 10, 0);
}
END_TEST

START_TEST(test_mig_ids_from_summary) {
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_free_ char *text = NULL;
        static const uint32_t gi[] = { 2, 2, 3, 9, 10 }, ci[] = { 0, 1, 0, 0, 0 };
        char path[4200], want[512];
        Gpu *g;
        int w;

        /* H200 with MIG, no -q answer: GI/CI from the plain table's MIG devices box. */
        m = start("h200-mig", true, 0, &w);
        ck_assert_int_eq(w, 0);
        ck_assert_uint_eq(m->n_gpus, 1);
        g = m->gpus[0];
        ck_assert_str_eq(g->pci_address, "0000:83:00.0");
        ck_assert_uint_eq(g->n_mig_devices, 5);
        for (size_t i = 0; i < 5; i++) {
                ck_assert_uint_eq(g->mig_devices[i].device_index, i);
                check_caps(&g->mig_devices[i], gi[i], ci[i]);
        }
        ck_assert_str_eq(g->mig_devices[1].profile, "2c.3g.71gb");
        ck_assert_uint_eq(g->mig_devices[1].memory_bytes, UINT64_C(71424) << 20);   /* the table's cell */
        ck_assert_uint_eq(g->mig_devices[4].memory_bytes, UINT64_C(16384) << 20);

        /* The CDI spec carries them: device 0:1 is GI 2 / CI 1. */
        m->publishing = true;
        ck_assert_int_eq(manager_write_outputs(m), 0);
        (void) snprintf(path, sizeof(path), "%s/cdi/kgpu-nvidia.yaml", workdir);
        text = read_text(path);
        ck_assert_ptr_nonnull(text);
        (void) snprintf(want, sizeof(want),
                        "- name: \"0:1\"\n"
                        "  containerEdits:\n"
                        "    deviceNodes:\n"
                        "    - path: \"/dev/nvidia0\"\n"
                        "    - path: \"/dev/nvidia-caps/nvidia-cap%u\"\n"
                        "    - path: \"/dev/nvidia-caps/nvidia-cap%u\"\n",
                        cap_minor(0, 2, -1), cap_minor(0, 2, 1));
        ck_assert_msg(strstr(text, want), "CDI spec lacks\n%s\nin\n%s", want, text);
}
END_TEST

START_TEST(test_mig_ids_unknown) {
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_free_ char *text = NULL;
        char path[4200];
        Gpu *g;
        int w;

        /* Neither -q nor the table answers: no MIG device can be placed, none is
         * published (the GPU itself is, MIG enabled). */
        m = start("h200-mig-no-ids", true, 0, &w);
        ck_assert_int_eq(w, 0);
        ck_assert_uint_eq(m->n_gpus, 1);
        g = m->gpus[0];
        ck_assert_str_eq(g->mig_mode, "Enabled");
        ck_assert_uint_eq(g->n_mig_devices, 0);
        m->publishing = true;
        ck_assert_int_eq(manager_write_outputs(m), 0);
        (void) snprintf(path, sizeof(path), "%s/cdi/kgpu-nvidia.yaml", workdir);
        text = read_text(path);
        ck_assert_ptr_nonnull(text);
        ck_assert_ptr_null(strstr(text, "0:0"));
        ck_assert_ptr_null(strstr(text, "MIG-"));
}
END_TEST

START_TEST(test_mig_caps_unknown) {
        _cleanup_(manager_freep) Manager *m = NULL;
        Gpu *g;
        int w;

        /* h100-mig (with -q), but the driver's mig-minors lacks GPU instance 10: MIG
         * device 3 (GI 10) has no capability node and is not published. */
        m = start("h100-mig", true, 0, &w);
        ck_assert_int_eq(w, 0);
        g = m->gpus[0];
        ck_assert_uint_eq(g->n_mig_devices, 4);
        write_mig_minors(10);
        rescan(m);
        ck_assert_ptr_eq(m->gpus[0], g);
        ck_assert_uint_eq(g->n_mig_devices, 3);
        for (size_t i = 0; i < 3; i++)
                ck_assert_uint_ne(g->mig_devices[i].gi_id, 10);
        check_caps(&g->mig_devices[2], 9, 0);
}
END_TEST

/* ---- output kgpu does not recognise ---- */

START_TEST(test_unrecognised_output) {
        _cleanup_(manager_freep) Manager *m = NULL;
        const char *msg = NULL;
        int w;

        /* The tool's own words and exit status, not only the parser's complaint. */
        m = start("no-nvml-library", true, 0, &w);
        ck_assert_int_lt(w, 0);
        ck_assert_int_lt(nvidia_probe_last_error(m->nvidia, &msg), 0);
        ck_assert_msg(startswith(msg, "unrecognised output (exit status 12): \"NVIDIA-SMI couldn't find "
                                      "libnvidia-ml.so library in your system. Please make sure"), "message '%s'", msg);
        /* The line break escaped, the quote cut at 200 bytes, the parser after it. */
        ck_assert_ptr_nonnull(strstr(msg, "present in your system.\\nPlease also try"));
        ck_assert_ptr_nonnull(strstr(msg, "...; parser: "));
        ck_assert_ptr_null(strchr(msg, '\n'));
}
END_TEST

START_TEST(test_unrecognised_output_health) {
        _cleanup_(manager_freep) Manager *m = NULL;
        const char *reason;
        uint64_t n;
        int w;

        /* A poll answered by it: HealthReason quotes it too, within the 256 bytes the
         * broker takes. */
        m = start("l40s", true, 100, &w);
        ck_assert_int_eq(w, 0);
        setenv("KGPU_FAKE_NVIDIA_SCENARIO", "no-nvml-library", 1);
        n = nvidia_probe_n_polls(m->nvidia) + 1;
        while (nvidia_probe_n_polls(m->nvidia) < n)
                ck_assert_int_ge(sd_event_run(m->event, 100000), 0);
        reason = m->gpus[0]->health_reason;
        ck_assert_str_eq(m->gpus[0]->health, "Unhealthy");
        ck_assert_msg(startswith(reason, "nvidia-smi-failed: unrecognised output (exit status 12): \"NVIDIA-SMI "
                                         "couldn't find libnvidia-ml.so"), "reason '%s'", reason);
        ck_assert_uint_le(strlen(reason), 255);
}
END_TEST

static void setup(void) {
        strcpy(workdir, "/tmp/test-nvidia-findings.XXXXXX");
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
        Suite *s = suite_create("nvidia-findings");
        TCase *tc = tcase_create("core");

        tcase_set_timeout(tc, 60);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_lost_at_start);
        tcase_add_test(tc, test_lost_at_start_fail_on_init);
        tcase_add_test(tc, test_one_lost_at_start);
        tcase_add_test(tc, test_lost_beside_mig_at_start);
        tcase_add_test(tc, test_mig_ids_from_summary);
        tcase_add_test(tc, test_mig_ids_unknown);
        tcase_add_test(tc, test_mig_caps_unknown);
        tcase_add_test(tc, test_unrecognised_output);
        tcase_add_test(tc, test_unrecognised_output_health);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(suite)
