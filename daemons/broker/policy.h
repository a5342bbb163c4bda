/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * policy.h — shared-GPU device ids and the preferred-allocation policies (none, balanced,
 * packed) of GetPreferredAllocation.
 *
 * Contract:
 *  - Pure: no D-Bus, no I/O, no logging. Deterministic: the same input gives the same
 *    answer (no hash-map order), so tests and the kubelet see stable placements.
 *  - Shared device ids are "<gpu id>-<share>" with share 0..N-1 written in decimal
 *    without leading zeros; policy_split_id() is the inverse and accepts nothing else.
 *  - Ordering: policy_id_cmp() orders ids by GPU id (strcmp) and then share number, so
 *    "x-2" sorts before "x-10". It is a total order and injective on strings (two
 *    different strings never compare equal), so it can drive bsearch().
 *  - policy_select() implements the Intel GPU plugin's policies, with two deliberate
 *    differences: the answer is in selection order (Intel's "none" returns map order),
 *    and "packed" orders shares numerically (Intel sorts strings, which only changes the
 *    order within one GPU):
 *      none:     one share of each distinct GPU first, in the order given, then the
 *                remaining ids in the order given;
 *      balanced: repeatedly the lowest share of the GPU with the most candidates left
 *                (ties: the lowest GPU id), i.e. spread across GPUs;
 *      packed:   ids sorted by (GPU id, share), the first ones taken, i.e. fill one GPU
 *                before the next.
 *    must_include handling and filtering of unknown/unhealthy ids is the caller's.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"

#define POLICY_SHARE_DIGITS_MAX 9       /* share numbers below 10^9 */

typedef struct PolicyCandidate {
        const char *id;         /* device id */
        const char *gpu;        /* id of the GPU the device is a share of */
        uint32_t share;         /* share number, 0 when unshared */
} PolicyCandidate;

/* Splits "<gpu>-<share>": *ret_gpu_len is the length of the GPU part. Returns 0, or
 * -EINVAL when id has no valid share suffix (then nothing is written). */
int policy_split_id(const char *id, size_t *ret_gpu_len, uint32_t *ret_share);

/* strcmp-like order of device ids (see above). NULL sorts first. */
int policy_id_cmp(const char *a, const char *b);

/*
 * Chooses up to need candidates from c[0..n) by policy p and writes their indices into
 * ret_indices (room for need entries), in selection order. Candidates must have
 * distinct ids. Returns the number chosen (min(need, n)), -EINVAL for an unknown
 * policy, -ENOMEM.
 */
int policy_select(ConfigAllocationPolicy p, const PolicyCandidate *c, size_t n, size_t need,
                  size_t *ret_indices);
