/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gas.h — GPU Aware Scheduling's pod annotations for the Intel resource manager mode
 * (intel.resourceManager): the parsed set of this node's Pending pods that kgpu-clusterd
 * sends with Broker1.SetGasPods, and the choice of the pod and container an Allocate
 * serves.
 *
 * Contract (see docs/INTEL.md, "Resource manager"):
 *  - gas_parse_cards() reads one value of `gas-container-cards`: '|' separates the
 *    containers that use the GPU, ',' the cards of one container, each "card<N>" (N
 *    decimal, no sign, no leading zero, at most GAS_CARD_DIGITS_MAX digits). Empty
 *    segments ("card0||card1", a leading or trailing '|') are skipped when counting
 *    containers, as the Intel plugin does; an empty item inside a segment, any other
 *    character or too many entries is -EINVAL.
 *  - gas_parse_tiles() reads one value of `gas-container-tiles`: '|' per container as
 *    above, ',' per card, each "card<N>:gt<T>[+gt<T>...]"; it gives one Level Zero
 *    affinity mask per non-empty segment: "<i>.<T>" for the i-th card of the segment
 *    (0-based) and each of its tiles, joined with ','. "" (or only '|') is no tiles.
 *  - gas_set_new() validates a whole SetGasPods argument (bounds below, UTF-8 free:
 *    printable ASCII only, unique non-empty uids, limit names under "gpu.intel.com/",
 *    counts >= 0, parsable annotations); any violation is -EINVAL with *ret_error set,
 *    and the caller keeps its old set. gas_set_carry() copies what was consumed of
 *    each pod (by uid) from the old set to the new one.
 *  - gas_pick() chooses, for one Allocate of `count` devices of `resource`, the pod
 *    with the oldest `gas-ts` (byte order, as the Intel plugin compares them; ties by
 *    uid) whose next unserved container that requests `resource` (limit > 0) requests
 *    exactly `count` and has a cards segment; *ret_container is that container's index
 *    among the pod's containers requesting `resource`. A container is served when
 *    gas_consume() was called for it or when `served(pod)` (the kubelet's PodResources,
 *    through the broker's records) says more of the pod's containers hold the resource.
 *    -ENOENT when no pod fits.
 *  - Pure: no I/O, no logging.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cleanup.h"

#define GAS_PODS_MAX 4096u
#define GAS_CONTAINERS_MAX 64u
#define GAS_STRING_MAX 4096u
#define GAS_LIMITS_MAX 64u              /* gpu.intel.com/ limits of one container */
#define GAS_CARD_DIGITS_MAX 5u
#define GAS_TILE_DIGITS_MAX 4u
#define GAS_CARDS_PER_CONTAINER_MAX 256u

#define GAS_RESOURCE_PREFIX "gpu.intel.com/"
#define GAS_TS_ANNOTATION "gas-ts"
#define GAS_CARDS_ANNOTATION "gas-container-cards"
#define GAS_TILES_ANNOTATION "gas-container-tiles"
#define GAS_AFFINITY_ENV "ZE_AFFINITY_MASK"

typedef struct GasLimit {
        char *name;
        int64_t count;
} GasLimit;

typedef struct GasContainer {
        GasLimit *limits;
        size_t n_limits;
} GasContainer;

typedef struct GasPod {
        char *uid, *namespace, *name, *ts;
        char ***cards;                  /* per non-empty cards segment: "cardN" strv */
        size_t n_cards;
        char **masks;                   /* per non-empty tiles segment: affinity mask */
        size_t n_masks;
        GasContainer *containers;
        size_t n_containers;
        size_t consumed;                /* containers served by gas_consume() */
} GasPod;

typedef struct GasSet {
        GasPod *pods;
        size_t n_pods;
} GasSet;

/* The raw arguments of SetGasPods, borrowed. */
typedef struct GasPodArgs {
        const char *uid, *namespace, *name, *ts, *cards, *tiles;
        const GasContainer *containers;
        size_t n_containers;
} GasPodArgs;

int gas_parse_cards(const char *s, char ****ret, size_t *ret_n);
int gas_parse_tiles(const char *s, char ***ret, size_t *ret_n);
void gas_cards_free(char ***cards, size_t n);

int gas_set_new(const GasPodArgs *args, size_t n, GasSet **ret, char **ret_error);
GasSet *gas_set_free(GasSet *s);
DEFINE_CLEANUP_FUNC(GasSet, gas_set_free);
void gas_set_carry(GasSet *new_set, const GasSet *old_set);

/* How many containers requesting a resource a pod has, and the count of its i-th one. */
size_t gas_pod_containers_using(const GasPod *p, const char *resource);
int64_t gas_pod_request(const GasPod *p, const char *resource, size_t index);

typedef size_t (*GasServedFunc)(const GasPod *p, const char *resource, void *userdata);

int gas_pick(const GasSet *s, const char *resource, size_t count, GasServedFunc served, void *userdata,
             const GasPod **ret_pod, size_t *ret_container);
/* Marks the container gas_pick() chose as served. */
void gas_consume(GasSet *s, const GasPod *p, size_t container);
