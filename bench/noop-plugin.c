/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * noop-plugin.c — kgpu-bench-noop-plugin: a device plugin that does nothing but answer,
 * on our own gRPC layer (grpc/), as the baseline kgpu's latencies and memory
 * are compared against.
 *
 * Contract: `kgpu-bench-noop-plugin SOCKET [N_DEVICES]` serves the v1beta1.DevicePlugin
 * methods on the unix socket SOCKET (removed and recreated) in one sd-event loop, prints
 * "ready" on stdout once listening, and runs until SIGTERM/SIGINT (exit 0, socket
 * removed). It registers with nobody, touches no disk and holds no state:
 *  - ListAndWatch: one message with N_DEVICES (default 8, at most GRPCD_DEVICES_MAX)
 *    healthy devices "noop-<i>" on NUMA node 0, then the stream stays open.
 *  - Allocate: decodes the request and answers one empty ContainerAllocateResponse per
 *    container request (what a Go no-op plugin does with grpc-go + golang/protobuf).
 *  - GetPreferredAllocation: the first allocation_size available ids of each container.
 *  - GetDevicePluginOptions, PreStartContainer: the empty/default messages.
 * Requests are bounded by the layer's 4 MiB message limit; an undecodable request gets
 * INVALID_ARGUMENT. Exit 1 on a setup error (logged to stderr).
 */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "grpc/grpc-h2.h"
#include "common/log.h"
#include "common/util.h"
#include "deviceplugin.pb-c.h"

#define NOOP_DEVICES_MAX 4096u

typedef struct Noop {
        uint8_t *law_msg;
        size_t law_len;
} Noop;

static int reply_packed(GrpcCall *call, const ProtobufCMessage *m) {
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len = protobuf_c_message_get_packed_size(m);

        buf = malloc(len ? len : 1);
        if (!buf)
                return -ENOMEM;
        protobuf_c_message_pack(m, buf);
        return grpc_call_reply(call, buf, len);
}

static int method_options(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;

        o.get_preferred_allocation_available = true;
        return reply_packed(call, &o.base);
}

static int method_list_and_watch(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        Noop *n = userdata;

        /* The layer keeps the stream open; a reference keeps the call until it closes. */
        return grpc_call_send_latest(call, n->law_msg, n->law_len);
}

static int method_allocate(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
        V1beta1__AllocateRequest *req;
        _cleanup_free_ V1beta1__ContainerAllocateResponse *c = NULL;
        _cleanup_free_ V1beta1__ContainerAllocateResponse **cp = NULL;
        int r;

        req = v1beta1__allocate_request__unpack(NULL, len, msg);
        if (!req)
                return grpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "undecodable AllocateRequest");
        if (req->n_container_requests > 0) {
                c = calloc(req->n_container_requests, sizeof(*c));
                cp = calloc(req->n_container_requests, sizeof(*cp));
                if (!c || !cp) {
                        v1beta1__allocate_request__free_unpacked(req, NULL);
                        return -ENOMEM;
                }
        }
        for (size_t i = 0; i < req->n_container_requests; i++) {
                v1beta1__container_allocate_response__init(&c[i]);
                cp[i] = &c[i];
        }
        resp.n_container_responses = req->n_container_requests;
        resp.container_responses = cp;
        r = reply_packed(call, &resp.base);
        v1beta1__allocate_request__free_unpacked(req, NULL);
        return r;
}

static int method_preferred(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        V1beta1__PreferredAllocationResponse resp = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
        V1beta1__PreferredAllocationRequest *req;
        _cleanup_free_ V1beta1__ContainerPreferredAllocationResponse *c = NULL;
        _cleanup_free_ V1beta1__ContainerPreferredAllocationResponse **cp = NULL;
        int r;

        req = v1beta1__preferred_allocation_request__unpack(NULL, len, msg);
        if (!req)
                return grpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "undecodable PreferredAllocationRequest");
        if (req->n_container_requests > 0) {
                c = calloc(req->n_container_requests, sizeof(*c));
                cp = calloc(req->n_container_requests, sizeof(*cp));
                if (!c || !cp) {
                        v1beta1__preferred_allocation_request__free_unpacked(req, NULL);
                        return -ENOMEM;
                }
        }
        for (size_t i = 0; i < req->n_container_requests; i++) {
                const V1beta1__ContainerPreferredAllocationRequest *q = req->container_requests[i];
                size_t k = q->allocation_size > 0 ? (size_t) q->allocation_size : 0;

                v1beta1__container_preferred_allocation_response__init(&c[i]);
                c[i].n_deviceids = MIN(k, q->n_available_deviceids);
                c[i].deviceids = q->available_deviceids;  /* borrowed until the reply is packed */
                cp[i] = &c[i];
        }
        resp.n_container_responses = req->n_container_requests;
        resp.container_responses = cp;
        r = reply_packed(call, &resp.base);
        v1beta1__preferred_allocation_request__free_unpacked(req, NULL);
        return r;
}

static int method_prestart(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        V1beta1__PreStartContainerResponse resp = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;

        return reply_packed(call, &resp.base);
}

static int build_list_and_watch(size_t n, uint8_t **ret, size_t *ret_len) {
        V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
        V1beta1__NUMANode node = V1BETA1__NUMANODE__INIT;
        V1beta1__NUMANode *nodep = &node;
        V1beta1__TopologyInfo topo = V1BETA1__TOPOLOGY_INFO__INIT;
        _cleanup_free_ V1beta1__Device *d = NULL;
        _cleanup_free_ V1beta1__Device **dp = NULL;
        _cleanup_free_ char *ids = NULL;
        uint8_t *buf;
        size_t len;

        topo.n_nodes = 1;
        topo.nodes = &nodep;
        d = calloc(n, sizeof(*d));
        dp = calloc(n, sizeof(*dp));
        ids = calloc(n, 16);
        if (!d || !dp || !ids)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                v1beta1__device__init(&d[i]);
                snprintf(ids + 16 * i, 16, "noop-%zu", i);
                d[i].id = ids + 16 * i;
                d[i].health = (char *) "Healthy";
                d[i].topology = &topo;
                dp[i] = &d[i];
        }
        resp.n_devices = n;
        resp.devices = dp;
        len = v1beta1__list_and_watch_response__get_packed_size(&resp);
        buf = malloc(len ? len : 1);
        if (!buf)
                return -ENOMEM;
        v1beta1__list_and_watch_response__pack(&resp, buf);
        *ret = buf;
        *ret_len = len;
        return 0;
}

static int run(int argc, char *argv[]) {
        _cleanup_(sd_event_unrefp) sd_event *event = NULL;
        _cleanup_(grpc_server_freep) GrpcServer *s = NULL;
        Noop n = {};
        static const struct {
                const char *path;
                GrpcMethodKind kind;
                GrpcMethodHandler handler;
        } methods[] = {
                { "/v1beta1.DevicePlugin/GetDevicePluginOptions", GRPC_METHOD_UNARY,            method_options },
                { "/v1beta1.DevicePlugin/ListAndWatch",           GRPC_METHOD_SERVER_STREAMING, method_list_and_watch },
                { "/v1beta1.DevicePlugin/GetPreferredAllocation", GRPC_METHOD_UNARY,            method_preferred },
                { "/v1beta1.DevicePlugin/Allocate",               GRPC_METHOD_UNARY,            method_allocate },
                { "/v1beta1.DevicePlugin/PreStartContainer",      GRPC_METHOD_UNARY,            method_prestart },
        };
        uint32_t n_devices = 8;
        sigset_t mask;
        int r;

        if (argc < 2 || argc > 3) {
                fprintf(stderr, "usage: %s SOCKET [N_DEVICES]\n", argv[0]);
                return -EINVAL;
        }
        if (argc == 3 && (safe_atou32(argv[2], &n_devices) < 0 || n_devices == 0 ||
                          n_devices > NOOP_DEVICES_MAX)) {
                fprintf(stderr, "N_DEVICES must be 1..%u, got '%s'\n", NOOP_DEVICES_MAX, argv[2]);
                return -EINVAL;
        }

        r = build_list_and_watch(n_devices, &n.law_msg, &n.law_len);
        if (r < 0)
                return log_error_errno(r, "Failed to build the device list: %m");

        r = sd_event_default(&event);
        if (r < 0)
                goto out;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0) {
                r = -errno;
                goto out;
        }
        r = sd_event_add_signal(event, NULL, SIGTERM, NULL, NULL);
        if (r >= 0)
                r = sd_event_add_signal(event, NULL, SIGINT, NULL, NULL);
        if (r < 0)
                goto out;

        r = grpc_server_new(event, NULL, &s);
        if (r < 0)
                goto out;
        for (size_t i = 0; i < ELEMENTSOF(methods); i++) {
                r = grpc_server_add_method(s, methods[i].path, methods[i].kind, methods[i].handler, &n);
                if (r < 0)
                        goto out;
        }
        r = grpc_server_listen_unix(s, argv[1]);
        if (r < 0) {
                log_error_errno(r, "Failed to listen on %s: %m", argv[1]);
                goto out;
        }
        printf("ready\n");
        fflush(stdout);

        r = sd_event_loop(event);
        s = grpc_server_free(s);
        (void) unlink(argv[1]);
out:
        if (r < 0)
                log_error_errno(r, "kgpu-bench-noop-plugin: %m");
        free(n.law_msg);
        return r;
}

int main(int argc, char *argv[]) {
        log_setup("kgpu-bench-noop-plugin");
        return run(argc, argv) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
