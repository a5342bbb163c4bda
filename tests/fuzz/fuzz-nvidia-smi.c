/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-nvidia-smi.c — libFuzzer target for the nvidia-smi / nvidia-cuda-mps-control
 * output parsers (daemons/probe/nvidia-smi.c).
 *
 * Contract: each input is fed, as the whole output of a tool, to every parser (the
 * query-gpu parser both with a header and with the probe's field list). A parser must
 * return 0 or a negative errno; on failure an error message must be set and the ret_*
 * arguments left alone; on success every returned string must be NUL-terminated inside
 * its field. Any crash, leak, sanitizer report or broken contract aborts.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemons/probe/nvidia-smi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SENTINEL ((void *) 0x1)

static void check_result(int r, char *err, void *ret) {
        if (r > 0)
                abort();
        if (r < 0 && (!err || ret != SENTINEL))
                abort();
        free(err);
}

static void check_str(const char *s, size_t size) {
        if (!memchr(s, 0, size))
                abort();
}

static void check_gpus(const NvidiaGpu *g, size_t n) {
        if (n > NVIDIA_GPUS_MAX)
                abort();
        for (size_t i = 0; i < n; i++) {
                check_str(g[i].uuid, sizeof(g[i].uuid));
                check_str(g[i].name, sizeof(g[i].name));
                check_str(g[i].pci_address, sizeof(g[i].pci_address));
                check_str(g[i].driver_version, sizeof(g[i].driver_version));
                if (g[i].uuid[0] && !nvidia_gpu_uuid_is_valid(g[i].uuid))
                        abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *text = (const char *) data;
        NvidiaGpu *gpus;
        NvidiaMigDevice *migs;
        NvidiaMigInstance *inst;
        NvidiaTopology *topo;
        NvidiaVersions v;
        NvidiaSmiError e;
        NvidiaComputeMode cm;
        pid_t *pids;
        size_t n, nm;
        char *err;
        int r;

        for (int with_fields = 0; with_fields < 2; with_fields++) {
                gpus = SENTINEL;
                err = NULL;
                r = nvidia_smi_parse_query_gpu(text, size, with_fields ? NVIDIA_SMI_QUERY_FIELDS : NULL, &gpus, &n,
                                               &err);
                if (r == 0) {
                        check_gpus(gpus, n);
                        free(gpus);
                        gpus = SENTINEL;
                }
                check_result(r, err, gpus);
        }

        {
                NvidiaSmiError *lost = SENTINEL;

                gpus = SENTINEL;
                err = NULL;
                r = nvidia_smi_parse_query_gpu_health(text, size, NVIDIA_SMI_QUERY_FIELDS, &gpus, &n, &lost, &nm, &err);
                if (r == 0) {
                        check_gpus(gpus, n);
                        if (nm > NVIDIA_GPUS_MAX)
                                abort();
                        for (size_t i = 0; i < nm; i++)
                                if (lost[i].kind != NVIDIA_SMI_ERROR_GPU_LOST)
                                        abort();
                        free(gpus);
                        free(lost);
                        gpus = SENTINEL;
                        lost = SENTINEL;
                }
                check_result(r, err, gpus);
                if (lost != SENTINEL)
                        abort();
        }

        gpus = SENTINEL;
        migs = NULL;
        err = NULL;
        r = nvidia_smi_parse_list(text, size, &gpus, &n, &migs, &nm, &err);
        if (r == 0) {
                check_gpus(gpus, n);
                if (nm > NVIDIA_MIG_DEVICES_MAX)
                        abort();
                for (size_t i = 0; i < nm; i++)
                        if (!nvidia_mig_uuid_is_valid(migs[i].uuid))
                                abort();
                free(gpus);
                free(migs);
                gpus = SENTINEL;
        }
        check_result(r, err, gpus);

        for (int ci = 0; ci < 2; ci++) {
                inst = SENTINEL;
                err = NULL;
                r = nvidia_smi_parse_mig_instances(text, size, ci, &inst, &n, &err);
                if (r == 0) {
                        if (n > NVIDIA_MIG_DEVICES_MAX)
                                abort();
                        free(inst);
                        inst = SENTINEL;
                }
                check_result(r, err, inst);
        }

        topo = SENTINEL;
        err = NULL;
        r = nvidia_smi_parse_topology(text, size, &topo, &err);
        if (r == 0) {
                if (topo->n_gpus == 0 || topo->n_gpus > NVIDIA_GPUS_MAX)
                        abort();
                for (uint32_t i = 0; i < topo->n_gpus; i++) {
                        check_str(topo->cpu_affinity[i], sizeof(topo->cpu_affinity[i]));
                        if (topo->link[i][i].type != NVIDIA_LINK_SELF)
                                abort();
                }
                free(topo);
                topo = SENTINEL;
        }
        check_result(r, err, topo);

        {
                NvidiaQMigDevice *qm = SENTINEL;

                err = NULL;
                r = nvidia_smi_parse_q_mig_devices(text, size, &qm, &n, &err);
                if (r == 0) {
                        if (n > NVIDIA_MIG_DEVICES_MAX)
                                abort();
                        for (size_t i = 0; i < n; i++)
                                check_str(qm[i].pci_address, sizeof(qm[i].pci_address));
                        free(qm);
                        qm = SENTINEL;
                }
                check_result(r, err, qm);
        }

        {
                NvidiaQMigDevice *sm = SENTINEL;

                err = NULL;
                r = nvidia_smi_parse_summary_mig_devices(text, size, &sm, &n, &err);
                if (r == 0) {
                        if (n > NVIDIA_MIG_DEVICES_MAX || (n > 0) != (sm != NULL))
                                abort();
                        for (size_t i = 0; i < n; i++)
                                check_str(sm[i].pci_address, sizeof(sm[i].pci_address));
                        free(sm);
                        sm = SENTINEL;
                }
                check_result(r, err, sm);
        }

        {
                NvidiaMigProfile *mp = SENTINEL;

                err = NULL;
                r = nvidia_smi_parse_mig_profiles(text, size, &mp, &n, &err);
                if (r == 0) {
                        if (n == 0 || n > NVIDIA_MIG_DEVICES_MAX)
                                abort();
                        for (size_t i = 0; i < n; i++)
                                if (mp[i].free > mp[i].total)
                                        abort();
                        free(mp);
                        mp = SENTINEL;
                }
                check_result(r, err, mp);
        }

        err = NULL;
        r = nvidia_smi_parse_versions(text, size, &v, &err);
        if (r == 0)
                check_str(v.driver, sizeof(v.driver));
        check_result(r, err, SENTINEL);

        err = NULL;
        r = nvidia_smi_parse_compute_mode_reply(text, size, &cm, &err);
        check_result(r, err, SENTINEL);
        err = NULL;
        r = nvidia_smi_parse_compute_mode_query(text, size, &cm, &err);
        check_result(r, err, SENTINEL);
        err = NULL;
        r = nvidia_mps_parse_reply(text, size, &err);
        check_result(r, err, SENTINEL);
        err = NULL;
        {
                uint32_t tenths = UINT32_MAX;

                r = nvidia_mps_parse_percentage_reply(text, size, &tenths, &err);
                if (r == 0 && tenths > 1000)
                        abort();
                if (r < 0 && tenths != UINT32_MAX)
                        abort();
        }
        check_result(r, err, SENTINEL);

        pids = SENTINEL;
        err = NULL;
        r = nvidia_mps_parse_server_list(text, size, &pids, &n, &err);
        if (r == 0) {
                free(pids);
                pids = SENTINEL;
        }
        check_result(r, err, pids);

        /* Bad input (NUL bytes, oversize) is an error here too, and leaves e alone. */
        r = nvidia_smi_parse_error(text, size, &e);
        if (r > 1)
                abort();
        if (r >= 0)
                check_str(e.message, sizeof(e.message));
        return 0;
}
