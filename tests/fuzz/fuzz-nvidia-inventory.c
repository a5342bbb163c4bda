/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-nvidia-inventory.c — libFuzzer target for the probe's NVIDIA inventory builder
 * (nvidia_build_gpus, nvidia_mig_minor_lookup in daemons/probe/nvidia.c) and the NVIDIA
 * CDI spec (cdi_nvidia_spec), fed with what the parsers make of hostile tool output.
 *
 * Contract: an input is five texts separated by 0x01 bytes: the --query-gpu answer (the
 * probe's field list, no header), -L, -q, topo -m and the mig-minors file. Whatever they
 * hold, the builder returns 0 or a negative errno; every Gpu it returns carries only
 * strings sd-bus accepts (valid UTF-8, no NUL inside), a UUID id, absolute device
 * nodes, at most GPU_MIG_DEVICES_MAX MIG devices and GPU_LINKS_MAX links; the CDI spec
 * is NUL-free text whose device count matches its "- name:" lines. Any crash, leak,
 * sanitizer report or broken contract aborts.
 */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemons/probe/cdi-nvidia.h"
#include "daemons/probe/nvidia.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool utf8_ok(const char *s) {
        const unsigned char *p = (const unsigned char *) s;

        if (!s)
                return false;
        while (*p) {
                size_t n = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3 :
                           (*p & 0xf8) == 0xf0 ? 4 : 0;

                if (n == 0)
                        return false;
                for (size_t k = 1; k < n; k++)
                        if ((p[k] & 0xc0) != 0x80)
                                return false;
                p += n;
        }
        return true;
}

static void check_gpu(const Gpu *g) {
        const char *strs[] = { g->id, g->vendor, g->driver, g->pci_address, g->product, g->card_node,
                               g->render_node, g->uuid, g->health, g->health_reason, g->physical_function,
                               g->compute_mode, g->mig_mode, g->compute_capability, g->driver_version,
                               g->cuda_version, g->mps_state, g->mps_pipe_directory };

        for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
                if (!utf8_ok(strs[i]))
                        abort();
        if (!nvidia_gpu_uuid_is_valid(g->id) || strcmp(g->vendor, "nvidia") != 0)
                abort();
        for (char **n = g->device_nodes; n && *n; n++)
                if ((*n)[0] != '/' || !utf8_ok(*n))
                        abort();
        if (g->n_mig_devices > GPU_MIG_DEVICES_MAX || g->n_links > GPU_LINKS_MAX)
                abort();
        for (size_t i = 0; i < g->n_mig_devices; i++) {
                if (!utf8_ok(g->mig_devices[i].uuid) || !utf8_ok(g->mig_devices[i].profile))
                        abort();
                for (char **n = g->mig_devices[i].device_nodes; n && *n; n++)
                        if ((*n)[0] != '/' || !utf8_ok(*n))
                                abort();
        }
        for (size_t i = 0; i < g->n_links; i++)
                if (!utf8_ok(g->links[i].peer_id) || !utf8_ok(g->links[i].type) ||
                    strcmp(g->links[i].peer_id, g->id) == 0)
                        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *part[5] = {}, *buf;
        size_t len[5] = {}, k = 0;
        NvidiaGpu *gpus = NULL, *list_gpus = NULL;
        NvidiaSmiError *lost = NULL;
        NvidiaMigDevice *migs = NULL;
        NvidiaQGpu *q_gpus = NULL;
        NvidiaQMigDevice *q_migs = NULL;
        NvidiaTopology *topo = NULL;
        NvidiaVersions versions = {};
        size_t n_gpus = 0, n_lost = 0, n_list = 0, n_migs = 0, n_q_gpus = 0, n_q_migs = 0, n = 0;
        char *err = NULL, *spec = NULL;
        Gpu **l = NULL;
        int r;

        if (size > NVIDIA_SMI_OUTPUT_MAX)
                return 0;
        buf = malloc(size + 1);
        if (!buf)
                abort();
        memcpy(buf, data, size);
        buf[size] = 0;
        for (char *p = buf; k < 5; k++) {
                char *e = memchr(p, 0x01, (size_t) (buf + size - p));

                part[k] = p;
                if (!e) {
                        len[k] = (size_t) (buf + size - p);
                        k++;
                        break;
                }
                *e = 0;
                len[k] = (size_t) (e - p);
                p = e + 1;
        }
        for (; k < 5; k++)
                part[k] = (char *) "";

        (void) nvidia_smi_parse_query_gpu_health(part[0], len[0], NVIDIA_INVENTORY_FIELDS, &gpus, &n_gpus,
                                                 &lost, &n_lost, &err);
        err = (free(err), NULL);
        (void) nvidia_smi_parse_list(part[1], len[1], &list_gpus, &n_list, &migs, &n_migs, &err);
        err = (free(err), NULL);
        (void) nvidia_smi_parse_q_gpus(part[2], len[2], &q_gpus, &n_q_gpus, &err);
        err = (free(err), NULL);
        (void) nvidia_smi_parse_q_mig_devices(part[2], len[2], &q_migs, &n_q_migs, &err);
        err = (free(err), NULL);
        (void) nvidia_smi_parse_versions(part[2], len[2], &versions, &err);
        err = (free(err), NULL);
        (void) nvidia_smi_parse_topology(part[3], len[3], &topo, &err);
        err = (free(err), NULL);

        /* The mig-minors text is hostile too (the lookup must not read past its NUL). */
        for (uint32_t gi = 0; gi < 3; gi++) {
                uint32_t minor;

                (void) nvidia_mig_minor_lookup(part[4], 0, gi, -1, &minor);
                (void) nvidia_mig_minor_lookup(part[4], 0, gi, 0, &minor);
        }

        r = nvidia_build_gpus(gpus, n_gpus, migs, n_migs, q_migs, n_q_migs, q_gpus, n_q_gpus, topo, &versions,
                              part[4], &l, &n);
        if (r > 0)
                abort();
        if (r == 0) {
                size_t names = 0;

                if (n > n_gpus)
                        abort();
                for (size_t i = 0; i < n; i++)
                        check_gpu(l[i]);
                r = cdi_nvidia_spec(l, n, &spec);
                if (r < 0 && r != -ENOMEM)
                        abort();
                if (r >= 0) {
                        if (!utf8_ok(spec))
                                abort();
                        for (const char *p = spec; (p = strstr(p, "\n- name: ")); p++)
                                names++;
                        if (names != (size_t) r)
                                abort();
                        free(spec);
                }
                for (size_t i = 0; i < n; i++)
                        gpu_free(l[i]);
                free(l);
        }
        free(gpus);
        free(lost);
        free(list_gpus);
        free(migs);
        free(q_gpus);
        free(q_migs);
        free(topo);
        free(buf);
        return 0;
}
