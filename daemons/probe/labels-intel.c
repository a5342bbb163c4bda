/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * labels-intel.c — Intel GPU node labels from the GPU list (see labels-intel.h).
 *
 * Labels are gathered in the shared key/value table (labels.h), then printed sorted.
 */

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/labels-intel.h"
#include "daemons/probe/labels.h"

static bool is_alnum_ascii(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

int labels_intel_split(const char *value, size_t max_len, const char *prefix, char ***ret) {
        _cleanup_strv_free_ char **l = NULL;
        const char *rem = value;
        const char *pfx = "";
        int r;

        if (!value || !prefix || max_len <= strlen(prefix))
                return -EINVAL;

        for (;;) {
                _cleanup_free_ char *chunk = NULL;
                size_t left = strlen(rem), cut;

                if (left <= max_len) {
                        if (asprintf(&chunk, "%s%s", pfx, rem) < 0)
                                return -ENOMEM;
                        r = strv_consume(&l, TAKE_PTR(chunk));
                        if (r < 0)
                                return r;
                        break;
                }
                cut = max_len;
                while (cut > 0 && !is_alnum_ascii(rem[cut - 1]))
                        cut--;
                if (cut == 0)
                        return -EINVAL;
                if (asprintf(&chunk, "%s%.*s", pfx, (int) cut, rem) < 0)
                        return -ENOMEM;
                r = strv_consume(&l, TAKE_PTR(chunk));
                if (r < 0)
                        return r;
                rem += cut;
                if (isempty(pfx)) {
                        max_len -= strlen(prefix);
                        pfx = prefix;
                }
        }

        *ret = TAKE_PTR(l);
        return 0;
}

/* name, name2, name3, ... */
static int label_set_split(LabelTable *t, const char *name, const char *value) {
        _cleanup_strv_free_ char **chunks = NULL;
        int r;

        r = labels_intel_split(value, LABELS_INTEL_VALUE_MAX, "Z", &chunks);
        if (r < 0)
                return r;
        for (size_t i = 0; chunks[i]; i++) {
                _cleanup_free_ char *key = NULL;

                if (i == 0)
                        key = strdup(name);
                else if (asprintf(&key, "%s%zu", name, i + 1) < 0)
                        key = NULL;
                if (!key)
                        return -ENOMEM;
                r = label_table_set(t, key, chunks[i]);
                if (r < 0)
                        return r;
        }
        return 0;
}

const char *labels_intel_card_name(const Gpu *g) {
        const char *base;

        if (!g || isempty(g->card_syspath))
                return NULL;
        base = strrchr(g->card_syspath, '/');
        base = base ? base + 1 : g->card_syspath;
        return gpu_node_kind_from_sysname(base) == GPU_NODE_CARD ? base : NULL;
}

int labels_intel_parse_pci_level(const char *s, unsigned *ret) {
        uint32_t v;

        if (isempty(s) || strlen(s) > 8)
                return -EINVAL;
        for (const char *p = s; *p; p++)
                if (!isdigit((unsigned char) *p))
                        return -EINVAL;
        if (safe_atou32(s, &v) < 0)
                return -EINVAL;
        if (v > LABELS_INTEL_PCI_LEVEL_MAX)
                return -ERANGE;
        *ret = v;
        return 0;
}

static int card_cmp(const void *a, const void *b) {
        return strcmp(labels_intel_card_name(*(Gpu * const *) a), labels_intel_card_name(*(Gpu * const *) b));
}

/* The first level components of path starting at the first one named "pci*", joined by
 * "/", or NULL (*ret) when there are fewer. */
static int pci_path_parts(const char *path, unsigned level, char **ret) {
        _cleanup_free_ char *copy = strdup(path), *out = NULL;
        char *state = NULL;
        bool found = false;
        size_t len = 0;

        if (!copy)
                return -ENOMEM;
        out = calloc(1, strlen(path) + 1);
        if (!out)
                return -ENOMEM;
        for (char *w = strtok_r(copy, "/", &state); w && level > 0; w = strtok_r(NULL, "/", &state)) {
                if (!found && startswith(w, "pci"))
                        found = true;
                if (!found)
                        continue;
                if (len > 0)
                        out[len++] = '/';
                memcpy(out + len, w, strlen(w));
                len += strlen(w);
                level--;
        }
        *ret = level == 0 ? TAKE_PTR(out) : NULL;
        return 0;
}

static int add_pci_groups(LabelTable *t, Gpu **gpus, size_t n, unsigned level) {
        _cleanup_strv_free_ char **keys = NULL, **groups = NULL;
        _cleanup_free_ char *value = NULL;
        size_t n_groups = 0;
        int r;

        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *key = NULL, *joined = NULL;
                const char *num = labels_intel_card_name(gpus[i]) + 4;
                size_t j;

                r = pci_path_parts(gpus[i]->card_syspath, level, &key);
                if (r < 0)
                        return r;
                if (!key)
                        continue;
                for (j = 0; j < n_groups; j++)
                        if (streq(keys[j], key))
                                break;
                if (j == n_groups) {
                        r = strv_extend(&keys, key);
                        if (r < 0)
                                return r;
                        r = strv_extend(&groups, num);
                        if (r < 0)
                                return r;
                        n_groups++;
                        continue;
                }
                if (asprintf(&joined, "%s.%s", groups[j], num) < 0)
                        return -ENOMEM;
                free_and_replace(groups[j], joined);
        }
        if (n_groups == 0)
                return 0;

        /* Groups in the order of their sorted keys. */
        for (size_t a = 0; a < n_groups; a++)
                for (size_t b = a + 1; b < n_groups; b++)
                        if (strcmp(keys[b], keys[a]) < 0) {
                                char *x = keys[a], *y = groups[a];

                                keys[a] = keys[b], groups[a] = groups[b];
                                keys[b] = x, groups[b] = y;
                        }
        value = strv_join(groups, "_");
        if (!value)
                return -ENOMEM;
        return label_set_split(t, LABELS_INTEL_PREFIX "pci-groups", value);
}

static int add_numa_map(LabelTable *t, Gpu **gpus, size_t n) {
        _cleanup_strv_free_ char **parts = NULL;
        _cleanup_free_ char *value = NULL;
        int32_t last = -1;
        int r;

        /* Ascending nodes; within a node the GPUs keep their order. */
        for (;;) {
                _cleanup_free_ char *part = NULL;
                int32_t next = INT32_MAX;

                for (size_t i = 0; i < n; i++)
                        if (gpus[i]->numa_node > last && gpus[i]->numa_node < next)
                                next = gpus[i]->numa_node;
                if (next == INT32_MAX)
                        break;
                if (asprintf(&part, "%" PRIi32 "-", next) < 0)
                        return -ENOMEM;
                for (size_t i = 0, k = 0; i < n; i++) {
                        _cleanup_free_ char *p = NULL;

                        if (gpus[i]->numa_node != next)
                                continue;
                        if (asprintf(&p, "%s%s%s", part, k++ ? "." : "", labels_intel_card_name(gpus[i]) + 4) < 0)
                                return -ENOMEM;
                        free_and_replace(part, p);
                }
                r = strv_consume(&parts, TAKE_PTR(part));
                if (r < 0)
                        return r;
                last = next;
        }
        if (strv_length(parts) == 0)
                return 0;
        value = strv_join(parts, "_");
        if (!value)
                return -ENOMEM;
        return label_set_split(t, LABELS_INTEL_PREFIX "numa-gpu-map", value);
}

static size_t count_ids(const LabelsIntelPci *pci, size_t n, uint16_t cls, const uint16_t *ids, size_t n_ids) {
        size_t c = 0;

        for (size_t i = 0; i < n; i++) {
                if ((pci[i].pci_class >> 8) != cls)
                        continue;
                for (size_t k = 0; k < n_ids; k++)
                        if (pci[i].device_id == ids[k]) {
                                c++;
                                break;
                        }
        }
        return c;
}

/* Intel's NFD rules (platform-labeling-rules), in their order. */
static int add_platform_labels(LabelTable *t, const LabelsIntelPci *pci, size_t n) {
        static const uint16_t max_1100[] = { 0x0bda }, max_1550[] = { 0x0bd5 },
                max_series[] = { 0x0bda, 0x0bd5, 0x0bd9, 0x0bdb, 0x0bd7, 0x0bd6, 0x0bd0 },
                flex_170[] = { 0x56c0 }, flex_140[] = { 0x56c1 },
                a_series[] = { 0x56a6, 0x56a5, 0x56a1, 0x56a0, 0x5694, 0x5693, 0x5692, 0x5691,
                               0x5690, 0x56b3, 0x56b2, 0x56a4, 0x56a3, 0x5697, 0x5696, 0x5695,
                               0x56b1, 0x56b0 };
        static const struct {
                uint16_t cls;
                const uint16_t *ids;
                size_t n_ids;
                const char *family, *product;
                bool count;
        } rules[] = {
                { 0x0380, max_1100, ELEMENTSOF(max_1100), NULL, "Max_1100", true },
                { 0x0380, max_1550, ELEMENTSOF(max_1550), NULL, "Max_1550", true },
                { 0x0380, max_series, ELEMENTSOF(max_series), "Max_Series", NULL, false },
                { 0x0380, flex_170, ELEMENTSOF(flex_170), "Flex_Series", "Flex_170", true },
                { 0x0380, flex_140, ELEMENTSOF(flex_140), "Flex_Series", "Flex_140", true },
                { 0x0300, a_series, ELEMENTSOF(a_series), "A_Series", NULL, false },
        };
        int r;

        for (size_t i = 0; i < ELEMENTSOF(rules); i++) {
                size_t c = count_ids(pci, n, rules[i].cls, rules[i].ids, rules[i].n_ids);

                if (c == 0)
                        continue;
                if (rules[i].family && (r = label_table_set(t, LABELS_INTEL_PREFIX "family", rules[i].family)) < 0)
                        return r;
                if (rules[i].product && (r = label_table_set(t, LABELS_INTEL_PREFIX "product", rules[i].product)) < 0)
                        return r;
                if (rules[i].count && (r = label_table_setf(t, LABELS_INTEL_PREFIX "device.count", "%zu", c)) < 0)
                        return r;
        }
        return 0;
}

/* The generic rules: "present" per device id, and per class one "count" named after the
 * first function (in PCI address order) with the number of every function of the class,
 * as NFD's template "device-id.0300-{{ (index .pci.device 0).device }}.count={{ len
 * .pci.device }}" gives it. */
static int add_device_ids(LabelTable *t, const LabelsIntelPci *pci, size_t n) {
        static const unsigned classes[] = { 0x0300, 0x0380 };
        char key[128];
        int r;

        for (size_t c = 0; c < ELEMENTSOF(classes); c++) {
                const LabelsIntelPci *first = NULL;
                size_t count = 0;

                for (size_t i = 0; i < n; i++) {
                        if ((pci[i].pci_class >> 8) != classes[c])
                                continue;
                        if (!first)
                                first = &pci[i];
                        count++;
                        snprintf(key, sizeof(key), LABELS_INTEL_PREFIX "device-id.%04x-%04x.present", classes[c],
                                 (unsigned) pci[i].device_id);
                        r = label_table_set(t, key, "true");
                        if (r < 0)
                                return r;
                }
                if (!first)
                        continue;
                snprintf(key, sizeof(key), LABELS_INTEL_PREFIX "device-id.%04x-%04x.count", classes[c],
                         (unsigned) first->device_id);
                r = label_table_setf(t, key, "%zu", count);
                if (r < 0)
                        return r;
        }
        return 0;
}

int labels_intel_build(Gpu * const *all, size_t n_all, const LabelsIntelPci *pci, size_t n_pci,
                       unsigned pci_grouping_level, char ***ret) {
        _cleanup_(label_table_done) LabelTable t = {};
        _cleanup_free_ Gpu **gpus = NULL;
        _cleanup_strv_free_ char **lines = NULL, **cards = NULL, **nums = NULL;
        _cleanup_free_ char *cards_joined = NULL, *nums_joined = NULL;
        _cleanup_strv_free_ char **cards_chunks = NULL;
        uint64_t memory = 0, tiles = 0;
        size_t n = 0;
        int r;

        gpus = calloc(n_all + 1, sizeof(Gpu *));
        if (!gpus)
                return -ENOMEM;
        for (size_t i = 0; i < n_all; i++)
                if (streq(all[i]->health, GPU_HEALTHY) && labels_intel_card_name(all[i]))
                        gpus[n++] = all[i];
        if (n > 1)
                qsort(gpus, n, sizeof(Gpu *), card_cmp);

        for (size_t i = 0; i < n; i++) {
                const char *card = labels_intel_card_name(gpus[i]);

                tiles += gpus[i]->tiles;
                memory = memory > UINT64_MAX - gpus[i]->memory_bytes ? UINT64_MAX : memory + gpus[i]->memory_bytes;
                if ((r = strv_extend(&cards, card)) < 0 || (r = strv_extend(&nums, card + 4)) < 0)
                        return r;
        }

        /* No Intel GPU, no Intel label: kgpu also runs on nodes with only NVIDIA GPUs, and
         * "gpu.intel.com/tiles=0" there would still select the node for Intel rules. */
        if (n > 0) {
                if ((r = label_table_setf(&t, LABELS_INTEL_PREFIX "tiles", "%" PRIu64, tiles)) < 0 ||
                    (r = label_table_setf(&t, LABELS_INTEL_PREFIX "memory.max", "%" PRIu64, memory)) < 0 ||
                    (r = label_table_setf(&t, LABELS_INTEL_PREFIX "millicores", "%zu", 1000 * n)) < 0)
                        return r;

                cards_joined = strv_join(cards, ".");
                nums_joined = strv_join(nums, ".");
                if (!cards_joined || !nums_joined)
                        return -ENOMEM;
                r = labels_intel_split(cards_joined, LABELS_INTEL_VALUE_MAX, "Z", &cards_chunks);
                if (r < 0)
                        return r;
                r = label_table_set(&t, LABELS_INTEL_PREFIX "cards", cards_chunks[0]);
                if (r < 0)
                        return r;
                r = label_set_split(&t, LABELS_INTEL_PREFIX "gpu-numbers", nums_joined);
                if (r < 0)
                        return r;
                r = add_numa_map(&t, gpus, n);
                if (r < 0)
                        return r;
                if (pci_grouping_level > 0) {
                        r = add_pci_groups(&t, gpus, n, pci_grouping_level);
                        if (r < 0)
                                return r;
                }
        }

        /* NFD's rules see the PCI functions, not the GPUs served: a PF with VFs, a
         * function without DRM nodes or a GPU whose nodes went away still count. */
        r = add_device_ids(&t, pci, n_pci);
        if (r < 0)
                return r;
        r = add_platform_labels(&t, pci, n_pci);
        if (r < 0)
                return r;

        r = label_table_lines(&t, &lines);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(lines);
        return 0;
}
