/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * bus-creds.h — who is calling: the daemons check the sender's uid themselves, not only
 * the bus policy.
 *
 * Contract: bus_check_sender_uid() returns 0 if the sender's effective uid is 0, the
 * calling daemon's own (the same principal: it matters only for a daemon run
 * unprivileged, as in a test) or `allowed` ((uid_t) -1: none); otherwise sets io.kgpu.Error.AccessDenied naming
 * the uid and the member (or the error of the credentials query) and returns the
 * negative errno sd_bus_error_set*() gives.
 */
#pragma once

#include <sys/types.h>

#include <systemd/sd-bus.h>

int bus_check_sender_uid(sd_bus_message *message, uid_t allowed, sd_bus_error *error);
