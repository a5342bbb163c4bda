/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-grpcd-plugin.c — kgpu-grpcd's plugin servers, registration and kubelet directory
 * watch, in one process and one event loop, without a bus.
 *
 * A stand-in kubelet (a GrpcServer answering /v1beta1.Registration/Register on
 * kubelet.sock) records registrations. The test serves one resource, calls its
 * GetDevicePluginOptions and Allocate (UNAVAILABLE: no broker), then restarts the
 * kubelet the way the kubelet does (every socket deleted, kubelet.sock recreated),
 * deletes our socket alone, removes the kubelet, and checks that each time grpcd
 * recreates its socket and registers again; at the end our socket is removed.
 * (The independent-stack checks are the python3-grpcio integration tests.)
 */

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "common/config.h"
#include "common/grpc-h2.h"
#include "common/util.h"
#include "daemons/grpc/convert.h"
#include "daemons/grpc/manager.h"
#include "daemons/grpc/plugin.h"
#include "deviceplugin.pb-c.h"

#define RES "gpu.intel.com/i915"
#define SOCK "kgpu-gpu.intel.com-i915.sock"

typedef struct Kubelet {
        GrpcServer *server;
        unsigned n_registrations;
        char *last_endpoint;
        char *last_resource;
        bool last_preferred;
} Kubelet;

typedef struct Reply {
        bool done;
        GrpcStatus status;
        char *message;
        uint8_t *msg;
        size_t len;
} Reply;

static char dir[] = "/tmp/kgpu-test-grpcd-XXXXXX";
static char kubelet_path[PATH_MAX], sock_path[PATH_MAX];
static sd_event *event;

static int on_register(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        Kubelet *k = userdata;
        V1beta1__RegisterRequest *req;

        req = v1beta1__register_request__unpack(NULL, len, msg);
        if (!req)
                return grpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "bad RegisterRequest");
        ck_assert_str_eq(req->version, "v1beta1");
        k->n_registrations++;
        free(k->last_endpoint);
        free(k->last_resource);
        k->last_endpoint = strdup(req->endpoint);
        k->last_resource = strdup(req->resource_name);
        k->last_preferred = req->options && req->options->get_preferred_allocation_available;
        v1beta1__register_request__free_unpacked(req, NULL);
        return grpc_call_reply(call, (const uint8_t *) "", 0);
}

static void kubelet_start(Kubelet *k) {
        ck_assert_int_ge(grpc_server_new(event, NULL, &k->server), 0);
        ck_assert_int_ge(grpc_server_add_method(k->server, "/v1beta1.Registration/Register",
                                                GRPC_METHOD_UNARY, on_register, k), 0);
        ck_assert_int_ge(grpc_server_listen_unix(k->server, kubelet_path), 0);
}

static void kubelet_stop(Kubelet *k) {
        k->server = grpc_server_free(k->server);
}

static void kubelet_delete_sockets(void) {
        DIR *d = opendir(dir);
        struct dirent *de;

        ck_assert_ptr_nonnull(d);
        while ((de = readdir(d))) {
                struct stat st;

                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode))
                        ck_assert_int_eq(unlinkat(dirfd(d), de->d_name, 0), 0);
        }
        closedir(d);
}

static void run_for(uint64_t usec);

/* Runs the loop until *counter reaches want (or 5 s pass), then a little longer to
 * check it stays there: one registration per event, no duplicates. */
static void run_until(const unsigned *counter, unsigned want) {
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + 5 * 1000 * 1000;

        while (*counter < want && now_usec(CLOCK_MONOTONIC) < deadline)
                ck_assert_int_ge(sd_event_run(event, 50 * 1000), 0);
        run_for(50 * 1000);
        ck_assert_uint_eq(*counter, want);
}

/* Runs the loop until *flag is set (or 5 s pass). */
static void run_until_true(const bool *flag) {
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + 5 * 1000 * 1000;

        while (!*flag && now_usec(CLOCK_MONOTONIC) < deadline)
                ck_assert_int_ge(sd_event_run(event, 50 * 1000), 0);
        ck_assert(*flag);
}

static void run_for(uint64_t usec) {
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + usec;

        while (now_usec(CLOCK_MONOTONIC) < deadline)
                ck_assert_int_ge(sd_event_run(event, 10 * 1000), 0);
}

static void on_reply(GrpcStatus status, const char *message, const uint8_t *msg, size_t len, void *userdata) {
        Reply *r = userdata;

        r->done = true;
        r->status = status;
        r->message = message ? strdup(message) : NULL;
        if (len > 0) {
                r->msg = malloc(len);
                ck_assert_ptr_nonnull(r->msg);
                memcpy(r->msg, msg, len);
        }
        r->len = len;
}

static void call_plugin(const char *method, const uint8_t *req, size_t len, Reply *r) {
        unsigned done = 0;
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + 5 * 1000 * 1000;

        *r = (Reply) {};
        ck_assert_int_ge(grpc_client_call_unary(event, sock_path, method, req, len, 2 * 1000 * 1000,
                                                on_reply, r, NULL), 0);
        while (!r->done && now_usec(CLOCK_MONOTONIC) < deadline)
                ck_assert_int_ge(sd_event_run(event, 50 * 1000), 0);
        done = r->done;
        ck_assert_uint_eq(done, 1);
}

static void reply_done(Reply *r) {
        free(r->message);
        free(r->msg);
}

static bool socket_exists(const char *path) {
        struct stat st;

        return lstat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

START_TEST(test_serve_register_restart) {
        _cleanup_(config_freep) Config *config = NULL;
        _cleanup_free_ char *error = NULL;
        Manager *m = NULL;
        Plugin *p = NULL;
        Kubelet k = {};
        GrpcdDevice *devs;
        Reply r;
        ConfigOverride ov[] = { { "device-plugin-path", dir } };
        V1beta1__DevicePluginOptions *o;
        V1beta1__AllocateRequest areq = V1BETA1__ALLOCATE_REQUEST__INIT;
        V1beta1__ContainerAllocateRequest c = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT, *cp = &c;
        char *ids[] = { (char *) "0000:03:00.0" };
        uint8_t abuf[128];
        size_t alen;
        uint64_t t0;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(kubelet_path, sizeof(kubelet_path), "%s/kubelet.sock", dir);
        snprintf(sock_path, sizeof(sock_path), "%s/%s", dir, SOCK);

        ck_assert_int_ge(sd_event_new(&event), 0);
        ck_assert_int_eq(config_load_string("", 0, "test", ov, ELEMENTSOF(ov), &config, &error), 0);
        ck_assert_int_eq(manager_new(event, TAKE_PTR(config), &m), 0);
        kubelet_start(&k);
        ck_assert_int_eq(manager_watch_start(m), 0);

        /* First device list: listen, then register. */
        ck_assert_int_eq(manager_add_plugin(m, RES, &p), 0);
        ck_assert_int_eq(plugin_set_options(p, false, true), 0);
        devs = calloc(1, sizeof(GrpcdDevice));
        ck_assert_ptr_nonnull(devs);
        devs[0].id = strdup("0000:03:00.0");
        devs[0].healthy = true;
        ck_assert_int_eq(plugin_set_devices(p, devs, 1), 0);
        ck_assert(socket_exists(sock_path));
        run_until(&k.n_registrations, 1);
        ck_assert_str_eq(k.last_endpoint, SOCK);
        ck_assert_str_eq(k.last_resource, RES);
        ck_assert(k.last_preferred);
        run_until_true(&p->registered);

        /* GetDevicePluginOptions answers from the broker's flags. */
        call_plugin("/v1beta1.DevicePlugin/GetDevicePluginOptions", (const uint8_t *) "", 0, &r);
        ck_assert_int_eq(r.status, GRPC_STATUS_OK);
        o = v1beta1__device_plugin_options__unpack(NULL, r.len, r.msg);
        ck_assert_ptr_nonnull(o);
        ck_assert(o->get_preferred_allocation_available);
        ck_assert(!o->pre_start_required);
        v1beta1__device_plugin_options__free_unpacked(o, NULL);
        reply_done(&r);

        /* No broker on the bus: Allocate fails at once with UNAVAILABLE. */
        c.devices_ids = ids;
        c.n_devices_ids = 1;
        areq.container_requests = &cp;
        areq.n_container_requests = 1;
        alen = v1beta1__allocate_request__pack(&areq, abuf);
        t0 = now_usec(CLOCK_MONOTONIC);
        call_plugin("/v1beta1.DevicePlugin/Allocate", abuf, alen, &r);
        ck_assert_int_eq(r.status, GRPC_STATUS_UNAVAILABLE);
        ck_assert_ptr_nonnull(r.message);
        ck_assert_ptr_nonnull(strstr(r.message, "not running"));
        ck_assert_uint_lt(now_usec(CLOCK_MONOTONIC) - t0, 1000 * 1000);
        reply_done(&r);

        /* Kubelet restart: every socket deleted, kubelet.sock recreated. */
        kubelet_stop(&k);
        kubelet_delete_sockets();
        ck_assert(!socket_exists(sock_path));
        run_for(20 * 1000);
        ck_assert(!p->registered);
        kubelet_start(&k);
        run_until(&k.n_registrations, 2);
        ck_assert(socket_exists(sock_path));
        run_until_true(&p->registered);

        /* The plugin answers on the recreated socket. */
        call_plugin("/v1beta1.DevicePlugin/GetDevicePluginOptions", (const uint8_t *) "", 0, &r);
        ck_assert_int_eq(r.status, GRPC_STATUS_OK);
        reply_done(&r);

        /* Only our socket removed: recreated and registered again. */
        ck_assert_int_eq(unlink(sock_path), 0);
        run_until(&k.n_registrations, 3);
        ck_assert(socket_exists(sock_path));

        /* Options change while registered: registered again with the new ones. */
        ck_assert_int_eq(plugin_set_options(p, false, false), 0);
        run_until(&k.n_registrations, 4);
        ck_assert(!k.last_preferred);

        /* Kubelet gone: unregistered, nothing retried until it is back. */
        kubelet_stop(&k);
        ck_assert_int_eq(unlink(kubelet_path), 0);
        run_for(300 * 1000);
        ck_assert(!p->registered);
        ck_assert_uint_eq(k.n_registrations, 4);
        ck_assert_ptr_null(p->register_timer);

        /* Back again (our socket kept this time): registered again. */
        kubelet_start(&k);
        run_until(&k.n_registrations, 5);
        run_until_true(&p->registered);

        /* Shutdown removes our socket, not the kubelet's. */
        m = manager_free(m);
        ck_assert(!socket_exists(sock_path));
        ck_assert(socket_exists(kubelet_path));
        kubelet_stop(&k);
        free(k.last_endpoint);
        free(k.last_resource);
        (void) unlink(kubelet_path);
        ck_assert_int_eq(rmdir(dir), 0);
        event = sd_event_unref(event);
}
END_TEST

START_TEST(test_manager_new_invalid) {
        _cleanup_(config_freep) Config *config = NULL;
        _cleanup_free_ char *error = NULL;
        ConfigOverride ov[] = { { "device-plugin-path", "relative/dir" } };
        Manager *m = (Manager *) 0x1;
        sd_event *e = NULL;
        int r;

        ck_assert_int_ge(sd_event_new(&e), 0);
        r = config_load_string("", 0, "test", ov, ELEMENTSOF(ov), &config, &error);
        if (r >= 0) {
                /* The config layer accepts it: manager_new must refuse (and free config). */
                ck_assert_int_eq(manager_new(e, TAKE_PTR(config), &m), -EINVAL);
                ck_assert_ptr_eq(m, (Manager *) 0x1);
        }
        ck_assert_int_eq(manager_new(e, NULL, &m), -EINVAL);
        sd_event_unref(e);
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("grpcd-plugin");
        TCase *tc = tcase_create("plugin");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_serve_register_restart);
        tcase_add_test(tc, test_manager_new_invalid);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(suite());
        int failed;

        /* Keep the environment from redirecting paths under test. */
        unsetenv("KGPU_DEVICE_PLUGIN_PATH");
        unsetenv("KGPU_KUBELET_SOCKET");
        unsetenv("KGPU_CONFIG");
        unsetenv("CONFIG_FILE");

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
