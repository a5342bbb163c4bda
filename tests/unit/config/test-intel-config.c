/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-intel-config.c — every Intel GPU plugin flag, Go style on the command line and in
 * the intel: section of kgpu.yaml, through the same code the daemons use. */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/daemon.h"
#include "common/util.h"
#include "tests/unit/test-main.h"

static const DaemonInfo info = { .name = "test", .description = "test" };

static void clear_env(void) {
        static const char * const vars[] = {
                "KGPU_CONFIG", "CONFIG_FILE", "SHARED_DEV_NUM", "ALLOCATION_POLICY",
        };
        for (size_t i = 0; i < ELEMENTSOF(vars); i++)
                unsetenv(vars[i]);
        /* An empty file: only the command line counts. */
        setenv("KGPU_CONFIG", "", 1);
}

/* Parses argv (NULL-terminated, argv[0] added) like a daemon's main() and loads. */
static Config *from_argv(const char * const *args) {
        _cleanup_(daemon_args_done) DaemonArgs a = {};
        char *argv[32] = { (char *) "kgpu-test" };
        Config *c = NULL;
        int argc = 1;

        clear_env();
        for (; args[argc - 1]; argc++)
                argv[argc] = (char *) args[argc - 1];
        if (daemon_parse_argv(&info, argc, argv, &a) != 1)
                return NULL;
        if (daemon_load_config(&a, &c) < 0)
                return NULL;
        return c;
}

static Config *from_yaml(const char *text, char **err) {
        Config *c = NULL;

        clear_env();
        return config_load_string(text, strlen(text), "kgpu.yaml", NULL, 0, &c, err) < 0 ? NULL : c;
}

START_TEST(test_defaults) {
        _cleanup_(config_freep) Config *c = from_yaml("", NULL);

        ck_assert_ptr_nonnull(c);
        ck_assert_uint_eq(c->intel_shared_dev_num, 1);
        ck_assert_int_eq(c->intel_allocation_policy, ALLOCATION_POLICY_NONE);
        ck_assert(!c->intel_enable_monitoring);
        ck_assert(!c->intel_resource_manager);
        ck_assert(!c->intel_health_management);
        ck_assert_int_eq(c->intel_by_path, BY_PATH_SINGLE);
        ck_assert(!c->intel_cdi_devices);
        ck_assert_ptr_null(c->intel_allow_ids);
        ck_assert_ptr_null(c->intel_deny_ids);
        ck_assert_int_eq(c->intel_monitoring_mode, INTEL_MONITORING_MODE_SINGLE);       /* the Intel plugin's default */
}
END_TEST

START_TEST(test_go_flags) {
        /* Single dash, value as the next argument or after '=', bools without value. */
        static const char * const args[] = {
                "-shared-dev-num", "4", "-allocation-policy=balanced", "-enable-monitoring",
                "-resource-manager", "-health-management", "-bypath", "all",
                "-allow-ids", "0x56a0,0x56c0", "-monitoring-mode=split", NULL };
        _cleanup_(config_freep) Config *c = from_argv(args);

        ck_assert_ptr_nonnull(c);
        ck_assert_uint_eq(c->intel_shared_dev_num, 4);
        ck_assert_int_eq(c->intel_allocation_policy, ALLOCATION_POLICY_BALANCED);
        ck_assert(c->intel_enable_monitoring);
        ck_assert(c->intel_resource_manager);
        ck_assert(c->intel_health_management);
        ck_assert_int_eq(c->intel_by_path, BY_PATH_ALL);
        ck_assert_uint_eq(strv_length(c->intel_allow_ids), 2);
        ck_assert_str_eq(c->intel_allow_ids[1], "0x56c0");
        ck_assert_ptr_null(c->intel_deny_ids);
        ck_assert_int_eq(c->intel_monitoring_mode, INTEL_MONITORING_MODE_SPLIT);
}
END_TEST

/* -allow-ids / -deny-ids as the Intel plugin validates them: items split at ',' and
 * trimmed; then "0x" + four lowercase hex digits each, no empty item; not both lists. */
START_TEST(test_pci_id_lists) {
        static const char * const spaced[] = { "-allow-ids=0x1234 ,0x9876", NULL };
        static const char * const spaced_more[] = { "-deny-ids", " 0x0bd5 , 0x56c0 ", NULL };
        static const char * const empty[] = { "-allow-ids=", NULL };
        static const char * const refused[][3] = {
                { "-allow-ids=56c0", NULL },            /* no 0x */
                { "-allow-ids=0x56C0", NULL },          /* uppercase */
                { "-deny-ids=0X56c0", NULL },
                { "-allow-ids=0x56c", NULL },           /* three digits */
                { "-allow-ids=0x56c00", NULL },
                { "-allow-ids=0x1234,", NULL },         /* empty item */
                { "-deny-ids=,0x1234", NULL },
                { "-allow-ids=0x1234,,0x9876", NULL },
                { "-allow-ids= ", NULL },
                { "-allow-ids=0x12 34", NULL },
                { "-allow-ids=0x56a0", "-deny-ids=0x0bd5" },    /* both */
        };
        Config *c;

        c = from_argv(spaced);
        ck_assert_ptr_nonnull(c);
        ck_assert_uint_eq(strv_length(c->intel_allow_ids), 2);
        ck_assert_str_eq(c->intel_allow_ids[0], "0x1234");
        ck_assert_str_eq(c->intel_allow_ids[1], "0x9876");
        config_free(c);

        c = from_argv(spaced_more);
        ck_assert_ptr_nonnull(c);
        ck_assert_uint_eq(strv_length(c->intel_deny_ids), 2);
        ck_assert_str_eq(c->intel_deny_ids[0], "0x0bd5");
        ck_assert_str_eq(c->intel_deny_ids[1], "0x56c0");
        config_free(c);

        c = from_argv(empty);
        ck_assert_ptr_nonnull(c);
        ck_assert_ptr_null(c->intel_allow_ids);
        config_free(c);

        for (size_t i = 0; i < ELEMENTSOF(refused); i++)
                ck_assert_msg(!from_argv(refused[i]), "accepted %s %s", refused[i][0], refused[i][1] ?: "");
}
END_TEST

START_TEST(test_pci_id_errors) {
        static const struct {
                const char *text, *want;
        } cases[] = {
                { "intel:\n  allowIDs: \"0x56C0\"\n",
                  "kgpu.yaml:2: intel.allowIDs: expected PCI device ids of 0x and four lowercase hex digits "
                  "(0x56c0), comma separated, got '0x56C0'" },
                { "intel:\n  denyIDs: [\"0x0bd5\", \"56c0\"]\n",
                  "kgpu.yaml:2: intel.denyIDs: expected PCI device ids of 0x and four lowercase hex digits "
                  "(0x56c0), comma separated, got '56c0'" },
                { "intel:\n  allowIDs: \"0x56a0,\"\n",
                  "kgpu.yaml:2: intel.allowIDs: empty PCI device id in the list, got '0x56a0,'" },
                { "intel:\n  allowIDs: [\"0x56a0\"]\n  denyIDs: 0x0bd5\n",
                  "intel.allowIDs (-allow-ids) and intel.denyIDs (-deny-ids) cannot be used together" },
                { "intel:\n  monitoringMode: both\n",
                  "kgpu.yaml:2: intel.monitoringMode: expected single or split, got 'both'" },
        };
        _cleanup_free_ char *err = NULL;
        _cleanup_(config_freep) Config *c = NULL;

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *e = NULL;

                ck_assert_ptr_null(from_yaml(cases[i].text, &e));
                ck_assert_ptr_nonnull(e);
                ck_assert_msg(startswith(e, cases[i].want), "got '%s', want '%s...'", e, cases[i].want);
        }

        /* Spaces around list items, in a YAML list as on the command line. */
        c = from_yaml("intel:\n  denyIDs: [\" 0x0bd5\", \"0x56c0 \"]\n  monitoringMode: split\n", &err);
        ck_assert_msg(c != NULL, "%s", err ?: "");
        ck_assert_str_eq(c->intel_deny_ids[0], "0x0bd5");
        ck_assert_str_eq(c->intel_deny_ids[1], "0x56c0");
        ck_assert_int_eq(c->intel_monitoring_mode, INTEL_MONITORING_MODE_SPLIT);
}
END_TEST

START_TEST(test_go_flags_more) {
        static const char * const packed[] = { "-allocation-policy", "packed", "-bypath=none",
                                               "-enable-monitoring=false", "--shared-dev-num=2", NULL };
        static const char * const single[] = { "--bypath", "single", "--enable-monitoring", "-cdi-devices", NULL };
        static const char * const bad_policy[] = { "-allocation-policy", "spread", NULL };
        static const char * const bad_num[] = { "-shared-dev-num", "0", NULL };
        static const char * const bad_bypath[] = { "-bypath=some", NULL };
        static const char * const bad_bool[] = { "-enable-monitoring=maybe", NULL };
        static const char * const unknown[] = { "-no-such-flag", NULL };
        Config *c;

        c = from_argv(packed);
        ck_assert_ptr_nonnull(c);
        ck_assert_int_eq(c->intel_allocation_policy, ALLOCATION_POLICY_PACKED);
        ck_assert_int_eq(c->intel_by_path, BY_PATH_NONE);
        ck_assert(!c->intel_enable_monitoring);
        ck_assert_uint_eq(c->intel_shared_dev_num, 2);
        config_free(c);

        c = from_argv(single);
        ck_assert_ptr_nonnull(c);
        ck_assert_int_eq(c->intel_by_path, BY_PATH_SINGLE);
        ck_assert(c->intel_enable_monitoring);
        ck_assert(c->intel_cdi_devices);
        config_free(c);

        ck_assert_ptr_null(from_argv(bad_policy));
        ck_assert_ptr_null(from_argv(bad_num));
        ck_assert_ptr_null(from_argv(bad_bypath));
        ck_assert_ptr_null(from_argv(bad_bool));
        ck_assert_ptr_null(from_argv(unknown));
}
END_TEST

START_TEST(test_yaml_intel_section) {
        _cleanup_free_ char *err = NULL;
        _cleanup_(config_freep) Config *c = from_yaml(
                "intel:\n"
                "  sharedDevNum: 16\n"
                "  allocationPolicy: packed\n"
                "  enableMonitoring: true\n"
                "  resourceManager: true\n"
                "  healthManagement: true\n"
                "  byPath: none\n"
                "  cdiDevices: true\n"
                "  allowIDs: [\"0x56a0\", \"0x56c1\"]\n"
                "  monitoringMode: single\n", &err);

        ck_assert_msg(c != NULL, "%s", err ?: "");
        ck_assert_uint_eq(c->intel_shared_dev_num, 16);
        ck_assert_int_eq(c->intel_allocation_policy, ALLOCATION_POLICY_PACKED);
        ck_assert(c->intel_enable_monitoring);
        ck_assert(c->intel_resource_manager);
        ck_assert(c->intel_health_management);
        ck_assert_int_eq(c->intel_by_path, BY_PATH_NONE);
        ck_assert(c->intel_cdi_devices);
        ck_assert_uint_eq(strv_length(c->intel_allow_ids), 2);
        ck_assert_ptr_null(c->intel_deny_ids);
        ck_assert_int_eq(c->intel_monitoring_mode, INTEL_MONITORING_MODE_SINGLE);
}
END_TEST

START_TEST(test_yaml_errors) {
        static const struct {
                const char *text, *want;
        } cases[] = {
                { "intel:\n  byPath: sometimes\n", "kgpu.yaml:2: intel.byPath: expected single, all or none" },
                { "intel:\n  enableMonitoring: 3\n", "kgpu.yaml:2: intel.enableMonitoring: expected a boolean" },
                { "intel:\n  sharedDevNum: 0\n", "kgpu.yaml:2: intel.sharedDevNum: value out of range" },
                { "intel:\n\n  allocationPolicy: spread\n", "kgpu.yaml:3: intel.allocationPolicy: expected none" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *err = NULL;

                ck_assert_ptr_null(from_yaml(cases[i].text, &err));
                ck_assert_ptr_nonnull(err);
                ck_assert_msg(startswith(err, cases[i].want), "got '%s', want '%s...'", err, cases[i].want);
        }
}
END_TEST

START_TEST(test_flag_beats_file) {
        _cleanup_(daemon_args_done) DaemonArgs a = {};
        _cleanup_(config_freep) Config *c = NULL;
        char path[] = "/tmp/kgpu-test-intel-XXXXXX";
        char *argv[] = { (char *) "t", (char *) "-bypath", (char *) "all", (char *) "-shared-dev-num=3", NULL };
        FILE *f;
        int fd;

        clear_env();
        fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        f = fdopen(fd, "w");
        ck_assert_ptr_nonnull(f);
        fputs("intel:\n  byPath: none\n  sharedDevNum: 8\n  allocationPolicy: balanced\n", f);
        fclose(f);
        setenv("KGPU_CONFIG", path, 1);
        ck_assert_int_eq(daemon_parse_argv(&info, 4, argv, &a), 1);
        ck_assert_int_eq(daemon_load_config(&a, &c), 0);
        (void) unlink(path);
        ck_assert_int_eq(c->intel_by_path, BY_PATH_ALL);
        ck_assert_uint_eq(c->intel_shared_dev_num, 3);
        ck_assert_int_eq(c->intel_allocation_policy, ALLOCATION_POLICY_BALANCED);
}
END_TEST

static Suite *intel_config_suite(void) {
        Suite *s = suite_create("intel-config");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_defaults);
        tcase_add_test(tc, test_go_flags);
        tcase_add_test(tc, test_go_flags_more);
        tcase_add_test(tc, test_pci_id_lists);
        tcase_add_test(tc, test_pci_id_errors);
        tcase_add_test(tc, test_yaml_intel_section);
        tcase_add_test(tc, test_yaml_errors);
        tcase_add_test(tc, test_flag_beats_file);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(intel_config_suite)
