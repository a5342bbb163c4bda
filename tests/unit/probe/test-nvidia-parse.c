/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-nvidia-parse.c — the parser extensions the probe's NVIDIA inventory reads: the
 * GPU blocks of `nvidia-smi -q` with their Minor Number, the MIG devices' memory in -q,
 * the compute_cap query field; and nvidia_build_gpus() taking /dev/nvidiaN from the
 * minor (not the index) — on the recordings of tests/data/nvidia and hostile inputs.
 */

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/nvidia.h"
#include "daemons/probe/nvidia-smi.h"
#include "tests/unit/test-main.h"

/* A recording without its two header lines ("# source", "# command"). */
static char *recording(const char *name, size_t *ret_len) {
        char path[4096], *buf, *p;
        const char *src = getenv("KGPU_SOURCE_ROOT");
        size_t n;
        FILE *f;

        ck_assert_ptr_nonnull(src);
        (void) snprintf(path, sizeof(path), "%s/tests/data/nvidia/%s", src, name);
        f = fopen(path, "re");
        ck_assert_ptr_nonnull(f);
        buf = calloc(1, 1 << 20);
        ck_assert_ptr_nonnull(buf);
        n = fread(buf, 1, (1 << 20) - 1, f);
        fclose(f);
        p = buf;
        for (int k = 0; k < 2; k++) {
                p = strchr(p, '\n');
                ck_assert_ptr_nonnull(p);
                p++;
        }
        n -= (size_t) (p - buf);
        memmove(buf, p, n + 1);
        *ret_len = n;
        return buf;
}

START_TEST(test_q_gpus_recordings) {
        _cleanup_free_ NvidiaQGpu *q = NULL;
        _cleanup_free_ char *t = NULL;
        size_t len, n = 0;

        t = recording("q-8xV100-SXM2-16GB-1.txt", &len);
        ck_assert_int_eq(nvidia_smi_parse_q_gpus(t, len, &q, &n, NULL), 0);
        ck_assert_uint_eq(n, 1);
        ck_assert_str_eq(q[0].pci_address, "0000:0a:00.0");
        ck_assert_int_eq(q[0].minor_number, 2);
        q = mfree(q);
        t = mfree(t);

        t = recording("q-RTX2080S-win-1.txt", &len);
        ck_assert_int_eq(nvidia_smi_parse_q_gpus(t, len, &q, &n, NULL), 0);
        ck_assert_uint_eq(n, 1);
        ck_assert_str_eq(q[0].pci_address, "0000:0c:00.0");
        ck_assert_int_eq(q[0].minor_number, -1);        /* N/A on Windows */
        q = mfree(q);
        t = mfree(t);

        t = recording("q-H100-MIG-1.txt", &len);
        ck_assert_int_eq(nvidia_smi_parse_q_gpus(t, len, &q, &n, NULL), 0);
        ck_assert_uint_eq(n, 1);
        ck_assert_str_eq(q[0].pci_address, "0000:00:09.0");
        ck_assert_int_eq(q[0].minor_number, 0);
}
END_TEST

START_TEST(test_q_mig_memory) {
        _cleanup_free_ NvidiaQMigDevice *d = NULL;
        _cleanup_free_ char *t = NULL;
        size_t len, n = 0;

        t = recording("q-H100-MIG-1.txt", &len);
        ck_assert_int_eq(nvidia_smi_parse_q_mig_devices(t, len, &d, &n, NULL), 0);
        ck_assert_uint_eq(n, 4);
        /* "Shared FB Memory Usage" Total of each MIG device, not its BAR1 Total. */
        ck_assert_uint_eq(d[0].memory_mib, 40448);
        ck_assert_uint_eq(d[1].memory_mib, 20096);
        ck_assert_uint_eq(d[2].memory_mib, 9984);
        ck_assert_uint_eq(d[3].memory_mib, 9984);
        ck_assert_uint_eq(d[3].gi_id, 10);
}
END_TEST

START_TEST(test_q_gpus_hostile) {
        static const char *const bad[] = {
                "GPU 00000000:00:09.0\n    Minor Number : 256\n",
                "GPU 00000000:00:09.0\n    Minor Number : -1\n",
                "GPU 00000000:00:09.0\n    Minor Number : 0x1\n",
                "GPU zz:00:09.0\n    Minor Number : 1\n",
                "GPU 00000000:00:09.0\nGPU 00000000:00:09.0\n",
                "hello\n",
                "No devices were found\n",
        };
        _cleanup_free_ NvidiaQGpu *q = NULL;
        size_t n = 0;

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *err = NULL;

                ck_assert_int_lt(nvidia_smi_parse_q_gpus(bad[i], strlen(bad[i]), &q, &n, &err), 0);
                ck_assert_ptr_null(q);
        }
        /* Minor Number outside the GPU block's top level (indented deeper) is not it. */
        {
                static const char deep[] = "GPU 00000000:00:09.0\n        Minor Number : 5\n";

                ck_assert_int_eq(nvidia_smi_parse_q_gpus(deep, strlen(deep), &q, &n, NULL), 0);
        }
        ck_assert_int_eq(q[0].minor_number, -1);
}
END_TEST

START_TEST(test_compute_cap) {
        static const char good[] = "0, GPU-00000000-0000-0000-0000-000000000000, 9.0\n";
        static const char *const bad[] = {
                "0, GPU-00000000-0000-0000-0000-000000000000, 9\n",
                "0, GPU-00000000-0000-0000-0000-000000000000, 9.0.1\n",
                "0, GPU-00000000-0000-0000-0000-000000000000, .9\n",
                "0, GPU-00000000-0000-0000-0000-000000000000, x.y\n",
                "0, GPU-00000000-0000-0000-0000-000000000000, 123.45\n",
        };
        _cleanup_free_ NvidiaGpu *g = NULL;
        size_t n = 0;

        ck_assert_int_eq(nvidia_smi_parse_query_gpu(good, strlen(good), "index,uuid,compute_cap", &g, &n, NULL), 0);
        ck_assert_uint_eq(n, 1);
        ck_assert_str_eq(g[0].compute_cap, "9.0");
        g = mfree(g);
        ck_assert_int_eq(nvidia_smi_parse_query_gpu("0, [N/A]\n", 9, "index,compute_cap", &g, &n, NULL), 0);
        ck_assert_str_eq(g[0].compute_cap, "");
        g = mfree(g);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *err = NULL;

                ck_assert_int_lt(nvidia_smi_parse_query_gpu(bad[i], strlen(bad[i]), "index,uuid,compute_cap",
                                                            &g, &n, &err), 0);
        }
}
END_TEST

START_TEST(test_build_minor_not_index) {
        NvidiaGpu row = { .index = 0, .uuid = "GPU-00000000-0000-0000-0000-000000000000",
                          .name = "Tesla V100-SXM2-16GB", .memory_mib = 16160, .pci_address = "0000:0a:00.0",
                          .pci_device_id = 0x1db110de, .compute_mode = NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS,
                          .mig_mode = NVIDIA_MIG_MODE_UNSUPPORTED, .driver_version = "470.57.02",
                          .compute_cap = "7.0" };
        NvidiaQGpu q = { .pci_address = "0000:0a:00.0", .minor_number = 2 };
        NvidiaVersions v = { .driver = "470.57.02", .cuda = "11.4" };
        Gpu **l = NULL;
        size_t n = 0;

        ck_assert_int_eq(nvidia_build_gpus(&row, 1, NULL, 0, NULL, 0, &q, 1, NULL, &v, NULL, &l, &n), 0);
        ck_assert_uint_eq(n, 1);
        ck_assert_str_eq(l[0]->device_nodes[0], "/dev/nvidia2");
        ck_assert_str_eq(l[0]->compute_mode, "Exclusive_Process");
        ck_assert_str_eq(l[0]->mig_mode, "");
        ck_assert_str_eq(l[0]->cuda_version, "11.4");
        ck_assert_uint_eq(l[0]->device_id, 0x1db1);
        ck_assert_int_eq(l[0]->numa_node, -1);          /* no topology */
        ck_assert_uint_eq(l[0]->n_links, 0);
        gpu_free(l[0]);
        free(l);

        /* A name that is not UTF-8 (sd-bus would refuse it): bad bytes become '?'. */
        strcpy(row.name, "\xff\xfeTesla \xc3\xa9 \xc0\xaf \xed\xa0\x80 \xe2\x82");
        ck_assert_int_eq(nvidia_build_gpus(&row, 1, NULL, 0, NULL, 0, &q, 1, NULL, &v, NULL, &l, &n), 0);
        ck_assert_uint_eq(n, 1);
        ck_assert_str_eq(l[0]->product, "??Tesla \xc3\xa9 ?? ??? ??");
        gpu_free(l[0]);
        free(l);

        /* A row without a valid UUID is skipped, not exported under a bad id. */
        strcpy(row.uuid, "");
        ck_assert_int_eq(nvidia_build_gpus(&row, 1, NULL, 0, NULL, 0, &q, 1, NULL, &v, NULL, &l, &n), 0);
        ck_assert_uint_eq(n, 0);
        free(l);
}
END_TEST

/* ---- the plain table's MIG devices box ---- */

typedef struct SummaryCase {
        const char *file;
        size_t n;
        const char *pci;                /* of every device */
        const char *ids;                /* "<dev>:<gi>/<ci>=<MiB>" joined by ' ' */
} SummaryCase;

static const SummaryCase summary_cases[] = {
        { "summary-8xB200-1.txt", 0, NULL, "" },
        { "summary-GRIDK520-1.txt", 0, NULL, "" },
        { "summary-GTX1080Ti-1.txt", 0, NULL, "" },
        { "summary-L40S-1.txt", 0, NULL, "" },
        { "summary-RTX2080S-win-1.txt", 0, NULL, "" },
        { "summary-H100-MIG-1.txt", 4, "0000:00:09.0", "0:2/0=40448 1:3/0=20096 2:9/0=9984 3:10/0=9984" },
        { "summary-H200-MIG-1.txt", 5, "0000:83:00.0",
          "0:2/0=71424 1:2/1=71424 2:3/0=33280 3:9/0=16384 4:10/0=16384" },
        { "summary-H100NVL-MIG-1.txt", 7, "0000:98:00.0",
          "0:7/0=10880 1:8/0=10880 2:9/0=10880 3:10/0=10880 4:11/0=10880 5:12/0=10880 6:13/0=10880" },
        /* Two compute instances of one GPU instance: the second row's memory cell is
         * the first's (spanning both rows), so unknown here. */
        { "summary-A100-80GB-MIG-2.txt", 2, "0001:00:00.0", "0:1/0=40192 1:1/1=0" },
};

START_TEST(test_summary_mig_recordings) {
        const SummaryCase *c = &summary_cases[_i];
        _cleanup_free_ NvidiaQMigDevice *d = NULL;
        _cleanup_free_ char *t = NULL, *err = NULL, *got = NULL;
        size_t len, n = 99;

        t = recording(c->file, &len);
        ck_assert_msg(nvidia_smi_parse_summary_mig_devices(t, len, &d, &n, &err) == 0, "%s: %s", c->file,
                      err ?: "");
        ck_assert_uint_eq(n, c->n);
        got = strdup("");
        for (size_t i = 0; i < n; i++) {
                char *x = NULL;

                ck_assert_str_eq(d[i].pci_address, c->pci);
                ck_assert_int_ge(asprintf(&x, "%s%s%u:%u/%u=%" PRIu64, got, i ? " " : "", d[i].device_index,
                                          d[i].gi_id, d[i].ci_id, d[i].memory_mib), 0);
                free(got);
                got = x;
        }
        ck_assert_str_eq(got, c->ids);
}
END_TEST

START_TEST(test_summary_mig_hostile) {
        _cleanup_free_ char *t = NULL;
        size_t len;
        static const char *const bad[] = {
                /* a MIG row of a GPU the GPU box lacks */
                "| GPU  Name | Bus-Id  Disp.A |\n|   0  X  | 00000000:01:00.0 Off |\n| MIG devices: |\n"
                "|  1    2   0   0  |  1MiB / 2MiB |\n",
                /* the same device twice */
                "| GPU  Name | Bus-Id  Disp.A |\n|   0  X  | 00000000:01:00.0 Off |\n| MIG devices: |\n"
                "|  0    2   0   0  |  1MiB / 2MiB |\n|  0    3   0   0  |  1MiB / 2MiB |\n",
                /* a row starting with a number that is not four numbers */
                "| GPU  Name | Bus-Id  Disp.A |\n|   0  X  | 00000000:01:00.0 Off |\n| MIG devices: |\n"
                "|  0    x   0   0  |  1MiB / 2MiB |\n",
                /* no GPU box at all */
                "| MIG devices: |\n|  0    2   0   0  |  1MiB / 2MiB |\n",
                "",
        };

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ NvidiaQMigDevice *d = NULL;
                _cleanup_free_ char *err = NULL;
                size_t n = 0;

                ck_assert_msg(nvidia_smi_parse_summary_mig_devices(bad[i], strlen(bad[i]), &d, &n, &err) == -EBADMSG,
                              "case %zu", i);
                ck_assert_ptr_nonnull(err);
                ck_assert_ptr_null(d);
        }
        /* A recognised error output is its errno, not garbage. */
        t = recording("error-GPU-lost-1.txt", &len);
        ck_assert_int_eq(nvidia_smi_parse_summary_mig_devices(t, len, NULL, NULL, NULL), -EIO);
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("nvidia-parse");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_q_gpus_recordings);
        tcase_add_test(tc, test_q_mig_memory);
        tcase_add_test(tc, test_q_gpus_hostile);
        tcase_add_test(tc, test_compute_cap);
        tcase_add_test(tc, test_build_minor_not_index);
        tcase_add_loop_test(tc, test_summary_mig_recordings, 0, ELEMENTSOF(summary_cases));
        tcase_add_test(tc, test_summary_mig_hostile);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(suite)
