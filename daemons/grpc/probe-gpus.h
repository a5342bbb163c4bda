/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * probe-gpus.h — kgpu-grpcd's own copy of the root probe's io.kgpu.Gpu1 objects, the
 * reference every Allocate answer is checked against (gate.c), never the broker's word.
 *
 * Contract: pure data, no I/O, no logging. The probe is root, but what it sends is read
 * as hostile all the same: only the properties the gate needs are kept (Id, Vendor,
 * Driver, Uuid, Index, CardNode, RenderNode, DeviceNodes, ByPathNodes, MeiNodes, MigDevices,
 * MpsPipeDirectory), each bounded and validated before anything changes:
 *  - ids (Id, Uuid, MIG UUIDs): 1..PROBE_GPUS_ID_MAX bytes of printable ASCII without
 *    blanks or ',' (Uuid may be empty); Vendor and Driver likewise, up to
 *    PROBE_GPUS_WORD_MAX, may be empty; Index -1..PROBE_GPUS_INDEX_MAX;
 *  - device nodes (CardNode, RenderNode, DeviceNodes, MIG capability nodes): "" (the two
 *    single ones only) or an absolute path below /dev/ of printable ASCII without blanks,
 *    no empty, "." or ".." component, no trailing '/', at most PROBE_GPUS_PATH_MAX bytes;
 *    ByPathNodes: such paths directly in /dev/dri/by-path/; MeiNodes: "/dev/mei<digits>";
 *    MpsPipeDirectory: "" or such a path anywhere but "/";
 *  - at most PROBE_GPUS_NODES_MAX paths per list, PROBE_GPUS_MIG_MAX MIG devices (index
 *    and UUID unique) per GPU, PROBE_GPUS_MAX objects, object paths below
 *    /io/kgpu/Probe1/gpu/ one level deep.
 * A GPU object with an invalid value is never half applied: -EBADMSG, and the caller
 * drops it (its devices then grant nothing). Strings of a ProbeGpu are never NULL.
 * Functions return 0 (or 1, said where) or a negative errno, and write ret_* only on
 * success. Lookups by device id go through a sorted index rebuilt on every change
 * (O(log n) on the Allocate path); a key two objects claim finds neither.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>

#include "common/cleanup.h"

#define PROBE_GPUS_MAX          1024u   /* GPU objects kept */
#define PROBE_GPUS_NODES_MAX    16u     /* paths per DeviceNodes, ByPathNodes, MeiNodes, MIG capability list */
#define PROBE_GPUS_MIG_MAX      64u     /* MigDevices entries per GPU */
#define PROBE_GPUS_ID_MAX       256u    /* bytes in Id, Uuid, a MIG UUID */
#define PROBE_GPUS_WORD_MAX     64u     /* bytes in Vendor, Driver */
#define PROBE_GPUS_PATH_MAX     256u    /* bytes in a path */
#define PROBE_GPUS_INDEX_MAX    4095    /* Gpu1.Index: -1 or 0..this */
#define PROBE_GPUS_OBJECT_PATH_MAX 1024u

/* One Gpu1.MigDevices entry, as far as the gate needs it. */
typedef struct ProbeMig {
        uint32_t index;         /* "MIG ... Device N" */
        char *uuid;
        char **nodes;           /* capability nodes, never NULL */
} ProbeMig;

typedef struct ProbeGpu {
        char *path;             /* the probe's object path, the key */
        char *id;               /* PCI address (Intel) or GPU UUID (NVIDIA) */
        char *vendor;           /* "intel", "nvidia" */
        char *driver;
        char *uuid;             /* "" for Intel */
        int32_t index;          /* -1 unknown */
        char *card_node;        /* "" none */
        char *render_node;      /* "" none */
        char **device_nodes;    /* never NULL */
        char **by_path_nodes;   /* never NULL */
        char **mei_nodes;       /* never NULL: /dev/mei<N>, granted by Intel monitoring */
        ProbeMig *migs;
        size_t n_migs;
        char *mps_pipe_directory; /* "" while MPS is off */
} ProbeGpu;

/* One lookup key: an Id, a Uuid or a MIG UUID, pointing into its ProbeGpu. */
typedef struct ProbeGpuKey {
        const char *key;
        size_t gpu;             /* index in ProbeGpus.gpus, SIZE_MAX: claimed twice */
        int32_t mig;            /* index in the GPU's migs, -1: the GPU itself */
} ProbeGpuKey;

typedef struct ProbeGpus {
        ProbeGpu **gpus;        /* sorted by object path */
        size_t n_gpus;
        ProbeGpuKey *keys;      /* sorted by key */
        size_t n_keys;
        bool known;             /* a whole inventory (GetManagedObjects) was read once */
} ProbeGpus;

bool probe_gpus_object_path_valid(const char *path);

int probe_gpu_new(const char *path, ProbeGpu **ret);
ProbeGpu *probe_gpu_free(ProbeGpu *g);
DEFINE_CLEANUP_FUNC(ProbeGpu, probe_gpu_free);

/* Reads an a{sv} of io.kgpu.Gpu1 properties (GetAll, PropertiesChanged, one interface of
 * InterfacesAdded) over g. The whole dict is consumed; -EBADMSG (g unchanged) when a
 * kept property has the wrong type or an invalid value; other errors are the message's. */
int probe_gpu_apply_properties(ProbeGpu *g, sd_bus_message *m);

/* Reads an a{sa{sv}} (InterfacesAdded, an entry of GetManagedObjects) for the object at
 * path: 1 and a new ProbeGpu in *ret if io.kgpu.Gpu1 is there with valid properties, 0
 * if it is not there, -EBADMSG (consumed) if its properties are invalid. */
int probe_gpus_read_interfaces(sd_bus_message *m, const char *path, ProbeGpu **ret);

ProbeGpus *probe_gpus_new(void);
ProbeGpus *probe_gpus_free(ProbeGpus *s);
DEFINE_CLEANUP_FUNC(ProbeGpus, probe_gpus_free);

/* Reads a GetManagedObjects reply (a{oa{sa{sv}}}) and, only if the message is well
 * formed, replaces every object with what it lists and sets known. Objects with invalid
 * properties, bad paths or beyond PROBE_GPUS_MAX are left out and counted in
 * *ret_skipped. -EBADMSG: malformed, nothing changed. */
int probe_gpus_replace(ProbeGpus *s, sd_bus_message *reply, size_t *ret_skipped);
/* Adds g (taken, also on failure) or replaces the object of its path. -E2BIG when
 * PROBE_GPUS_MAX objects are kept already. */
int probe_gpus_put(ProbeGpus *s, ProbeGpu *g);
/* Returns 1 if there was an object at path. */
int probe_gpus_remove(ProbeGpus *s, const char *path);
ProbeGpu *probe_gpus_get(const ProbeGpus *s, const char *path);
/* Rebuilds the lookup index; call after changing a ProbeGpu in place (e.g. with
 * probe_gpu_apply_properties()). put, remove and replace do it themselves. */
int probe_gpus_reindex(ProbeGpus *s);

/* The GPU whose Id or Uuid is key[0..len) (*ret_mig -1), or that has a MIG device of
 * that UUID (*ret_mig its index in migs); NULL if none or claimed twice. */
const ProbeGpu *probe_gpus_find(const ProbeGpus *s, const char *key, size_t len, int32_t *ret_mig);
