/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-smi-summary.c — the MIG devices of the plain nvidia-smi table (see nvidia-smi.h;
 * shared text handling in nvidia-smi-internal.h).
 *
 * The table has a GPU box (rows "| <index>  <name> ... | <bus id> <disp> | ..."), then,
 * with MIG on, a "MIG devices:" box whose rows start "| <gpu> <gi> <ci> <mig dev> |" and
 * whose memory cell reads "<used>MiB / <total>MiB" (empty where compute instances share
 * one GPU instance's memory), then the processes box. Every driver layout seen (79, 89
 * and 91 columns, Windows) keeps these cells in this order.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/nvidia-smi-internal.h"
#include "daemons/probe/nvidia-smi.h"

#define SUMMARY_CELLS_MAX 8U

typedef enum Section {
        SECTION_NONE,
        SECTION_GPUS,
        SECTION_MIGS,
        SECTION_OTHER,
} Section;

/* "| a | b | c |" -> its cells (in place, not stripped); 0 when not a row. */
static size_t row_cells(char *s, char **cells, size_t max) {
        size_t n = 0;
        char *p;

        if (s[0] != '|')
                return 0;
        p = s + 1;
        while (n < max) {
                char *e = strchr(p, '|');

                if (!e)
                        break;
                *e = 0;
                cells[n++] = p;
                p = e + 1;
        }
        return n;
}

/* "  26MiB / 40448MiB  " -> 40448; 0 when the cell says nothing of it. */
static uint64_t cell_total_mib(const char *cell) {
        const char *slash = strchr(cell, '/');
        char num[12];
        size_t k;
        uint64_t v;

        if (!slash)
                return 0;
        slash++;
        while (smi_is_blank(*slash))
                slash++;
        k = strspn(slash, "0123456789");
        if (k == 0 || k >= sizeof(num) || !startswith(slash + k, "MiB"))
                return 0;
        memcpy(num, slash, k);
        num[k] = 0;
        return safe_atou64(num, &v) >= 0 ? v : 0;
}

int nvidia_smi_parse_summary_mig_devices(const char *text, size_t len, NvidiaQMigDevice **ret, size_t *ret_n,
                                         char **ret_error) {
        _cleanup_(smi_lines_done) Lines l = {};
        _cleanup_free_ NvidiaQMigDevice *devs = NULL;
        uint32_t gpu_index[NVIDIA_GPUS_MAX];
        char gpu_bus[NVIDIA_GPUS_MAX][NVIDIA_PCI_ADDRESS_MAX];
        size_t n_gpus = 0, n = 0, cap = 0;
        Section section = SECTION_NONE;
        bool seen_header = false;
        int r;

        r = smi_lines_open(text, len, &l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = smi_strip(l.line[i]), *cells[SUMMARY_CELLS_MAX], *tok[24];
                const char *bus = NULL;
                bool numbers;
                uint32_t v[4];
                size_t nc;
                int nt;

                if (strstr(s, "Bus-Id")) {
                        seen_header = true;
                        section = SECTION_GPUS;
                        continue;
                }
                if (strstr(s, "MIG devices:")) {
                        section = SECTION_MIGS;
                        continue;
                }
                if (strstr(s, "Processes:")) {
                        section = SECTION_OTHER;
                        continue;
                }
                if (section != SECTION_GPUS && section != SECTION_MIGS)
                        continue;
                nc = row_cells(s, cells, ELEMENTSOF(cells));
                if (nc < 2)
                        continue;
                nt = smi_tokenize(cells[0], tok, ELEMENTSOF(tok));
                if (nt <= 0)
                        continue;

                if (section == SECTION_GPUS) {
                        char addr[NVIDIA_PCI_ADDRESS_MAX], *btok[4];
                        uint32_t index;

                        /* A GPU's first row: its index, then (next cell) its bus id. */
                        if (smi_parse_small_uint(tok[0], NVIDIA_GPUS_MAX * 16, &index) < 0 ||
                            smi_tokenize(cells[1], btok, ELEMENTSOF(btok)) <= 0 ||
                            nvidia_pci_address_normalize(btok[0], addr) < 0)
                                continue;
                        for (size_t k = 0; k < n_gpus; k++)
                                if (gpu_index[k] == index)
                                        return smi_fail(ret_error, -EBADMSG, i + 1, "GPU %u listed twice", index);
                        if (n_gpus >= NVIDIA_GPUS_MAX)
                                return smi_fail(ret_error, -E2BIG, i + 1, "more than %u GPUs", NVIDIA_GPUS_MAX);
                        gpu_index[n_gpus] = index;
                        memcpy(gpu_bus[n_gpus], addr, sizeof(addr));
                        n_gpus++;
                        continue;
                }

                /* MIG devices: "GPU GI CI MIG-Dev", four numbers (the header rows have none). */
                numbers = nt == 4;
                for (int k = 0; numbers && k < 4; k++)
                        numbers = smi_parse_small_uint(tok[k], 1024, &v[k]) >= 0;
                if (!numbers) {
                        if (smi_parse_small_uint(tok[0], 1024, &v[0]) >= 0)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "bad MIG device row");
                        continue;
                }
                for (size_t k = 0; k < n_gpus && !bus; k++)
                        if (gpu_index[k] == v[0])
                                bus = gpu_bus[k];
                if (!bus)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "MIG device of GPU %u, which the GPU table lacks",
                                        v[0]);
                for (size_t k = 0; k < n; k++)
                        if (streq(devs[k].pci_address, bus) &&
                            (devs[k].device_index == v[3] || (devs[k].gi_id == v[1] && devs[k].ci_id == v[2])))
                                return smi_fail(ret_error, -EBADMSG, i + 1, "MIG device %u of GPU %u listed twice",
                                                v[3], v[0]);
                if (n >= NVIDIA_MIG_DEVICES_MAX)
                        return smi_fail(ret_error, -E2BIG, i + 1, "more than %u MIG devices", NVIDIA_MIG_DEVICES_MAX);
                r = array_reserve_bounded((void **) &devs, &cap, n + 1, sizeof(NvidiaQMigDevice),
                                          NVIDIA_MIG_DEVICES_MAX);
                if (r < 0)
                        return r;
                devs[n] = (NvidiaQMigDevice) {
                        .device_index = v[3],
                        .gi_id = v[1],
                        .ci_id = v[2],
                        .memory_mib = cell_total_mib(cells[1]),
                };
                memcpy(devs[n].pci_address, bus, NVIDIA_PCI_ADDRESS_MAX);
                n++;
        }
        if (!seen_header)
                return smi_fail(ret_error, -EBADMSG, 0, "not the nvidia-smi summary table");

        *ret = TAKE_PTR(devs);
        *ret_n = n;
        return 0;
}
