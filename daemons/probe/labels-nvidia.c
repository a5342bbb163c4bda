/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * labels-nvidia.c — NVIDIA node labels, GFD names (see labels-nvidia.h).
 *
 * Labels go into a small key/value table where a later set of a key replaces the value,
 * which is how GFD merges its labelers (full GPUs after MIG-enabled ones, MIG labels
 * after full GPU labels); the table is printed sorted.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/labels-nvidia.h"
#include "daemons/probe/labels.h"

static const char *strempty(const char *s) {
        return s ? s : "";
}

/* Sets "<resource>.<suffix>" (resource NULL: the key is suffix as is). */
static int table_setf(LabelTable *t, const char *resource, const char *suffix, const char *fmt, ...) _printf_(4, 5);
static int table_setf(LabelTable *t, const char *resource, const char *suffix, const char *fmt, ...) {
        _cleanup_free_ char *key = NULL;
        va_list ap;
        int r;

        if (resource ? asprintf(&key, "%s.%s", resource, suffix) < 0 : !(key = strdup(suffix)))
                return -ENOMEM;
        va_start(ap, fmt);
        r = label_table_setfv(t, key, fmt, ap);
        va_end(ap);
        return r;
}

const char *labels_nvidia_family(unsigned major, unsigned minor) {
        switch (major) {
        case 1: return "tesla";
        case 2: return "fermi";
        case 3: return "kepler";
        case 5: return "maxwell";
        case 6: return "pascal";
        case 7: return minor < 5 ? "volta" : "turing";
        case 8: return minor < 9 ? "ampere" : "ada-lovelace";
        case 9: return "hopper";
        case 10:
        case 12: return "blackwell";
        }
        return "undefined";
}

/* "9.0" -> 9, 0; anything else: -EINVAL. */
static int parse_major_minor(const char *s, unsigned *ret_major, unsigned *ret_minor) {
        _cleanup_free_ char *a = NULL;
        uint32_t major, minor;
        char *dot;

        if (isempty(s) || strlen(s) > 16)
                return -EINVAL;
        a = strdup(s);
        if (!a)
                return -ENOMEM;
        dot = strchr(a, '.');
        if (!dot)
                return -EINVAL;
        *dot = 0;
        if (safe_atou32(a, &major) < 0 || safe_atou32(dot + 1, &minor) < 0 || major > 999 || minor > 999)
                return -EINVAL;
        *ret_major = major;
        *ret_minor = minor;
        return 0;
}

/* GFD's sanitising of a product name: characters outside [A-Za-z0-9._- ] dropped,
 * blanks collapsed into single '-'. */
static char *sanitise(const char *s) {
        char *r = calloc(1, strlen(s) + 1);
        size_t k = 0;
        bool blank = false;

        if (!r)
                return NULL;
        for (const char *p = s; *p; p++) {
                char c = *p;
                bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');

                if (c == ' ' || c == '\t') {
                        blank = true;
                        continue;
                }
                if (!alnum && c != '.' && c != '_' && c != '-')
                        continue;
                if (blank && k > 0)
                        r[k++] = '-';
                blank = false;
                r[k++] = c;
        }
        r[k] = 0;
        return r;
}

static const ConfigSharing *config_sharing(const Config *c, const char **ret_strategy) {
        if (c && c->nvidia_mps.n_resources > 0) {
                *ret_strategy = "mps";
                return &c->nvidia_mps;
        }
        if (c && c->nvidia_time_slicing.n_resources > 0) {
                *ret_strategy = "time-slicing";
                return &c->nvidia_time_slicing;
        }
        *ret_strategy = "none";
        return NULL;
}

static const ConfigSharedResource *sharing_entry(const Config *c, const char *resource, const char **ret_strategy) {
        const ConfigSharing *s = config_sharing(c, ret_strategy);

        for (size_t i = 0; s && i < s->n_resources; i++)
                if (streq(s->resources[i].name, resource))
                        return &s->resources[i];
        return NULL;
}

/* product, count, replicas, sharing-strategy of one resource. with_sharing false: GFD's
 * labeler "without sharing" (replicas 0). */
static int base_labels(LabelTable *t, const Config *c, const char *resource, bool with_sharing, size_t count,
                       const char *model, const char *suffix) {
        _cleanup_free_ char *m = NULL, *product = NULL;
        const ConfigSharedResource *e = NULL;
        const char *strategy = "none";
        uint32_t replicas = 0;
        bool shared, renamed;
        int r;

        if (with_sharing) {
                const char *s;

                e = sharing_entry(c, resource, &s);
                replicas = e && e->replicas > 0 ? e->replicas : 1;
                if (replicas > 1)
                        strategy = s;
        }
        shared = e && e->replicas > 1;
        renamed = e && !isempty(e->rename);

        m = sanitise(model);
        if (!m)
                return -ENOMEM;
        if (asprintf(&product, "%s%s%s%s", m, isempty(m) || isempty(suffix) ? "" : "-", strempty(suffix),
                     shared && !renamed && !isempty(m) ? "-SHARED" : "") < 0)
                return -ENOMEM;
        if (!isempty(product) && (r = table_setf(t, resource, "product", "%s", product)) < 0)
                return r;
        if ((r = table_setf(t, resource, "count", "%zu", count)) < 0 ||
            (r = table_setf(t, resource, "replicas", "%" PRIu32, replicas)) < 0 ||
            (r = table_setf(t, resource, "sharing-strategy", "%s", strategy)) < 0)
                return r;
        return 0;
}

static int gpu_labels(LabelTable *t, const Config *c, const LabelsNvidiaGpu *g, size_t count, bool with_sharing) {
        const char *res = LABELS_NVIDIA_PREFIX "gpu";
        unsigned major, minor;
        int r;

        r = base_labels(t, c, res, with_sharing, count, strempty(g->product), NULL);
        if (r < 0)
                return r;
        if (g->memory_bytes >> 20 > 0 &&
            (r = table_setf(t, res, "memory", "%" PRIu64, g->memory_bytes >> 20)) < 0)
                return r;
        if (parse_major_minor(g->compute_capability, &major, &minor) >= 0 && major > 0) {
                if ((r = table_setf(t, res, "family", "%s", labels_nvidia_family(major, minor))) < 0 ||
                    (r = table_setf(t, res, "compute.major", "%u", major)) < 0 ||
                    (r = table_setf(t, res, "compute.minor", "%u", minor)) < 0)
                        return r;
        }
        return 0;
}

static bool mig_enabled(const LabelsNvidiaGpu *g) {
        return streq(g->mig_mode, "Enabled");
}

/* "1g.10gb" -> gi 1, ci 1; "1c.3g.40gb" -> gi 3, ci 1; unknown: 0. */
static void profile_slices(const char *profile, unsigned *ret_gi, unsigned *ret_ci) {
        unsigned gi = 0, ci = 0, a = 0;
        char kind = 0;
        int n = 0;

        *ret_gi = *ret_ci = 0;
        if (sscanf(strempty(profile), "%u%c%n", &a, &kind, &n) < 2)
                return;
        if (kind == 'c') {
                ci = a;
                if (sscanf(profile + n, ".%ug", &gi) != 1)
                        return;
        } else if (kind == 'g')
                gi = ci = a;
        else
                return;
        *ret_gi = gi;
        *ret_ci = ci;
}

static int mig_labels(LabelTable *t, const Config *c, const char *resource, const char *model,
                      const LabelsNvidiaMig *mig, size_t count) {
        _cleanup_free_ char *suffix = NULL, *profile = NULL;
        unsigned gi, ci;
        int r;

        profile = sanitise(strempty(mig->profile));
        if (!profile || asprintf(&suffix, "MIG-%s", profile) < 0)
                return -ENOMEM;
        r = base_labels(t, c, resource, true, count, model, suffix);
        if (r < 0)
                return r;
        if ((r = table_setf(t, resource, "memory", "%" PRIu64, mig->memory_bytes >> 20)) < 0)
                return r;
        profile_slices(mig->profile, &gi, &ci);
        if ((r = table_setf(t, resource, "slices.gi", "%u", gi)) < 0 ||
            (r = table_setf(t, resource, "slices.ci", "%u", ci)) < 0)
                return r;
        return 0;
}

static int mig_invalid(LabelTable *t, const LabelsNvidiaGpu *g) {
        const char *res = LABELS_NVIDIA_PREFIX "gpu";
        _cleanup_free_ char *m = sanitise(strempty(g->product));
        int r;

        if (!m)
                return -ENOMEM;
        if ((r = table_setf(t, res, "product", "%s-MIG-INVALID", m)) < 0 ||
            (r = table_setf(t, res, "count", "0")) < 0 ||
            (r = table_setf(t, res, "replicas", "0")) < 0 ||
            (r = table_setf(t, res, "memory", "0")) < 0)
                return r;
        return 0;
}

static int mig_single(LabelTable *t, const Config *c, const LabelsNvidiaGpu *gpus, size_t n) {
        const LabelsNvidiaGpu *first = NULL, *first_mig_gpu = NULL;
        const LabelsNvidiaMig *mig = NULL;
        size_t count = 0;

        for (size_t i = 0; i < n; i++) {
                if (!mig_enabled(&gpus[i]))
                        continue;
                if (!first)
                        first = &gpus[i];
        }
        if (!first)
                return 0;       /* no MIG: as strategy none */
        for (size_t i = 0; i < n; i++) {
                if (!mig_enabled(&gpus[i]))
                        return mig_invalid(t, first);   /* MIG on and off mixed */
                if (gpus[i].n_migs == 0)
                        return mig_invalid(t, first);   /* MIG on, no device */
                for (size_t k = 0; k < gpus[i].n_migs; k++) {
                        if (!mig) {
                                mig = &gpus[i].migs[k];
                                first_mig_gpu = &gpus[i];
                        } else if (!streq(mig->profile, gpus[i].migs[k].profile))
                                return mig_invalid(t, first);   /* more than one profile */
                        count++;
                }
        }
        return mig_labels(t, c, LABELS_NVIDIA_PREFIX "gpu", strempty(first_mig_gpu->product), mig, count);
}

static int mig_mixed(LabelTable *t, const Config *c, const LabelsNvidiaGpu *gpus, size_t n) {
        int r;

        for (size_t i = 0; i < n; i++)
                for (size_t k = 0; k < gpus[i].n_migs; k++) {
                        _cleanup_free_ char *res = NULL;
                        const LabelsNvidiaMig *mig = &gpus[i].migs[k];
                        bool seen = false;
                        size_t count = 0;

                        if (!mig_enabled(&gpus[i]))
                                continue;
                        /* Once per profile, at its first device. */
                        for (size_t j = 0; j <= i && !seen; j++)
                                for (size_t l = 0; l < (j == i ? k : gpus[j].n_migs); l++)
                                        if (mig_enabled(&gpus[j]) && streq(gpus[j].migs[l].profile, mig->profile)) {
                                                seen = true;
                                                break;
                                        }
                        if (seen)
                                continue;
                        for (size_t j = 0; j < n; j++)
                                for (size_t l = 0; mig_enabled(&gpus[j]) && l < gpus[j].n_migs; l++)
                                        if (streq(gpus[j].migs[l].profile, mig->profile))
                                                count++;
                        if (asprintf(&res, LABELS_NVIDIA_PREFIX "mig-%s", strempty(mig->profile)) < 0)
                                return -ENOMEM;
                        r = mig_labels(t, c, res, strempty(gpus[i].product), mig, count);
                        if (r < 0)
                                return r;
                }
        return 0;
}

static int version_labels(LabelTable *t, const LabelsNvidiaGpu *g) {
        _cleanup_free_ char *d = NULL;
        char *parts[3] = {};
        size_t n = 0;
        unsigned major, minor;
        int r;

        /* Driver "X.Y[.Z]" (GFD refuses anything else; here the labels are left out). */
        if (!isempty(g->driver_version) && strlen(g->driver_version) < 32) {
                d = strdup(g->driver_version);
                if (!d)
                        return -ENOMEM;
                parts[n++] = d;
                for (char *s = d; *s; s++)
                        if (*s == '.') {
                                *s = 0;
                                if (n == 3) {
                                        n = 0;  /* more than three components */
                                        break;
                                }
                                parts[n++] = s + 1;
                        }
                if (n >= 2) {
                        const char *rev = n == 3 ? parts[2] : "";

                        if ((r = table_setf(t, NULL, "nvidia.com/cuda.driver.major", "%s", parts[0])) < 0 ||
                            (r = table_setf(t, NULL, "nvidia.com/cuda.driver.minor", "%s", parts[1])) < 0 ||
                            (r = table_setf(t, NULL, "nvidia.com/cuda.driver.rev", "%s", rev)) < 0 ||
                            (r = table_setf(t, NULL, "nvidia.com/cuda.driver-version.major", "%s", parts[0])) < 0 ||
                            (r = table_setf(t, NULL, "nvidia.com/cuda.driver-version.minor", "%s", parts[1])) < 0 ||
                            (r = table_setf(t, NULL, "nvidia.com/cuda.driver-version.revision", "%s", rev)) < 0 ||
                            (r = table_setf(t, NULL, "nvidia.com/cuda.driver-version.full", "%s", g->driver_version)) < 0)
                                return r;
                }
        }
        if (parse_major_minor(g->cuda_version, &major, &minor) >= 0) {
                if ((r = table_setf(t, NULL, "nvidia.com/cuda.runtime.major", "%u", major)) < 0 ||
                    (r = table_setf(t, NULL, "nvidia.com/cuda.runtime.minor", "%u", minor)) < 0 ||
                    (r = table_setf(t, NULL, "nvidia.com/cuda.runtime-version.major", "%u", major)) < 0 ||
                    (r = table_setf(t, NULL, "nvidia.com/cuda.runtime-version.minor", "%u", minor)) < 0 ||
                    (r = table_setf(t, NULL, "nvidia.com/cuda.runtime-version.full", "%u.%u", major, minor)) < 0)
                        return r;
        }
        return 0;
}

int labels_nvidia_build(const LabelsNvidiaGpu *gpus, size_t n, const Config *c, char ***ret) {
        _cleanup_strv_free_ char **out = NULL;
        _cleanup_(label_table_done) LabelTable t = {};
        ConfigMigStrategy strategy = c ? c->nvidia_mig_strategy : MIG_STRATEGY_NONE;
        const char *sharing_strategy, *mode = NULL;
        bool mig_capable = false, any_mig_on = false;
        int r;

        if (!ret || (n > 0 && !gpus))
                return -EINVAL;
        if (n == 0) {
                out = calloc(1, sizeof(char *));
                if (!out)
                        return -ENOMEM;
                *ret = TAKE_PTR(out);
                return 0;
        }

        r = version_labels(&t, &gpus[0]);
        if (r < 0)
                return r;

        for (size_t i = 0; i < n; i++) {
                const char *m = (gpus[i].pci_class >> 8) == 0x0302 ? "compute" :
                                (gpus[i].pci_class >> 8) == 0x0300 ? "graphics" : "unknown";

                if (!isempty(gpus[i].mig_mode))
                        mig_capable = true;
                if (mig_enabled(&gpus[i]))
                        any_mig_on = true;
                if (!mode)
                        mode = m;
                else if (!streq(mode, m))
                        mode = "unknown";
        }
        (void) config_sharing(c, &sharing_strategy);
        if ((r = table_setf(&t, NULL, "nvidia.com/mig.capable", "%s", mig_capable ? "true" : "false")) < 0 ||
            (r = table_setf(&t, NULL, "nvidia.com/mps.capable", "%s",
                            streq(sharing_strategy, "mps") && !any_mig_on ? "true" : "false")) < 0 ||
            (r = table_setf(&t, NULL, "nvidia.com/gpu.mode", "%s", mode)) < 0)
                return r;

        /* Full GPU labels: MIG-enabled GPUs first (no sharing), then the others, each
         * product name counted over all GPUs of that name. */
        for (int pass = 0; pass < 2; pass++)
                for (size_t i = 0; i < n; i++) {
                        size_t count = 0;

                        if (mig_enabled(&gpus[i]) != (pass == 0))
                                continue;
                        for (size_t j = 0; j < n; j++)
                                if (streq(strempty(gpus[j].product), strempty(gpus[i].product)))
                                        count++;
                        r = gpu_labels(&t, c, &gpus[i], count, pass == 1);
                        if (r < 0)
                                return r;
                }

        if (strategy != MIG_STRATEGY_NONE) {
                r = table_setf(&t, NULL, "nvidia.com/mig.strategy", "%s", strategy == MIG_STRATEGY_SINGLE ? "single" : "mixed");
                if (r < 0)
                        return r;
                r = strategy == MIG_STRATEGY_SINGLE ? mig_single(&t, c, gpus, n) : mig_mixed(&t, c, gpus, n);
                if (r < 0)
                        return r;
        }

        r = label_table_lines(&t, &out);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(out);
        return 0;
}

int labels_nvidia_from_gpus(Gpu * const *gpus, size_t n, const Config *c, char ***ret) {
        _cleanup_free_ LabelsNvidiaGpu *l = NULL;
        LabelsNvidiaMig *migs = NULL;
        size_t k = 0, n_migs = 0, used = 0;
        int r;

        for (size_t i = 0; i < n; i++)
                if (streq(gpus[i]->vendor, "nvidia"))
                        n_migs += gpus[i]->n_mig_devices;
        l = calloc(n + 1, sizeof(LabelsNvidiaGpu));
        migs = calloc(n_migs + 1, sizeof(LabelsNvidiaMig));
        if (!l || !migs) {
                free(migs);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                const Gpu *g = gpus[i];

                if (!streq(g->vendor, "nvidia"))
                        continue;
                if (streq(g->health, GPU_UNHEALTHY) &&
                    (streq(g->health_reason, "gpu-lost") || streq(g->health_reason, "removed")))
                        continue;
                l[k] = (LabelsNvidiaGpu) {
                        .product = g->product,
                        .memory_bytes = g->memory_bytes,
                        .compute_capability = g->compute_capability,
                        .driver_version = g->driver_version,
                        .cuda_version = g->cuda_version,
                        .mig_mode = g->mig_mode,
                        .pci_class = g->pci_class,
                        .migs = migs + used,
                        .n_migs = g->n_mig_devices,
                };
                for (size_t j = 0; j < g->n_mig_devices; j++)
                        migs[used++] = (LabelsNvidiaMig) {
                                .profile = g->mig_devices[j].profile,
                                .memory_bytes = g->mig_devices[j].memory_bytes,
                        };
                k++;
        }
        r = labels_nvidia_build(l, k, c, ret);
        free(migs);
        return r;
}

static int sharing_copy(const ConfigSharing *src, ConfigSharing *dst) {
        dst->rename_by_default = src->rename_by_default;
        dst->fail_requests_greater_than_one = src->fail_requests_greater_than_one;
        if (src->n_resources == 0)
                return 0;
        dst->resources = calloc(src->n_resources, sizeof(ConfigSharedResource));
        if (!dst->resources)
                return -ENOMEM;
        dst->n_resources = src->n_resources;
        for (size_t i = 0; i < src->n_resources; i++) {
                const ConfigSharedResource *s = &src->resources[i];
                ConfigSharedResource *d = &dst->resources[i];

                d->replicas = s->replicas;
                d->memory_bytes = s->memory_bytes;
                if ((s->name && !(d->name = strdup(s->name))) || (s->rename && !(d->rename = strdup(s->rename))) ||
                    (s->devices && !(d->devices = strv_copy(s->devices))))
                        return -ENOMEM;
        }
        return 0;
}

int labels_nvidia_config_copy(const Config *src, Config **ret) {
        _cleanup_(config_freep) Config *c = NULL;
        int r;

        c = calloc(1, sizeof(Config));
        if (!c)
                return -ENOMEM;
        c->nvidia_mig_strategy = src->nvidia_mig_strategy;
        r = sharing_copy(&src->nvidia_time_slicing, &c->nvidia_time_slicing);
        if (r < 0)
                return r;
        r = sharing_copy(&src->nvidia_mps, &c->nvidia_mps);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(c);
        return 0;
}
