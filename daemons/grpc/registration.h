/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * registration.h — /v1beta1.Registration/Register on the kubelet socket.
 *
 * Contract: registration_start() (re)starts registering the plugin now: any pending
 * attempt or backoff timer is dropped. Each attempt asks the probe for a socket
 * connected to the kubelet (kubelet-link.c) and sends Register on it; nothing is tried
 * while the kubelet is absent, the probe is away or the plugin has no socket yet (their
 * return starts it again). A failed attempt is retried with exponential
 * backoff (100 ms doubling to 5 s) until it succeeds or registration_cancel() is called;
 * right after the kubelet appeared, a kubelet not accepting yet is tried again quickly.
 * Each attempt has a deadline of Config.register_timeout_ms. Success is logged with
 * KGPU_MESSAGE_REGISTERED and updates the manager's STATUS.
 */
#pragma once

#include <stdbool.h>

#include "daemons/grpc/plugin.h"

#define REGISTRATION_BACKOFF_MIN_USEC (100 * 1000ULL)
#define REGISTRATION_BACKOFF_MAX_USEC (5 * 1000 * 1000ULL)
/* For REGISTRATION_FAST_PERIOD_USEC after the kubelet's socket appeared, a kubelet that
 * does not accept yet is tried again 1 ms later, doubling to 10 ms. */
#define REGISTRATION_FAST_MIN_USEC (1000ULL)
#define REGISTRATION_FAST_MAX_USEC (10 * 1000ULL)
#define REGISTRATION_FAST_PERIOD_USEC (10 * 1000 * 1000ULL)

int registration_start(Plugin *p);
void registration_cancel(Plugin *p);
/* True while an attempt is in flight or a retry is scheduled. */
bool registration_active(Plugin *p);
/* Next backoff after a failure with the current one (pure; exposed for tests). */
uint64_t registration_next_backoff(uint64_t current_usec);
