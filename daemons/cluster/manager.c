/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * manager.c — kgpu-clusterd's Manager: credentials, reflectors, stores (manager.h).
 *
 * Contract: see manager.h. The Node reflector keeps label_value, the Pod reflector the
 * PodStore; any change arms the broker link's short defer (broker-link.c) and updates
 * io.kgpu.Cluster1 (cluster-dbus.c).
 */

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/bus-names.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/cluster/broker-link.h"
#include "daemons/cluster/cluster-dbus.h"
#include "daemons/cluster/manager.h"

int manager_node_name(const Config *c, char **ret) {
        char host[256] = {};
        const char *name = c->cluster_node_name;
        char *s;
        size_t n;

        if (isempty(name)) {
                if (gethostname(host, sizeof(host) - 1) < 0)
                        return -errno;
                for (char *p = host; *p; p++)
                        *p = (char) tolower((unsigned char) *p);
                name = host;
        }
        n = strlen(name);
        if (n == 0 || n > 253)
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                char ch = name[i];

                if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.'))
                        return -EINVAL;
        }
        /* Each dot-separated label starts and ends with a letter or digit. */
        if (strchr("-.", name[0]) || strchr("-.", name[n - 1]) || strstr(name, "..") || strstr(name, ".-") ||
            strstr(name, "-."))
                return -EINVAL;
        s = strdup(name);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

static Manager *manager_of(Reflector *r) {
        return r->userdata;
}

/* --- the Node --- */

static int node_set(Manager *m, bool found, char *value) {
        bool changed = found != m->node_found || !streq_ptr(value, m->label_value);

        if (changed && found)
                log_info("Node %s: label %s is %s%s%s.", m->node_name, m->config->cluster_config_label,
                         value ? "'" : "", value ?: "unset", value ? "'" : "");
        else if (changed)
                log_warning("Node %s not found in the API server; taking its label %s as unset.",
                            m->node_name, m->config->cluster_config_label);
        free(m->label_value);
        m->label_value = value;
        m->node_found = found;
        if (changed)
                broker_link_schedule(m);
        return changed;
}

static int node_read(Manager *m, json_object *node, char **ret_value, const char **ret_reason) {
        const char *name;
        int r;

        r = kube_node_label(node, m->config->cluster_config_label, &name, ret_value, ret_reason);
        if (r < 0)
                return r;
        if (!streq(name, m->node_name)) {
                free(*ret_value);
                *ret_value = NULL;
                if (ret_reason)
                        *ret_reason = "a Node of another name (the field selector was not applied)";
                return -EBADMSG;
        }
        return 0;
}

static int node_replace(Reflector *r, json_object *items, const char **ret_reason) {
        Manager *m = manager_of(r);
        size_t n = items ? json_object_array_length(items) : 0;
        char *value = NULL;
        int k;

        if (n > 1) {
                *ret_reason = "more than one Node for one name";
                return -EBADMSG;
        }
        if (n == 0)
                return node_set(m, false, NULL);
        k = node_read(m, json_object_array_get_idx(items, 0), &value, ret_reason);
        if (k < 0)
                return k;
        return node_set(m, true, value);
}

static int node_apply(Reflector *r, KubeWatchType type, json_object *obj, const char **ret_reason) {
        Manager *m = manager_of(r);
        char *value = NULL;
        int k;

        k = node_read(m, obj, &value, ret_reason);
        if (k < 0)
                return k;
        if (type == KUBE_WATCH_DELETED) {
                free(value);
                return node_set(m, false, NULL);
        }
        return node_set(m, true, value);
}

/* --- the pods --- */

static int pods_replace(Reflector *r, json_object *items, const char **ret_reason) {
        Manager *m = manager_of(r);
        int k;

        k = pod_store_replace(&m->pod_store, items, ret_reason);
        if (k > 0) {
                log_info("%zu pending pod(s) with GAS annotations on this node.", m->pod_store.n_pods);
                broker_link_schedule(m);
        }
        return k;
}

static int pods_apply(Reflector *r, KubeWatchType type, json_object *obj, const char **ret_reason) {
        Manager *m = manager_of(r);
        int k;

        k = pod_store_apply(&m->pod_store, type, obj, ret_reason);
        if (k > 0) {
                log_debug("%zu pending pod(s) with GAS annotations on this node.", m->pod_store.n_pods);
                broker_link_schedule(m);
        }
        return k;
}

/* --- both --- */

static void reflector_changed(Reflector *r) {
        manager_properties_changed(manager_of(r));
}

static void manager_refresh_creds(Manager *m) {
        _cleanup_(kube_creds_freep) KubeCreds *c = NULL;
        _cleanup_free_ char *error = NULL;
        int r;

        if (!m->creds || m->creds->in_cluster || !kube_creds_changed(m->creds))
                return;
        r = kubeconfig_load(m->creds->source, &c, &error);
        if (r < 0) {
                log_error("Changed kubeconfig refused, keeping the one loaded before: %s", error ?: strerror(-r));
                /* Remember this version so the same error is not logged at every request. */
                struct stat st;
                if (stat(m->creds->source, &st) >= 0) {
                        m->creds->dev = st.st_dev;
                        m->creds->ino = st.st_ino;
                        m->creds->size = st.st_size;
                        m->creds->mtime = st.st_mtim;
                }
                return;
        }
        if (!streq(c->server, m->creds->server))
                log_notice("kubeconfig %s changed: server now %s.", c->source, c->server);
        else
                log_info("kubeconfig %s changed, loaded again.", c->source);
        kube_creds_free(m->creds);
        m->creds = TAKE_PTR(c);
        kube_http_set_creds(m->http, m->creds);
        manager_properties_changed(m);
}

static int reflector_token(Reflector *r, char **ret, char **ret_error) {
        Manager *m = manager_of(r);

        manager_refresh_creds(m);
        return kube_creds_token(m->creds, ret, ret_error);
}

static const ReflectorOps node_ops = {
        .kind = "Node",
        .replace = node_replace,
        .apply = node_apply,
        .changed = reflector_changed,
        .token = reflector_token,
};

static const ReflectorOps pod_ops = {
        .kind = "Pod",
        .replace = pods_replace,
        .apply = pods_apply,
        .changed = reflector_changed,
        .token = reflector_token,
};

int manager_new(Config *config, Manager **ret) {
        Manager *m;

        m = calloc(1, sizeof(Manager));
        if (!m) {
                config_free(config);
                return log_oom();
        }
        m->config = config;
        *ret = m;
        return 0;
}

static void snapshot_done(ClusterSnapshot *s) {
        free(s->last_error);
        free(s->config_label_value);
        free(s->node_rv);
        free(s->pods_rv);
        free(s->broker_error);
        free(s->server);
        *s = (ClusterSnapshot) {};
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;
        reflector_done(&m->node);
        reflector_done(&m->pods);
        broker_link_done(m);
        kube_http_free(m->http);
        kube_creds_free(m->creds);
        pod_store_done(&m->pod_store);
        free(m->label_value);
        free(m->node_name);
        snapshot_done(&m->snapshot);
        sd_bus_flush_close_unref(m->bus);
        sd_event_unref(m->event);
        config_free(m->config);
        free(m);
        return NULL;
}

/* The credentials: the kubeconfig when one is named, else a pod's service account. */
static int manager_load_creds(const Config *c, KubeCreds **ret) {
        _cleanup_free_ char *error = NULL;
        int r;

        if (!isempty(c->cluster_kubeconfig)) {
                r = kubeconfig_load(c->cluster_kubeconfig, ret, &error);
                if (r < 0)
                        return log_error_errno(r, "Invalid kubeconfig: %s", error ?: strerror(-r));
                return 0;
        }
        r = kube_creds_in_cluster(getenv("KGPU_SERVICEACCOUNT_DIR"), ret, &error);
        if (r == -ENOENT && !error) {
                log_notice("No cluster.kubeconfig configured and not running in a pod "
                           "(KUBERNETES_SERVICE_HOST unset): nothing to watch, exiting.");
                return MANAGER_NOT_CONFIGURED;
        }
        if (r < 0)
                return log_error_errno(r, "In-cluster service account unusable: %s", error ?: strerror(-r));
        return 0;
}

static int manager_start_reflectors(Manager *m) {
        _cleanup_free_ char *node_sel = NULL, *pod_sel = NULL;
        int r;

        if (asprintf(&node_sel, "metadata.name=%s", m->node_name) < 0 ||
            asprintf(&pod_sel, "spec.nodeName=%s", m->node_name) < 0)
                return log_oom();
        r = reflector_init(&m->node, &node_ops, m, m->event, m->http, "/api/v1/nodes", node_sel,
                           m->config->cluster_request_timeout_sec, m->config->cluster_min_watch_timeout_sec);
        if (r >= 0)
                r = reflector_init(&m->pods, &pod_ops, m, m->event, m->http, "/api/v1/pods", pod_sel,
                                   m->config->cluster_request_timeout_sec, m->config->cluster_min_watch_timeout_sec);
        if (r < 0)
                return log_oom();
        reflector_start(&m->node);
        reflector_start(&m->pods);
        return 0;
}

int manager_start(Manager *m) {
        int r;

        m->start_time = now_usec(CLOCK_REALTIME);
        r = manager_node_name(m->config, &m->node_name);
        if (r < 0)
                return log_error_errno(r, "Invalid node name '%s' (cluster.nodeName, NODE_NAME or the host "
                                       "name): a Kubernetes node name is a lower case DNS subdomain.",
                                       m->config->cluster_node_name ?: "(host name)");
        r = manager_load_creds(m->config, &m->creds);
        if (r != 0)
                return r;

        r = sd_event_default(&m->event);
        if (r < 0)
                return log_error_errno(r, "Failed to get the event loop: %m");
        r = kube_http_new(m->event, &m->http);
        if (r < 0)
                return log_error_errno(r, "Failed to set up libcurl: %m");
        kube_http_set_creds(m->http, m->creds);

        r = bus_open_attached(m->event, "kgpu-clusterd", &m->bus);
        if (r < 0)
                return r;
        r = cluster_dbus_register(m);
        if (r < 0)
                return log_error_errno(r, "Failed to export %s: %m", KGPU_CLUSTER_PATH);
        r = broker_link_start(m);
        if (r < 0)
                return log_error_errno(r, "Failed to follow %s: %m", KGPU_BROKER_BUS_NAME);
        r = sd_bus_request_name(m->bus, KGPU_CLUSTER_BUS_NAME, 0);
        if (r < 0)
                return log_error_errno(r, "Failed to take the bus name %s: %m", KGPU_CLUSTER_BUS_NAME);

        log_info("Watching node %s and its pods at %s (%s, %s).", m->node_name, m->creds->server,
                 m->creds->in_cluster ? "in-cluster service account" : m->creds->source,
                 m->creds->cert_file || m->creds->cert_data ? "client certificate" :
                 m->creds->token_file ? "token file" : "token");
        return manager_start_reflectors(m);
}

void manager_reload(Manager *m, Config *config) {
        _cleanup_(kube_creds_freep) KubeCreds *c = NULL;
        _cleanup_free_ char *name = NULL;
        int r;

        r = manager_node_name(config, &name);
        if (r < 0) {
                log_error("Reloaded configuration names an invalid node, keeping the old one.");
                config_free(config);
                return;
        }
        r = manager_load_creds(config, &c);
        if (r != 0) {
                log_error("Reloaded configuration has no usable credentials, keeping the old ones.");
                config_free(config);
                return;
        }
        reflector_done(&m->node);
        reflector_done(&m->pods);
        kube_creds_free(m->creds);
        m->creds = TAKE_PTR(c);
        kube_http_set_creds(m->http, m->creds);
        if (!streq(name, m->node_name) || !streq(config->cluster_config_label, m->config->cluster_config_label)) {
                /* Another node or another label: what we knew is not about it. */
                free(m->label_value);
                m->label_value = NULL;
                m->node_found = false;
                pod_store_done(&m->pod_store);
        }
        free(m->node_name);
        m->node_name = TAKE_PTR(name);
        config_free(m->config);
        m->config = config;
        log_info("Configuration reloaded: node %s at %s.", m->node_name, m->creds->server);
        (void) manager_start_reflectors(m);
        manager_properties_changed(m);
}
