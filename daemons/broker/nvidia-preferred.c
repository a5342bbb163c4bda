/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-preferred.c — NVIDIA preferred allocations: topology-aware for whole GPUs, distributed
 * or packed for replicas.
 *
 * Contract: see resources_nvidia_preferred_allocation() in nvidia.h. Pure: no D-Bus, no I/O.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/util.h"
#include "daemons/broker/nvidia-internal.h"

#define EXHAUSTIVE_MAX 10000

/* ---- preferred allocation ---- */

typedef struct Cand {
        const NvidiaDevice *d;
        const NvidiaUnit *u;
} Cand;

static int cand_cmp(const void *a, const void *b) {
        const Cand *x = a, *y = b;

        if (x->u->order != y->u->order)
                return x->u->order < y->u->order ? -1 : 1;
        return x->d->replica < y->d->replica ? -1 : x->d->replica > y->d->replica;
}

/* The topology score of a set: summed over its pairs, compared in field order: NVLinks,
 * pairs under one PCIe switch (PIX/PXB), pairs on one NUMA node (PIX/PXB/PHB/NODE or
 * equal NumaNode), and last, within those, pairs behind one host bridge (PHB). */
typedef struct Score {
        int64_t v[4];
} Score;

static void score_add(Score *a, const Score *b) {
        for (size_t i = 0; i < ELEMENTSOF(a->v); i++)
                a->v[i] += b->v[i];
}

static void score_sub(Score *a, const Score *b) {
        for (size_t i = 0; i < ELEMENTSOF(a->v); i++)
                a->v[i] -= b->v[i];
}

static int score_cmp(const Score *a, const Score *b) {
        for (size_t i = 0; i < ELEMENTSOF(a->v); i++)
                if (a->v[i] != b->v[i])
                        return a->v[i] < b->v[i] ? -1 : 1;
        return 0;
}

/* Among two equally scored sets, the one holding the lowest candidate the other lacks. */
static bool mask_first(uint64_t a, uint64_t b) {
        uint64_t d = a ^ b;

        return d && (a & (d & -d));
}

/* Chooses need of m (<= 64) candidates maximising the summed pair scores (w: m x m,
 * wm: each candidate's score against must_include). Returns the chosen mask. */
static uint64_t topo_choose(const Score *w, const Score *wm, size_t m, size_t need) {
        uint64_t combos = 1, best_mask = 0;
        Score best = {}, total = {}, all_wm = {}, deg[64];
        size_t idx[64], k;
        bool have = false, exclude;

        for (size_t i = 0; i < need && combos <= EXHAUSTIVE_MAX; i++)
                combos = combos * (m - i) / (i + 1);

        if (combos > EXHAUSTIVE_MAX) {
                /* Greedy: add the candidate with the best gain against what is chosen. */
                Score gain[64];
                uint64_t mask = 0;

                for (size_t i = 0; i < m; i++)
                        gain[i] = wm[i];
                for (size_t n = 0; n < need; n++) {
                        size_t pick = m;

                        for (size_t i = 0; i < m; i++)
                                if (!(mask & (UINT64_C(1) << i)) &&
                                    (pick == m || score_cmp(&gain[i], &gain[pick]) > 0))
                                        pick = i;
                        mask |= UINT64_C(1) << pick;
                        for (size_t i = 0; i < m; i++)
                                score_add(&gain[i], &w[i * m + pick]);
                }
                return mask;
        }

        /* Enumerate the smaller side: the chosen set, or the set left out. score(C \ X) =
         * pairs(C) - sum deg(x) + pairs(X) + wm(C) - wm(X). */
        exclude = need > m - need;
        k = exclude ? m - need : need;
        for (size_t i = 0; i < m; i++) {
                deg[i] = (Score) {};
                for (size_t j = 0; j < m; j++)
                        if (j != i)
                                score_add(&deg[i], &w[i * m + j]);
                for (size_t j = i + 1; j < m; j++)
                        score_add(&total, &w[i * m + j]);
                score_add(&all_wm, &wm[i]);
        }

        for (size_t i = 0; i < k; i++)
                idx[i] = i;
        for (;;) {
                Score score = {};
                uint64_t mask = 0;

                for (size_t i = 0; i < k; i++) {
                        mask |= UINT64_C(1) << idx[i];
                        for (size_t j = i + 1; j < k; j++)
                                score_add(&score, &w[idx[i] * m + idx[j]]);
                }
                if (exclude) {
                        score_add(&score, &total);
                        score_add(&score, &all_wm);
                        for (size_t i = 0; i < k; i++) {
                                score_sub(&score, &deg[idx[i]]);
                                score_sub(&score, &wm[idx[i]]);
                        }
                        mask = (m == 64 ? UINT64_MAX : (UINT64_C(1) << m) - 1) & ~mask;
                } else
                        for (size_t i = 0; i < k; i++)
                                score_add(&score, &wm[idx[i]]);
                if (!have || score_cmp(&score, &best) > 0 ||
                    (score_cmp(&score, &best) == 0 && mask_first(mask, best_mask))) {
                        best = score;
                        best_mask = mask;
                        have = true;
                }

                /* Next combination in lexicographic order. */
                size_t i = k;
                while (i > 0 && idx[i - 1] == m - k + i - 1)
                        i--;
                if (i == 0)
                        break;
                idx[i - 1]++;
                for (size_t j = i; j < k; j++)
                        idx[j] = idx[j - 1] + 1;
        }
        return best_mask;
}

/* Pair scores of the GPUs nodes[0..n) into m (n x n): each GPU's links are walked once
 * and their peers found by binary search. */
typedef struct NodeRef {
        const char *id;
        size_t i;
} NodeRef;

static int node_ref_cmp(const void *a, const void *b) {
        return strcmp(((const NodeRef *) a)->id, ((const NodeRef *) b)->id);
}

static int pair_matrix(const GpuInfo * const *nodes, size_t n, Score *m) {
        _cleanup_free_ NodeRef *refs = NULL;

        refs = calloc(n + 1, sizeof(NodeRef));
        if (!refs)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                refs[i] = (NodeRef) { .id = nodes[i]->id, .i = i };
        qsort(refs, n, sizeof(NodeRef), node_ref_cmp);
        for (size_t i = 0; i < n; i++) {
                for (size_t l = 0; l < nodes[i]->n_links; l++) {
                        const GpuLinkInfo *link = &nodes[i]->links[l];
                        NodeRef key = { .id = link->peer }, *f;

                        if (!link->peer || !link->type)
                                continue;
                        f = bsearch(&key, refs, n, sizeof(NodeRef), node_ref_cmp);
                        if (!f || f->i == i)
                                continue;
                        Score *x = &m[i * n + f->i], *y = &m[f->i * n + i];
                        if (streq(link->type, "NV"))
                                x->v[0] = y->v[0] = link->nvlinks;
                        if (streq(link->type, "PIX") || streq(link->type, "PXB"))
                                x->v[1] = y->v[1] = x->v[2] = y->v[2] = x->v[3] = y->v[3] = 1;
                        if (streq(link->type, "PHB"))
                                x->v[2] = y->v[2] = x->v[3] = y->v[3] = 1;
                        if (streq(link->type, "NODE"))
                                x->v[2] = y->v[2] = 1;
                }
                for (size_t j = 0; j < n; j++)
                        if (j != i && nodes[i]->numa_node >= 0 && nodes[i]->numa_node == nodes[j]->numa_node)
                                m[i * n + j].v[2] = 1;
        }
        return 0;
}

#define MARK_RESULT     1U
#define MARK_CAND       2U
#define MARK_COUNTED    4U
#define MARK_HELD       8U

/* One preferred allocation being built: the result so far and a mark per device of the
 * resource (by position in the table's range). */
typedef struct Pick {
        const Resources *r;
        const NvidiaState *s;
        const NvidiaResource *res;
        char **result;
        size_t n_result, size;
        uint8_t *mark;
        ResourceError *e;
} Pick;

static size_t pick_pos(const Pick *p, const NvidiaDevice *d) {
        return (size_t) (d - &p->s->table.devices[p->res->start]);
}

static int pick_oom(Pick *p) {
        return resource_error_set(p->e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");
}

static int pick_take(Pick *p, const NvidiaDevice *d) {
        if (!(p->result[p->n_result] = strdup(d->id)))
                return pick_oom(p);
        p->n_result++;
        p->mark[pick_pos(p, d)] |= MARK_RESULT;
        return 0;
}

/* Whole GPUs: topology over the candidates (<= NVIDIA_GPUS_MAX) and the GPUs already
 * taken. */
static int pick_topology(Pick *p, const Cand *cand, size_t n_cand, size_t need) {
        _cleanup_free_ const GpuInfo **nodes = NULL;
        _cleanup_free_ Score *full = NULL, *w = NULL;
        Score wm[64] = {};
        size_t m = MIN(n_cand, (size_t) 64), t = m;
        uint64_t mask;
        int k;

        nodes = calloc(m + p->n_result + 1, sizeof(GpuInfo *));
        if (!nodes)
                return pick_oom(p);
        for (size_t i = 0; i < m; i++)
                nodes[i] = &nvidia_unit_gpu(p->r, cand[i].u)->info;
        for (size_t j = 0; j < p->n_result; j++) {
                const NvidiaDevice *d = nvidia_find_device(p->s, p->res, p->result[j]);

                if (d)
                        nodes[t++] = &nvidia_unit_gpu(p->r, &p->s->table.units[d->unit])->info;
        }
        full = calloc(t * t + 1, sizeof(Score));
        w = calloc(m * m + 1, sizeof(Score));
        if (!full || !w || pair_matrix(nodes, t, full) < 0)
                return pick_oom(p);
        for (size_t i = 0; i < m; i++) {
                for (size_t j = 0; j < m; j++)
                        w[i * m + j] = full[i * t + j];
                for (size_t j = m; j < t; j++)
                        score_add(&wm[i], &full[i * t + j]);
        }
        mask = topo_choose(w, wm, m, MIN(need, m));
        for (size_t i = 0; i < m; i++)
                if (mask & (UINT64_C(1) << i)) {
                        k = pick_take(p, cand[i].d);
                        if (k < 0)
                                return k;
                }
        return 0;
}

/* Replicas: distributed or packed over their units. */
static int pick_replicas(Pick *p, const Cand *cand, size_t n_cand, const NvidiaDevice * const *avail,
                         size_t n_avail, char * const *held, size_t need) {
        _cleanup_free_ uint32_t *in_use = NULL, *next = NULL, *end = NULL;
        const NvidiaState *s = p->s;
        const NvidiaResource *res = p->res;
        size_t n_ulist = 0;
        int k;

        in_use = calloc(s->table.n_units + 1, sizeof(uint32_t));
        next = calloc(n_cand + 1, sizeof(uint32_t));
        end = calloc(n_cand + 1, sizeof(uint32_t));
        if (!in_use || !next || !end)
                return pick_oom(p);
        /* In use: every device of the resource, minus the available ones (not
         * must_include: those count, as upstream), plus the held ones still
         * listed as available. */
        for (size_t i = 0; i < res->n; i++)
                in_use[s->table.devices[res->start + i].unit]++;
        for (size_t i = 0; i < n_cand; i++)
                in_use[cand[i].d->unit]--;
        for (size_t i = 0; i < n_avail; i++) {
                const NvidiaDevice *d = avail[i];

                /* Unhealthy available ids are not in use either. */
                if (!d || d->healthy || (p->mark[pick_pos(p, d)] & (MARK_RESULT | MARK_COUNTED)))
                        continue;
                p->mark[pick_pos(p, d)] |= MARK_COUNTED;
                in_use[d->unit]--;
        }
        for (char * const *i = held; i && *i; i++) {
                const NvidiaDevice *d = nvidia_find_device(s, res, *i);

                if (!d || (p->mark[pick_pos(p, d)] & MARK_HELD) ||
                    !(p->mark[pick_pos(p, d)] & (MARK_CAND | MARK_COUNTED)))
                        continue;
                p->mark[pick_pos(p, d)] |= MARK_HELD;
                in_use[d->unit]++;
        }
        /* The units in candidate order, each with its next unpicked candidate. */
        for (size_t i = 0; i < n_cand; i++) {
                if (i == 0 || cand[i - 1].d->unit != cand[i].d->unit)
                        next[n_ulist++] = (uint32_t) i;
                end[n_ulist - 1] = (uint32_t) i + 1;
        }
        for (size_t n = 0; n < need; n++) {
                size_t best = SIZE_MAX, c;

                for (size_t j = 0; j < n_ulist; j++) {
                        size_t u;

                        if (next[j] >= end[j])
                                continue;
                        u = cand[next[j]].d->unit;
                        if (best == SIZE_MAX) {
                                best = j;
                                continue;
                        }
                        c = cand[next[best]].d->unit;
                        if (s->replica_policy == REPLICA_POLICY_PACKED ? in_use[u] > in_use[c] : in_use[u] < in_use[c])
                                best = j;
                }
                if (best == SIZE_MAX)
                        break;
                c = next[best]++;
                k = pick_take(p, cand[c].d);
                if (k < 0)
                        return k;
                in_use[cand[c].d->unit]++;
        }
        return 0;
}

int resources_nvidia_preferred_allocation(const Resources *r, const char *resource,
                                          char * const *available, char * const *must_include,
                                          char * const *held, int32_t size, char ***ret,
                                          ResourceError *e) {
        const NvidiaState *s = nvidia_state(r);
        const NvidiaResource *res;
        _cleanup_strv_free_ char **result = NULL;
        _cleanup_free_ Cand *cand = NULL;
        _cleanup_free_ uint8_t *mark = NULL;
        _cleanup_free_ const NvidiaDevice **avail = NULL;
        size_t n_cand = 0, n_avail, need;
        bool replicas = false, mig = false;
        Pick p;
        int k;

        k = resources_check_preferred(r, resource, (char * const *[]) { must_include, available, held }, 3,
                                      size, e);
        if (k < 0)
                return k;

        res = s ? nvidia_table_resource(&s->table, resource) : NULL;
        result = calloc((size_t) size + 1, sizeof(char *));
        n_avail = strv_length(available);
        cand = calloc(n_avail + 1, sizeof(Cand));
        avail = calloc(n_avail + 1, sizeof(NvidiaDevice *));
        mark = calloc(res ? res->n + 1 : 1, sizeof(uint8_t));
        if (!result || !cand || !avail || !mark)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");
        p = (Pick) { .r = r, .s = s, .res = res, .result = result, .size = (size_t) size, .mark = mark, .e = e };

        /* must_include first: the kubelet's decision, even for an unhealthy device. */
        for (char * const *i = must_include; i && *i && p.n_result < p.size; i++) {
                const NvidiaDevice *d = nvidia_find_device(s, res, *i);

                if (d && !(mark[pick_pos(&p, d)] & MARK_RESULT) && (k = pick_take(&p, d)) < 0)
                        return k;
        }
        for (size_t i = 0; i < n_avail; i++) {
                const NvidiaDevice *d = avail[i] = nvidia_find_device(s, res, available[i]);

                if (!d || !d->healthy || (mark[pick_pos(&p, d)] & (MARK_RESULT | MARK_CAND)))
                        continue;
                mark[pick_pos(&p, d)] |= MARK_CAND;
                cand[n_cand++] = (Cand) { .d = d, .u = &s->table.units[d->unit] };
                replicas = replicas || d->sharing != SHARING_NONE;
                mig = mig || s->table.units[d->unit].mig >= 0;
        }
        if (n_cand > 0)
                qsort(cand, n_cand, sizeof(Cand), cand_cmp);
        need = MIN(p.size - p.n_result, n_cand);

        if (!replicas && mig) {
                /* MIG devices: the available order (upstream has no preference either). */
                for (size_t i = 0; i < n_avail && p.n_result < p.size; i++) {
                        const NvidiaDevice *d = avail[i];

                        if (d && d->healthy && !(mark[pick_pos(&p, d)] & MARK_RESULT) &&
                            (k = pick_take(&p, d)) < 0)
                                return k;
                }
        } else if (need == 0 || need == n_cand) {
                for (size_t i = 0; i < need; i++)
                        if ((k = pick_take(&p, cand[i].d)) < 0)
                                return k;
        } else if (!replicas)
                k = pick_topology(&p, cand, n_cand, need);
        else
                k = pick_replicas(&p, cand, n_cand, avail, n_avail, held, need);
        if (k < 0)
                return k;

        *ret = TAKE_PTR(result);
        return 0;
}

int nvidia_preferred(const Resources *r, const char *resource, char * const *available,
                            char * const *must_include, int32_t size, char ***ret, ResourceError *e) {
        return resources_nvidia_preferred_allocation(r, resource, available, must_include, NULL, size, ret, e);
}

