/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-smi-query.c — parsers of nvidia-smi --query-gpu CSV and nvidia-smi -L (see nvidia-smi.h; shared text handling in nvidia-smi-internal.h).
 */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/nvidia-smi-internal.h"
#include "daemons/probe/nvidia-smi.h"

/* ---- --query-gpu CSV ---- */

typedef enum QueryField {
        QF_IGNORED,
        QF_INDEX,
        QF_UUID,
        QF_NAME,
        QF_MEMORY_TOTAL,
        QF_PCI_BUS_ID,
        QF_PCI_DEVICE_ID,
        QF_COMPUTE_MODE,
        QF_MIG_MODE,
        QF_DRIVER_VERSION,
        QF_COMPUTE_CAP,
} QueryField;

static QueryField query_field_from_name(const char *s) {
        static const char *const names[] = {
                [QF_INDEX] = "index",
                [QF_UUID] = "uuid",
                [QF_NAME] = "name",
                [QF_MEMORY_TOTAL] = "memory.total",
                [QF_PCI_BUS_ID] = "pci.bus_id",
                [QF_PCI_DEVICE_ID] = "pci.device_id",
                [QF_COMPUTE_MODE] = "compute_mode",
                [QF_MIG_MODE] = "mig.mode.current",
                [QF_DRIVER_VERSION] = "driver_version",
                [QF_COMPUTE_CAP] = "compute_cap",
        };

        for (size_t i = 1; i < ELEMENTSOF(names); i++)
                if (strcasecmp(s, names[i]) == 0)
                        return (QueryField) i;
        /* Aliases nvidia-smi accepts for the same values. */
        if (strcasecmp(s, "gpu_name") == 0)
                return QF_NAME;
        if (strcasecmp(s, "gpu_uuid") == 0)
                return QF_UUID;
        if (strcasecmp(s, "gpu_bus_id") == 0)
                return QF_PCI_BUS_ID;
        return QF_IGNORED;
}

/* Splits a header or field list on ',' into field kinds; header names lose " [unit]". */
static int query_fields_parse(char *s, QueryField *f, size_t *ret_n, size_t line, char **ret_error) {
        size_t n = 0;

        for (char *p = s;;) {
                char *c = strchr(p, ','), *name, *u;

                if (c)
                        *c = 0;
                if (n >= NVIDIA_QUERY_FIELDS_MAX)
                        return smi_fail(ret_error, -E2BIG, line, "more than %u fields", NVIDIA_QUERY_FIELDS_MAX);
                name = smi_strip(p);
                u = strchr(name, '[');
                if (u) {
                        if (u[strlen(u) - 1] != ']')
                                return smi_fail(ret_error, -EBADMSG, line, "bad unit in field name '%.64s'", name);
                        *u = 0;
                        name = smi_strip(name);
                }
                if (isempty(name) || strlen(name) > 128 ||
                    strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._") != strlen(name))
                        return smi_fail(ret_error, -EBADMSG, line, "bad field name '%.64s'", name);
                f[n++] = query_field_from_name(name);
                if (!c)
                        break;
                p = c + 1;
        }
        *ret_n = n;
        return 0;
}

static int query_value_apply(NvidiaGpu *g, QueryField f, char *v, bool *seen_index) {
        uint64_t u;
        char *sp;
        int r;

        if (f == QF_IGNORED || smi_is_na(v))
                return 0;

        switch (f) {
        case QF_INDEX: {
                uint32_t i;

                r = smi_parse_small_uint(v, NVIDIA_GPUS_MAX * 16, &i);
                if (r < 0)
                        return r;
                g->index = i;
                *seen_index = true;
                return 0;
        }
        case QF_UUID:
                if (!nvidia_gpu_uuid_is_valid(v))
                        return -EBADMSG;
                return smi_copy_field(g->uuid, sizeof(g->uuid), v);
        case QF_NAME:
                return smi_copy_field(g->name, sizeof(g->name), v);
        case QF_MEMORY_TOTAL:
                sp = strchr(v, ' ');
                if (sp) {
                        if (!streq(sp, " MiB"))
                                return -EBADMSG;
                        *sp = 0;
                }
                if (!isdigit((unsigned char) v[0]) || strlen(v) > 12 || safe_atou64(v, &u) < 0 ||
                    u > (UINT64_C(1) << 30))    /* 1 PiB */
                        return -EBADMSG;
                g->memory_mib = u;
                return 0;
        case QF_PCI_BUS_ID:
                return nvidia_pci_address_normalize(v, g->pci_address);
        case QF_PCI_DEVICE_ID:
                if (!startswith(v, "0x") || strlen(v) < 3 || strlen(v) > 10 || !smi_is_hex_run(v + 2, strlen(v) - 2) ||
                    safe_atou64(v, &u) < 0 || u > UINT32_MAX)
                        return -EBADMSG;
                g->pci_device_id = (uint32_t) u;
                return 0;
        case QF_COMPUTE_MODE:
                return nvidia_compute_mode_from_string(v, &g->compute_mode);
        case QF_MIG_MODE:
                if (strcasecmp(v, "Enabled") == 0)
                        g->mig_mode = NVIDIA_MIG_MODE_ENABLED;
                else if (strcasecmp(v, "Disabled") == 0)
                        g->mig_mode = NVIDIA_MIG_MODE_DISABLED;
                else
                        return -EBADMSG;
                return 0;
        case QF_DRIVER_VERSION:
                sp = strchr(v, ' ');    /* "610.62 [Deprecated; ...]" */
                if (sp)
                        *sp = 0;
                return smi_version_copy(g->driver_version, v);
        case QF_COMPUTE_CAP:
                /* "9.0": major.minor, one or two digits each. */
                if (strlen(v) < 3 || strlen(v) > 5 || !strchr(v, '.') || smi_version_copy(g->compute_cap, v) < 0 ||
                    strchr(v, '.') != strrchr(v, '.') || v[0] == '.' || v[strlen(v) - 1] == '.')
                        return -EBADMSG;
                return 0;
        case QF_IGNORED:
                break;
        }
        return 0;
}

static const char *query_field_name(QueryField f) {
        static const char *const n[] = {
                [QF_IGNORED] = "?", [QF_INDEX] = "index", [QF_UUID] = "uuid", [QF_NAME] = "name",
                [QF_MEMORY_TOTAL] = "memory.total", [QF_PCI_BUS_ID] = "pci.bus_id",
                [QF_PCI_DEVICE_ID] = "pci.device_id", [QF_COMPUTE_MODE] = "compute_mode",
                [QF_MIG_MODE] = "mig.mode.current", [QF_DRIVER_VERSION] = "driver_version",
                [QF_COMPUTE_CAP] = "compute_cap",
        };
        return n[f];
}

/* Lost GPUs are listed, their lines dropped; any other error fails. */
static int query_collect_lost(Lines *l, NvidiaSmiError **lost, size_t *n_lost, char **ret_error) {
        for (size_t k = 0; k < l->n; k++) {
                NvidiaSmiError e;

                if (!smi_classify_line(smi_strip(l->line[k]), &e))
                        continue;
                if (e.kind != NVIDIA_SMI_ERROR_GPU_LOST)
                        return smi_fail(ret_error, nvidia_smi_error_to_errno(e.kind), k + 1, "nvidia-smi: %s",
                                        e.message);
                if (*n_lost >= NVIDIA_GPUS_MAX)
                        return smi_fail(ret_error, -E2BIG, k + 1, "more than %u lost GPUs", NVIDIA_GPUS_MAX);
                if (!*lost) {
                        *lost = calloc(NVIDIA_GPUS_MAX, sizeof(NvidiaSmiError));
                        if (!*lost)
                                return -ENOMEM;
                }
                (*lost)[(*n_lost)++] = e;
                l->line[k][0] = 0;
        }
        return 0;
}

/* One CSV row, a value per field, into g. */
static int query_row_parse(char *p, const QueryField *f, size_t n_fields, NvidiaGpu *g, size_t line,
                           char **ret_error) {
        bool seen_index = false;
        size_t k = 0;

        for (;;) {
                char *c = strchr(p, ','), *v;

                if (c)
                        *c = 0;
                if (k >= n_fields)
                        return smi_fail(ret_error, -EBADMSG, line, "more values than the %zu fields", n_fields);
                v = smi_strip(p);
                if (query_value_apply(g, f[k], v, &seen_index) < 0)
                        return smi_fail(ret_error, -EBADMSG, line, "%s: bad value '%.64s'", query_field_name(f[k]), v);
                k++;
                if (!c)
                        break;
                p = c + 1;
        }
        if (k != n_fields)
                return smi_fail(ret_error, -EBADMSG, line, "%zu values for %zu fields", k, n_fields);
        return 0;
}

static int query_gpu_parse(const char *text, size_t len, const char *fields, bool collect_lost,
                           NvidiaGpu **ret, size_t *ret_n, NvidiaSmiError **ret_lost, size_t *ret_n_lost,
                           char **ret_error) {
        _cleanup_(smi_lines_done) Lines l = {};
        _cleanup_free_ QueryField *f = NULL;
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        _cleanup_free_ NvidiaSmiError *lost = NULL;
        _cleanup_free_ char *fields_copy = NULL;
        size_t n_fields = 0, n = 0, n_lost = 0, i = 0;
        int r;

        r = smi_lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        r = collect_lost ? query_collect_lost(&l, &lost, &n_lost, ret_error) : smi_lines_check_error(&l, ret_error);
        if (r < 0)
                return r;

        f = calloc(NVIDIA_QUERY_FIELDS_MAX, sizeof(QueryField));
        if (!f)
                return -ENOMEM;
        if (fields) {
                if (strlen(fields) > NVIDIA_SMI_LINE_MAX)
                        return smi_fail(ret_error, -E2BIG, 0, "field list too long");
                fields_copy = strdup(fields);
                if (!fields_copy)
                        return -ENOMEM;
                r = query_fields_parse(fields_copy, f, &n_fields, 0, ret_error);
                if (r < 0)
                        return r;
        } else {
                while (i < l.n && isempty(smi_strip(l.line[i])))
                        i++;
                if (i >= l.n)
                        return smi_fail(ret_error, -EBADMSG, 0, "no header line");
                r = query_fields_parse(l.line[i], f, &n_fields, i + 1, ret_error);
                if (r < 0)
                        return r;
                i++;
        }

        for (; i < l.n; i++) {
                NvidiaGpu g = { .index = (uint32_t) n };

                if (isempty(smi_strip(l.line[i])))
                        continue;
                if (n >= NVIDIA_GPUS_MAX)
                        return smi_fail(ret_error, -E2BIG, i + 1, "more than %u GPUs", NVIDIA_GPUS_MAX);
                r = query_row_parse(l.line[i], f, n_fields, &g, i + 1, ret_error);
                if (r < 0)
                        return r;
                for (size_t m = 0; m < n; m++)
                        if (gpus[m].index == g.index)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "GPU index %u listed twice", g.index);

                if (!gpus) {
                        gpus = calloc(NVIDIA_GPUS_MAX, sizeof(NvidiaGpu));
                        if (!gpus)
                                return -ENOMEM;
                }
                gpus[n++] = g;
        }

        if (n == 0 && n_lost == 0)
                return smi_fail(ret_error, -EBADMSG, 0, "no GPU rows");
        *ret = TAKE_PTR(gpus);
        *ret_n = n;
        if (ret_lost)
                *ret_lost = TAKE_PTR(lost);
        if (ret_n_lost)
                *ret_n_lost = n_lost;
        return 0;
}

int nvidia_smi_parse_query_gpu(const char *text, size_t len, const char *fields,
                               NvidiaGpu **ret, size_t *ret_n, char **ret_error) {
        return query_gpu_parse(text, len, fields, false, ret, ret_n, NULL, NULL, ret_error);
}

int nvidia_smi_parse_query_gpu_health(const char *text, size_t len, const char *fields,
                                      NvidiaGpu **ret, size_t *ret_n, NvidiaSmiError **ret_lost,
                                      size_t *ret_n_lost, char **ret_error) {
        if (!ret_lost || !ret_n_lost)
                return -EINVAL;
        return query_gpu_parse(text, len, fields, true, ret, ret_n, ret_lost, ret_n_lost, ret_error);
}

/* ---- nvidia-smi -L ---- */

static int list_parse_gpu_line(char *s, NvidiaGpu *g) {
        char *colon, *u, *name, *uuid;
        uint32_t idx;
        size_t ul;

        /* "GPU <i>: <name> (UUID: GPU-...)" */
        s = (char *) startswith(s, "GPU ");
        if (!s)
                return -EBADMSG;
        colon = strchr(s, ':');
        if (!colon || colon[1] != ' ')
                return -EBADMSG;
        *colon = 0;
        if (smi_parse_small_uint(s, NVIDIA_GPUS_MAX * 16, &idx) < 0)
                return -EBADMSG;
        name = colon + 2;
        u = strstr(name, " (UUID: ");
        if (!u)
                return -EBADMSG;
        *u = 0;
        uuid = u + strlen(" (UUID: ");
        ul = strlen(uuid);
        if (ul < 2 || uuid[ul - 1] != ')')
                return -EBADMSG;
        uuid[ul - 1] = 0;
        name = smi_strip(name);
        if (isempty(name) || !nvidia_gpu_uuid_is_valid(uuid))
                return -EBADMSG;

        *g = (NvidiaGpu) { .index = idx };
        if (smi_copy_field(g->name, sizeof(g->name), name) < 0 || smi_copy_field(g->uuid, sizeof(g->uuid), uuid) < 0)
                return -EBADMSG;
        return 0;
}

bool smi_profile_is_valid(const char *s) {
        size_t l = strlen(s);

        return l > 0 && l < NVIDIA_PROFILE_MAX && isdigit((unsigned char) s[0]) && strstr(s, "g.") &&
               strspn(s, "0123456789abcdefghijklmnopqrstuvwxyz.+") == l;
}

static int list_parse_mig_line(char *s, uint32_t gpu_index, NvidiaMigDevice *m) {
        char *tok[8];
        size_t l;
        uint32_t dev;
        int n;

        /* "MIG 1g.10gb     Device  0: (UUID: MIG-...)" (R450: single spaces). */
        n = smi_tokenize(s, tok, ELEMENTSOF(tok));
        if (n != 6 || !streq(tok[0], "MIG") || !streq(tok[2], "Device") || !streq(tok[4], "(UUID:"))
                return -EBADMSG;
        l = strlen(tok[3]);
        if (l < 2 || tok[3][l - 1] != ':')
                return -EBADMSG;
        tok[3][l - 1] = 0;
        l = strlen(tok[5]);
        if (l < 2 || tok[5][l - 1] != ')')
                return -EBADMSG;
        tok[5][l - 1] = 0;

        *m = (NvidiaMigDevice) { .gpu_index = gpu_index };
        if (smi_parse_small_uint(tok[3], NVIDIA_MIG_DEVICES_MAX, &dev) < 0)
                return -EBADMSG;
        m->device_index = dev;
        if (!smi_profile_is_valid(tok[1]) || smi_copy_field(m->profile, sizeof(m->profile), tok[1]) < 0)
                return -EBADMSG;
        if (smi_mig_uuid_parse(tok[5], &m->gi_id, &m->ci_id) < 0 || smi_copy_field(m->uuid, sizeof(m->uuid), tok[5]) < 0)
                return -EBADMSG;
        return 0;
}

int nvidia_smi_parse_list(const char *text, size_t len,
                          NvidiaGpu **ret_gpus, size_t *ret_n_gpus,
                          NvidiaMigDevice **ret_migs, size_t *ret_n_migs, char **ret_error) {
        _cleanup_(smi_lines_done) Lines l = {};
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        _cleanup_free_ NvidiaMigDevice *migs = NULL;
        size_t n = 0, n_migs = 0, cap_migs = 0;
        int r;

        r = smi_lines_open(text, len, &l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = smi_strip(l.line[i]);

                if (isempty(s))
                        continue;
                if (startswith(s, "GPU ")) {
                        NvidiaGpu g;

                        if (n >= NVIDIA_GPUS_MAX)
                                return smi_fail(ret_error, -E2BIG, i + 1, "more than %u GPUs", NVIDIA_GPUS_MAX);
                        if (list_parse_gpu_line(s, &g) < 0)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "bad GPU line '%.80s'", l.line[i]);
                        for (size_t k = 0; k < n; k++)
                                if (gpus[k].index == g.index || streq(gpus[k].uuid, g.uuid))
                                        return smi_fail(ret_error, -EBADMSG, i + 1, "GPU %u listed twice", g.index);
                        if (!gpus) {
                                gpus = calloc(NVIDIA_GPUS_MAX, sizeof(NvidiaGpu));
                                if (!gpus)
                                        return -ENOMEM;
                        }
                        gpus[n++] = g;
                } else if (startswith(s, "MIG ")) {
                        NvidiaMigDevice m;

                        if (n == 0)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "MIG device before any GPU");
                        if (n_migs >= NVIDIA_MIG_DEVICES_MAX)
                                return smi_fail(ret_error, -E2BIG, i + 1, "more than %u MIG devices",
                                            NVIDIA_MIG_DEVICES_MAX);
                        if (list_parse_mig_line(s, gpus[n - 1].index, &m) < 0)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "bad MIG device line '%.80s'", s);
                        r = array_reserve_bounded((void **) &migs, &cap_migs, n_migs + 1, sizeof(NvidiaMigDevice),
                                                  NVIDIA_MIG_DEVICES_MAX);
                        if (r < 0)
                                return r;
                        for (size_t k = 0; k < n_migs; k++)
                                if (streq(migs[k].uuid, m.uuid) ||
                                    (migs[k].gpu_index == m.gpu_index && migs[k].device_index == m.device_index))
                                        return smi_fail(ret_error, -EBADMSG, i + 1, "MIG device listed twice");
                        migs[n_migs++] = m;
                } else
                        return smi_fail(ret_error, -EBADMSG, i + 1, "unexpected line '%.80s'", s);
        }

        if (n == 0)
                return smi_fail(ret_error, -EBADMSG, 0, "no GPU lines");
        *ret_gpus = TAKE_PTR(gpus);
        *ret_n_gpus = n;
        if (ret_migs)
                *ret_migs = TAKE_PTR(migs);
        if (ret_n_migs)
                *ret_n_migs = n_migs;
        return 0;
}
