/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-grpcd-convert.c — kgpu-grpcd's pure helpers: socket naming, D-Bus <-> protobuf
 * translation of device lists, Allocate, GetPreferredAllocation and PreStartContainer
 * with their bounds, error mapping and the registration backoff.
 *
 * D-Bus messages are built on a bus object that is never connected to anything (one end
 * of a socketpair), sealed and rewound, so no bus daemon is needed.
 */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <systemd/sd-bus.h>

#include "common/bus-names.h"
#include "common/resource-name.h"
#include "common/util.h"
#include "daemons/grpc/convert.h"
#include "daemons/grpc/registration.h"
#include "deviceplugin.pb-c.h"
#include "tests/unit/test-main.h"

static sd_bus *bus;
static int peer_fd = -EBADF;

static void bus_setup(void) {
        int pair[2];

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC|SOCK_NONBLOCK, 0, pair), 0);
        ck_assert_int_ge(sd_bus_new(&bus), 0);
        ck_assert_int_ge(sd_bus_set_fd(bus, pair[0], pair[0]), 0);
        ck_assert_int_ge(sd_bus_start(bus), 0);
        peer_fd = pair[1];
}

static void bus_teardown(void) {
        /* Never authenticated: close without flushing. */
        bus = sd_bus_close_unref(bus);
        peer_fd = safe_close(peer_fd);
}

static sd_bus_message *new_message(void) {
        sd_bus_message *m = NULL;

        ck_assert_int_ge(sd_bus_message_new_method_call(bus, &m, "io.kgpu.Test", "/io/kgpu/Test",
                                                        "io.kgpu.Test", "Test"), 0);
        return m;
}

static void seal(sd_bus_message *m) {
        static uint64_t cookie = 1;

        ck_assert_int_ge(sd_bus_message_seal(m, cookie++, 0), 0);
        ck_assert_int_ge(sd_bus_message_rewind(m, true), 0);
}

START_TEST(test_socket_name) {
        _cleanup_free_ char *s = NULL;

        ck_assert_int_eq(resource_socket_name("gpu.intel.com/i915", &s), 0);
        ck_assert_str_eq(s, "kgpu-gpu.intel.com-i915.sock");
        free(s);
        s = NULL;
        ck_assert_int_eq(resource_socket_name("nvidia.com/mig-1g.10gb", &s), 0);
        ck_assert_str_eq(s, "kgpu-nvidia.com-mig-1g.10gb.sock");

        ck_assert(resource_name_valid("gpu.intel.com/xe"));
        ck_assert(!resource_name_valid(NULL));
        ck_assert(!resource_name_valid(""));
        ck_assert(!resource_name_valid("noslash"));
        ck_assert(!resource_name_valid("a/b/c"));
        ck_assert(!resource_name_valid("/abs"));
        ck_assert(!resource_name_valid("trailing/"));
        ck_assert(!resource_name_valid("../x"));
        ck_assert(!resource_name_valid("x/.."));
        ck_assert(!resource_name_valid("x/-y"));
        ck_assert(!resource_name_valid("a b/c"));
        ck_assert(!resource_name_valid("a/c\n"));
        ck_assert_int_eq(resource_socket_name("../../etc/x", &s), -EINVAL);
        /* s untouched on failure */
        ck_assert_str_eq(s, "kgpu-nvidia.com-mig-1g.10gb.sock");

        char longname[400];
        memset(longname, 'a', sizeof(longname) - 1);
        longname[sizeof(longname) - 1] = 0;
        longname[10] = '/';
        ck_assert(!resource_name_valid(longname));
}
END_TEST

START_TEST(test_ids_utf8) {
        char big[GRPCD_ID_MAX + 2];

        ck_assert(grpcd_device_id_valid("0000:03:00.0"));
        ck_assert(grpcd_device_id_valid("GPU-8f2c1e4a-aaaa::3"));
        ck_assert(grpcd_device_id_valid("gpu-\xc3\xa9"));         /* é */
        ck_assert(!grpcd_device_id_valid(""));
        ck_assert(!grpcd_device_id_valid(NULL));
        ck_assert(!grpcd_device_id_valid("a\tb"));
        ck_assert(!grpcd_device_id_valid("a\x7f"));
        ck_assert(!grpcd_device_id_valid("\xc3"));                /* truncated */
        ck_assert(!grpcd_device_id_valid("\xc0\xaf"));            /* overlong */
        ck_assert(!grpcd_device_id_valid("\xed\xa0\x80"));        /* surrogate */
        ck_assert(!grpcd_device_id_valid("\xf4\x90\x80\x80"));    /* > U+10FFFF */
        ck_assert(!grpcd_device_id_valid("\xff"));

        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        ck_assert(!grpcd_device_id_valid(big));
        big[GRPCD_ID_MAX] = 0;
        ck_assert(grpcd_device_id_valid(big));
}
END_TEST

START_TEST(test_error_mapping) {
        ck_assert_int_eq(grpcd_status_from_bus_error(KGPU_ERROR_UNKNOWN_DEVICE), GRPC_STATUS_INVALID_ARGUMENT);
        ck_assert_int_eq(grpcd_status_from_bus_error(KGPU_ERROR_UNKNOWN_RESOURCE), GRPC_STATUS_INVALID_ARGUMENT);
        ck_assert_int_eq(grpcd_status_from_bus_error(KGPU_ERROR_INVALID_ARGS), GRPC_STATUS_INVALID_ARGUMENT);
        ck_assert_int_eq(grpcd_status_from_bus_error(KGPU_ERROR_UNHEALTHY), GRPC_STATUS_FAILED_PRECONDITION);
        ck_assert_int_eq(grpcd_status_from_bus_error(KGPU_ERROR_EXHAUSTED), GRPC_STATUS_FAILED_PRECONDITION);
        ck_assert_int_eq(grpcd_status_from_bus_error(KGPU_ERROR_TOO_MANY_ALLOCATIONS), GRPC_STATUS_RESOURCE_EXHAUSTED);
        ck_assert_int_eq(grpcd_status_from_bus_error(KGPU_ERROR_ACCESS_DENIED), GRPC_STATUS_PERMISSION_DENIED);
        ck_assert_int_eq(grpcd_status_from_bus_error(SD_BUS_ERROR_ACCESS_DENIED), GRPC_STATUS_PERMISSION_DENIED);
        ck_assert_int_eq(grpcd_status_from_bus_error(KGPU_ERROR_STATE), GRPC_STATUS_UNAVAILABLE);
        ck_assert_int_eq(grpcd_status_from_bus_error(SD_BUS_ERROR_SERVICE_UNKNOWN), GRPC_STATUS_UNAVAILABLE);
        ck_assert_int_eq(grpcd_status_from_bus_error(SD_BUS_ERROR_NAME_HAS_NO_OWNER), GRPC_STATUS_UNAVAILABLE);
        ck_assert_int_eq(grpcd_status_from_bus_error(SD_BUS_ERROR_NO_REPLY), GRPC_STATUS_UNAVAILABLE);
        ck_assert_int_eq(grpcd_status_from_bus_error(SD_BUS_ERROR_TIMEOUT), GRPC_STATUS_UNAVAILABLE);
        ck_assert_int_eq(grpcd_status_from_bus_error("com.example.Weird"), GRPC_STATUS_INTERNAL);
        ck_assert_int_eq(grpcd_status_from_bus_error(NULL), GRPC_STATUS_INTERNAL);
}
END_TEST

START_TEST(test_backoff) {
        uint64_t b = 0;

        b = registration_next_backoff(b);
        ck_assert_uint_eq(b, 100 * 1000);
        b = registration_next_backoff(b);
        ck_assert_uint_eq(b, 200 * 1000);
        for (int i = 0; i < 20; i++)
                b = registration_next_backoff(b);
        ck_assert_uint_eq(b, 5 * 1000 * 1000);
        ck_assert_uint_eq(registration_next_backoff(3 * 1000 * 1000), 5 * 1000 * 1000);
}
END_TEST

static void append_device(sd_bus_message *m, const char *id, const char *health,
                          const int32_t *numa, size_t n) {
        ck_assert_int_ge(sd_bus_message_open_container(m, 'r', "ssai"), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "ss", id, health), 0);
        ck_assert_int_ge(sd_bus_message_append_array(m, 'i', numa, n * sizeof(int32_t)), 0);
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
}

START_TEST(test_devices_roundtrip) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();
        static const int32_t numa0[] = { 0 }, numa2[] = { 1, 3 };
        V1beta1__ListAndWatchResponse *law;
        GrpcdDevice *d = NULL;
        _cleanup_free_ uint8_t *buf = NULL;
        size_t n = 0, len = 0;

        ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "(ssai)"), 0);
        append_device(m, "0000:03:00.0", "Healthy", numa0, 1);
        append_device(m, "0000:04:00.0", "Unhealthy", NULL, 0);
        append_device(m, "0000:05:00.0", "Bogus", numa2, 2);
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        seal(m);

        ck_assert_int_eq(grpcd_devices_from_bus(m, &d, &n), 0);
        ck_assert_uint_eq(n, 3);
        ck_assert_str_eq(d[0].id, "0000:03:00.0");
        ck_assert(d[0].healthy);
        ck_assert(!d[1].healthy);
        ck_assert(!d[2].healthy); /* anything but "Healthy" is unhealthy */
        ck_assert_uint_eq(d[2].n_numa_nodes, 2);

        ck_assert_int_eq(grpcd_list_and_watch_encode(d, n, &buf, &len), 0);
        law = v1beta1__list_and_watch_response__unpack(NULL, len, buf);
        ck_assert_ptr_nonnull(law);
        ck_assert_uint_eq(law->n_devices, 3);
        ck_assert_str_eq(law->devices[0]->id, "0000:03:00.0");
        ck_assert_str_eq(law->devices[0]->health, "Healthy");
        ck_assert_ptr_nonnull(law->devices[0]->topology);
        ck_assert_uint_eq(law->devices[0]->topology->n_nodes, 1);
        ck_assert_int_eq(law->devices[0]->topology->nodes[0]->id, 0);
        ck_assert_str_eq(law->devices[1]->health, "Unhealthy");
        ck_assert_ptr_null(law->devices[1]->topology);
        ck_assert_uint_eq(law->devices[2]->topology->n_nodes, 2);
        ck_assert_int_eq(law->devices[2]->topology->nodes[1]->id, 3);
        v1beta1__list_and_watch_response__free_unpacked(law, NULL);
        grpcd_devices_free(d, n);

        /* An empty list encodes to an empty (but non-NULL) message. */
        free(buf);
        buf = NULL;
        ck_assert_int_eq(grpcd_list_and_watch_encode(NULL, 0, &buf, &len), 0);
        ck_assert_ptr_nonnull(buf);
        ck_assert_uint_eq(len, 0);
}
END_TEST

START_TEST(test_devices_hostile) {
        GrpcdDevice *d = (GrpcdDevice *) 0x1;
        size_t n = 4711;
        int32_t many[GRPCD_NUMA_NODES_MAX + 1] = {};

        /* duplicate id */
        {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();
                ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "(ssai)"), 0);
                append_device(m, "x", "Healthy", NULL, 0);
                append_device(m, "x", "Healthy", NULL, 0);
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                seal(m);
                ck_assert_int_eq(grpcd_devices_from_bus(m, &d, &n), -EBADMSG);
        }
        /* bad id */
        {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();
                ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "(ssai)"), 0);
                append_device(m, "", "Healthy", NULL, 0);
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                seal(m);
                ck_assert_int_eq(grpcd_devices_from_bus(m, &d, &n), -EBADMSG);
        }
        /* too many NUMA nodes */
        {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();
                ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "(ssai)"), 0);
                append_device(m, "y", "Healthy", many, ELEMENTSOF(many));
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                seal(m);
                ck_assert_int_eq(grpcd_devices_from_bus(m, &d, &n), -EBADMSG);
        }
        /* wrong signature */
        {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();
                ck_assert_int_ge(sd_bus_message_append(m, "as", 1, "x"), 0);
                seal(m);
                ck_assert_int_eq(grpcd_devices_from_bus(m, &d, &n), -EBADMSG);
        }
        /* too many devices */
        {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();
                ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "(ssai)"), 0);
                for (unsigned i = 0; i <= GRPCD_DEVICES_MAX; i++) {
                        char id[32];

                        snprintf(id, sizeof(id), "dev%u", i);
                        append_device(m, id, "Healthy", NULL, 0);
                }
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                seal(m);
                ck_assert_int_eq(grpcd_devices_from_bus(m, &d, &n), -EBADMSG);
        }
        /* ret_* untouched on failure */
        ck_assert_ptr_eq(d, (GrpcdDevice *) 0x1);
        ck_assert_uint_eq(n, 4711);
}
END_TEST

static uint8_t *pack_allocate(char ***ids, const size_t *n_ids, size_t n_containers, size_t *ret_len) {
        V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
        V1beta1__ContainerAllocateRequest c[8], *cp[8];
        uint8_t *buf;

        ck_assert_uint_le(n_containers, 8);
        for (size_t i = 0; i < n_containers; i++) {
                v1beta1__container_allocate_request__init(&c[i]);
                c[i].devices_ids = ids[i];
                c[i].n_devices_ids = n_ids[i];
                cp[i] = &c[i];
        }
        req.container_requests = cp;
        req.n_container_requests = n_containers;
        *ret_len = v1beta1__allocate_request__get_packed_size(&req);
        buf = malloc(*ret_len + 1);
        ck_assert_ptr_nonnull(buf);
        v1beta1__allocate_request__pack(&req, buf);
        return buf;
}

START_TEST(test_allocate_request) {
        char *c0[] = { (char *) "0000:03:00.0" }, *c1[] = { (char *) "a", (char *) "b" };
        char **ids[] = { c0, c1 };
        size_t n_ids[] = { 1, 2 }, len, n_containers = 0;
        _cleanup_free_ uint8_t *buf = pack_allocate(ids, n_ids, 2, &len);
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();
        _cleanup_strv_free_ char **l0 = NULL, **l1 = NULL;
        const char *reason = NULL;

        ck_assert_int_eq(grpcd_allocate_request_to_bus(buf, len, m, &n_containers, NULL, &reason), 0);
        ck_assert_uint_eq(n_containers, 2);
        seal(m);
        ck_assert_str_eq(sd_bus_message_get_signature(m, true), "aas");
        ck_assert_int_ge(sd_bus_message_enter_container(m, 'a', "as"), 0);
        ck_assert_int_ge(sd_bus_message_read_strv(m, &l0), 0);
        ck_assert_int_ge(sd_bus_message_read_strv(m, &l1), 0);
        ck_assert_uint_eq(strv_length(l0), 1);
        ck_assert_str_eq(l0[0], "0000:03:00.0");
        ck_assert_uint_eq(strv_length(l1), 2);
        ck_assert_str_eq(l1[1], "b");
}
END_TEST

START_TEST(test_allocate_request_hostile) {
        const char *reason;
        size_t len, n_containers = 4711;

        /* garbage */
        {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();
                static const uint8_t junk[] = { 0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01 };

                reason = NULL;
                ck_assert_int_eq(grpcd_allocate_request_to_bus(junk, sizeof(junk), m, &n_containers, NULL, &reason),
                                 -EBADMSG);
                ck_assert_ptr_nonnull(reason);
        }
        /* no containers */
        {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();

                reason = NULL;
                ck_assert_int_eq(grpcd_allocate_request_to_bus((const uint8_t *) "", 0, m, &n_containers, NULL, &reason),
                                 -EINVAL);
                ck_assert_ptr_nonnull(strstr(reason, "no container"));
        }
        /* a container with no ids, one with an invalid id */
        {
                char *bad[] = { (char *) "ok", (char *) "a\nb" };
                char **ids[] = { bad, bad };
                size_t n_ids[] = { 0, 2 };
                _cleanup_free_ uint8_t *buf = pack_allocate(ids, n_ids, 1, &len);
                _cleanup_free_ uint8_t *buf2 = NULL;
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m2 = new_message();

                ck_assert_int_eq(grpcd_allocate_request_to_bus(buf, len, m, &n_containers, NULL, &reason), -EINVAL);
                ids[0] = bad;
                n_ids[0] = 2;
                buf2 = pack_allocate(ids, n_ids, 1, &len);
                ck_assert_int_eq(grpcd_allocate_request_to_bus(buf2, len, m2, &n_containers, NULL, &reason), -EINVAL);
                ck_assert_ptr_nonnull(strstr(reason, "invalid device id"));
        }
        /* too many ids in one container */
        {
                size_t n = GRPCD_IDS_MAX + 1;
                char **many = calloc(n, sizeof(char *));
                char **ids[] = { many };
                size_t n_ids[] = { n };
                _cleanup_free_ uint8_t *buf = NULL;
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();

                ck_assert_ptr_nonnull(many);
                for (size_t i = 0; i < n; i++)
                        many[i] = (char *) "id";
                buf = pack_allocate(ids, n_ids, 1, &len);
                free(many);
                ck_assert_int_eq(grpcd_allocate_request_to_bus(buf, len, m, &n_containers, NULL, &reason), -EINVAL);
                ck_assert_ptr_nonnull(strstr(reason, "too many"));
        }
        ck_assert_uint_eq(n_containers, 4711);
}
END_TEST

static void append_container_response(sd_bus_message *m, size_t n_devices) {
        ck_assert_int_ge(sd_bus_message_open_container(m, 'r', "a{ss}a(ssb)a(sss)a{ss}as"), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "a{ss}", 1, "ZES_ENABLE_SYSMAN", "1"), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "a(ssb)", 1, "/dev/shm/x", "/run/x", 1), 0);
        ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "(sss)"), 0);
        for (size_t i = 0; i < n_devices; i++)
                ck_assert_int_ge(sd_bus_message_append(m, "(sss)", "/dev/dri/card0", "/dev/dri/card0", "rw"), 0);
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "a{ss}", 2, "k1", "v1", "k2", "v2"), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "as", 1, "intel.com/gpu=0"), 0);
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
}

START_TEST(test_allocate_reply) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();
        _cleanup_free_ uint8_t *buf = NULL;
        V1beta1__AllocateResponse *resp;
        V1beta1__ContainerAllocateResponse *c;
        size_t len;

        ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "(a{ss}a(ssb)a(sss)a{ss}as)"), 0);
        append_container_response(m, 2);
        append_container_response(m, 1);
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        seal(m);

        ck_assert_int_eq(grpcd_allocate_reply_from_bus(m, 2, &buf, &len), 0);
        resp = v1beta1__allocate_response__unpack(NULL, len, buf);
        ck_assert_ptr_nonnull(resp);
        ck_assert_uint_eq(resp->n_container_responses, 2);
        c = resp->container_responses[0];
        ck_assert_uint_eq(c->n_envs, 1);
        ck_assert_str_eq(c->envs[0]->key, "ZES_ENABLE_SYSMAN");
        ck_assert_str_eq(c->envs[0]->value, "1");
        ck_assert_uint_eq(c->n_mounts, 1);
        ck_assert_str_eq(c->mounts[0]->container_path, "/dev/shm/x");
        ck_assert_str_eq(c->mounts[0]->host_path, "/run/x");
        ck_assert(c->mounts[0]->read_only);
        ck_assert_uint_eq(c->n_devices, 2);
        ck_assert_str_eq(c->devices[1]->host_path, "/dev/dri/card0");
        ck_assert_str_eq(c->devices[1]->permissions, "rw");
        ck_assert_uint_eq(c->n_annotations, 2);
        ck_assert_str_eq(c->annotations[1]->value, "v2");
        ck_assert_uint_eq(c->n_cdi_devices, 1);
        ck_assert_str_eq(c->cdi_devices[0]->name, "intel.com/gpu=0");
        ck_assert_uint_eq(resp->container_responses[1]->n_devices, 1);
        v1beta1__allocate_response__free_unpacked(resp, NULL);
}
END_TEST

START_TEST(test_allocate_reply_hostile) {
        uint8_t *buf = (uint8_t *) 0x1;
        size_t len = 4711;

        /* container count differs from the request's */
        {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();

                ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "(a{ss}a(ssb)a(sss)a{ss}as)"), 0);
                append_container_response(m, 1);
                append_container_response(m, 1);
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                seal(m);
                ck_assert_int_eq(grpcd_allocate_reply_from_bus(m, 1, &buf, &len), -EBADMSG);
                ck_assert_int_ge(sd_bus_message_rewind(m, true), 0);
                ck_assert_int_eq(grpcd_allocate_reply_from_bus(m, 3, &buf, &len), -EBADMSG);
        }
        /* too many device specs */
        {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();

                ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "(a{ss}a(ssb)a(sss)a{ss}as)"), 0);
                append_container_response(m, GRPCD_ENTRIES_MAX + 1);
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                seal(m);
                ck_assert_int_eq(grpcd_allocate_reply_from_bus(m, 1, &buf, &len), -EBADMSG);
        }
        /* wrong shape */
        {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();

                ck_assert_int_ge(sd_bus_message_append(m, "aas", 1, 1, "x"), 0);
                seal(m);
                ck_assert_int_eq(grpcd_allocate_reply_from_bus(m, 1, &buf, &len), -EBADMSG);
        }
        ck_assert_ptr_eq(buf, (uint8_t *) 0x1);
        ck_assert_uint_eq(len, 4711);
}
END_TEST

START_TEST(test_preferred) {
        V1beta1__PreferredAllocationRequest req = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
        V1beta1__ContainerPreferredAllocationRequest c = V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT;
        V1beta1__ContainerPreferredAllocationRequest *cp = &c;
        V1beta1__PreferredAllocationResponse *resp;
        char *avail[] = { (char *) "a", (char *) "b", (char *) "c" }, *must[] = { (char *) "b" };
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = new_message();
        _cleanup_strv_free_ char **la = NULL, **lm = NULL;
        _cleanup_free_ uint8_t *buf = NULL, *out = NULL;
        const char *reason = NULL;
        size_t len, n_containers = 0, out_len;
        int32_t size;

        c.available_deviceids = avail;
        c.n_available_deviceids = 3;
        c.must_include_deviceids = must;
        c.n_must_include_deviceids = 1;
        c.allocation_size = 2;
        req.container_requests = &cp;
        req.n_container_requests = 1;
        len = v1beta1__preferred_allocation_request__get_packed_size(&req);
        buf = malloc(len);
        ck_assert_ptr_nonnull(buf);
        v1beta1__preferred_allocation_request__pack(&req, buf);

        ck_assert_int_eq(grpcd_preferred_request_to_bus(buf, len, m, &n_containers, &reason), 0);
        ck_assert_uint_eq(n_containers, 1);
        seal(m);
        ck_assert_str_eq(sd_bus_message_get_signature(m, true), "a(asasi)");
        ck_assert_int_ge(sd_bus_message_enter_container(m, 'a', "(asasi)"), 0);
        ck_assert_int_ge(sd_bus_message_enter_container(m, 'r', "asasi"), 0);
        ck_assert_int_ge(sd_bus_message_read_strv(m, &la), 0);
        ck_assert_int_ge(sd_bus_message_read_strv(m, &lm), 0);
        ck_assert_int_ge(sd_bus_message_read(m, "i", &size), 0);
        ck_assert_uint_eq(strv_length(la), 3);
        ck_assert_str_eq(lm[0], "b");
        ck_assert_int_eq(size, 2);

        /* bad allocation sizes */
        for (int32_t bad_size = -1; bad_size <= 0; bad_size++) {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m2 = new_message();
                _cleanup_free_ uint8_t *b2 = NULL;

                c.allocation_size = bad_size;
                len = v1beta1__preferred_allocation_request__get_packed_size(&req);
                b2 = malloc(len);
                ck_assert_ptr_nonnull(b2);
                v1beta1__preferred_allocation_request__pack(&req, b2);
                ck_assert_int_eq(grpcd_preferred_request_to_bus(b2, len, m2, NULL, &reason), -EINVAL);
        }

        /* reply: aas -> PreferredAllocationResponse, count checked */
        ck_assert_int_ge(sd_bus_message_append(reply, "aas", 1, 2, "b", "a"), 0);
        seal(reply);
        ck_assert_int_eq(grpcd_preferred_reply_from_bus(reply, 2, &out, &out_len), -EBADMSG);
        ck_assert_int_ge(sd_bus_message_rewind(reply, true), 0);
        ck_assert_int_eq(grpcd_preferred_reply_from_bus(reply, 1, &out, &out_len), 0);
        resp = v1beta1__preferred_allocation_response__unpack(NULL, out_len, out);
        ck_assert_ptr_nonnull(resp);
        ck_assert_uint_eq(resp->n_container_responses, 1);
        ck_assert_uint_eq(resp->container_responses[0]->n_deviceids, 2);
        ck_assert_str_eq(resp->container_responses[0]->deviceids[0], "b");
        v1beta1__preferred_allocation_response__free_unpacked(resp, NULL);
}
END_TEST

START_TEST(test_prestart_and_register) {
        V1beta1__PreStartContainerRequest req = V1BETA1__PRE_START_CONTAINER_REQUEST__INIT;
        char *ids[] = { (char *) "0000:03:00.0" };
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = new_message();
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m2 = new_message();
        _cleanup_strv_free_ char **l = NULL;
        _cleanup_free_ uint8_t *buf = NULL, *empty = NULL;
        V1beta1__RegisterRequest *rr;
        V1beta1__DevicePluginOptions *o;
        const char *reason = NULL;
        size_t len;

        req.devices_ids = ids;
        req.n_devices_ids = 1;
        len = v1beta1__pre_start_container_request__get_packed_size(&req);
        buf = malloc(len);
        ck_assert_ptr_nonnull(buf);
        v1beta1__pre_start_container_request__pack(&req, buf);
        ck_assert_int_eq(grpcd_prestart_request_to_bus(buf, len, m, &reason), 0);
        seal(m);
        ck_assert_int_ge(sd_bus_message_read_strv(m, &l), 0);
        ck_assert_str_eq(l[0], "0000:03:00.0");
        ck_assert_int_eq(grpcd_prestart_request_to_bus((const uint8_t *) "", 0, m2, &reason), -EINVAL);

        ck_assert_int_eq(grpcd_prestart_reply_encode(&empty, &len), 0);
        ck_assert_uint_eq(len, 0);

        free(buf);
        buf = NULL;
        ck_assert_int_eq(grpcd_register_request_encode("kgpu-gpu.intel.com-i915.sock", "gpu.intel.com/i915",
                                                       false, true, &buf, &len), 0);
        rr = v1beta1__register_request__unpack(NULL, len, buf);
        ck_assert_ptr_nonnull(rr);
        ck_assert_str_eq(rr->version, "v1beta1");
        ck_assert_str_eq(rr->endpoint, "kgpu-gpu.intel.com-i915.sock");
        ck_assert_str_eq(rr->resource_name, "gpu.intel.com/i915");
        ck_assert_ptr_nonnull(rr->options);
        ck_assert(!rr->options->pre_start_required);
        ck_assert(rr->options->get_preferred_allocation_available);
        v1beta1__register_request__free_unpacked(rr, NULL);
        ck_assert_int_eq(grpcd_register_request_encode("", "gpu.intel.com/i915", false, false, &buf, &len), -EINVAL);

        free(buf);
        buf = NULL;
        ck_assert_int_eq(grpcd_options_encode(true, false, &buf, &len), 0);
        o = v1beta1__device_plugin_options__unpack(NULL, len, buf);
        ck_assert_ptr_nonnull(o);
        ck_assert(o->pre_start_required);
        ck_assert(!o->get_preferred_allocation_available);
        v1beta1__device_plugin_options__free_unpacked(o, NULL);
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("grpcd-convert");
        TCase *tc = tcase_create("pure");
        TCase *tb = tcase_create("bus");

        tcase_add_test(tc, test_socket_name);
        tcase_add_test(tc, test_ids_utf8);
        tcase_add_test(tc, test_error_mapping);
        tcase_add_test(tc, test_backoff);
        suite_add_tcase(s, tc);

        tcase_add_checked_fixture(tb, bus_setup, bus_teardown);
        tcase_add_test(tb, test_devices_roundtrip);
        tcase_add_test(tb, test_devices_hostile);
        tcase_add_test(tb, test_allocate_request);
        tcase_add_test(tb, test_allocate_request_hostile);
        tcase_add_test(tb, test_allocate_reply);
        tcase_add_test(tb, test_allocate_reply_hostile);
        tcase_add_test(tb, test_preferred);
        tcase_add_test(tb, test_prestart_and_register);
        suite_add_tcase(s, tb);
        return s;
}

KGPU_TEST_SUITE(suite)
