/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kubeconfig.h — the credentials kgpu-clusterd talks to the API server with.
 *
 * Contract: kubeconfig_load() reads a kubeconfig file (at most KUBECONFIG_SIZE_MAX
 * bytes, libyaml) and takes its current-context: the cluster's server (https:// only)
 * and certificate-authority or certificate-authority-data; the user's
 * client-certificate(-data) with client-key(-data), token and tokenFile. Relative file
 * names are taken relative to the kubeconfig's directory, as kubectl does. A user that
 * authenticates any other way (exec, auth-provider, username/password) and
 * insecure-skip-tls-verify are refused. kube_creds_in_cluster() builds the same from
 * a pod's service account (KUBERNETES_SERVICE_HOST/_PORT, DIR/token, DIR/ca.crt);
 * -ENOENT when those variables are unset (not in a pod). Both return 0, or a negative
 * errno with a one-line reason in *ret_error (caller frees) naming the file and key.
 * Nothing here logs above debug.
 *
 * kube_creds_token() gives the bearer token to send now: the token file read afresh
 * (bound service account tokens rotate; a file that cannot be read is an error), else
 * the static token, else NULL. kube_creds_changed() says whether the kubeconfig file
 * itself is not the one loaded any more (inode, size or modification time).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "common/cleanup.h"

#define KUBECONFIG_SIZE_MAX (1024 * 1024)
#define KUBE_TOKEN_SIZE_MAX (64 * 1024)
#define KUBE_PEM_SIZE_MAX (1024 * 1024)

typedef struct KubeCreds {
        char *source;                   /* the kubeconfig's path or the service account dir */
        bool in_cluster;
        char *server;                   /* "https://host[:port][/prefix]", no trailing '/' */
        char *ca_file;                  /* NULL: ca_data, or the system's CAs if no data */
        char *ca_data;                  /* PEM, decoded from base64 */
        size_t ca_len;
        char *cert_file, *cert_data;
        size_t cert_len;
        char *key_file, *key_data;
        size_t key_len;
        char *token;                    /* a static token (kubeconfig "token") */
        char *token_file;               /* read at each request */
        /* The kubeconfig as loaded (kube_creds_changed()). */
        dev_t dev;
        ino_t ino;
        off_t size;
        struct timespec mtime;
} KubeCreds;

KubeCreds *kube_creds_free(KubeCreds *c);
DEFINE_CLEANUP_FUNC(KubeCreds, kube_creds_free);

int kubeconfig_load(const char *path, KubeCreds **ret, char **ret_error);
/* dir NULL: /var/run/secrets/kubernetes.io/serviceaccount. */
int kube_creds_in_cluster(const char *dir, KubeCreds **ret, char **ret_error);
int kube_creds_token(const KubeCreds *c, char **ret, char **ret_error);
bool kube_creds_changed(const KubeCreds *c);

/* Standard base64 (RFC 4648 with padding; white space skipped). -EINVAL on anything
 * else. *ret is NUL-terminated for convenience; *ret_len excludes the NUL. */
int base64_decode(const char *s, size_t max, char **ret, size_t *ret_len);
