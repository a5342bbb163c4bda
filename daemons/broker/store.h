/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store.h — the broker's allocation state in SQLite (<state directory>/kgpu.db).
 *
 * Contract:
 *  - store_open() creates the file 0600 if missing (never follows a symlink), checks it
 *    (quick_check, schema version in PRAGMA user_version) BEFORE any write, and only
 *    then switches to WAL with synchronous=FULL and foreign keys on. A file that is
 *    not a database, corrupt, of a newer schema, or unreadable is refused with a
 *    negative errno and a message in *ret_error; the file is never deleted, rewritten
 *    or checkpointed in that case.
 *      -EBADMSG          not a SQLite database, corrupt, or not a kgpu database
 *      -EPROTONOSUPPORT  schema version newer than STORE_SCHEMA_VERSION
 *      -EACCES/-EPERM/-ELOOP/... the file could not be opened
 *  - store_allocate() records every container request of one Allocate call in ONE
 *    transaction (BEGIN IMMEDIATE ... COMMIT). It returns 0 only after COMMIT returned
 *    SQLITE_OK; on any failure the transaction is rolled back and nothing is visible.
 *    In the same transaction it deletes the allocations the call SUPERSEDES: every
 *    stored allocation of the same resource (whatever its boot) holding one of the
 *    call's device ids. The kubelet hands a device id to a new container only once the
 *    container that had it is gone (or it asks again for the same container), so the
 *    newest allocation of an id is its only live holder; holders.h and reconcile.h
 *    already count the older ones as dead, this makes the file agree. Hence no device
 *    id is ever held by more than one stored allocation of a resource, and repeating
 *    Allocate does not grow the state.
 *  - With a cap set (store_set_max_allocations()), an Allocate that would leave more
 *    allocations stored than the cap (after its supersedings) is refused with -EDQUOT
 *    and changes nothing.
 *  - The WAL file is bounded: kgpu.db-wal stays under STORE_WAL_SIZE_MAX bytes plus one
 *    transaction. SQLite's own autocheckpoint is replaced: once a commit leaves
 *    STORE_WAL_CHECKPOINT_FRAMES frames in the WAL, the store asks for a checkpoint
 *    (store_set_checkpoint_func(): the broker runs store_checkpoint() from its event loop
 *    after the reply is sent) or, without a taker or once STORE_WAL_FRAMES_MAX frames
 *    are reached, checkpoints right after the commit. A checkpoint never waits for a
 *    reader and never weakens durability: commits are synced to the WAL
 *    (synchronous=FULL) before any checkpoint copies them; the WAL file is then reused
 *    from its start, and cut back to STORE_WAL_SIZE_MAX (journal_size_limit) if one
 *    large transaction made it longer. Only a reader holding a snapshot of its own
 *    (another program with the file open) can delay the reuse.
 *  - store_reconcile() deletes released allocations and records the live holders of
 *    kept ones in ONE transaction, with the same all-or-nothing guarantee. What would
 *    not change anything (unknown ids, a holder already recorded) is not written; a call
 *    that changes nothing runs no transaction at all.
 *  - The broker is the database's only writer: the allocations are read once at open
 *    and kept in memory, and every commit updates that copy, so listing them reads no
 *    SQL. store_get_holders() gives the index of them the sharing check uses.
 *  - Older schema versions are migrated step by step, each step one transaction: a
 *    crash leaves a complete older or newer version. Version 4 keeps one row per
 *    allocation with its device ids packed into one column and ids chosen by the store
 *    (never handed out twice), so that an Allocate writes one page in the common case.
 *  - Rows read back are validated (types, lengths, UTF-8, the packed device ids: see
 *    store-internal.h); a bad row is skipped with its reason, the others are kept, and
 *    the file is not rewritten (store_get_skipped_rows()).
 *  - No logging above debug.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cleanup.h"

#define STORE_SCHEMA_VERSION 4
#define STORE_FILE_NAME "kgpu.db"
#define STORE_BUSY_TIMEOUT_MS 200

/* The WAL bound (see the contract). A frame is one page (4096 bytes) plus a 24-byte
 * header; an Allocate writes 1 frame in the common case since schema v4 (5 before). */
#define STORE_WAL_CHECKPOINT_FRAMES 256
#define STORE_WAL_FRAMES_MAX (2 * STORE_WAL_CHECKPOINT_FRAMES)
#define STORE_WAL_SIZE_MAX (STORE_WAL_FRAMES_MAX * (4096 + 24) + 32)

typedef struct Store Store;

int store_open(const char *directory, const char *boot_id, Store **ret, char **ret_error);
Store *store_free(Store *s);
DEFINE_CLEANUP_FUNC(Store, store_free);

const char *store_get_path(const Store *s);
/* Boot id recorded by the previous run ("" if none, e.g. a new database). */
const char *store_get_previous_boot_id(const Store *s);
/* Allocation rows skipped as malformed when the allocations were last read (at open), and
 * why the first one was ("allocation row 7: device id 2: empty device id"). */
size_t store_get_skipped_rows(const Store *s, const char **ret_first);

/* An allocation store_allocate() deleted, and the request whose ids claimed it. */
typedef struct StoreSuperseded {
        uint64_t id;
        size_t request;
} StoreSuperseded;

/*
 * Records one allocation per container request (requests[i] is a strv of device ids)
 * for resource, created at created_usec (CLOCK_REALTIME), and deletes the allocations
 * they supersede (see the contract). On success ret_ids (if not NULL, n_requests
 * entries) receives the allocation ids, and *ret_superseded (if not NULL; free()) the
 * superseded ones, oldest first, *ret_n_superseded of them. -EDQUOT: over the cap;
 * -EINVAL: no request, an empty one, an id in more than one place of the call, or ids
 * the store could not read back (more than 1024 in a request, an id empty, over 256
 * bytes, not UTF-8, or with a line break).
 */
int store_allocate(Store *s, const char *resource, char ** const *requests, size_t n_requests,
                   uint64_t created_usec, uint64_t *ret_ids,
                   StoreSuperseded **ret_superseded, size_t *ret_n_superseded);

/* The most allocations the store keeps (0: no cap); checked by store_allocate() only, so
 * lowering it below what is stored refuses new allocations until reconciliation has
 * released enough, and drops nothing. */
void store_set_max_allocations(Store *s, size_t max);
size_t store_get_max_allocations(const Store *s);
/* The allocations stored now (those store_foreach_allocation() visits). */
size_t store_get_n_allocations(Store *s);

/* Calls cb for each of the newest max allocations (0: all) in id order, oldest first.
 * Rows that failed validation at open are not there. cb must not change the store. A
 * negative return of cb stops and is returned. Returns the number visited. seen: a
 * holder has been recorded for it (store_reconcile()), i.e. the kubelet's PodResources
 * has reported it at least once; it is read back from the file, so it survives a restart. */
typedef int (*StoreAllocationFunc)(uint64_t id, const char *resource, char * const *device_ids,
                                   uint64_t created_usec, const char *boot_id, bool seen, void *userdata);
int store_foreach_allocation(Store *s, size_t max, StoreAllocationFunc cb, void *userdata);

/* The holder index of the committed allocations (holders.h), owned by the store and
 * valid until its next change; NULL when it cannot be built (out of memory). */
typedef struct Holders Holders;
const Holders *store_get_holders(Store *s);

/* Called (from inside a commit) when the WAL has grown to STORE_WAL_CHECKPOINT_FRAMES:
 * the taker runs store_checkpoint() soon, outside of any store call. It must not call
 * the store itself. Without a taker the store checkpoints right after the commit. */
typedef void (*StoreCheckpointFunc)(Store *s, void *userdata);
void store_set_checkpoint_func(Store *s, StoreCheckpointFunc cb, void *userdata);
/* Copies the WAL into the database file (passive: waits for nobody), so the next commit
 * writes the WAL from its start. 0: everything copied; -EBUSY: a reader kept some of it
 * (tried again at the next threshold); other negative errno: SQLite failed. */
int store_checkpoint(Store *s);
/* Frames in the WAL after the last commit or checkpoint (tests, logs). */
size_t store_get_wal_frames(const Store *s);

/* Test hook: called inside the transaction of store_allocate() right before COMMIT;
 * a negative return aborts (rollback) with that error. */
typedef int (*StoreBeforeCommitFunc)(Store *s, void *userdata);
void store_set_before_commit(Store *s, StoreBeforeCommitFunc cb, void *userdata);

/* Reconciliation (reconcile.c decides, this applies). Strings are not owned unless
 * filled by store_get_holder() (then free with store_holder_done()). */
typedef struct StoreHolder {
        uint64_t id;                    /* allocation id */
        char *pod_namespace;
        char *pod_name;
        char *container_name;
} StoreHolder;

/* Deletes the allocations release[] and records holders[] (seen at seen_usec), all in
 * one transaction; unknown ids are ignored. A holder's pod_name must not be empty: a
 * recorded holder is what makes an allocation "seen" (see StoreAllocationFunc), and it
 * stays seen until it is deleted. */
int store_reconcile(Store *s, const uint64_t *release, size_t n_release,
                    const StoreHolder *holders, size_t n_holders, uint64_t seen_usec);
/* The holder last recorded for allocation id ("" strings if never seen); -ENOENT if the
 * allocation does not exist. */
int store_get_holder(Store *s, uint64_t id, StoreHolder *ret, uint64_t *ret_seen_usec);
void store_holder_done(StoreHolder *h);

/* The probe's last GPU inventory (inventory.c converts). Strings borrowed. device_nodes
 * and by_path_nodes are newline-joined lists, NULL when the probe sent none. */
typedef struct StoreInventoryGpu {
        const char *path;
        const char *id;
        const char *vendor;
        const char *driver;
        const char *card_node;
        const char *render_node;
        const char *health_reason;
        const char *device_nodes;
        const char *by_path_nodes;
        int32_t numa_node;
        uint16_t device_id;
        bool healthy;
} StoreInventoryGpu;

/* Replaces the saved inventory with gpus[] in one transaction. */
int store_save_inventory(Store *s, const StoreInventoryGpu *gpus, size_t n);
/* Calls cb for each valid saved GPU (malformed rows skipped); returns the count. */
typedef int (*StoreInventoryFunc)(const StoreInventoryGpu *gpu, void *userdata);
int store_foreach_inventory(Store *s, StoreInventoryFunc cb, void *userdata);
