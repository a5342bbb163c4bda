/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * broker-link.h — telling io.kgpu.Broker1 what the API server says of this node.
 *
 * Contract: broker_link_start() follows the owner of io.kgpu.Broker1. After every change
 * of the label value or of the GAS pods, broker_link_schedule() arms a short defer
 * (BROKER_LINK_DEFER_USEC, so a burst of watch events makes one call); it then sends
 * SetNodeConfig(label value or "") once the Node has been listed, and SetGasPods(the
 * whole set) once the pods have been listed, each only when it differs from what the
 * broker last accepted. A new owner of io.kgpu.Broker1 (a broker restart) is sent both
 * again. The broker's refusals (io.kgpu.Error.UnknownConfig, .InvalidConfig, ...) are
 * logged and shown as BrokerError; a refused or unanswered SetNodeConfig is sent again
 * every BROKER_LINK_RETRY_USEC while the label stays (a config file added later is then
 * taken, as the NVIDIA plugin's config manager retries). A broker that is not running is
 * no error (it gets everything when it appears). Calls never start the broker.
 */
#pragma once

#include "daemons/cluster/manager.h"

#define BROKER_LINK_DEFER_USEC (100 * 1000ULL)
#define BROKER_LINK_RETRY_USEC (30 * 1000 * 1000ULL)

int broker_link_start(Manager *m);
void broker_link_schedule(Manager *m);
void broker_link_done(Manager *m);
