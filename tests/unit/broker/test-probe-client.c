/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-probe-client.c — the broker's parser of the probe's io.kgpu.Gpu1 properties. */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <systemd/sd-bus.h>

#include "common/util.h"
#include "daemons/broker/probe-client.h"
#include "tests/unit/test-main.h"

static sd_bus *bus;

static void setup(void) {
        int fds[2];

        /* A started (not yet authenticated) peer bus is enough to build messages. */
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0, fds), 0);
        ck_assert_int_ge(sd_bus_new(&bus), 0);
        ck_assert_int_ge(sd_bus_set_fd(bus, fds[0], fds[0]), 0);
        ck_assert_int_ge(sd_bus_start(bus), 0);
        close(fds[1]);
}

static void teardown(void) {
        bus = sd_bus_close_unref(bus);
}

typedef struct Prop {
        const char *name;
        char type;              /* 's', 'i', 'q', 'u', 't' or 'a' (as) */
        const char *s;
        int64_t n;
} Prop;

/* Builds a sealed message "a{sv}s" (the trailing string proves the dict was consumed). */
static sd_bus_message *props(const Prop *p, size_t n) {
        sd_bus_message *m = NULL;

        ck_assert_int_ge(sd_bus_message_new_signal(bus, &m, "/io/kgpu/Probe1/gpu/x",
                                                   "org.freedesktop.DBus.Properties", "PropertiesChanged"), 0);
        ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "{sv}"), 0);
        for (size_t i = 0; i < n; i++) {
                ck_assert_int_ge(sd_bus_message_open_container(m, 'e', "sv"), 0);
                ck_assert_int_ge(sd_bus_message_append(m, "s", p[i].name), 0);
                switch (p[i].type) {
                case 's':
                        ck_assert_int_ge(sd_bus_message_append(m, "v", "s", p[i].s), 0);
                        break;
                case 'i':
                        ck_assert_int_ge(sd_bus_message_append(m, "v", "i", (int32_t) p[i].n), 0);
                        break;
                case 'q':
                        ck_assert_int_ge(sd_bus_message_append(m, "v", "q", (uint16_t) p[i].n), 0);
                        break;
                case 'u':
                        ck_assert_int_ge(sd_bus_message_append(m, "v", "u", (uint32_t) p[i].n), 0);
                        break;
                case 't':
                        ck_assert_int_ge(sd_bus_message_append(m, "v", "t", (uint64_t) p[i].n), 0);
                        break;
                case 'a':
                        ck_assert_int_ge(sd_bus_message_append(m, "v", "as", 2, "/dev/a", "/dev/b"), 0);
                        break;
                default:
                        ck_abort();
                }
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        }
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "s", "end"), 0);
        ck_assert_int_ge(sd_bus_message_seal(m, 1, 0), 0);
        ck_assert_int_ge(sd_bus_message_rewind(m, true), 0);
        return m;
}

static void assert_at_end_marker(sd_bus_message *m) {
        const char *s = NULL;

        ck_assert_int_gt(sd_bus_message_read(m, "s", &s), 0);
        ck_assert_str_eq(s, "end");
}

static int apply(const Prop *p, size_t n, GpuInfo *info) {
        sd_bus_message *m = props(p, n);
        int r = probe_gpu_properties_apply(m, info);

        assert_at_end_marker(m);
        sd_bus_message_unref(m);
        return r;
}

START_TEST(test_probe_full_object) {
        GpuInfo info = { .numa_node = -1 };
        const Prop p[] = {
                { "Id", 's', "0000:03:00.0" },
                { "Vendor", 's', "intel" },
                { "Driver", 's', "i915" },
                { "PciAddress", 's', "0000:03:00.0" },
                { "VendorId", 'q', NULL, 0x8086 },
                { "DeviceId", 'q', NULL, 0x56a0 },
                { "MemoryBytes", 't', NULL, 1LL << 34 },
                { "Tiles", 'u', NULL, 1 },
                { "NumaNode", 'i', NULL, 1 },
                { "CardNode", 's', "/dev/dri/card0" },
                { "RenderNode", 's', "/dev/dri/renderD128" },
                { "DeviceNodes", 'a' },
                { "Health", 's', "Healthy" },
                { "HealthReason", 's', "" },
                { "SomethingNew", 's', "ignored" },
        };

        ck_assert_int_eq(apply(p, ELEMENTSOF(p), &info), 0);
        ck_assert_str_eq(info.id, "0000:03:00.0");
        ck_assert_str_eq(info.vendor, "intel");
        ck_assert_str_eq(info.driver, "i915");
        ck_assert_str_eq(info.card_node, "/dev/dri/card0");
        ck_assert_str_eq(info.render_node, "/dev/dri/renderD128");
        ck_assert_int_eq(info.numa_node, 1);
        ck_assert_uint_eq(info.device_id, 0x56a0);
        ck_assert(info.healthy);

        /* A partial update changes only what it names. */
        const Prop q[] = {
                { "Health", 's', "Unhealthy" },
                { "HealthReason", 's', "removed" },
        };
        ck_assert_int_eq(apply(q, ELEMENTSOF(q), &info), 0);
        ck_assert(!info.healthy);
        ck_assert_str_eq(info.health_reason, "removed");
        ck_assert_str_eq(info.id, "0000:03:00.0");
        ck_assert_str_eq(info.card_node, "/dev/dri/card0");

        /* Anything but "Healthy" is unhealthy; an empty dict changes nothing. */
        const Prop w[] = { { "Health", 's', "healthy" } };
        info.healthy = true;
        ck_assert_int_eq(apply(w, ELEMENTSOF(w), &info), 0);
        ck_assert(!info.healthy);
        ck_assert_int_eq(apply(NULL, 0, &info), 0);
        ck_assert_str_eq(info.driver, "i915");
        gpu_info_done(&info);
}
END_TEST

START_TEST(test_probe_numa_clamped) {
        GpuInfo info = { .numa_node = 3 };
        const Prop big[] = { { "NumaNode", 'i', NULL, 99999 } };
        const Prop neg[] = { { "NumaNode", 'i', NULL, -7 } };
        const Prop ok[] = { { "NumaNode", 'i', NULL, 2 } };

        ck_assert_int_eq(apply(big, 1, &info), 0);
        ck_assert_int_eq(info.numa_node, -1);
        ck_assert_int_eq(apply(ok, 1, &info), 0);
        ck_assert_int_eq(info.numa_node, 2);
        ck_assert_int_eq(apply(neg, 1, &info), 0);
        ck_assert_int_eq(info.numa_node, -1);
        gpu_info_done(&info);
}
END_TEST

START_TEST(test_probe_hostile_values) {
        char longid[300];
        const char *bad_nodes[] = {
                "/etc/passwd", "/dev/", "/dev/../etc/shadow", "/dev/dri/../../etc", "/dev//x",
                "/dev/./x", "dev/dri/card0", "/dev/dri/card0\n", "/dev/dri/",
        };
        GpuInfo info = { .numa_node = -1 };
        const Prop base[] = {
                { "Id", 's', "0000:03:00.0" },
                { "CardNode", 's', "/dev/dri/card0" },
        };

        ck_assert_int_eq(apply(base, ELEMENTSOF(base), &info), 0);

        for (size_t i = 0; i < ELEMENTSOF(bad_nodes); i++) {
                const Prop p[] = { { "Driver", 's', "xe" }, { "CardNode", 's', bad_nodes[i] } };

                ck_assert_msg(apply(p, ELEMENTSOF(p), &info) == -EBADMSG, "accepted %s", bad_nodes[i]);
                /* Nothing of a refused update is applied. */
                ck_assert_str_eq(info.card_node, "/dev/dri/card0");
                ck_assert_ptr_null(info.driver);
        }

        memset(longid, 'x', sizeof(longid) - 1);
        longid[sizeof(longid) - 1] = 0;
        const Prop long_id[] = { { "Id", 's', longid } };
        const Prop empty_id[] = { { "Id", 's', "" } };
        const Prop ctl_id[] = { { "Id", 's', "0000:03:00.0\x1b[2J" } };
        const Prop wrong_type[] = { { "Vendor", 's', "intel" }, { "Id", 'u', NULL, 7 } };
        const Prop wrong_numa[] = { { "NumaNode", 's', "0" } };
        const Prop wrong_devid[] = { { "DeviceId", 'u', NULL, 0x56a0 } };

        ck_assert_int_eq(apply(long_id, 1, &info), -EBADMSG);
        ck_assert_int_eq(apply(empty_id, 1, &info), -EBADMSG);
        ck_assert_int_eq(apply(ctl_id, 1, &info), -EBADMSG);
        ck_assert_int_eq(apply(wrong_type, ELEMENTSOF(wrong_type), &info), -EBADMSG);
        ck_assert_int_eq(apply(wrong_numa, 1, &info), -EBADMSG);
        ck_assert_int_eq(apply(wrong_devid, 1, &info), -EBADMSG);
        ck_assert_uint_eq(info.device_id, 0);
        ck_assert_str_eq(info.id, "0000:03:00.0");
        ck_assert_ptr_null(info.vendor);
        ck_assert_int_eq(info.numa_node, -1);

        /* An empty node is fine (no render node). */
        const Prop none[] = { { "RenderNode", 's', "" } };
        ck_assert_int_eq(apply(none, 1, &info), 0);
        ck_assert_str_eq(info.render_node, "");
        gpu_info_done(&info);
}
END_TEST

static Suite *probe_client_suite(void) {
        Suite *s = suite_create("probe-client");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_probe_full_object);
        tcase_add_test(tc, test_probe_numa_clamped);
        tcase_add_test(tc, test_probe_hostile_values);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(probe_client_suite)
