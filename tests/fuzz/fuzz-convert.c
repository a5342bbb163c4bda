/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-convert.c — libFuzzer target for kgpu-grpcd's translation between the kubelet's
 * protobuf requests and io.kgpu.Broker1 (daemons/grpc/convert.c), both directions.
 *
 * Contract: input byte 0 picks the case:
 *   0-2  an AllocateRequest / PreferredAllocationRequest / PreStartContainerRequest
 *        (the rest of the input, as the kubelet would send it) -> Broker1 arguments; a
 *        refusal must come with a reason, an accepted request must seal as a message;
 *   3    a GetDevices reply (fuzz-bus.h recipe) -> ListAndWatchResponse;
 *   4, 5 an Allocate / GetPreferredAllocation reply for N containers (next byte) ->
 *        AllocateResponse / PreferredAllocationResponse;
 *   6    the string helpers (resource names, socket names, ids, bus error names).
 * Every encoded answer must decode again with protobuf-c into the same number of
 * containers. A crash, a leak or a sanitizer report is a bug.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "common/log.h"
#include "common/resource-name.h"
#include "daemons/grpc/convert.h"
#include "deviceplugin.pb-c.h"
#include "fuzz-bus.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const words[] = {
        "0000:03:00.0", "0000:03:00.0-1", "GPU-3a5c1b7e-0000-0000-0000-000000000000::0",
        "/dev/dri/card0", "/dev/dri/renderD128", "rw", "rwm", "", "gpu.intel.com/i915",
        "NVIDIA_VISIBLE_DEVICES", "cdi.k8s.io/kgpu", "intel.com/gpu=0000:03:00.0", NULL,
};

/* Right shapes first (twice, to weigh them), then wrong ones. */
static const char *const devices_sigs[] = { "a(ssai)", "a(ssai)", "a(sbai)", "a(ssau)", "as", "a(ss)" };
static const char *const allocate_sigs[] = {
        "a(a{ss}a(ssb)a(sss)a{ss}as)", "a(a{ss}a(ssb)a(sss)a{ss}as)",
        "a(a{ss}a(sss)a(sss)a{ss}as)", "a(a{ss}a(ssb)a(sss)a{ss})", "aas", "a(sss)",
};
static const char *const preferred_sigs[] = { "aas", "aas", "as", "a(as)", "aa{ss}" };

#define PICK(a, in) ((a)[fuzz_input_byte(in) % (sizeof (a) / sizeof (a)[0])])

static void request_case(unsigned kind, const uint8_t *p, size_t n) {
        sd_bus_message *m = NULL;
        const char *reason = NULL;
        size_t n_containers = SIZE_MAX;
        int r;

        if (sd_bus_message_new_method_call(fuzz_bus_get(), &m, "io.kgpu.Broker1", "/io/kgpu/Broker1",
                                           "io.kgpu.Broker1", "Fuzz") < 0)
                abort();
        if (sd_bus_message_append(m, "s", "gpu.intel.com/i915") < 0)
                abort();
        switch (kind) {
        case 0:
                r = grpcd_allocate_request_to_bus(p, n, m, &n_containers, NULL, &reason);
                break;
        case 1:
                r = grpcd_preferred_request_to_bus(p, n, m, &n_containers, &reason);
                break;
        default:
                r = grpcd_prestart_request_to_bus(p, n, m, &reason);
                n_containers = 0;
                break;
        }
        if (r < 0) {
                if (!reason || !*reason)
                        abort();
        } else {
                if (n_containers > GRPCD_CONTAINERS_MAX)
                        abort();
                /* What was appended must be a complete, valid body. */
                if (sd_bus_message_seal(m, 1, 0) < 0)
                        abort();
        }
        sd_bus_message_unref(m);
}

static void devices_case(FuzzInput *in) {
        sd_bus_message *m = NULL;
        GrpcdDevice *d = NULL;
        uint8_t *buf = NULL;
        size_t n = 0, len = 0;

        if (fuzz_bus_build(PICK(devices_sigs, in), in, &m) < 0)
                return;
        if (grpcd_devices_from_bus(m, &d, &n) >= 0) {
                if (n > GRPCD_DEVICES_MAX)
                        abort();
                for (size_t i = 0; i < n; i++)
                        if (!grpcd_device_id_valid(d[i].id) || d[i].n_numa_nodes > GRPCD_NUMA_NODES_MAX)
                                abort();
                if (grpcd_list_and_watch_encode(d, n, &buf, &len) >= 0) {
                        V1beta1__ListAndWatchResponse *lw =
                                v1beta1__list_and_watch_response__unpack(NULL, len, buf);
                        if (!lw || lw->n_devices != n)
                                abort();
                        v1beta1__list_and_watch_response__free_unpacked(lw, NULL);
                        free(buf);
                }
                grpcd_devices_free(d, n);
        }
        sd_bus_message_unref(m);
}

static void reply_case(unsigned kind, FuzzInput *in) {
        size_t n_containers = fuzz_input_byte(in) % 5;
        sd_bus_message *m = NULL;
        uint8_t *buf = NULL;
        size_t len = 0;
        int r;

        if (fuzz_bus_build(kind == 4 ? PICK(allocate_sigs, in) : PICK(preferred_sigs, in), in, &m) < 0)
                return;
        if (kind == 4)
                r = grpcd_allocate_reply_from_bus(m, n_containers, &buf, &len);
        else
                r = grpcd_preferred_reply_from_bus(m, n_containers, &buf, &len);
        if (r >= 0) {
                if (kind == 4) {
                        V1beta1__AllocateResponse *a = v1beta1__allocate_response__unpack(NULL, len, buf);
                        if (!a || a->n_container_responses != n_containers)
                                abort();
                        v1beta1__allocate_response__free_unpacked(a, NULL);
                } else {
                        V1beta1__PreferredAllocationResponse *p =
                                v1beta1__preferred_allocation_response__unpack(NULL, len, buf);
                        if (!p || p->n_container_responses != n_containers)
                                abort();
                        v1beta1__preferred_allocation_response__free_unpacked(p, NULL);
                }
                free(buf);
        }
        sd_bus_message_unref(m);
}

static void strings_case(const uint8_t *p, size_t n) {
        char *s = malloc(n + 1), *sock = NULL;

        if (!s)
                abort();
        memcpy(s, p, n);
        s[n] = 0;
        if (resource_socket_name(s, &sock) >= 0) {
                if (!resource_name_valid(s) || strchr(sock, '/') || strlen(sock) > 5 + RESOURCE_NAME_MAX + 5)
                        abort();
                free(sock);
        } else if (resource_name_valid(s))
                abort();
        if (grpcd_device_id_valid(s) && (n == 0 || strlen(s) > GRPCD_ID_MAX || !grpcd_utf8_valid(s, GRPCD_ID_MAX)))
                abort();
        (void) grpcd_utf8_valid(s, n);
        (void) grpcd_status_from_bus_error(s);
        free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        FuzzInput in = { .p = data + 1, .n = size ? size - 1 : 0, .words = words };
        unsigned kind;

        log_set_max_level(LOG_CRIT);
        if (size < 1)
                return 0;
        kind = data[0] % 7;
        switch (kind) {
        case 0:
        case 1:
        case 2:
                request_case(kind, data + 1, size - 1);
                break;
        case 3:
                devices_case(&in);
                break;
        case 4:
        case 5:
                reply_case(kind, &in);
                break;
        default:
                strings_case(data + 1, size - 1);
                break;
        }
        return 0;
}
