/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-inroot.c — paths inside another root (common/inroot.c): a tree whose symlinks try
 * every way out (absolute targets, "..", chains, loops) resolved with openat2() and by
 * hand; both must give the same in-root path, never one outside; mkdir_p through such
 * links creates inside the root only; inroot_path_is_plain().
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/inroot.h"
#include "common/util.h"
#include "tests/unit/test-main.h"

static char root[64], outside[64];

static void at(const char *rel, char *buf, size_t size) {
        (void) snprintf(buf, size, "%s%s", root, rel);
}

static void setup(void) {
        char p[512], t[512];

        strcpy(root, "/tmp/test-inroot.XXXXXX");
        strcpy(outside, "/tmp/test-inroot-out.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(root));
        ck_assert_ptr_nonnull(mkdtemp(outside));
        at("/usr", p, sizeof(p));
        ck_assert_int_eq(mkdir(p, 0755), 0);
        at("/usr/lib", p, sizeof(p));
        ck_assert_int_eq(mkdir(p, 0755), 0);
        at("/usr/lib/libx.so.1.2", p, sizeof(p));
        ck_assert_int_eq(close(open(p, O_CREAT|O_WRONLY|O_CLOEXEC, 0644)), 0);
        at("/usr/lib/libx.so.1", p, sizeof(p));
        ck_assert_int_eq(symlink("libx.so.1.2", p), 0);
        at("/lib", p, sizeof(p));
        ck_assert_int_eq(symlink("/usr/lib", p), 0);                 /* absolute: the root's /usr/lib */
        at("/up", p, sizeof(p));
        ck_assert_int_eq(symlink("../../../../../../usr", p), 0);     /* ".." stops at the root */
        at("/out", p, sizeof(p));
        ck_assert_int_eq(symlink(outside, p), 0);                    /* the host's directory: not followed */
        (void) snprintf(t, sizeof(t), "%s/secret", outside);
        ck_assert_int_eq(close(open(t, O_CREAT|O_WRONLY|O_CLOEXEC, 0644)), 0);
        at("/loop", p, sizeof(p));
        ck_assert_int_eq(symlink("loop", p), 0);
        at("/chain", p, sizeof(p));
        ck_assert_int_eq(symlink("/lib/../lib/./libx.so.1", p), 0);
}

static void teardown(void) {
        char cmd[256];

        (void) snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", root, outside);
        (void) system(cmd);
}

/* Both resolutions of path: the in-root result, or the error. */
static void check_both(const char *path, const char *want, int want_error) {
        _cleanup_close_ int fd = inroot_open_root(root);
        _cleanup_free_ char *a = NULL, *b = NULL;
        int ra, rb;

        ck_assert_int_ge(fd, 0);
        ra = inroot_resolve(fd, path, &a);
        rb = inroot_resolve_by_hand(fd, path, &b);
        if (want) {
                ck_assert_msg(ra == 0 && rb == 0, "%s: %d %d", path, ra, rb);
                ck_assert_str_eq(a, want);
                ck_assert_str_eq(b, want);
        } else {
                ck_assert_msg(ra == want_error && rb == want_error, "%s: %d %d, want %d", path, ra, rb, want_error);
        }
}

START_TEST(test_resolve) {
        check_both("/usr/lib/libx.so.1", "/usr/lib/libx.so.1.2", 0);
        check_both("/lib/libx.so.1", "/usr/lib/libx.so.1.2", 0);
        check_both("lib/libx.so.1", "/usr/lib/libx.so.1.2", 0);
        check_both("/up/lib/libx.so.1.2", "/usr/lib/libx.so.1.2", 0);
        check_both("/../../../usr/lib/libx.so.1", "/usr/lib/libx.so.1.2", 0);
        check_both("/chain", "/usr/lib/libx.so.1.2", 0);
        check_both("/", "/", 0);
        check_both("/usr/..", "/", 0);
        /* The host's directory is not reachable: inside the root it does not exist. */
        check_both("/out/secret", NULL, -ENOENT);
        check_both("/loop", NULL, -ELOOP);
        check_both("/usr/lib/libx.so.1.2/x", NULL, -ENOTDIR);
}
END_TEST

START_TEST(test_mkdir_p) {
        _cleanup_close_ int fd = inroot_open_root(root);
        char p[512];
        int d;

        ck_assert_int_ge(fd, 0);
        /* Through /lib (absolute link): created under the root's /usr/lib. */
        d = inroot_mkdir_p(fd, "/lib/new/deeper", 0755);
        ck_assert_int_ge(d, 0);
        close(d);
        at("/usr/lib/new/deeper", p, sizeof(p));
        ck_assert_int_eq(access(p, F_OK), 0);
        /* Through a link to the host's directory: refused, nothing made there. */
        ck_assert_int_lt(inroot_mkdir_p(fd, "/out/made", 0755), 0);
        (void) snprintf(p, sizeof(p), "%s/made", outside);
        ck_assert_int_eq(access(p, F_OK), -1);
        d = inroot_mkdir_p(fd, "/", 0755);
        ck_assert_int_ge(d, 0);
        close(d);
}
END_TEST

START_TEST(test_plain) {
        ck_assert(inroot_path_is_plain("/usr/lib/x"));
        ck_assert(inroot_path_is_plain("/a"));
        ck_assert(!inroot_path_is_plain("/"));
        ck_assert(!inroot_path_is_plain(""));
        ck_assert(!inroot_path_is_plain(NULL));
        ck_assert(!inroot_path_is_plain("usr/lib"));
        ck_assert(!inroot_path_is_plain("/usr/../etc"));
        ck_assert(!inroot_path_is_plain("/usr/./lib"));
        ck_assert(!inroot_path_is_plain("/usr//lib"));
        ck_assert(!inroot_path_is_plain("/usr/lib/"));
        ck_assert(!inroot_path_is_plain("/usr/l\nib"));
        ck_assert(!inroot_path_is_plain("/.."));
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("inroot");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_resolve);
        tcase_add_test(tc, test_mkdir_p);
        tcase_add_test(tc, test_plain);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(suite)
