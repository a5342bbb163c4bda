/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-util.c — string, vector, number and file helpers. */

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "common/paths.h"
#include "tests/unit/test-main.h"

START_TEST(test_parse_numbers) {
        uint32_t u;
        int32_t i;
        uint64_t v;

        ck_assert_int_eq(safe_atou32("42", &u), 0);
        ck_assert_uint_eq(u, 42);
        ck_assert_int_eq(safe_atou32("4294967296", &u), -ERANGE);
        ck_assert_int_eq(safe_atou32("-1", &u), -EINVAL);
        ck_assert_int_eq(safe_atou32("12x", &u), -EINVAL);
        ck_assert_int_eq(safe_atou32("", &u), -EINVAL);
        ck_assert_int_eq(safe_atou32(" 1", &u), -EINVAL);
        ck_assert_int_eq(safe_atoi32("-7", &i), 0);
        ck_assert_int_eq(i, -7);
        ck_assert_int_eq(safe_atoi32("-2147483648", &i), 0);
        ck_assert_int_eq(i, INT32_MIN);
        ck_assert_int_eq(safe_atoi32("2147483648", &i), -ERANGE);
        ck_assert_int_eq(safe_atou64("0x56c0", &v), 0);
        ck_assert_uint_eq(v, 0x56c0);
        ck_assert_int_eq(safe_atou64("0x", &v), -EINVAL);
        ck_assert_int_eq(parse_boolean("yes"), 1);
        ck_assert_int_eq(parse_boolean("Off"), 0);
        ck_assert_int_eq(parse_boolean("maybe"), -EINVAL);
}
END_TEST

START_TEST(test_strv) {
        _cleanup_strv_free_ char **l = NULL;
        _cleanup_free_ char *j = NULL;

        ck_assert_int_eq(strv_extend(&l, "b"), 0);
        ck_assert_int_eq(strv_extend(&l, "a"), 0);
        ck_assert_int_eq(strv_length(l), 2);
        strv_sort(l);
        j = strv_join(l, ",");
        ck_assert_str_eq(j, "a,b");
        ck_assert(strv_contains(l, "a"));
        ck_assert(!strv_contains(l, "c"));
        ck_assert_str_eq(startswith("renderD128", "renderD"), "128");
        ck_assert_ptr_null(startswith("card0", "renderD"));
}
END_TEST

START_TEST(test_array_reserve) {
        _cleanup_free_ uint32_t *v = NULL;
        size_t allocated = 0;
        char *in[] = { (char *) "a", (char *) "bc", (char *) "", NULL };
        _cleanup_free_ char **packed = strv_pack(in);

        ck_assert_int_eq(array_reserve((void **) &v, &allocated, 0, sizeof(uint32_t)), 0);
        ck_assert_ptr_null(v);
        for (uint32_t i = 0; i < 1000; i++) {
                size_t before = allocated;

                ck_assert_int_eq(array_reserve((void **) &v, &allocated, i + 1, sizeof(uint32_t)), 0);
                ck_assert_uint_ge(allocated, i + 1);
                /* geometric: it grows only when full, at least doubling */
                ck_assert(allocated == before || allocated >= MAX(2 * before, (size_t) 8));
                v[i] = i;
        }
        for (uint32_t i = 0; i < 1000; i++)
                ck_assert_uint_eq(v[i], i);

        /* strv_pack: one allocation, same strings */
        ck_assert_ptr_nonnull(packed);
        ck_assert(strv_equal(packed, in));
        ck_assert_ptr_ne(packed[0], in[0]);
}
END_TEST

START_TEST(test_files) {
        char dir[] = "/tmp/kgpu-test-util-XXXXXX";
        _cleanup_free_ char *s = NULL;
        _cleanup_close_ int fd = -EBADF;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        fd = open(dir, O_PATH|O_DIRECTORY|O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write_file_atomic_at(fd, "f", "hello\n", 6, 0644), 0);
        ck_assert_int_eq(read_one_line_file_at(fd, "f", 64, &s), 0);
        ck_assert_str_eq(s, "hello");
        s = mfree(s);
        ck_assert_int_eq(read_one_line_file_at(fd, "f", 3, &s), -EFBIG);
        ck_assert_ptr_null(s);
        ck_assert_int_eq(read_one_line_file_at(fd, "missing", 64, &s), -ENOENT);
        ck_assert_int_eq(unlinkat(fd, "f", 0), 0);
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static unsigned count_entries(int fd) {
        _cleanup_close_ int d = openat(fd, ".", O_RDONLY|O_DIRECTORY|O_CLOEXEC);
        struct dirent *de;
        unsigned n = 0;
        DIR *dir;

        ck_assert_int_ge(d, 0);
        dir = fdopendir(TAKE_FD(d));
        ck_assert_ptr_nonnull(dir);
        while ((de = readdir(dir)))
                if (!streq(de->d_name, ".") && !streq(de->d_name, ".."))
                        n++;
        closedir(dir);
        return n;
}

/* The temp file is a new one of an unguessable name: a hard link or symlink planted at
 * the name an earlier version used ("<name>.tmp.<pid>", opened with O_TRUNC) is never
 * written through, and nothing is left behind. */
START_TEST(test_atomic_write_planted) {
        char dir[] = "/tmp/kgpu-test-util-XXXXXX";
        _cleanup_free_ char *s = NULL, *planted = NULL, *cmd = NULL;
        _cleanup_close_ int fd = -EBADF;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        fd = open(dir, O_PATH|O_DIRECTORY|O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write_file_atomic_at(fd, "victim", "secret\n", 7, 0600), 0);
        ck_assert_int_ge(asprintf(&planted, "f.tmp.%d", (int) getpid()), 0);
        ck_assert_int_eq(linkat(fd, "victim", fd, planted, 0), 0);
        ck_assert_int_eq(symlinkat("victim", fd, "sub-link"), 0);
        ck_assert_uint_eq(count_entries(fd), 3);

        ck_assert_int_eq(write_file_atomic_at(fd, "f", "hello\n", 6, 0644), 0);
        ck_assert_int_eq(read_one_line_file_at(fd, "f", 64, &s), 0);
        ck_assert_str_eq(s, "hello");
        s = mfree(s);
        ck_assert_int_eq(read_one_line_file_at(fd, "victim", 64, &s), 0);
        ck_assert_str_eq(s, "secret");
        s = mfree(s);
        ck_assert_uint_eq(count_entries(fd), 4);

        /* Replacing a symlink replaces the link, never what it points to. */
        ck_assert_int_eq(write_file_atomic_at(fd, "sub-link", "new\n", 4, 0644), 0);
        ck_assert_int_eq(read_one_line_file_at(fd, "victim", 64, &s), 0);
        ck_assert_str_eq(s, "secret");
        s = mfree(s);

        /* A rename that fails (a directory with something in it is in the way) leaves no
         * temp file; a path in a subdirectory gets its temp file there. */
        ck_assert_int_eq(mkdirat(fd, "d", 0755), 0);
        ck_assert_int_eq(write_file_atomic_at(fd, "d/x", "x\n", 2, 0644), 0);
        ck_assert_uint_eq(count_entries(fd), 5);
        ck_assert_int_lt(write_file_atomic_at(fd, "d", "y\n", 2, 0644), 0);
        ck_assert_uint_eq(count_entries(fd), 5);
        ck_assert_int_eq(write_file_atomic_at(fd, "d/", "y\n", 2, 0644), -EINVAL);
        ck_assert_int_eq(write_file_atomic_at(fd, "", "y\n", 2, 0644), -EINVAL);

        ck_assert_int_ge(asprintf(&cmd, "rm -rf '%s'", dir), 0);
        ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *util_suite(void) {
        Suite *s = suite_create("util");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_parse_numbers);
        tcase_add_test(tc, test_strv);
        tcase_add_test(tc, test_array_reserve);
        tcase_add_test(tc, test_files);
        tcase_add_test(tc, test_atomic_write_planted);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(util_suite)
