/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * sharing.h — the sharing limit (intel.sharedDevNum): never more than N containers on
 * one GPU.
 *
 * Contract:
 *  - sharing_check() decides whether one Allocate call (its container requests) may be
 *    granted, given the allocations already recorded. An allocation counts as a holder
 *    of a GPU when it is of the same resource, of this boot (or either boot id unknown),
 *    holds an id of that GPU ("<gpu>" or "<gpu>-<n>", also for n no longer advertised,
 *    e.g. after sharedDevNum was lowered), and none of its ids was handed out again
 *    later — by a newer allocation or by this call: the kubelet gives a device id to a
 *    new container only once the old one is gone (the same rule as reconcile.h, which
 *    deletes what PodResources no longer reports). Each container of the call counts
 *    once on each GPU it touches. If a GPU would get more than the limit, the call is
 *    refused with KGPU_ERROR_EXHAUSTED naming the GPU, the holders and the limit.
 *  - Pure: sharing_check() reads only its arguments; O(A log A) in the ids of the
 *    allocations of the resource. It is the reference: sharing_check_index() gives the
 *    same answer from the store's holder index (holders.h) in O(ids of the call), and
 *    sharing_check_store() uses the index, or, when the store has none (it could not be
 *    built), collects the store's allocations and calls sharing_check().
 *  - Returns 0 (allowed), a negative errno with *e filled (refused or failed).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "daemons/broker/holders.h"
#include "daemons/broker/resources.h"
#include "daemons/broker/store.h"

typedef struct SharingRecord {
        const char *resource;
        char * const *device_ids;
        const char *boot_id;
} SharingRecord;

/* records: oldest first. requests[i]: strv of ids, already validated by
 * resources_check_allocate(). */
int sharing_check(const Resources *r, const char *resource, const char *boot_id,
                  const SharingRecord *records, size_t n_records,
                  char ** const *requests, size_t n_requests, ResourceError *e);

int sharing_check_index(const Holders *h, const Resources *r, const char *resource,
                        char ** const *requests, size_t n_requests, ResourceError *e);

int sharing_check_store(Store *s, const Resources *r, const char *resource, const char *boot_id,
                        char ** const *requests, size_t n_requests, ResourceError *e);
