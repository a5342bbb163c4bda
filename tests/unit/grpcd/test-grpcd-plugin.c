/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-grpcd-plugin.c — kgpu-grpcd's plugin server on a listening socket handed over
 * (as the probe hands it over), in one process and one event loop, without a bus.
 *
 * The test binds the listening sockets itself (the probe's part, tested in
 * test-probe-kubelet.c), gives them to the plugin with plugin_socket_ready(), calls
 * GetDevicePluginOptions and Allocate (UNAVAILABLE: no broker), replaces the socket with
 * a new one (the old connections are dropped, the new socket serves) and checks that
 * nothing is registered while the probe reports no kubelet. Registration, kubelet
 * restarts and removed sockets through the real probe are the integration tests'.
 */

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "common/config.h"
#include "grpc/grpc-h2.h"
#include "common/util.h"
#include "daemons/grpc/convert.h"
#include "daemons/grpc/manager.h"
#include "daemons/grpc/plugin.h"
#include "daemons/grpc/registration.h"
#include "deviceplugin.pb-c.h"
#include "tests/unit/test-main.h"

#define RES "gpu.intel.com/i915"
#define SOCK "kgpu-gpu.intel.com-i915.sock"

typedef struct Reply {
        bool done;
        GrpcStatus status;
        char *message;
        uint8_t *msg;
        size_t len;
} Reply;

static char dir[] = "/tmp/kgpu-test-grpcd-XXXXXX";
static char sock_path[PATH_MAX];
static sd_event *event;

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

/* A listening socket at sock_path, as the probe makes it; returns the fd and its inode. */
static int listen_at(uint64_t *ret_inode) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct stat st;
        int fd;

        (void) unlink(sock_path);
        ck_assert_uint_lt(strlen(sock_path), sizeof(sa.sun_path));
        memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ck_assert_int_eq(listen(fd, 16), 0);
        ck_assert_int_eq(lstat(sock_path, &st), 0);
        *ret_inode = st.st_ino;
        return fd;
}

START_TEST(test_serve_handed_over_socket) {
        _cleanup_(config_freep) Config *config = NULL;
        _cleanup_free_ char *error = NULL;
        Manager *m = NULL;
        Plugin *p = NULL;
        GrpcdDevice *devs;
        Reply r;
        V1beta1__DevicePluginOptions *o;
        V1beta1__AllocateRequest areq = V1BETA1__ALLOCATE_REQUEST__INIT;
        V1beta1__ContainerAllocateRequest c = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT, *cp = &c;
        char *ids[] = { (char *) "0000:03:00.0" };
        uint8_t abuf[128];
        size_t alen;
        uint64_t t0, inode1, inode2;
        int fd;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(sock_path, sizeof(sock_path), "%s/%s", dir, SOCK);

        ck_assert_int_ge(sd_event_new(&event), 0);
        ck_assert_int_eq(config_load_string("", 0, "test", NULL, 0, &config, &error), 0);
        ck_assert_int_eq(manager_new(event, TAKE_PTR(config), &m), 0);

        /* First device list: the plugin wants a socket; with no probe it asks nobody. */
        ck_assert_int_eq(manager_add_plugin(m, RES, &p), 0);
        ck_assert_str_eq(p->socket_name, SOCK);
        ck_assert_int_eq(plugin_set_options(p, false, true), 0);
        devs = calloc(1, sizeof(GrpcdDevice));
        ck_assert_ptr_nonnull(devs);
        devs[0].id = strdup("0000:03:00.0");
        devs[0].healthy = true;
        ck_assert_int_eq(plugin_set_devices(p, devs, 1), 0);
        ck_assert(plugin_is_listening(p));
        ck_assert_ptr_null(p->server);
        ck_assert_ptr_null(p->listen_slot);

        /* The probe's answer: served at once; no kubelet reported, so no registration. */
        fd = listen_at(&inode1);
        plugin_socket_ready(p, fd, inode1);
        ck_assert_ptr_nonnull(p->server);
        ck_assert_uint_eq(p->socket_inode, inode1);
        ck_assert(!p->registered);
        ck_assert(!registration_active(p));

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

        /* A new socket (the kubelet removed the old one): the new one serves. */
        fd = listen_at(&inode2);
        ck_assert_uint_ne(inode1, inode2);
        plugin_socket_ready(p, fd, inode2);
        ck_assert_uint_eq(p->socket_inode, inode2);
        call_plugin("/v1beta1.DevicePlugin/GetDevicePluginOptions", (const uint8_t *) "", 0, &r);
        ck_assert_int_eq(r.status, GRPC_STATUS_OK);
        reply_done(&r);

        /* A failure to make the socket with no probe schedules nothing: its return asks. */
        plugin_socket_failed(p, -ECONNREFUSED, "test");
        ck_assert_ptr_null(p->listen_retry);

        m = manager_free(m);
        ck_assert_int_eq(unlink(sock_path), 0);
        ck_assert_int_eq(rmdir(dir), 0);
        event = sd_event_unref(event);
}
END_TEST

START_TEST(test_manager_new_invalid) {
        _cleanup_(config_freep) Config *config = NULL;
        _cleanup_free_ char *error = NULL;
        Manager *m = (Manager *) 0x1;
        sd_event *e = NULL;

        ck_assert_int_ge(sd_event_new(&e), 0);
        ck_assert_int_eq(manager_new(e, NULL, &m), -EINVAL);
        ck_assert_ptr_eq(m, (Manager *) 0x1);
        sd_event_unref(e);
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("grpcd-plugin");
        TCase *tc = tcase_create("plugin");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_serve_handed_over_socket);
        tcase_add_test(tc, test_manager_new_invalid);
        suite_add_tcase(s, tc);
        return s;
}

static int grpcd_plugin_prepare(void) {
        /* Keep the environment from redirecting paths under test. */
        unsetenv("KGPU_DEVICE_PLUGIN_PATH");
        unsetenv("KGPU_KUBELET_SOCKET");
        unsetenv("KGPU_CONFIG");
        unsetenv("CONFIG_FILE");
        return 0;
}

KGPU_TEST_PREPARE(grpcd_plugin_prepare)
KGPU_TEST_SUITE(suite)
