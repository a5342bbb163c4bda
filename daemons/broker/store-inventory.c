/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store-inventory.c — the probe's last inventory, saved and read back.
 *
 * Contract: see store.h and store-internal.h.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/holders.h"
#include "daemons/broker/store-internal.h"

#define STORE_NODES_MAX 4096    /* joined device node lists read back */

int store_save_inventory(Store *s, const StoreInventoryGpu *gpus, size_t n) {
        sqlite3_stmt *st = NULL;
        int rc, r;

        if (!s || (n > 0 && !gpus))
                return -EINVAL;

        r = store_step_done(s, STMT_BEGIN);
        if (r < 0)
                return r;
        r = store_exec(s->db, "DELETE FROM inventory");
        if (r < 0)
                goto rollback;
        rc = sqlite3_prepare_v2(s->db,
                                "INSERT OR REPLACE INTO inventory (path, id, vendor, driver, card_node, render_node, "
                                "health_reason, device_nodes, by_path_nodes, numa_node, device_id, healthy) "
                                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)", -1, &st, NULL);
        if (rc != SQLITE_OK) {
                r = store_sqlite_to_errno(rc) ?: -EIO;
                goto rollback;
        }
        for (size_t i = 0; i < n; i++) {
                const StoreInventoryGpu *g = &gpus[i];

                if (isempty(g->path) || isempty(g->id))
                        continue;
                if (store_bind_text(st, 1, g->path) < 0 || store_bind_text(st, 2, g->id) < 0 ||
                    store_bind_text(st, 3, g->vendor) < 0 || store_bind_text(st, 4, g->driver) < 0 ||
                    store_bind_text(st, 5, g->card_node) < 0 || store_bind_text(st, 6, g->render_node) < 0 ||
                    store_bind_text(st, 7, g->health_reason) < 0 ||
                    (g->device_nodes ? store_bind_text(st, 8, g->device_nodes) < 0
                                     : sqlite3_bind_null(st, 8) != SQLITE_OK) ||
                    (g->by_path_nodes ? store_bind_text(st, 9, g->by_path_nodes) < 0
                                      : sqlite3_bind_null(st, 9) != SQLITE_OK) ||
                    sqlite3_bind_int64(st, 10, g->numa_node) != SQLITE_OK ||
                    sqlite3_bind_int64(st, 11, g->device_id) != SQLITE_OK ||
                    sqlite3_bind_int(st, 12, g->healthy ? 1 : 0) != SQLITE_OK) {
                        r = -ENOMEM;
                        goto rollback;
                }
                rc = sqlite3_step(st);
                sqlite3_reset(st);
                sqlite3_clear_bindings(st);
                if (rc != SQLITE_DONE) {
                        r = store_sqlite_to_errno(rc) ?: -EIO;
                        goto rollback;
                }
        }
        sqlite3_finalize(st);
        st = NULL;
        r = store_step_done(s, STMT_COMMIT);
        if (r < 0)
                goto rollback;
        return 0;

rollback:
        sqlite3_finalize(st);
        if (!sqlite3_get_autocommit(s->db))
                (void) store_step_done(s, STMT_ROLLBACK);
        return r;
}

int store_foreach_inventory(Store *s, StoreInventoryFunc cb, void *userdata) {
        sqlite3_stmt *st = NULL;
        int rc, r = 0, n = 0;

        rc = sqlite3_prepare_v2(s->db,
                                "SELECT path, id, vendor, driver, card_node, render_node, health_reason, "
                                "device_nodes, by_path_nodes, numa_node, device_id, healthy FROM inventory "
                                "ORDER BY path LIMIT 4096", -1, &st, NULL);
        if (rc != SQLITE_OK)
                return store_sqlite_to_errno(rc) ?: -EIO;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                StoreInventoryGpu g = {
                        .path = store_column_text(st, 0),
                        .id = store_column_text(st, 1),
                        .vendor = store_column_text(st, 2),
                        .driver = store_column_text(st, 3),
                        .card_node = store_column_text(st, 4),
                        .render_node = store_column_text(st, 5),
                        .health_reason = store_column_text(st, 6),
                        .device_nodes = store_column_text_max(st, 7, STORE_NODES_MAX),
                        .by_path_nodes = store_column_text_max(st, 8, STORE_NODES_MAX),
                };
                int64_t numa = sqlite3_column_int64(st, 9), dev = sqlite3_column_int64(st, 10),
                        healthy = sqlite3_column_int64(st, 11);

                if (isempty(g.path) || isempty(g.id) || !g.vendor || !g.driver || !g.card_node ||
                    !g.render_node || !g.health_reason || numa < -1 || numa > INT32_MAX ||
                    dev < 0 || dev > UINT16_MAX || (healthy != 0 && healthy != 1) ||
                    (sqlite3_column_type(st, 7) != SQLITE_NULL && !g.device_nodes) ||
                    (sqlite3_column_type(st, 8) != SQLITE_NULL && !g.by_path_nodes)) {
                        log_debug("Skipping a malformed inventory row.");
                        continue;
                }
                g.numa_node = (int32_t) numa;
                g.device_id = (uint16_t) dev;
                g.healthy = healthy == 1;
                r = cb(&g, userdata);
                if (r < 0)
                        break;
                n++;
        }
        if (r >= 0 && rc != SQLITE_DONE)
                r = store_sqlite_to_errno(rc) ?: -EIO;
        sqlite3_finalize(st);
        return r < 0 ? r : n;
}

