/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kgpuctl-rescan.c — "kgpuctl rescan": ask kgpu-probed to enumerate the GPUs again.
 *
 * Contract: calls io.kgpu.Probe1.Rescan (root or the broker's user only; others get a
 * clear "access denied" line) and then prints the GPU count the probe reports.
 */

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/util.h"
#include "tools/kgpuctl.h"

int ctl_rescan(Ctl *c, int argc, char **argv) {
        sd_bus_message *reply = NULL;
        int r;

        if (argc > 1) {
                fprintf(stderr, "rescan takes no arguments.\n");
                return -EINVAL;
        }
        r = ctl_call(c, "Cannot rescan", "kgpu-probed", KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH, KGPU_PROBE_INTERFACE,
                     "Rescan", &reply, "");
        if (r < 0)
                return r;
        sd_bus_message_unref(reply);
        if (c->json)
                printf("{\"rescanned\":true}\n");
        else
                printf("Rescan done.\n");
        return 0;
}
