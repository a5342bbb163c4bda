/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-config.c — kgpu.yaml parsing, precedence and error messages. */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/util.h"
#include "tests/unit/test-main.h"

static void clear_env(void) {
        static const char * const vars[] = {
                "KGPU_CONFIG", "CONFIG_FILE", "KGPU_DEVICE_PLUGIN_PATH", "SHARED_DEV_NUM",
                "STATE_DIRECTORY", "KGPU_STATE_DIRECTORY", "KGPU_LOG_LEVEL", "ALLOCATION_POLICY",
                "RUNTIME_DIRECTORY", "KGPU_RUNTIME_DIRECTORY",
        };
        for (size_t i = 0; i < ELEMENTSOF(vars); i++)
                unsetenv(vars[i]);
}

static Config *load(const char *text, const ConfigOverride *ov, size_t n, char **err) {
        Config *c = NULL;
        int r = config_load_string(text, strlen(text), "kgpu.yaml", ov, n, &c, err);
        return r < 0 ? NULL : c;
}

START_TEST(test_defaults) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL;

        clear_env();
        c = load("", NULL, 0, &err);
        ck_assert_ptr_nonnull(c);
        ck_assert_str_eq(c->device_plugin_path, "/var/lib/kubelet/device-plugins");
        ck_assert_str_eq(c->kubelet_socket, "/var/lib/kubelet/device-plugins/kubelet.sock");
        ck_assert_str_eq(c->pod_resources_socket, "/var/lib/kubelet/pod-resources/kubelet.sock");
        ck_assert_str_eq(c->grpc_user, "kgpu");
        ck_assert_str_eq(c->broker_user, "kgpu-broker");
        ck_assert_uint_eq(c->intel_shared_dev_num, 1);
        ck_assert_int_eq(c->intel_allocation_policy, ALLOCATION_POLICY_NONE);
        ck_assert(c->intel_enabled);
        ck_assert_uint_eq(c->grpc_max_message_size, 4194304);
        ck_assert_ptr_null(c->intel_allow_ids);
}
END_TEST

START_TEST(test_file_values) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL;

        clear_env();
        c = load("kubelet:\n"
                 "  devicePluginPath: /tmp/dp\n"
                 "intel:\n"
                 "  sharedDevNum: 4\n"
                 "  allocationPolicy: packed\n"
                 "  allowIDs: [\"0x56a0\", 0xe20b]\n"
                 "logLevel: debug\n", NULL, 0, &err);
        ck_assert_msg(c, "error: %s", err);
        ck_assert_str_eq(c->device_plugin_path, "/tmp/dp");
        ck_assert_str_eq(c->kubelet_socket, "/tmp/dp/kubelet.sock");
        ck_assert_uint_eq(c->intel_shared_dev_num, 4);
        ck_assert_int_eq(c->intel_allocation_policy, ALLOCATION_POLICY_PACKED);
        ck_assert_uint_eq(strv_length(c->intel_allow_ids), 2);
        ck_assert_str_eq(c->intel_allow_ids[1], "0xe20b");
        ck_assert_ptr_null(c->intel_deny_ids);     /* never with allowIDs */
        ck_assert_str_eq(c->log_level, "debug");
}
END_TEST

START_TEST(test_precedence) {
        _cleanup_(config_freep) Config *c = NULL, *d = NULL;
        _cleanup_free_ char *err = NULL;
        const ConfigOverride ov[] = { { "shared-dev-num", "7" } };
        const char *text = "intel:\n  sharedDevNum: 3\nkubelet:\n  devicePluginPath: /file\n";

        clear_env();
        setenv("SHARED_DEV_NUM", "5", 1);
        setenv("KGPU_DEVICE_PLUGIN_PATH", "/env", 1);
        c = load(text, NULL, 0, &err);
        ck_assert_ptr_nonnull(c);
        ck_assert_uint_eq(c->intel_shared_dev_num, 5);          /* env > file */
        ck_assert_str_eq(c->device_plugin_path, "/env");
        d = load(text, ov, 1, &err);
        ck_assert_ptr_nonnull(d);
        ck_assert_uint_eq(d->intel_shared_dev_num, 7);          /* flag > env */
        clear_env();
}
END_TEST

START_TEST(test_systemd_directories) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL;

        clear_env();
        setenv("STATE_DIRECTORY", "/var/lib/kgpu:/var/lib/other", 1);
        c = load("stateDirectory: /ignored\n", NULL, 0, &err);
        ck_assert_ptr_nonnull(c);
        ck_assert_str_eq(c->state_directory, "/var/lib/kgpu");
        clear_env();
}
END_TEST

static void expect_error(const char *text, const char *expected) {
        _cleanup_free_ char *err = NULL;
        Config *c;

        c = load(text, NULL, 0, &err);
        ck_assert_ptr_null(c);
        ck_assert_ptr_nonnull(err);
        ck_assert_msg(strstr(err, expected), "'%s' does not contain '%s'", err, expected);
}

START_TEST(test_errors) {
        clear_env();
        expect_error("intel:\n  sharedDevNum: many\n", "kgpu.yaml:2: intel.sharedDevNum: expected an unsigned integer, got 'many'");
        expect_error("intel:\n  sharedDevNum: 0\n", "kgpu.yaml:2: intel.sharedDevNum: value out of range, got '0'");
        expect_error("a: 1\n\nbogus:\n  key: 1\n", "kgpu.yaml:1: unknown key 'a'");
        expect_error("logLevel: info\nbogus:\n  key: 1\n", "kgpu.yaml:3: unknown key 'bogus.key'");
        expect_error("intel:\n  allocationPolicy: random\n", "intel.allocationPolicy: expected none, balanced or packed, got 'random'");
        expect_error("kubelet:\n  devicePluginPath: relative/dir\n", "kgpu.yaml:2: kubelet.devicePluginPath: expected an absolute path");
        expect_error("intel: [1, 2]\n", "kgpu.yaml:1: intel: expected a mapping");
        expect_error("intel:\n  enabled: {a: 1}\n", "kgpu.yaml:2: intel.enabled: expected a value, got a mapping");
        expect_error("intel:\n  sharedDevNum: [1]\n", "intel.sharedDevNum: expected a single value, got a list");
        expect_error("intel: {\n", "kgpu.yaml:2: YAML syntax error");
        expect_error("- a\n- b\n", "kgpu.yaml:1: expected a mapping");
        expect_error("intel:\n  enabled: perhaps\n", "intel.enabled: expected a boolean");
        expect_error("stateDirectory: \"\"\n", "kgpu.yaml:1: stateDirectory: expected an absolute path, not an empty value, got ''");
        expect_error("stateDirectory:\n", "stateDirectory: expected an absolute path, not an empty value");
        expect_error("kubelet:\n  devicePluginPath: ''\n", "kubelet.devicePluginPath: expected an absolute path, not an empty value");
}
END_TEST

START_TEST(test_empty_disables_outputs) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL;

        clear_env();
        c = load("labels:\n  featureFile: \"\"\ncdi:\n  specDirectory: \"\"\n", NULL, 0, &err);
        ck_assert_msg(c, "error: %s", err);
        ck_assert_ptr_null(c->labels_feature_file);
        ck_assert_ptr_null(c->cdi_spec_directory);
}
END_TEST

START_TEST(test_env_and_flag_errors) {
        _cleanup_free_ char *err = NULL, *err2 = NULL;
        const ConfigOverride bad[] = { { "allocation-policy", "spread" } };
        const ConfigOverride unknown[] = { { "no-such-flag", "1" } };

        clear_env();
        setenv("SHARED_DEV_NUM", "-3", 1);
        ck_assert_ptr_null(load("", NULL, 0, &err));
        ck_assert_str_eq(err, "environment variable SHARED_DEV_NUM: expected an unsigned integer, got '-3'");
        clear_env();
        ck_assert_ptr_null(load("", bad, 1, &err2));
        ck_assert_str_eq(err2, "--allocation-policy: expected none, balanced or packed, got 'spread'");
        free(err2);
        err2 = NULL;
        ck_assert_ptr_null(load("", unknown, 1, &err2));
        ck_assert_str_eq(err2, "--no-such-flag: unknown option");
}
END_TEST

START_TEST(test_files) {
        char path[] = "/tmp/kgpu-test-config-XXXXXX";
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL, *err2 = NULL;
        int fd;

        clear_env();
        fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, "intel:\n  sharedDevNum: 2\n", 25), 25);
        close(fd);
        ck_assert_int_eq(config_load(path, NULL, 0, &c, &err), 0);
        ck_assert_uint_eq(c->intel_shared_dev_num, 2);
        ck_assert_str_eq(c->file, path);
        config_free(TAKE_PTR(c));

        setenv("KGPU_CONFIG", path, 1);
        ck_assert_int_eq(config_load(NULL, NULL, 0, &c, &err), 0);
        ck_assert_uint_eq(c->intel_shared_dev_num, 2);
        unsetenv("KGPU_CONFIG");
        unlink(path);
        c = config_free(c);

        /* An explicitly named file must exist. */
        ck_assert_int_eq(config_load(path, NULL, 0, &c, &err2), -ENOENT);
        ck_assert_ptr_nonnull(strstr(err2, "cannot open"));
        ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_getopt_table) {
        const struct option *o = config_getopt_options();
        bool found = false;

        for (; o->name; o++)
                if (streq(o->name, "device-plugin-path")) {
                        found = true;
                        ck_assert_str_eq(config_flag_by_val(o->val), "device-plugin-path");
                }
        ck_assert(found);
        ck_assert(config_flag_known("shared-dev-num"));
        ck_assert(!config_flag_known("bogus"));
        ck_assert_ptr_null(config_flag_by_val(1));
}
END_TEST

static Suite *config_suite(void) {
        Suite *s = suite_create("config");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_defaults);
        tcase_add_test(tc, test_file_values);
        tcase_add_test(tc, test_precedence);
        tcase_add_test(tc, test_systemd_directories);
        tcase_add_test(tc, test_errors);
        tcase_add_test(tc, test_env_and_flag_errors);
        tcase_add_test(tc, test_empty_disables_outputs);
        tcase_add_test(tc, test_files);
        tcase_add_test(tc, test_getopt_table);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(config_suite)
