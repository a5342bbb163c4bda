/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mps-client.h — the broker asks the probe to run MPS for the GPUs its config puts under
 * MPS (io.kgpu.Probe1.SetMps), and to stop it where the config no longer does.
 *
 * Contract:
 *  - What to ask comes from resources_nvidia_mps_requests() (nvidia.h: per GPU under
 *    MPS the largest slice's limits, which each client's own limits narrow;
 *    SetMps(false) for a GPU whose MpsState is not "" while the config puts no MPS on
 *    it).
 *  - mps_client_sync() compares those requests with what it last asked the probe for,
 *    per GPU object, and sends SetMps (asynchronously, never blocking the broker) where
 *    they differ. force (the probe (re)appeared on the bus, a reload) forgets what was
 *    sent and asks again for every GPU under MPS: a restarted probe runs no MPS daemon
 *    until told. SetMps(false) is sent once per change; once MpsState is "" again a
 *    later stray MPS is stopped again. Failures are logged with the probe's error and
 *    not retried until the next forced sync, a new GPU or a change of limits; except a
 *    SetMps(true) the probe refused (io.kgpu.Error.Refused: its own kgpu.yaml does not
 *    put the GPU under MPS, typically not reloaded yet when `systemctl reload
 *    kgpu.target` reloaded the broker first): then every GPU is asked again (a forced
 *    sync; the same limits run nothing in the probe) after 1, 2, 4, ... 32 s, until it
 *    is accepted, and no more after that until the next forced sync. Without a probe on
 *    the bus nothing is sent.
 */
#pragma once

#include <stdbool.h>

typedef struct Manager Manager;
typedef struct MpsClient MpsClient;

MpsClient *mps_client_free(MpsClient *c);
int mps_client_sync(Manager *m, bool force);
