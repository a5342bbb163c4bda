/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * holders.h — an in-memory index of the recorded allocations for the sharing limit, so
 * that an Allocate's check costs O(ids of the call) instead of a scan of every recorded
 * allocation.
 *
 * Contract:
 *  - The index mirrors a set of allocations (id, resource, device ids, boot id). The store
 *    feeds it: holders_add() after a commit that recorded an allocation (ids strictly
 *    increasing, as the store hands them out), holders_remove() after a commit that
 *    deleted one.
 *  - An allocation is *superseded* when one of its device ids is also in a newer
 *    allocation of the same resource (whatever its boot): the kubelet hands an id to a
 *    new container only once the old one is gone. It *counts* when it is not superseded
 *    and its boot id matches the index's (either one empty counts as matching).
 *  - It *touches* a GPU key k when one of its ids is k or "k-<n>" (a share of k; see
 *    policy_split_id()). holders_count() is the number of counting allocations of a
 *    resource touching k, kept up to date by add/remove, never computed by a scan.
 *  - holders_live_claimer() returns the counting allocation that holds id now (the newest
 *    allocation with that id, if it counts), else NULL; holders_touches() tells whether
 *    such an allocation touches k. Together they let sharing.c discount the holders a
 *    call replaces.
 *  - A failed add or remove (-ENOMEM) leaves the index unusable: the caller drops it and rebuilds
 *    it from the store (sharing.c falls back to the full scan meanwhile).
 *  - Keys and ids are compared as bytes; strings are copied.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cleanup.h"

typedef struct Holders Holders;
typedef struct HolderRecord HolderRecord;

int holders_new(const char *boot_id, Holders **ret);
Holders *holders_free(Holders *h);
DEFINE_CLEANUP_FUNC(Holders, holders_free);

/* -EINVAL: id not above every id added so far, empty resource or no device id. */
int holders_add(Holders *h, uint64_t id, const char *resource, char * const *device_ids, const char *boot_id);
/* Unknown ids are ignored. A negative return (-ENOMEM) leaves the index unusable. */
int holders_remove(Holders *h, uint64_t id);

size_t holders_size(const Holders *h);
/* 0 and *ret, or a negative errno (then nothing is known: refuse rather than guess). */
int holders_count(const Holders *h, const char *resource, const char *gpu_key, uint32_t *ret);
/* *ret = NULL when no counting allocation claims device_id. */
int holders_live_claimer(const Holders *h, const char *resource, const char *device_id,
                         const HolderRecord **ret);
bool holders_touches(const HolderRecord *rec, const char *gpu_key);
/* Every allocation of resource holding device_id, counting or not, of any boot, oldest
 * first: *ret_n of them at *ret, owned by the index and valid until its next change. The
 * store's superseding reads this instead of an SQL index on device ids. */
int holders_claimers(const Holders *h, const char *resource, const char *device_id,
                     HolderRecord * const **ret, size_t *ret_n);
uint64_t holders_record_id(const HolderRecord *rec);
