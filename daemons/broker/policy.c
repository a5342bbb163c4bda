/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * policy.c — shared-GPU ids and the none/balanced/packed preferred-allocation policies.
 *
 * Contract: see policy.h. Pure. Work is O(n log n + need * GPUs) for balanced and
 * O(n log n) otherwise; the callers bound n and need (RESOURCES_IDS_MAX).
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "daemons/broker/policy.h"

int policy_split_id(const char *id, size_t *ret_gpu_len, uint32_t *ret_share) {
        const char *dash, *p;
        uint32_t v = 0;
        size_t digits;

        if (!id)
                return -EINVAL;
        dash = strrchr(id, '-');
        if (!dash || dash == id)
                return -EINVAL;
        p = dash + 1;
        digits = strlen(p);
        if (digits == 0 || digits > POLICY_SHARE_DIGITS_MAX || (p[0] == '0' && digits > 1))
                return -EINVAL;
        for (; *p; p++) {
                if (*p < '0' || *p > '9')
                        return -EINVAL;
                v = v * 10 + (uint32_t) (*p - '0');
        }
        *ret_gpu_len = (size_t) (dash - id);
        *ret_share = v;
        return 0;
}

int policy_id_cmp(const char *a, const char *b) {
        size_t la, lb, l;
        uint32_t sa, sb;
        bool ha, hb;
        int c;

        if (!a || !b)
                return a ? 1 : b ? -1 : 0;
        ha = policy_split_id(a, &la, &sa) >= 0;
        hb = policy_split_id(b, &lb, &sb) >= 0;
        if (!ha)
                la = strlen(a);
        if (!hb)
                lb = strlen(b);

        /* Compare the GPU parts as strings of their own length. */
        l = MIN(la, lb);
        c = memcmp(a, b, l);
        if (c != 0)
                return c;
        if (la != lb)
                return la < lb ? -1 : 1;
        /* Same GPU part: the plain id first, then shares by number. */
        if (ha != hb)
                return ha ? 1 : -1;
        if (!ha || sa == sb)
                return 0;
        return sa < sb ? -1 : 1;
}

static int candidate_cmp(const void *x, const void *y, void *userdata) {
        const PolicyCandidate *c = userdata;
        size_t i = *(const size_t *) x, j = *(const size_t *) y;
        int k;

        k = strcmp(c[i].gpu, c[j].gpu);
        if (k != 0)
                return k;
        if (c[i].share != c[j].share)
                return c[i].share < c[j].share ? -1 : 1;
        k = policy_id_cmp(c[i].id, c[j].id);
        if (k != 0)
                return k;
        return i < j ? -1 : i > j ? 1 : 0;
}

/* Indices 0..n-1 sorted by (GPU, share). */
static int sorted_indices(const PolicyCandidate *c, size_t n, size_t **ret) {
        size_t *idx;

        idx = calloc(n ?: 1, sizeof(size_t));
        if (!idx)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                idx[i] = i;
        qsort_r(idx, n, sizeof(size_t), candidate_cmp, (void *) c);
        *ret = idx;
        return 0;
}

static size_t select_none(const PolicyCandidate *c, size_t n, size_t need, size_t *out) {
        _cleanup_free_ bool *taken = NULL;
        size_t m = 0;

        taken = calloc(n ?: 1, sizeof(bool));
        if (!taken)
                return SIZE_MAX;
        /* First one share of each distinct GPU, in the order given... */
        for (size_t i = 0; i < n && m < need; i++) {
                bool seen = false;

                for (size_t j = 0; j < m && !seen; j++)
                        seen = streq(c[out[j]].gpu, c[i].gpu);
                if (seen)
                        continue;
                taken[i] = true;
                out[m++] = i;
        }
        /* ...then whatever is left, in the order given. */
        for (size_t i = 0; i < n && m < need; i++)
                if (!taken[i])
                        out[m++] = i;
        return m;
}

static size_t select_balanced(const PolicyCandidate *c, size_t n, size_t need, size_t *out) {
        _cleanup_free_ size_t *idx = NULL, *start = NULL, *left = NULL;
        size_t groups = 0, m = 0;

        if (sorted_indices(c, n, &idx) < 0)
                return SIZE_MAX;
        start = calloc(n ?: 1, sizeof(size_t));
        left = calloc(n ?: 1, sizeof(size_t));
        if (!start || !left)
                return SIZE_MAX;
        for (size_t i = 0; i < n; i++) {
                if (i == 0 || !streq(c[idx[i]].gpu, c[idx[i - 1]].gpu))
                        start[groups++] = i;
                left[groups - 1]++;
        }
        while (m < need) {
                size_t best = SIZE_MAX;

                for (size_t g = 0; g < groups; g++)
                        if (left[g] > 0 && (best == SIZE_MAX || left[g] > left[best]))
                                best = g;
                if (best == SIZE_MAX)
                        break;
                out[m++] = idx[start[best]++];
                left[best]--;
        }
        return m;
}

static size_t select_packed(const PolicyCandidate *c, size_t n, size_t need, size_t *out) {
        _cleanup_free_ size_t *idx = NULL;
        size_t m = MIN(n, need);

        if (sorted_indices(c, n, &idx) < 0)
                return SIZE_MAX;
        memcpy(out, idx, m * sizeof(size_t));
        return m;
}

int policy_select(ConfigAllocationPolicy p, const PolicyCandidate *c, size_t n, size_t need,
                  size_t *ret_indices) {
        size_t m;

        if (need == 0 || n == 0)
                return 0;
        switch (p) {
        case ALLOCATION_POLICY_NONE:
                m = select_none(c, n, need, ret_indices);
                break;
        case ALLOCATION_POLICY_BALANCED:
                m = select_balanced(c, n, need, ret_indices);
                break;
        case ALLOCATION_POLICY_PACKED:
                m = select_packed(c, n, need, ret_indices);
                break;
        default:
                return -EINVAL;
        }
        if (m == SIZE_MAX)
                return -ENOMEM;
        return (int) m;
}
