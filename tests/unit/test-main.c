/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-main.c — runs the suites the files of a test program registered (test-main.h). */

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/unit/test-main.h"

/* Enough for the largest program; a program needing more aborts at start. */
#define TEST_MAIN_MAX_SUITES 16

static TestSuiteFunc test_suites[TEST_MAIN_MAX_SUITES];
static size_t test_n_suites;
static TestPrepareFunc test_prepare;

void test_main_register_suite(TestSuiteFunc f) {
        if (test_n_suites >= TEST_MAIN_MAX_SUITES) {
                fprintf(stderr, "test-main: more than %d suites registered.\n", TEST_MAIN_MAX_SUITES);
                abort();
        }
        test_suites[test_n_suites++] = f;
}

void test_main_register_prepare(TestPrepareFunc f) {
        if (test_prepare) {
                fprintf(stderr, "test-main: a second preparation registered.\n");
                abort();
        }
        test_prepare = f;
}

int main(void) {
        SRunner *sr;
        int failed;

        if (test_n_suites == 0) {
                fprintf(stderr, "test-main: no suite registered.\n");
                return EXIT_FAILURE;
        }
        if (test_prepare) {
                int r = test_prepare();
                if (r != 0)
                        return r;
        }

        sr = srunner_create(test_suites[0]());
        for (size_t i = 1; i < test_n_suites; i++)
                srunner_add_suite(sr, test_suites[i]());
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
