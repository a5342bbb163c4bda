/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-main.h — the one main() of every Check test program under tests/unit.
 *
 * Contract: a test program is one or more source files linked with test-main.c (the
 * unit_main_dep of tests/unit/meson.build). Each file registers the suites it builds with
 * KGPU_TEST_SUITE(fn), fn being `Suite *fn(void)`; at most one file of a program
 * registers a preparation with KGPU_TEST_PREPARE(fn), fn being `int fn(void)`.
 * Registration runs in constructors, before main(). main() calls the preparation first
 * (0: go on; any other value, 77 to skip, is the program's exit status), then builds every
 * registered suite, runs them all in one SRunner (CK_NORMAL, Check's default fork mode,
 * so CK_RUN_SUITE/CK_RUN_CASE select as usual) and exits EXIT_SUCCESS when no test
 * failed, EXIT_FAILURE otherwise or when nothing was registered.
 */
#pragma once

#include <check.h>

typedef Suite *(*TestSuiteFunc)(void);
typedef int (*TestPrepareFunc)(void);

/* Called by the macros below; aborts on more suites than test-main.c holds or on a
 * second preparation. */
void test_main_register_suite(TestSuiteFunc f);
void test_main_register_prepare(TestPrepareFunc f);

#define KGPU_TEST_SUITE(f)                                                          \
        static void __attribute__((constructor)) test_main_register_suite_##f(void) { \
                test_main_register_suite(f);                                        \
        }

#define KGPU_TEST_PREPARE(f)                                                          \
        static void __attribute__((constructor)) test_main_register_prepare_##f(void) { \
                test_main_register_prepare(f);                                        \
        }
