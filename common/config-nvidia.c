/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * config-nvidia.c — the NVIDIA device plugin's v1 sections of kgpu.yaml that are more
 * than one value: sharing.timeSlicing/mps.resources (names, renames, replicas, device
 * selections by index, UUID or MIG reference) and resources.gpus/mig (default names
 * only), with the checks the NVIDIA plugin makes across the sharing sections.
 *
 * Contract: see config-internal.h. Errors name the file, line and the key with the
 * entry's index ("sharing.mps.resources[1].devices: ..."); a refused section leaves
 * the Config as it was.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config-internal.h"
#include "common/log.h"

void config_shared_resources_free(ConfigSharedResource *r, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(r[i].name);
                free(r[i].rename);
                strv_free(r[i].devices);
        }
        free(r);
}

#define CONFIG_LIST_MAX 256U            /* entries of a resources list */
#define CONFIG_DEVICES_MAX 1024U        /* items of one devices list */
#define CONFIG_DEVICES_TOTAL_MAX 4096U  /* items of all devices lists of one section (bounds the overlap checks) */
#define RESOURCE_NAME_PREFIX "nvidia.com/"

static const char *scalar(const yaml_node_t *n) {
        return (const char *) n->data.scalar.value;
}

/* A plain value: a scalar without NUL bytes, bounded, printable. */
static bool scalar_ok(const yaml_node_t *n) {
        return n && n->type == YAML_SCALAR_NODE && n->data.scalar.length <= CONFIG_SCALAR_MAX &&
               strlen(scalar(n)) == n->data.scalar.length && config_is_printable(scalar(n));
}

/* The part of a Kubernetes resource name after "nvidia.com/": a DNS label-ish name of at most
 * 63 characters (lower case letters, digits, '-' and '.', alphanumeric at both ends). */
static bool resource_suffix_ok(const char *s) {
        size_t n = strlen(s);

        if (n == 0 || n > 63)
                return false;
        if (strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-.") != n)
                return false;
        if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789", s[0]) ||
            !strchr("abcdefghijklmnopqrstuvwxyz0123456789", s[n - 1]))
                return false;
        return !strstr(s, "..");
}

/* "1g.10gb", "1c.2g.20gb", "1g.10gb.me" (the NVIDIA plugin's '+' already turned into '.'). */
static bool mig_profile_ok(const char *s) {
        const char *p = s;
        size_t k;

        k = strspn(p, "0123456789");
        if (k > 0 && p[k] == 'c' && p[k + 1] == '.')
                p += k + 2;
        k = strspn(p, "0123456789");
        if (k == 0 || p[k] != 'g' || p[k + 1] != '.')
                return false;
        p += k + 2;
        k = strspn(p, "0123456789");
        if (k == 0 || p[k] != 'g' || p[k + 1] != 'b')
                return false;
        p += k + 2;
        return *p == 0 || (*p == '.' && resource_suffix_ok(p + 1));
}

/* A resource name as the NVIDIA plugin takes it: "gpu" means "nvidia.com/gpu". Returns the
 * full name in *ret, or NULL with *ret_why. */
static int resource_name_parse(const char *value, char **ret, const char **ret_why) {
        const char *suffix = startswith(value, RESOURCE_NAME_PREFIX) ?: value;
        char *n = NULL;

        if (strchr(suffix, '/')) {
                *ret_why = "expected a resource name under " RESOURCE_NAME_PREFIX;
                return -EINVAL;
        }
        if (!resource_suffix_ok(suffix)) {
                *ret_why = "expected a resource name (" RESOURCE_NAME_PREFIX " and up to 63 lower case letters, digits, '-' or '.')";
                return -EINVAL;
        }
        if (asprintf(&n, RESOURCE_NAME_PREFIX "%s", suffix) < 0)
                return -ENOMEM;
        *ret = n;
        return 0;
}

static bool is_hex_run(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!strchr("0123456789abcdefABCDEF", s[i]))
                        return false;
        return true;
}

/* 8-4-4-4-12 hex digits, nothing after. */
static bool uuid_ok(const char *s, size_t len) {
        static const size_t runs[] = { 8, 4, 4, 4, 12 };

        for (size_t i = 0; i < ELEMENTSOF(runs); i++) {
                if (len < runs[i] || !is_hex_run(s, runs[i]))
                        return false;
                s += runs[i];
                len -= runs[i];
                if (i < ELEMENTSOF(runs) - 1) {
                        if (len == 0 || *s != '-')
                                return false;
                        s++;
                        len--;
                }
        }
        return len == 0;
}

static bool digits_ok(const char *s, size_t len) {
        return len > 0 && len <= 9 && strspn(s, "0123456789") >= len;
}

typedef enum DeviceRefKind {
        DEVICE_REF_INVALID,
        DEVICE_REF_GPU,         /* "0", "GPU-<uuid>" */
        DEVICE_REF_MIG,         /* "0:1", "MIG-<uuid>", "MIG-GPU-<uuid>/1/0" */
} DeviceRefKind;

/* The forms the NVIDIA plugin accepts in a devices list. */
static DeviceRefKind device_ref_kind(const char *s) {
        const char *p, *colon, *rest;
        size_t len = strlen(s);

        if (digits_ok(s, len))
                return DEVICE_REF_GPU;
        colon = strchr(s, ':');
        if (colon && digits_ok(s, (size_t) (colon - s)) && digits_ok(colon + 1, strlen(colon + 1)))
                return DEVICE_REF_MIG;
        if ((p = startswith(s, "GPU-")) && uuid_ok(p, strlen(p)))
                return DEVICE_REF_GPU;
        if (!(p = startswith(s, "MIG-")))
                return DEVICE_REF_INVALID;
        if (uuid_ok(p, strlen(p)))
                return DEVICE_REF_MIG;
        /* MIG-GPU-<uuid>/<gi>/<ci> */
        if (!(p = startswith(p, "GPU-")) || strlen(p) < 36 || !uuid_ok(p, 36) || p[36] != '/')
                return DEVICE_REF_INVALID;
        rest = p + 37;
        p = strchr(rest, '/');
        if (!p || !digits_ok(rest, (size_t) (p - rest)) || !digits_ok(p + 1, strlen(p + 1)))
                return DEVICE_REF_INVALID;
        return DEVICE_REF_MIG;
}

/* Whether two devices selections (NULL: all) can name the same device, as far as the
 * text tells (an index and a UUID of one GPU are not matched: the inventory is not known here). */
static bool devices_overlap(char * const *a, char * const *b) {
        if (!a || !b)
                return true;
        for (char * const *i = a; *i; i++)
                if (strv_contains(b, *i))
                        return true;
        return false;
}

typedef struct EntryContext {
        ParseContext *ctx;
        const char *key;        /* "sharing.mps.resources" */
        size_t index;
        size_t n_devices;       /* devices listed so far in this section */
} EntryContext;

static int entry_error(EntryContext *e, const yaml_node_t *node, const char *field, const char *fmt, ...) _printf_(4, 5);
static int entry_error(EntryContext *e, const yaml_node_t *node, const char *field, const char *fmt, ...) {
        _cleanup_free_ char *what = NULL, *key = NULL;
        va_list ap;
        int k;

        va_start(ap, fmt);
        k = vasprintf(&what, fmt, ap);
        va_end(ap);
        if (k < 0)
                return -ENOMEM;
        if (asprintf(&key, "%s[%zu]%s%s", e->key, e->index, field ? "." : "", field ?: "") < 0)
                return -ENOMEM;
        return config_parse_error(e->ctx, node, key, "%s", what);
}

/* A line at level about one field of an entry: "FILE:LINE: KEY[i].FIELD: what". */
static void entry_log(EntryContext *e, int level, const yaml_node_t *node, const char *field, const char *fmt, ...) _printf_(5, 6);
static void entry_log(EntryContext *e, int level, const yaml_node_t *node, const char *field, const char *fmt, ...) {
        _cleanup_free_ char *what = NULL;
        va_list ap;
        int k;

        if (level > log_get_max_level())
                return;
        va_start(ap, fmt);
        k = vasprintf(&what, fmt, ap);
        va_end(ap);
        if (k < 0)
                return;
        log_full_errno(level, 0, "%s:%zu: %s[%zu]%s%s: %s", e->ctx->name, node->start_mark.line + 1, e->key, e->index,
                       field ? "." : "", field ?: "", what);
}

#define UPSTREAM_IGNORES "honoured as the nos fork of the device plugin does; NVIDIA device plugin releases " \
        "that disable resource renaming ignore it (\"Ignoring...\")"

static int entry_devices(EntryContext *e, const yaml_node_t *v, bool mps, char ***ret) {
        _cleanup_strv_free_ char **l = NULL;
        size_t n = 0;

        if (v->type == YAML_SCALAR_NODE) {
                uint32_t count;

                if (!scalar_ok(v))
                        return entry_error(e, v, "devices", "invalid value");
                if (config_node_is_null(v))     /* upstream: the string "", not "all" */
                        return entry_error(e, v, "devices", "expected \"all\" or a list of devices, got null");
                if (streq(scalar(v), "all")) {
                        *ret = NULL;
                        return 0;
                }
                if (safe_atou32(scalar(v), &count) >= 0) {
                        if (count == 0)
                                return entry_error(e, v, "devices", "a count of devices must be > 0, got '%s'", scalar(v));
                        /* Upstream releases that disable renaming share all devices, newer ones
                         * the first N in no fixed order: all it is. */
                        entry_log(e, LOG_WARNING, v, "devices", "accepted, no effect in kgpu: a count of devices (%s), "
                                  "all devices of the resource are shared", scalar(v));
                        *ret = NULL;
                        return 0;
                }
                return entry_error(e, v, "devices", "expected \"all\" or a list of GPU indexes, MIG indexes or UUIDs, got '%s'",
                                   scalar(v));
        }
        if (v->type != YAML_SEQUENCE_NODE)
                return entry_error(e, v, "devices", "expected \"all\" or a list of devices, got a mapping");

        for (yaml_node_item_t *i = v->data.sequence.items.start; i < v->data.sequence.items.top; i++, n++) {
                yaml_node_t *d = yaml_document_get_node(e->ctx->doc, *i);
                _cleanup_free_ char *norm = NULL;
                const char *ref;
                DeviceRefKind kind;

                if (n >= CONFIG_DEVICES_MAX)
                        return entry_error(e, v, "devices", "more than %u devices", CONFIG_DEVICES_MAX);
                if (++e->n_devices > CONFIG_DEVICES_TOTAL_MAX)
                        return entry_error(e, v, "devices", "more than %u devices in all entries", CONFIG_DEVICES_TOTAL_MAX);
                if (!d || !scalar_ok(d))
                        return entry_error(e, d ?: v, "devices", "list items must be GPU indexes, MIG indexes or UUIDs");
                ref = scalar(d);
                kind = device_ref_kind(ref);
                if (kind == DEVICE_REF_INVALID)
                        return entry_error(e, d, "devices", "expected a GPU index (0), a MIG index (0:1), a GPU UUID (GPU-...) "
                                           "or a MIG UUID (MIG-...), got '%s'", ref);
                if (mps && kind == DEVICE_REF_MIG)
                        return entry_error(e, d, "devices", "MPS is not supported on MIG devices, got '%s'", ref);
                if (kind == DEVICE_REF_GPU && digits_ok(ref, strlen(ref))) {
                        uint32_t idx;

                        /* 007 and 7 are the same GPU (the NVIDIA plugin reads integers). */
                        if (safe_atou32(ref, &idx) < 0 || asprintf(&norm, "%" PRIu32, idx) < 0) {
                                norm = NULL;
                                return -ENOMEM;
                        }
                        ref = norm;
                }
                if (strv_contains(l, ref))
                        return entry_error(e, d, "devices", "'%s' listed twice", ref);
                if (strv_extend(&l, ref) < 0)
                        return -ENOMEM;
        }
        if (!l)
                return entry_error(e, v, "devices", "expected \"all\" or a non-empty list of devices");
        entry_log(e, LOG_NOTICE, v, "devices", UPSTREAM_IGNORES);
        *ret = TAKE_PTR(l);
        return 0;
}

/* One entry of sharing.timeSlicing.resources[] / sharing.mps.resources[]. Returns 1 for an
 * entry accepted that shares nothing (a resource kgpu does not advertise): not kept. */
static int parse_shared_resource(EntryContext *e, yaml_node_t *node, bool mps, ConfigSharedResource *r) {
        static const char * const fields[] = { "name", "rename", "replicas", "devices", "memoryGB", NULL };
        bool seen[ELEMENTSOF(fields)] = {}, drop = false;
        int k;

        if (node->type != YAML_MAPPING_NODE)
                return entry_error(e, node, NULL, "expected a mapping (name, replicas, ...)");

        for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
                yaml_node_t *k_node = yaml_document_get_node(e->ctx->doc, p->key);
                yaml_node_t *v = yaml_document_get_node(e->ctx->doc, p->value);
                const char *why = NULL;
                size_t f;

                if (!k_node || !v)
                        return entry_error(e, node, NULL, "malformed mapping");
                if (!scalar_ok(k_node) || k_node->data.scalar.length == 0 || k_node->data.scalar.length > 128)
                        return entry_error(e, k_node, NULL, "keys must be short plain names");
                for (f = 0; fields[f]; f++)
                        if (streq(fields[f], scalar(k_node)))
                                break;
                if (!fields[f]) {
                        /* Upstream reads the keys it knows and drops the others. */
                        entry_log(e, LOG_WARNING, k_node, scalar(k_node),
                                  "unknown key, ignored (as the NVIDIA device plugin ignores keys it does not know)");
                        continue;
                }
                if (seen[f])
                        return entry_error(e, k_node, fields[f], "given twice");
                seen[f] = true;

                if (streq(fields[f], "devices")) {
                        k = entry_devices(e, v, mps, &r->devices);
                        if (k < 0)
                                return k;
                        continue;
                }
                if (!scalar_ok(v))
                        return entry_error(e, v, fields[f], "expected a single value");

                if (streq(fields[f], "name") || streq(fields[f], "rename")) {
                        char **dst = streq(fields[f], "name") ? &r->name : &r->rename;

                        /* Upstream reads null as the empty name, which is not a resource name. */
                        if (config_node_is_null(v))
                                return entry_error(e, v, fields[f], "expected a resource name, got null");
                        k = resource_name_parse(scalar(v), dst, &why);
                        if (k == -ENOMEM)
                                return k;
                        if (k < 0)
                                return entry_error(e, v, fields[f], "%s, got '%s'", why, scalar(v));
                        if (dst == &r->rename)
                                entry_log(e, LOG_NOTICE, v, fields[f], UPSTREAM_IGNORES);
                        if (dst == &r->name) {
                                const char *suffix = *dst + strlen(RESOURCE_NAME_PREFIX);
                                const char *profile = startswith(suffix, "mig-");

                                if (!streq(suffix, "gpu") && !(profile && mig_profile_ok(profile))) {
                                        /* Upstream parses any resource name; no device has this one. */
                                        entry_log(e, LOG_WARNING, v, fields[f], "accepted, no effect in kgpu: no device is "
                                                  "advertised as '%s' (nvidia.com/gpu, nvidia.com/mig-<profile>), the "
                                                  "entry shares nothing", *dst);
                                        drop = true;
                                } else if (mps && profile)
                                        return entry_error(e, v, fields[f], "MPS is not supported on MIG devices, "
                                                           "only nvidia.com/gpu can be shared, got '%s'", scalar(v));
                        }
                } else if (streq(fields[f], "replicas")) {
                        /* Time-slicing: at least 2, as upstream; MPS: 1 is one slice of a size (the nos fork). */
                        uint32_t min = mps ? 1 : 2;

                        if (safe_atou32(scalar(v), &r->replicas) < 0 || r->replicas < min || r->replicas > 1024)
                                return entry_error(e, v, fields[f], "expected an integer from %" PRIu32 " to 1024%s, got '%s'",
                                                   min, mps ? "" : " (time-slicing needs at least 2 replicas, as the NVIDIA "
                                                   "device plugin)", scalar(v));
                } else {        /* memoryGB */
                        uint32_t gb;

                        if (!mps) {
                                entry_log(e, LOG_WARNING, k_node, fields[f], "accepted, no effect in kgpu: only MPS slices "
                                          "have a memory size");
                                continue;
                        }
                        if (config_node_is_null(v))
                                continue;       /* unset: the GPU's memory divided by the replicas */
                        if (safe_atou32(scalar(v), &gb) < 0 || gb < 1 || gb > 65536)
                                return entry_error(e, v, fields[f], "expected a whole number of GiB from 1 to 65536, got '%s'",
                                                   scalar(v));
                        r->memory_bytes = (uint64_t) gb << 30;
                }
        }
        if (!r->name)
                return entry_error(e, node, "name", "required, not given");
        if (r->replicas == 0)
                return entry_error(e, node, "replicas", "required, not given");
        return drop ? 1 : 0;
}

/* Cross-entry checks of one sharing section, as the NVIDIA plugin's semantics need them. */
static int check_shared_resources(EntryContext *e, ConfigSharing *sh, yaml_node_t **nodes, const size_t *index, bool mps) {
        for (size_t i = 0; i < sh->n_resources; i++) {
                _cleanup_free_ char *name_i = config_shared_resource_name(sh, &sh->resources[i]);

                if (!name_i)
                        return -ENOMEM;
                for (size_t j = 0; j < i; j++) {
                        _cleanup_free_ char *name_j = config_shared_resource_name(sh, &sh->resources[j]);

                        if (!name_j)
                                return -ENOMEM;
                        if (!streq(name_i, name_j) && (mps || !streq(sh->resources[i].name, sh->resources[j].name)))
                                continue;
                        if (!devices_overlap(sh->resources[i].devices, sh->resources[j].devices))
                                continue;
                        e->index = index[i];
                        if (streq(name_i, name_j))
                                return entry_error(e, nodes[i], NULL, "'%s' is already advertised for the same devices by "
                                                   "%s[%zu]", name_i, e->key, index[j]);
                        /* MPS slices of one GPU may differ (the nos fork); a time-sliced device has one replica set. */
                        if (!mps && streq(sh->resources[i].name, sh->resources[j].name))
                                return entry_error(e, nodes[i], NULL, "'%s' on the same devices is already time-sliced by "
                                                   "%s[%zu]", sh->resources[i].name, e->key, index[j]);
                }
        }
        return 0;
}

int config_parse_shared_resources(ParseContext *ctx, const ConfigOption *o, const char *key, yaml_node_t *node) {
        ConfigSharing *sh = (ConfigSharing *) ((uint8_t *) ctx->config + o->offset);
        bool mps = o->offset == OFF(nvidia_mps);
        EntryContext e = { .ctx = ctx, .key = key };
        ConfigSharedResource *list = NULL;
        yaml_node_t *nodes[CONFIG_LIST_MAX];
        size_t index[CONFIG_LIST_MAX];
        size_t n = 0;
        int r;

        if (config_node_is_null(node))
                return config_parse_error(ctx, node, key, "no resources specified");
        if (node->type != YAML_SEQUENCE_NODE)
                return config_parse_error(ctx, node, key, "expected a list of resources (name, replicas, ...)");
        if (node->data.sequence.items.top - node->data.sequence.items.start > (ptrdiff_t) CONFIG_LIST_MAX)
                return config_parse_error(ctx, node, key, "more than %u resources", CONFIG_LIST_MAX);
        if (node->data.sequence.items.top == node->data.sequence.items.start)
                return config_parse_error(ctx, node, key, "no resources specified");

        list = calloc((size_t) (node->data.sequence.items.top - node->data.sequence.items.start), sizeof(*list));
        if (!list)
                return -ENOMEM;
        for (yaml_node_item_t *i = node->data.sequence.items.start; i < node->data.sequence.items.top; i++) {
                yaml_node_t *item = yaml_document_get_node(ctx->doc, *i);

                e.index = (size_t) (i - node->data.sequence.items.start);
                index[n] = e.index;
                nodes[n] = item ?: node;
                n++;
                r = item ? parse_shared_resource(&e, item, mps, &list[n - 1]) :
                           entry_error(&e, node, NULL, "malformed list");
                if (r < 0) {
                        config_shared_resources_free(list, n);
                        return r;
                }
                if (r > 0) {    /* shares nothing: not kept */
                        n--;
                        free(list[n].name);
                        free(list[n].rename);
                        strv_free(list[n].devices);
                        list[n] = (ConfigSharedResource) {};
                }
        }
        config_shared_resources_free(sh->resources, sh->n_resources);   /* a key given twice: the last one counts */
        sh->resources = list;
        sh->n_resources = n;
        if (mps)
                ctx->mps_resources_line = node->start_mark.line + 1;
        else
                ctx->time_slicing_resources_line = node->start_mark.line + 1;
        return check_shared_resources(&e, sh, nodes, index, mps);
}

/* resources.gpus / resources.mig: the NVIDIA plugin's custom resource names, checked as
 * upstream checks them. Upstream releases ignore them ("not yet supported ... Ignoring"),
 * so does kgpu: a name other than the default one is logged at warning. */
int config_parse_resource_patterns(ParseContext *ctx, const ConfigOption *o, const char *key, yaml_node_t *node) {
        bool mig = streq(key, "resources.mig"), custom = false;
        EntryContext e = { .ctx = ctx, .key = key };

        if (config_node_is_null(node))
                return 0;
        if (node->type != YAML_SEQUENCE_NODE)
                return config_parse_error(ctx, node, key, "expected a list of {pattern, name}");
        for (yaml_node_item_t *i = node->data.sequence.items.start; i < node->data.sequence.items.top; i++, e.index++) {
                yaml_node_t *item = yaml_document_get_node(ctx->doc, *i);
                const yaml_node_t *pattern = NULL, *name = NULL;
                _cleanup_free_ char *full = NULL, *want = NULL;
                const char *why = NULL;
                int r;

                if (e.index >= CONFIG_LIST_MAX)
                        return config_parse_error(ctx, node, key, "more than %u entries", CONFIG_LIST_MAX);
                if (!item || item->type != YAML_MAPPING_NODE)
                        return entry_error(&e, item ?: node, NULL, "expected a mapping (pattern, name)");
                for (yaml_node_pair_t *p = item->data.mapping.pairs.start; p < item->data.mapping.pairs.top; p++) {
                        yaml_node_t *k = yaml_document_get_node(ctx->doc, p->key);
                        yaml_node_t *v = yaml_document_get_node(ctx->doc, p->value);

                        if (!k || !v || !scalar_ok(k))
                                return entry_error(&e, item, NULL, "malformed mapping");
                        if (!streq(scalar(k), "pattern") && !streq(scalar(k), "name")) {
                                entry_log(&e, LOG_WARNING, k, scalar(k),
                                          "unknown key, ignored (as the NVIDIA device plugin ignores keys it does not know)");
                                continue;
                        }
                        if (!scalar_ok(v))
                                return entry_error(&e, v, scalar(k), "expected a single value");
                        if (streq(scalar(k), "pattern"))
                                pattern = v;
                        else
                                name = v;
                }
                if (!pattern)
                        return entry_error(&e, item, "pattern", "required, not given");
                if (!name)
                        return entry_error(&e, item, "name", "required, not given");
                if (config_node_is_null(name))
                        return entry_error(&e, name, "name", "expected a resource name, got null");
                r = resource_name_parse(scalar(name), &full, &why);
                if (r == -ENOMEM)
                        return r;
                if (r < 0)
                        return entry_error(&e, name, "name", "%s, got '%s'", why, scalar(name));
                if (mig) {
                        if (asprintf(&want, RESOURCE_NAME_PREFIX "mig-%s", scalar(pattern)) < 0) {
                                want = NULL;
                                return -ENOMEM;
                        }
                } else if (!(want = strdup(RESOURCE_NAME_PREFIX "gpu")))
                        return -ENOMEM;
                if (!streq(full, want)) {
                        entry_log(&e, LOG_WARNING, name, "name", "accepted, no effect in kgpu: %s, got '%s' (the NVIDIA "
                                  "device plugin ignores custom names too)", o->help, scalar(name));
                        custom = true;
                }
        }
        if (!custom)
                log_notice("%s:%zu: %s: only default names, accepted.", ctx->name, node->start_mark.line + 1, key);
        return 0;
}

/* What the NVIDIA plugin checks across the sharing sections, and what it does when both are given. */
int config_check_sharing_sections(ParseContext *ctx) {
        if (ctx->time_slicing_line && !ctx->time_slicing_resources_line) {
                if (!ctx->time_slicing_empty || !ctx->mps_resources_line)
                        return config_parse_error_line(ctx, ctx->time_slicing_line, "sharing.timeSlicing", "no resources specified");
                /* What nos writes (an empty value marshalled): the nos fork reads it. */
                log_notice("%s:%zu: sharing.timeSlicing: empty, beside sharing.mps: accepted as the nos fork of the "
                           "device plugin accepts it (the NVIDIA device plugin refuses it: no resources specified).",
                           ctx->name, ctx->time_slicing_line);
        }
        if (ctx->mps_line && !ctx->mps_resources_line)
                return config_parse_error_line(ctx, ctx->mps_line, "sharing.mps", "no resources specified");
        if (ctx->time_slicing_resources_line && ctx->mps_resources_line) {
                ConfigSharing *ts = &ctx->config->nvidia_time_slicing;

                /* Upstream's SharingStrategy(): MPS wins. */
                log_warning("%s:%zu: sharing.timeSlicing: ignored, sharing.mps is given (line %zu): the GPUs are shared "
                            "with MPS, as the NVIDIA device plugin does when both are given.",
                            ctx->name, ctx->time_slicing_line, ctx->mps_line);
                config_shared_resources_free(ts->resources, ts->n_resources);
                *ts = (ConfigSharing) {};
        }
        return 0;
}
