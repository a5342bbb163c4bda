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

int sharing_check(const Resources *r, const char *resource, const char *boot_id,
                  const SharingRecord *records, size_t n_records,
                  char ** const *requests, size_t n_requests, ResourceError *e) {
        _cleanup_free_ const Gpu **gpus = NULL;
        _cleanup_free_ uint32_t *holders = NULL;
        _cleanup_free_ bool *relevant = NULL, *dead = NULL;
        _cleanup_free_ IdRef *refs = NULL;
        _cleanup_free_ Device *d = NULL;
        uint32_t limit = resources_share_limit(r, resource);
        size_t n_gpus = 0, total = 0, n_refs = 0, n_d;
        int k;

        if (limit == 0)
                return 0;
        for (size_t i = 0; i < n_requests; i++)
                total += strv_length(requests[i]);
        k = resources_get_devices(r, resource, &d, &n_d);
        if (k < 0)
                return resource_error_set(e, KGPU_ERROR_UNKNOWN_RESOURCE, k, "Cannot list devices of '%s'", resource);
        gpus = calloc(total + 1, sizeof(Gpu *));
        holders = calloc(total + 1, sizeof(uint32_t));
        relevant = calloc(n_records + 1, sizeof(bool));
        dead = calloc(n_records + 1, sizeof(bool));
        if (!gpus || !holders || !relevant || !dead)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");

        /* The call's containers: each counts once on each GPU it touches. */
        for (size_t i = 0; i < n_requests; i++) {
                for (char * const *j = requests[i]; j && *j; j++) {
                        const Device *dev = resources_find_device(d, n_d, *j);
                        bool again = false;
                        size_t g;

                        if (!dev || !dev->gpu)
                                continue;
                        for (char * const *p = requests[i]; p < j && !again; p++) {
                                const Device *o = resources_find_device(d, n_d, *p);

                                again = o && o->gpu == dev->gpu;
                        }
                        if (again)
                                continue;
                        for (g = 0; g < n_gpus && gpus[g] != dev->gpu; g++)
                                ;
                        if (g == n_gpus)
                                gpus[n_gpus++] = dev->gpu;
                        holders[g]++;
                }
        }
        if (n_gpus == 0)
                return 0;

        /* Recorded allocations of this resource and boot that touch one of those GPUs. */
        for (size_t a = 0; a < n_records; a++) {
                const SharingRecord *rec = &records[a];

                if (!streq_ptr(rec->resource, resource) ||
                    (!isempty(boot_id) && !isempty(rec->boot_id) && !streq(boot_id, rec->boot_id)))
                        continue;
                for (char * const *i = rec->device_ids; i && *i && !relevant[a]; i++)
                        for (size_t g = 0; g < n_gpus && !relevant[a]; g++)
                                relevant[a] = id_on_gpu(*i, gpus[g]->info.id);
                if (relevant[a])
                        n_refs += strv_length(rec->device_ids);
        }

        /* Superseded: one of its ids went to a newer allocation or to this call. */
        refs = calloc(n_refs + total + 1, sizeof(IdRef));
        if (!refs)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");
        n_refs = 0;
        for (size_t a = 0; a < n_records; a++)
                for (char * const *i = relevant[a] ? records[a].device_ids : NULL; i && *i; i++)
                        refs[n_refs++] = (IdRef) { .id = *i, .record = a };
        for (size_t i = 0; i < n_requests; i++)
                for (char * const *j = requests[i]; j && *j; j++)
                        refs[n_refs++] = (IdRef) { .id = *j, .record = n_records };
        qsort(refs, n_refs, sizeof(IdRef), id_ref_cmp);
        for (size_t i = 0; i + 1 < n_refs; i++)
                if (streq(refs[i].id, refs[i + 1].id) && refs[i].record < n_records)
                        dead[refs[i].record] = true;

        for (size_t a = 0; a < n_records; a++) {
                if (!relevant[a] || dead[a])
                        continue;
                for (size_t g = 0; g < n_gpus; g++)
                        for (char * const *i = records[a].device_ids; i && *i; i++)
                                if (id_on_gpu(*i, gpus[g]->info.id)) {
                                        holders[g]++;
                                        break;
                                }
        }

        for (size_t g = 0; g < n_gpus; g++)
                if (holders[g] > limit)
                        return resource_error_set(e, KGPU_ERROR_EXHAUSTED, -EBUSY,
                                                  "GPU %s of resource '%s' would be held by %" PRIu32
                                                  " containers; at most %" PRIu32 " may share it "
                                                  "(intel.sharedDevNum)",
                                                  gpus[g]->info.id, resource, holders[g], limit);
        return 0;
}

typedef struct Collected {
        SharingRecord *records;
        char ***owned_ids;
        char **owned_strings;   /* resource, boot id pairs */
        size_t n, allocated;
} Collected;

static void collected_done(Collected *c) {
        for (size_t i = 0; i < c->n; i++) {
                strv_free(c->owned_ids[i]);
                free(c->owned_strings[2 * i]);
                free(c->owned_strings[2 * i + 1]);
        }
        free(c->records);
        free(c->owned_ids);
        free(c->owned_strings);
}

static int collect_one(uint64_t id, const char *resource, char * const *device_ids,
                       uint64_t created_usec, const char *boot_id, void *userdata) {
        Collected *c = userdata;

        if (c->n == c->allocated) {
                size_t na = MAX(c->allocated * 2, (size_t) 64);
                SharingRecord *r = reallocarray(c->records, na, sizeof(SharingRecord));
                if (!r)
                        return -ENOMEM;
                c->records = r;
                char ***o = reallocarray(c->owned_ids, na, sizeof(char **));
                if (!o)
                        return -ENOMEM;
                c->owned_ids = o;
                char **s = reallocarray(c->owned_strings, 2 * na, sizeof(char *));
                if (!s)
                        return -ENOMEM;
                c->owned_strings = s;
                c->allocated = na;
        }
        c->owned_ids[c->n] = strv_copy(device_ids);
        c->owned_strings[2 * c->n] = strdup(resource ?: "");
        c->owned_strings[2 * c->n + 1] = strdup(boot_id ?: "");
        if (!c->owned_ids[c->n] || !c->owned_strings[2 * c->n] || !c->owned_strings[2 * c->n + 1]) {
                strv_free(c->owned_ids[c->n]);
                free(c->owned_strings[2 * c->n]);
                free(c->owned_strings[2 * c->n + 1]);
                return -ENOMEM;
        }
        c->records[c->n] = (SharingRecord) {
                .resource = c->owned_strings[2 * c->n],
                .device_ids = c->owned_ids[c->n],
                .boot_id = c->owned_strings[2 * c->n + 1],
        };
        c->n++;
        return 0;
}

int sharing_check_store(Store *s, const Resources *r, const char *resource, const char *boot_id,
                        char ** const *requests, size_t n_requests, ResourceError *e) {
        _cleanup_(collected_done) Collected c = {};
        int k;

        if (resources_share_limit(r, resource) == 0)
                return 0;
        k = store_foreach_allocation(s, 0, collect_one, &c);
        if (k < 0)
                return resource_error_set(e, KGPU_ERROR_STATE, k, "Failed to read the state database: %s",
                                          strerror(-k));
        return sharing_check(r, resource, boot_id, c.records, c.n, requests, n_requests, e);
}
