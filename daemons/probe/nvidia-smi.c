/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-smi.c — pure parsers for nvidia-smi / nvidia-cuda-mps-control output.
 *
 * See nvidia-smi.h for the contract. Every input is first copied into one buffer that
 * is checked (size, NUL bytes, control characters), stripped of ANSI escapes and CRs,
 * and cut into lines; the format parsers then work on trimmed lines and tokens and copy
 * only validated values into fixed-size fields. The formats are those recorded in
 * tests/data/nvidia/ (drivers R346 to R610).
 */

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/nvidia-smi.h"

typedef struct Lines {
        char *buf;
        char **line;
        size_t n;
} Lines;

static void lines_done(Lines *l) {
        free(l->buf);
        free(l->line);
        *l = (Lines) {};
}

_printf_(4, 5)
static int fail(char **ret_error, int r, size_t line, const char *fmt, ...) {
        _cleanup_free_ char *m = NULL;
        va_list ap;

        if (!ret_error)
                return r;
        va_start(ap, fmt);
        if (vasprintf(&m, fmt, ap) < 0)
                m = NULL;
        va_end(ap);
        if (!m)
                return r;
        free(*ret_error);
        *ret_error = NULL;
        if (line > 0) {
                if (asprintf(ret_error, "line %zu: %s", line, m) < 0)
                        *ret_error = NULL;
        } else
                *ret_error = TAKE_PTR(m);
        return r;
}

/* Copies, validates and splits text into lines (CR before LF dropped, ANSI SGR escapes
 * removed). Tabs are kept: topo -m needs them. */
static int lines_split(const char *text, size_t len, Lines *ret, char **ret_error) {
        _cleanup_free_ char *buf = NULL;
        _cleanup_free_ char **line = NULL;
        size_t n = 0, j = 0, start = 0;

        if (!text && len > 0)
                return -EINVAL;
        if (len > NVIDIA_SMI_OUTPUT_MAX)
                return fail(ret_error, -E2BIG, 0, "output of %zu bytes is over the limit of %u", len,
                            NVIDIA_SMI_OUTPUT_MAX);

        buf = malloc(len + 1);
        if (!buf)
                return -ENOMEM;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char) text[i];

                if (c == 0x1b) {
                        /* CSI: ESC [ parameters final-byte; anything else is garbage. */
                        size_t k = i + 1;

                        if (k >= len || text[k] != '[')
                                return fail(ret_error, -EBADMSG, 0, "stray escape character at byte %zu", i);
                        k++;
                        while (k < len && (isdigit((unsigned char) text[k]) || text[k] == ';') && k - i < 16)
                                k++;
                        if (k >= len || !isalpha((unsigned char) text[k]))
                                return fail(ret_error, -EBADMSG, 0, "bad escape sequence at byte %zu", i);
                        i = k;
                        continue;
                }
                if (c == 0)
                        return fail(ret_error, -EBADMSG, 0, "NUL byte at offset %zu", i);
                if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
                        return fail(ret_error, -EBADMSG, 0, "control character 0x%02x at offset %zu", c, i);
                if (c == 0x7f)
                        return fail(ret_error, -EBADMSG, 0, "control character 0x7f at offset %zu", i);
                if (c == '\r' && (i + 1 >= len || text[i + 1] == '\n'))
                        continue;
                if (c == '\r')
                        return fail(ret_error, -EBADMSG, 0, "bare carriage return at offset %zu", i);
                if (c == '\n')
                        n++;
                buf[j++] = (char) c;
        }
        buf[j] = 0;
        n++;    /* last (maybe empty) line */

        line = calloc(n, sizeof(char *));
        if (!line)
                return -ENOMEM;
        n = 0;
        for (size_t i = 0; i <= j; i++) {
                if (i < j && buf[i] != '\n')
                        continue;
                buf[i] = 0;
                if (i - start > NVIDIA_SMI_LINE_MAX)
                        return fail(ret_error, -E2BIG, n + 1, "line of %zu bytes is over the limit of %u",
                                    i - start, NVIDIA_SMI_LINE_MAX);
                line[n++] = buf + start;
                start = i + 1;
        }
        /* A final newline does not start another line. */
        if (n > 1 && *line[n - 1] == 0)
                n--;

        *ret = (Lines) { .buf = TAKE_PTR(buf), .line = TAKE_PTR(line), .n = n };
        return 0;
}

/* Makes room for element n in a zero-filled array of at most max elements. */
static int array_grow(void **p, size_t *cap, size_t n, size_t size, size_t max) {
        size_t c;
        void *q;

        if (n < *cap)
                return 0;
        c = MIN(MAX(*cap * 2, (size_t) 16), max);
        if (c <= n)
                return -E2BIG;
        q = reallocarray(*p, c, size);
        if (!q)
                return -ENOMEM;
        memset((char *) q + *cap * size, 0, (c - *cap) * size);
        *p = q;
        *cap = c;
        return 0;
}

static bool is_blank(char c) {
        return c == ' ' || c == '\t';
}

static char *strip(char *s) {
        char *e;

        while (is_blank(*s))
                s++;
        e = s + strlen(s);
        while (e > s && is_blank(e[-1]))
                e--;
        *e = 0;
        return s;
}

static bool is_printable(const char *s) {
        for (; *s; s++)
                if ((unsigned char) *s < 0x20 || *s == 0x7f)
                        return false;
        return true;
}

/* Copies a printable string that fits into size bytes. */
static int copy_field(char *dst, size_t size, const char *s) {
        size_t l = strlen(s);

        if (l >= size || !is_printable(s))
                return -EBADMSG;
        memcpy(dst, s, l + 1);
        return 0;
}

/* Splits s in place on blanks into at most max tokens; returns the count or -E2BIG. */
static int tokenize(char *s, char **tok, size_t max) {
        size_t n = 0;

        for (;;) {
                while (is_blank(*s))
                        *s++ = 0;
                if (!*s)
                        return (int) n;
                if (n >= max)
                        return -E2BIG;
                tok[n++] = s;
                while (*s && !is_blank(*s))
                        s++;
        }
}

static bool is_na(const char *s) {
        return isempty(s) || streq(s, "N/A") || streq(s, "[N/A]") || streq(s, "[Not Supported]") ||
               streq(s, "[Function Not Found]") || streq(s, "[Unknown Error]") || streq(s, "Not Supported");
}

static bool is_hex_run(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!isxdigit((unsigned char) s[i]))
                        return false;
        return true;
}

/* 8-4-4-4-12 hex digits at s; returns the length consumed (36) or 0. */
static size_t uuid_body_len(const char *s) {
        static const size_t group[] = { 8, 4, 4, 4, 12 };
        size_t k = 0;

        for (size_t g = 0; g < ELEMENTSOF(group); g++) {
                if (strnlen(s + k, group[g]) < group[g] || !is_hex_run(s + k, group[g]))
                        return 0;
                k += group[g];
                if (g + 1 < ELEMENTSOF(group)) {
                        if (s[k] != '-')
                                return 0;
                        k++;
                }
        }
        return k;
}

bool nvidia_gpu_uuid_is_valid(const char *s) {
        const char *b = startswith(s ?: "", "GPU-");
        size_t k;

        if (!b)
                return false;
        k = uuid_body_len(b);
        return k > 0 && b[k] == 0;
}

static int parse_small_uint(const char *s, uint32_t max, uint32_t *ret) {
        uint32_t v;

        if (isempty(s) || strlen(s) > 10 || !isdigit((unsigned char) s[0]))
                return -EBADMSG;
        if (safe_atou32(s, &v) < 0 || v > max)
                return -EBADMSG;
        *ret = v;
        return 0;
}

/* "MIG-GPU-<uuid>/<gi>/<ci>" -> gi, ci; or "MIG-<uuid>" -> -1, -1. */
static int mig_uuid_parse(const char *s, int32_t *ret_gi, int32_t *ret_ci) {
        const char *b, *p;
        char num[12];
        uint32_t gi, ci;
        size_t k;

        b = startswith(s ?: "", "MIG-");
        if (!b)
                return -EBADMSG;
        p = startswith(b, "GPU-");
        if (!p) {
                k = uuid_body_len(b);
                if (k == 0 || b[k] != 0)
                        return -EBADMSG;
                *ret_gi = *ret_ci = -1;
                return 0;
        }
        k = uuid_body_len(p);
        if (k == 0 || p[k] != '/')
                return -EBADMSG;
        p += k + 1;
        k = strcspn(p, "/");
        if (k == 0 || k >= sizeof(num) || p[k] != '/')
                return -EBADMSG;
        memcpy(num, p, k);
        num[k] = 0;
        if (parse_small_uint(num, 1024, &gi) < 0)
                return -EBADMSG;
        if (parse_small_uint(p + k + 1, 1024, &ci) < 0)
                return -EBADMSG;
        *ret_gi = (int32_t) gi;
        *ret_ci = (int32_t) ci;
        return 0;
}

bool nvidia_mig_uuid_is_valid(const char *s) {
        int32_t gi, ci;

        return mig_uuid_parse(s, &gi, &ci) >= 0;
}

int nvidia_pci_address_normalize(const char *s, char ret[static NVIDIA_PCI_ADDRESS_MAX]) {
        unsigned long domain;
        unsigned bus, dev, fn;
        size_t dl;

        if (isempty(s))
                return -EBADMSG;
        dl = strcspn(s, ":");
        if (dl < 4 || dl > 8 || !is_hex_run(s, dl) || s[dl] != ':')
                return -EBADMSG;
        s += dl + 1;
        if (strlen(s) != 7 || !is_hex_run(s, 2) || s[2] != ':' || !is_hex_run(s + 3, 2) || s[5] != '.' ||
            !is_hex_run(s + 6, 1))
                return -EBADMSG;
        domain = strtoul(s - dl - 1, NULL, 16);
        if (domain > 0xffffffffUL)
                return -EBADMSG;
        bus = (unsigned) strtoul(s, NULL, 16);
        dev = (unsigned) strtoul(s + 3, NULL, 16);
        fn = (unsigned) strtoul(s + 6, NULL, 16);
        if (dev > 0x1f || fn > 7)
                return -EBADMSG;
        (void) snprintf(ret, NVIDIA_PCI_ADDRESS_MAX, "%04lx:%02x:%02x.%x", domain, bus, dev, fn);
        return 0;
}

static int version_copy(char dst[static NVIDIA_VERSION_MAX], const char *s) {
        size_t l = strlen(s);

        if (l == 0 || l >= NVIDIA_VERSION_MAX || !isdigit((unsigned char) s[0]))
                return -EBADMSG;
        for (size_t i = 0; i < l; i++)
                if (!isdigit((unsigned char) s[i]) && s[i] != '.')
                        return -EBADMSG;
        memcpy(dst, s, l + 1);
        return 0;
}

static const char *const compute_mode_table[] = {
        [NVIDIA_COMPUTE_MODE_UNKNOWN] = "Unknown",
        [NVIDIA_COMPUTE_MODE_DEFAULT] = "Default",
        [NVIDIA_COMPUTE_MODE_EXCLUSIVE_THREAD] = "Exclusive_Thread",
        [NVIDIA_COMPUTE_MODE_PROHIBITED] = "Prohibited",
        [NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS] = "Exclusive_Process",
};

const char *nvidia_compute_mode_to_string(NvidiaComputeMode m) {
        if ((size_t) m >= ELEMENTSOF(compute_mode_table))
                return NULL;
        return compute_mode_table[m];
}

int nvidia_compute_mode_from_string(const char *s, NvidiaComputeMode *ret) {
        static const struct {
                const char *name;
                NvidiaComputeMode mode;
        } map[] = {
                { "Default", NVIDIA_COMPUTE_MODE_DEFAULT },
                { "0", NVIDIA_COMPUTE_MODE_DEFAULT },
                { "Exclusive_Thread", NVIDIA_COMPUTE_MODE_EXCLUSIVE_THREAD },
                { "E. Thread", NVIDIA_COMPUTE_MODE_EXCLUSIVE_THREAD },
                { "1", NVIDIA_COMPUTE_MODE_EXCLUSIVE_THREAD },
                { "Prohibited", NVIDIA_COMPUTE_MODE_PROHIBITED },
                { "2", NVIDIA_COMPUTE_MODE_PROHIBITED },
                { "Exclusive_Process", NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS },
                { "E. Process", NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS },
                { "3", NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS },
        };

        if (!s)
                return -EBADMSG;
        for (size_t i = 0; i < ELEMENTSOF(map); i++)
                if (strcasecmp(s, map[i].name) == 0) {
                        *ret = map[i].mode;
                        return 0;
                }
        return -EBADMSG;
}

static const char *const link_table[] = {
        [NVIDIA_LINK_UNKNOWN] = "unknown",
        [NVIDIA_LINK_SELF] = "X",
        [NVIDIA_LINK_NVLINK] = "NV",
        [NVIDIA_LINK_PIX] = "PIX",
        [NVIDIA_LINK_PXB] = "PXB",
        [NVIDIA_LINK_PHB] = "PHB",
        [NVIDIA_LINK_NODE] = "NODE",
        [NVIDIA_LINK_SYS] = "SYS",
};

const char *nvidia_link_type_to_string(NvidiaLinkType t) {
        if ((size_t) t >= ELEMENTSOF(link_table))
                return NULL;
        return link_table[t];
}

/* ---- error outputs ---- */

static bool classify_line(const char *l, NvidiaSmiError *e) {
        const char *p;

        *e = (NvidiaSmiError) {};
        if (startswith(l, "No devices were found"))
                e->kind = NVIDIA_SMI_ERROR_NO_DEVICES;
        else if (strstr(l, "couldn't communicate with the NVIDIA driver"))
                e->kind = NVIDIA_SMI_ERROR_DRIVER;
        else if (startswith(l, "Failed to initialize NVML"))
                e->kind = NVIDIA_SMI_ERROR_NVML;
        else if ((p = startswith(l, "Unable to determine the device handle for GPU")) ||
                 (p = startswith(l, "Unable to detect the device handle for GPU"))) {
                char bus[24];
                size_t k;

                e->kind = NVIDIA_SMI_ERROR_GPU_LOST;
                while (*p == ' ')
                        p++;
                k = strspn(p, "0123456789abcdefABCDEF:.");
                while (k > 0 && p[k - 1] == ':')
                        k--;
                if (k > 0 && k < sizeof(bus)) {
                        memcpy(bus, p, k);
                        bus[k] = 0;
                        (void) nvidia_pci_address_normalize(bus, e->pci_address);
                }
        } else if (strstr(l, "GPU is lost"))
                e->kind = NVIDIA_SMI_ERROR_GPU_LOST;
        else if (startswith(l, "ERROR: Option") || startswith(l, "Invalid combination of input arguments"))
                e->kind = NVIDIA_SMI_ERROR_INVALID_OPTION;
        else
                return false;

        (void) snprintf(e->message, sizeof(e->message), "%s", l);
        return true;
}

int nvidia_smi_error_to_errno(NvidiaSmiErrorKind kind) {
        switch (kind) {
        case NVIDIA_SMI_ERROR_NONE:
                return 0;
        case NVIDIA_SMI_ERROR_NO_DEVICES:
                return -ENODEV;
        case NVIDIA_SMI_ERROR_DRIVER:
        case NVIDIA_SMI_ERROR_NVML:
                return -ENXIO;
        case NVIDIA_SMI_ERROR_GPU_LOST:
                return -EIO;
        case NVIDIA_SMI_ERROR_INVALID_OPTION:
                return -EINVAL;
        }
        return -EIO;
}

/* If any line is a known error output, returns its errno with the tool's words. */
static int lines_check_error(const Lines *l, char **ret_error) {
        NvidiaSmiError e;

        for (size_t i = 0; i < l->n; i++)
                if (classify_line(strip(l->line[i]), &e))
                        return fail(ret_error, nvidia_smi_error_to_errno(e.kind), i + 1, "nvidia-smi: %s", e.message);
        return 0;
}

int nvidia_smi_parse_error(const char *text, size_t len, NvidiaSmiError *ret) {
        _cleanup_(lines_done) Lines l = {};
        int r;

        r = lines_split(text, len, &l, NULL);
        if (r < 0)
                return r;
        for (size_t i = 0; i < l.n; i++) {
                NvidiaSmiError e;

                if (classify_line(strip(l.line[i]), &e)) {
                        *ret = e;
                        return 1;
                }
        }
        *ret = (NvidiaSmiError) {};
        return 0;
}

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
                        return fail(ret_error, -E2BIG, line, "more than %u fields", NVIDIA_QUERY_FIELDS_MAX);
                name = strip(p);
                u = strchr(name, '[');
                if (u) {
                        if (u[strlen(u) - 1] != ']')
                                return fail(ret_error, -EBADMSG, line, "bad unit in field name '%.64s'", name);
                        *u = 0;
                        name = strip(name);
                }
                if (isempty(name) || strlen(name) > 128 ||
                    strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._") != strlen(name))
                        return fail(ret_error, -EBADMSG, line, "bad field name '%.64s'", name);
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

        if (f == QF_IGNORED || is_na(v))
                return 0;

        switch (f) {
        case QF_INDEX: {
                uint32_t i;

                r = parse_small_uint(v, NVIDIA_GPUS_MAX * 16, &i);
                if (r < 0)
                        return r;
                g->index = i;
                *seen_index = true;
                return 0;
        }
        case QF_UUID:
                if (!nvidia_gpu_uuid_is_valid(v))
                        return -EBADMSG;
                return copy_field(g->uuid, sizeof(g->uuid), v);
        case QF_NAME:
                return copy_field(g->name, sizeof(g->name), v);
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
                if (!startswith(v, "0x") || strlen(v) < 3 || strlen(v) > 10 || !is_hex_run(v + 2, strlen(v) - 2) ||
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
                return version_copy(g->driver_version, v);
        case QF_COMPUTE_CAP:
                /* "9.0": major.minor, one or two digits each. */
                if (strlen(v) < 3 || strlen(v) > 5 || !strchr(v, '.') || version_copy(g->compute_cap, v) < 0 ||
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

static int query_gpu_parse(const char *text, size_t len, const char *fields, bool collect_lost,
                           NvidiaGpu **ret, size_t *ret_n, NvidiaSmiError **ret_lost, size_t *ret_n_lost,
                           char **ret_error) {
        _cleanup_(lines_done) Lines l = {};
        _cleanup_free_ QueryField *f = NULL;
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        _cleanup_free_ NvidiaSmiError *lost = NULL;
        _cleanup_free_ char *fields_copy = NULL;
        size_t n_fields = 0, n = 0, n_lost = 0, i = 0;
        int r;

        r = lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        if (collect_lost) {
                /* Lost GPUs are listed, their lines dropped; any other error fails. */
                for (size_t k = 0; k < l.n; k++) {
                        NvidiaSmiError e;

                        if (!classify_line(strip(l.line[k]), &e))
                                continue;
                        if (e.kind != NVIDIA_SMI_ERROR_GPU_LOST)
                                return fail(ret_error, nvidia_smi_error_to_errno(e.kind), k + 1, "nvidia-smi: %s",
                                            e.message);
                        if (n_lost >= NVIDIA_GPUS_MAX)
                                return fail(ret_error, -E2BIG, k + 1, "more than %u lost GPUs", NVIDIA_GPUS_MAX);
                        if (!lost) {
                                lost = calloc(NVIDIA_GPUS_MAX, sizeof(NvidiaSmiError));
                                if (!lost)
                                        return -ENOMEM;
                        }
                        lost[n_lost++] = e;
                        l.line[k][0] = 0;
                }
        } else {
                r = lines_check_error(&l, ret_error);
                if (r < 0)
                        return r;
        }

        f = calloc(NVIDIA_QUERY_FIELDS_MAX, sizeof(QueryField));
        if (!f)
                return -ENOMEM;
        if (fields) {
                if (strlen(fields) > NVIDIA_SMI_LINE_MAX)
                        return fail(ret_error, -E2BIG, 0, "field list too long");
                fields_copy = strdup(fields);
                if (!fields_copy)
                        return -ENOMEM;
                r = query_fields_parse(fields_copy, f, &n_fields, 0, ret_error);
                if (r < 0)
                        return r;
        } else {
                while (i < l.n && isempty(strip(l.line[i])))
                        i++;
                if (i >= l.n)
                        return fail(ret_error, -EBADMSG, 0, "no header line");
                r = query_fields_parse(l.line[i], f, &n_fields, i + 1, ret_error);
                if (r < 0)
                        return r;
                i++;
        }

        for (; i < l.n; i++) {
                NvidiaGpu g = { .index = (uint32_t) n };
                bool seen_index = false;
                size_t k = 0;
                char *p = l.line[i];

                if (isempty(strip(p)))
                        continue;
                if (n >= NVIDIA_GPUS_MAX)
                        return fail(ret_error, -E2BIG, i + 1, "more than %u GPUs", NVIDIA_GPUS_MAX);

                for (;;) {
                        char *c = strchr(p, ','), *v;

                        if (c)
                                *c = 0;
                        if (k >= n_fields)
                                return fail(ret_error, -EBADMSG, i + 1, "more values than the %zu fields", n_fields);
                        v = strip(p);
                        r = query_value_apply(&g, f[k], v, &seen_index);
                        if (r < 0)
                                return fail(ret_error, -EBADMSG, i + 1, "%s: bad value '%.64s'",
                                            query_field_name(f[k]), v);
                        k++;
                        if (!c)
                                break;
                        p = c + 1;
                }
                if (k != n_fields)
                        return fail(ret_error, -EBADMSG, i + 1, "%zu values for %zu fields", k, n_fields);
                for (size_t m = 0; m < n; m++)
                        if (gpus[m].index == g.index)
                                return fail(ret_error, -EBADMSG, i + 1, "GPU index %u listed twice", g.index);

                if (!gpus) {
                        gpus = calloc(NVIDIA_GPUS_MAX, sizeof(NvidiaGpu));
                        if (!gpus)
                                return -ENOMEM;
                }
                gpus[n++] = g;
        }

        if (n == 0 && n_lost == 0)
                return fail(ret_error, -EBADMSG, 0, "no GPU rows");
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
        if (parse_small_uint(s, NVIDIA_GPUS_MAX * 16, &idx) < 0)
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
        name = strip(name);
        if (isempty(name) || !nvidia_gpu_uuid_is_valid(uuid))
                return -EBADMSG;

        *g = (NvidiaGpu) { .index = idx };
        if (copy_field(g->name, sizeof(g->name), name) < 0 || copy_field(g->uuid, sizeof(g->uuid), uuid) < 0)
                return -EBADMSG;
        return 0;
}

static bool profile_is_valid(const char *s) {
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
        n = tokenize(s, tok, ELEMENTSOF(tok));
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
        if (parse_small_uint(tok[3], NVIDIA_MIG_DEVICES_MAX, &dev) < 0)
                return -EBADMSG;
        m->device_index = dev;
        if (!profile_is_valid(tok[1]) || copy_field(m->profile, sizeof(m->profile), tok[1]) < 0)
                return -EBADMSG;
        if (mig_uuid_parse(tok[5], &m->gi_id, &m->ci_id) < 0 || copy_field(m->uuid, sizeof(m->uuid), tok[5]) < 0)
                return -EBADMSG;
        return 0;
}

int nvidia_smi_parse_list(const char *text, size_t len,
                          NvidiaGpu **ret_gpus, size_t *ret_n_gpus,
                          NvidiaMigDevice **ret_migs, size_t *ret_n_migs, char **ret_error) {
        _cleanup_(lines_done) Lines l = {};
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        _cleanup_free_ NvidiaMigDevice *migs = NULL;
        size_t n = 0, n_migs = 0, cap_migs = 0;
        int r;

        r = lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        r = lines_check_error(&l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = strip(l.line[i]);

                if (isempty(s))
                        continue;
                if (startswith(s, "GPU ")) {
                        NvidiaGpu g;

                        if (n >= NVIDIA_GPUS_MAX)
                                return fail(ret_error, -E2BIG, i + 1, "more than %u GPUs", NVIDIA_GPUS_MAX);
                        if (list_parse_gpu_line(s, &g) < 0)
                                return fail(ret_error, -EBADMSG, i + 1, "bad GPU line '%.80s'", l.line[i]);
                        for (size_t k = 0; k < n; k++)
                                if (gpus[k].index == g.index || streq(gpus[k].uuid, g.uuid))
                                        return fail(ret_error, -EBADMSG, i + 1, "GPU %u listed twice", g.index);
                        if (!gpus) {
                                gpus = calloc(NVIDIA_GPUS_MAX, sizeof(NvidiaGpu));
                                if (!gpus)
                                        return -ENOMEM;
                        }
                        gpus[n++] = g;
                } else if (startswith(s, "MIG ")) {
                        NvidiaMigDevice m;

                        if (n == 0)
                                return fail(ret_error, -EBADMSG, i + 1, "MIG device before any GPU");
                        if (n_migs >= NVIDIA_MIG_DEVICES_MAX)
                                return fail(ret_error, -E2BIG, i + 1, "more than %u MIG devices",
                                            NVIDIA_MIG_DEVICES_MAX);
                        if (list_parse_mig_line(s, gpus[n - 1].index, &m) < 0)
                                return fail(ret_error, -EBADMSG, i + 1, "bad MIG device line '%.80s'", s);
                        r = array_grow((void **) &migs, &cap_migs, n_migs, sizeof(NvidiaMigDevice),
                                       NVIDIA_MIG_DEVICES_MAX);
                        if (r < 0)
                                return r;
                        for (size_t k = 0; k < n_migs; k++)
                                if (streq(migs[k].uuid, m.uuid) ||
                                    (migs[k].gpu_index == m.gpu_index && migs[k].device_index == m.device_index))
                                        return fail(ret_error, -EBADMSG, i + 1, "MIG device listed twice");
                        migs[n_migs++] = m;
                } else
                        return fail(ret_error, -EBADMSG, i + 1, "unexpected line '%.80s'", s);
        }

        if (n == 0)
                return fail(ret_error, -EBADMSG, 0, "no GPU lines");
        *ret_gpus = TAKE_PTR(gpus);
        *ret_n_gpus = n;
        if (ret_migs)
                *ret_migs = TAKE_PTR(migs);
        if (ret_n_migs)
                *ret_n_migs = n_migs;
        return 0;
}

/* ---- nvidia-smi -q MIG devices ---- */

static size_t indent_of(const char *s) {
        return strspn(s, " ");
}

/* "Key   : value" -> key, value (both stripped); false when there is no ':'. */
static bool q_key_value(char *s, char **ret_key, char **ret_value) {
        char *c = strchr(s, ':');

        if (!c)
                return false;
        *c = 0;
        *ret_key = strip(s);
        *ret_value = strip(c + 1);
        return true;
}

int nvidia_smi_parse_q_mig_devices(const char *text, size_t len, NvidiaQMigDevice **ret, size_t *ret_n,
                                   char **ret_error) {
        _cleanup_(lines_done) Lines l = {};
        _cleanup_free_ NvidiaQMigDevice *devs = NULL;
        char gpu[NVIDIA_PCI_ADDRESS_MAX] = "";
        bool in_mig = false, in_fb = false, seen_log = false;
        unsigned have = 0;      /* bits: 1 index, 2 gi, 4 ci of the current block */
        size_t n = 0, cap = 0;
        int r;

        r = lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        r = lines_check_error(&l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i <= l.n; i++) {
                char *s = i < l.n ? l.line[i] : (char *) "", *key, *value;
                size_t ind = indent_of(s);
                uint32_t v;

                /* A MIG Device block ends at the next line indented 4 or less. */
                if (in_mig && (i == l.n || (ind <= 4 && !isempty(strip(s))))) {
                        if (have != 7)
                                return fail(ret_error, -EBADMSG, i, "MIG device block without index, GPU and "
                                            "compute instance IDs");
                        in_mig = false;
                }
                if (i == l.n)
                        break;
                s = strip(s);
                if (isempty(s))
                        continue;
                if (strstr(s, "NVSMI LOG"))
                        seen_log = true;
                if (ind == 0 && startswith(s, "GPU ") && !strchr(s + 4, ' ')) {
                        if (nvidia_pci_address_normalize(s + 4, gpu) < 0)
                                return fail(ret_error, -EBADMSG, i + 1, "bad GPU block '%.40s'", s);
                        continue;
                }
                if (ind == 4 && streq(s, "MIG Device")) {
                        if (!gpu[0])
                                return fail(ret_error, -EBADMSG, i + 1, "MIG device outside a GPU block");
                        if (n >= NVIDIA_MIG_DEVICES_MAX)
                                return fail(ret_error, -E2BIG, i + 1, "more than %u MIG devices",
                                            NVIDIA_MIG_DEVICES_MAX);
                        r = array_grow((void **) &devs, &cap, n, sizeof(NvidiaQMigDevice), NVIDIA_MIG_DEVICES_MAX);
                        if (r < 0)
                                return r;
                        memcpy(devs[n].pci_address, gpu, sizeof(gpu));
                        n++;
                        in_mig = true;
                        in_fb = false;
                        have = 0;
                        continue;
                }
                if (!in_mig)
                        continue;
                if (ind == 8)
                        in_fb = streq(s, "FB Memory Usage") || streq(s, "Shared FB Memory Usage");
                if (in_fb && ind == 12 && q_key_value(s, &key, &value) && streq(key, "Total")) {
                        uint64_t mib;
                        char *sp = strchr(value, ' ');

                        /* "40448 MiB"; anything else leaves the size unknown (0). */
                        if (sp && streq(sp, " MiB") && sp - value <= 9 && isdigit((unsigned char) value[0])) {
                                *sp = 0;
                                if (safe_atou64(value, &mib) >= 0)
                                        devs[n - 1].memory_mib = mib;
                        }
                        continue;
                }
                if (ind != 8 || !q_key_value(s, &key, &value))
                        continue;
                if (streq(key, "Index") || streq(key, "GPU Instance ID") || streq(key, "Compute Instance ID")) {
                        if (parse_small_uint(value, 1024, &v) < 0)
                                return fail(ret_error, -EBADMSG, i + 1, "%s: bad value '%.32s'", key, value);
                        if (streq(key, "Index")) {
                                devs[n - 1].device_index = v;
                                have |= 1;
                        } else if (streq(key, "GPU Instance ID")) {
                                devs[n - 1].gi_id = v;
                                have |= 2;
                        } else {
                                devs[n - 1].ci_id = v;
                                have |= 4;
                        }
                }
        }
        if (!seen_log && !gpu[0])
                return fail(ret_error, -EBADMSG, 0, "not nvidia-smi -q output");
        for (size_t a = 0; a < n; a++)
                for (size_t b = a + 1; b < n; b++)
                        if (streq(devs[a].pci_address, devs[b].pci_address) &&
                            (devs[a].device_index == devs[b].device_index ||
                             (devs[a].gi_id == devs[b].gi_id && devs[a].ci_id == devs[b].ci_id)))
                                return fail(ret_error, -EBADMSG, 0, "MIG device %u of GPU %s listed twice",
                                            devs[b].device_index, devs[b].pci_address);

        *ret = TAKE_PTR(devs);
        *ret_n = n;
        return 0;
}

int nvidia_smi_parse_q_gpus(const char *text, size_t len, NvidiaQGpu **ret, size_t *ret_n, char **ret_error) {
        _cleanup_(lines_done) Lines l = {};
        _cleanup_free_ NvidiaQGpu *gpus = NULL;
        bool seen_log = false;
        size_t n = 0, cap = 0;
        int r;

        r = lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        r = lines_check_error(&l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = l.line[i], *key, *value;
                size_t ind = indent_of(s);
                uint32_t v;

                s = strip(s);
                if (isempty(s))
                        continue;
                if (strstr(s, "NVSMI LOG"))
                        seen_log = true;
                if (ind == 0 && startswith(s, "GPU ") && !strchr(s + 4, ' ')) {
                        if (n >= NVIDIA_GPUS_MAX)
                                return fail(ret_error, -E2BIG, i + 1, "more than %u GPUs", NVIDIA_GPUS_MAX);
                        r = array_grow((void **) &gpus, &cap, n, sizeof(NvidiaQGpu), NVIDIA_GPUS_MAX);
                        if (r < 0)
                                return r;
                        gpus[n] = (NvidiaQGpu) { .minor_number = -1 };
                        if (nvidia_pci_address_normalize(s + 4, gpus[n].pci_address) < 0)
                                return fail(ret_error, -EBADMSG, i + 1, "bad GPU block '%.40s'", s);
                        n++;
                        continue;
                }
                if (n == 0 || ind != 4 || !q_key_value(s, &key, &value) || !streq(key, "Minor Number"))
                        continue;
                if (is_na(value))
                        continue;
                if (parse_small_uint(value, 255, &v) < 0)
                        return fail(ret_error, -EBADMSG, i + 1, "Minor Number: bad value '%.32s'", value);
                gpus[n - 1].minor_number = (int32_t) v;
        }
        if (!seen_log && n == 0)
                return fail(ret_error, -EBADMSG, 0, "not nvidia-smi -q output");
        for (size_t a = 0; a < n; a++)
                for (size_t b = a + 1; b < n; b++)
                        if (streq(gpus[a].pci_address, gpus[b].pci_address))
                                return fail(ret_error, -EBADMSG, 0, "GPU %s listed twice", gpus[a].pci_address);

        *ret = TAKE_PTR(gpus);
        *ret_n = n;
        return 0;
}

int nvidia_mig_devices_set_instance_ids(NvidiaMigDevice *migs, size_t n_migs, const NvidiaGpu *gpus,
                                        size_t n_gpus, const NvidiaQMigDevice *q, size_t n_q) {
        int set = 0;

        if ((n_migs > 0 && !migs) || (n_gpus > 0 && !gpus) || (n_q > 0 && !q))
                return -EINVAL;
        for (size_t m = 0; m < n_migs; m++) {
                const NvidiaGpu *g = NULL;
                bool found = false;

                for (size_t k = 0; k < n_gpus && !g; k++)
                        if (gpus[k].index == migs[m].gpu_index && gpus[k].pci_address[0])
                                g = &gpus[k];
                if (!g)
                        return -ENXIO;
                for (size_t k = 0; k < n_q && !found; k++)
                        if (streq(q[k].pci_address, g->pci_address) && q[k].device_index == migs[m].device_index) {
                                if ((migs[m].gi_id >= 0 && (uint32_t) migs[m].gi_id != q[k].gi_id) ||
                                    (migs[m].ci_id >= 0 && (uint32_t) migs[m].ci_id != q[k].ci_id))
                                        return -ENXIO;  /* R450 UUIDs carry the IDs: they must agree */
                                migs[m].gi_id = (int32_t) q[k].gi_id;
                                migs[m].ci_id = (int32_t) q[k].ci_id;
                                found = true;
                        }
                if (!found)
                        return -ENXIO;
                set++;
        }
        return set;
}

/* ---- nvidia-smi mig -lgip ---- */

/* "9.50" (GiB, up to two decimals) -> MiB. */
static int gib_to_mib(const char *s, uint64_t *ret) {
        const char *dot = strchr(s, '.');
        char whole[8] = "";
        uint32_t w, frac = 0;
        size_t wl = dot ? (size_t) (dot - s) : strlen(s);

        if (wl == 0 || wl >= sizeof(whole))
                return -EBADMSG;
        memcpy(whole, s, wl);
        if (parse_small_uint(whole, 1U << 20, &w) < 0)
                return -EBADMSG;
        if (dot) {
                size_t fl = strlen(dot + 1);

                if (fl < 1 || fl > 2 || strspn(dot + 1, "0123456789") != fl)
                        return -EBADMSG;
                frac = (uint32_t) strtoul(dot + 1, NULL, 10) * (fl == 1 ? 10 : 1);
        }
        *ret = (uint64_t) w * 1024 + (uint64_t) frac * 1024 / 100;
        return 0;
}

int nvidia_smi_parse_mig_profiles(const char *text, size_t len, NvidiaMigProfile **ret, size_t *ret_n,
                                  char **ret_error) {
        _cleanup_(lines_done) Lines l = {};
        _cleanup_free_ NvidiaMigProfile *p = NULL;
        bool seen_title = false, seen_rule = false;
        size_t n = 0, cap = 0;
        int r;

        r = lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        r = lines_check_error(&l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = strip(l.line[i]), *tok[12], *slash;
                NvidiaMigProfile m = {};
                size_t sl = strlen(s);
                int nt;

                if (isempty(s))
                        continue;
                if (s[0] == '+') {
                        if (strspn(s, "+-") != sl)
                                return fail(ret_error, -EBADMSG, i + 1, "bad border line");
                        continue;
                }
                if (s[0] != '|' || sl < 2 || s[sl - 1] != '|')
                        return fail(ret_error, -EBADMSG, i + 1, "unexpected line '%.80s'", s);
                s[sl - 1] = 0;
                s = strip(s + 1);
                if (s[0] == '=') {
                        if (strspn(s, "=") != strlen(s) || !seen_title)
                                return fail(ret_error, -EBADMSG, i + 1, "bad rule line");
                        seen_rule = true;
                        continue;
                }
                if (!seen_rule) {
                        if (startswith(s, "GPU instance profiles:"))
                                seen_title = true;
                        else if (!seen_title)
                                return fail(ret_error, -EBADMSG, i + 1, "not a GPU instance profile table");
                        continue;
                }

                nt = tokenize(s, tok, ELEMENTSOF(tok));
                if (nt >= 1 && nt <= 3)
                        continue;       /* second line of a row: CE JPEG [OFA] */
                if (nt != 10 || !streq(tok[1], "MIG"))
                        return fail(ret_error, -EBADMSG, i + 1, "%d columns in a profile row", nt);
                if (parse_small_uint(tok[0], NVIDIA_GPUS_MAX * 16, &m.gpu_index) < 0)
                        return fail(ret_error, -EBADMSG, i + 1, "bad GPU index");
                if (!profile_is_valid(tok[2]))
                        return fail(ret_error, -EBADMSG, i + 1, "bad profile name");
                (void) copy_field(m.profile, sizeof(m.profile), tok[2]);
                if (parse_small_uint(tok[3], 1024, &m.profile_id) < 0)
                        return fail(ret_error, -EBADMSG, i + 1, "bad profile id");
                slash = strchr(tok[4], '/');
                if (!slash)
                        return fail(ret_error, -EBADMSG, i + 1, "bad instance count");
                *slash = 0;
                if (parse_small_uint(tok[4], 64, &m.free) < 0 || parse_small_uint(slash + 1, 64, &m.total) < 0 ||
                    m.free > m.total)
                        return fail(ret_error, -EBADMSG, i + 1, "bad instance count");
                if (gib_to_mib(tok[5], &m.memory_mib) < 0)
                        return fail(ret_error, -EBADMSG, i + 1, "bad memory '%.16s'", tok[5]);
                if (streq(tok[6], "Yes"))
                        m.p2p = true;
                else if (!streq(tok[6], "No"))
                        return fail(ret_error, -EBADMSG, i + 1, "bad P2P '%.16s'", tok[6]);
                if (parse_small_uint(tok[7], 1024, &m.sm) < 0)
                        return fail(ret_error, -EBADMSG, i + 1, "bad SM count");

                for (size_t j = 0; j < n; j++)
                        if (p[j].gpu_index == m.gpu_index && p[j].profile_id == m.profile_id)
                                return fail(ret_error, -EBADMSG, i + 1, "profile %u listed twice", m.profile_id);
                r = array_grow((void **) &p, &cap, n, sizeof(NvidiaMigProfile), NVIDIA_MIG_DEVICES_MAX);
                if (r < 0)
                        return fail(ret_error, r, i + 1, "too many profiles");
                p[n++] = m;
        }

        if (!seen_rule || n == 0)
                return fail(ret_error, -EBADMSG, 0, "no GPU instance profile table");
        *ret = TAKE_PTR(p);
        *ret_n = n;
        return 0;
}

/* ---- nvidia-smi mig -lgi / -lci ---- */

static int placement_parse(char *s, uint32_t *ret_start, uint32_t *ret_size) {
        char *c = strchr(s, ':');

        if (!c)
                return -EBADMSG;
        *c = 0;
        if (parse_small_uint(s, 64, ret_start) < 0 || parse_small_uint(c + 1, 64, ret_size) < 0 || *ret_size == 0)
                return -EBADMSG;
        return 0;
}

int nvidia_smi_parse_mig_instances(const char *text, size_t len, bool compute_instances,
                                   NvidiaMigInstance **ret, size_t *ret_n, char **ret_error) {
        _cleanup_(lines_done) Lines l = {};
        _cleanup_free_ NvidiaMigInstance *inst = NULL;
        const char *title = compute_instances ? "Compute instances:" : "GPU instances:";
        const char *none = compute_instances ? "No compute instances found" : "No GPU instances found";
        bool seen_title = false, seen_rule = false;
        size_t n = 0, cap = 0;
        int r;

        r = lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        r = lines_check_error(&l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = strip(l.line[i]), *tok[10];
                NvidiaMigInstance m = { .ci_id = -1 };
                size_t sl = strlen(s), k = 0;
                uint32_t ci;
                int nt;

                if (isempty(s))
                        continue;
                if (startswith(s, none)) {
                        if (seen_title)
                                return fail(ret_error, -EBADMSG, i + 1, "'%s' after a table", none);
                        *ret = NULL;
                        *ret_n = 0;
                        return 0;
                }
                if (s[0] == '+') {
                        if (strspn(s, "+-") != sl)
                                return fail(ret_error, -EBADMSG, i + 1, "bad border line");
                        continue;
                }
                if (s[0] != '|' || sl < 2 || s[sl - 1] != '|')
                        return fail(ret_error, -EBADMSG, i + 1, "unexpected line '%.80s'", s);
                s[sl - 1] = 0;
                s = strip(s + 1);
                if (s[0] == '=') {
                        if (strspn(s, "=") != strlen(s) || !seen_title)
                                return fail(ret_error, -EBADMSG, i + 1, "bad rule line");
                        seen_rule = true;
                        continue;
                }
                if (!seen_rule) {
                        /* Title and header lines. */
                        if (startswith(s, title))
                                seen_title = true;
                        else if (!seen_title)
                                return fail(ret_error, -EBADMSG, i + 1, "not a '%s' table", title);
                        continue;
                }

                nt = tokenize(s, tok, ELEMENTSOF(tok));
                if (nt < 0)
                        return fail(ret_error, -EBADMSG, i + 1, "too many columns");
                if (nt != (compute_instances ? 7 : 6) && nt != (compute_instances ? 6 : 5))
                        return fail(ret_error, -EBADMSG, i + 1, "%d columns in a table row", nt);
                if (parse_small_uint(tok[k++], NVIDIA_GPUS_MAX * 16, &m.gpu_index) < 0)
                        return fail(ret_error, -EBADMSG, i + 1, "bad GPU index");
                if (compute_instances && parse_small_uint(tok[k++], 1024, &m.gi_id) < 0)
                        return fail(ret_error, -EBADMSG, i + 1, "bad GPU instance id");
                if (streq(tok[k], "MIG"))
                        k++;
                if ((size_t) nt - k != 4 || !profile_is_valid(tok[k]))
                        return fail(ret_error, -EBADMSG, i + 1, "bad profile name");
                (void) copy_field(m.profile, sizeof(m.profile), tok[k++]);
                if (parse_small_uint(tok[k++], 1024, &m.profile_id) < 0)
                        return fail(ret_error, -EBADMSG, i + 1, "bad profile id");
                if (compute_instances) {
                        if (parse_small_uint(tok[k++], 1024, &ci) < 0)
                                return fail(ret_error, -EBADMSG, i + 1, "bad compute instance id");
                        m.ci_id = (int32_t) ci;
                } else if (parse_small_uint(tok[k++], 1024, &m.gi_id) < 0)
                        return fail(ret_error, -EBADMSG, i + 1, "bad instance id");
                if (placement_parse(tok[k], &m.placement_start, &m.placement_size) < 0)
                        return fail(ret_error, -EBADMSG, i + 1, "bad placement");

                if (n >= NVIDIA_MIG_DEVICES_MAX)
                        return fail(ret_error, -E2BIG, i + 1, "more than %u instances", NVIDIA_MIG_DEVICES_MAX);
                for (size_t j = 0; j < n; j++)
                        if (inst[j].gpu_index == m.gpu_index && inst[j].gi_id == m.gi_id && inst[j].ci_id == m.ci_id)
                                return fail(ret_error, -EBADMSG, i + 1, "instance listed twice");
                r = array_grow((void **) &inst, &cap, n, sizeof(NvidiaMigInstance), NVIDIA_MIG_DEVICES_MAX);
                if (r < 0)
                        return r;
                inst[n++] = m;
        }

        if (!seen_title || !seen_rule)
                return fail(ret_error, -EBADMSG, 0, "no '%s' table", title);
        *ret = TAKE_PTR(inst);
        *ret_n = n;
        return 0;
}

/* ---- nvidia-smi topo -m ---- */

/* Parses one link word at s ("X", "NV12", "SYS", ...); returns its length or 0. */
static size_t link_word(const char *s, NvidiaLink *ret) {
        static const struct {
                const char *w;
                NvidiaLinkType t;
        } words[] = {
                { "X", NVIDIA_LINK_SELF }, { "PIX", NVIDIA_LINK_PIX }, { "PXB", NVIDIA_LINK_PXB },
                { "PHB", NVIDIA_LINK_PHB }, { "NODE", NVIDIA_LINK_NODE }, { "SYS", NVIDIA_LINK_SYS },
        };

        if (s[0] == 'N' && s[1] == 'V' && isdigit((unsigned char) s[2])) {
                unsigned v = 0;
                size_t k = 2;

                while (isdigit((unsigned char) s[k]) && k < 5)
                        v = v * 10 + (unsigned) (s[k++] - '0');
                if (v == 0 || v > 255)
                        return 0;
                *ret = (NvidiaLink) { .type = NVIDIA_LINK_NVLINK, .nvlinks = (uint8_t) v };
                return k;
        }
        for (size_t i = 0; i < ELEMENTSOF(words); i++) {
                size_t wl = strlen(words[i].w);

                if (strncmp(s, words[i].w, wl) == 0) {
                        *ret = (NvidiaLink) { .type = (uint8_t) words[i].t };
                        return wl;
                }
        }
        return 0;
}

/* A whole cell that is one link value. */
static bool link_cell(const char *s, NvidiaLink *ret) {
        size_t k = link_word(s, ret);

        return k > 0 && s[k] == 0;
}

/* NIC cells can be glued together in real output ("NODENODE"). */
static bool link_cells_glued(const char *s) {
        NvidiaLink dummy;

        if (isempty(s))
                return false;
        while (*s) {
                size_t k = link_word(s, &dummy);

                if (k == 0)
                        return false;
                s += k;
        }
        return true;
}

static bool cpu_list_is_valid(const char *s) {
        size_t l = strlen(s);

        return l > 0 && l < NVIDIA_CPU_AFFINITY_MAX && isdigit((unsigned char) s[0]) &&
               strspn(s, "0123456789,-") == l;
}

static int numa_parse(const char *s, int32_t *ret) {
        uint32_t v;

        if (is_na(s)) {
                *ret = -1;
                return 0;
        }
        if (parse_small_uint(s, 4095, &v) < 0)
                return -EBADMSG;
        *ret = (int32_t) v;
        return 0;
}

/* "GPU<n>" -> n. */
static int gpu_label(const char *s, uint32_t *ret) {
        const char *p = startswith(s, "GPU");

        if (!p || !isdigit((unsigned char) *p))
                return -EBADMSG;
        return parse_small_uint(p, NVIDIA_GPUS_MAX * 16, ret);
}

int nvidia_smi_parse_topology(const char *text, size_t len, NvidiaTopology **ret, char **ret_error) {
        _cleanup_(lines_done) Lines l = {};
        _cleanup_free_ NvidiaTopology *t = NULL;
        _cleanup_free_ char **tok = NULL;
        bool header = false, seen[NVIDIA_GPUS_MAX] = {};
        int r;

        r = lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        r = lines_check_error(&l, ret_error);
        if (r < 0)
                return r;

        t = calloc(1, sizeof(NvidiaTopology));
        tok = calloc(NVIDIA_TOPO_COLUMNS_MAX + 8, sizeof(char *));
        if (!t || !tok)
                return -ENOMEM;

        for (size_t i = 0; i < l.n; i++) {
                char *raw = l.line[i], *s;
                uint32_t g, v;
                int nt;

                s = strip(raw);
                if (isempty(s))
                        continue;
                if (streq(s, "Legend:"))
                        break;

                if (!header) {
                        /* GPU0 GPU1 ... [NIC0 ...] CPU Affinity [NUMA Affinity] [GPU NUMA ID] */
                        nt = tokenize(s, tok, NVIDIA_TOPO_COLUMNS_MAX + 8);
                        if (nt < 0)
                                return fail(ret_error, -E2BIG, i + 1, "more than %u columns", NVIDIA_TOPO_COLUMNS_MAX);
                        for (int k = 0; k < nt && gpu_label(tok[k], &v) >= 0; k++) {
                                if (v != (uint32_t) k)
                                        return fail(ret_error, -EBADMSG, i + 1, "column %d is '%.16s'", k, tok[k]);
                                if ((uint32_t) k >= NVIDIA_GPUS_MAX)
                                        return fail(ret_error, -E2BIG, i + 1, "more than %u GPUs", NVIDIA_GPUS_MAX);
                                t->n_gpus++;
                        }
                        if (t->n_gpus == 0)
                                return fail(ret_error, -EBADMSG, i + 1, "no GPU columns in the header");
                        header = true;
                        continue;
                }

                {
                        char label[16];
                        size_t ll = strcspn(s, " \t");

                        if (ll >= sizeof(label))
                                continue;
                        memcpy(label, s, ll);
                        label[ll] = 0;
                        if (gpu_label(label, &g) < 0)
                                continue;       /* NIC rows and other rows */
                }
                if (g >= t->n_gpus)
                        return fail(ret_error, -EBADMSG, i + 1, "row GPU%u but only %u GPU columns", g, t->n_gpus);
                if (seen[g])
                        return fail(ret_error, -EBADMSG, i + 1, "row GPU%u twice", g);
                seen[g] = true;

                if (strchr(s, '\t')) {
                        /* Raw output: cells are tab-separated and may be empty. */
                        size_t n = 0, k, rest;
                        char *p = s;

                        for (;;) {
                                char *c = strchr(p, '\t');

                                if (n >= NVIDIA_TOPO_COLUMNS_MAX + 8)
                                        return fail(ret_error, -E2BIG, i + 1, "too many cells");
                                if (c)
                                        *c = 0;
                                tok[n++] = strip(p);
                                if (!c)
                                        break;
                                p = c + 1;
                        }
                        if (n < 1 + t->n_gpus)
                                return fail(ret_error, -EBADMSG, i + 1, "row GPU%u has %zu cells", g, n);
                        for (k = 0; k < t->n_gpus; k++)
                                if (!link_cell(tok[1 + k], &t->link[g][k]))
                                        return fail(ret_error, -EBADMSG, i + 1, "bad link '%.16s'", tok[1 + k]);
                        rest = 1 + t->n_gpus;
                        while (rest < n && link_cells_glued(tok[rest]))
                                rest++;
                        if (rest < n && !isempty(tok[rest])) {
                                if (!cpu_list_is_valid(tok[rest]) && !is_na(tok[rest]))
                                        return fail(ret_error, -EBADMSG, i + 1, "bad CPU affinity '%.32s'", tok[rest]);
                                if (cpu_list_is_valid(tok[rest]))
                                        strcpy(t->cpu_affinity[g], tok[rest]);
                        }
                        rest++;
                        t->numa_node[g] = -1;
                        if (rest < n && numa_parse(tok[rest], &t->numa_node[g]) < 0)
                                return fail(ret_error, -EBADMSG, i + 1, "bad NUMA affinity '%.32s'", tok[rest]);
                } else {
                        /* Copies with tabs expanded: blank-separated, empty cells invisible. */
                        int k;

                        nt = tokenize(s, tok, NVIDIA_TOPO_COLUMNS_MAX + 8);
                        if (nt < 0)
                                return fail(ret_error, -E2BIG, i + 1, "too many cells");
                        if ((uint32_t) nt < 1 + t->n_gpus)
                                return fail(ret_error, -EBADMSG, i + 1, "row GPU%u has %d cells", g, nt);
                        for (uint32_t c = 0; c < t->n_gpus; c++)
                                if (!link_cell(tok[1 + c], &t->link[g][c]))
                                        return fail(ret_error, -EBADMSG, i + 1, "bad link '%.16s'", tok[1 + c]);
                        k = 1 + (int) t->n_gpus;
                        while (k < nt && link_cells_glued(tok[k]))
                                k++;
                        t->numa_node[g] = -1;
                        if (k < nt && cpu_list_is_valid(tok[k]))
                                strcpy(t->cpu_affinity[g], tok[k++]);
                        if (k < nt && numa_parse(tok[k], &t->numa_node[g]) < 0)
                                return fail(ret_error, -EBADMSG, i + 1, "bad NUMA affinity '%.32s'", tok[k]);
                }
                if (t->link[g][g].type != NVIDIA_LINK_SELF)
                        return fail(ret_error, -EBADMSG, i + 1, "GPU%u is not X to itself", g);
        }

        if (!header)
                return fail(ret_error, -EBADMSG, 0, "no topology header");
        for (uint32_t g = 0; g < t->n_gpus; g++) {
                if (!seen[g])
                        return fail(ret_error, -EBADMSG, 0, "no row for GPU%u", g);
                for (uint32_t h = 0; h < t->n_gpus; h++)
                        if ((t->link[g][h].type == NVIDIA_LINK_SELF) != (g == h))
                                return fail(ret_error, -EBADMSG, 0, "X off the diagonal at GPU%u/GPU%u", g, h);
        }

        *ret = TAKE_PTR(t);
        return 0;
}

/* ---- versions ---- */

/* Finds "<key>" followed by blanks, ':' and blanks; copies the next token. */
static int find_key_token(char *line, const char *key, char dst[static NVIDIA_VERSION_MAX]) {
        char *p = strstr(line, key), tokbuf[NVIDIA_VERSION_MAX];
        size_t k;

        if (!p)
                return 0;
        p += strlen(key);
        while (is_blank(*p))
                p++;
        if (*p != ':')
                return 0;
        p++;
        while (is_blank(*p))
                p++;
        k = strcspn(p, " \t|");
        if (k == 0 || k >= sizeof(tokbuf))
                return -EBADMSG;
        memcpy(tokbuf, p, k);
        tokbuf[k] = 0;
        if (version_copy(dst, tokbuf) < 0)
                return -EBADMSG;
        return 1;
}

int nvidia_smi_parse_versions(const char *text, size_t len, NvidiaVersions *ret, char **ret_error) {
        _cleanup_(lines_done) Lines l = {};
        NvidiaVersions v = {};
        char kmd[NVIDIA_VERSION_MAX] = "", umd[NVIDIA_VERSION_MAX] = "";
        int r;

        r = lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        r = lines_check_error(&l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = l.line[i];

                if (!v.driver[0] && (r = find_key_token(s, "Driver Version", v.driver)) < 0)
                        return fail(ret_error, r, i + 1, "bad driver version");
                if (!kmd[0] && (r = find_key_token(s, "KMD Version", kmd)) < 0)
                        return fail(ret_error, r, i + 1, "bad KMD version");
                if (!v.cuda[0] && (r = find_key_token(s, "CUDA Version", v.cuda)) < 0)
                        return fail(ret_error, r, i + 1, "bad CUDA version");
                if (!umd[0] && (r = find_key_token(s, "CUDA UMD Version", umd)) < 0)
                        return fail(ret_error, r, i + 1, "bad CUDA UMD version");
        }
        if (!v.driver[0])
                memcpy(v.driver, kmd, sizeof(kmd));
        if (!v.cuda[0])
                memcpy(v.cuda, umd, sizeof(umd));
        if (!v.driver[0])
                return fail(ret_error, -EBADMSG, 0, "no driver version");

        *ret = v;
        return 0;
}

/* ---- compute mode reply ---- */

int nvidia_smi_parse_compute_mode_reply(const char *text, size_t len, NvidiaComputeMode *ret_mode,
                                        char **ret_error) {
        _cleanup_(lines_done) Lines l = {};
        NvidiaComputeMode mode = NVIDIA_COMPUTE_MODE_UNKNOWN;
        bool done = false;
        int r;

        r = lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        r = lines_check_error(&l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = strip(l.line[i]), *p, *e;

                if (isempty(s))
                        continue;
                if ((p = (char *) startswith(s, "Set compute mode to ")) ||
                    (p = (char *) startswith(s, "Compute mode is already set to "))) {
                        e = strstr(p, " for GPU ");
                        if (!e)
                                return fail(ret_error, -EBADMSG, i + 1, "no GPU in '%.80s'", s);
                        *e = 0;
                        if (nvidia_compute_mode_from_string(p, &mode) < 0)
                                return fail(ret_error, -EBADMSG, i + 1, "unknown compute mode '%.32s'", p);
                } else if (startswith(s, "Setting compute mode to ") && strstr(s, "is not supported")) {
                        return fail(ret_error, -EOPNOTSUPP, i + 1, "%s", s);
                } else if (startswith(s, "Unable to set the compute mode")) {
                        return fail(ret_error, strstr(s, "Not Supported") ? -EOPNOTSUPP : -EIO, i + 1, "%s", s);
                } else if (streq(s, "All done.")) {
                        done = true;
                } else if (!startswith(s, "Treating as warning") && !startswith(s, "Warning:"))
                        return fail(ret_error, -EBADMSG, i + 1, "unexpected line '%.80s'", s);
        }
        if (mode == NVIDIA_COMPUTE_MODE_UNKNOWN || !done)
                return fail(ret_error, -EBADMSG, 0, "no confirmation of the compute mode");
        *ret_mode = mode;
        return 0;
}

int nvidia_smi_parse_compute_mode_query(const char *text, size_t len, NvidiaComputeMode *ret_mode,
                                        char **ret_error) {
        _cleanup_(lines_done) Lines l = {};
        NvidiaComputeMode mode = NVIDIA_COMPUTE_MODE_UNKNOWN;
        size_t n = 0;
        int r;

        r = lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        r = lines_check_error(&l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = strip(l.line[i]);

                if (isempty(s))
                        continue;
                if (++n > 1)
                        return fail(ret_error, -EBADMSG, i + 1, "more than one GPU in the answer");
                if (nvidia_compute_mode_from_string(s, &mode) < 0)
                        return fail(ret_error, -EBADMSG, i + 1, "unknown compute mode '%.32s'", s);
        }
        if (mode == NVIDIA_COMPUTE_MODE_UNKNOWN)
                return fail(ret_error, -EBADMSG, 0, "no compute mode in the answer");
        *ret_mode = mode;
        return 0;
}

/* ---- nvidia-cuda-mps-control ---- */

int nvidia_mps_parse_reply(const char *text, size_t len, char **ret_error) {
        _cleanup_(lines_done) Lines l = {};
        int r;

        r = lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        for (size_t i = 0; i < l.n; i++) {
                char *s = strip(l.line[i]);

                if (isempty(s))
                        continue;
                if (startswith(s, "Cannot find MPS control daemon process"))
                        return fail(ret_error, -ESRCH, i + 1, "%s", s);
                if (startswith(s, "An instance of this daemon is already running"))
                        return fail(ret_error, -EEXIST, i + 1, "%s", s);
                return fail(ret_error, -EBADMSG, i + 1, "unexpected answer '%.80s'", s);
        }
        return 0;
}

int nvidia_mps_parse_percentage_reply(const char *text, size_t len, uint32_t *ret_tenths, char **ret_error) {
        _cleanup_(lines_done) Lines l = {};
        bool found = false;
        uint32_t tenths = 0;
        int r;

        r = lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        for (size_t i = 0; i < l.n; i++) {
                char *s = strip(l.line[i]), *dot;
                uint32_t whole, frac = 0;

                if (isempty(s))
                        continue;
                if (startswith(s, "Cannot find MPS control daemon process"))
                        return fail(ret_error, -ESRCH, i + 1, "%s", s);
                if (found)
                        return fail(ret_error, -EBADMSG, i + 1, "unexpected answer '%.80s'", s);
                /* "<whole>[.<one digit>]", at most 100.0 */
                dot = strchr(s, '.');
                if (dot) {
                        if (!isdigit((unsigned char) dot[1]) || dot[2] != 0)
                                return fail(ret_error, -EBADMSG, i + 1, "unexpected answer '%.80s'", s);
                        frac = (uint32_t) (dot[1] - '0');
                        *dot = 0;
                }
                if (parse_small_uint(s, 100, &whole) < 0 || (whole == 100 && frac > 0))
                        return fail(ret_error, -EBADMSG, i + 1, "unexpected answer '%.80s'", s);
                tenths = whole * 10 + frac;
                found = true;
        }
        if (!found)
                return fail(ret_error, -EBADMSG, 0, "no active thread percentage in the answer");
        *ret_tenths = tenths;
        return 0;
}

int nvidia_mps_parse_server_list(const char *text, size_t len, pid_t **ret, size_t *ret_n, char **ret_error) {
        _cleanup_(lines_done) Lines l = {};
        _cleanup_free_ pid_t *pids = NULL;
        size_t n = 0;
        int r;

        r = lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        for (size_t i = 0; i < l.n; i++) {
                char *s = strip(l.line[i]);
                uint32_t v;

                if (isempty(s))
                        continue;
                if (startswith(s, "Cannot find MPS control daemon process"))
                        return fail(ret_error, -ESRCH, i + 1, "%s", s);
                if (parse_small_uint(s, 4194304, &v) < 0 || v == 0)
                        return fail(ret_error, -EBADMSG, i + 1, "bad PID '%.32s'", s);
                if (n >= NVIDIA_MPS_SERVERS_MAX)
                        return fail(ret_error, -E2BIG, i + 1, "more than %u servers", NVIDIA_MPS_SERVERS_MAX);
                if (!pids) {
                        pids = calloc(NVIDIA_MPS_SERVERS_MAX, sizeof(pid_t));
                        if (!pids)
                                return -ENOMEM;
                }
                pids[n++] = (pid_t) v;
        }
        *ret = TAKE_PTR(pids);
        *ret_n = n;
        return 0;
}
