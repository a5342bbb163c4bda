/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * inventory.h — the probe's last GPU inventory, kept in the state database.
 *
 * Contract: inventory_save() writes m->resources' GPUs to the store (one transaction)
 * whenever the probe changed them; inventory_load() puts the saved GPUs into
 * m->resources at start, before the probe client runs, so that a broker restarted
 * while the probe is down serves the last known inventory; the probe's next sync
 * replaces it (GPUs it no longer reports are removed). Both are no-ops without a store;
 * failures are logged (warning) and ignored: the inventory is a cache, allocations
 * never depend on it.
 */
#pragma once

typedef struct Manager Manager;

void inventory_save(Manager *m);
/* Returns the number of GPUs loaded. */
int inventory_load(Manager *m);
