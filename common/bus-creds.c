/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bus-creds.c — the sender's uid check (see bus-creds.h). */

#include <unistd.h>

#include "common/bus-creds.h"
#include "common/bus-names.h"
#include "common/cleanup.h"

int bus_check_sender_uid(sd_bus_message *message, uid_t allowed, sd_bus_error *error) {
        _cleanup_(sd_bus_creds_unrefp) sd_bus_creds *creds = NULL;
        uid_t uid;
        int r;

        r = sd_bus_query_sender_creds(message, SD_BUS_CREDS_EUID, &creds);
        if (r >= 0)
                r = sd_bus_creds_get_euid(creds, &uid);
        if (r < 0)
                return sd_bus_error_set_errnof(error, r, "Cannot determine caller: %m");

        /* Our own uid is the same principal (a daemon run unprivileged for a test). */
        if (uid == 0 || uid == geteuid() || (allowed != (uid_t) -1 && uid == allowed))
                return 0;

        return sd_bus_error_setf(error, KGPU_ERROR_ACCESS_DENIED,
                                 "Caller uid %u may not call %s.", (unsigned) uid,
                                 sd_bus_message_get_member(message));
}
