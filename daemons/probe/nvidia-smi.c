/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-smi.c — pure parsers for nvidia-smi / nvidia-cuda-mps-control output: the
 * shared text handling (nvidia-smi-internal.h), ids, enums and error outputs. The format
 * parsers are one file per tool output: nvidia-smi-query.c (--query-gpu, -L),
 * nvidia-smi-mig.c (-q, mig -lgip/-lgi/-lci), nvidia-smi-topology.c (topo -m) and
 * nvidia-smi-replies.c (versions, compute mode, nvidia-cuda-mps-control).
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
#include "daemons/probe/nvidia-smi-internal.h"
#include "daemons/probe/nvidia-smi.h"

void smi_lines_done(Lines *l) {
        free(l->buf);
        free(l->line);
        *l = (Lines) {};
}

int smi_fail(char **ret_error, int r, size_t line, const char *fmt, ...) {
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
int smi_lines_split(const char *text, size_t len, Lines *ret, char **ret_error) {
        _cleanup_free_ char *buf = NULL;
        _cleanup_free_ char **line = NULL;
        size_t n = 0, j = 0, start = 0;

        if (!text && len > 0)
                return -EINVAL;
        if (len > NVIDIA_SMI_OUTPUT_MAX)
                return smi_fail(ret_error, -E2BIG, 0, "output of %zu bytes is over the limit of %u", len,
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
                                return smi_fail(ret_error, -EBADMSG, 0, "stray escape character at byte %zu", i);
                        k++;
                        while (k < len && (isdigit((unsigned char) text[k]) || text[k] == ';') && k - i < 16)
                                k++;
                        if (k >= len || !isalpha((unsigned char) text[k]))
                                return smi_fail(ret_error, -EBADMSG, 0, "bad escape sequence at byte %zu", i);
                        i = k;
                        continue;
                }
                if (c == 0)
                        return smi_fail(ret_error, -EBADMSG, 0, "NUL byte at offset %zu", i);
                if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
                        return smi_fail(ret_error, -EBADMSG, 0, "control character 0x%02x at offset %zu", c, i);
                if (c == 0x7f)
                        return smi_fail(ret_error, -EBADMSG, 0, "control character 0x7f at offset %zu", i);
                if (c == '\r' && (i + 1 >= len || text[i + 1] == '\n'))
                        continue;
                if (c == '\r')
                        return smi_fail(ret_error, -EBADMSG, 0, "bare carriage return at offset %zu", i);
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
                        return smi_fail(ret_error, -E2BIG, n + 1, "line of %zu bytes is over the limit of %u",
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

bool smi_is_blank(char c) {
        return c == ' ' || c == '\t';
}

char *smi_strip(char *s) {
        char *e;

        while (smi_is_blank(*s))
                s++;
        e = s + strlen(s);
        while (e > s && smi_is_blank(e[-1]))
                e--;
        *e = 0;
        return s;
}

bool smi_is_printable(const char *s) {
        for (; *s; s++)
                if ((unsigned char) *s < 0x20 || *s == 0x7f)
                        return false;
        return true;
}

/* Copies a printable string that fits into size bytes. */
int smi_copy_field(char *dst, size_t size, const char *s) {
        size_t l = strlen(s);

        if (l >= size || !smi_is_printable(s))
                return -EBADMSG;
        memcpy(dst, s, l + 1);
        return 0;
}

/* Splits s in place on blanks into at most max tokens; returns the count or -E2BIG. */
int smi_tokenize(char *s, char **tok, size_t max) {
        size_t n = 0;

        for (;;) {
                while (smi_is_blank(*s))
                        *s++ = 0;
                if (!*s)
                        return (int) n;
                if (n >= max)
                        return -E2BIG;
                tok[n++] = s;
                while (*s && !smi_is_blank(*s))
                        s++;
        }
}

bool smi_is_na(const char *s) {
        return isempty(s) || streq(s, "N/A") || streq(s, "[N/A]") || streq(s, "[Not Supported]") ||
               streq(s, "[Function Not Found]") || streq(s, "[Unknown Error]") || streq(s, "Not Supported");
}

bool smi_is_hex_run(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!isxdigit((unsigned char) s[i]))
                        return false;
        return true;
}

/* 8-4-4-4-12 hex digits at s; returns the length consumed (36) or 0. */
size_t smi_uuid_body_len(const char *s) {
        static const size_t group[] = { 8, 4, 4, 4, 12 };
        size_t k = 0;

        for (size_t g = 0; g < ELEMENTSOF(group); g++) {
                if (strnlen(s + k, group[g]) < group[g] || !smi_is_hex_run(s + k, group[g]))
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
        k = smi_uuid_body_len(b);
        return k > 0 && b[k] == 0;
}

int smi_parse_small_uint(const char *s, uint32_t max, uint32_t *ret) {
        uint32_t v;

        if (isempty(s) || strlen(s) > 10 || !isdigit((unsigned char) s[0]))
                return -EBADMSG;
        if (safe_atou32(s, &v) < 0 || v > max)
                return -EBADMSG;
        *ret = v;
        return 0;
}

/* "MIG-GPU-<uuid>/<gi>/<ci>" -> gi, ci; or "MIG-<uuid>" -> -1, -1. */
int smi_mig_uuid_parse(const char *s, int32_t *ret_gi, int32_t *ret_ci) {
        const char *b, *p;
        char num[12];
        uint32_t gi, ci;
        size_t k;

        b = startswith(s ?: "", "MIG-");
        if (!b)
                return -EBADMSG;
        p = startswith(b, "GPU-");
        if (!p) {
                k = smi_uuid_body_len(b);
                if (k == 0 || b[k] != 0)
                        return -EBADMSG;
                *ret_gi = *ret_ci = -1;
                return 0;
        }
        k = smi_uuid_body_len(p);
        if (k == 0 || p[k] != '/')
                return -EBADMSG;
        p += k + 1;
        k = strcspn(p, "/");
        if (k == 0 || k >= sizeof(num) || p[k] != '/')
                return -EBADMSG;
        memcpy(num, p, k);
        num[k] = 0;
        if (smi_parse_small_uint(num, 1024, &gi) < 0)
                return -EBADMSG;
        if (smi_parse_small_uint(p + k + 1, 1024, &ci) < 0)
                return -EBADMSG;
        *ret_gi = (int32_t) gi;
        *ret_ci = (int32_t) ci;
        return 0;
}

bool nvidia_mig_uuid_is_valid(const char *s) {
        int32_t gi, ci;

        return smi_mig_uuid_parse(s, &gi, &ci) >= 0;
}

int nvidia_pci_address_normalize(const char *s, char ret[static NVIDIA_PCI_ADDRESS_MAX]) {
        unsigned long domain;
        unsigned bus, dev, fn;
        size_t dl;

        if (isempty(s))
                return -EBADMSG;
        dl = strcspn(s, ":");
        if (dl < 4 || dl > 8 || !smi_is_hex_run(s, dl) || s[dl] != ':')
                return -EBADMSG;
        s += dl + 1;
        if (strlen(s) != 7 || !smi_is_hex_run(s, 2) || s[2] != ':' || !smi_is_hex_run(s + 3, 2) || s[5] != '.' ||
            !smi_is_hex_run(s + 6, 1))
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

int smi_version_copy(char dst[static NVIDIA_VERSION_MAX], const char *s) {
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

bool smi_classify_line(const char *l, NvidiaSmiError *e) {
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
int smi_lines_check_error(const Lines *l, char **ret_error) {
        NvidiaSmiError e;

        for (size_t i = 0; i < l->n; i++)
                if (smi_classify_line(smi_strip(l->line[i]), &e))
                        return smi_fail(ret_error, nvidia_smi_error_to_errno(e.kind), i + 1, "nvidia-smi: %s", e.message);
        return 0;
}

int smi_lines_open(const char *text, size_t len, Lines *ret, char **ret_error) {
        int r;

        r = smi_lines_split(text, len, ret, ret_error);
        if (r < 0)
                return r;
        return smi_lines_check_error(ret, ret_error);
}

int nvidia_smi_parse_error(const char *text, size_t len, NvidiaSmiError *ret) {
        _cleanup_(smi_lines_done) Lines l = {};
        int r;

        r = smi_lines_split(text, len, &l, NULL);
        if (r < 0)
                return r;
        for (size_t i = 0; i < l.n; i++) {
                NvidiaSmiError e;

                if (smi_classify_line(smi_strip(l.line[i]), &e)) {
                        *ret = e;
                        return 1;
                }
        }
        *ret = (NvidiaSmiError) {};
        return 0;
}


size_t smi_indent_of(const char *s) {
        return strspn(s, " ");
}

/* "Key   : value" -> key, value (both stripped); false when there is no ':'. */
bool smi_q_key_value(char *s, char **ret_key, char **ret_value) {
        char *c = strchr(s, ':');

        if (!c)
                return false;
        *c = 0;
        *ret_key = smi_strip(s);
        *ret_value = smi_strip(c + 1);
        return true;
}
