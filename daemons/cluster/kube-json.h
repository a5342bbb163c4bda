/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kube-json.h — pure readers of the Kubernetes API server's JSON, fed from memory.
 *
 * Contract: nothing here does I/O or logs above debug. kube_json_parse() turns one
 * buffer into one json-c value: at most KUBE_JSON_DEPTH_MAX levels of nesting, no
 * trailing bytes besides white space, else -EBADMSG. The readers take such a value and
 * return 0 with their ret_* set, or -EBADMSG when the object is not what the API server
 * documents (wrong kind, missing or mistyped field, a string holding NUL bytes or
 * beyond KUBE_STRING_MAX), with a short reason in *ret_reason when that is not NULL
 * (a static string). Strings handed out are copies (caller frees) unless said borrowed:
 * borrowed ones live as long as the json_object they came from.
 *
 * GasPod is the GAS tuple of one Pending pod that carries the annotation gas-ts
 * (io.kgpu.Broker1.SetGasPods): uid, namespace, name, the values of gas-ts,
 * gas-container-cards and gas-container-tiles ("" when absent), and for each of
 * spec.containers in order its resources.limits named gpu.intel.com/... with integer
 * quantities. Bounds are those the broker enforces, so a pod read here is never the
 * reason SetGasPods is refused.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "common/cleanup.h"

#define KUBE_JSON_DEPTH_MAX 64
#define KUBE_STRING_MAX 4096            /* bytes in a string sent to the broker */
#define KUBE_CONTAINERS_MAX 64          /* containers per pod (SetGasPods) */
#define KUBE_LIMITS_MAX 64              /* gpu.intel.com/ limits per container */
#define KUBE_GAS_PREFIX "gpu.intel.com/"

int kube_json_parse(const char *buf, size_t len, json_object **ret);
static inline void json_object_putp(json_object **o) {
        if (*o)
                json_object_put(*o);
}

/* A metav1.Status (kind "Status"): code (0 when absent), reason and message ("" when
 * absent). */
typedef struct KubeStatus {
        int code;
        char *reason;
        char *message;
} KubeStatus;
void kube_status_done(KubeStatus *s);
int kube_status_read(json_object *o, KubeStatus *ret, const char **ret_reason);

/* A List (kind ending in "List"): metadata.resourceVersion (borrowed, non-empty) and
 * items (borrowed array, possibly empty). */
int kube_list_read(json_object *o, const char **ret_rv, json_object **ret_items, const char **ret_reason);

/* metadata.resourceVersion of any object (borrowed, non-empty). */
int kube_object_rv(json_object *o, const char **ret_rv, const char **ret_reason);

/* A Node's label `label`: *ret_value a copy of its value, NULL when the label is unset.
 * *ret_name (borrowed) is metadata.name. */
int kube_node_label(json_object *node, const char *label, const char **ret_name, char **ret_value,
                    const char **ret_reason);

typedef struct GasContainer {
        size_t n_limits;
        char **names;                   /* "gpu.intel.com/i915", ... */
        int64_t *counts;
} GasContainer;

typedef struct GasPod {
        char *uid, *namespace, *name;
        char *ts, *cards, *tiles;
        size_t n_containers;
        GasContainer *containers;
} GasPod;

GasPod *gas_pod_free(GasPod *p);
DEFINE_CLEANUP_FUNC(GasPod, gas_pod_free);
bool gas_pod_equal(const GasPod *a, const GasPod *b);

/* metadata.uid of a Pod (borrowed), for DELETED events and the store's key. */
int kube_pod_uid(json_object *pod, const char **ret_uid, const char **ret_reason);
/* The GAS tuple of a Pod: *ret NULL (and 0) when the pod is not Pending or has no
 * gas-ts annotation; -EBADMSG when it does but breaks a bound or the API's types. */
int kube_pod_gas_read(json_object *pod, GasPod **ret, const char **ret_reason);

/* A Kubernetes quantity that is a whole number: digits with an optional decimal
 * (k M G T P E) or binary (Ki Mi Gi Ti Pi Ei) suffix, within int64. -EINVAL else. */
int kube_quantity_integer(const char *s, int64_t *ret);

typedef enum KubeWatchType {
        KUBE_WATCH_ADDED,
        KUBE_WATCH_MODIFIED,
        KUBE_WATCH_DELETED,
        KUBE_WATCH_BOOKMARK,
        KUBE_WATCH_ERROR,
} KubeWatchType;

const char *kube_watch_type_to_string(KubeWatchType t);
/* One watch event {"type": ..., "object": {...}}: the object borrowed. */
int kube_watch_event_read(json_object *ev, KubeWatchType *ret_type, json_object **ret_object,
                          const char **ret_reason);
