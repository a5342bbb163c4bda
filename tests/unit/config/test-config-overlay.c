/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-config-overlay.c — named NVIDIA configs over kgpu.yaml (common/config-overlay.c):
 * the named file's NVIDIA settings replace kgpu.yaml's as a whole while kgpu's own keys
 * stay; the environment still wins; a kgpu key in a named file is refused with
 * file:line:key; unknown and invalid names; a kubelet ConfigMap mount (symlinks into
 * ..data/) and upstream's extension-less keys; links leading out of the directory,
 * FIFOs, directories and oversized files are never read.
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "common/config-overlay.h"
#include "common/util.h"
#include "tests/unit/test-main.h"

static char dir[64], configs[128], outside[64], kgpu_yaml[160];

static const char KGPU_YAML[] =
        "logLevel: debug\n"
        "intel:\n"
        "  sharedDevNum: 3\n"
        "nvidia:\n"
        "  replicaPolicy: packed\n"
        "version: v1\n"
        "flags:\n"
        "  migStrategy: mixed\n"
        "sharing:\n"
        "  timeSlicing:\n"
        "    resources:\n"
        "    - name: nvidia.com/gpu\n"
        "      replicas: 4\n";

static const char MPS_YAML[] =
        "version: v1\n"
        "sharing:\n"
        "  mps:\n"
        "    resources:\n"
        "    - name: nvidia.com/gpu\n"
        "      replicas: 2\n";

static void write_at(const char *base, const char *rel, const char *text) {
        char p[512];
        FILE *f;

        (void) snprintf(p, sizeof(p), "%s/%s", base, rel);
        f = fopen(p, "we");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(fputs(text, f) >= 0, 1);
        ck_assert_int_eq(fclose(f), 0);
}

static void link_at(const char *target, const char *rel) {
        char p[512];

        (void) snprintf(p, sizeof(p), "%s/%s", configs, rel);
        ck_assert_int_eq(symlink(target, p), 0);
}

static void setup(void) {
        strcpy(dir, "/tmp/test-overlay.XXXXXX");
        strcpy(outside, "/tmp/test-overlay-out.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        ck_assert_ptr_nonnull(mkdtemp(outside));
        (void) snprintf(configs, sizeof(configs), "%s/configs", dir);
        ck_assert_int_eq(mkdir(configs, 0755), 0);
        (void) snprintf(kgpu_yaml, sizeof(kgpu_yaml), "%s/kgpu.yaml", dir);
        write_at(dir, "kgpu.yaml", KGPU_YAML);
        write_at(configs, "mps.yaml", MPS_YAML);
        unsetenv("MIG_STRATEGY");
}

static void teardown(void) {
        char cmd[256];

        (void) snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dir, outside);
        ck_assert_int_eq(system(cmd), 0);
        unsetenv("MIG_STRATEGY");
}

static int load(const char *name, Config **ret, char **ret_error) {
        *ret_error = NULL;
        return config_load_named(kgpu_yaml, NULL, 0, configs, name, ret, ret_error);
}

START_TEST(test_replaces_nvidia_settings) {
        _cleanup_(config_freep) Config *own = NULL, *named = NULL;
        _cleanup_free_ char *error = NULL;

        /* Without a name: kgpu.yaml as it is. */
        ck_assert_int_eq(load("", &own, &error), 0);
        ck_assert_int_eq(own->nvidia_mig_strategy, MIG_STRATEGY_MIXED);
        ck_assert_uint_eq(own->nvidia_time_slicing.n_resources, 1);
        ck_assert_uint_eq(own->nvidia_mps.n_resources, 0);

        ck_assert_int_eq(load("mps", &named, &error), 0);
        ck_assert_ptr_null(error);
        /* The named file's NVIDIA settings, as a whole: what it leaves out is the default. */
        ck_assert_uint_eq(named->nvidia_mps.n_resources, 1);
        ck_assert_uint_eq(named->nvidia_mps.resources[0].replicas, 2);
        ck_assert_uint_eq(named->nvidia_time_slicing.n_resources, 0);
        ck_assert_int_eq(named->nvidia_mig_strategy, MIG_STRATEGY_NONE);
        /* kgpu's own keys stay kgpu.yaml's. */
        ck_assert_str_eq(named->log_level, "debug");
        ck_assert_uint_eq(named->intel_shared_dev_num, 3);
        ck_assert_int_eq(named->nvidia_replica_policy, REPLICA_POLICY_PACKED);
        ck_assert_str_eq(named->file, kgpu_yaml);
}
END_TEST

START_TEST(test_environment_wins) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *error = NULL;

        ck_assert_int_eq(setenv("MIG_STRATEGY", "single", 1), 0);
        ck_assert_int_eq(load("mps", &c, &error), 0);
        ck_assert_int_eq(c->nvidia_mig_strategy, MIG_STRATEGY_SINGLE);
}
END_TEST

START_TEST(test_kgpu_key_refused) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *error = NULL, *want = NULL;

        write_at(configs, "bad.yaml", "version: v1\nflags:\n  migStrategy: single\nintel:\n  sharedDevNum: 2\n");
        ck_assert_int_eq(load("bad", &c, &error), -EINVAL);
        ck_assert_ptr_null(c);
        ck_assert_int_ge(asprintf(&want, "%s/bad.yaml:4: intel: ", configs), 0);
        ck_assert_msg(error && strncmp(error, want, strlen(want)) == 0, "error: %s", error);
        free(error);
        error = NULL;
        write_at(configs, "bad2.yaml", "logLevel: err\n");
        ck_assert_int_eq(load("bad2", &c, &error), -EINVAL);
        ck_assert_msg(error && strstr(error, "bad2.yaml:1: logLevel: "), "error: %s", error);
}
END_TEST

START_TEST(test_invalid_named_file) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *error = NULL;

        write_at(configs, "ts.yaml", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                 "    - name: nvidia.com/gpu\n      replicas: many\n");
        ck_assert_int_eq(load("ts", &c, &error), -EINVAL);
        ck_assert_msg(error && strstr(error, "ts.yaml:") && strstr(error, "replicas"), "error: %s", error);
        free(error);
        error = NULL;
        write_at(configs, "syntax.yaml", "version: v1\nflags: [\n");
        ck_assert_int_eq(load("syntax", &c, &error), -EINVAL);
        ck_assert_msg(error && strstr(error, "syntax.yaml:"), "error: %s", error);
}
END_TEST

START_TEST(test_unknown_and_invalid_names) {
        _cleanup_(config_freep) Config *c = NULL;
        char *error = NULL, longname[CONFIG_NAME_MAX + 2];

        ck_assert_int_eq(load("nope", &c, &error), -ENOENT);
        ck_assert_msg(error && strstr(error, "no config named 'nope'"), "error: %s", error);
        free(error);

        ck_assert(config_name_valid("mig-single"));
        ck_assert(config_name_valid("a.b_C-9"));
        memset(longname, 'a', sizeof(longname));
        longname[CONFIG_NAME_MAX] = 0;
        ck_assert(config_name_valid(longname));
        longname[CONFIG_NAME_MAX] = 'a';
        longname[CONFIG_NAME_MAX + 1] = 0;
        ck_assert(!config_name_valid(longname));
        ck_assert(!config_name_valid(""));
        ck_assert(!config_name_valid(NULL));
        ck_assert(!config_name_valid(".hidden"));
        ck_assert(!config_name_valid("..data"));
        ck_assert(!config_name_valid("../mps"));
        ck_assert(!config_name_valid("a/b"));
        ck_assert(!config_name_valid("a b"));
        ck_assert(!config_name_valid("a\nb"));
        ck_assert_int_eq(load("../configs/mps", &c, &error), -EINVAL);
        free(error);
        ck_assert_int_eq(load(longname, &c, &error), -EINVAL);
        free(error);
        ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_configmap_layout) {
        _cleanup_(config_freep) Config *c = NULL, *d = NULL;
        _cleanup_free_ char *error = NULL;
        char p[256];

        /* As the kubelet mounts a ConfigMap: <key> -> ..data/<key>, ..data -> ..<timestamp>/ */
        (void) snprintf(p, sizeof(p), "%s/..2026_11_27_04_00_00.123456789", configs);
        ck_assert_int_eq(mkdir(p, 0755), 0);
        write_at(p, "ts4.yaml", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                 "    - name: nvidia.com/gpu\n      replicas: 4\n");
        write_at(p, "mig-single", "version: v1\nflags:\n  migStrategy: single\n");
        link_at("..2026_11_27_04_00_00.123456789", "..data");
        link_at("..data/ts4.yaml", "ts4.yaml");
        link_at("..data/mig-single", "mig-single");
        ck_assert_int_eq(load("ts4", &c, &error), 0);
        ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 1);
        ck_assert_uint_eq(c->nvidia_time_slicing.resources[0].replicas, 4);
        /* Upstream's keys carry no extension. */
        ck_assert_int_eq(load("mig-single", &d, &error), 0);
        ck_assert_int_eq(d->nvidia_mig_strategy, MIG_STRATEGY_SINGLE);
}
END_TEST

START_TEST(test_never_outside) {
        _cleanup_(config_freep) Config *c = NULL;
        char *error = NULL, p[256];

        /* Valid configs outside the directory, reached by absolute and relative links. */
        write_at(outside, "evil.yaml", MPS_YAML);
        (void) snprintf(p, sizeof(p), "%s/evil.yaml", outside);
        link_at(p, "abs.yaml");
        link_at("../../../../../../../../../../../../..", "up");
        (void) snprintf(p, sizeof(p), "../../../../../../../../..%s/evil.yaml", outside);
        link_at(p, "rel.yaml");
        (void) snprintf(p, sizeof(p), "up%s/evil.yaml", outside);
        link_at(p, "chain.yaml");
        ck_assert_int_eq(load("abs", &c, &error), -ENOENT);
        free(error);
        ck_assert_int_eq(load("rel", &c, &error), -ENOENT);
        free(error);
        ck_assert_int_eq(load("chain", &c, &error), -ENOENT);
        free(error);
        ck_assert_ptr_null(c);

        /* Not regular files. */
        (void) snprintf(p, sizeof(p), "%s/fifo.yaml", configs);
        ck_assert_int_eq(mkfifo(p, 0644), 0);
        ck_assert_int_eq(load("fifo", &c, &error), -EINVAL);
        ck_assert_msg(error && strstr(error, "not a regular file"), "error: %s", error);
        free(error);
        (void) snprintf(p, sizeof(p), "%s/sub.yaml", configs);
        ck_assert_int_eq(mkdir(p, 0755), 0);
        ck_assert_int_eq(load("sub", &c, &error), -ENOENT);
        free(error);
        link_at("/dev/zero", "zero.yaml");      /* in the directory: <configs>/dev/zero, absent */
        ck_assert_int_eq(load("zero", &c, &error), -ENOENT);
        free(error);
        ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_oversized) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *error = NULL, *big = NULL;
        size_t n = 1024 * 1024 + 16;

        big = malloc(n + 1);
        ck_assert_ptr_nonnull(big);
        memset(big, '#', n);
        big[n] = 0;
        write_at(configs, "big.yaml", big);
        ck_assert_int_eq(load("big", &c, &error), -EFBIG);
        ck_assert_msg(error && strstr(error, "too large"), "error: %s", error);
}
END_TEST

START_TEST(test_missing_directory) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *error = NULL;

        ck_assert_int_eq(config_load_named(kgpu_yaml, NULL, 0, "/nonexistent/kgpu-configs", "mps", &c, &error),
                         -ENOENT);
        ck_assert_msg(error && strstr(error, "no config named 'mps'"), "error: %s", error);
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("config-overlay");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_replaces_nvidia_settings);
        tcase_add_test(tc, test_environment_wins);
        tcase_add_test(tc, test_kgpu_key_refused);
        tcase_add_test(tc, test_invalid_named_file);
        tcase_add_test(tc, test_unknown_and_invalid_names);
        tcase_add_test(tc, test_configmap_layout);
        tcase_add_test(tc, test_never_outside);
        tcase_add_test(tc, test_oversized);
        tcase_add_test(tc, test_missing_directory);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(suite)
