/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-bus-introspect.c — vtables to XML over the in-process bus. */

#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bus-introspect.h"
#include "common/cleanup.h"
#include "common/util.h"
#include "tests/unit/test-main.h"

static int method_ping(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return sd_bus_reply_method_return(m, "s", "pong");
}

static const sd_bus_vtable test_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD_WITH_ARGS("Ping", SD_BUS_ARGS("s", word), SD_BUS_RESULT("s", answer), method_ping, 0),
        SD_BUS_VTABLE_END,
};

START_TEST(test_introspect) {
        const BusIntrospectEntry e[] = {
                { "/io/kgpu/Test1", "io.kgpu.Test1", test_vtable, false },
                { "/io/kgpu/Test1/sub", "io.kgpu.Sub1", test_vtable, true },
        };
        _cleanup_free_ char *xml = NULL;

        ck_assert_int_eq(bus_introspect_xml(e, 2, &xml), 0);
        ck_assert_ptr_nonnull(strstr(xml, "<interface name=\"io.kgpu.Test1\">"));
        ck_assert_ptr_nonnull(strstr(xml, "<interface name=\"io.kgpu.Sub1\">"));
        ck_assert_ptr_nonnull(strstr(xml, "<arg type=\"s\" name=\"word\" direction=\"in\"/>"));
        ck_assert_ptr_nonnull(strstr(xml, "<arg type=\"s\" name=\"answer\" direction=\"out\"/>"));
        ck_assert_ptr_null(strstr(xml, "org.freedesktop.DBus.Peer"));
}
END_TEST

/* Nothing to introspect (kgpu-grpcd): an empty node at once. It used to wait for the
 * authentication of a bus pair nobody called over: sd-bus's 90 s timeout. */
START_TEST(test_introspect_none) {
        _cleanup_free_ char *xml = NULL;
        uint64_t t0 = now_usec(CLOCK_MONOTONIC);

        ck_assert_int_eq(bus_introspect_xml(NULL, 0, &xml), 0);
        ck_assert_uint_lt(now_usec(CLOCK_MONOTONIC) - t0, 2 * 1000000ULL);
        ck_assert_ptr_nonnull(strstr(xml, "<node>\n</node>\n"));
        ck_assert_ptr_null(strstr(xml, "<interface"));
}
END_TEST

static Suite *bus_introspect_suite(void) {
        Suite *s = suite_create("bus-introspect");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_introspect);
        tcase_add_test(tc, test_introspect_none);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(bus_introspect_suite)
