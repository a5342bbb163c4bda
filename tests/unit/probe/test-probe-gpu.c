/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-probe-gpu.c — the probe's Gpu object and sysfs value parsers (daemons/probe/gpu.c). */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/gpu.h"
#include "daemons/probe/udev-scan.h"
#include "tests/unit/test-main.h"

START_TEST(test_parse_pci_id) {
        uint16_t v = 7;

        ck_assert_int_eq(gpu_parse_pci_id("0x8086", &v), 0);
        ck_assert_uint_eq(v, 0x8086);
        ck_assert_int_eq(gpu_parse_pci_id("0x56A0", &v), 0);
        ck_assert_uint_eq(v, 0x56a0);
        ck_assert_int_eq(gpu_parse_pci_id("e20b", &v), 0);
        ck_assert_uint_eq(v, 0xe20b);
        ck_assert_int_eq(gpu_parse_pci_id("0x1", &v), 0);
        ck_assert_uint_eq(v, 1);

        v = 7;
        ck_assert_int_eq(gpu_parse_pci_id("zz", &v), -EINVAL);
        ck_assert_int_eq(gpu_parse_pci_id("0x", &v), -EINVAL);
        ck_assert_int_eq(gpu_parse_pci_id("", &v), -EINVAL);
        ck_assert_int_eq(gpu_parse_pci_id(NULL, &v), -EINVAL);
        ck_assert_int_eq(gpu_parse_pci_id("0x12345", &v), -EINVAL);
        ck_assert_int_eq(gpu_parse_pci_id("-0x1", &v), -EINVAL);
        ck_assert_int_eq(gpu_parse_pci_id("0x80 86", &v), -EINVAL);
        ck_assert_int_eq(gpu_parse_pci_id("0x8086\n", &v), -EINVAL);
        /* ret untouched on failure */
        ck_assert_uint_eq(v, 7);
}
END_TEST

START_TEST(test_parse_numa_node) {
        int32_t v = 42;
        char big[200];

        ck_assert_int_eq(gpu_parse_numa_node("0", &v), 0);
        ck_assert_int_eq(v, 0);
        ck_assert_int_eq(gpu_parse_numa_node("-1", &v), 0);
        ck_assert_int_eq(v, -1);
        ck_assert_int_eq(gpu_parse_numa_node("3", &v), 0);
        ck_assert_int_eq(v, 3);

        v = 42;
        ck_assert_int_eq(gpu_parse_numa_node("abc", &v), -EINVAL);
        ck_assert_int_eq(gpu_parse_numa_node("-7", &v), -ERANGE);
        ck_assert_int_eq(gpu_parse_numa_node("4096", &v), -ERANGE);
        ck_assert_int_eq(gpu_parse_numa_node("99999999999", &v), -ERANGE);
        ck_assert_int_eq(gpu_parse_numa_node("", &v), -EINVAL);
        ck_assert_int_eq(gpu_parse_numa_node("1x", &v), -EINVAL);
        memset(big, '1', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        ck_assert_int_eq(gpu_parse_numa_node(big, &v), -EINVAL);
        ck_assert_int_eq(v, 42);
}
END_TEST

START_TEST(test_parse_memory) {
        uint64_t v = 9;

        ck_assert_int_eq(gpu_parse_memory_bytes("17179869184", &v), 0);
        ck_assert_uint_eq(v, UINT64_C(17179869184));
        ck_assert_int_eq(gpu_parse_memory_bytes("0", &v), 0);
        ck_assert_uint_eq(v, 0);
        ck_assert_int_eq(gpu_parse_memory_bytes("0x400000000", &v), 0);
        ck_assert_uint_eq(v, UINT64_C(0x400000000));

        v = 9;
        ck_assert_int_eq(gpu_parse_memory_bytes("-5", &v), -EINVAL);
        ck_assert_int_eq(gpu_parse_memory_bytes("18446744073709551616", &v), -ERANGE);
        ck_assert_int_eq(gpu_parse_memory_bytes("18446744073709551615", &v), -ERANGE);  /* > 1 PiB */
        ck_assert_int_eq(gpu_parse_memory_bytes("lots", &v), -EINVAL);
        ck_assert_int_eq(gpu_parse_memory_bytes(" 1", &v), -EINVAL);
        ck_assert_uint_eq(v, 9);

        ck_assert_uint_eq(gpu_memory_total(100, 2), 200);
        ck_assert_uint_eq(gpu_memory_total(0, 2), 0);
        ck_assert_uint_eq(gpu_memory_total(UINT64_MAX / 2 + 1, 2), 0);
        ck_assert_uint_eq(gpu_memory_total(UINT64_C(1) << 50, 64), UINT64_C(1) << 56);
}
END_TEST

START_TEST(test_pci_address) {
        ck_assert(gpu_pci_address_is_valid("0000:03:00.0"));
        ck_assert(gpu_pci_address_is_valid("10de:ff:1f.7"));
        ck_assert(!gpu_pci_address_is_valid("0000:03:00.8"));
        ck_assert(!gpu_pci_address_is_valid("0000:03:00"));
        ck_assert(!gpu_pci_address_is_valid("0000:03:00.00"));
        ck_assert(!gpu_pci_address_is_valid("0000-03:00.0"));
        ck_assert(!gpu_pci_address_is_valid("000g:03:00.0"));
        ck_assert(!gpu_pci_address_is_valid("pci0000:00"));
        ck_assert(!gpu_pci_address_is_valid(""));
        ck_assert(!gpu_pci_address_is_valid(NULL));
}
END_TEST

START_TEST(test_node_kind) {
        ck_assert_int_eq(gpu_node_kind_from_sysname("card0"), GPU_NODE_CARD);
        ck_assert_int_eq(gpu_node_kind_from_sysname("card12"), GPU_NODE_CARD);
        ck_assert_int_eq(gpu_node_kind_from_sysname("renderD128"), GPU_NODE_RENDER);
        ck_assert_int_eq(gpu_node_kind_from_sysname("card0-DP-1"), GPU_NODE_NONE);
        ck_assert_int_eq(gpu_node_kind_from_sysname("card"), GPU_NODE_NONE);
        ck_assert_int_eq(gpu_node_kind_from_sysname("renderD"), GPU_NODE_NONE);
        ck_assert_int_eq(gpu_node_kind_from_sysname("controlD64x"), GPU_NODE_NONE);
        ck_assert_int_eq(gpu_node_kind_from_sysname("ttm"), GPU_NODE_NONE);
        ck_assert_int_eq(gpu_node_kind_from_sysname("card99999999999"), GPU_NODE_NONE);
        ck_assert_int_eq(gpu_node_kind_from_sysname(NULL), GPU_NODE_NONE);

        ck_assert(gpu_driver_is_intel("i915"));
        ck_assert(gpu_driver_is_intel("xe"));
        ck_assert(!gpu_driver_is_intel("amdgpu"));
        ck_assert(!gpu_driver_is_intel(NULL));
}
END_TEST

START_TEST(test_gpu_object) {
        _cleanup_(gpu_freep) Gpu *a = NULL, *b = NULL;
        _cleanup_strv_free_ char **d = NULL;

        ck_assert_int_eq(gpu_new("", &a), -EINVAL);
        ck_assert_int_eq(gpu_new("0000:03:00.0", &a), 0);
        ck_assert_str_eq(a->id, "0000:03:00.0");
        ck_assert_str_eq(a->health, GPU_HEALTHY);
        ck_assert_str_eq(a->card_node, "");
        ck_assert_uint_eq(a->tiles, 1);
        ck_assert_int_eq(a->numa_node, -1);
        ck_assert_uint_eq(strv_length(a->device_nodes), 0);

        ck_assert_int_eq(gpu_new("0000:03:00.0", &b), 0);
        ck_assert_int_eq(free_and_strdup(&b->card_node, "/dev/dri/card0"), 0);
        ck_assert_int_eq(free_and_strdup(&b->render_node, "/dev/dri/renderD128"), 0);
        ck_assert_int_eq(gpu_update_device_nodes(b), 0);
        ck_assert_uint_eq(strv_length(b->device_nodes), 2);
        ck_assert_str_eq(b->device_nodes[1], "/dev/dri/renderD128");
        b->tiles = 2;

        ck_assert_int_eq(gpu_diff_properties(a, b, &d), 0);
        ck_assert_uint_eq(strv_length(d), 4);
        ck_assert(strv_contains(d, "CardNode"));
        ck_assert(strv_contains(d, "RenderNode"));
        ck_assert(strv_contains(d, "DeviceNodes"));
        ck_assert(strv_contains(d, "Tiles"));
        d = strv_free(d);

        ck_assert_int_eq(gpu_copy_properties(a, b), 0);
        ck_assert_int_eq(gpu_diff_properties(a, b, &d), 0);
        ck_assert_uint_eq(strv_length(d), 0);
        d = strv_free(d);

        ck_assert_int_eq(gpu_set_health(a, GPU_UNHEALTHY, "removed"), 1);
        ck_assert_int_eq(gpu_set_health(a, GPU_UNHEALTHY, "removed"), 0);
        ck_assert_str_eq(a->health_reason, "removed");
        ck_assert_int_eq(gpu_diff_properties(b, a, &d), 0);
        ck_assert_uint_eq(strv_length(d), 2);
        ck_assert(strv_contains(d, "Health"));
        ck_assert(strv_contains(d, "HealthReason"));
        ck_assert_int_eq(gpu_set_health(a, GPU_HEALTHY, NULL), 1);
        ck_assert_str_eq(a->health_reason, "");

        ck_assert_ptr_null(gpu_free(NULL));
}
END_TEST

/* Random short strings from a skewed alphabet: the parsers either accept a value in
 * range or reject it without touching ret; nothing crashes (ASan/UBSan runs this too). */
START_TEST(test_parsers_random) {
        static const char alphabet[] = "0123456789abcdefxX-+ \n\t\xff";
        unsigned seed = 12345;

        for (unsigned i = 0; i < 200000; i++) {
                char buf[80];
                size_t len = (size_t) (rand_r(&seed) % (sizeof(buf) - 1));
                uint16_t id = 1;
                int32_t numa = 2;
                uint64_t mem = 3;
                int r;

                for (size_t k = 0; k < len; k++)
                        buf[k] = alphabet[rand_r(&seed) % (sizeof(alphabet) - 1)];
                buf[len] = 0;

                r = gpu_parse_pci_id(buf, &id);
                ck_assert(r == 0 || (r == -EINVAL && id == 1));
                r = gpu_parse_numa_node(buf, &numa);
                ck_assert(r == 0 ? (numa >= -1 && numa <= 4095) : numa == 2);
                r = gpu_parse_memory_bytes(buf, &mem);
                ck_assert(r == 0 ? mem <= GPU_MEMORY_PER_TILE_MAX : mem == 3);
                (void) gpu_pci_address_is_valid(buf);
                (void) gpu_node_kind_from_sysname(buf);
        }
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("probe-gpu");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_parse_pci_id);
        tcase_add_test(tc, test_parse_numa_node);
        tcase_add_test(tc, test_parse_memory);
        tcase_add_test(tc, test_pci_address);
        tcase_add_test(tc, test_node_kind);
        tcase_add_test(tc, test_gpu_object);
        tcase_add_test(tc, test_parsers_random);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(suite)
