/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kubeconfig.c — kubeconfig files and in-cluster service account files (kubeconfig.h).
 *
 * Contract: see kubeconfig.h. The file is read whole (bounded) and loaded as one YAML
 * document; only the few keys named below are looked at, so aliases cost nothing.
 */

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "common/util.h"
#include "daemons/cluster/kubeconfig.h"

#define SERVICE_ACCOUNT_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

KubeCreds *kube_creds_free(KubeCreds *c) {
        if (!c)
                return NULL;
        free(c->source);
        free(c->server);
        free(c->ca_file);
        free(c->ca_data);
        free(c->cert_file);
        free(c->cert_data);
        free(c->key_file);
        if (c->key_data) {
                explicit_bzero(c->key_data, c->key_len);
                free(c->key_data);
        }
        if (c->token) {
                explicit_bzero(c->token, strlen(c->token));
                free(c->token);
        }
        free(c->token_file);
        free(c);
        return NULL;
}

_printf_(3, 4)
static int fail(char **ret_error, int r, const char *fmt, ...) {
        va_list ap;
        char *s = NULL;

        va_start(ap, fmt);
        if (vasprintf(&s, fmt, ap) < 0)
                s = NULL;
        va_end(ap);
        if (ret_error) {
                free(*ret_error);
                *ret_error = s;
        } else
                free(s);
        return r;
}

int base64_decode(const char *s, size_t max, char **ret, size_t *ret_len) {
        _cleanup_free_ char *out = NULL;
        size_t n = 0, pad = 0, len = strlen(s);
        uint32_t acc = 0;
        unsigned bits = 0;

        if (len / 4 * 3 > max + 3)
                return -EFBIG;
        out = malloc(len / 4 * 3 + 4);
        if (!out)
                return -ENOMEM;
        for (const char *p = s; *p; p++) {
                int v;

                if (strchr(" \t\r\n", *p))
                        continue;
                if (*p == '=') {
                        pad++;
                        continue;
                }
                if (pad > 0)
                        return -EINVAL;         /* data after padding */
                if (*p >= 'A' && *p <= 'Z')
                        v = *p - 'A';
                else if (*p >= 'a' && *p <= 'z')
                        v = *p - 'a' + 26;
                else if (*p >= '0' && *p <= '9')
                        v = *p - '0' + 52;
                else if (*p == '+')
                        v = 62;
                else if (*p == '/')
                        v = 63;
                else
                        return -EINVAL;
                acc = (acc << 6) | (uint32_t) v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        out[n++] = (char) ((acc >> bits) & 0xff);
                }
        }
        /* 6 bits left over never make a byte; padding must fill the last quantum. */
        if (bits >= 6 || pad > 2 || (pad > 0 && (bits / 2) != pad))
                return -EINVAL;
        if (n > max)
                return -EFBIG;
        out[n] = '\0';
        *ret_len = n;
        *ret = TAKE_PTR(out);
        return 0;
}

static int read_file_bounded(const char *path, size_t max, char **ret, size_t *ret_len, struct stat *ret_st) {
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *buf = NULL;
        struct stat st;
        size_t n = 0;
        int r;

        fd = open(path, O_RDONLY|O_CLOEXEC|O_NOCTTY);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EBADFD;
        r = read_fd_bounded(fd, max, &buf, &n);
        if (r < 0)
                return r;
        if (ret_len)
                *ret_len = n;
        if (ret_st)
                *ret_st = st;
        *ret = TAKE_PTR(buf);
        return 0;
}

/* --- the YAML document --- */

typedef struct Doc {
        yaml_document_t doc;
        const char *path;
        char **error;
} Doc;

static yaml_node_t *node(Doc *d, int index) {
        return yaml_document_get_node(&d->doc, index);
}

static int scalar(Doc *d, yaml_node_t *n, const char *key, const char **ret) {
        if (!n || n->type != YAML_SCALAR_NODE)
                return fail(d->error, -EINVAL, "%s:%zu: %s: expected a string", d->path,
                            n ? n->start_mark.line + 1 : 0, key);
        if (strlen((const char *) n->data.scalar.value) != n->data.scalar.length)
                return fail(d->error, -EINVAL, "%s:%zu: %s: NUL byte in value", d->path,
                            n->start_mark.line + 1, key);
        *ret = (const char *) n->data.scalar.value;
        return 0;
}

/* The value of `key` in mapping m, NULL when absent (or m is not a mapping). */
static yaml_node_t *map_get(Doc *d, yaml_node_t *m, const char *key) {
        if (!m || m->type != YAML_MAPPING_NODE)
                return NULL;
        for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
                yaml_node_t *k = node(d, p->key);

                if (k && k->type == YAML_SCALAR_NODE && streq((const char *) k->data.scalar.value, key))
                        return node(d, p->value);
        }
        return NULL;
}

/* An optional string: NULL when absent or empty. */
static int map_string(Doc *d, yaml_node_t *m, const char *key, const char **ret) {
        yaml_node_t *v = map_get(d, m, key);
        const char *s = NULL;
        int r;

        if (!v || (v->type == YAML_SCALAR_NODE && (v->data.scalar.length == 0 ||
                                                   streq((const char *) v->data.scalar.value, "null") ||
                                                   streq((const char *) v->data.scalar.value, "~")))) {
                *ret = NULL;
                return 0;
        }
        r = scalar(d, v, key, &s);
        if (r < 0)
                return r;
        *ret = s;
        return 0;
}

/* In the sequence `list` of {name: NAME, field: {...}}: the `field` mapping of NAME. */
static int named_find(Doc *d, const char *list, const char *field, const char *name, yaml_node_t **ret) {
        yaml_node_t *root = node(d, 1), *seq = map_get(d, root, list);

        if (!seq || seq->type != YAML_SEQUENCE_NODE)
                return fail(d->error, -ENOENT, "%s: %s: missing or not a list", d->path, list);
        for (yaml_node_item_t *i = seq->data.sequence.items.start; i < seq->data.sequence.items.top; i++) {
                yaml_node_t *e = node(d, *i), *f;
                const char *n = NULL;

                if (map_string(d, e, "name", &n) < 0 || !streq(n, name))
                        continue;
                f = map_get(d, e, field);
                if (!f || f->type != YAML_MAPPING_NODE)
                        return fail(d->error, -EINVAL, "%s:%zu: %s[%s].%s: missing or not a mapping",
                                    d->path, e->start_mark.line + 1, list, name, field);
                *ret = f;
                return 0;
        }
        return fail(d->error, -ENOENT, "%s: %s: no entry named '%s'", d->path, list, name);
}

/* A file name from the kubeconfig, relative to its directory. */
static int resolve(const char *dir, const char *name, char **ret) {
        char *s = NULL;

        if (name[0] == '/' || !dir)
                s = strdup(name);
        else if (asprintf(&s, "%s/%s", dir, name) < 0)
                s = NULL;
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

static int data_or_file(Doc *d, yaml_node_t *m, const char *dir, const char *file_key, const char *data_key,
                        char **ret_file, char **ret_data, size_t *ret_len) {
        const char *file, *data;
        int r;

        r = map_string(d, m, file_key, &file);
        if (r >= 0)
                r = map_string(d, m, data_key, &data);
        if (r < 0)
                return r;
        if (data) {
                r = base64_decode(data, KUBE_PEM_SIZE_MAX, ret_data, ret_len);
                if (r < 0)
                        return fail(d->error, r, "%s: %s: not valid base64 (or larger than %d bytes)",
                                    d->path, data_key, KUBE_PEM_SIZE_MAX);
                return 0;       /* the data wins over the file, as in kubectl */
        }
        if (file)
                return resolve(dir, file, ret_file);
        return 0;
}

static int server_check(const char *where, const char *server, char **ret, char **ret_error) {
        char *s;
        size_t n;

        if (isempty(server))
                return fail(ret_error, -EINVAL, "%s: no server", where);
        if (!startswith(server, "https://") || strlen(server) <= strlen("https://"))
                return fail(ret_error, -EINVAL,
                            "%s: server '%s': only https:// API servers are supported", where, server);
        if (strlen(server) > 2048 || strpbrk(server, " \t\r\n?#"))
                return fail(ret_error, -EINVAL, "%s: server '%s': not a plain URL", where, server);
        s = strdup(server);
        if (!s)
                return -ENOMEM;
        n = strlen(s);
        while (n > strlen("https://") && s[n - 1] == '/')
                s[--n] = '\0';
        *ret = s;
        return 0;
}

int kubeconfig_load(const char *path, KubeCreds **ret, char **ret_error) {
        _cleanup_(kube_creds_freep) KubeCreds *c = NULL;
        _cleanup_free_ char *buf = NULL, *dircopy = NULL;
        yaml_parser_t parser;
        Doc d = { .path = path, .error = ret_error };
        yaml_node_t *root, *cluster, *user, *context;
        const char *ctx, *cluster_name, *user_name, *server, *v, *dir;
        struct stat st;
        size_t len;
        int r;

        r = read_file_bounded(path, KUBECONFIG_SIZE_MAX, &buf, &len, &st);
        if (r == -EFBIG)
                return fail(ret_error, r, "%s: larger than %d bytes", path, KUBECONFIG_SIZE_MAX);
        if (r < 0)
                return fail(ret_error, r, "%s: cannot be read: %s", path, strerror(-r));

        if (!yaml_parser_initialize(&parser))
                return -ENOMEM;
        yaml_parser_set_input_string(&parser, (const unsigned char *) buf, len);
        if (!yaml_parser_load(&parser, &d.doc)) {
                r = fail(ret_error, -EINVAL, "%s:%zu: not valid YAML: %s", path,
                         parser.problem_mark.line + 1, parser.problem ?: "?");
                yaml_parser_delete(&parser);
                return r;
        }
        yaml_parser_delete(&parser);

        c = calloc(1, sizeof(KubeCreds));
        if (!c) {
                r = -ENOMEM;
                goto out;
        }
        c->source = strdup(path);
        dircopy = strdup(path);
        if (!c->source || !dircopy) {
                r = -ENOMEM;
                goto out;
        }
        dir = dirname(dircopy);
        c->dev = st.st_dev;
        c->ino = st.st_ino;
        c->size = st.st_size;
        c->mtime = st.st_mtim;

        root = node(&d, 1);
        if (!root || root->type != YAML_MAPPING_NODE) {
                r = fail(ret_error, -EINVAL, "%s: not a kubeconfig (no top-level mapping)", path);
                goto out;
        }
        r = map_string(&d, root, "current-context", &ctx);
        if (r < 0)
                goto out;
        if (!ctx) {
                r = fail(ret_error, -EINVAL, "%s: current-context: not set", path);
                goto out;
        }
        r = named_find(&d, "contexts", "context", ctx, &context);
        if (r < 0)
                goto out;
        r = map_string(&d, context, "cluster", &cluster_name);
        if (r >= 0)
                r = map_string(&d, context, "user", &user_name);
        if (r < 0)
                goto out;
        if (!cluster_name || !user_name) {
                r = fail(ret_error, -EINVAL, "%s: contexts[%s]: needs a cluster and a user", path, ctx);
                goto out;
        }
        r = named_find(&d, "clusters", "cluster", cluster_name, &cluster);
        if (r >= 0)
                r = named_find(&d, "users", "user", user_name, &user);
        if (r < 0)
                goto out;

        /* The cluster. */
        r = map_string(&d, cluster, "insecure-skip-tls-verify", &v);
        if (r < 0)
                goto out;
        if (v && !streq(v, "false")) {
                r = fail(ret_error, -EPERM, "%s: clusters[%s].insecure-skip-tls-verify: refused, "
                         "the API server's certificate is always verified", path, cluster_name);
                goto out;
        }
        r = map_string(&d, cluster, "server", &server);
        if (r < 0)
                goto out;
        {
                _cleanup_free_ char *where = NULL;

                if (asprintf(&where, "%s: clusters[%s].server", path, cluster_name) < 0) {
                        r = -ENOMEM;
                        goto out;
                }
                r = server_check(where, server, &c->server, ret_error);
                if (r < 0)
                        goto out;
        }
        r = data_or_file(&d, cluster, dir, "certificate-authority", "certificate-authority-data",
                         &c->ca_file, &c->ca_data, &c->ca_len);
        if (r < 0)
                goto out;

        /* The user: only what a node service can hold in files. */
        static const char *const refused[] = { "exec", "auth-provider", "username", "password" };
        for (size_t i = 0; i < ELEMENTSOF(refused); i++)
                if (map_get(&d, user, refused[i])) {
                        r = fail(ret_error, -EOPNOTSUPP, "%s: users[%s].%s: not supported; use a client "
                                 "certificate, a token or a tokenFile", path, user_name, refused[i]);
                        goto out;
                }
        r = data_or_file(&d, user, dir, "client-certificate", "client-certificate-data",
                         &c->cert_file, &c->cert_data, &c->cert_len);
        if (r >= 0)
                r = data_or_file(&d, user, dir, "client-key", "client-key-data",
                                 &c->key_file, &c->key_data, &c->key_len);
        if (r < 0)
                goto out;
        if (!!(c->cert_file || c->cert_data) != !!(c->key_file || c->key_data)) {
                r = fail(ret_error, -EINVAL, "%s: users[%s]: a client certificate needs its key and "
                         "the other way round", path, user_name);
                goto out;
        }
        r = map_string(&d, user, "token", &v);
        if (r < 0)
                goto out;
        if (v) {
                if (strlen(v) > KUBE_TOKEN_SIZE_MAX || strpbrk(v, "\r\n")) {
                        r = fail(ret_error, -EINVAL, "%s: users[%s].token: not a usable token", path, user_name);
                        goto out;
                }
                c->token = strdup(v);
                if (!c->token) {
                        r = -ENOMEM;
                        goto out;
                }
        }
        r = map_string(&d, user, "tokenFile", &v);
        if (r < 0)
                goto out;
        if (v) {
                r = resolve(dir, v, &c->token_file);
                if (r < 0)
                        goto out;
        }
        if (!c->cert_file && !c->cert_data && !c->token && !c->token_file) {
                r = fail(ret_error, -EINVAL, "%s: users[%s]: no credentials (client-certificate and "
                         "client-key, token or tokenFile)", path, user_name);
                goto out;
        }
        *ret = TAKE_PTR(c);
        r = 0;
out:
        yaml_document_delete(&d.doc);
        return r;
}

int kube_creds_in_cluster(const char *dir, KubeCreds **ret, char **ret_error) {
        _cleanup_(kube_creds_freep) KubeCreds *c = NULL;
        _cleanup_free_ char *url = NULL;
        const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
        uint32_t p;
        int r;

        if (isempty(host) || isempty(port))
                return -ENOENT;
        if (!dir)
                dir = SERVICE_ACCOUNT_DIR;
        if (safe_atou32(port, &p) < 0 || p == 0 || p > 65535)
                return fail(ret_error, -EINVAL, "KUBERNETES_SERVICE_PORT=%s: not a port", port);
        if (strlen(host) > 255 || strpbrk(host, "/?#@ \t\r\n[]"))
                return fail(ret_error, -EINVAL, "KUBERNETES_SERVICE_HOST=%s: not a host", host);
        /* An IPv6 address goes in brackets. */
        if (asprintf(&url, strchr(host, ':') ? "https://[%s]:%u" : "https://%s:%u", host, p) < 0)
                return -ENOMEM;

        c = calloc(1, sizeof(KubeCreds));
        if (!c)
                return -ENOMEM;
        c->in_cluster = true;
        c->source = strdup(dir);
        c->server = TAKE_PTR(url);
        if (asprintf(&c->ca_file, "%s/ca.crt", dir) < 0)
                c->ca_file = NULL;
        if (asprintf(&c->token_file, "%s/token", dir) < 0)
                c->token_file = NULL;
        if (!c->source || !c->ca_file || !c->token_file)
                return -ENOMEM;
        if (access(c->ca_file, R_OK) < 0)
                return fail(ret_error, -errno, "%s: cannot be read: %m", c->ca_file);
        {
                _cleanup_free_ char *token = NULL;

                r = kube_creds_token(c, &token, ret_error);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(c);
        return 0;
}

int kube_creds_token(const KubeCreds *c, char **ret, char **ret_error) {
        _cleanup_free_ char *buf = NULL;
        size_t len, n;
        int r;

        if (c->token_file) {
                r = read_file_bounded(c->token_file, KUBE_TOKEN_SIZE_MAX, &buf, &len, NULL);
                if (r < 0)
                        return fail(ret_error, r, "token file %s cannot be read: %s", c->token_file,
                                    r == -EFBIG ? "too large" : strerror(-r));
                if (strlen(buf) != len)
                        return fail(ret_error, -EINVAL, "token file %s: NUL byte", c->token_file);
                /* Surrounding white space is dropped (as client-go does); none may stay inside. */
                n = len;
                while (n > 0 && strchr(" \t\r\n", buf[n - 1]))
                        buf[--n] = '\0';
                char *s = buf + strspn(buf, " \t\r\n");
                if (isempty(s) || strpbrk(s, " \t\r\n"))
                        return fail(ret_error, -EINVAL, "token file %s: empty or not one token", c->token_file);
                memmove(buf, s, strlen(s) + 1);
                *ret = TAKE_PTR(buf);
                return 0;
        }
        if (c->token) {
                char *s = strdup(c->token);
                if (!s)
                        return -ENOMEM;
                *ret = s;
                return 0;
        }
        *ret = NULL;
        return 0;
}

bool kube_creds_changed(const KubeCreds *c) {
        struct stat st;

        if (c->in_cluster)
                return false;
        if (stat(c->source, &st) < 0)
                return false;           /* gone for now: keep what we have */
        return st.st_dev != c->dev || st.st_ino != c->ino || st.st_size != c->size ||
               st.st_mtim.tv_sec != c->mtime.tv_sec || st.st_mtim.tv_nsec != c->mtime.tv_nsec;
}
