/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * sharing.c — counts the holders of each GPU an Allocate touches (intel.sharedDevNum).
 *
 * Contract: see sharing.h. No logging above debug; the caller logs the refusal.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/util.h"
#include "daemons/broker/policy.h"
#include "daemons/broker/sharing.h"

static bool id_on_gpu(const char *id, const char *gpu) {
        size_t l;
        uint32_t share;

        if (streq(id, gpu))
                return true;
        return policy_split_id(id, &l, &share) >= 0 && strlen(gpu) == l && strncmp(id, gpu, l) == 0;
}

typedef struct IdRef {
        const char *id;
        size_t record;          /* index into the records; n_records: this call */
} IdRef;

static int id_ref_cmp(const void *a, const void *b) {
        const IdRef *x = a, *y = b;
        int c = strcmp(x->id, y->id);

        if (c != 0)
                return c;
        return x->record < y->record ? -1 : x->record > y->record ? 1 : 0;
}

/* The GPUs one call touches, each with the number of its containers on it (a container
 * counts once per GPU). */
typedef struct CallGpus {
        uint32_t limit;
        size_t total;           /* ids in the call */
        const Gpu **gpus;
        uint32_t *holders;
        size_t n;
        Device *owned;
        const Device *devices;
        size_t n_devices;
} CallGpus;

static void call_gpus_done(CallGpus *c) {
        c->gpus = mfree(c->gpus);
        c->holders = mfree(c->holders);
        c->owned = mfree(c->owned);
}

/* 0: nothing to check (no limit, or no GPU in the call); 1: c is filled; or an error. */
static int call_gpus(const Resources *r, const char *resource, char ** const *requests, size_t n_requests,
                     CallGpus *c, ResourceError *e) {
        size_t total = 0;
        int k;

        c->limit = resources_share_limit(r, resource);
        if (c->limit == 0)
                return 0;
        for (size_t i = 0; i < n_requests; i++)
                total += strv_length(requests[i]);
        c->total = total;
        k = resources_devices(r, resource, &c->owned, &c->devices, &c->n_devices);
        if (k < 0)
                return resource_error_set(e, KGPU_ERROR_UNKNOWN_RESOURCE, k, "Cannot list devices of '%s'", resource);
        c->gpus = calloc(total + 1, sizeof(Gpu *));
        c->holders = calloc(total + 1, sizeof(uint32_t));
        if (!c->gpus || !c->holders)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");

        for (size_t i = 0; i < n_requests; i++) {
                for (char * const *j = requests[i]; j && *j; j++) {
                        const Device *dev = resources_find_device(c->devices, c->n_devices, *j);
                        bool again = false;
                        size_t g;

                        if (!dev || !dev->gpu)
                                continue;
                        for (char * const *p = requests[i]; p < j && !again; p++) {
                                const Device *o = resources_find_device(c->devices, c->n_devices, *p);

                                again = o && o->gpu == dev->gpu;
                        }
                        if (again)
                                continue;
                        for (g = 0; g < c->n && c->gpus[g] != dev->gpu; g++)
                                ;
                        if (g == c->n)
                                c->gpus[c->n++] = dev->gpu;
                        c->holders[g]++;
                }
        }
        return c->n > 0;
}

static int over_limit(const CallGpus *c, const char *resource, ResourceError *e) {
        uint32_t limit = c->limit;

        for (size_t g = 0; g < c->n; g++)
                if (c->holders[g] > limit)
                        return resource_error_set(e, KGPU_ERROR_EXHAUSTED, -EBUSY,
                                                  "GPU %s of resource '%s' would be held by %" PRIu32
                                                  " containers; at most %" PRIu32 " may share it "
                                                  "(intel.sharedDevNum)",
                                                  c->gpus[g]->info.id, resource, c->holders[g], limit);
        return 0;
}

int sharing_check(const Resources *r, const char *resource, const char *boot_id,
                  const SharingRecord *records, size_t n_records,
                  char ** const *requests, size_t n_requests, ResourceError *e) {
        _cleanup_(call_gpus_done) CallGpus c = {};
        _cleanup_free_ bool *same = NULL, *dead = NULL;
        _cleanup_free_ IdRef *refs = NULL;
        size_t n_refs = 0;
        int k;

        k = call_gpus(r, resource, requests, n_requests, &c, e);
        if (k <= 0)
                return k;

        /* Superseded: one of its ids went to a newer allocation of the resource (of any
         * boot, touching any GPU) or to this call. */
        same = calloc(n_records + 1, sizeof(bool));
        dead = calloc(n_records + 1, sizeof(bool));
        if (!same || !dead)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");
        for (size_t a = 0; a < n_records; a++)
                if (streq_ptr(records[a].resource, resource)) {
                        same[a] = true;
                        n_refs += strv_length(records[a].device_ids);
                }
        refs = calloc(n_refs + c.total + 1, sizeof(IdRef));
        if (!refs)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");
        n_refs = 0;
        for (size_t a = 0; a < n_records; a++)
                for (char * const *i = same[a] ? records[a].device_ids : NULL; i && *i; i++)
                        refs[n_refs++] = (IdRef) { .id = *i, .record = a };
        for (size_t i = 0; i < n_requests; i++)
                for (char * const *j = requests[i]; j && *j; j++)
                        refs[n_refs++] = (IdRef) { .id = *j, .record = n_records };
        qsort(refs, n_refs, sizeof(IdRef), id_ref_cmp);
        for (size_t i = 0; i + 1 < n_refs; i++)
                if (streq(refs[i].id, refs[i + 1].id) && refs[i].record < n_records &&
                    refs[i + 1].record != refs[i].record)
                        dead[refs[i].record] = true;

        /* Holders: live allocations of this boot (or an unknown one) on the call's GPUs. */
        for (size_t a = 0; a < n_records; a++) {
                const SharingRecord *rec = &records[a];

                if (!same[a] || dead[a] ||
                    (!isempty(boot_id) && !isempty(rec->boot_id) && !streq(boot_id, rec->boot_id)))
                        continue;
                for (size_t g = 0; g < c.n; g++)
                        for (char * const *i = rec->device_ids; i && *i; i++)
                                if (id_on_gpu(*i, c.gpus[g]->info.id)) {
                                        c.holders[g]++;
                                        break;
                                }
        }
        return over_limit(&c, resource, e);
}

static int ptr_cmp(const void *a, const void *b) {
        uintptr_t x = (uintptr_t) *(const void * const *) a, y = (uintptr_t) *(const void * const *) b;

        return x < y ? -1 : x > y;
}

int sharing_check_index(const Holders *h, const Resources *r, const char *resource,
                        char ** const *requests, size_t n_requests, ResourceError *e) {
        _cleanup_(call_gpus_done) CallGpus c = {};
        _cleanup_free_ const HolderRecord **replaced = NULL;
        size_t n_replaced = 0;
        int k;

        k = call_gpus(r, resource, requests, n_requests, &c, e);
        if (k <= 0)
                return k;

        /* The holders the call replaces: the live claimers of its ids, each once. */
        replaced = calloc(c.total + 1, sizeof(HolderRecord *));
        if (!replaced)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");
        for (size_t i = 0; i < n_requests; i++)
                for (char * const *j = requests[i]; j && *j; j++) {
                        const HolderRecord *rec;

                        k = holders_live_claimer(h, resource, *j, &rec);
                        if (k < 0)
                                return resource_error_set(e, KGPU_ERROR_STATE, k, "Cannot look up holders: %s",
                                                          strerror(-k));
                        if (rec)
                                replaced[n_replaced++] = rec;
                }
        qsort(replaced, n_replaced, sizeof(HolderRecord *), ptr_cmp);

        for (size_t g = 0; g < c.n; g++) {
                uint32_t n;

                k = holders_count(h, resource, c.gpus[g]->info.id, &n);
                if (k < 0)
                        return resource_error_set(e, KGPU_ERROR_STATE, k, "Cannot look up holders: %s",
                                                  strerror(-k));
                for (size_t i = 0; i < n_replaced; i++)
                        if ((i == 0 || replaced[i] != replaced[i - 1]) && holders_touches(replaced[i], c.gpus[g]->info.id))
                                n--;
                c.holders[g] += n;
        }
        return over_limit(&c, resource, e);
}

typedef struct Collected {
        SharingRecord *records;
        size_t n, allocated;
} Collected;

/* Borrows the store's strings: nothing changes the store during the check. */
static int collect_one(uint64_t id, const char *resource, char * const *device_ids,
                       uint64_t created_usec, const char *boot_id, bool seen, void *userdata) {
        Collected *c = userdata;

        if (array_reserve((void **) &c->records, &c->allocated, c->n + 1, sizeof(SharingRecord)) < 0)
                return -ENOMEM;
        c->records[c->n++] = (SharingRecord) { .resource = resource, .device_ids = device_ids, .boot_id = boot_id };
        return 0;
}

int sharing_check_store(Store *s, const Resources *r, const char *resource, const char *boot_id,
                        char ** const *requests, size_t n_requests, ResourceError *e) {
        Collected c = {};
        const Holders *h;
        int k;

        if (resources_share_limit(r, resource) == 0)
                return 0;
        h = store_get_holders(s);
        if (h)
                return sharing_check_index(h, r, resource, requests, n_requests, e);
        /* No index (it could not be built): the reference scan. */
        k = store_foreach_allocation(s, 0, collect_one, &c);
        if (k >= 0)
                k = sharing_check(r, resource, boot_id, c.records, c.n, requests, n_requests, e);
        else
                k = resource_error_set(e, KGPU_ERROR_STATE, k, "Failed to read the state database: %s",
                                       strerror(-k));
        free(c.records);
        return k;
}
