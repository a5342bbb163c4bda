/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-config-hostile.c — kgpu.yaml that is hostile rather than merely wrong: NUL bytes,
 * invalid UTF-8, over-long values, deep nesting, anchors and aliases, huge files,
 * numbers past every bound, files that are not regular files. Each must be refused
 * with an error naming the file and line (and key where there is one), never accepted
 * half-way and never crash (docs/HOSTILE-INPUT.md).
 */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "common/util.h"
#include "tests/unit/test-main.h"

static void clear_env(void) {
        (void) clearenv();
}

/* Loads text (len bytes, may hold NULs); asserts failure with r and an error holding want. */
static void expect_error_len(const char *text, size_t len, int r_want, const char *want) {
        Config *c = NULL;
        char *err = NULL;
        int r;

        clear_env();
        r = config_load_string(text, len, "kgpu.yaml", NULL, 0, &c, &err);
        ck_assert_msg(r == r_want, "r=%d, want %d, for %.60s", r, r_want, text);
        ck_assert_ptr_null(c);
        ck_assert_ptr_nonnull(err);
        ck_assert_msg(strncmp(err, "kgpu.yaml", 9) == 0, "error does not name the file: %s", err);
        ck_assert_msg(strstr(err, want), "error '%s' lacks '%s'", err, want);
        free(err);
}

static void expect_error(const char *text, const char *want) {
        expect_error_len(text, strlen(text), -EINVAL, want);
}

START_TEST(test_bytes) {
        static const char nul[] = "logLevel: de\0bug\n";

        expect_error_len(nul, sizeof nul - 1, -EINVAL, "kgpu.yaml:1: YAML syntax error: control characters");
        expect_error("logLevel: \xff\xfe\n", "kgpu.yaml:1: YAML syntax error");
        expect_error("logLevel: \x1b[31mred\n", "kgpu.yaml:1: YAML syntax error: control characters");
        expect_error("intel:\n\tsharedDevNum: 2\n", "kgpu.yaml:2: YAML syntax error");
}
END_TEST

START_TEST(test_sizes) {
        _cleanup_free_ char *big = NULL, *longval = NULL, *deep = NULL;
        size_t n = 1024 * 1024 + 1;

        /* Over 1 MiB: refused before libyaml sees it. */
        big = malloc(n);
        ck_assert_ptr_nonnull(big);
        memset(big, '#', n);
        expect_error_len(big, n, -EFBIG, "kgpu.yaml: file too large");

        longval = malloc(6000);
        ck_assert_ptr_nonnull(longval);
        strcpy(longval, "logLevel: ");
        memset(longval + 10, 'a', 5000);
        strcpy(longval + 5010, "\n");
        expect_error(longval, "kgpu.yaml:1: logLevel: value too long");

        /* Mappings nested deeper than any real key. */
        deep = calloc(1, 4096);
        ck_assert_ptr_nonnull(deep);
        for (int i = 0; i < 40; i++) {
                char line[64];
                snprintf(line, sizeof line, "%*sk%d:\n", 2 * i, "", i);
                strcat(deep, line);
        }
        expect_error(deep, "nesting too deep");
        /* 200 nested flow sequences (libyaml itself recurses on them). */
        memset(deep, 0, 4096);
        strcpy(deep, "intel: ");
        memset(deep + 7, '[', 200);
        deep[207] = '1';
        memset(deep + 208, ']', 200);
        strcpy(deep + 408, "\n");
        expect_error(deep, "kgpu.yaml:1");
}
END_TEST

START_TEST(test_numbers) {
        expect_error("intel:\n  sharedDevNum: 99999999999999999999\n",
                     "kgpu.yaml:2: intel.sharedDevNum: expected an unsigned integer");
        expect_error("intel:\n  sharedDevNum: 4294967296\n", "kgpu.yaml:2: intel.sharedDevNum");
        expect_error("intel:\n  sharedDevNum: -1\n", "kgpu.yaml:2: intel.sharedDevNum: expected an unsigned integer");
        expect_error("intel:\n  sharedDevNum: 1e3\n", "kgpu.yaml:2: intel.sharedDevNum: expected an unsigned integer");
        expect_error("intel:\n  sharedDevNum: \" 2\"\n", "kgpu.yaml:2: intel.sharedDevNum");
        expect_error("grpc:\n  maxMessageSize: 0\n", "kgpu.yaml:2: grpc.maxMessageSize");
}
END_TEST

START_TEST(test_structure) {
        /* Aliases cannot smuggle a mapping into a value or a key that does not exist. */
        expect_error("intel: &x {sharedDevNum: 2}\nbroker: *x\n", "unknown key 'broker.sharedDevNum'");
        expect_error("a: &a [x, x, x, x]\nb: [*a, *a, *a, *a]\n", "kgpu.yaml:1: unknown key 'a'");
        expect_error("x: &x {logLevel: info}\nintel:\n  sharedDevNum: *x\n", "unknown key");
        expect_error("intel:\n  allowIDs: [[0x56a0]]\n", "kgpu.yaml:2: intel.allowIDs");
        expect_error("? [a, b]\n: 1\n", "kgpu.yaml:1");
        expect_error("logLevel: *nothing\n", "kgpu.yaml:1: YAML syntax error");
}
END_TEST

START_TEST(test_not_a_file) {
        _cleanup_(config_freep) Config *c = NULL;
        char *err = NULL;

        clear_env();
        /* A directory, a character device: refused with the path named, not read. */
        ck_assert_int_lt(config_load("/tmp", NULL, 0, &c, &err), 0);
        ck_assert_ptr_null(c);
        ck_assert_ptr_nonnull(err);
        ck_assert_msg(strstr(err, "/tmp"), "error '%s' does not name the path", err);
        free(err);
        err = NULL;
        ck_assert_int_lt(config_load("/dev/zero", NULL, 0, &c, &err), 0);
        ck_assert_ptr_null(c);
        ck_assert_msg(err && strstr(err, "/dev/zero"), "error '%s' does not name the path", err);
        free(err);
}
END_TEST

static Suite *config_hostile_suite(void) {
        Suite *s = suite_create("config-hostile");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_bytes);
        tcase_add_test(tc, test_sizes);
        tcase_add_test(tc, test_numbers);
        tcase_add_test(tc, test_structure);
        tcase_add_test(tc, test_not_a_file);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(config_hostile_suite)
