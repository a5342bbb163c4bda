/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gen-corpus.c — writes the seed corpora of fuzz-grpc-h2 and fuzz-proto.
 *
 * Contract: `gen-corpus DIR` creates DIR/fuzz-grpc-h2/ (HTTP/2 client byte streams
 * made by an nghttp2 client session, without the client magic), DIR/fuzz-grpc-client/
 * (server byte streams answering stream 1, made by an nghttp2 server session) and
 * DIR/fuzz-proto/ (selector byte + packed message, selectors as in fuzz-proto.c).
 * Exit 0 on success.
 */

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deviceplugin.pb-c.h"
#include "podresources.pb-c.h"

static const char *outdir;

static void write_seed(const char *target, const char *name, const uint8_t *p, size_t n) {
        char path[512];
        FILE *f;

        snprintf(path, sizeof path, "%s/%s", outdir, target);
        (void) mkdir(path, 0755);
        snprintf(path, sizeof path, "%s/%s/%s", outdir, target, name);
        f = fopen(path, "we");
        if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
                fprintf(stderr, "cannot write %s\n", path);
                exit(1);
        }
}

typedef struct Body {
        const uint8_t *p;
        size_t n, off;
} Body;

static ssize_t body_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *data_flags, nghttp2_data_source *source, void *user_data) {
        Body *b = source->ptr;
        size_t n = length < b->n - b->off ? length : b->n - b->off;

        /* Small DATA frames so messages are split across frames. */
        if (n > 7)
                n = 7;
        if (n > 0)
                memcpy(buf, b->p + b->off, n);
        b->off += n;
        if (b->off == b->n)
                *data_flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t) n;
}

#define NV(n, v) { (uint8_t *) (n), (uint8_t *) (v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE }

typedef struct Req {
        const char *method, *path, *ct;
        const uint8_t *body;
        size_t len;
} Req;

static void h2_seed(const char *name, const Req *reqs, size_t n_reqs, int extra) {
        nghttp2_session_callbacks *cbs;
        nghttp2_session *s;
        uint8_t out[65536];
        size_t n_out = 0;
        Body bodies[8];
        int32_t ids[8];

        if (nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_session_client_new(&s, cbs, NULL) != 0)
                exit(1);
        nghttp2_session_callbacks_del(cbs);
        nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, NULL, 0);
        for (size_t i = 0; i < n_reqs && i < 8; i++) {
                nghttp2_nv nva[] = {
                        NV(":method", reqs[i].method), NV(":scheme", "http"), NV(":path", reqs[i].path),
                        NV(":authority", "localhost"), NV("content-type", reqs[i].ct), NV("te", "trailers"),
                        NV("grpc-timeout", "10S"),
                };
                bodies[i] = (Body) { reqs[i].body, reqs[i].len, 0 };
                nghttp2_data_provider prd = { .source.ptr = &bodies[i], .read_callback = body_read };
                ids[i] = nghttp2_submit_request(s, NULL, nva, sizeof nva / sizeof nva[0], &prd, NULL);
        }
        if (extra & 1)
                nghttp2_submit_ping(s, NGHTTP2_FLAG_NONE, (const uint8_t *) "12345678");
        if (extra & 2)
                nghttp2_submit_window_update(s, NGHTTP2_FLAG_NONE, 0, 100000);
        for (;;) {
                const uint8_t *d;
                ssize_t k = nghttp2_session_mem_send(s, &d);
                if (k <= 0)
                        break;
                if (n_out + (size_t) k > sizeof out)
                        exit(1);
                memcpy(out + n_out, d, (size_t) k);
                n_out += (size_t) k;
        }
        if (extra & 4) {
                for (size_t i = 0; i < n_reqs; i++)
                        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, ids[i], NGHTTP2_CANCEL);
                nghttp2_submit_goaway(s, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, NULL, 0);
                for (;;) {
                        const uint8_t *d;
                        ssize_t k = nghttp2_session_mem_send(s, &d);
                        if (k <= 0)
                                break;
                        if (n_out + (size_t) k > sizeof out)
                                exit(1);
                        memcpy(out + n_out, d, (size_t) k);
                        n_out += (size_t) k;
                }
        }
        nghttp2_session_del(s);
        /* The fuzz target prepends the client magic itself. */
        write_seed("fuzz-grpc-h2", name, out + NGHTTP2_CLIENT_MAGIC_LEN, n_out - NGHTTP2_CLIENT_MAGIC_LEN);
}

typedef struct Answer {
        unsigned http_status;
        const char *grpc_status;        /* NULL: none */
        const char *grpc_message;
        bool trailers_only;
        const uint8_t *body;
        size_t len;
        int special;                    /* 1: RST_STREAM REFUSED, 2: GOAWAY, 3: PING */
} Answer;

static const Answer *current_answer;

static ssize_t answer_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                           uint32_t *data_flags, nghttp2_data_source *source, void *user_data) {
        ssize_t n = body_read(session, stream_id, buf, length, data_flags, source, user_data);

        if (*data_flags & NGHTTP2_DATA_FLAG_EOF) {
                /* Trailers go after the data, submitted from here as nghttp2 asks. */
                nghttp2_nv tr[2];
                size_t nt = 0;

                *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
                if (current_answer->grpc_status)
                        tr[nt++] = (nghttp2_nv) NV("grpc-status", current_answer->grpc_status);
                if (current_answer->grpc_message)
                        tr[nt++] = (nghttp2_nv) NV("grpc-message", current_answer->grpc_message);
                if (nghttp2_submit_trailer(session, stream_id, tr, nt) != 0)
                        exit(1);
        }
        return n;
}

static void client_seed(const char *name, const Answer *a) {
        nghttp2_session_callbacks *cbs;
        nghttp2_session *cs, *ss;
        uint8_t out[65536];
        size_t n_out = 0;
        Body body = { a->body, a->len, 0 };
        nghttp2_nv req[] = {
                NV(":method", "POST"), NV(":scheme", "http"), NV(":path", "/v1beta1.Registration/Register"),
                NV(":authority", "localhost"), NV("content-type", "application/grpc"), NV("te", "trailers"),
        };
        char hs[8];
        nghttp2_nv hdrs[4];
        size_t nh = 0;

        if (nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_session_client_new(&cs, cbs, NULL) != 0 ||
            nghttp2_session_server_new(&ss, cbs, NULL) != 0)
                exit(1);
        nghttp2_session_callbacks_del(cbs);

        /* The server's SETTINGS must be its first frame, before its ACK of the client's. */
        nghttp2_submit_settings(ss, NGHTTP2_FLAG_NONE, NULL, 0);
        /* Let the server session see a request on stream 1. */
        nghttp2_submit_settings(cs, NGHTTP2_FLAG_NONE, NULL, 0);
        if (nghttp2_submit_request(cs, NULL, req, sizeof req / sizeof req[0], NULL, NULL) != 1)
                exit(1);
        for (;;) {
                const uint8_t *d;
                ssize_t k = nghttp2_session_mem_send(cs, &d);
                if (k <= 0)
                        break;
                if (nghttp2_session_mem_recv(ss, d, (size_t) k) != k)
                        exit(1);
        }

        if (a->special == 1)
                nghttp2_submit_rst_stream(ss, NGHTTP2_FLAG_NONE, 1, NGHTTP2_REFUSED_STREAM);
        else if (a->special == 2)
                nghttp2_submit_goaway(ss, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, NULL, 0);
        else {
                if (a->special == 3)
                        nghttp2_submit_ping(ss, NGHTTP2_FLAG_NONE, NULL);
                snprintf(hs, sizeof hs, "%u", a->http_status);
                hdrs[nh++] = (nghttp2_nv) NV(":status", hs);
                hdrs[nh++] = (nghttp2_nv) NV("content-type", "application/grpc");
                if (a->trailers_only) {
                        hdrs[nh++] = (nghttp2_nv) NV("grpc-status", a->grpc_status);
                        if (a->grpc_message)
                                hdrs[nh++] = (nghttp2_nv) NV("grpc-message", a->grpc_message);
                        nghttp2_submit_response(ss, 1, hdrs, nh, NULL);
                } else {
                        nghttp2_data_provider prd = { .source.ptr = &body, .read_callback = answer_read };

                        current_answer = a;
                        nghttp2_submit_response(ss, 1, hdrs, nh, &prd);
                }
        }
        for (;;) {
                const uint8_t *d;
                ssize_t k = nghttp2_session_mem_send(ss, &d);
                if (k <= 0)
                        break;
                if (n_out + (size_t) k > sizeof out)
                        exit(1);
                memcpy(out + n_out, d, (size_t) k);
                n_out += (size_t) k;
        }
        nghttp2_session_del(cs);
        nghttp2_session_del(ss);
        write_seed("fuzz-grpc-client", name, out, n_out);
}

static size_t frame(uint8_t *out, const ProtobufCMessage *m) {
        size_t n = protobuf_c_message_pack(m, out + 5);
        out[0] = 0;
        out[1] = (uint8_t) (n >> 24);
        out[2] = (uint8_t) (n >> 16);
        out[3] = (uint8_t) (n >> 8);
        out[4] = (uint8_t) n;
        return n + 5;
}

static void proto_seed(const char *name, uint8_t selector, const ProtobufCMessage *m) {
        uint8_t buf[4096];
        size_t n = protobuf_c_message_pack(m, buf + 1);

        buf[0] = selector;
        write_seed("fuzz-proto", name, buf, n + 1);
}

int main(int argc, char *argv[]) {
        uint8_t alloc_msg[512], empty_msg[8], big[5] = { 0, 0xff, 0xff, 0xff, 0xff };
        uint8_t trunc[] = { 0, 0, 0, 0, 10, 'a' }, two[] = { 0, 0, 0, 0, 1, 'a', 0, 0, 0, 0, 1, 'b' };
        uint8_t comp[] = { 1, 0, 0, 0, 1, 'a' };
        size_t alloc_len, empty_len;

        if (argc != 2)
                return 2;
        outdir = argv[1];
        (void) mkdir(outdir, 0755);

        /* Messages. */
        char *ids[] = { "0000:03:00.0", "0000:04:00.0" };
        V1beta1__ContainerAllocateRequest car = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
        car.n_devices_ids = 2;
        car.devices_ids = ids;
        V1beta1__ContainerAllocateRequest *cars[] = { &car };
        V1beta1__AllocateRequest ar = V1BETA1__ALLOCATE_REQUEST__INIT;
        ar.n_container_requests = 1;
        ar.container_requests = cars;

        V1beta1__ContainerPreferredAllocationRequest cpr = V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT;
        cpr.n_available_deviceids = 2;
        cpr.available_deviceids = ids;
        cpr.n_must_include_deviceids = 1;
        cpr.must_include_deviceids = ids;
        cpr.allocation_size = 2;
        V1beta1__ContainerPreferredAllocationRequest *cprs[] = { &cpr };
        V1beta1__PreferredAllocationRequest par = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
        par.n_container_requests = 1;
        par.container_requests = cprs;

        V1beta1__PreStartContainerRequest psr = V1BETA1__PRE_START_CONTAINER_REQUEST__INIT;
        psr.n_devices_ids = 2;
        psr.devices_ids = ids;

        V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
        opts.pre_start_required = 1;
        opts.get_preferred_allocation_available = 1;
        V1beta1__RegisterRequest rr = V1BETA1__REGISTER_REQUEST__INIT;
        rr.version = "v1beta1";
        rr.endpoint = "kgpu-gpu.intel.com-i915.sock";
        rr.resource_name = "gpu.intel.com/i915";
        rr.options = &opts;

        V1beta1__NUMANode node = V1BETA1__NUMANODE__INIT;
        node.id = 1;
        V1beta1__NUMANode *nodes[] = { &node };
        V1beta1__TopologyInfo topo = V1BETA1__TOPOLOGY_INFO__INIT;
        topo.n_nodes = 1;
        topo.nodes = nodes;
        V1beta1__Device dev = V1BETA1__DEVICE__INIT;
        dev.id = ids[0];
        dev.health = "Healthy";
        dev.topology = &topo;
        V1beta1__Device *devs[] = { &dev };
        V1beta1__ListAndWatchResponse law = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
        law.n_devices = 1;
        law.devices = devs;

        V1beta1__DeviceSpec spec = V1BETA1__DEVICE_SPEC__INIT;
        spec.container_path = spec.host_path = "/dev/dri/card0";
        spec.permissions = "rw";
        V1beta1__DeviceSpec *specs[] = { &spec };
        V1beta1__ContainerAllocateResponse__EnvsEntry env = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__ENVS_ENTRY__INIT;
        env.key = "A";
        env.value = "b";
        V1beta1__ContainerAllocateResponse__EnvsEntry *envs[] = { &env };
        V1beta1__CDIDevice cdi = V1BETA1__CDIDEVICE__INIT;
        cdi.name = "intel.com/gpu=card0";
        V1beta1__CDIDevice *cdis[] = { &cdi };
        V1beta1__ContainerAllocateResponse carsp = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        carsp.n_devices = 1;
        carsp.devices = specs;
        carsp.n_envs = 1;
        carsp.envs = envs;
        carsp.n_cdi_devices = 1;
        carsp.cdi_devices = cdis;
        V1beta1__ContainerAllocateResponse *carsps[] = { &carsp };
        V1beta1__AllocateResponse arsp = V1BETA1__ALLOCATE_RESPONSE__INIT;
        arsp.n_container_responses = 1;
        arsp.container_responses = carsps;

        V1__ContainerDevices cd = V1__CONTAINER_DEVICES__INIT;
        cd.resource_name = "gpu.intel.com/i915";
        cd.n_device_ids = 1;
        cd.device_ids = ids;
        V1__ContainerDevices *cds[] = { &cd };
        V1__ContainerResources cr = V1__CONTAINER_RESOURCES__INIT;
        cr.name = "app";
        cr.n_devices = 1;
        cr.devices = cds;
        V1__ContainerResources *crs[] = { &cr };
        V1__PodResources pr = V1__POD_RESOURCES__INIT;
        pr.name = "pod";
        pr.namespace_ = "default";
        pr.n_containers = 1;
        pr.containers = crs;
        V1__PodResources *prs[] = { &pr };
        V1__ListPodResourcesResponse lpr = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
        lpr.n_pod_resources = 1;
        lpr.pod_resources = prs;

        V1__AllocatableResourcesResponse alr = V1__ALLOCATABLE_RESOURCES_RESPONSE__INIT;
        alr.n_devices = 1;
        alr.devices = cds;

        proto_seed("allocate-request", 0, &ar.base);
        proto_seed("preferred-allocation-request", 1, &par.base);
        proto_seed("prestart-request", 2, &psr.base);
        proto_seed("register-request", 3, &rr.base);
        proto_seed("list-and-watch-response", 4, &law.base);
        proto_seed("allocate-response", 5, &arsp.base);
        proto_seed("list-pod-resources-response", 9, &lpr.base);
        proto_seed("allocatable-resources-response", 10, &alr.base);

        V1beta1__Empty empty = V1BETA1__EMPTY__INIT;
        alloc_len = frame(alloc_msg, &ar.base);
        empty_len = frame(empty_msg, &empty.base);

        const char *ct = "application/grpc";
        h2_seed("allocate", (Req[]) { { "POST", "/v1beta1.DevicePlugin/Allocate", ct, alloc_msg, alloc_len } }, 1, 0);
        h2_seed("list-and-watch", (Req[]) { { "POST", "/v1beta1.DevicePlugin/ListAndWatch", ct, empty_msg, empty_len } },
                1, 0);
        h2_seed("unknown-method", (Req[]) { { "POST", "/v1beta1.DevicePlugin/Nope", ct, empty_msg, empty_len } }, 1, 0);
        h2_seed("bad-content-type", (Req[]) { { "POST", "/v1beta1.DevicePlugin/Allocate", "text/plain", alloc_msg,
                                                alloc_len } }, 1, 0);
        h2_seed("get", (Req[]) { { "GET", "/v1beta1.DevicePlugin/Allocate", ct, NULL, 0 } }, 1, 0);
        h2_seed("huge-length", (Req[]) { { "POST", "/v1beta1.DevicePlugin/Allocate", ct, big, sizeof big } }, 1, 0);
        h2_seed("truncated", (Req[]) { { "POST", "/v1beta1.DevicePlugin/Allocate", ct, trunc, sizeof trunc } }, 1, 0);
        h2_seed("two-messages", (Req[]) { { "POST", "/v1beta1.DevicePlugin/Allocate", ct, two, sizeof two } }, 1, 0);
        h2_seed("compressed", (Req[]) { { "POST", "/v1beta1.DevicePlugin/Allocate", ct, comp, sizeof comp } }, 1, 0);
        h2_seed("mixed", (Req[]) {
                        { "POST", "/v1beta1.DevicePlugin/ListAndWatch", ct, empty_msg, empty_len },
                        { "POST", "/v1beta1.DevicePlugin/GetPreferredAllocation", ct, empty_msg, empty_len },
                        { "POST", "/v1beta1.DevicePlugin/PreStartContainer", ct, empty_msg, empty_len },
                        { "POST", "/v1beta1.DevicePlugin/Allocate", ct, alloc_msg, alloc_len },
                }, 4, 3);
        h2_seed("reset-and-goaway", (Req[]) {
                        { "POST", "/v1beta1.DevicePlugin/ListAndWatch", ct, empty_msg, empty_len },
                        { "POST", "/v1beta1.DevicePlugin/Allocate", ct, alloc_msg, alloc_len },
                }, 2, 7);

        client_seed("ok", &(Answer) { 200, "0", NULL, false, empty_msg, empty_len, 0 });
        client_seed("ok-ping", &(Answer) { 200, "0", NULL, false, alloc_msg, alloc_len, 3 });
        client_seed("error", &(Answer) { 200, "3", "bad%20thing%C3%BC%", false, NULL, 0, 0 });
        client_seed("trailers-only", &(Answer) { 200, "12", "unknown service", true, NULL, 0, 0 });
        client_seed("http-404", &(Answer) { 404, NULL, NULL, false, NULL, 0, 0 });
        client_seed("missing-status", &(Answer) { 200, NULL, NULL, false, empty_msg, empty_len, 0 });
        client_seed("two-messages", &(Answer) { 200, "0", NULL, false, two, sizeof two, 0 });
        client_seed("compressed", &(Answer) { 200, "0", NULL, false, comp, sizeof comp, 0 });
        client_seed("huge-length", &(Answer) { 200, "0", NULL, false, big, sizeof big, 0 });
        client_seed("truncated", &(Answer) { 200, "0", NULL, false, trunc, sizeof trunc, 0 });
        client_seed("refused", &(Answer) { .special = 1 });
        client_seed("goaway", &(Answer) { .special = 2 });
        return 0;
}
