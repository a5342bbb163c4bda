/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-nvidia-smi.c — the nvidia-smi / MPS output parsers (daemons/probe/nvidia-smi.c)
 * against every recording in tests/data/nvidia/ (real output; the expected values are
 * read off the recordings by hand), plus malformed and oversized inputs.
 */

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/nvidia-smi.h"
#include "tests/unit/test-main.h"

static const char *strempty(const char *s) {
        return s ?: "";
}

/* Recording: two "# " lines (source, command), then the raw output. */
typedef struct Rec {
        char *buf;
        const char *text;
        size_t len;
} Rec;

static Rec rec_load(const char *name) {
        const char *root = getenv("KGPU_SOURCE_ROOT");
        _cleanup_free_ char *path = NULL;
        Rec r = {};
        FILE *f;
        long sz;
        char *p;

        ck_assert_ptr_nonnull(root);
        ck_assert_int_ge(asprintf(&path, "%s/tests/data/nvidia/%s", root, name), 0);
        f = fopen(path, "rbe");
        ck_assert_msg(f, "cannot open %s", path);
        ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
        sz = ftell(f);
        ck_assert_int_ge(sz, 0);
        rewind(f);
        r.buf = malloc((size_t) sz + 1);
        ck_assert_ptr_nonnull(r.buf);
        ck_assert_uint_eq(fread(r.buf, 1, (size_t) sz, f), (size_t) sz);
        r.buf[sz] = 0;
        fclose(f);

        p = r.buf;
        for (int i = 0; i < 2; i++) {
                ck_assert_msg(p[0] == '#' && p[1] == ' ', "%s: line %d is not a '# ' note", name, i + 1);
                p = strchr(p, '\n');
                ck_assert_ptr_nonnull(p);
                p++;
        }
        r.text = p;
        r.len = (size_t) sz - (size_t) (p - r.buf);
        return r;
}

static void rec_done(Rec *r) {
        free(r->buf);
}

/* Files a test has checked; test_every_recording_checked compares with the directory. */
static const char *const checked[] = {
        "L-2xA100-SXM4-80GB-MIG-1.txt", "L-2xQuadroRTX4000-1.txt", "L-4xA100-SXM4-80GB-MIG-1.txt",
        "L-A100-80GB-PCIe-MIG-2.txt", "L-A100-SXM4-40GB-MIG-oldUUID-1.txt", "L-A100-SXM4-40GB-MIG-oldUUID-2.txt",
        "L-A30-MIG-1.txt", "L-GH200-MIG-1.txt", "L-H100-MIG-1.txt", "L-H100-MIG-2.txt", "L-H100-MIG-3.txt",
        "L-H200-MIG-1.txt", "L-L40S-1.txt", "L-P100-SXM2-1.txt", "L-RTX2080S-win-1.txt",
        "query-gpu-A100-SXM4-40GB-1.txt", "query-gpu-GTX1660SUPER-1.txt", "query-gpu-H100-1.txt",
        "query-gpu-H200-MIG-1.txt", "query-gpu-L40S-1.txt", "query-gpu-RTX2080S-win-1.txt",
        "query-gpu-RTXPRO6000-Blackwell-1.txt", "query-gpu-TeslaP100-1.txt", "query-gpu-V100-PCIe-32GB-1.txt",
        "topo-m-1xH100-MIG-1.txt", "topo-m-1xH200-1.txt", "topo-m-1xL40S-1.txt", "topo-m-1xRTX2080S-win-1.txt",
        "topo-m-2xGPU-NV12-10NIC-1.txt", "topo-m-2xGPU-NV2-1.txt", "topo-m-2xGPU-PHB-1.txt",
        "topo-m-5xRTX4090-mixedNUMA-1.txt", "topo-m-8xA100-1.txt", "topo-m-8xA100-40GB-12NIC-1.txt",
        "topo-m-8xGPU-NV8-9NIC-1.txt", "topo-m-8xH100-1.txt", "topo-m-8xH100-12NIC-1.txt", "topo-m-8xRTX4090-1.txt",
        "mig-lgi-A100-40GB-1.txt", "mig-lgi-A100-40GB-2.txt", "mig-lgi-A100-80GB-1.txt", "mig-lgi-A30-1.txt",
        "mig-lgi-RTXPRO6000-Blackwell-2.txt", "mig-lgip-A100-40GB-1.txt", "mig-lgip-A100-80GB-1.txt",
        "mig-lgip-A30-1.txt", "mig-lgip-GH200-1.txt", "mig-lci-H100-80GB-1.txt", "mig-lci-RTXPRO6000-Blackwell-1.txt",
        "error-A10-GPU-PV-VM-1.txt", "error-A30-MIG-1.txt", "error-RTX2080S-win-1.txt",
        "error-Slurm-node-no-GPU-allocated-2.txt", "error-unknown-GPU-2.txt", "error-unknown-GPU-3.txt",
        "error-unknown-GPU-7.txt", "mps-A100-Polaris-1.txt", "mps-H100-no-daemon-1.txt",
        "mps-H100-server-list-1.txt", "mps-H100-set-percentage-1.txt", "mps-H100-set-percentage-2.txt",
        "mps-H100-set-percentage-3.txt", "mps-H100-set-limit-1.txt", "mps-H100-get-limit-1.txt",
        "mps-H100-unknown-command-1.txt", "mps-H100-already-running-1.txt", "compute-mode-A100-80GB-MIG-1.txt",
        "compute-mode-unknown-GPU-VM-1.txt", "summary-8xB200-1.txt", "summary-GRIDK520-1.txt",
        "summary-GTX1080Ti-1.txt", "summary-H100-MIG-1.txt", "summary-L40S-1.txt", "summary-RTX2080S-win-1.txt",
        "q-8xV100-SXM2-16GB-1.txt", "q-A10-1.txt", "q-H100-MIG-1.txt", "q-H200-1.txt", "q-RTX2080S-win-1.txt",
        /* MIG devices of the summary tables: test-nvidia-parse.c (test_summary_mig_recordings) */
        "summary-H200-MIG-1.txt", "summary-H100NVL-MIG-1.txt", "summary-A100-80GB-MIG-2.txt",
        "error-GPU-lost-1.txt", "error-libnvidia-ml-1.txt",
};

START_TEST(test_every_recording_checked) {
        const char *root = getenv("KGPU_SOURCE_ROOT");
        _cleanup_free_ char *path = NULL;
        struct dirent *de;
        unsigned n = 0;
        DIR *d;

        ck_assert_ptr_nonnull(root);
        ck_assert_int_ge(asprintf(&path, "%s/tests/data/nvidia", root), 0);
        d = opendir(path);
        ck_assert_ptr_nonnull(d);
        while ((de = readdir(d))) {
                bool found = false;

                if (!strstr(de->d_name, ".txt") || streq(de->d_name, "README.txt"))
                        continue;
                for (size_t i = 0; i < ELEMENTSOF(checked); i++)
                        found = found || streq(checked[i], de->d_name);
                ck_assert_msg(found, "recording %s has no expected values in this test", de->d_name);
                n++;
        }
        closedir(d);
        ck_assert_uint_eq(n, ELEMENTSOF(checked));
}
END_TEST

/* ---- nvidia-smi -L ---- */

typedef struct ListCase {
        const char *file;
        size_t n_gpus, n_migs;
        const char *name0, *uuid0, *uuid_last;
        const char *profiles;   /* all MIG profiles joined by ',' */
        int32_t gi0, ci0;       /* of the first MIG device */
        uint32_t last_mig_gpu;
} ListCase;

static const ListCase list_cases[] = {
        { "L-2xA100-SXM4-80GB-MIG-1.txt", 2, 8, "NVIDIA A100-SXM4-80GB", "GPU-8e100991-ce97-6694-b8eb-b8b1ff5053af",
          "GPU-938c4705-98bf-1735-e98b-c2a5872a8022",
          "3g.40gb,2g.20gb,1g.10gb,1g.10gb,3g.40gb,2g.20gb,1g.10gb,1g.10gb", -1, -1, 1 },
        { "L-2xQuadroRTX4000-1.txt", 2, 0, "Quadro RTX 4000", "GPU-c7b57be0-94ff-d352-a59b-d0ee00aeed43",
          "GPU-d6de6afc-bdfe-75c4-5273-0544439153fc", "", 0, 0, 0 },
        { "L-4xA100-SXM4-80GB-MIG-1.txt", 4, 4, "NVIDIA A100-SXM4-80GB", "GPU-513536b6-7d19-9063-b049-1e69664bb298",
          "GPU-69ec2344-ebac-b028-f88f-452abb3d7f11", "1g.20gb,1g.20gb,1g.20gb,1g.20gb", -1, -1, 0 },
        { "L-A100-80GB-PCIe-MIG-2.txt", 1, 2, "NVIDIA A100 80GB PCIe", "GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39",
          "GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39", "3g.40gb,3g.40gb", -1, -1, 0 },
        { "L-A100-SXM4-40GB-MIG-oldUUID-1.txt", 1, 7, "A100-SXM4-40GB", "GPU-4200ccc0-2667-d4cb-9137-f932c716232a",
          "GPU-4200ccc0-2667-d4cb-9137-f932c716232a", "1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb", 7, 0, 0 },
        { "L-A100-SXM4-40GB-MIG-oldUUID-2.txt", 1, 3, "A100-SXM4-40GB", "GPU-4200ccc0-2667-d4cb-9137-f932c716232a",
          "GPU-4200ccc0-2667-d4cb-9137-f932c716232a", "3g.20gb,2g.10gb,1g.5gb", 2, 0, 0 },
        { "L-A30-MIG-1.txt", 1, 3, "NVIDIA A30", "GPU-1e44b340-5807-0dbe-62e6-343a6b8b8bcd",
          "GPU-1e44b340-5807-0dbe-62e6-343a6b8b8bcd", "2g.12gb,1g.6gb,1g.6gb", -1, -1, 0 },
        { "L-GH200-MIG-1.txt", 1, 4, "NVIDIA GH200 480GB", "GPU-42cb9eed-bcd8-7856-e232-d14e35c16632",
          "GPU-42cb9eed-bcd8-7856-e232-d14e35c16632", "1g.24gb,1g.24gb,1g.24gb,1g.12gb", -1, -1, 0 },
        { "L-H100-MIG-1.txt", 1, 4, "NVIDIA H100 80GB HBM3", "GPU-00000000-0000-0000-0000-000000000000",
          "GPU-00000000-0000-0000-0000-000000000000", "3g.40gb,2g.20gb,1g.10gb,1g.10gb", -1, -1, 0 },
        { "L-H100-MIG-2.txt", 1, 7, "NVIDIA H100 80GB HBM3", "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4",
          "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4", "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb",
          -1, -1, 0 },
        { "L-H100-MIG-3.txt", 1, 4, "NVIDIA H100 80GB HBM3", "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4",
          "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4", "3g.40gb,2g.20gb,1g.10gb,1g.10gb", -1, -1, 0 },
        { "L-H200-MIG-1.txt", 1, 5, "NVIDIA H200", "GPU-00000000-0000-0000-0000-000000000000",
          "GPU-00000000-0000-0000-0000-000000000000", "1c.3g.71gb,2c.3g.71gb,2g.35gb,1g.18gb,1g.18gb", -1, -1, 0 },
        { "L-L40S-1.txt", 1, 0, "NVIDIA L40S", "GPU-00000000-0000-0000-0000-000000000000",
          "GPU-00000000-0000-0000-0000-000000000000", "", 0, 0, 0 },
        { "L-P100-SXM2-1.txt", 1, 0, "Tesla P100-SXM2-16GB", "GPU-61ba3c7e-584a-7eb4-d993-2d0b0a43b24f",
          "GPU-61ba3c7e-584a-7eb4-d993-2d0b0a43b24f", "", 0, 0, 0 },
        { "L-RTX2080S-win-1.txt", 1, 0, "NVIDIA GeForce RTX 2080 SUPER", "GPU-00000000-0000-0000-0000-000000000000",
          "GPU-00000000-0000-0000-0000-000000000000", "", 0, 0, 0 },
};

START_TEST(test_list_recordings) {
        const ListCase *c = &list_cases[_i];
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        _cleanup_free_ NvidiaMigDevice *migs = NULL;
        _cleanup_free_ char *err = NULL, *joined = NULL;
        size_t n = 99, nm = 99, jl = 0;
        Rec r = rec_load(c->file);
        FILE *f;

        ck_assert_msg(nvidia_smi_parse_list(r.text, r.len, &gpus, &n, &migs, &nm, &err) == 0, "%s: %s", c->file,
                      strempty(err));
        ck_assert_uint_eq(n, c->n_gpus);
        ck_assert_uint_eq(nm, c->n_migs);
        ck_assert_str_eq(gpus[0].name, c->name0);
        ck_assert_str_eq(gpus[0].uuid, c->uuid0);
        ck_assert_str_eq(gpus[n - 1].uuid, c->uuid_last);
        for (size_t i = 0; i < n; i++)
                ck_assert_uint_eq(gpus[i].index, i);

        f = open_memstream(&joined, &jl);
        ck_assert_ptr_nonnull(f);
        for (size_t i = 0; i < nm; i++) {
                fprintf(f, "%s%s", i ? "," : "", migs[i].profile);
                ck_assert(nvidia_mig_uuid_is_valid(migs[i].uuid));
        }
        fclose(f);
        ck_assert_str_eq(joined, c->profiles);
        if (nm > 0) {
                ck_assert_int_eq(migs[0].gi_id, c->gi0);
                ck_assert_int_eq(migs[0].ci_id, c->ci0);
                ck_assert_uint_eq(migs[0].device_index, 0);
                ck_assert_uint_eq(migs[nm - 1].gpu_index, c->last_mig_gpu);
        } else
                ck_assert_ptr_null(migs);
        rec_done(&r);
}
END_TEST

/* ---- --query-gpu ---- */

typedef struct QueryCase {
        const char *file;
        const char *fields;     /* NULL: header line */
        const char *name, *uuid, *pci;
        uint64_t memory_mib;
        uint32_t device_id;
        NvidiaComputeMode cm;
        NvidiaMigMode mig;
        const char *driver;
} QueryCase;

static const QueryCase query_cases[] = {
        { "query-gpu-A100-SXM4-40GB-1.txt", "mig.mode.current", "", "", "", 0, 0, NVIDIA_COMPUTE_MODE_UNKNOWN,
          NVIDIA_MIG_MODE_ENABLED, "" },
        { "query-gpu-GTX1660SUPER-1.txt", NULL, "NVIDIA GeForce GTX 1660 SUPER",
          "GPU-43b14c17-b685-e8ad-ab90-abc0d70fca06", "", 6144, 0, NVIDIA_COMPUTE_MODE_UNKNOWN,
          NVIDIA_MIG_MODE_UNSUPPORTED, "591.86" },
        { "query-gpu-H100-1.txt", NULL, "NVIDIA H100 80GB HBM3", "GPU-00000000-0000-0000-0000-000000000000",
          "0000:00:09.0", 81559, 0x233010DE, NVIDIA_COMPUTE_MODE_DEFAULT, NVIDIA_MIG_MODE_DISABLED, "590.48.01" },
        { "query-gpu-H200-MIG-1.txt", NULL, "NVIDIA H200", "GPU-00000000-0000-0000-0000-000000000000",
          "0000:83:00.0", 143771, 0x233510DE, NVIDIA_COMPUTE_MODE_DEFAULT, NVIDIA_MIG_MODE_ENABLED, "590.48.01" },
        { "query-gpu-L40S-1.txt", NULL, "NVIDIA L40S", "GPU-00000000-0000-0000-0000-000000000000", "0000:01:00.0",
          46068, 0x26B910DE, NVIDIA_COMPUTE_MODE_DEFAULT, NVIDIA_MIG_MODE_UNSUPPORTED, "595.80" },
        { "query-gpu-RTX2080S-win-1.txt", NULL, "NVIDIA GeForce RTX 2080 SUPER",
          "GPU-00000000-0000-0000-0000-000000000000", "0000:0c:00.0", 8192, 0x1E8110DE, NVIDIA_COMPUTE_MODE_DEFAULT,
          NVIDIA_MIG_MODE_UNSUPPORTED, "610.62" },
        { "query-gpu-RTXPRO6000-Blackwell-1.txt", NULL, "", "", "", 0, 0, NVIDIA_COMPUTE_MODE_UNKNOWN,
          NVIDIA_MIG_MODE_DISABLED, "" },
        { "query-gpu-TeslaP100-1.txt", NULL, "Tesla P100-PCIE-16GB", "GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6", "",
          0, 0, NVIDIA_COMPUTE_MODE_UNKNOWN, NVIDIA_MIG_MODE_UNSUPPORTED, "" },
        { "query-gpu-V100-PCIe-32GB-1.txt", "name,memory.total,pci.device_id", "Tesla PG500-216", "", "", 32768,
          0x1DF010DE, NVIDIA_COMPUTE_MODE_UNKNOWN, NVIDIA_MIG_MODE_UNSUPPORTED, "" },
};

START_TEST(test_query_gpu_recordings) {
        const QueryCase *c = &query_cases[_i];
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        _cleanup_free_ char *err = NULL;
        size_t n = 0;
        Rec r = rec_load(c->file);

        ck_assert_msg(nvidia_smi_parse_query_gpu(r.text, r.len, c->fields, &gpus, &n, &err) == 0, "%s: %s",
                      c->file, strempty(err));
        ck_assert_uint_eq(n, 1);
        ck_assert_uint_eq(gpus[0].index, 0);
        ck_assert_str_eq(gpus[0].name, c->name);
        ck_assert_str_eq(gpus[0].uuid, c->uuid);
        ck_assert_str_eq(gpus[0].pci_address, c->pci);
        ck_assert_uint_eq(gpus[0].memory_mib, c->memory_mib);
        ck_assert_uint_eq(gpus[0].pci_device_id, c->device_id);
        ck_assert_int_eq(gpus[0].compute_mode, c->cm);
        ck_assert_int_eq(gpus[0].mig_mode, c->mig);
        ck_assert_str_eq(gpus[0].driver_version, c->driver);
        rec_done(&r);
}
END_TEST

START_TEST(test_query_gpu_probe_fields) {
        /* What the probe asks for, in the form of the 590 H100 capture. */
        static const char out[] =
                "0, GPU-8e100991-ce97-6694-b8eb-b8b1ff5053af, NVIDIA A100-SXM4-80GB, 81920, 00000000:07:00.0, "
                "0x20B210DE, Default, Enabled, 535.129.03\n"
                "1, GPU-938c4705-98bf-1735-e98b-c2a5872a8022, NVIDIA A100-SXM4-80GB, 81920, 00000009:01:00.0, "
                "0x20B210DE, Exclusive_Process, Disabled, 535.129.03\n";
        static const char lost[] =
                "0, GPU-8e100991-ce97-6694-b8eb-b8b1ff5053af, NVIDIA A100-SXM4-80GB, 81920, 00000000:07:00.0, "
                "0x20B210DE, Default, Enabled, 535.129.03\n"
                "Unable to determine the device handle for GPU0000:4F:00.0: Unknown Error\n";
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        _cleanup_free_ char *err = NULL;
        size_t n = 0;

        ck_assert_int_eq(nvidia_smi_parse_query_gpu(out, strlen(out), NVIDIA_SMI_QUERY_FIELDS, &gpus, &n, &err), 0);
        ck_assert_uint_eq(n, 2);
        ck_assert_str_eq(gpus[1].pci_address, "0009:01:00.0");
        ck_assert_int_eq(gpus[1].compute_mode, NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS);
        ck_assert_int_eq(gpus[1].mig_mode, NVIDIA_MIG_MODE_DISABLED);
        ck_assert_uint_eq(gpus[1].index, 1);
        ck_assert_uint_eq(gpus[0].memory_mib, 81920);

        ck_assert_int_eq(nvidia_smi_parse_query_gpu(lost, strlen(lost), NVIDIA_SMI_QUERY_FIELDS, &gpus, &n, &err),
                         -EIO);
        ck_assert_ptr_nonnull(strstr(err, "0000:4F:00.0"));
        ck_assert_uint_eq(n, 2);        /* untouched */
}
END_TEST

START_TEST(test_query_gpu_health) {
        static const char two_lost[] =
                "0, GPU-8e100991-ce97-6694-b8eb-b8b1ff5053af, NVIDIA A100-SXM4-80GB, 81920, 00000000:07:00.0, "
                "0x20B210DE, Default, Enabled, 535.129.03\n"
                "Unable to determine the device handle for GPU0000:4F:00.0: Unknown Error\n"
                "2, GPU-938c4705-98bf-1735-e98b-c2a5872a8022, NVIDIA A100-SXM4-80GB, 81920, 00000000:90:00.0, "
                "0x20B210DE, Default, Enabled, 535.129.03\n"
                "Unable to determine the device handle for GPU 0000:B7:00.0: GPU is lost.  Reboot the system to "
                "recover this GPU\n";
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        _cleanup_free_ NvidiaSmiError *lost = NULL;
        _cleanup_free_ char *err = NULL;
        size_t n = 0, nl = 0;
        Rec r;

        ck_assert_int_eq(nvidia_smi_parse_query_gpu_health(two_lost, strlen(two_lost), NVIDIA_SMI_QUERY_FIELDS,
                                                           &gpus, &n, &lost, &nl, &err), 0);
        ck_assert_uint_eq(n, 2);
        ck_assert_uint_eq(gpus[0].index, 0);
        ck_assert_uint_eq(gpus[1].index, 2);
        ck_assert_uint_eq(nl, 2);
        ck_assert_int_eq(lost[0].kind, NVIDIA_SMI_ERROR_GPU_LOST);
        ck_assert_str_eq(lost[0].pci_address, "0000:4f:00.0");
        ck_assert_str_eq(lost[1].pci_address, "0000:b7:00.0");
        gpus = mfree(gpus);
        lost = mfree(lost);

        /* Only a lost GPU: no rows, one lost. */
        r = rec_load("error-unknown-GPU-2.txt");
        ck_assert_int_eq(nvidia_smi_parse_query_gpu_health(r.text, r.len, NVIDIA_SMI_QUERY_FIELDS, &gpus, &n, &lost,
                                                           &nl, &err), 0);
        ck_assert_uint_eq(n, 0);
        ck_assert_uint_eq(nl, 1);
        ck_assert_str_eq(lost[0].pci_address, "0000:09:00.0");
        rec_done(&r);
        lost = mfree(lost);

        /* Other errors fail the whole answer. */
        r = rec_load("error-unknown-GPU-3.txt");
        ck_assert_int_eq(nvidia_smi_parse_query_gpu_health(r.text, r.len, NVIDIA_SMI_QUERY_FIELDS, &gpus, &n, &lost,
                                                           &nl, &err), -ENXIO);
        ck_assert_ptr_null(lost);
        rec_done(&r);
        ck_assert_int_eq(nvidia_smi_parse_query_gpu_health("", 0, NVIDIA_SMI_QUERY_FIELDS, &gpus, &n, &lost, &nl,
                                                           &err), -EBADMSG);
}
END_TEST

START_TEST(test_query_gpu_garbage) {
        static const struct {
                const char *text;
                int r;
                const char *msg;
        } bad[] = {
                { "", -EBADMSG, "no GPU rows" },
                { "x, y\n", -EBADMSG, "index: bad value 'x'" },
                { "0, , A\n", -EBADMSG, "3 values for 9 fields" },
                { "0, , A, 1, , , , , , \n", -EBADMSG, "more values than the 9 fields" },
                { "0, GPU-8e100991-ce97-6694-b8eb-b8b1ff5053af, A, lots, 0000:07:00.0, 0x1, Default, Enabled, 1\n",
                  -EBADMSG, "memory.total" },
                { "0, GPU-8e100991, A, 1, 0000:07:00.0, 0x1, Default, Enabled, 1\n", -EBADMSG, "uuid" },
                { "0, , A, 1, 0000:07:00.0, 0x1, Sometimes, Enabled, 1\n", -EBADMSG, "compute_mode" },
                { "0, , A, 1, 0000:07:00.0, 0x1, Default, Maybe, 1\n", -EBADMSG, "mig.mode.current" },
                { "0, , A, 1, 0000:07:00.9, 0x1, Default, Enabled, 1\n", -EBADMSG, "pci.bus_id" },
                { "0, , A, 1, 0000:07:00.0, 0x1, Default, Enabled, 1; rm -rf\n", -EBADMSG, "driver_version" },
                { "0, , A, 99999999999999999999, , , , , \n", -EBADMSG, "memory.total" },
                { "0, , A, 1, , , , , \n0, , B, 1, , , , , \n", -EBADMSG, "twice" },
                { "0, , A\x01, 1, , , , , \n", -EBADMSG, "control character" },
                { "0, , A, 1, , , , , \n\0", -EBADMSG, "NUL" },
                { "No devices were found\n", -ENODEV, "No devices were found" },
                { "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
                  "the latest NVIDIA driver is installed and running.\n", -ENXIO, "NVIDIA driver" },
        };
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        size_t n = 77;

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *err = NULL;
                size_t len = strlen(bad[i].text) + (strstr(bad[i].msg, "NUL") ? 1 : 0);

                ck_assert_msg(nvidia_smi_parse_query_gpu(bad[i].text, len, NVIDIA_SMI_QUERY_FIELDS, &gpus, &n,
                                                         &err) == bad[i].r, "case %zu", i);
                ck_assert_ptr_nonnull(err);
                ck_assert_msg(strstr(err, bad[i].msg), "case %zu: '%s' lacks '%s'", i, err, bad[i].msg);
        }
        ck_assert_ptr_null(gpus);
        ck_assert_uint_eq(n, 77);
}
END_TEST

START_TEST(test_query_gpu_limits) {
        _cleanup_free_ char *big = NULL, *err = NULL, *many = NULL;
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        size_t n, ml = 0;
        FILE *f;

        /* Over the output limit: refused before any parsing. */
        big = malloc(NVIDIA_SMI_OUTPUT_MAX + 1);
        ck_assert_ptr_nonnull(big);
        memset(big, 'a', NVIDIA_SMI_OUTPUT_MAX + 1);
        ck_assert_int_eq(nvidia_smi_parse_query_gpu(big, NVIDIA_SMI_OUTPUT_MAX + 1, "name", &gpus, &n, &err), -E2BIG);
        /* One overlong line. */
        ck_assert_int_eq(nvidia_smi_parse_query_gpu(big, NVIDIA_SMI_LINE_MAX + 1, "name", &gpus, &n, &err), -E2BIG);

        /* More GPUs than NVIDIA_GPUS_MAX. */
        f = open_memstream(&many, &ml);
        ck_assert_ptr_nonnull(f);
        for (unsigned i = 0; i <= NVIDIA_GPUS_MAX; i++)
                fprintf(f, "%u, GPU %u\n", i, i);
        fclose(f);
        ck_assert_int_eq(nvidia_smi_parse_query_gpu(many, ml, "index,name", &gpus, &n, &err), -E2BIG);
        ck_assert_ptr_null(gpus);
        /* ... and exactly the limit is fine. */
        *strstr(many, "64, GPU 64\n") = 0;
        ck_assert_int_eq(nvidia_smi_parse_query_gpu(many, strlen(many), "index,name", &gpus, &n, &err), 0);
        ck_assert_uint_eq(n, NVIDIA_GPUS_MAX);
        ck_assert_str_eq(gpus[63].name, "GPU 63");
}
END_TEST

/* ---- topo -m ---- */

typedef struct TopoCase {
        const char *file;
        int r;
        uint32_t n_gpus;
        const char *row0;       /* links of GPU0, e.g. "X NV12" */
        int32_t numa0, numa_last;
        const char *cpu0;
} TopoCase;

static const TopoCase topo_cases[] = {
        { "topo-m-1xH100-MIG-1.txt", 0, 1, "X", 0, 0, "0-19" },
        { "topo-m-1xH200-1.txt", 0, 1, "X", 0, 0, "0-23" },
        { "topo-m-1xL40S-1.txt", 0, 1, "X", 0, 0, "0-7" },
        { "topo-m-1xRTX2080S-win-1.txt", 0, 1, "X", -1, -1, "" },
        { "topo-m-2xGPU-NV12-10NIC-1.txt", 0, 2, "X NV12", 3, 3, "48-63,176-191" },
        { "topo-m-2xGPU-NV2-1.txt", 0, 2, "X NV2", -1, -1, "0-23" },
        { "topo-m-2xGPU-PHB-1.txt", 0, 2, "X PHB", -1, -1, "0-11" },
        { "topo-m-5xRTX4090-mixedNUMA-1.txt", 0, 5, "X SYS SYS SYS SYS", 1, 0, "8-15,24-31" },
        { "topo-m-8xA100-1.txt", 0, 8, "X NV12 NV12 NV12 NV12 NV12 NV12 NV12", 0, 1, "0-23" },
        /* Cut after a few rows in the source: a partial matrix must be refused. */
        { "topo-m-8xA100-40GB-12NIC-1.txt", -EBADMSG, 0, NULL, 0, 0, NULL },
        { "topo-m-8xGPU-NV8-9NIC-1.txt", -EBADMSG, 0, NULL, 0, 0, NULL },
        { "topo-m-8xH100-1.txt", 0, 8, "X NV18 NV18 NV18 NV18 NV18 NV18 NV18", 0, 1, "0-51,104-155" },
        /* Raw tabs, ANSI header, glued NIC cells. */
        { "topo-m-8xH100-12NIC-1.txt", 0, 8, "X NV18 NV18 NV18 NV18 NV18 NV18 NV18", 0, 1, "0-55,112-167" },
        { "topo-m-8xRTX4090-1.txt", 0, 8, "X SYS SYS SYS SYS SYS SYS SYS", 0, 1, "0-55,112-167" },
};

static void link_format(const NvidiaLink *l, char *buf, size_t size) {
        if (l->type == NVIDIA_LINK_NVLINK)
                snprintf(buf, size, "NV%u", l->nvlinks);
        else
                snprintf(buf, size, "%s", nvidia_link_type_to_string(l->type));
}

START_TEST(test_topology_recordings) {
        const TopoCase *c = &topo_cases[_i];
        _cleanup_free_ NvidiaTopology *t = NULL;
        _cleanup_free_ char *err = NULL;
        char row[256] = "", cell[16];
        Rec r = rec_load(c->file);

        ck_assert_msg(nvidia_smi_parse_topology(r.text, r.len, &t, &err) == c->r, "%s: %s", c->file, strempty(err));
        rec_done(&r);
        if (c->r < 0) {
                ck_assert_ptr_null(t);
                ck_assert_ptr_nonnull(strstr(err, "no row for GPU"));
                return;
        }
        ck_assert_uint_eq(t->n_gpus, c->n_gpus);
        for (uint32_t j = 0; j < t->n_gpus; j++) {
                link_format(&t->link[0][j], cell, sizeof(cell));
                strcat(row, j ? " " : "");
                strcat(row, cell);
        }
        ck_assert_str_eq(row, c->row0);
        ck_assert_int_eq(t->numa_node[0], c->numa0);
        ck_assert_int_eq(t->numa_node[t->n_gpus - 1], c->numa_last);
        ck_assert_str_eq(t->cpu_affinity[0], c->cpu0);
        /* The matrices recorded here are symmetric. */
        for (uint32_t i = 0; i < t->n_gpus; i++)
                for (uint32_t j = 0; j < t->n_gpus; j++) {
                        ck_assert_uint_eq(t->link[i][j].type, t->link[j][i].type);
                        ck_assert_uint_eq(t->link[i][j].nvlinks, t->link[j][i].nvlinks);
                }
}
END_TEST

START_TEST(test_topology_garbage) {
        static const char *const bad[] = {
                "",
                "\tGPU0\tGPU1\nGPU0\t X \tNV4\n",                          /* no GPU1 row */
                "\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\tNV4\n",          /* no X on the diagonal */
                "\tGPU0\tGPU1\nGPU0\t X \tNV0\nGPU1\tNV0\t X \n",          /* NV0 */
                "\tGPU0\tGPU1\nGPU0\t X \tFAST\nGPU1\tFAST\t X \n",
                "\tGPU1\tGPU0\nGPU0\t X \tSYS\nGPU1\tSYS\t X \n",          /* columns out of order */
                "\tGPU0\nGPU0\t X \nGPU0\t X \n",                          /* row twice */
                "\tGPU0\nGPU7\t X \n",                                     /* row for a missing column */
                "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-7\tminus one\n",
                "\tGPU0\x1b\n",
        };
        NvidiaTopology *t = NULL;

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *err = NULL;

                ck_assert_msg(nvidia_smi_parse_topology(bad[i], strlen(bad[i]), &t, &err) == -EBADMSG, "case %zu", i);
                ck_assert_ptr_nonnull(err);
        }
        ck_assert_ptr_null(t);
}
END_TEST

/* ---- mig -lgi / -lci ---- */

typedef struct MigCase {
        const char *file;
        bool ci;
        size_t n;
        uint32_t gi0, profile_id0, start_last, size_last;
        int32_t ci0;
        const char *profile0;
} MigCase;

static const MigCase mig_cases[] = {
        { "mig-lgi-A100-40GB-1.txt", false, 7, 7, 19, 6, 1, -1, "1g.5gb" },
        { "mig-lgi-A100-40GB-2.txt", false, 2, 1, 9, 0, 4, -1, "3g.20gb" },
        { "mig-lgi-A100-80GB-1.txt", false, 2, 1, 9, 0, 4, -1, "3g.40gb" },
        { "mig-lgi-A30-1.txt", false, 4, 3, 14, 3, 1, -1, "1g.6gb" },
        { "mig-lgi-RTXPRO6000-Blackwell-2.txt", false, 4, 3, 14, 9, 3, -1, "1g.24gb" },
        { "mig-lci-H100-80GB-1.txt", true, 7, 7, 0, 0, 1, 0, "1g.10gb" },
        { "mig-lci-RTXPRO6000-Blackwell-1.txt", true, 4, 3, 0, 0, 1, 0, "1g.24gb" },
        { "error-A30-MIG-1.txt", false, 0, 0, 0, 0, 0, 0, NULL },     /* "No GPU instances found" */
};

START_TEST(test_mig_recordings) {
        const MigCase *c = &mig_cases[_i];
        _cleanup_free_ NvidiaMigInstance *m = NULL;
        _cleanup_free_ char *err = NULL;
        size_t n = 99;
        Rec r = rec_load(c->file);

        ck_assert_msg(nvidia_smi_parse_mig_instances(r.text, r.len, c->ci, &m, &n, &err) == 0, "%s: %s", c->file,
                      strempty(err));
        ck_assert_uint_eq(n, c->n);
        if (n > 0) {
                ck_assert_uint_eq(m[0].gpu_index, 0);
                ck_assert_uint_eq(m[0].gi_id, c->gi0);
                ck_assert_int_eq(m[0].ci_id, c->ci0);
                ck_assert_uint_eq(m[0].profile_id, c->profile_id0);
                ck_assert_str_eq(m[0].profile, c->profile0);
                ck_assert_uint_eq(m[n - 1].placement_start, c->start_last);
                ck_assert_uint_eq(m[n - 1].placement_size, c->size_last);
        } else
                ck_assert_ptr_null(m);

        /* The other table kind is refused. */
        if (n > 0) {
                NvidiaMigInstance *m2 = NULL;

                ck_assert_int_eq(nvidia_smi_parse_mig_instances(r.text, r.len, !c->ci, &m2, &n, NULL), -EBADMSG);
                ck_assert_ptr_null(m2);
        }
        rec_done(&r);
}
END_TEST

START_TEST(test_mig_garbage) {
        static const char head[] =
                "+----------------------------------------------------+\n"
                "| GPU instances:                                     |\n"
                "| GPU   Name          Profile  Instance   Placement  |\n"
                "|                       ID       ID       Start:Size |\n"
                "|====================================================|\n";
        static const char *const rows[] = {
                "|   0  MIG 1g.5gb       19        7          0:0     |\n",       /* size 0 */
                "|   0  MIG 1g.5gb       19        7          0-1     |\n",
                "|   0  MIG 1g.5gb       x9        7          0:1     |\n",
                "|   0  MIG ../../etc    19        7          0:1     |\n",
                "|   0  MIG 1g.5gb       19        7          0:1      \n",        /* no right border */
                ("|   0  MIG 1g.5gb       19        7          0:1     |\n"
                 "|   0  MIG 1g.5gb       19        7          1:1     |\n"),      /* same GI twice */
                "|   0  MIG 1g.5gb       19        7   8      0:1     |\n",
        };

        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                _cleanup_free_ char *text = NULL, *err = NULL;
                NvidiaMigInstance *m = NULL;
                size_t n = 5;

                ck_assert_int_ge(asprintf(&text, "%s%s", head, rows[i]), 0);
                ck_assert_msg(nvidia_smi_parse_mig_instances(text, strlen(text), false, &m, &n, &err) == -EBADMSG,
                              "case %zu", i);
                ck_assert_ptr_nonnull(err);
                ck_assert_ptr_null(m);
                ck_assert_uint_eq(n, 5);
        }
}
END_TEST

typedef struct ProfileCase {
        const char *file;
        const char *rows;       /* "name id free/total MiB" joined by ';' */
} ProfileCase;

static const ProfileCase profile_cases[] = {
        { "mig-lgip-A100-40GB-1.txt", "1g.5gb 19 7/7 4864;1g.5gb+me 20 1/1 4864;1g.10gb 15 4/4 9850;"
          "2g.10gb 14 3/3 9850;3g.20gb 9 2/2 19968;4g.20gb 5 1/1 19968;7g.40gb 0 1/1 40192" },
        { "mig-lgip-A100-80GB-1.txt", "1g.10gb 19 7/7 9728;1g.10gb+me 20 1/1 9728;2g.20gb 14 3/3 19968;"
          "3g.40gb 9 2/2 40192;4g.40gb 5 1/1 40192;7g.80gb 0 1/1 80896" },
        { "mig-lgip-A30-1.txt", "1g.6gb 14 0/4 5949;1g.6gb+me 21 0/1 5949;2g.12gb 5 0/2 11970;4g.24gb 0 0/1 24064" },
        { "mig-lgip-GH200-1.txt", "1g.12gb 19 7/7 11264;1g.12gb+me 20 1/1 11264;1g.24gb 15 4/4 23552;"
          "2g.24gb 14 3/3 23552;3g.48gb 9 2/2 47616;4g.48gb 5 1/1 47616;7g.96gb 0 1/1 95232" },
};

START_TEST(test_profile_recordings) {
        const ProfileCase *c = &profile_cases[_i];
        _cleanup_free_ NvidiaMigProfile *p = NULL;
        _cleanup_free_ char *err = NULL, *joined = NULL;
        size_t n = 0, jl = 0;
        Rec r = rec_load(c->file);
        FILE *f;

        ck_assert_msg(nvidia_smi_parse_mig_profiles(r.text, r.len, &p, &n, &err) == 0, "%s: %s", c->file,
                      strempty(err));
        f = open_memstream(&joined, &jl);
        ck_assert_ptr_nonnull(f);
        for (size_t i = 0; i < n; i++) {
                fprintf(f, "%s%s %u %u/%u %" PRIu64, i ? ";" : "", p[i].profile, p[i].profile_id, p[i].free,
                        p[i].total, p[i].memory_mib);
                ck_assert_uint_eq(p[i].gpu_index, 0);
                ck_assert(!p[i].p2p);
                ck_assert_uint_gt(p[i].sm, 0);
        }
        fclose(f);
        ck_assert_str_eq(joined, c->rows);
        /* Not a -lgi table. */
        ck_assert_int_eq(nvidia_smi_parse_mig_instances(r.text, r.len, false, &(NvidiaMigInstance *) { NULL }, &n,
                                                        NULL), -EBADMSG);
        rec_done(&r);
}
END_TEST

START_TEST(test_profile_garbage) {
        static const char head[] =
                "+-----------------------------------------------------------------------------+\n"
                "| GPU instance profiles:                                                      |\n"
                "| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |\n"
                "|                              Free/Total   GiB              CE    JPEG  OFA  |\n"
                "|=============================================================================|\n";
        static const char *const rows[] = {
                "|   0  MIG 1g.10gb       19     8/7        9.50       No     14     0     0   |\n",
                "|   0  MIG 1g.10gb       19     7/7        9.5.0      No     14     0     0   |\n",
                "|   0  MIG 1g.10gb       19     7/7        9.505      No     14     0     0   |\n",
                "|   0  MIG 1g.10gb       19     7/7        9.50       Maybe  14     0     0   |\n",
                "|   0  MIG 1g.10gb       19     7/7        9.50       No     14     0         |\n",
                "|   0  MIG 1g.10gb       19     77         9.50       No     14     0     0   |\n",
                "",     /* no rows */
        };

        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                _cleanup_free_ char *text = NULL, *err = NULL;
                NvidiaMigProfile *p = NULL;
                size_t n = 5;

                ck_assert_int_ge(asprintf(&text, "%s%s", head, rows[i]), 0);
                ck_assert_msg(nvidia_smi_parse_mig_profiles(text, strlen(text), &p, &n, &err) == -EBADMSG,
                              "case %zu", i);
                ck_assert_ptr_nonnull(err);
                ck_assert_ptr_null(p);
                ck_assert_uint_eq(n, 5);
        }
}
END_TEST

/* ---- errors ---- */

typedef struct ErrorCase {
        const char *file;
        NvidiaSmiErrorKind kind;
        int r;
        const char *pci;
} ErrorCase;

static const ErrorCase error_cases[] = {
        { "error-A10-GPU-PV-VM-1.txt", NVIDIA_SMI_ERROR_GPU_LOST, -EIO, "0000:b1:00.0" },
        { "error-A30-MIG-1.txt", NVIDIA_SMI_ERROR_NONE, 0, "" },
        { "error-RTX2080S-win-1.txt", NVIDIA_SMI_ERROR_INVALID_OPTION, -EINVAL, "" },
        { "error-Slurm-node-no-GPU-allocated-2.txt", NVIDIA_SMI_ERROR_NO_DEVICES, -ENODEV, "" },
        { "error-unknown-GPU-2.txt", NVIDIA_SMI_ERROR_GPU_LOST, -EIO, "0000:09:00.0" },
        { "error-unknown-GPU-3.txt", NVIDIA_SMI_ERROR_DRIVER, -ENXIO, "" },
        { "error-unknown-GPU-7.txt", NVIDIA_SMI_ERROR_NVML, -ENXIO, "" },
        { "error-GPU-lost-1.txt", NVIDIA_SMI_ERROR_GPU_LOST, -EIO, "0000:02:00.0" },
        { "error-libnvidia-ml-1.txt", NVIDIA_SMI_ERROR_NONE, 0, "" },  /* not recognised: quoted */
};

START_TEST(test_error_recordings) {
        const ErrorCase *c = &error_cases[_i];
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        _cleanup_free_ char *err = NULL;
        NvidiaSmiError e;
        size_t n;
        Rec r = rec_load(c->file);

        ck_assert_int_eq(nvidia_smi_parse_error(r.text, r.len, &e), c->kind != NVIDIA_SMI_ERROR_NONE);
        ck_assert_int_eq(e.kind, c->kind);
        ck_assert_int_eq(nvidia_smi_error_to_errno(e.kind), c->r);
        ck_assert_str_eq(e.pci_address, c->pci);
        if (c->kind != NVIDIA_SMI_ERROR_NONE) {
                ck_assert(strlen(e.message) > 10);
                /* Every inventory parser reports the tool's error, not "garbage". */
                ck_assert_int_eq(nvidia_smi_parse_list(r.text, r.len, &gpus, &n, NULL, NULL, &err), c->r);
                ck_assert_ptr_nonnull(strstr(err, e.message));
                ck_assert_int_eq(nvidia_smi_parse_query_gpu(r.text, r.len, NULL, &gpus, &n, NULL), c->r);
        }
        rec_done(&r);
}
END_TEST

/* ---- versions, compute mode, MPS ---- */

typedef struct VersionCase {
        const char *file;
        int r;
        const char *driver, *cuda;
} VersionCase;

static const VersionCase version_cases[] = {
        { "summary-8xB200-1.txt", 0, "580.95.05", "13.0" },
        { "summary-GRIDK520-1.txt", 0, "346.46", "" },
        { "summary-GTX1080Ti-1.txt", 0, "440.82", "10.2" },
        { "summary-H100-MIG-1.txt", 0, "590.48.01", "13.1" },
        { "summary-L40S-1.txt", 0, "595.80", "13.2" },
        { "summary-RTX2080S-win-1.txt", 0, "610.62", "13.3" },          /* KMD / CUDA UMD Version */
        { "q-8xV100-SXM2-16GB-1.txt", -EBADMSG, NULL, NULL },           /* one GPU block, no header */
        { "q-A10-1.txt", 0, "535.129.03", "12.2" },
        { "q-H100-MIG-1.txt", 0, "590.48.01", "13.1" },
        { "q-H200-1.txt", 0, "590.48.01", "13.1" },
        { "q-RTX2080S-win-1.txt", 0, "610.62", "13.3" },                /* "610.62 [Deprecated; ...]" */
};

START_TEST(test_version_recordings) {
        const VersionCase *c = &version_cases[_i];
        _cleanup_free_ char *err = NULL;
        NvidiaVersions v = {};
        Rec r = rec_load(c->file);

        ck_assert_msg(nvidia_smi_parse_versions(r.text, r.len, &v, &err) == c->r, "%s: %s", c->file, strempty(err));
        if (c->r == 0) {
                ck_assert_str_eq(v.driver, c->driver);
                ck_assert_str_eq(v.cuda, c->cuda);
        } else
                ck_assert_str_eq(err, "no driver version");
        rec_done(&r);
}
END_TEST

typedef struct QCase {
        const char *file;
        size_t n;
} QCase;

static const QCase q_cases[] = {
        { "q-8xV100-SXM2-16GB-1.txt", 0 },
        { "q-A10-1.txt", 0 },
        { "q-H100-MIG-1.txt", 4 },
        { "q-H200-1.txt", 0 },
        { "q-RTX2080S-win-1.txt", 0 },
};

START_TEST(test_q_mig_recordings) {
        const QCase *c = &q_cases[_i];
        _cleanup_free_ NvidiaQMigDevice *d = NULL;
        _cleanup_free_ char *err = NULL;
        size_t n = 99;
        Rec r = rec_load(c->file);

        ck_assert_msg(nvidia_smi_parse_q_mig_devices(r.text, r.len, &d, &n, &err) == 0, "%s: %s", c->file,
                      strempty(err));
        ck_assert_uint_eq(n, c->n);
        rec_done(&r);
}
END_TEST

START_TEST(test_mig_instance_join) {
        /* -L, -q of one H100 MIG capture; the GPU's bus id as --query-gpu reports it. */
        _cleanup_free_ NvidiaQMigDevice *d = NULL;
        _cleanup_free_ NvidiaGpu *listed = NULL;
        _cleanup_free_ NvidiaMigDevice *migs = NULL;
        NvidiaGpu gpu = { .index = 0, .pci_address = "0000:00:09.0" };
        NvidiaGpu other = { .index = 0, .pci_address = "0000:01:00.0" };
        static const uint32_t gi[] = { 2, 3, 9, 10 };
        size_t n = 0, nl = 0, nm = 0;
        Rec q = rec_load("q-H100-MIG-1.txt"), l = rec_load("L-H100-MIG-1.txt");
        Rec old = rec_load("L-A100-SXM4-40GB-MIG-oldUUID-1.txt");

        ck_assert_int_eq(nvidia_smi_parse_q_mig_devices(q.text, q.len, &d, &n, NULL), 0);
        for (size_t i = 0; i < n; i++) {
                ck_assert_str_eq(d[i].pci_address, "0000:00:09.0");
                ck_assert_uint_eq(d[i].device_index, i);
                ck_assert_uint_eq(d[i].gi_id, gi[i]);
                ck_assert_uint_eq(d[i].ci_id, 0);
        }
        ck_assert_int_eq(nvidia_smi_parse_list(l.text, l.len, &listed, &nl, &migs, &nm, NULL), 0);
        ck_assert_int_eq(nvidia_mig_devices_set_instance_ids(migs, nm, &other, 1, d, n), -ENXIO);
        ck_assert_int_eq(nvidia_mig_devices_set_instance_ids(migs, nm, &gpu, 1, d, n), 4);
        for (size_t i = 0; i < nm; i++) {
                ck_assert_int_eq(migs[i].gi_id, (int32_t) gi[i]);
                ck_assert_int_eq(migs[i].ci_id, 0);
        }
        listed = mfree(listed);
        migs = mfree(migs);

        /* R450 UUIDs carry GI/CI already: a -q that disagrees is refused. */
        ck_assert_int_eq(nvidia_smi_parse_list(old.text, old.len, &listed, &nl, &migs, &nm, NULL), 0);
        ck_assert_int_eq(nvidia_mig_devices_set_instance_ids(migs, 4, &gpu, 1, d, n), -ENXIO);
        rec_done(&q);
        rec_done(&l);
        rec_done(&old);
}
END_TEST

START_TEST(test_q_garbage) {
        static const char *const bad[] = {
                "hello\n",
                "GPU 00000000:00:09.0\n    MIG Device\n        Index : 0\n        GPU Instance ID : 2\n",
                "GPU 00000000:00:09.0\n    MIG Device\n        Index : x\n",
                "GPU 0000:00:09\n",
                "    MIG Device\n        Index : 0\n",
                ("GPU 00000000:00:09.0\n    MIG Device\n        Index : 0\n        GPU Instance ID : 2\n"
                 "        Compute Instance ID : 0\n    MIG Device\n        Index : 0\n        GPU Instance ID : 3\n"
                 "        Compute Instance ID : 0\n"),
        };

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *err = NULL;
                NvidiaQMigDevice *d = NULL;
                size_t n = 5;

                ck_assert_msg(nvidia_smi_parse_q_mig_devices(bad[i], strlen(bad[i]), &d, &n, &err) == -EBADMSG,
                              "case %zu", i);
                ck_assert_ptr_nonnull(err);
                ck_assert_ptr_null(d);
                ck_assert_uint_eq(n, 5);
        }
}
END_TEST

START_TEST(test_compute_mode_recordings) {
        _cleanup_free_ char *err = NULL;
        NvidiaComputeMode m = NVIDIA_COMPUTE_MODE_UNKNOWN;
        Rec r = rec_load("compute-mode-unknown-GPU-VM-1.txt");

        ck_assert_int_eq(nvidia_smi_parse_compute_mode_reply(r.text, r.len, &m, &err), 0);
        ck_assert_int_eq(m, NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS);
        rec_done(&r);

        m = NVIDIA_COMPUTE_MODE_UNKNOWN;
        r = rec_load("compute-mode-A100-80GB-MIG-1.txt");
        ck_assert_int_eq(nvidia_smi_parse_compute_mode_reply(r.text, r.len, &m, &err), -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(err, "MIG-enabled"));
        ck_assert_int_eq(m, NVIDIA_COMPUTE_MODE_UNKNOWN);
        rec_done(&r);

        ck_assert_int_eq(nvidia_smi_parse_compute_mode_reply("All done.\n", 10, &m, NULL), -EBADMSG);
        ck_assert_int_eq(nvidia_smi_parse_compute_mode_reply(
                "Set compute mode to SOMETIMES for GPU 00000000:00:06.0.\nAll done.\n", 66, &m, NULL), -EBADMSG);
}
END_TEST

static int query(const char *text, NvidiaComputeMode *m) {
        return nvidia_smi_parse_compute_mode_query(text, strlen(text), m, NULL);
}

/* -i N --query-gpu=compute_mode --format=csv,noheader: the mode MPS will restore. */
START_TEST(test_compute_mode_query) {
        _cleanup_free_ char *err = NULL;
        NvidiaComputeMode m = NVIDIA_COMPUTE_MODE_UNKNOWN;
        Rec r = rec_load("error-A10-GPU-PV-VM-1.txt");
        static const char lost[] = "Unable to determine the device handle for GPU0000:01:00.0: Unknown Error\n";

        ck_assert_int_eq(query("Default\n", &m), 0);
        ck_assert_int_eq(m, NVIDIA_COMPUTE_MODE_DEFAULT);
        ck_assert_int_eq(query("Prohibited\r\n", &m), 0);
        ck_assert_int_eq(m, NVIDIA_COMPUTE_MODE_PROHIBITED);
        ck_assert_int_eq(query("\n Exclusive_Process \n\n", &m), 0);
        ck_assert_int_eq(m, NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS);
        /* A lost GPU, garbage, two GPUs, nothing: errors, *ret untouched. */
        m = NVIDIA_COMPUTE_MODE_UNKNOWN;
        ck_assert_int_eq(nvidia_smi_parse_compute_mode_query(lost, sizeof(lost) - 1, &m, &err), -EIO);
        ck_assert_ptr_nonnull(strstr(err, "device handle"));
        ck_assert_int_lt(nvidia_smi_parse_compute_mode_query(r.text, r.len, &m, NULL), 0);
        ck_assert_int_eq(query("Sometimes\n", &m), -EBADMSG);
        ck_assert_int_eq(query("Default\nDefault\n", &m), -EBADMSG);
        ck_assert_int_eq(query("", &m), -EBADMSG);
        ck_assert_int_eq(query("Unknown\n", &m), -EBADMSG);
        ck_assert_int_eq(m, NVIDIA_COMPUTE_MODE_UNKNOWN);
        rec_done(&r);
}
END_TEST

START_TEST(test_mps_replies) {
        _cleanup_free_ char *err = NULL;
        _cleanup_free_ pid_t *pids = NULL;
        size_t n = 0;
        Rec r = rec_load("mps-A100-Polaris-1.txt");

        ck_assert_int_eq(nvidia_mps_parse_reply(r.text, r.len, &err), -ESRCH);
        ck_assert_ptr_nonnull(strstr(err, "Cannot find MPS control daemon process"));
        ck_assert_int_eq(nvidia_mps_parse_server_list(r.text, r.len, &pids, &n, NULL), -ESRCH);
        rec_done(&r);

        ck_assert_int_eq(nvidia_mps_parse_reply("", 0, NULL), 0);
        ck_assert_int_eq(nvidia_mps_parse_reply("\n", 1, NULL), 0);
        ck_assert_int_eq(nvidia_mps_parse_reply("what?\n", 6, NULL), -EBADMSG);

        ck_assert_int_eq(nvidia_mps_parse_server_list("337\n4012\n", 9, &pids, &n, NULL), 0);
        ck_assert_uint_eq(n, 2);
        ck_assert_int_eq(pids[1], 4012);
        ck_assert_int_eq(nvidia_mps_parse_server_list("337\n-1\n", 7, &pids, &n, NULL), -EBADMSG);
        ck_assert_int_eq(nvidia_mps_parse_server_list("0\n", 2, &pids, &n, NULL), -EBADMSG);
}
END_TEST

/* The answers recorded on an H100 (driver 580.159.04): which parser reads each, and what. */
START_TEST(test_mps_replies_h100) {
        static const struct {
                const char *file;
                int reply;              /* nvidia_mps_parse_reply() */
                int percentage;         /* nvidia_mps_parse_percentage_reply() */
                uint32_t tenths;
        } cases[] = {
                /* On stderr: the probe parses both streams. */
                { "mps-H100-no-daemon-1.txt", -ESRCH, -ESRCH, 0 },
                { "mps-H100-set-percentage-1.txt", -EBADMSG, 0, 80 },
                { "mps-H100-set-percentage-2.txt", -EBADMSG, 0, 335 },
                /* 0 refused: the value in force is printed, not the one asked for. */
                { "mps-H100-set-percentage-3.txt", -EBADMSG, 0, 335 },
                { "mps-H100-set-limit-1.txt", 0, -EBADMSG, 0 },
                { "mps-H100-get-limit-1.txt", -EBADMSG, -EBADMSG, 0 },
                { "mps-H100-unknown-command-1.txt", -EBADMSG, -EBADMSG, 0 },
                { "mps-H100-already-running-1.txt", -EEXIST, -EBADMSG, 0 },
        };
        _cleanup_free_ pid_t *pids = NULL;
        size_t n = 0;
        Rec r;

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *err = NULL, *err2 = NULL;
                uint32_t tenths = UINT32_MAX;

                r = rec_load(cases[i].file);
                ck_assert_msg(nvidia_mps_parse_reply(r.text, r.len, &err) == cases[i].reply, "%s", cases[i].file);
                ck_assert_msg(cases[i].reply == 0 || err, "%s: no message", cases[i].file);
                ck_assert_msg(nvidia_mps_parse_percentage_reply(r.text, r.len, &tenths, &err2) == cases[i].percentage,
                              "%s", cases[i].file);
                if (cases[i].percentage == 0)
                        ck_assert_uint_eq(tenths, cases[i].tenths);
                else
                        ck_assert_msg(err2 && tenths == UINT32_MAX, "%s", cases[i].file);
                rec_done(&r);
        }

        r = rec_load("mps-H100-server-list-1.txt");
        ck_assert_int_eq(nvidia_mps_parse_server_list(r.text, r.len, &pids, &n, NULL), 0);
        ck_assert_uint_eq(n, 1);
        ck_assert_int_eq(pids[0], 554);
        rec_done(&r);
        r = rec_load("mps-H100-unknown-command-1.txt");
        ck_assert_int_eq(nvidia_mps_parse_server_list(r.text, r.len, &pids, &n, NULL), -EBADMSG);
        rec_done(&r);

        /* The limits step's answer: the pinned-memory line prints nothing, then the percentage. */
        {
                uint32_t t = 0;

                ck_assert_int_eq(nvidia_mps_parse_percentage_reply("\n100.0\n", 7, &t, NULL), 0);
                ck_assert_uint_eq(t, 1000);
                ck_assert_int_eq(nvidia_mps_parse_percentage_reply("100.5\n", 6, &t, NULL), -EBADMSG);
                ck_assert_int_eq(nvidia_mps_parse_percentage_reply("101.0\n", 6, &t, NULL), -EBADMSG);
                ck_assert_int_eq(nvidia_mps_parse_percentage_reply("8.0\n8.0\n", 8, &t, NULL), -EBADMSG);
                ck_assert_int_eq(nvidia_mps_parse_percentage_reply("8.05\n", 5, &t, NULL), -EBADMSG);
                ck_assert_int_eq(nvidia_mps_parse_percentage_reply("-8.0\n", 5, &t, NULL), -EBADMSG);
                ck_assert_int_eq(nvidia_mps_parse_percentage_reply(".5\n", 3, &t, NULL), -EBADMSG);
                ck_assert_int_eq(nvidia_mps_parse_percentage_reply("8.\n", 3, &t, NULL), -EBADMSG);
                ck_assert_int_eq(nvidia_mps_parse_percentage_reply("50\n", 3, &t, NULL), 0);
                ck_assert_uint_eq(t, 500);
        }
}
END_TEST

START_TEST(test_helpers) {
        char pci[NVIDIA_PCI_ADDRESS_MAX];
        NvidiaComputeMode m;

        ck_assert_int_eq(nvidia_pci_address_normalize("00000000:83:00.0", pci), 0);
        ck_assert_str_eq(pci, "0000:83:00.0");
        ck_assert_int_eq(nvidia_pci_address_normalize("00002C74:00:00.0", pci), 0);
        ck_assert_str_eq(pci, "2c74:00:00.0");
        ck_assert_int_eq(nvidia_pci_address_normalize("0000:04:00.0", pci), 0);
        ck_assert_str_eq(pci, "0000:04:00.0");
        ck_assert_int_eq(nvidia_pci_address_normalize("000:04:00.0", pci), -EBADMSG);
        ck_assert_int_eq(nvidia_pci_address_normalize("0000:04:20.0", pci), -EBADMSG);
        ck_assert_int_eq(nvidia_pci_address_normalize("0000:04:00.0 ", pci), -EBADMSG);
        ck_assert_int_eq(nvidia_pci_address_normalize("000000000:04:00.0", pci), -EBADMSG);

        ck_assert(nvidia_gpu_uuid_is_valid("GPU-4200ccc0-2667-d4cb-9137-f932c716232a"));
        ck_assert(!nvidia_gpu_uuid_is_valid("GPU-4200ccc0-2667-d4cb-9137-f932c716232"));
        ck_assert(!nvidia_gpu_uuid_is_valid("GPU-4200ccc0-2667-d4cb-9137-f932c716232aa"));
        ck_assert(!nvidia_gpu_uuid_is_valid("GPU-abcd"));
        ck_assert(nvidia_mig_uuid_is_valid("MIG-GPU-4200ccc0-2667-d4cb-9137-f932c716232a/13/0"));
        ck_assert(!nvidia_mig_uuid_is_valid("MIG-GPU-4200ccc0-2667-d4cb-9137-f932c716232a/13/"));
        ck_assert(!nvidia_mig_uuid_is_valid("MIG-GPU-4200ccc0-2667-d4cb-9137-f932c716232a/x/0"));
        ck_assert(!nvidia_mig_uuid_is_valid("GPU-4200ccc0-2667-d4cb-9137-f932c716232a"));

        ck_assert_int_eq(nvidia_compute_mode_from_string("E. Process", &m), 0);
        ck_assert_int_eq(m, NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS);
        ck_assert_int_eq(nvidia_compute_mode_from_string("EXCLUSIVE_PROCESS", &m), 0);
        ck_assert_int_eq(nvidia_compute_mode_from_string("Prohibited", &m), 0);
        ck_assert_int_eq(m, NVIDIA_COMPUTE_MODE_PROHIBITED);
        ck_assert_int_eq(nvidia_compute_mode_from_string("4", &m), -EBADMSG);
        ck_assert_str_eq(nvidia_compute_mode_to_string(NVIDIA_COMPUTE_MODE_DEFAULT), "Default");
}
END_TEST

START_TEST(test_list_garbage) {
        static const char *const bad[] = {
                "",
                "GPU 0: A (UUID: GPU-4200ccc0-2667-d4cb-9137-f932c716232a\n",
                "GPU x: A (UUID: GPU-4200ccc0-2667-d4cb-9137-f932c716232a)\n",
                "GPU 0:  (UUID: GPU-4200ccc0-2667-d4cb-9137-f932c716232a)\n",
                "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-4200ccc0-2667-d4cb-9137-f932c716232a/7/0)\n",
                ("GPU 0: A (UUID: GPU-4200ccc0-2667-d4cb-9137-f932c716232a)\n"
                 "  MIG 1g.5gb Device 0: (UUID: MIG-x)\n"),
                ("GPU 0: A (UUID: GPU-4200ccc0-2667-d4cb-9137-f932c716232a)\n"
                 "  MIG 1g.5gb Device 0 (UUID: MIG-GPU-4200ccc0-2667-d4cb-9137-f932c716232a/7/0)\n"),
                ("GPU 0: A (UUID: GPU-4200ccc0-2667-d4cb-9137-f932c716232a)\n"
                 "GPU 0: A (UUID: GPU-5200ccc0-2667-d4cb-9137-f932c716232a)\n"),
                "GPU 0: A (UUID: GPU-4200ccc0-2667-d4cb-9137-f932c716232a)\nhello\n",
                "GPU 0: A (UUID: GPU-4200ccc0-2667-d4cb-9137-f932c716232a)\r\r\n",
        };

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *err = NULL;
                NvidiaGpu *gpus = NULL;
                size_t n = 3;

                ck_assert_msg(nvidia_smi_parse_list(bad[i], strlen(bad[i]), &gpus, &n, NULL, NULL, &err) == -EBADMSG,
                              "case %zu", i);
                ck_assert_ptr_nonnull(err);
                ck_assert_ptr_null(gpus);
                ck_assert_uint_eq(n, 3);
        }
}
END_TEST

START_TEST(test_list_limits) {
        _cleanup_free_ char *text = NULL;
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        _cleanup_free_ NvidiaMigDevice *migs = NULL;
        size_t len = 0, n = 0, nm = 0;
        char *err = NULL;
        FILE *f;

        f = open_memstream(&text, &len);
        ck_assert_ptr_nonnull(f);
        fputs("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n", f);
        for (unsigned i = 0; i <= NVIDIA_MIG_DEVICES_MAX; i++)
                fprintf(f, "  MIG 1g.10gb     Device %2u: (UUID: MIG-%08x-0000-0000-0000-000000000000)\n", i, i);
        fclose(f);
        ck_assert_int_eq(nvidia_smi_parse_list(text, len, &gpus, &n, &migs, &nm, &err), -E2BIG);
        ck_assert_ptr_nonnull(strstr(err, "more than 4096 MIG devices"));
        err = mfree(err);
        ck_assert_ptr_null(migs);

        /* The last line dropped: exactly the limit parses. */
        *strrchr(text, '\n') = 0;
        *(strrchr(text, '\n') + 1) = 0;
        ck_assert_int_eq(nvidia_smi_parse_list(text, strlen(text), &gpus, &n, &migs, &nm, &err), 0);
        ck_assert_uint_eq(nm, NVIDIA_MIG_DEVICES_MAX);
        ck_assert_uint_eq(migs[4095].device_index, 4095);
        ck_assert_str_eq(migs[4095].uuid, "MIG-00000fff-0000-0000-0000-000000000000");
}
END_TEST

/* Every prefix of every recording, and each with one byte flipped, through every
 * parser: no crash, no leak, and either success or an error with a message. */
START_TEST(test_mutations) {
        for (size_t f = 0; f < ELEMENTSOF(checked); f++) {
                Rec r = rec_load(checked[f]);
                _cleanup_free_ char *copy = malloc(r.len + 1);
                size_t step = r.len > 2048 ? r.len / 256 : 1;

                ck_assert_ptr_nonnull(copy);
                for (size_t cut = 0; cut <= r.len; cut += step) {
                        for (int flip = 0; flip < 2; flip++) {
                                NvidiaGpu *g = NULL;
                                NvidiaMigDevice *m = NULL;
                                NvidiaMigInstance *mi = NULL;
                                NvidiaQMigDevice *qm = NULL;
                                NvidiaMigProfile *mp = NULL;
                                NvidiaTopology *t = NULL;
                                NvidiaVersions v;
                                NvidiaSmiError e;
                                NvidiaComputeMode cm;
                                pid_t *p = NULL;
                                uint32_t tenths;
                                size_t n, nm;
                                char *err = NULL;
                                int k;

                                memcpy(copy, r.text, r.len);
                                if (flip && cut < r.len)
                                        copy[cut] ^= 0x20;
#define CHECK(call)                                                     \
                                do {                                    \
                                        k = (call);                     \
                                        ck_assert(k >= 0 || err);       \
                                        err = mfree(err);               \
                                } while (0)
                                CHECK(nvidia_smi_parse_list(copy, cut, &g, &n, &m, &nm, &err));
                                g = mfree(g);
                                m = mfree(m);
                                CHECK(nvidia_smi_parse_query_gpu(copy, cut, NULL, &g, &n, &err));
                                g = mfree(g);
                                CHECK(nvidia_smi_parse_mig_instances(copy, cut, f & 1, &mi, &n, &err));
                                mi = mfree(mi);
                                CHECK(nvidia_smi_parse_topology(copy, cut, &t, &err));
                                t = mfree(t);
                                CHECK(nvidia_smi_parse_versions(copy, cut, &v, &err));
                                CHECK(nvidia_smi_parse_q_mig_devices(copy, cut, &qm, &n, &err));
                                qm = mfree(qm);
                                CHECK(nvidia_smi_parse_summary_mig_devices(copy, cut, &qm, &n, &err));
                                qm = mfree(qm);
                                CHECK(nvidia_smi_parse_mig_profiles(copy, cut, &mp, &n, &err));
                                mp = mfree(mp);
                                CHECK(nvidia_smi_parse_compute_mode_reply(copy, cut, &cm, &err));
                                CHECK(nvidia_smi_parse_compute_mode_query(copy, cut, &cm, &err));
                                CHECK(nvidia_mps_parse_reply(copy, cut, &err));
                                CHECK(nvidia_mps_parse_percentage_reply(copy, cut, &tenths, &err));
                                CHECK(nvidia_mps_parse_server_list(copy, cut, &p, &n, &err));
                                p = mfree(p);
                                (void) nvidia_smi_parse_error(copy, cut, &e);
#undef CHECK
                        }
                }
                rec_done(&r);
        }
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("nvidia-smi");
        TCase *tc = tcase_create("recordings");
        TCase *tg = tcase_create("garbage");

        tcase_add_test(tc, test_every_recording_checked);
        tcase_add_loop_test(tc, test_list_recordings, 0, ELEMENTSOF(list_cases));
        tcase_add_loop_test(tc, test_query_gpu_recordings, 0, ELEMENTSOF(query_cases));
        tcase_add_test(tc, test_query_gpu_probe_fields);
        tcase_add_test(tc, test_query_gpu_health);
        tcase_add_loop_test(tc, test_topology_recordings, 0, ELEMENTSOF(topo_cases));
        tcase_add_loop_test(tc, test_mig_recordings, 0, ELEMENTSOF(mig_cases));
        tcase_add_loop_test(tc, test_profile_recordings, 0, ELEMENTSOF(profile_cases));
        tcase_add_loop_test(tc, test_error_recordings, 0, ELEMENTSOF(error_cases));
        tcase_add_loop_test(tc, test_version_recordings, 0, ELEMENTSOF(version_cases));
        tcase_add_loop_test(tc, test_q_mig_recordings, 0, ELEMENTSOF(q_cases));
        tcase_add_test(tc, test_mig_instance_join);
        tcase_add_test(tc, test_compute_mode_recordings);
        tcase_add_test(tc, test_compute_mode_query);
        tcase_add_test(tc, test_mps_replies);
        tcase_add_test(tc, test_mps_replies_h100);
        tcase_add_test(tc, test_helpers);
        suite_add_tcase(s, tc);

        tcase_add_test(tg, test_query_gpu_garbage);
        tcase_add_test(tg, test_query_gpu_limits);
        tcase_add_test(tg, test_topology_garbage);
        tcase_add_test(tg, test_mig_garbage);
        tcase_add_test(tg, test_list_garbage);
        tcase_add_test(tg, test_q_garbage);
        tcase_add_test(tg, test_list_limits);
        tcase_add_test(tg, test_profile_garbage);
        tcase_add_test(tg, test_mutations);
        tcase_set_timeout(tg, 120);
        suite_add_tcase(s, tg);
        return s;
}

KGPU_TEST_SUITE(suite)
