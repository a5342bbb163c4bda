/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kube-json.c — pure readers of the API server's JSON objects (see kube-json.h).
 *
 * Contract: see kube-json.h. Every field is looked up by name and type-checked; a
 * string is accepted only when json-c's length equals its C length (no embedded NUL).
 */

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/cluster/kube-json.h"

#define FAIL(why)                                       \
        ({                                              \
                if (ret_reason)                         \
                        *ret_reason = (why);            \
                -EBADMSG;                               \
        })

int kube_json_parse(const char *buf, size_t len, json_object **ret) {
        json_tokener *tok;
        json_object *o;
        size_t used;

        if (len > INT_MAX)
                return -EFBIG;
        tok = json_tokener_new_ex(KUBE_JSON_DEPTH_MAX);
        if (!tok)
                return -ENOMEM;
        o = json_tokener_parse_ex(tok, buf, (int) len);
        if (!o || json_tokener_get_error(tok) != json_tokener_success) {
                /* json_tokener_continue: the buffer ended inside a value. */
                json_object_put(o);
                json_tokener_free(tok);
                return -EBADMSG;
        }
        used = tok->char_offset;
        json_tokener_free(tok);
        for (; used < len; used++)
                if (!strchr(" \t\r\n", buf[used]) || buf[used] == '\0') {
                        json_object_put(o);
                        return -EBADMSG;
                }
        *ret = o;
        return 0;
}

/* A string member: -ENOENT when absent (or JSON null), -EBADMSG when not a clean string. */
static int get_string(json_object *o, const char *key, const char **ret) {
        json_object *v;
        const char *s;

        if (!json_object_is_type(o, json_type_object))
                return -EBADMSG;
        if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
                return -ENOENT;
        if (!json_object_is_type(v, json_type_string))
                return -EBADMSG;
        s = json_object_get_string(v);
        if ((size_t) json_object_get_string_len(v) != strlen(s))
                return -EBADMSG;
        *ret = s;
        return 0;
}

/* An object member: -ENOENT when absent or null, -EBADMSG when not an object. */
static int get_object(json_object *o, const char *key, json_object **ret) {
        json_object *v;

        if (!json_object_is_type(o, json_type_object))
                return -EBADMSG;
        if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
                return -ENOENT;
        if (!json_object_is_type(v, json_type_object))
                return -EBADMSG;
        *ret = v;
        return 0;
}

void kube_status_done(KubeStatus *s) {
        s->reason = mfree(s->reason);
        s->message = mfree(s->message);
}

int kube_status_read(json_object *o, KubeStatus *ret, const char **ret_reason) {
        const char *kind, *reason = "", *message = "";
        json_object *v;
        int64_t code = 0;
        int r;

        if (get_string(o, "kind", &kind) < 0 || !streq(kind, "Status"))
                return FAIL("not a Status object");
        if (json_object_object_get_ex(o, "code", &v) && !json_object_is_type(v, json_type_null)) {
                if (!json_object_is_type(v, json_type_int))
                        return FAIL("Status code is not an integer");
                code = json_object_get_int64(v);
                if (code < 0 || code > 999)
                        return FAIL("Status code out of range");
        }
        r = get_string(o, "reason", &reason);
        if (r == -EBADMSG)
                return FAIL("Status reason is not a string");
        r = get_string(o, "message", &message);
        if (r == -EBADMSG)
                return FAIL("Status message is not a string");

        char *a = strndup(reason, KUBE_STRING_MAX), *b = strndup(message, KUBE_STRING_MAX);
        if (!a || !b) {
                free(a);
                free(b);
                return -ENOMEM;
        }
        *ret = (KubeStatus) { .code = (int) code, .reason = a, .message = b };
        return 0;
}

int kube_object_rv(json_object *o, const char **ret_rv, const char **ret_reason) {
        json_object *meta;
        const char *rv;

        if (get_object(o, "metadata", &meta) < 0)
                return FAIL("no metadata object");
        if (get_string(meta, "resourceVersion", &rv) < 0 || isempty(rv))
                return FAIL("no metadata.resourceVersion");
        if (strlen(rv) > 256)
                return FAIL("metadata.resourceVersion longer than 256 bytes");
        *ret_rv = rv;
        return 0;
}

int kube_list_read(json_object *o, const char **ret_rv, json_object **ret_items, const char **ret_reason) {
        json_object *items = NULL;
        const char *kind, *rv;
        size_t n;
        int r;

        if (!json_object_is_type(o, json_type_object))
                return FAIL("not a JSON object");
        if (get_string(o, "kind", &kind) < 0 || (n = strlen(kind)) < 4 || !streq(kind + n - 4, "List"))
                return FAIL("not a List object");
        r = kube_object_rv(o, &rv, ret_reason);
        if (r < 0)
                return r;
        /* An empty list may come with "items": null. */
        if (json_object_object_get_ex(o, "items", &items) && !json_object_is_type(items, json_type_null)) {
                if (!json_object_is_type(items, json_type_array))
                        return FAIL("List items is not an array");
        } else
                items = NULL;
        *ret_rv = rv;
        *ret_items = items;
        return 0;
}

int kube_node_label(json_object *node, const char *label, const char **ret_name, char **ret_value,
                    const char **ret_reason) {
        json_object *meta, *labels;
        const char *name, *value = NULL;
        char *copy = NULL;
        int r;

        if (get_object(node, "metadata", &meta) < 0)
                return FAIL("Node without metadata");
        if (get_string(meta, "name", &name) < 0 || isempty(name))
                return FAIL("Node without metadata.name");
        r = get_object(meta, "labels", &labels);
        if (r == -EBADMSG)
                return FAIL("Node metadata.labels is not an object");
        if (r >= 0) {
                r = get_string(labels, label, &value);
                if (r == -EBADMSG)
                        return FAIL("Node label value is not a string");
                if (r < 0)
                        value = NULL;
        }
        /* Label values are at most 63 characters in Kubernetes; a longer one is refused
         * here rather than passed on. */
        if (value && strlen(value) > 63)
                return FAIL("Node label value longer than 63 characters");
        if (value) {
                copy = strdup(value);
                if (!copy)
                        return -ENOMEM;
        }
        *ret_name = name;
        *ret_value = copy;
        return 0;
}

static void gas_container_done(GasContainer *c) {
        for (size_t i = 0; i < c->n_limits; i++)
                free(c->names[i]);
        free(c->names);
        free(c->counts);
}

GasPod *gas_pod_free(GasPod *p) {
        if (!p)
                return NULL;
        free(p->uid);
        free(p->namespace);
        free(p->name);
        free(p->ts);
        free(p->cards);
        free(p->tiles);
        for (size_t i = 0; i < p->n_containers; i++)
                gas_container_done(&p->containers[i]);
        free(p->containers);
        free(p);
        return NULL;
}

bool gas_pod_equal(const GasPod *a, const GasPod *b) {
        if (!streq(a->uid, b->uid) || !streq(a->namespace, b->namespace) || !streq(a->name, b->name) ||
            !streq(a->ts, b->ts) || !streq(a->cards, b->cards) || !streq(a->tiles, b->tiles) ||
            a->n_containers != b->n_containers)
                return false;
        for (size_t i = 0; i < a->n_containers; i++) {
                const GasContainer *x = &a->containers[i], *y = &b->containers[i];

                if (x->n_limits != y->n_limits)
                        return false;
                for (size_t j = 0; j < x->n_limits; j++)
                        if (!streq(x->names[j], y->names[j]) || x->counts[j] != y->counts[j])
                                return false;
        }
        return true;
}

int kube_quantity_integer(const char *s, int64_t *ret) {
        static const struct {
                const char *suffix;
                uint64_t factor;
        } suffixes[] = {
                { "",   1ULL },
                { "k",  1000ULL },
                { "M",  1000ULL * 1000 },
                { "G",  1000ULL * 1000 * 1000 },
                { "T",  1000ULL * 1000 * 1000 * 1000 },
                { "P",  1000ULL * 1000 * 1000 * 1000 * 1000 },
                { "E",  1000ULL * 1000 * 1000 * 1000 * 1000 * 1000 },
                { "Ki", 1ULL << 10 },
                { "Mi", 1ULL << 20 },
                { "Gi", 1ULL << 30 },
                { "Ti", 1ULL << 40 },
                { "Pi", 1ULL << 50 },
                { "Ei", 1ULL << 60 },
        };
        uint64_t v = 0;
        const char *p = s;

        if (!s || !(*s >= '0' && *s <= '9'))
                return -EINVAL;
        for (; *p >= '0' && *p <= '9'; p++) {
                if (v > (uint64_t) INT64_MAX / 10)
                        return -ERANGE;
                v = v * 10 + (uint64_t) (*p - '0');
                if (v > (uint64_t) INT64_MAX)
                        return -ERANGE;
        }
        for (size_t i = 0; i < ELEMENTSOF(suffixes); i++)
                if (streq(p, suffixes[i].suffix)) {
                        if (v != 0 && v > (uint64_t) INT64_MAX / suffixes[i].factor)
                                return -ERANGE;
                        *ret = (int64_t) (v * suffixes[i].factor);
                        return 0;
                }
        return -EINVAL;
}

int kube_pod_uid(json_object *pod, const char **ret_uid, const char **ret_reason) {
        json_object *meta;
        const char *uid;

        if (get_object(pod, "metadata", &meta) < 0)
                return FAIL("Pod without metadata");
        if (get_string(meta, "uid", &uid) < 0 || isempty(uid))
                return FAIL("Pod without metadata.uid");
        if (strlen(uid) > KUBE_STRING_MAX)
                return FAIL("Pod metadata.uid too long");
        *ret_uid = uid;
        return 0;
}

/* An optional annotation: "" when absent. */
static int annotation(json_object *annotations, const char *key, char **ret, const char **ret_reason) {
        const char *v = "";
        int r;

        if (annotations) {
                r = get_string(annotations, key, &v);
                if (r == -EBADMSG)
                        return FAIL("Pod annotation value is not a string");
                if (r < 0)
                        v = "";
        }
        if (strlen(v) > KUBE_STRING_MAX)
                return FAIL("Pod GAS annotation longer than 4096 bytes");
        *ret = strdup(v);
        return *ret ? 0 : -ENOMEM;
}

static int container_read(json_object *c, GasContainer *ret, const char **ret_reason) {
        json_object *resources, *limits;
        GasContainer g = {};
        int r;

        if (!json_object_is_type(c, json_type_object))
                return FAIL("Pod container is not an object");
        r = get_object(c, "resources", &resources);
        if (r == -EBADMSG)
                return FAIL("Pod container resources is not an object");
        if (r < 0)
                goto done;
        r = get_object(resources, "limits", &limits);
        if (r == -EBADMSG)
                return FAIL("Pod container resources.limits is not an object");
        if (r < 0)
                goto done;

        json_object_object_foreach(limits, key, val) {
                const char *q;
                int64_t n;

                if (!startswith(key, KUBE_GAS_PREFIX))
                        continue;
                if (strlen(key) > 253) {
                        gas_container_done(&g);
                        return FAIL("Pod resource name longer than 253 bytes");
                }
                /* Quantities are strings on the wire; an integer is accepted too. */
                if (json_object_is_type(val, json_type_int)) {
                        n = json_object_get_int64(val);
                        if (n < 0) {
                                gas_container_done(&g);
                                return FAIL("Pod gpu.intel.com/ limit is negative");
                        }
                } else if (json_object_is_type(val, json_type_string)) {
                        q = json_object_get_string(val);
                        if ((size_t) json_object_get_string_len(val) != strlen(q) ||
                            kube_quantity_integer(q, &n) < 0) {
                                gas_container_done(&g);
                                return FAIL("Pod gpu.intel.com/ limit is not an integer quantity");
                        }
                } else {
                        gas_container_done(&g);
                        return FAIL("Pod gpu.intel.com/ limit is not a quantity");
                }
                if (g.n_limits >= KUBE_LIMITS_MAX) {
                        gas_container_done(&g);
                        return FAIL("Pod container has too many gpu.intel.com/ limits");
                }
                char **names = reallocarray(g.names, g.n_limits + 1, sizeof(char *));
                if (!names) {
                        gas_container_done(&g);
                        return -ENOMEM;
                }
                g.names = names;
                int64_t *counts = reallocarray(g.counts, g.n_limits + 1, sizeof(int64_t));
                if (!counts) {
                        gas_container_done(&g);
                        return -ENOMEM;
                }
                g.counts = counts;
                g.names[g.n_limits] = strdup(key);
                if (!g.names[g.n_limits]) {
                        gas_container_done(&g);
                        return -ENOMEM;
                }
                g.counts[g.n_limits++] = n;
        }
done:
        *ret = g;
        return 0;
}

int kube_pod_gas_read(json_object *pod, GasPod **ret, const char **ret_reason) {
        _cleanup_(gas_pod_freep) GasPod *p = NULL;
        json_object *meta, *annotations = NULL, *status, *spec, *containers;
        const char *phase, *uid, *ns, *name, *ts;
        size_t n;
        int r;

        if (get_string(pod, "kind", &phase) >= 0 && !streq(phase, "Pod"))
                return FAIL("not a Pod object");
        r = kube_pod_uid(pod, &uid, ret_reason);
        if (r < 0)
                return r;
        (void) get_object(pod, "metadata", &meta);
        r = get_object(meta, "annotations", &annotations);
        if (r == -EBADMSG)
                return FAIL("Pod metadata.annotations is not an object");
        if (r < 0)
                annotations = NULL;

        /* Only Pending pods that GAS has placed matter (the Intel plugin's rule). */
        r = get_object(pod, "status", &status);
        if (r == -EBADMSG)
                return FAIL("Pod status is not an object");
        if (r < 0 || get_string(status, "phase", &phase) < 0 || !streq(phase, "Pending") ||
            !annotations || get_string(annotations, "gas-ts", &ts) < 0) {
                if (annotations && get_string(annotations, "gas-ts", &ts) == -EBADMSG)
                        return FAIL("Pod annotation gas-ts is not a string");
                *ret = NULL;
                return 0;
        }

        if (get_string(meta, "namespace", &ns) < 0 || isempty(ns))
                return FAIL("Pod without metadata.namespace");
        if (get_string(meta, "name", &name) < 0 || isempty(name))
                return FAIL("Pod without metadata.name");
        if (strlen(ns) > KUBE_STRING_MAX || strlen(name) > KUBE_STRING_MAX)
                return FAIL("Pod name or namespace too long");

        p = calloc(1, sizeof(GasPod));
        if (!p)
                return -ENOMEM;
        p->uid = strdup(uid);
        p->namespace = strdup(ns);
        p->name = strdup(name);
        if (!p->uid || !p->namespace || !p->name)
                return -ENOMEM;
        r = annotation(annotations, "gas-ts", &p->ts, ret_reason);
        if (r >= 0)
                r = annotation(annotations, "gas-container-cards", &p->cards, ret_reason);
        if (r >= 0)
                r = annotation(annotations, "gas-container-tiles", &p->tiles, ret_reason);
        if (r < 0)
                return r;

        if (get_object(pod, "spec", &spec) < 0)
                return FAIL("Pod without spec");
        if (!json_object_object_get_ex(spec, "containers", &containers) ||
            !json_object_is_type(containers, json_type_array))
                return FAIL("Pod spec.containers is not an array");
        n = json_object_array_length(containers);
        if (n > KUBE_CONTAINERS_MAX)
                return FAIL("Pod has more than 64 containers");
        if (n > 0) {
                p->containers = calloc(n, sizeof(GasContainer));
                if (!p->containers)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                r = container_read(json_object_array_get_idx(containers, i), &p->containers[i], ret_reason);
                if (r < 0)
                        return r;
                p->n_containers++;
        }
        *ret = TAKE_PTR(p);
        return 0;
}

static const char *const watch_types[] = {
        [KUBE_WATCH_ADDED] = "ADDED",
        [KUBE_WATCH_MODIFIED] = "MODIFIED",
        [KUBE_WATCH_DELETED] = "DELETED",
        [KUBE_WATCH_BOOKMARK] = "BOOKMARK",
        [KUBE_WATCH_ERROR] = "ERROR",
};

const char *kube_watch_type_to_string(KubeWatchType t) {
        return (size_t) t < ELEMENTSOF(watch_types) ? watch_types[t] : "?";
}

int kube_watch_event_read(json_object *ev, KubeWatchType *ret_type, json_object **ret_object,
                          const char **ret_reason) {
        json_object *obj;
        const char *type;

        if (!json_object_is_type(ev, json_type_object))
                return FAIL("watch event is not a JSON object");
        if (get_string(ev, "type", &type) < 0)
                return FAIL("watch event without type");
        if (get_object(ev, "object", &obj) < 0)
                return FAIL("watch event without object");
        for (size_t i = 0; i < ELEMENTSOF(watch_types); i++)
                if (streq(type, watch_types[i])) {
                        *ret_type = (KubeWatchType) i;
                        *ret_object = obj;
                        return 0;
                }
        return FAIL("watch event of unknown type");
}
