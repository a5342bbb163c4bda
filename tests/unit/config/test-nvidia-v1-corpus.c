/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-nvidia-v1-corpus.c — the NVIDIA device plugin's v1 configs of tests/data/config-nvidia-v1
 * (one file per construct of upstream's tests, docs and start-up checks, and the nos
 * partitioner's output), each loaded with config_load() as a daemon loads its file and
 * checked against its header: accepted or refused (with kgpu's error), the values the
 * Config then holds, and the log lines (level, file, line, key) the load wrote. The
 * header format is in the directory's README.md. Also: kgpu's own sections stay strict
 * beside an NVIDIA file, and the warning for an unknown NVIDIA key names file:line:key.
 */

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "tests/unit/test-main.h"

static const char * const env_vars[] = {
        "KGPU_CONFIG", "CONFIG_FILE", "MIG_STRATEGY", "FAIL_ON_INIT_ERROR", "NVIDIA_DRIVER_ROOT",
        "PASS_DEVICE_SPECS", "DEVICE_LIST_STRATEGY", "DEVICE_ID_STRATEGY", "CDI_ANNOTATION_PREFIX",
        "KGPU_NVIDIA_REPLICA_POLICY", "SHARED_DEVICES_ALLOCATION_POLICY", "KGPU_LOG_LEVEL",
};

static void setup_env(void) {
        for (size_t i = 0; i < ELEMENTSOF(env_vars); i++)
                unsetenv(env_vars[i]);
        setenv("KGPU_LOG_TARGET", "stderr", 1);
        log_parse_environment();
        log_set_max_level(LOG_INFO);
}

/* config_load(path) with stderr (the log) captured into *ret_log. */
static int load_logged(const char *path, Config **ret, char **ret_error, char **ret_log) {
        FILE *tmp = tmpfile();
        int saved, r;
        long size;

        ck_assert_ptr_nonnull(tmp);
        fflush(stderr);
        saved = dup(STDERR_FILENO);
        ck_assert_int_ge(saved, 0);
        ck_assert_int_ge(dup2(fileno(tmp), STDERR_FILENO), 0);
        r = config_load(path, NULL, 0, ret, ret_error);
        fflush(stderr);
        ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);
        close(saved);

        size = ftell(tmp);
        ck_assert_int_ge(size, 0);
        *ret_log = calloc((size_t) size + 1, 1);
        ck_assert_ptr_nonnull(*ret_log);
        rewind(tmp);
        ck_assert_uint_eq(fread(*ret_log, 1, (size_t) size, tmp), (size_t) size);
        fclose(tmp);
        fputs(*ret_log, stderr);        /* still in the test's own log */
        return r;
}

static const ConfigSharing *sharing_section(const Config *c, const char **key) {
        const char *rest;

        if ((rest = startswith(*key, "sharing.timeSlicing."))) {
                *key = rest;
                return &c->nvidia_time_slicing;
        }
        if ((rest = startswith(*key, "sharing.mps."))) {
                *key = rest;
                return &c->nvidia_mps;
        }
        return NULL;
}

static const char *bool_text(bool b) {
        return b ? "true" : "false";
}

static bool is_yaml(const char *name) {
        size_t n = strlen(name);

        return n > 5 && streq(name + n - 5, ".yaml");
}

/* "NAME [as RENAME] xN on DEVICES [(N GB)]" */
static char *entry_text(const ConfigSharedResource *r) {
        _cleanup_free_ char *devices = NULL, *mem = NULL;
        char *out = NULL;

        if (!r->devices)
                devices = strdup("all");
        else {
                size_t n = 1;

                for (char **d = r->devices; *d; d++)
                        n += strlen(*d) + 1;
                devices = calloc(n, 1);
                for (char **d = r->devices; devices && *d; d++) {
                        if (d != r->devices)
                                strcat(devices, ",");
                        strcat(devices, *d);
                }
        }
        ck_assert_ptr_nonnull(devices);
        if (r->memory_bytes)
                ck_assert_int_ge(asprintf(&mem, " (%" PRIu64 " GB)", r->memory_bytes >> 30), 0);
        ck_assert_int_ge(asprintf(&out, "%s%s%s x%" PRIu32 " on %s%s", r->name, r->rename ? " as " : "",
                                  r->rename ?: "", r->replicas, devices, mem ?: ""), 0);
        return out;
}

/* The text of a Check key's value in c, NULL for a key this test does not know. */
static char *field_text(const Config *c, const char *key) {
        const ConfigSharing *sh;
        char buf[128], *out = NULL;
        size_t i;
        int n = 0;

        if (streq(key, "version"))
                return strdup(c->nvidia_config_version ?: "(none)");
        if (streq(key, "flags.migStrategy"))
                return strdup(config_mig_strategy_to_string(c->nvidia_mig_strategy));
        if (streq(key, "flags.failOnInitError"))
                return strdup(bool_text(c->nvidia_fail_on_init_error));
        if (streq(key, "flags.nvidiaDriverRoot"))
                return strdup(c->nvidia_driver_root);
        if (streq(key, "flags.plugin.passDeviceSpecs"))
                return strdup(bool_text(c->nvidia_pass_device_specs));
        if (streq(key, "flags.plugin.deviceListStrategy"))
                return strdup(config_device_list_strategy_to_string(c->nvidia_device_list_strategy, buf, sizeof(buf)));
        if (streq(key, "flags.plugin.deviceIDStrategy"))
                return strdup(config_device_id_strategy_to_string(c->nvidia_device_id_strategy));
        if (streq(key, "flags.plugin.cdiAnnotationPrefix"))
                return strdup(c->nvidia_cdi_annotation_prefix);
        if (streq(key, "nvidia.replicaPolicy"))
                return strdup(config_replica_policy_to_string(c->nvidia_replica_policy));
        sh = sharing_section(c, &key);
        if (!sh)
                return NULL;
        if (streq(key, "renameByDefault"))
                return strdup(bool_text(sh->rename_by_default));
        if (streq(key, "failRequestsGreaterThanOne"))
                return strdup(bool_text(sh->fail_requests_greater_than_one));
        if (streq(key, "resources"))
                return asprintf(&out, "%zu", sh->n_resources) < 0 ? NULL : out;
        if (sscanf(key, "resources[%zu]%n", &i, &n) == 1 && key[n] == 0)
                return i < sh->n_resources ? entry_text(&sh->resources[i]) : strdup("(no such entry)");
        return NULL;
}

static char *replace_file(const char *s, const char *path) {
        const char *at = strstr(s, "{file}");
        char *out = NULL;

        if (!at)
                return strdup(s);
        ck_assert_int_ge(asprintf(&out, "%.*s%s%s", (int) (at - s), s, path, at + strlen("{file}")), 0);
        return out;
}

/* Checks one corpus file against its header. */
static void check_file(const char *path) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL, *log = NULL, *expect = NULL;
        char line[1024];
        FILE *f;
        int r;

        r = load_logged(path, &c, &err, &log);

        f = fopen(path, "re");
        ck_assert_ptr_nonnull(f);
        while (fgets(line, sizeof(line), f)) {
                const char *v;

                if (line[0] != '#')
                        break;          /* the header ends at the first YAML line */
                line[strcspn(line, "\n")] = 0;
                if ((v = startswith(line, "# Expect: "))) {
                        ck_assert_msg(!expect, "%s: two Expect lines", path);
                        expect = strdup(v);
                        ck_assert_ptr_nonnull(expect);
                        if (streq(v, "accepted"))
                                ck_assert_msg(r >= 0 && c, "%s: refused, expected accepted: %s", path, err ?: "?");
                        else {
                                const char *want = startswith(v, "refused: ");

                                ck_assert_msg(want, "%s: Expect is neither accepted nor refused: %s", path, v);
                                ck_assert_msg(r < 0 && !c, "%s: accepted, expected refused (%s)", path, want);
                                ck_assert_msg(err && strstr(err, want), "%s: error '%s' lacks '%s'", path, err ?: "", want);
                                ck_assert_msg(startswith(err, path), "%s: error '%s' does not name the file", path, err);
                        }
                } else if ((v = startswith(line, "# Check: "))) {
                        _cleanup_free_ char *key = NULL, *got = NULL;
                        const char *eq = strchr(v, '=');

                        ck_assert_msg(expect && streq(expect, "accepted"), "%s: Check before Expect: accepted", path);
                        ck_assert_msg(eq, "%s: Check without '=': %s", path, v);
                        key = strndup(v, (size_t) (eq - v));
                        ck_assert_ptr_nonnull(key);
                        got = field_text(c, key);
                        ck_assert_msg(got, "%s: unknown Check key '%s'", path, key);
                        ck_assert_msg(streq(got, eq + 1), "%s: %s is '%s', expected '%s'", path, key, got, eq + 1);
                } else if ((v = startswith(line, "# Log: "))) {
                        _cleanup_free_ char *want = replace_file(v, path);

                        ck_assert_ptr_nonnull(want);
                        ck_assert_msg(strstr(log, want), "%s: no log line contains '%s'; the log:\n%s", path, want, log);
                }
        }
        fclose(f);
        ck_assert_msg(expect, "%s: no Expect line", path);
}

static int compare_names(const void *a, const void *b) {
        return strcmp(*(char * const *) a, *(char * const *) b);
}

START_TEST(test_corpus) {
        _cleanup_free_ char *dir = NULL;
        _cleanup_strv_free_ char **names = NULL;
        size_t n = 0;
        struct dirent *de;
        DIR *d;

        setup_env();
        ck_assert_int_ge(asprintf(&dir, "%s/tests/data/config-nvidia-v1", getenv("KGPU_SOURCE_ROOT") ?: "."), 0);
        d = opendir(dir);
        ck_assert_msg(d, "%s: %s", dir, strerror(errno));
        while ((de = readdir(d)))
                if (is_yaml(de->d_name))
                        ck_assert_int_ge(strv_extend(&names, de->d_name), 0);
        closedir(d);
        n = strv_length(names);
        ck_assert_uint_ge(n, 40);
        qsort(names, n, sizeof(char *), compare_names);
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *path = NULL;

                ck_assert_int_ge(asprintf(&path, "%s/%s", dir, names[i]), 0);
                check_file(path);
                fprintf(stderr, "corpus: %s ok\n", names[i]);
        }
}
END_TEST

/* Writes text to a temporary file; returns its path (free it, unlink it). */
static char *write_temp(const char *text) {
        char *path = strdup("/tmp/test-nvidia-v1-XXXXXX");
        FILE *f;
        int fd;

        ck_assert_ptr_nonnull(path);
        fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        f = fdopen(fd, "w");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_ge(fputs(text, f), 0);
        ck_assert_int_eq(fclose(f), 0);
        return path;
}

START_TEST(test_unknown_keys) {
        static const struct {
                const char *text;
                const char *error;      /* NULL: accepted, with the warning ({file}: the path) */
                const char *warning;
        } cases[] = {
                /* NVIDIA sections: a warning naming file, line and key; nothing else changes. */
                { "version: v1\nflags:\n  migStrategy: single\n  newFlag: 3\n", NULL,
                  "<warning> {file}:4: flags.newFlag: unknown key, ignored" },
                { "flags:\n  plugin:\n    newList: [a, b]\n", NULL,
                  "<warning> {file}:3: flags.plugin.newList: unknown key, ignored" },
                { "imex:\n  channelIDs: []\n  domain: x\n", NULL, "<warning> {file}:3: imex.domain: unknown key, ignored" },
                { "version: v1\nlogLevel: info\nnewSection:\n  a: 1\n", NULL,
                  "<warning> {file}:3: newSection: unknown key, ignored" },
                /* kgpu's own sections stay strict, in an NVIDIA file too. */
                { "version: v1\nkubelet:\n  socketPath: /run/kubelet.sock\n", "{file}:3: unknown key 'kubelet.socketPath'", NULL },
                { "version: v1\nnvidia:\n  smi: /usr/bin/nvidia-smi\n", "{file}:3: unknown key 'nvidia.smi'", NULL },
                { "flags:\n  migStrategy: none\nintel:\n  sharedDevNumber: 2\n", "{file}:4: unknown key 'intel.sharedDevNumber'", NULL },
                { "version: v1\nbroker:\n  maxAllocation: 3\n", "{file}:3: unknown key 'broker.maxAllocation'", NULL },
                /* A file with no NVIDIA key: a top-level typo is an error. */
                { "logLevel: info\nlogLevle: debug\n", "{file}:2: unknown key 'logLevle'", NULL },
                /* An NVIDIA section that is not a mapping: refused (upstream cannot read it either). */
                { "version: v1\nflags: 3\n", "{file}:2: flags: expected a mapping", NULL },
        };

        setup_env();
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(config_freep) Config *c = NULL;
                _cleanup_free_ char *path = write_temp(cases[i].text), *err = NULL, *log = NULL, *want = NULL;
                int r;

                r = load_logged(path, &c, &err, &log);
                want = replace_file(cases[i].error ?: cases[i].warning, path);
                ck_assert_ptr_nonnull(want);
                if (cases[i].error) {
                        ck_assert_msg(r < 0, "accepted: %s", cases[i].text);
                        ck_assert_msg(err && streq(err, want), "error '%s', expected '%s'", err ?: "", want);
                } else {
                        ck_assert_msg(r >= 0, "refused: %s: %s", cases[i].text, err ?: "");
                        ck_assert_msg(strstr(log, want), "no '%s' in the log:\n%s", want, log);
                }
                unlink(path);
        }
}
END_TEST

/* flags.plugin.sharedDevicesAllocationPolicy: upstream's name of nvidia.replicaPolicy, from
 * the file, its variable and its flag; kgpu's own variable wins over upstream's. */
START_TEST(test_shared_devices_allocation_policy) {
        static const char text[] = "flags:\n  plugin:\n    sharedDevicesAllocationPolicy: packed\n";
        static const ConfigOverride distributed[] = { { "shared-devices-allocation-policy", "distributed" } };
        static const ConfigOverride bad[] = { { "shared-devices-allocation-policy", "spread" } };
        _cleanup_(config_freep) Config *a = NULL, *b = NULL, *c = NULL, *d = NULL;
        _cleanup_free_ char *err = NULL;

        setup_env();
        ck_assert_int_eq(config_load_string(text, strlen(text), "kgpu.yaml", NULL, 0, &a, &err), 0);
        ck_assert_int_eq(a->nvidia_replica_policy, REPLICA_POLICY_PACKED);
        ck_assert_int_eq(config_load_string(text, strlen(text), "kgpu.yaml", distributed, 1, &b, &err), 0);
        ck_assert_int_eq(b->nvidia_replica_policy, REPLICA_POLICY_DISTRIBUTED);
        ck_assert_int_lt(config_load_string(text, strlen(text), "kgpu.yaml", bad, 1, &d, &err), 0);
        ck_assert_str_eq(err, "--shared-devices-allocation-policy: expected distributed or packed, got 'spread'");

        setenv("SHARED_DEVICES_ALLOCATION_POLICY", "packed", 1);
        setenv("KGPU_NVIDIA_REPLICA_POLICY", "distributed", 1);
        ck_assert_int_eq(config_load_string("", 0, "kgpu.yaml", NULL, 0, &c, NULL), 0);
        ck_assert_int_eq(c->nvidia_replica_policy, REPLICA_POLICY_DISTRIBUTED);
        config_free(TAKE_PTR(c));
        unsetenv("KGPU_NVIDIA_REPLICA_POLICY");
        ck_assert_int_eq(config_load_string("", 0, "kgpu.yaml", NULL, 0, &c, NULL), 0);
        ck_assert_int_eq(c->nvidia_replica_policy, REPLICA_POLICY_PACKED);
        unsetenv("SHARED_DEVICES_ALLOCATION_POLICY");
}
END_TEST

static Suite *nvidia_v1_corpus_suite(void) {
        Suite *s = suite_create("nvidia-v1-corpus");
        TCase *tc = tcase_create("corpus");

        tcase_add_test(tc, test_corpus);
        tcase_add_test(tc, test_unknown_keys);
        tcase_add_test(tc, test_shared_devices_allocation_policy);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(nvidia_v1_corpus_suite)
