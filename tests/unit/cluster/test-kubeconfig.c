/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-kubeconfig.c — credentials: kubeconfig files (paths, data, tokens, refusals), the
 * in-cluster service account files, token files read afresh, base64. */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "daemons/cluster/kubeconfig.h"
#include "tests/unit/test-main.h"

static char dir[] = "/tmp/kgpu-test-kubeconfig-XXXXXX";

static void setup(void) {
        ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
        char cmd[128];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ck_assert_int_eq(system(cmd), 0);
        strcpy(dir, "/tmp/kgpu-test-kubeconfig-XXXXXX");
}

static char *write_file(const char *name, const char *content) {
        char *p;
        FILE *f;

        ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
        f = fopen(p, "we");
        ck_assert_ptr_nonnull(f);
        fputs(content, f);
        fclose(f);
        return p;
}

#define KC_HEAD                                                                 \
        "apiVersion: v1\nkind: Config\ncurrent-context: ctx\n"                  \
        "contexts:\n- name: other\n  context: {cluster: c2, user: u2}\n"        \
        "- name: ctx\n  context:\n    cluster: c1\n    user: u1\n"

START_TEST(test_paths) {
        _cleanup_free_ char *p = write_file("kc", KC_HEAD
                "clusters:\n- name: c1\n  cluster:\n    server: https://10.0.0.1:6443/\n"
                "    certificate-authority: pki/ca.crt\n"
                "users:\n- name: u1\n  user:\n    client-certificate: /abs/node.crt\n    client-key: node.key\n");
        _cleanup_(kube_creds_freep) KubeCreds *c = NULL;
        _cleanup_free_ char *err = NULL, *ca = NULL, *key = NULL;

        ck_assert_int_eq(kubeconfig_load(p, &c, &err), 0);
        ck_assert_str_eq(c->server, "https://10.0.0.1:6443");
        ck_assert_int_ge(asprintf(&ca, "%s/pki/ca.crt", dir), 0);
        ck_assert_int_ge(asprintf(&key, "%s/node.key", dir), 0);
        ck_assert_str_eq(c->ca_file, ca);               /* relative to the kubeconfig */
        ck_assert_str_eq(c->cert_file, "/abs/node.crt");
        ck_assert_str_eq(c->key_file, key);
        ck_assert_ptr_null(c->token);
        ck_assert(!kube_creds_changed(c));
}
END_TEST

START_TEST(test_data_and_tokens) {
        /* "-----BEGIN X-----" and "key" in base64; the token file wins over the token. */
        _cleanup_free_ char *tok = write_file("token", "\n  tok-from-file  \n");
        _cleanup_free_ char *p = write_file("kc", KC_HEAD
                "clusters:\n- name: c1\n  cluster:\n    server: https://api.example:443\n"
                "    certificate-authority-data: LS0tLS1CRUdJTiBYLS0tLS0=\n"
                "users:\n- name: u1\n  user:\n    token: static-token\n    tokenFile: token\n");
        _cleanup_(kube_creds_freep) KubeCreds *c = NULL;
        _cleanup_free_ char *err = NULL, *t = NULL;

        ck_assert_int_eq(kubeconfig_load(p, &c, &err), 0);
        ck_assert_ptr_null(c->ca_file);
        ck_assert_uint_eq(c->ca_len, 17);
        ck_assert_str_eq(c->ca_data, "-----BEGIN X-----");
        ck_assert_str_eq(c->token, "static-token");
        ck_assert_int_eq(kube_creds_token(c, &t, &err), 0);
        ck_assert_str_eq(t, "tok-from-file");
        free(t);
        /* Rotated: read again at the next request. */
        free(write_file("token", "rotated\n"));
        ck_assert_int_eq(kube_creds_token(c, &t, &err), 0);
        ck_assert_str_eq(t, "rotated");
        t = mfree(t);
        free(write_file("token", "two tokens\n"));
        ck_assert_int_eq(kube_creds_token(c, &t, &err), -EINVAL);
        free(err);
        err = NULL;
        unlink(tok);
        ck_assert_int_eq(kube_creds_token(c, &t, &err), -ENOENT);
        ck_assert_ptr_nonnull(strstr(err, "token"));

        /* The kubeconfig changing is noticed. */
        ck_assert(!kube_creds_changed(c));
        free(write_file("kc", "changed: 1\n"));
        ck_assert(kube_creds_changed(c));
}
END_TEST

static void refused(const char *users, const char *cluster_extra, const char *want) {
        _cleanup_free_ char *content = NULL, *p = NULL, *err = NULL;
        KubeCreds *c = NULL;

        ck_assert_int_ge(asprintf(&content, KC_HEAD "clusters:\n- name: c1\n  cluster:\n"
                                  "    server: https://h:1\n%s" "users:\n- name: u1\n  user:\n%s",
                                  cluster_extra, users), 0);
        p = write_file("kc", content);
        ck_assert_int_lt(kubeconfig_load(p, &c, &err), 0);
        ck_assert_ptr_null(c);
        ck_assert_ptr_nonnull(err);
        ck_assert_msg(strstr(err, want), "error '%s' lacks '%s'", err, want);
        ck_assert_ptr_nonnull(strstr(err, p));          /* names the file */
}

START_TEST(test_refused) {
        refused("    exec:\n      command: aws\n", "", "users[u1].exec: not supported");
        refused("    auth-provider:\n      name: gcp\n", "", "auth-provider");
        refused("    username: a\n    password: b\n", "", "username");
        refused("    token: t\n", "    insecure-skip-tls-verify: true\n", "insecure-skip-tls-verify: refused");
        refused("    client-certificate: a.crt\n", "", "needs its key");
        refused("    {}\n", "", "no credentials");
        refused("    token: t\n", "    certificate-authority-data: '!!notbase64'\n", "not valid base64");
}
END_TEST

START_TEST(test_malformed) {
        static const struct {
                const char *content, *want;
        } cases[] = {
                { "current-context: [\n", "not valid YAML" },
                { "- a\n- b\n", "no top-level mapping" },
                { "kind: Config\n", "current-context: not set" },
                { "current-context: nope\ncontexts: []\n", "no entry named 'nope'" },
                { KC_HEAD "clusters:\n- name: c1\n  cluster:\n    server: http://h:80\n"
                  "users:\n- name: u1\n  user:\n    token: t\n", "only https://" },
                { KC_HEAD "clusters:\n- name: c1\n  cluster:\n    server: https://h:1?x\n"
                  "users:\n- name: u1\n  user:\n    token: t\n", "not a plain URL" },
                { KC_HEAD "clusters:\n- name: c1\n  cluster: {}\n"
                  "users:\n- name: u1\n  user:\n    token: t\n", "no server" },
                { KC_HEAD "clusters:\n- name: c1\n  cluster:\n    server: [a]\n"
                  "users:\n- name: u1\n  user:\n    token: t\n", "expected a string" },
                { KC_HEAD "clusters: {}\n", "missing or not a list" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *p = write_file("kc", cases[i].content), *err = NULL;
                KubeCreds *c = NULL;

                ck_assert_int_lt(kubeconfig_load(p, &c, &err), 0);
                ck_assert_msg(err && strstr(err, cases[i].want), "case %zu: '%s' lacks '%s'", i, err, cases[i].want);
        }
}
END_TEST

START_TEST(test_too_large) {
        _cleanup_free_ char *p = NULL, *err = NULL;
        KubeCreds *c = NULL;
        int fd;

        ck_assert_int_ge(asprintf(&p, "%s/big", dir), 0);
        fd = open(p, O_WRONLY|O_CREAT|O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(ftruncate(fd, KUBECONFIG_SIZE_MAX + 1), 0);
        close(fd);
        ck_assert_int_eq(kubeconfig_load(p, &c, &err), -EFBIG);
        ck_assert_ptr_nonnull(strstr(err, "larger than"));
}
END_TEST

START_TEST(test_in_cluster) {
        _cleanup_(kube_creds_freep) KubeCreds *c = NULL;
        _cleanup_free_ char *err = NULL, *t = NULL;

        unsetenv("KUBERNETES_SERVICE_HOST");
        setenv("KUBERNETES_SERVICE_PORT", "443", 1);
        ck_assert_int_eq(kube_creds_in_cluster(dir, &c, &err), -ENOENT);
        ck_assert_ptr_null(err);

        setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
        /* The files are needed. */
        ck_assert_int_lt(kube_creds_in_cluster(dir, &c, &err), 0);
        ck_assert_ptr_nonnull(strstr(err, "ca.crt"));
        free(write_file("ca.crt", "PEM"));
        free(write_file("token", "sa-token\n"));
        ck_assert_int_eq(kube_creds_in_cluster(dir, &c, &err), 0);
        ck_assert_str_eq(c->server, "https://[fd00::1]:443");
        ck_assert(c->in_cluster);
        ck_assert_int_eq(kube_creds_token(c, &t, &err), 0);
        ck_assert_str_eq(t, "sa-token");
        kube_creds_free(TAKE_PTR(c));

        setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
        setenv("KUBERNETES_SERVICE_PORT", "99999", 1);
        ck_assert_int_eq(kube_creds_in_cluster(dir, &c, &err), -EINVAL);
        setenv("KUBERNETES_SERVICE_PORT", "443", 1);
        setenv("KUBERNETES_SERVICE_HOST", "evil/path", 1);
        ck_assert_int_eq(kube_creds_in_cluster(dir, &c, &err), -EINVAL);
}
END_TEST

START_TEST(test_base64) {
        char *out = NULL;
        size_t n;

        ck_assert_int_eq(base64_decode("aGVsbG8=", 100, &out, &n), 0);
        ck_assert_uint_eq(n, 5);
        ck_assert_str_eq(out, "hello");
        free(out);
        ck_assert_int_eq(base64_decode("aGVs\nbG8h", 100, &out, &n), 0);
        ck_assert_str_eq(out, "hello!");
        free(out);
        ck_assert_int_eq(base64_decode("", 100, &out, &n), 0);
        ck_assert_uint_eq(n, 0);
        free(out);
        ck_assert_int_eq(base64_decode("aGVsbG8", 100, &out, &n), 0);   /* unpadded tail */
        free(out);
        ck_assert_int_eq(base64_decode("a", 100, &out, &n), -EINVAL);
        ck_assert_int_eq(base64_decode("aGVsbG8=x", 100, &out, &n), -EINVAL);
        ck_assert_int_eq(base64_decode("aGV*", 100, &out, &n), -EINVAL);
        ck_assert_int_eq(base64_decode("aGVsbG8=", 3, &out, &n), -EFBIG);
}
END_TEST

static Suite *kubeconfig_suite(void) {
        Suite *s = suite_create("kubeconfig");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_paths);
        tcase_add_test(tc, test_data_and_tokens);
        tcase_add_test(tc, test_refused);
        tcase_add_test(tc, test_malformed);
        tcase_add_test(tc, test_too_large);
        tcase_add_test(tc, test_in_cluster);
        tcase_add_test(tc, test_base64);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(kubeconfig_suite)
