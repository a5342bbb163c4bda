/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * probe-gpus.c — kgpu-grpcd's copy of the probe's GPU objects (see probe-gpus.h).
 *
 * Properties are read into temporaries and validated as a whole before they replace
 * anything, so a refused update leaves the object exactly as it was.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "common/bus-names.h"
#include "common/bus-util.h"
#include "common/util.h"
#include "daemons/grpc/probe-gpus.h"

bool probe_gpus_object_path_valid(const char *path) {
        const char *p;

        if (!path || strnlen(path, PROBE_GPUS_OBJECT_PATH_MAX + 1) > PROBE_GPUS_OBJECT_PATH_MAX)
                return false;
        p = startswith(path, KGPU_GPU_PATH_PREFIX "/");
        return p && *p && !strchr(p, '/');
}

/* Printable ASCII without blanks: what ids, vendor and driver names are made of. */
static bool token_valid(const char *s, size_t max, bool allow_empty) {
        size_t n = 0;

        for (const unsigned char *p = (const unsigned char *) s; *p; p++, n++)
                if (n >= max || *p <= 0x20 || *p >= 0x7f)
                        return false;
        return allow_empty || n > 0;
}

static bool id_valid(const char *s, bool allow_empty) {
        /* ',' separates runtime ids in NVIDIA_VISIBLE_DEVICES and CDI annotations. */
        return token_valid(s, PROBE_GPUS_ID_MAX, allow_empty) && !strchr(s, ',');
}

/* An absolute, normalized path of printable ASCII without blanks: no empty, "." or ".."
 * component, no trailing '/', not "/" itself. */
static bool path_valid(const char *s) {
        const char *p;

        if (!token_valid(s, PROBE_GPUS_PATH_MAX, false) || s[0] != '/' || s[1] == 0)
                return false;
        p = s + 1;
        for (;;) {
                size_t l = strcspn(p, "/");

                if (l == 0 || (l == 1 && p[0] == '.') || (l == 2 && p[0] == '.' && p[1] == '.'))
                        return false;
                if (p[l] == 0)
                        return true;
                p += l + 1;
        }
}

static bool dev_node_valid(const char *s) {
        return path_valid(s) && startswith(s, "/dev/");
}

static bool by_path_node_valid(const char *s) {
        const char *p = startswith(s, "/dev/dri/by-path/");

        return p && *p && !strchr(p, '/') && path_valid(s);
}

static bool mei_node_valid(const char *s) {
        const char *p = startswith(s, "/dev/mei");

        return p && *p && strlen(p) <= 9 && strspn(p, "0123456789") == strlen(p);
}

/* Reads an "as" (already inside its variant) with bus_read_strv_bounded(): *bad is set
 * when it is refused; *ret is replaced only while nothing was refused. */
static int read_paths(sd_bus_message *m, BusStringCheck check, char ***ret, bool *bad) {
        char **l = NULL;
        int r;

        r = bus_read_strv_bounded(m, PROBE_GPUS_NODES_MAX, check, &l);
        if (r == -EBADMSG) {
                *bad = true;
                return 0;
        }
        if (r < 0)
                return r;
        if (*bad) {
                strv_free(l);
                return 0;
        }
        strv_free(*ret);
        *ret = l;
        return 0;
}

static void migs_free(ProbeMig *l, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(l[i].uuid);
                strv_free(l[i].nodes);
        }
        free(l);
}

/* Reads Gpu1.MigDevices, a(ussuuast), already inside its variant. */
static int read_migs(sd_bus_message *m, ProbeMig **ret, size_t *ret_n, bool *bad) {
        ProbeMig *l = NULL;
        size_t n = 0, seen = 0;
        int r;

        r = sd_bus_message_enter_container(m, 'a', "(ussuuast)");
        if (r < 0)
                return r;
        for (;;) {
                _cleanup_strv_free_ char **nodes = NULL;
                const char *uuid, *profile;
                uint32_t index, gi, ci;
                uint64_t memory;
                bool bad_here = false;

                r = sd_bus_message_enter_container(m, 'r', "ussuuast");
                if (r < 0)
                        goto fail;
                if (r == 0)
                        break;
                r = sd_bus_message_read(m, "ussuu", &index, &uuid, &profile, &gi, &ci);
                if (r < 0)
                        goto fail;
                if (++seen > PROBE_GPUS_MIG_MAX || !id_valid(uuid, false))
                        bad_here = true;
                for (size_t i = 0; i < n && !bad_here; i++)
                        if (l[i].index == index || streq(l[i].uuid, uuid))
                                bad_here = true;
                if (!bad_here && !*bad) {
                        ProbeMig *t = reallocarray(l, n + 1, sizeof(ProbeMig));

                        if (!t) {
                                r = -ENOMEM;
                                goto fail;
                        }
                        l = t;
                        l[n] = (ProbeMig) { .index = index, .uuid = strdup(uuid) };
                        n++;
                        if (!l[n - 1].uuid) {
                                r = -ENOMEM;
                                goto fail;
                        }
                }
                r = read_paths(m, dev_node_valid, &nodes, &bad_here);
                if (r < 0)
                        goto fail;
                r = sd_bus_message_read_basic(m, 't', &memory);
                if (r < 0)
                        goto fail;
                r = sd_bus_message_exit_container(m);
                if (r < 0)
                        goto fail;
                if (bad_here)
                        *bad = true;
                else if (!*bad)
                        l[n - 1].nodes = TAKE_PTR(nodes);
        }
        r = sd_bus_message_exit_container(m);
        if (r < 0)
                goto fail;
        if (*bad) {
                migs_free(l, n);
                return 0;
        }
        migs_free(*ret, *ret_n);
        *ret = l;
        *ret_n = n;
        return 0;
fail:
        migs_free(l, n);
        return r;
}

int probe_gpu_new(const char *path, ProbeGpu **ret) {
        _cleanup_(probe_gpu_freep) ProbeGpu *g = NULL;

        if (!probe_gpus_object_path_valid(path))
                return -EINVAL;
        g = calloc(1, sizeof(ProbeGpu));
        if (!g)
                return -ENOMEM;
        g->index = -1;
        g->path = strdup(path);
        g->id = strdup("");
        g->vendor = strdup("");
        g->driver = strdup("");
        g->uuid = strdup("");
        g->card_node = strdup("");
        g->render_node = strdup("");
        g->mps_pipe_directory = strdup("");
        g->device_nodes = calloc(1, sizeof(char *));
        g->by_path_nodes = calloc(1, sizeof(char *));
        g->mei_nodes = calloc(1, sizeof(char *));
        if (!g->path || !g->id || !g->vendor || !g->driver || !g->uuid || !g->card_node ||
            !g->render_node || !g->mps_pipe_directory || !g->device_nodes || !g->by_path_nodes ||
            !g->mei_nodes)
                return -ENOMEM;
        *ret = TAKE_PTR(g);
        return 0;
}

ProbeGpu *probe_gpu_free(ProbeGpu *g) {
        if (!g)
                return NULL;
        free(g->path);
        free(g->id);
        free(g->vendor);
        free(g->driver);
        free(g->uuid);
        free(g->card_node);
        free(g->render_node);
        strv_free(g->device_nodes);
        strv_free(g->by_path_nodes);
        strv_free(g->mei_nodes);
        migs_free(g->migs, g->n_migs);
        free(g->mps_pipe_directory);
        return mfree(g);
}

/* The string properties kept, in the order of the temporaries below. */
enum {
        S_ID, S_VENDOR, S_DRIVER, S_UUID, S_CARD, S_RENDER, S_MPS_PIPE, _S_MAX,
};

static const char *const string_names[_S_MAX] = {
        [S_ID] = "Id",
        [S_VENDOR] = "Vendor",
        [S_DRIVER] = "Driver",
        [S_UUID] = "Uuid",
        [S_CARD] = "CardNode",
        [S_RENDER] = "RenderNode",
        [S_MPS_PIPE] = "MpsPipeDirectory",
};

static bool string_valid(unsigned which, const char *v) {
        switch (which) {
        case S_ID:
                return id_valid(v, false);
        case S_UUID:
                return id_valid(v, true);
        case S_VENDOR:
        case S_DRIVER:
                return token_valid(v, PROBE_GPUS_WORD_MAX, true);
        case S_CARD:
        case S_RENDER:
                return isempty(v) || dev_node_valid(v);
        case S_MPS_PIPE:
                return isempty(v) || path_valid(v);
        default:
                return false;
        }
}

/* The Gpu1 properties of one message, validated before any of them is applied. */
typedef struct GpuProperties {
        char *strings[_S_MAX];
        char **device_nodes, **by_path_nodes, **mei_nodes;
        ProbeMig *migs;
        size_t n_migs;
        int32_t index;
        bool have_index, have_migs, bad;
} GpuProperties;

static void gpu_properties_done(GpuProperties *p) {
        for (unsigned i = 0; i < _S_MAX; i++)
                free(p->strings[i]);
        strv_free(p->device_nodes);
        strv_free(p->by_path_nodes);
        strv_free(p->mei_nodes);
        migs_free(p->migs, p->n_migs);
}

static int gpu_property(sd_bus_message *m, const char *name, const char *contents, void *userdata) {
        GpuProperties *p = userdata;
        int which = -1;
        int r;

        for (unsigned i = 0; i < _S_MAX; i++)
                if (streq(name, string_names[i]))
                        which = (int) i;

        if (which >= 0 && streq(contents, "s")) {
                const char *v;

                r = sd_bus_message_read_basic(m, 's', &v);
                if (r < 0)
                        return r;
                if (!string_valid((unsigned) which, v))
                        p->bad = true;
                else {
                        r = free_and_strdup(&p->strings[which], v);
                        if (r < 0)
                                return r;
                }
                return 1;
        }
        if (streq(name, "Index") && streq(contents, "i")) {
                r = sd_bus_message_read_basic(m, 'i', &p->index);
                if (r < 0)
                        return r;
                p->have_index = true;
                if (p->index < -1 || p->index > PROBE_GPUS_INDEX_MAX)
                        p->bad = true;
                return 1;
        }
        if ((streq(name, "DeviceNodes") || streq(name, "ByPathNodes")) && streq(contents, "as")) {
                bool device = streq(name, "DeviceNodes");

                r = read_paths(m, device ? dev_node_valid : by_path_node_valid,
                               device ? &p->device_nodes : &p->by_path_nodes, &p->bad);
                return r < 0 ? r : 1;
        }
        if (streq(name, "MeiNodes") && streq(contents, "as")) {
                r = read_paths(m, mei_node_valid, &p->mei_nodes, &p->bad);
                return r < 0 ? r : 1;
        }
        if (streq(name, "MigDevices") && streq(contents, "a(ussuuast)")) {
                r = read_migs(m, &p->migs, &p->n_migs, &p->bad);
                if (r < 0)
                        return r;
                p->have_migs = true;
                return 1;
        }
        /* A property we keep, with the wrong type, refuses the object; the others are
         * not ours to judge. */
        if (which >= 0 || streq(name, "Index") || streq(name, "DeviceNodes") ||
            streq(name, "ByPathNodes") || streq(name, "MeiNodes") || streq(name, "MigDevices"))
                p->bad = true;
        return 0;
}

int probe_gpu_apply_properties(ProbeGpu *g, sd_bus_message *m) {
        GpuProperties p = { .index = -1 };
        int r;

        /* The whole dict is consumed even when a value is refused, so that the caller can
         * go on reading the message. */
        r = bus_read_property_map(m, gpu_property, &p);
        if (r < 0)
                goto finish;
        if (p.bad) {
                r = -EBADMSG;
                goto finish;
        }

        for (unsigned i = 0; i < _S_MAX; i++) {
                char **field = i == S_ID ? &g->id : i == S_VENDOR ? &g->vendor : i == S_DRIVER ? &g->driver :
                               i == S_UUID ? &g->uuid : i == S_CARD ? &g->card_node :
                               i == S_RENDER ? &g->render_node : &g->mps_pipe_directory;

                /* Only what the message carried changes. */
                if (p.strings[i])
                        free_and_replace(*field, p.strings[i]);
        }
        if (p.device_nodes) {
                strv_free(g->device_nodes);
                g->device_nodes = TAKE_PTR(p.device_nodes);
        }
        if (p.by_path_nodes) {
                strv_free(g->by_path_nodes);
                g->by_path_nodes = TAKE_PTR(p.by_path_nodes);
        }
        if (p.mei_nodes) {
                strv_free(g->mei_nodes);
                g->mei_nodes = TAKE_PTR(p.mei_nodes);
        }
        if (p.have_migs) {
                migs_free(g->migs, g->n_migs);
                g->migs = TAKE_PTR(p.migs);
                g->n_migs = p.n_migs;
                p.n_migs = 0;
        }
        if (p.have_index)
                g->index = p.index;
        r = 0;
finish:
        /* What was applied moved out (NULL is left); the rest was not taken. */
        gpu_properties_done(&p);
        return r;
}

typedef struct GpuRead {
        const char *path;
        ProbeGpu *gpu;
        bool bad;
} GpuRead;

static int gpu_read_interface(sd_bus_message *m, void *userdata) {
        GpuRead *gr = userdata;
        int r;

        r = probe_gpu_new(gr->path, &gr->gpu);
        if (r == -EINVAL) {
                gr->bad = true;
                return 0;
        }
        if (r < 0)
                return r;
        r = probe_gpu_apply_properties(gr->gpu, m);
        if (r == -EBADMSG) {
                /* Consumed: go on, refuse at the end. */
                gr->bad = true;
                gr->gpu = probe_gpu_free(gr->gpu);
                return 1;
        }
        return r < 0 ? r : 1;
}

int probe_gpus_read_interfaces(sd_bus_message *m, const char *path, ProbeGpu **ret) {
        _cleanup_(probe_gpu_freep) ProbeGpu *g = NULL;
        GpuRead gr = { .path = path };
        int r;

        r = bus_read_interface_map(m, KGPU_GPU_INTERFACE, gpu_read_interface, &gr);
        g = gr.gpu;
        if (r < 0)
                return r;
        if (gr.bad)
                return -EBADMSG;
        if (!g)
                return 0;
        /* Without an Id the object names no device. */
        if (isempty(g->id))
                return -EBADMSG;
        *ret = TAKE_PTR(g);
        return 1;
}

ProbeGpus *probe_gpus_new(void) {
        return calloc(1, sizeof(ProbeGpus));
}

static void gpus_clear(ProbeGpu **l, size_t n) {
        for (size_t i = 0; i < n; i++)
                probe_gpu_free(l[i]);
        free(l);
}

ProbeGpus *probe_gpus_free(ProbeGpus *s) {
        if (!s)
                return NULL;
        gpus_clear(s->gpus, s->n_gpus);
        free(s->keys);
        return mfree(s);
}

static int key_cmp(const void *a, const void *b) {
        return strcmp(((const ProbeGpuKey *) a)->key, ((const ProbeGpuKey *) b)->key);
}

int probe_gpus_reindex(ProbeGpus *s) {
        ProbeGpuKey *keys;
        size_t n = 0, room = 0;

        for (size_t i = 0; i < s->n_gpus; i++)
                room += 2 + s->gpus[i]->n_migs;
        keys = calloc(room ?: 1, sizeof(ProbeGpuKey));
        if (!keys)
                return -ENOMEM;
        for (size_t i = 0; i < s->n_gpus; i++) {
                const ProbeGpu *g = s->gpus[i];

                if (!isempty(g->id))
                        keys[n++] = (ProbeGpuKey) { g->id, i, -1 };
                if (!isempty(g->uuid) && !streq(g->uuid, g->id))
                        keys[n++] = (ProbeGpuKey) { g->uuid, i, -1 };
                for (size_t j = 0; j < g->n_migs; j++)
                        keys[n++] = (ProbeGpuKey) { g->migs[j].uuid, i, (int32_t) j };
        }
        if (n > 1)
                qsort(keys, n, sizeof(ProbeGpuKey), key_cmp);
        /* A key claimed twice names no device: mark every holder of it. */
        for (size_t i = 1; i < n; i++)
                if (streq(keys[i - 1].key, keys[i].key))
                        keys[i - 1].gpu = keys[i].gpu = SIZE_MAX;
        free(s->keys);
        s->keys = keys;
        s->n_keys = n;
        return 0;
}

static int gpu_path_cmp(const void *a, const void *b) {
        return strcmp((*(ProbeGpu * const *) a)->path, (*(ProbeGpu * const *) b)->path);
}

static ssize_t gpus_position(const ProbeGpus *s, const char *path, bool *ret_found) {
        size_t lo = 0, hi = s->n_gpus;

        /* Binary search by path: the insertion point, and whether it is there. */
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(s->gpus[mid]->path, path);

                if (c == 0) {
                        *ret_found = true;
                        return (ssize_t) mid;
                }
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        *ret_found = false;
        return (ssize_t) lo;
}

/* Sorts l by path and drops repeated paths (the bus does not repeat a dict key, but a
 * hostile peer may: the first is kept). Returns how many were dropped. */
static size_t gpus_sort_unique(ProbeGpu **l, size_t *n) {
        size_t dropped = 0;

        if (*n > 1)
                qsort(l, *n, sizeof(ProbeGpu *), gpu_path_cmp);
        for (size_t i = 1; i < *n;)
                if (streq(l[i - 1]->path, l[i]->path)) {
                        probe_gpu_free(l[i]);
                        memmove(l + i, l + i + 1, (*n - i - 1) * sizeof(ProbeGpu *));
                        (*n)--;
                        dropped++;
                } else
                        i++;
        return dropped;
}

int probe_gpus_replace(ProbeGpus *s, sd_bus_message *reply, size_t *ret_skipped) {
        ProbeGpu **l = NULL;
        size_t n = 0, skipped = 0;
        int r;

        r = sd_bus_message_enter_container(reply, 'a', "{oa{sa{sv}}}");
        if (r < 0)
                goto fail;
        for (;;) {
                ProbeGpu *g = NULL;
                const char *path;

                r = sd_bus_message_enter_container(reply, 'e', "oa{sa{sv}}");
                if (r < 0)
                        goto fail;
                if (r == 0)
                        break;
                r = sd_bus_message_read_basic(reply, 'o', &path);
                if (r < 0)
                        goto fail;
                if (!probe_gpus_object_path_valid(path) || n >= PROBE_GPUS_MAX) {
                        /* Not a GPU object (the probe's own object has no Gpu1), or one
                         * too many: read past it. */
                        r = sd_bus_message_skip(reply, "a{sa{sv}}");
                        if (r < 0)
                                goto fail;
                        if (probe_gpus_object_path_valid(path))
                                skipped++;
                } else {
                        r = probe_gpus_read_interfaces(reply, path, &g);
                        if (r == -EBADMSG) {
                                skipped++;
                                r = 0;
                        } else if (r < 0)
                                goto fail;
                        if (g) {
                                ProbeGpu **t = reallocarray(l, n + 1, sizeof(ProbeGpu *));

                                if (!t) {
                                        probe_gpu_free(g);
                                        r = -ENOMEM;
                                        goto fail;
                                }
                                l = t;
                                l[n++] = g;
                        }
                }
                r = sd_bus_message_exit_container(reply);
                if (r < 0)
                        goto fail;
        }
        r = sd_bus_message_exit_container(reply);
        if (r < 0)
                goto fail;

        skipped += gpus_sort_unique(l, &n);
        gpus_clear(s->gpus, s->n_gpus);
        s->gpus = l;
        s->n_gpus = n;
        s->known = true;
        r = probe_gpus_reindex(s);
        if (r < 0)
                return r;
        if (ret_skipped)
                *ret_skipped = skipped;
        return 0;
fail:
        gpus_clear(l, n);
        return r == -ENOMEM ? r : -EBADMSG;
}

int probe_gpus_put(ProbeGpus *s, ProbeGpu *g) {
        ProbeGpu **t;
        bool found;
        ssize_t at;

        at = gpus_position(s, g->path, &found);
        if (found) {
                probe_gpu_free(s->gpus[at]);
                s->gpus[at] = g;
                return probe_gpus_reindex(s);
        }
        if (s->n_gpus >= PROBE_GPUS_MAX) {
                probe_gpu_free(g);
                return -E2BIG;
        }
        t = reallocarray(s->gpus, s->n_gpus + 1, sizeof(ProbeGpu *));
        if (!t) {
                probe_gpu_free(g);
                return -ENOMEM;
        }
        s->gpus = t;
        memmove(s->gpus + at + 1, s->gpus + at, (s->n_gpus - (size_t) at) * sizeof(ProbeGpu *));
        s->gpus[at] = g;
        s->n_gpus++;
        return probe_gpus_reindex(s);
}

int probe_gpus_remove(ProbeGpus *s, const char *path) {
        bool found;
        ssize_t at;
        int r;

        at = gpus_position(s, path, &found);
        if (!found)
                return 0;
        probe_gpu_free(s->gpus[at]);
        memmove(s->gpus + at, s->gpus + at + 1, (s->n_gpus - (size_t) at - 1) * sizeof(ProbeGpu *));
        s->n_gpus--;
        r = probe_gpus_reindex(s);
        return r < 0 ? r : 1;
}

ProbeGpu *probe_gpus_get(const ProbeGpus *s, const char *path) {
        bool found;
        ssize_t at;

        at = gpus_position(s, path, &found);
        return found ? s->gpus[at] : NULL;
}

const ProbeGpu *probe_gpus_find(const ProbeGpus *s, const char *key, size_t len, int32_t *ret_mig) {
        size_t lo = 0, hi = s->n_keys;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                const char *k = s->keys[mid].key;
                int c = strncmp(k, key, len);

                if (c == 0 && k[len] != 0)
                        c = 1;  /* k is longer: it sorts after key[0..len) */
                if (c == 0) {
                        if (s->keys[mid].gpu == SIZE_MAX)
                                return NULL;
                        if (ret_mig)
                                *ret_mig = s->keys[mid].mig;
                        return s->gpus[s->keys[mid].gpu];
                }
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return NULL;
}
