/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-smi-topology.c — parser of nvidia-smi topo -m (see nvidia-smi.h; shared text handling in nvidia-smi-internal.h).
 */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/nvidia-smi-internal.h"
#include "daemons/probe/nvidia-smi.h"

/* ---- nvidia-smi topo -m ---- */

/* Parses one link word at s ("X", "NV12", "SYS", ...); returns its length or 0. */
static size_t link_word(const char *s, NvidiaLink *ret) {
        static const struct {
                const char *w;
                NvidiaLinkType t;
        } words[] = {
                { "X", NVIDIA_LINK_SELF }, { "PIX", NVIDIA_LINK_PIX }, { "PXB", NVIDIA_LINK_PXB },
                { "PHB", NVIDIA_LINK_PHB }, { "NODE", NVIDIA_LINK_NODE }, { "SYS", NVIDIA_LINK_SYS },
        };

        if (s[0] == 'N' && s[1] == 'V' && isdigit((unsigned char) s[2])) {
                unsigned v = 0;
                size_t k = 2;

                while (isdigit((unsigned char) s[k]) && k < 5)
                        v = v * 10 + (unsigned) (s[k++] - '0');
                if (v == 0 || v > 255)
                        return 0;
                *ret = (NvidiaLink) { .type = NVIDIA_LINK_NVLINK, .nvlinks = (uint8_t) v };
                return k;
        }
        for (size_t i = 0; i < ELEMENTSOF(words); i++) {
                size_t wl = strlen(words[i].w);

                if (strncmp(s, words[i].w, wl) == 0) {
                        *ret = (NvidiaLink) { .type = (uint8_t) words[i].t };
                        return wl;
                }
        }
        return 0;
}

/* A whole cell that is one link value. */
static bool link_cell(const char *s, NvidiaLink *ret) {
        size_t k = link_word(s, ret);

        return k > 0 && s[k] == 0;
}

/* NIC cells can be glued together in real output ("NODENODE"). */
static bool link_cells_glued(const char *s) {
        NvidiaLink dummy;

        if (isempty(s))
                return false;
        while (*s) {
                size_t k = link_word(s, &dummy);

                if (k == 0)
                        return false;
                s += k;
        }
        return true;
}

static bool cpu_list_is_valid(const char *s) {
        size_t l = strlen(s);

        return l > 0 && l < NVIDIA_CPU_AFFINITY_MAX && isdigit((unsigned char) s[0]) &&
               strspn(s, "0123456789,-") == l;
}

static int numa_parse(const char *s, int32_t *ret) {
        uint32_t v;

        if (smi_is_na(s)) {
                *ret = -1;
                return 0;
        }
        if (smi_parse_small_uint(s, 4095, &v) < 0)
                return -EBADMSG;
        *ret = (int32_t) v;
        return 0;
}

/* "GPU<n>" -> n. */
static int gpu_label(const char *s, uint32_t *ret) {
        const char *p = startswith(s, "GPU");

        if (!p || !isdigit((unsigned char) *p))
                return -EBADMSG;
        return smi_parse_small_uint(p, NVIDIA_GPUS_MAX * 16, ret);
}

#define TOPO_TOKENS_MAX (NVIDIA_TOPO_COLUMNS_MAX + 8)

/* GPU0 GPU1 ... [NIC0 ...] CPU Affinity [NUMA Affinity] [GPU NUMA ID] */
static int topo_header(NvidiaTopology *t, char *s, char **tok, size_t line, char **ret_error) {
        uint32_t v;
        int nt;

        nt = smi_tokenize(s, tok, TOPO_TOKENS_MAX);
        if (nt < 0)
                return smi_fail(ret_error, -E2BIG, line, "more than %u columns", NVIDIA_TOPO_COLUMNS_MAX);
        for (int k = 0; k < nt && gpu_label(tok[k], &v) >= 0; k++) {
                if (v != (uint32_t) k)
                        return smi_fail(ret_error, -EBADMSG, line, "column %d is '%.16s'", k, tok[k]);
                if ((uint32_t) k >= NVIDIA_GPUS_MAX)
                        return smi_fail(ret_error, -E2BIG, line, "more than %u GPUs", NVIDIA_GPUS_MAX);
                t->n_gpus++;
        }
        if (t->n_gpus == 0)
                return smi_fail(ret_error, -EBADMSG, line, "no GPU columns in the header");
        return 0;
}

/* The GPU a row is about ("GPU3 ..."), false for NIC rows and other rows. */
static bool topo_row_gpu(const char *s, uint32_t *ret) {
        char label[16];
        size_t ll = strcspn(s, " \t");

        if (ll >= sizeof(label))
                return false;
        memcpy(label, s, ll);
        label[ll] = 0;
        return gpu_label(label, ret) >= 0;
}

/* Raw output: cells are tab-separated and may be empty. */
static int topo_row_raw(NvidiaTopology *t, uint32_t g, char *s, char **tok, size_t line, char **ret_error) {
        size_t n = 0, k, rest;
        char *p = s;

        for (;;) {
                char *c = strchr(p, '\t');

                if (n >= TOPO_TOKENS_MAX)
                        return smi_fail(ret_error, -E2BIG, line, "too many cells");
                if (c)
                        *c = 0;
                tok[n++] = smi_strip(p);
                if (!c)
                        break;
                p = c + 1;
        }
        if (n < 1 + t->n_gpus)
                return smi_fail(ret_error, -EBADMSG, line, "row GPU%u has %zu cells", g, n);
        for (k = 0; k < t->n_gpus; k++)
                if (!link_cell(tok[1 + k], &t->link[g][k]))
                        return smi_fail(ret_error, -EBADMSG, line, "bad link '%.16s'", tok[1 + k]);
        rest = 1 + t->n_gpus;
        while (rest < n && link_cells_glued(tok[rest]))
                rest++;
        if (rest < n && !isempty(tok[rest])) {
                if (!cpu_list_is_valid(tok[rest]) && !smi_is_na(tok[rest]))
                        return smi_fail(ret_error, -EBADMSG, line, "bad CPU affinity '%.32s'", tok[rest]);
                if (cpu_list_is_valid(tok[rest]))
                        strcpy(t->cpu_affinity[g], tok[rest]);
        }
        rest++;
        t->numa_node[g] = -1;
        if (rest < n && numa_parse(tok[rest], &t->numa_node[g]) < 0)
                return smi_fail(ret_error, -EBADMSG, line, "bad NUMA affinity '%.32s'", tok[rest]);
        return 0;
}

/* Copies with tabs expanded: blank-separated, empty cells invisible. */
static int topo_row_expanded(NvidiaTopology *t, uint32_t g, char *s, char **tok, size_t line, char **ret_error) {
        int k, nt;

        nt = smi_tokenize(s, tok, TOPO_TOKENS_MAX);
        if (nt < 0)
                return smi_fail(ret_error, -E2BIG, line, "too many cells");
        if ((uint32_t) nt < 1 + t->n_gpus)
                return smi_fail(ret_error, -EBADMSG, line, "row GPU%u has %d cells", g, nt);
        for (uint32_t c = 0; c < t->n_gpus; c++)
                if (!link_cell(tok[1 + c], &t->link[g][c]))
                        return smi_fail(ret_error, -EBADMSG, line, "bad link '%.16s'", tok[1 + c]);
        k = 1 + (int) t->n_gpus;
        while (k < nt && link_cells_glued(tok[k]))
                k++;
        t->numa_node[g] = -1;
        if (k < nt && cpu_list_is_valid(tok[k]))
                strcpy(t->cpu_affinity[g], tok[k++]);
        if (k < nt && numa_parse(tok[k], &t->numa_node[g]) < 0)
                return smi_fail(ret_error, -EBADMSG, line, "bad NUMA affinity '%.32s'", tok[k]);
        return 0;
}

/* Every GPU has its row and is X to itself and to nothing else. */
static int topo_check(const NvidiaTopology *t, const bool *seen, char **ret_error) {
        for (uint32_t g = 0; g < t->n_gpus; g++) {
                if (!seen[g])
                        return smi_fail(ret_error, -EBADMSG, 0, "no row for GPU%u", g);
                for (uint32_t h = 0; h < t->n_gpus; h++)
                        if ((t->link[g][h].type == NVIDIA_LINK_SELF) != (g == h))
                                return smi_fail(ret_error, -EBADMSG, 0, "X off the diagonal at GPU%u/GPU%u", g, h);
        }
        return 0;
}

int nvidia_smi_parse_topology(const char *text, size_t len, NvidiaTopology **ret, char **ret_error) {
        _cleanup_(smi_lines_done) Lines l = {};
        _cleanup_free_ NvidiaTopology *t = NULL;
        _cleanup_free_ char **tok = NULL;
        bool header = false, seen[NVIDIA_GPUS_MAX] = {};
        int r;

        r = smi_lines_open(text, len, &l, ret_error);
        if (r < 0)
                return r;

        t = calloc(1, sizeof(NvidiaTopology));
        tok = calloc(TOPO_TOKENS_MAX, sizeof(char *));
        if (!t || !tok)
                return -ENOMEM;

        for (size_t i = 0; i < l.n; i++) {
                char *s = smi_strip(l.line[i]);
                uint32_t g;

                if (isempty(s))
                        continue;
                if (streq(s, "Legend:"))
                        break;

                if (!header) {
                        r = topo_header(t, s, tok, i + 1, ret_error);
                        if (r < 0)
                                return r;
                        header = true;
                        continue;
                }

                if (!topo_row_gpu(s, &g))
                        continue;       /* NIC rows and other rows */
                if (g >= t->n_gpus)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "row GPU%u but only %u GPU columns", g, t->n_gpus);
                if (seen[g])
                        return smi_fail(ret_error, -EBADMSG, i + 1, "row GPU%u twice", g);
                seen[g] = true;

                r = strchr(s, '\t') ? topo_row_raw(t, g, s, tok, i + 1, ret_error)
                                    : topo_row_expanded(t, g, s, tok, i + 1, ret_error);
                if (r < 0)
                        return r;
                if (t->link[g][g].type != NVIDIA_LINK_SELF)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "GPU%u is not X to itself", g);
        }

        if (!header)
                return smi_fail(ret_error, -EBADMSG, 0, "no topology header");
        r = topo_check(t, seen, ret_error);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(t);
        return 0;
}
