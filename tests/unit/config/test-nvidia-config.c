/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-nvidia-config.c — the NVIDIA device plugin's `version: v1` config file, its
 * environment variables and flags, loaded through the code the daemons use.
 *
 * Contract checked: every NVIDIA key lands in its Config field with the NVIDIA plugin's
 * defaults; flag > environment > file > default; keys kgpu does not use are accepted,
 * values that would change behaviour kgpu does not have are refused; every error names
 * file:line:key (or the variable, or the flag) exactly.
 */

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

static const char * const nvidia_vars[] = {
        "KGPU_CONFIG", "CONFIG_FILE", "MIG_STRATEGY", "FAIL_ON_INIT_ERROR", "NVIDIA_DRIVER_ROOT", "NVIDIA_DEV_ROOT",
        "PASS_DEVICE_SPECS", "DEVICE_LIST_STRATEGY", "DEVICE_ID_STRATEGY", "CDI_ANNOTATION_PREFIX",
        "KGPU_NVIDIA_ENABLED", "KGPU_NVIDIA_SMI", "KGPU_NVIDIA_MPS_CONTROL", "KGPU_NVIDIA_HEALTH_INTERVAL_MS",
        "KGPU_NVIDIA_HEALTH_RECOVER_POLLS", "KGPU_NVIDIA_REPLICA_POLICY", "KGPU_KUBELET_SOCKET",
        "KGPU_NVIDIA_MPS_LAUNCHER",
};

static void clear_env(void) {
        for (size_t i = 0; i < ELEMENTSOF(nvidia_vars); i++)
                unsetenv(nvidia_vars[i]);
}

static Config *from_yaml(const char *text, char **err) {
        Config *c = NULL;

        return config_load_string(text, strlen(text), "kgpu.yaml", NULL, 0, &c, err) < 0 ? NULL : c;
}

/* Loads text; it must fail with exactly this message. */
static void expect_error(const char *text, const char *message) {
        _cleanup_free_ char *err = NULL;
        Config *c = NULL;
        int r;

        r = config_load_string(text, strlen(text), "kgpu.yaml", NULL, 0, &c, &err);
        ck_assert_msg(r < 0, "accepted: %s", text);
        ck_assert_ptr_null(c);
        ck_assert_ptr_nonnull(err);
        ck_assert_str_eq(err, message);
}

/* Writes text to a temporary file, returns its path (static buffer). */
static const char *write_temp(const char *text) {
        static char path[] = "/tmp/test-nvidia-config-XXXXXX";
        FILE *f;
        int fd;

        strcpy(path, "/tmp/test-nvidia-config-XXXXXX");
        fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        f = fdopen(fd, "w");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_ge(fputs(text, f), 0);
        ck_assert_int_eq(fclose(f), 0);
        return path;
}

/* argv (NULL-terminated, argv[0] added) parsed and loaded like a daemon's main(). */
static Config *from_argv(const char * const *args) {
        _cleanup_(daemon_args_done) DaemonArgs a = {};
        char *argv[32] = { (char *) "kgpu-test" };
        Config *c = NULL;
        int argc = 1;

        for (; args[argc - 1]; argc++)
                argv[argc] = (char *) args[argc - 1];
        if (daemon_parse_argv(&info, argc, argv, &a) != 1)
                return NULL;
        if (daemon_load_config(&a, &c) < 0)
                return NULL;
        return c;
}

START_TEST(test_defaults) {
        _cleanup_(config_freep) Config *c = NULL;
        char buf[64];

        clear_env();
        c = from_yaml("", NULL);
        ck_assert_ptr_nonnull(c);
        ck_assert_ptr_null(c->nvidia_config_version);
        ck_assert(c->nvidia_enabled);
        ck_assert_int_eq(c->nvidia_mig_strategy, MIG_STRATEGY_NONE);
        ck_assert(c->nvidia_fail_on_init_error);
        ck_assert_str_eq(c->nvidia_driver_root, "/");
        ck_assert(!c->nvidia_pass_device_specs);
        ck_assert_uint_eq(c->nvidia_device_list_strategy, DEVICE_LIST_STRATEGY_ENVVAR);
        ck_assert_int_eq(c->nvidia_device_id_strategy, DEVICE_ID_STRATEGY_UUID);
        ck_assert_str_eq(c->nvidia_cdi_annotation_prefix, "cdi.k8s.io/");
        ck_assert_ptr_null(c->nvidia_smi_path);
        ck_assert_ptr_null(c->nvidia_mps_control_path);
        ck_assert_uint_eq(c->nvidia_health_interval_ms, 10000);
        ck_assert_uint_eq(c->nvidia_health_recover_polls, 3);
        ck_assert_int_eq(c->nvidia_replica_policy, REPLICA_POLICY_DISTRIBUTED);
        ck_assert_int_eq(c->nvidia_mps_launcher, MPS_LAUNCHER_AUTO);
        ck_assert(!c->nvidia_time_slicing.rename_by_default);
        ck_assert(!c->nvidia_time_slicing.fail_requests_greater_than_one);
        ck_assert_ptr_null(c->nvidia_time_slicing.resources);
        ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 0);
        /* The NVIDIA plugin refuses MPS requests for more than one replica by default. */
        ck_assert(c->nvidia_mps.fail_requests_greater_than_one);
        ck_assert_uint_eq(c->nvidia_mps.n_resources, 0);
        ck_assert_str_eq(config_device_list_strategy_to_string(c->nvidia_device_list_strategy, buf, sizeof(buf)),
                         "envvar");
}
END_TEST

START_TEST(test_scalars_from_file) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL;

        clear_env();
        c = from_yaml("version: v1\n"
                      "flags:\n"
                      "  migStrategy: mixed\n"
                      "  failOnInitError: false\n"
                      "  nvidiaDriverRoot: /run/nvidia/driver\n"
                      "  plugin:\n"
                      "    passDeviceSpecs: true\n"
                      "    deviceListStrategy: [volume-mounts, cdi-cri]\n"
                      "    deviceIDStrategy: index\n"
                      "    cdiAnnotationPrefix: cdi.example.com/\n"
                      "    kubeletSocket: /var/lib/kubelet/device-plugins/other.sock\n"
                      "nvidia:\n"
                      "  enabled: false\n"
                      "  smiPath: /opt/bin/nvidia-smi\n"
                      "  mpsControlPath: /opt/bin/nvidia-cuda-mps-control\n"
                      "  healthIntervalMs: 0\n"
                      "  healthRecoverPolls: 5\n"
                      "  replicaPolicy: packed\n"
                      "  mpsLauncher: direct\n"
                      "sharing:\n"
                      "  timeSlicing:\n"
                      "    renameByDefault: true\n"
                      "    failRequestsGreaterThanOne: true\n"
                      "    resources: [{name: gpu, replicas: 2}]\n", &err);
        ck_assert_msg(c, "%s", err);
        ck_assert_str_eq(c->nvidia_config_version, "v1");
        ck_assert(!c->nvidia_enabled);
        ck_assert_int_eq(c->nvidia_mig_strategy, MIG_STRATEGY_MIXED);
        ck_assert(!c->nvidia_fail_on_init_error);
        ck_assert_str_eq(c->nvidia_driver_root, "/run/nvidia/driver");
        ck_assert(c->nvidia_pass_device_specs);
        ck_assert_uint_eq(c->nvidia_device_list_strategy, DEVICE_LIST_STRATEGY_VOLUME_MOUNTS | DEVICE_LIST_STRATEGY_CDI_CRI);
        ck_assert_int_eq(c->nvidia_device_id_strategy, DEVICE_ID_STRATEGY_INDEX);
        ck_assert_str_eq(c->nvidia_cdi_annotation_prefix, "cdi.example.com/");
        ck_assert_str_eq(c->kubelet_socket, "/var/lib/kubelet/device-plugins/other.sock");
        ck_assert_str_eq(c->nvidia_smi_path, "/opt/bin/nvidia-smi");
        ck_assert_str_eq(c->nvidia_mps_control_path, "/opt/bin/nvidia-cuda-mps-control");
        ck_assert_uint_eq(c->nvidia_health_interval_ms, 0);
        ck_assert_uint_eq(c->nvidia_health_recover_polls, 5);
        ck_assert_int_eq(c->nvidia_replica_policy, REPLICA_POLICY_PACKED);
        ck_assert_int_eq(c->nvidia_mps_launcher, MPS_LAUNCHER_DIRECT);
        ck_assert(c->nvidia_time_slicing.rename_by_default);
        ck_assert(c->nvidia_time_slicing.fail_requests_greater_than_one);
        ck_assert(!c->nvidia_mps.rename_by_default);
        ck_assert(c->nvidia_mps.fail_requests_greater_than_one);
}
END_TEST

START_TEST(test_device_list_strategy_forms) {
        static const struct {
                const char *yaml;
                uint32_t set;
                const char *text;
        } cases[] = {
                { "flags: {plugin: {deviceListStrategy: envvar}}\n", DEVICE_LIST_STRATEGY_ENVVAR, "envvar" },
                { "flags: {plugin: {deviceListStrategy: cdi-annotations}}\n", DEVICE_LIST_STRATEGY_CDI_ANNOTATIONS,
                  "cdi-annotations" },
                { "flags: {plugin: {deviceListStrategy: [\"envvar\", \"cdi-annotations\", \"cdi-cri\"]}}\n",
                  DEVICE_LIST_STRATEGY_ENVVAR | DEVICE_LIST_STRATEGY_CDI_ANNOTATIONS | DEVICE_LIST_STRATEGY_CDI_CRI,
                  "envvar,cdi-annotations,cdi-cri" },
                { "flags:\n  plugin:\n    deviceListStrategy:\n    - cdi-cri\n    - volume-mounts\n    - cdi-cri\n",
                  DEVICE_LIST_STRATEGY_VOLUME_MOUNTS | DEVICE_LIST_STRATEGY_CDI_CRI, "volume-mounts,cdi-cri" },
                { "flags: {plugin: {deviceListStrategy: \"envvar,volume-mounts\"}}\n",
                  DEVICE_LIST_STRATEGY_ENVVAR | DEVICE_LIST_STRATEGY_VOLUME_MOUNTS, "envvar,volume-mounts" },
        };

        clear_env();
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(config_freep) Config *c = NULL;
                _cleanup_free_ char *err = NULL;
                char buf[80];

                c = from_yaml(cases[i].yaml, &err);
                ck_assert_msg(c, "%s: %s", cases[i].yaml, err);
                ck_assert_uint_eq(c->nvidia_device_list_strategy, cases[i].set);
                ck_assert_str_eq(config_device_list_strategy_to_string(c->nvidia_device_list_strategy, buf, sizeof(buf)),
                                 cases[i].text);
        }
}
END_TEST

START_TEST(test_helpers) {
        char small[8], buf[128];

        ck_assert_str_eq(config_mig_strategy_to_string(MIG_STRATEGY_NONE), "none");
        ck_assert_str_eq(config_mig_strategy_to_string(MIG_STRATEGY_SINGLE), "single");
        ck_assert_str_eq(config_mig_strategy_to_string(MIG_STRATEGY_MIXED), "mixed");
        ck_assert_ptr_null(config_mig_strategy_to_string((ConfigMigStrategy) 3));
        ck_assert_str_eq(config_device_id_strategy_to_string(DEVICE_ID_STRATEGY_UUID), "uuid");
        ck_assert_str_eq(config_device_id_strategy_to_string(DEVICE_ID_STRATEGY_INDEX), "index");
        ck_assert_ptr_null(config_device_id_strategy_to_string((ConfigDeviceIdStrategy) 2));
        ck_assert_str_eq(config_replica_policy_to_string(REPLICA_POLICY_DISTRIBUTED), "distributed");
        ck_assert_str_eq(config_replica_policy_to_string(REPLICA_POLICY_PACKED), "packed");
        ck_assert_ptr_null(config_replica_policy_to_string((ConfigReplicaPolicy) 2));
        ck_assert_str_eq(config_device_list_strategy_to_string(0, buf, sizeof(buf)), "");
        ck_assert_str_eq(config_device_list_strategy_to_string(0xf, buf, sizeof(buf)),
                         "envvar,volume-mounts,cdi-annotations,cdi-cri");
        /* Too small a buffer: NULL, never a truncated list. */
        ck_assert_ptr_null(config_device_list_strategy_to_string(DEVICE_LIST_STRATEGY_VOLUME_MOUNTS, small, sizeof(small)));
        ck_assert_ptr_null(config_device_list_strategy_to_string(1, NULL, 0));
}
END_TEST

START_TEST(test_shared_resource_name) {
        ConfigSharedResource plain = { .name = (char *) "nvidia.com/gpu", .replicas = 2 };
        ConfigSharedResource renamed = { .name = (char *) "nvidia.com/gpu", .rename = (char *) "nvidia.com/gpu-2gb",
                                         .replicas = 2 };
        ConfigSharing off = {}, on = { .rename_by_default = true };
        _cleanup_free_ char *a = NULL, *b = NULL, *d = NULL, *e = NULL;

        a = config_shared_resource_name(&off, &plain);
        b = config_shared_resource_name(&on, &plain);
        d = config_shared_resource_name(&off, &renamed);
        e = config_shared_resource_name(&on, &renamed);
        ck_assert_str_eq(a, "nvidia.com/gpu");
        ck_assert_str_eq(b, "nvidia.com/gpu.shared");
        ck_assert_str_eq(d, "nvidia.com/gpu-2gb");
        ck_assert_str_eq(e, "nvidia.com/gpu-2gb");  /* an explicit rename wins, as upstream */
        ck_assert_ptr_null(config_shared_resource_name(&on, NULL));
}
END_TEST

/* test_env_beats_file_flag_beats_env, step by step: each step adds a layer over the one
 * before (the environment stays set from step to step). */

/* File alone, named by --config-file (the NVIDIA plugin's flag). */
static void step_file_alone(const char *path) {
        const char *args[] = { "--config-file", path, NULL };
        _cleanup_(config_freep) Config *c = from_argv(args);

        ck_assert_ptr_nonnull(c);
        ck_assert_str_eq(c->file, path);
        ck_assert_int_eq(c->nvidia_mig_strategy, MIG_STRATEGY_SINGLE);
        ck_assert_str_eq(c->nvidia_driver_root, "/file");
        ck_assert_str_eq(c->nvidia_cdi_annotation_prefix, "file.example.com/");
}

/* The environment over the file; the file named by CONFIG_FILE. */
static void step_env_over_file(const char *path) {
        setenv("CONFIG_FILE", path, 1);
        setenv("MIG_STRATEGY", "mixed", 1);
        setenv("FAIL_ON_INIT_ERROR", "false", 1);
        setenv("NVIDIA_DRIVER_ROOT", "/env", 1);
        setenv("PASS_DEVICE_SPECS", "true", 1);
        setenv("DEVICE_LIST_STRATEGY", "volume-mounts,cdi-annotations", 1);
        setenv("DEVICE_ID_STRATEGY", "index", 1);
        setenv("CDI_ANNOTATION_PREFIX", "env.example.com/", 1);
        {
                const char *args[] = { NULL };
                _cleanup_(config_freep) Config *c = from_argv(args);

                ck_assert_ptr_nonnull(c);
                ck_assert_str_eq(c->file, path);
                ck_assert_int_eq(c->nvidia_mig_strategy, MIG_STRATEGY_MIXED);
                ck_assert(!c->nvidia_fail_on_init_error);
                ck_assert_str_eq(c->nvidia_driver_root, "/env");
                ck_assert(c->nvidia_pass_device_specs);
                ck_assert_uint_eq(c->nvidia_device_list_strategy,
                                  DEVICE_LIST_STRATEGY_VOLUME_MOUNTS | DEVICE_LIST_STRATEGY_CDI_ANNOTATIONS);
                ck_assert_int_eq(c->nvidia_device_id_strategy, DEVICE_ID_STRATEGY_INDEX);
                ck_assert_str_eq(c->nvidia_cdi_annotation_prefix, "env.example.com/");
        }
}

/* Flags over the environment. */
static void step_flags_over_env(void) {
        const char *args[] = { "--mig-strategy=none", "--fail-on-init-error=true",
                               "--nvidia-driver-root", "/flag", "--pass-device-specs=false",
                               "--device-list-strategy=cdi-cri", "--device-id-strategy", "uuid",
                               "--cdi-annotation-prefix=flag.example.com/", NULL };
        _cleanup_(config_freep) Config *c = from_argv(args);

        ck_assert_ptr_nonnull(c);
        ck_assert_int_eq(c->nvidia_mig_strategy, MIG_STRATEGY_NONE);
        ck_assert(c->nvidia_fail_on_init_error);
        ck_assert_str_eq(c->nvidia_driver_root, "/flag");
        ck_assert(!c->nvidia_pass_device_specs);
        ck_assert_uint_eq(c->nvidia_device_list_strategy, DEVICE_LIST_STRATEGY_CDI_CRI);
        ck_assert_int_eq(c->nvidia_device_id_strategy, DEVICE_ID_STRATEGY_UUID);
        ck_assert_str_eq(c->nvidia_cdi_annotation_prefix, "flag.example.com/");
}

/* Go-style single-dash flags and a bare boolean flag, as the NVIDIA plugin is started. */
static void step_go_style_flags(void) {
        const char *args[] = { "-mig-strategy", "single", "-pass-device-specs", NULL };
        _cleanup_(config_freep) Config *c = from_argv(args);

        ck_assert_ptr_nonnull(c);
        ck_assert_int_eq(c->nvidia_mig_strategy, MIG_STRATEGY_SINGLE);
        ck_assert(c->nvidia_pass_device_specs);
}

/* --config-file beats CONFIG_FILE. */
static void step_config_file_flag_beats_env(const char *path) {
        const char *other = NULL;
        _cleanup_free_ char *keep = strdup(path);

        ck_assert_ptr_nonnull(keep);
        other = write_temp("flags: {migStrategy: single}\n");
        unsetenv("MIG_STRATEGY");
        {
                const char *args[] = { "--config-file", other, NULL };
                _cleanup_(config_freep) Config *c = from_argv(args);

                ck_assert_ptr_nonnull(c);
                ck_assert_str_eq(c->file, other);
                ck_assert_int_eq(c->nvidia_mig_strategy, MIG_STRATEGY_SINGLE);
                ck_assert_str_eq(c->nvidia_driver_root, "/env");
        }
        (void) unlink(other);
        (void) unlink(keep);
}

START_TEST(test_env_beats_file_flag_beats_env) {
        static const char *file =
                "version: v1\n"
                "flags:\n"
                "  migStrategy: single\n"
                "  failOnInitError: true\n"
                "  nvidiaDriverRoot: /file\n"
                "  plugin:\n"
                "    passDeviceSpecs: false\n"
                "    deviceListStrategy: envvar\n"
                "    deviceIDStrategy: uuid\n"
                "    cdiAnnotationPrefix: file.example.com/\n";
        const char *path;

        clear_env();
        path = write_temp(file);

        step_file_alone(path);
        step_env_over_file(path);
        step_flags_over_env();
        step_go_style_flags();
        step_config_file_flag_beats_env(path);
        clear_env();
}
END_TEST

START_TEST(test_nvidia_own_keys_env_and_flags) {
        clear_env();
        setenv("KGPU_NVIDIA_ENABLED", "false", 1);
        setenv("KGPU_NVIDIA_SMI", "/env/nvidia-smi", 1);
        setenv("KGPU_NVIDIA_MPS_CONTROL", "/env/nvidia-cuda-mps-control", 1);
        setenv("KGPU_NVIDIA_HEALTH_INTERVAL_MS", "250", 1);
        setenv("KGPU_NVIDIA_HEALTH_RECOVER_POLLS", "2", 1);
        setenv("KGPU_NVIDIA_REPLICA_POLICY", "packed", 1);
        setenv("KGPU_NVIDIA_MPS_LAUNCHER", "systemd", 1);
        setenv("KGPU_CONFIG", "", 1);
        {
                const char *args[] = { NULL };
                _cleanup_(config_freep) Config *c = from_argv(args);

                ck_assert_ptr_nonnull(c);
                ck_assert(!c->nvidia_enabled);
                ck_assert_str_eq(c->nvidia_smi_path, "/env/nvidia-smi");
                ck_assert_str_eq(c->nvidia_mps_control_path, "/env/nvidia-cuda-mps-control");
                ck_assert_uint_eq(c->nvidia_health_interval_ms, 250);
                ck_assert_uint_eq(c->nvidia_health_recover_polls, 2);
                ck_assert_int_eq(c->nvidia_replica_policy, REPLICA_POLICY_PACKED);
                ck_assert_int_eq(c->nvidia_mps_launcher, MPS_LAUNCHER_SYSTEMD);
        }
        {
                const char *args[] = { "--nvidia=true", "--nvidia-smi-path=/flag/nvidia-smi",
                                       "--nvidia-health-interval-ms=1000", "--replica-policy=distributed",
                                       "--nvidia-mps-launcher=direct", NULL };
                _cleanup_(config_freep) Config *c = from_argv(args);

                ck_assert_ptr_nonnull(c);
                ck_assert(c->nvidia_enabled);
                ck_assert_str_eq(c->nvidia_smi_path, "/flag/nvidia-smi");
                ck_assert_uint_eq(c->nvidia_health_interval_ms, 1000);
                ck_assert_int_eq(c->nvidia_replica_policy, REPLICA_POLICY_DISTRIBUTED);
                ck_assert_int_eq(c->nvidia_mps_launcher, MPS_LAUNCHER_DIRECT);
        }
        clear_env();
}
END_TEST

START_TEST(test_env_and_flag_errors) {
        _cleanup_free_ char *err = NULL;
        Config *c = NULL;
        const ConfigOverride bad_flag[] = { { "device-id-strategy", "serial" } };
        const ConfigOverride bad_list[] = { { "device-list-strategy", "envvar,nope" } };

        clear_env();
        setenv("MIG_STRATEGY", "all", 1);
        ck_assert_int_eq(config_load_string("", 0, "kgpu.yaml", NULL, 0, &c, &err), -EINVAL);
        ck_assert_str_eq(err, "environment variable MIG_STRATEGY: expected none, single or mixed, got 'all'");
        err = mfree(err);
        unsetenv("MIG_STRATEGY");

        setenv("DEVICE_LIST_STRATEGY", "envvar,bogus", 1);
        ck_assert_int_lt(config_load_string("", 0, "kgpu.yaml", NULL, 0, &c, &err), 0);
        ck_assert_str_eq(err, "environment variable DEVICE_LIST_STRATEGY: expected envvar, volume-mounts, "
                              "cdi-annotations or cdi-cri, got 'envvar,bogus'");
        err = mfree(err);
        setenv("DEVICE_LIST_STRATEGY", ",", 1);
        ck_assert_int_lt(config_load_string("", 0, "kgpu.yaml", NULL, 0, &c, &err), 0);
        ck_assert_str_eq(err, "environment variable DEVICE_LIST_STRATEGY: expected envvar, volume-mounts, "
                              "cdi-annotations or cdi-cri, got ','");
        err = mfree(err);
        unsetenv("DEVICE_LIST_STRATEGY");

        setenv("FAIL_ON_INIT_ERROR", "maybe", 1);
        ck_assert_int_lt(config_load_string("", 0, "kgpu.yaml", NULL, 0, &c, &err), 0);
        ck_assert_str_eq(err, "environment variable FAIL_ON_INIT_ERROR: expected a boolean (true or false), got 'maybe'");
        err = mfree(err);
        unsetenv("FAIL_ON_INIT_ERROR");

        setenv("NVIDIA_DRIVER_ROOT", "run/nvidia/driver", 1);
        ck_assert_int_lt(config_load_string("", 0, "kgpu.yaml", NULL, 0, &c, &err), 0);
        ck_assert_str_eq(err, "environment variable NVIDIA_DRIVER_ROOT: expected an absolute path, got 'run/nvidia/driver'");
        err = mfree(err);
        unsetenv("NVIDIA_DRIVER_ROOT");

        setenv("CDI_ANNOTATION_PREFIX", "", 1);
        ck_assert_int_lt(config_load_string("", 0, "kgpu.yaml", NULL, 0, &c, &err), 0);
        ck_assert_str_eq(err, "environment variable CDI_ANNOTATION_PREFIX: expected an annotation key prefix "
                              "(letters, digits, '-', '.', '_', '/'), got ''");
        err = mfree(err);
        unsetenv("CDI_ANNOTATION_PREFIX");

        ck_assert_int_lt(config_load_string("", 0, "kgpu.yaml", bad_flag, 1, &c, &err), 0);
        ck_assert_str_eq(err, "--device-id-strategy: expected uuid or index, got 'serial'");
        err = mfree(err);
        ck_assert_int_lt(config_load_string("", 0, "kgpu.yaml", bad_list, 1, &c, &err), 0);
        ck_assert_str_eq(err, "--device-list-strategy: expected envvar, volume-mounts, cdi-annotations or cdi-cri, "
                              "got 'envvar,nope'");
        ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_scalar_errors) {
        clear_env();
        expect_error("version: v2\n",
                     "kgpu.yaml:1: version: expected v1 (the only version of the NVIDIA device plugin's config file), got 'v2'");
        expect_error("version: v1\nflags:\n  migStrategy: bogus\n",
                     "kgpu.yaml:3: flags.migStrategy: expected none, single or mixed, got 'bogus'");
        expect_error("flags:\n  failOnInitError: 2\n",
                     "kgpu.yaml:2: flags.failOnInitError: expected a boolean (true or false), got '2'");
        expect_error("flags:\n  nvidiaDriverRoot: relative\n",
                     "kgpu.yaml:2: flags.nvidiaDriverRoot: expected an absolute path, got 'relative'");
        expect_error("flags:\n  nvidiaDriverRoot: \"\"\n",
                     "kgpu.yaml:2: flags.nvidiaDriverRoot: expected an absolute path, not an empty value, got ''");
        expect_error("flags:\n  plugin:\n    deviceIDStrategy: serial\n",
                     "kgpu.yaml:3: flags.plugin.deviceIDStrategy: expected uuid or index, got 'serial'");
        expect_error("flags:\n  plugin:\n    deviceListStrategy: envvars\n",
                     "kgpu.yaml:3: flags.plugin.deviceListStrategy: expected envvar, volume-mounts, cdi-annotations "
                     "or cdi-cri, got 'envvars'");
        expect_error("flags:\n  plugin:\n    deviceListStrategy:\n    - envvar\n    - cdi\n",
                     "kgpu.yaml:5: flags.plugin.deviceListStrategy: expected envvar, volume-mounts, cdi-annotations "
                     "or cdi-cri, got 'cdi'");
        expect_error("flags:\n  plugin:\n    deviceListStrategy: []\n",
                     "kgpu.yaml:3: flags.plugin.deviceListStrategy: expected at least one of envvar, volume-mounts, "
                     "cdi-annotations, cdi-cri");
        expect_error("flags:\n  plugin:\n    deviceListStrategy:\n    - [envvar]\n",
                     "kgpu.yaml:4: flags.plugin.deviceListStrategy: list items must be plain values");
        expect_error("flags:\n  plugin:\n    passDeviceSpecs: [true]\n",
                     "kgpu.yaml:3: flags.plugin.passDeviceSpecs: expected a single value, got a list");
        expect_error("flags:\n  plugin:\n    cdiAnnotationPrefix: \"a b/\"\n",
                     "kgpu.yaml:3: flags.plugin.cdiAnnotationPrefix: expected an annotation key prefix "
                     "(letters, digits, '-', '.', '_', '/'), got 'a b/'");
        expect_error("nvidia:\n  healthRecoverPolls: 0\n",
                     "kgpu.yaml:2: nvidia.healthRecoverPolls: value out of range, got '0'");
        expect_error("nvidia:\n  replicaPolicy: spread\n",
                     "kgpu.yaml:2: nvidia.replicaPolicy: expected distributed or packed, got 'spread'");
        expect_error("nvidia:\n  mpsLauncher: systemd-please\n",
                     "kgpu.yaml:2: nvidia.mpsLauncher: expected auto, systemd or direct, got 'systemd-please'");
        expect_error("nvidia:\n  smiPath: nvidia-smi\n",
                     "kgpu.yaml:2: nvidia.smiPath: expected an absolute path, got 'nvidia-smi'");
        expect_error("sharing:\n  mps:\n    failRequestsGreaterThanOne: yes please\n",
                     "kgpu.yaml:3: sharing.mps.failRequestsGreaterThanOne: expected a boolean (true or false), "
                     "got 'yes please'");
}
END_TEST

/* flags.nvidiaDevRoot (issue 13): unset is NULL (the probe uses the driver root), then
 * file, environment and flag as every NVIDIA key. */
START_TEST(test_dev_root) {
        _cleanup_free_ char *err = NULL;

        clear_env();
        {
                _cleanup_(config_freep) Config *c = from_yaml("flags:\n  nvidiaDriverRoot: /run/nvidia/driver\n", &err);

                ck_assert_msg(c, "%s", err);
                ck_assert_ptr_null(c->nvidia_dev_root);
        }
        {
                _cleanup_(config_freep) Config *c = from_yaml("flags:\n  nvidiaDevRoot: /run/nvidia/dev\n", &err);

                ck_assert_msg(c, "%s", err);
                ck_assert_str_eq(c->nvidia_dev_root, "/run/nvidia/dev");
        }
        setenv("NVIDIA_DEV_ROOT", "/env", 1);
        {
                const char *args[] = { NULL };
                _cleanup_(config_freep) Config *c = from_argv(args);

                ck_assert_ptr_nonnull(c);
                ck_assert_str_eq(c->nvidia_dev_root, "/env");
        }
        {
                const char *args[] = { "--nvidia-dev-root", "/flag", NULL };
                _cleanup_(config_freep) Config *c = from_argv(args);

                ck_assert_ptr_nonnull(c);
                ck_assert_str_eq(c->nvidia_dev_root, "/flag");
        }
        unsetenv("NVIDIA_DEV_ROOT");
        {
                _cleanup_(config_freep) Config *c = from_yaml("flags:\n  nvidiaDevRoot: run/nvidia\n", &err);

                ck_assert_ptr_null(c);
                ck_assert_ptr_nonnull(strstr(err, "flags.nvidiaDevRoot: expected an absolute path"));
        }
}
END_TEST

START_TEST(test_accepted_and_ignored) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL;

        clear_env();
        c = from_yaml("version: v1\n"
                      "flags:\n"
                      "  mpsRoot: /run/nvidia/mps\n"
                      "  nvidiaDevRoot: /\n"
                      "  restartOnDeviceUnhealthy: false\n"
                      "  gdsEnabled: false\n"
                      "  mofedEnabled: false\n"
                      "  gdrcopyEnabled: false\n"
                      "  useNodeFeatureAPI: true\n"
                      "  deviceDiscoveryStrategy: auto\n"
                      "  plugin:\n"
                      "    nvidiaCTKPath: /usr/bin/nvidia-ctk\n"
                      "    containerDriverRoot: /driver-root\n"
                      "    cdiFeatureFlags: \"\"\n"
                      "  gfd:\n"
                      "    oneshot: false\n"
                      "    noTimestamp: false\n"
                      "    sleepInterval: 60s\n"
                      "    outputFile: /etc/kubernetes/node-feature-discovery/features.d/gfd\n"
                      "    machineTypeFile: /sys/class/dmi/id/product_name\n"
                      "imex:\n"
                      "  channelIDs: []\n"
                      "  required: false\n"
                      "health:\n"
                      "  disabled: false\n"
                      "  eventTypes: [EventTypeXidCriticalError]\n"
                      "  ignoredXIDs: [13, 31]\n"
                      "  criticalXIDs: all\n", &err);
        ck_assert_msg(c, "%s", err);
        ck_assert_str_eq(c->nvidia_config_version, "v1");
        /* Nothing of it changed what kgpu uses. */
        ck_assert_str_eq(c->nvidia_driver_root, "/");
        ck_assert_str_eq(c->labels_feature_file, "/etc/kubernetes/node-feature-discovery/features.d/kgpu");
}
END_TEST

/* Values upstream acts on and kgpu cannot: accepted as upstream accepts them (the warning
 * each gives is checked by the corpus, tests/data/config-nvidia-v1); upstream's refusals stay. */
START_TEST(test_no_effect_values) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL;

        clear_env();
        c = from_yaml("flags:\n  gdsEnabled: true\n  mofedEnabled: true\n  gdrcopyEnabled: true\n"
                      "  deviceDiscoveryStrategy: tegra\nimex:\n  channelIDs: [0]\n  required: true\n", &err);
        ck_assert_msg(c, "%s", err);
        expect_error("flags:\n  gdrcopyEnabled: sure\n",
                     "kgpu.yaml:2: flags.gdrcopyEnabled: expected a boolean (true or false), got 'sure'");
        expect_error("flags:\n  deviceDiscoveryStrategy: wsl\n",
                     "kgpu.yaml:2: flags.deviceDiscoveryStrategy: expected auto, nvml or tegra, got 'wsl'");
        expect_error("imex:\n  channelIDs: [0, 1]\n",
                     "kgpu.yaml:2: imex.channelIDs: channelIDs must be [] or [0] (as the NVIDIA device plugin requires)");
        expect_error("imex:\n  channelIDs: [1]\n",
                     "kgpu.yaml:2: imex.channelIDs: channelIDs must be [] or [0] (as the NVIDIA device plugin requires)");
        expect_error("imex:\n  channelIDs: [zero]\n",
                     "kgpu.yaml:2: imex.channelIDs: expected a list of integers, [] or [0]");
        expect_error("imex:\n  channelIDs: 0\n",
                     "kgpu.yaml:2: imex.channelIDs: expected a list of channel IDs, [] or [0], got '0'");
}
END_TEST

START_TEST(test_getopt_table) {
        const struct option *o = config_getopt_options();
        static const char * const wanted[] = {
                "mig-strategy", "fail-on-init-error", "nvidia-driver-root", "pass-device-specs",
                "device-list-strategy", "device-id-strategy", "cdi-annotation-prefix", "nvidia-smi-path",
                "log-level", "cdi-spec-directory",
        };
        size_t n = 0;

        while (o[n].name) {
                ck_assert_ptr_nonnull(config_flag_by_val(o[n].val));
                ck_assert_str_eq(config_flag_by_val(o[n].val), o[n].name);
                n++;
        }
        for (size_t i = 0; i < ELEMENTSOF(wanted); i++) {
                bool found = false;

                for (size_t j = 0; j < n; j++)
                        if (streq(o[j].name, wanted[i]))
                                found = true;
                ck_assert_msg(found, "flag --%s missing", wanted[i]);
                ck_assert(config_flag_known(wanted[i]));
        }
        ck_assert(!config_flag_known("sharing"));
}
END_TEST

/* ---- examples (tests/data/nvidia-config) ---- */

static Config *load_example(const char *name) {
        _cleanup_free_ char *path = NULL, *err = NULL;
        const char *root = getenv("KGPU_SOURCE_ROOT");
        Config *c = NULL;

        ck_assert_ptr_nonnull(root);
        ck_assert_int_ge(asprintf(&path, "%s/tests/data/nvidia-config/%s", root, name), 0);
        clear_env();
        ck_assert_msg(config_load(path, NULL, 0, &c, &err) >= 0, "%s: %s", name, err);
        ck_assert_str_eq(c->file, path);
        return c;
}

/* One shared entry, field by field; devices joined with ',' ("" for NULL, i.e. all). */
static void check_resource(const ConfigSharing *sh, size_t i, const char *name, const char *rename,
                           uint32_t replicas, uint64_t memory_gb, const char *devices, const char *advertised) {
        const ConfigSharedResource *r;
        _cleanup_free_ char *joined = NULL, *adv = NULL;

        ck_assert_uint_gt(sh->n_resources, i);
        r = &sh->resources[i];
        ck_assert_str_eq(r->name, name);
        if (rename)
                ck_assert_str_eq(r->rename, rename);
        else
                ck_assert_ptr_null(r->rename);
        ck_assert_uint_eq(r->replicas, replicas);
        ck_assert_uint_eq(r->memory_bytes, memory_gb << 30);
        if (devices) {
                joined = strv_join(r->devices, ",");
                ck_assert_ptr_nonnull(joined);
                ck_assert_str_eq(joined, devices);
        } else
                ck_assert_ptr_null(r->devices);
        adv = config_shared_resource_name(sh, r);
        ck_assert_str_eq(adv, advertised);
}

/* The "flags" part every README example shares: the NVIDIA plugin's defaults, explicitly. */
static void check_default_flags(const Config *c) {
        ck_assert_str_eq(c->nvidia_config_version, "v1");
        ck_assert_int_eq(c->nvidia_mig_strategy, MIG_STRATEGY_NONE);
        ck_assert(c->nvidia_fail_on_init_error);
        ck_assert_str_eq(c->nvidia_driver_root, "/");
        ck_assert(!c->nvidia_pass_device_specs);
        ck_assert_uint_eq(c->nvidia_device_list_strategy, DEVICE_LIST_STRATEGY_ENVVAR);
        ck_assert_int_eq(c->nvidia_device_id_strategy, DEVICE_ID_STRATEGY_UUID);
        ck_assert_str_eq(c->nvidia_cdi_annotation_prefix, "cdi.k8s.io/");
        ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 0);
        ck_assert_uint_eq(c->nvidia_mps.n_resources, 0);
}

START_TEST(test_example_flags) {
        static const char * const files[] = {
                "readme-config-file.yaml", "readme-dp-example-config0.yaml", "blog-gfd-config.yaml",
        };

        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                _cleanup_(config_freep) Config *c = load_example(files[i]);

                check_default_flags(c);
        }
        {
                _cleanup_(config_freep) Config *c = load_example("readme-dp-example-config1.yaml");

                ck_assert_str_eq(c->nvidia_config_version, "v1");
                ck_assert_int_eq(c->nvidia_mig_strategy, MIG_STRATEGY_MIXED);
                ck_assert(c->nvidia_fail_on_init_error);
                ck_assert_str_eq(c->nvidia_driver_root, "/");
                ck_assert(!c->nvidia_pass_device_specs);
                ck_assert_uint_eq(c->nvidia_device_list_strategy, DEVICE_LIST_STRATEGY_ENVVAR);
                ck_assert_int_eq(c->nvidia_device_id_strategy, DEVICE_ID_STRATEGY_UUID);
        }
}
END_TEST

START_TEST(test_example_time_slicing) {
        {
                _cleanup_(config_freep) Config *c = load_example("readme-time-slicing.yaml");

                ck_assert_str_eq(c->nvidia_config_version, "v1");
                ck_assert(!c->nvidia_time_slicing.rename_by_default);
                ck_assert(!c->nvidia_time_slicing.fail_requests_greater_than_one);
                ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 1);
                check_resource(&c->nvidia_time_slicing, 0, "nvidia.com/gpu", NULL, 10, 0, NULL, "nvidia.com/gpu");
                ck_assert_uint_eq(c->nvidia_mps.n_resources, 0);
                ck_assert_int_eq(c->nvidia_mig_strategy, MIG_STRATEGY_NONE);
        }
        {
                _cleanup_(config_freep) Config *c = load_example("readme-time-slicing-rename.yaml");

                ck_assert(c->nvidia_time_slicing.rename_by_default);
                ck_assert(!c->nvidia_time_slicing.fail_requests_greater_than_one);
                ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 1);
                check_resource(&c->nvidia_time_slicing, 0, "nvidia.com/gpu", NULL, 10, 0, NULL, "nvidia.com/gpu.shared");
        }
        {
                static const char * const files[] = {
                        "operator-time-slicing-config-all.yaml", "operator-time-slicing-tesla-t4.yaml",
                        "operator-time-slicing-fields.yaml",
                };

                for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                        _cleanup_(config_freep) Config *c = load_example(files[i]);

                        ck_assert_int_eq(c->nvidia_mig_strategy, MIG_STRATEGY_NONE);
                        ck_assert(!c->nvidia_time_slicing.rename_by_default);
                        ck_assert(!c->nvidia_time_slicing.fail_requests_greater_than_one);
                        ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 1);
                        check_resource(&c->nvidia_time_slicing, 0, "nvidia.com/gpu", NULL, 4, 0, NULL, "nvidia.com/gpu");
                }
        }
        {
                _cleanup_(config_freep) Config *c = load_example("operator-time-slicing-a100-40gb.yaml");

                ck_assert_int_eq(c->nvidia_mig_strategy, MIG_STRATEGY_MIXED);
                ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 5);
                check_resource(&c->nvidia_time_slicing, 0, "nvidia.com/gpu", NULL, 8, 0, NULL, "nvidia.com/gpu");
                check_resource(&c->nvidia_time_slicing, 1, "nvidia.com/mig-1g.5gb", NULL, 2, 0, NULL, "nvidia.com/mig-1g.5gb");
                check_resource(&c->nvidia_time_slicing, 2, "nvidia.com/mig-2g.10gb", NULL, 2, 0, NULL, "nvidia.com/mig-2g.10gb");
                check_resource(&c->nvidia_time_slicing, 3, "nvidia.com/mig-3g.20gb", NULL, 3, 0, NULL, "nvidia.com/mig-3g.20gb");
                check_resource(&c->nvidia_time_slicing, 4, "nvidia.com/mig-7g.40gb", NULL, 7, 0, NULL, "nvidia.com/mig-7g.40gb");
        }
        {
                _cleanup_(config_freep) Config *c = load_example("kgpu-time-slicing-per-gpu.yaml");

                ck_assert_uint_eq(c->nvidia_device_list_strategy, DEVICE_LIST_STRATEGY_ENVVAR | DEVICE_LIST_STRATEGY_CDI_CRI);
                ck_assert(c->nvidia_time_slicing.rename_by_default);
                ck_assert(c->nvidia_time_slicing.fail_requests_greater_than_one);
                ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 2);
                check_resource(&c->nvidia_time_slicing, 0, "nvidia.com/gpu", NULL, 2, 0, "0,1", "nvidia.com/gpu.shared");
                check_resource(&c->nvidia_time_slicing, 1, "nvidia.com/gpu", NULL, 4, 0,
                               "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763", "nvidia.com/gpu.shared");
        }
}
END_TEST

START_TEST(test_example_mps) {
        static const struct {
                const char *file;
                uint32_t replicas;
                bool rename;
        } plain[] = {
                { "readme-mps.yaml", 10, false },
                { "readme-mps-rename.yaml", 10, true },
                { "operator-mps.yaml", 4, false },
        };

        for (size_t i = 0; i < ELEMENTSOF(plain); i++) {
                _cleanup_(config_freep) Config *c = load_example(plain[i].file);

                ck_assert_str_eq(c->nvidia_config_version, "v1");
                ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 0);
                ck_assert(c->nvidia_mps.rename_by_default == plain[i].rename);
                /* Not given: MPS refuses requests for more than one replica (upstream default). */
                ck_assert(c->nvidia_mps.fail_requests_greater_than_one);
                ck_assert_uint_eq(c->nvidia_mps.n_resources, 1);
                check_resource(&c->nvidia_mps, 0, "nvidia.com/gpu", NULL, plain[i].replicas, 0, NULL,
                               plain[i].rename ? "nvidia.com/gpu.shared" : "nvidia.com/gpu");
        }
        {
                _cleanup_(config_freep) Config *c = load_example("nos-mps.yaml");

                ck_assert_int_eq(c->nvidia_mig_strategy, MIG_STRATEGY_NONE);
                ck_assert(!c->nvidia_mps.rename_by_default);
                ck_assert(c->nvidia_mps.fail_requests_greater_than_one);
                ck_assert_uint_eq(c->nvidia_mps.n_resources, 1);
                check_resource(&c->nvidia_mps, 0, "nvidia.com/gpu", "nvidia.com/gpu-2gb", 2, 2, "0", "nvidia.com/gpu-2gb");
        }
        {
                _cleanup_(config_freep) Config *c = load_example("kgpu-mps-slices.yaml");

                ck_assert_uint_eq(c->nvidia_mps.n_resources, 2);
                check_resource(&c->nvidia_mps, 0, "nvidia.com/gpu", "nvidia.com/gpu-2gb", 2, 2, "0", "nvidia.com/gpu-2gb");
                check_resource(&c->nvidia_mps, 1, "nvidia.com/gpu", "nvidia.com/gpu-4gb", 1, 4, "0", "nvidia.com/gpu-4gb");
        }
}
END_TEST

/* ---- lists: forms and normalisation ---- */

START_TEST(test_list_forms) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL;

        clear_env();
        c = from_yaml("sharing:\n"
                      "  timeSlicing:\n"
                      "    renameByDefault: true\n"
                      "    resources:\n"
                      "    - {name: gpu, rename: gpu-small, replicas: 3, devices: [007, \"2\"]}\n"
                      "    - name: nvidia.com/mig-1g.10gb\n"
                      "      replicas: 1024\n"
                      "      devices: [\"0:1\", MIG-b1028956-cfa2-0990-bf4a-5da9abb51763,\n"
                      "                MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/3/0]\n"
                      "    - {name: nvidia.com/mig-1c.2g.20gb, replicas: 2, devices: all}\n"
                      "    - {name: mig-1g.10gb.me, replicas: 2}\n"
                      "resources:\n"
                      "  gpus:\n"
                      "  - {pattern: \"*\", name: gpu}\n"
                      "  mig:\n"
                      "  - {pattern: 1g.10gb, name: nvidia.com/mig-1g.10gb}\n", &err);
        ck_assert_msg(c, "%s", err);
        ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 4);
        /* Short names get the nvidia.com/ prefix, as upstream; "007" is GPU 7; an explicit rename wins. */
        check_resource(&c->nvidia_time_slicing, 0, "nvidia.com/gpu", "nvidia.com/gpu-small", 3, 0, "7,2",
                       "nvidia.com/gpu-small");
        check_resource(&c->nvidia_time_slicing, 1, "nvidia.com/mig-1g.10gb", NULL, 1024, 0,
                       "0:1,MIG-b1028956-cfa2-0990-bf4a-5da9abb51763,MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/3/0",
                       "nvidia.com/mig-1g.10gb.shared");
        check_resource(&c->nvidia_time_slicing, 2, "nvidia.com/mig-1c.2g.20gb", NULL, 2, 0, NULL,
                       "nvidia.com/mig-1c.2g.20gb.shared");
        check_resource(&c->nvidia_time_slicing, 3, "nvidia.com/mig-1g.10gb.me", NULL, 2, 0, NULL,
                       "nvidia.com/mig-1g.10gb.me.shared");
}
END_TEST

START_TEST(test_list_given_twice_and_reload) {
        clear_env();
        /* libyaml keeps duplicate keys: the last list counts and the first is freed (ASan). */
        for (int round = 0; round < 2; round++) {
                _cleanup_(config_freep) Config *c = NULL;
                _cleanup_free_ char *err = NULL;

                c = from_yaml("sharing:\n"
                              "  mps:\n"
                              "    resources: [{name: gpu, replicas: 2, devices: [0]}]\n"
                              "    resources: [{name: gpu, replicas: 3, memoryGB: 1}]\n", &err);
                ck_assert_msg(c, "%s", err);
                ck_assert_uint_eq(c->nvidia_mps.n_resources, 1);
                check_resource(&c->nvidia_mps, 0, "nvidia.com/gpu", NULL, 3, 1, NULL, "nvidia.com/gpu");
        }
}
END_TEST

/* ---- lists: every error path ---- */

START_TEST(test_list_errors) {
        clear_env();
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 0\n",
                     "kgpu.yaml:5: sharing.timeSlicing.resources[0].replicas: expected an integer from 2 to 1024 "
                     "(time-slicing needs at least 2 replicas, as the NVIDIA device plugin), got '0'");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"
                     "    - name: nvidia.com/gpu\n      replicas: -1\n",
                     "kgpu.yaml:7: sharing.timeSlicing.resources[1].replicas: expected an integer from 2 to 1024 "
                     "(time-slicing needs at least 2 replicas, as the NVIDIA device plugin), got '-1'");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 1025}\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].replicas: expected an integer from 2 to 1024 "
                     "(time-slicing needs at least 2 replicas, as the NVIDIA device plugin), got '1025'");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].replicas: required, not given");
        expect_error("sharing:\n  mps:\n    resources:\n    - replicas: 2\n",
                     "kgpu.yaml:4: sharing.mps.resources[0].name: required, not given");
        /* Names no device has parse, as upstream, and share nothing: the entries are dropped. */
        {
                _cleanup_(config_freep) Config *c = NULL;
                _cleanup_free_ char *err = NULL;

                c = from_yaml("sharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/tpu, replicas: 2}\n"
                              "    - {name: nvidia.com/mig-big, replicas: 2}\n    - {name: gpu, replicas: 3}\n", &err);
                ck_assert_msg(c, "%s", err);
                ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 1);
                ck_assert_str_eq(c->nvidia_time_slicing.resources[0].name, "nvidia.com/gpu");
                ck_assert_uint_eq(c->nvidia_time_slicing.resources[0].replicas, 3);
        }
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: amd.com/gpu, replicas: 2}\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].name: expected a resource name under nvidia.com/, "
                     "got 'amd.com/gpu'");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, rename: Shared_GPU, replicas: 2}\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].rename: expected a resource name (nvidia.com/ and up "
                     "to 63 lower case letters, digits, '-' or '.'), got 'Shared_GPU'");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, rename: \"\", replicas: 2}\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].rename: expected a resource name (nvidia.com/ and up "
                     "to 63 lower case letters, digits, '-' or '.'), got ''");
        expect_error("sharing:\n  mps:\n    resources:\n    - {name: nvidia.com/mig-1g.10gb, replicas: 2}\n",
                     "kgpu.yaml:4: sharing.mps.resources[0].name: MPS is not supported on MIG devices, only nvidia.com/gpu "
                     "can be shared, got 'nvidia.com/mig-1g.10gb'");
        expect_error("sharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 2, devices: [\"0:1\"]}\n",
                     "kgpu.yaml:4: sharing.mps.resources[0].devices: MPS is not supported on MIG devices, got '0:1'");
        expect_error("sharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 2, memoryGB: 0}\n",
                     "kgpu.yaml:4: sharing.mps.resources[0].memoryGB: expected a whole number of GiB from 1 to 65536, got '0'");
        expect_error("sharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 2, memoryGB: 1.5}\n",
                     "kgpu.yaml:4: sharing.mps.resources[0].memoryGB: expected a whole number of GiB from 1 to 65536, got '1.5'");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2, devices: some}\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].devices: expected \"all\" or a list of GPU indexes, "
                     "MIG indexes or UUIDs, got 'some'");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2, devices: 0}\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].devices: a count of devices must be > 0, got '0'");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2, devices: []}\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].devices: expected \"all\" or a non-empty list of devices");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2, devices: {a: 1}}\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].devices: expected \"all\" or a list of devices, got a mapping");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 2\n      devices:\n"
                     "      - 0\n      - GPU-1234\n",
                     "kgpu.yaml:8: sharing.timeSlicing.resources[0].devices: expected a GPU index (0), a MIG index (0:1), "
                     "a GPU UUID (GPU-...) or a MIG UUID (MIG-...), got 'GPU-1234'");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2, devices: [[0]]}\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].devices: list items must be GPU indexes, MIG indexes or UUIDs");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2, devices: [1, \"01\"]}\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].devices: '1' listed twice");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replica: 3}\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].replicas: required, not given");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 1}\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].replicas: expected an integer from 2 to 1024 "
                     "(time-slicing needs at least 2 replicas, as the NVIDIA device plugin), got '1'");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2, replicas: 3}\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].replicas: given twice");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: [gpu], replicas: 2}\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0].name: expected a single value");
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - nvidia.com/gpu\n",
                     "kgpu.yaml:4: sharing.timeSlicing.resources[0]: expected a mapping (name, replicas, ...)");
        expect_error("sharing:\n  timeSlicing:\n    resources: nvidia.com/gpu\n",
                     "kgpu.yaml:3: sharing.timeSlicing.resources: expected a list of resources (name, replicas, ...)");
        expect_error("sharing:\n  timeSlicing:\n    resources: []\n",
                     "kgpu.yaml:3: sharing.timeSlicing.resources: no resources specified");
        expect_error("sharing:\n  timeSlicing:\n    renameByDefault: true\n",
                     "kgpu.yaml:3: sharing.timeSlicing: no resources specified");
        expect_error("version: v1\nsharing:\n  mps:\n    failRequestsGreaterThanOne: false\n",
                     "kgpu.yaml:4: sharing.mps: no resources specified");
        expect_error("sharing:\n  timeSlicing: {}\n",
                     "kgpu.yaml:2: sharing.timeSlicing: no resources specified");
        expect_error("sharing:\n  timeSlicing: {}\n  mps:\n    resources: []\n",
                     "kgpu.yaml:4: sharing.mps.resources: no resources specified");
        /* Both: MPS wins, as upstream; an empty timeSlicing beside MPS is what nos writes. */
        {
                _cleanup_(config_freep) Config *c = NULL, *d = NULL;
                _cleanup_free_ char *err = NULL;

                c = from_yaml("sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources: [{name: gpu, replicas: 4}]\n"
                              "  mps:\n    resources: [{name: gpu, replicas: 2}]\n", &err);
                ck_assert_msg(c, "%s", err);
                ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 0);
                ck_assert(!c->nvidia_time_slicing.rename_by_default);
                ck_assert_uint_eq(c->nvidia_mps.n_resources, 1);
                d = from_yaml("sharing:\n  timeSlicing: {}\n  mps:\n    resources: [{name: gpu, replicas: 2}]\n", &err);
                ck_assert_msg(d, "%s", err);
                ck_assert_uint_eq(d->nvidia_mps.n_resources, 1);
        }
}
END_TEST

START_TEST(test_list_duplicates) {
        clear_env();
        /* The same advertised name twice on the same devices. */
        expect_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2}\n"
                     "    - {name: nvidia.com/gpu, replicas: 4}\n",
                     "kgpu.yaml:5: sharing.timeSlicing.resources[1]: 'nvidia.com/gpu' is already advertised for the same "
                     "devices by sharing.timeSlicing.resources[0]");
        expect_error("sharing:\n  mps:\n    resources:\n"
                     "    - {name: gpu, rename: gpu-2gb, memoryGB: 2, replicas: 2, devices: [\"0\", \"1\"]}\n"
                     "    - {name: gpu, rename: gpu-2gb, memoryGB: 2, replicas: 1, devices: [\"1\"]}\n",
                     "kgpu.yaml:5: sharing.mps.resources[1]: 'nvidia.com/gpu-2gb' is already advertised for the same "
                     "devices by sharing.mps.resources[0]");
        /* renameByDefault makes two distinct names one. */
        expect_error("sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
                     "    - {name: gpu, rename: gpu.shared, replicas: 2, devices: [0]}\n"
                     "    - {name: gpu, replicas: 2, devices: [0]}\n",
                     "kgpu.yaml:6: sharing.timeSlicing.resources[1]: 'nvidia.com/gpu.shared' is already advertised for the "
                     "same devices by sharing.timeSlicing.resources[0]");
        /* One device time-sliced under two names. */
        expect_error("sharing:\n  timeSlicing:\n    resources:\n"
                     "    - {name: gpu, replicas: 2, devices: [0, 1]}\n"
                     "    - {name: gpu, rename: gpu-other, replicas: 2, devices: [1, 2]}\n",
                     "kgpu.yaml:5: sharing.timeSlicing.resources[1]: 'nvidia.com/gpu' on the same devices is already "
                     "time-sliced by sharing.timeSlicing.resources[0]");
        /* Fine: other devices; MPS slices of different sizes on one GPU (tested in test_example_mps). */
        {
                _cleanup_(config_freep) Config *c = NULL;
                _cleanup_free_ char *err = NULL;

                c = from_yaml("sharing:\n  timeSlicing:\n    resources:\n"
                              "    - {name: gpu, replicas: 2, devices: [0]}\n"
                              "    - {name: gpu, replicas: 8, devices: [1]}\n"
                              "    - {name: mig-1g.10gb, replicas: 2}\n", &err);
                ck_assert_msg(c, "%s", err);
                ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 3);
        }
}
END_TEST

START_TEST(test_null_sections) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL;

        clear_env();
        /* Sections with nothing under them are null (the NVIDIA plugin: no MPS, no flags). */
        c = from_yaml("version: v1\nflags:\n  plugin:\n  gfd: ~\nsharing:\n  mps: null\nresources:\nimex:\n", &err);
        ck_assert_msg(c, "%s", err);
        ck_assert_uint_eq(c->nvidia_mps.n_resources, 0);
        ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 0);
        /* Except timeSlicing, which upstream reads with a reader that needs resources; an
         * explicit "" is a string, not null: not a mapping. */
        expect_error("sharing:\n  timeSlicing:\n", "kgpu.yaml:2: sharing.timeSlicing: no resources specified");
        expect_error("sharing:\n  timeSlicing: null\n  mps: null\n", "kgpu.yaml:2: sharing.timeSlicing: no resources specified");
        expect_error("sharing: \"\"\n", "kgpu.yaml:1: sharing: expected a mapping");
        /* kgpu's own sections: strict keys. */
        expect_error("kubelet:\n  nothing:\n", "kgpu.yaml:2: unknown key 'kubelet.nothing'");
}
END_TEST

/* Bounded lists: 1024 devices per entry, 4096 in a section, so the overlap checks stay cheap. */
START_TEST(test_list_bounds) {
        _cleanup_free_ char *big = NULL;
        size_t size = 256 * 1024, n = 0;

        clear_env();
        big = malloc(size);
        ck_assert_ptr_nonnull(big);
        /* One entry with 1025 devices. */
        n = (size_t) snprintf(big, size, "sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2, devices: [");
        for (int d = 0; d < 1025; d++)
                n += (size_t) snprintf(big + n, size - n, "%s%d", d ? "," : "", d);
        n += (size_t) snprintf(big + n, size - n, "]}\n");
        ck_assert_uint_lt(n, size);
        expect_error(big, "kgpu.yaml:4: sharing.timeSlicing.resources[0].devices: more than 1024 devices");

        /* Five entries of 1000 devices (disjoint, so only the total is wrong), one line each. */
        n = (size_t) snprintf(big, size, "sharing:\n  timeSlicing:\n    resources:\n");
        for (int e = 0; e < 5; e++) {
                n += (size_t) snprintf(big + n, size - n, "    - {name: gpu, replicas: 2, devices: [");
                for (int d = 0; d < 1000; d++)
                        n += (size_t) snprintf(big + n, size - n, "%s%d", d ? "," : "", e * 1000 + d);
                n += (size_t) snprintf(big + n, size - n, "]}\n");
        }
        ck_assert_uint_lt(n, size);
        expect_error(big, "kgpu.yaml:8: sharing.timeSlicing.resources[4].devices: more than 4096 devices in all entries");

        /* 4 x 1024 distinct devices of one name: loads (every pair's overlap is checked). */
        n = (size_t) snprintf(big, size, "sharing:\n  timeSlicing:\n    resources:\n");
        for (int e = 0; e < 4; e++) {
                n += (size_t) snprintf(big + n, size - n, "    - {name: gpu, replicas: 2, devices: [");
                for (int d = 0; d < 1024; d++)
                        n += (size_t) snprintf(big + n, size - n, "%s%d", d ? "," : "", e * 1024 + d);
                n += (size_t) snprintf(big + n, size - n, "]}\n");
        }
        ck_assert_uint_lt(n, size);
        {
                _cleanup_(config_freep) Config *c = NULL;
                _cleanup_free_ char *err = NULL;

                c = from_yaml(big, &err);
                ck_assert_msg(c, "%s", err);
                ck_assert_uint_eq(c->nvidia_time_slicing.n_resources, 4);
                ck_assert_uint_eq(strv_length(c->nvidia_time_slicing.resources[3].devices), 1024);
        }
}
END_TEST

START_TEST(test_resource_patterns) {
        clear_env();
        /* Custom names: ignored with a warning, as upstream (the corpus checks the warning). */
        {
                _cleanup_(config_freep) Config *c = NULL;
                _cleanup_free_ char *err = NULL;

                c = from_yaml("resources:\n  gpus:\n  - pattern: \"*A100*\"\n    name: a100\n"
                              "  mig:\n  - {pattern: 1g.10gb, name: mig-small, other: 1}\n", &err);
                ck_assert_msg(c, "%s", err);
        }
        expect_error("resources:\n  gpus:\n  - {name: gpu}\n",
                     "kgpu.yaml:3: resources.gpus[0].pattern: required, not given");
        expect_error("resources:\n  gpus:\n  - {pattern: \"*\"}\n",
                     "kgpu.yaml:3: resources.gpus[0].name: required, not given");
        expect_error("resources:\n  gpus:\n  - {pattern: \"*\", name: \"Not Valid\"}\n",
                     "kgpu.yaml:3: resources.gpus[0].name: expected a resource name (nvidia.com/ and up to 63 lower case "
                     "letters, digits, '-' or '.'), got 'Not Valid'");
        expect_error("resources:\n  gpus: gpu\n",
                     "kgpu.yaml:2: resources.gpus: expected a list of {pattern, name}");
        expect_error("resources:\n  gpus:\n  - gpu\n",
                     "kgpu.yaml:3: resources.gpus[0]: expected a mapping (pattern, name)");
        expect_error("resources:\n  gpus: {pattern: \"*\"}\n", "kgpu.yaml:2: resources.gpus: expected a list of {pattern, name}");
}
END_TEST

static Suite *nvidia_config_suite(void) {
        Suite *s = suite_create("nvidia-config");
        TCase *tc = tcase_create("scalars");

        tcase_add_test(tc, test_defaults);
        tcase_add_test(tc, test_scalars_from_file);
        tcase_add_test(tc, test_device_list_strategy_forms);
        tcase_add_test(tc, test_helpers);
        tcase_add_test(tc, test_shared_resource_name);
        tcase_add_test(tc, test_env_beats_file_flag_beats_env);
        tcase_add_test(tc, test_nvidia_own_keys_env_and_flags);
        tcase_add_test(tc, test_env_and_flag_errors);
        tcase_add_test(tc, test_scalar_errors);
        tcase_add_test(tc, test_accepted_and_ignored);
        tcase_add_test(tc, test_dev_root);
        tcase_add_test(tc, test_no_effect_values);
        tcase_add_test(tc, test_getopt_table);
        suite_add_tcase(s, tc);

        tc = tcase_create("lists");
        tcase_add_test(tc, test_example_flags);
        tcase_add_test(tc, test_example_time_slicing);
        tcase_add_test(tc, test_example_mps);
        tcase_add_test(tc, test_list_forms);
        tcase_add_test(tc, test_list_given_twice_and_reload);
        tcase_add_test(tc, test_list_errors);
        tcase_add_test(tc, test_list_duplicates);
        tcase_add_test(tc, test_resource_patterns);
        tcase_add_test(tc, test_null_sections);
        tcase_add_test(tc, test_list_bounds);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(nvidia_config_suite)
