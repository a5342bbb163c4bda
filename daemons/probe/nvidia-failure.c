/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-failure.c — the words of a failed nvidia-smi run for logs, HealthReason and
 * Rescan errors, and the lines of lost GPUs taken out of an answer (see
 * nvidia-failure.h). Pure: no I/O, no logging.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/nvidia-failure.h"
#include "daemons/probe/nvidia.h"

const char *nvidia_result_text(const NvidiaRunResult *res, size_t *ret_len) {
        if (res->out_len > 0) {
                *ret_len = res->out_len;
                return res->out;
        }
        *ret_len = res->err_len;
        return res->err ?: "";
}

/* One line describing a failed run: the runner's error, the tool's own error line, or
 * the parser's explanation. */
static void describe_failure_raw(int run_error, int parse_r, const NvidiaRunResult *res, const char *parse_error,
                                 char *buf, size_t size);

void nvidia_describe_failure(int run_error, int parse_r, const NvidiaRunResult *res, const char *parse_error,
                             char *buf, size_t size) {
        describe_failure_raw(run_error, parse_r, res, parse_error, buf, size);
        for (char *c = buf; *c; c++)
                if ((unsigned char) *c < 0x20 || *c == 0x7f)
                        *c = ' ';
        nvidia_utf8_sanitize(buf);
}

/* The first NVIDIA_QUOTE_MAX bytes of a tool's output, printable: control characters,
 * DEL, '\\' and '"' escaped (\n, \t, \r, \xNN); bytes >= 0x80 are kept (the caller
 * makes the whole valid UTF-8). size: at least NVIDIA_QUOTE_MAX * 4 + 1. */
static void quote_output(const char *t, size_t len, char *buf, size_t size) {
        size_t o = 0;

        for (size_t i = 0; i < len && i < NVIDIA_QUOTE_MAX && o + 5 < size; i++) {
                unsigned char c = (unsigned char) t[i];

                if (c == '\n' || c == '\t' || c == '\r' || c == '\\' || c == '"') {
                        buf[o++] = '\\';
                        buf[o++] = c == '\n' ? 'n' : c == '\t' ? 't' : c == '\r' ? 'r' : (char) c;
                } else if (c < 0x20 || c == 0x7f)
                        o += (size_t) snprintf(buf + o, size - o, "\\x%02x", c);
                else
                        buf[o++] = (char) c;
        }
        buf[o] = 0;
}

static void describe_failure_raw(int run_error, int parse_r, const NvidiaRunResult *res, const char *parse_error,
                                 char *buf, size_t size) {
        NvidiaSmiError e = {};
        size_t len;
        const char *t;

        if (run_error == -ETIME || (res && res->timed_out)) {
                (void) snprintf(buf, size, "timed out");
                return;
        }
        if (run_error < 0 || !res) {
                (void) snprintf(buf, size, "%s", strerror(-(run_error < 0 ? run_error : parse_r)));
                return;
        }
        t = nvidia_result_text(res, &len);
        if (nvidia_smi_parse_error(t, len, &e) > 0 && !isempty(e.message)) {
                (void) snprintf(buf, size, "%s", e.message);
                return;
        }
        /* Output kgpu does not recognise: the tool's own words (bounded, escaped) and exit
         * status first, the parser's complaint after them. */
        if (len == 0)
                (void) snprintf(buf, size, "exit status %d, no output", res->exit_status);
        else {
                char quoted[NVIDIA_QUOTE_MAX * 4U + 1];

                quote_output(t, len, quoted, sizeof(quoted));
                (void) snprintf(buf, size, "unrecognised output (exit status %d): \"%s\"%s", res->exit_status,
                                quoted, len > NVIDIA_QUOTE_MAX ? "..." : "");
        }
        if (!isempty(parse_error) || parse_r < 0) {
                size_t l = strlen(buf);

                (void) snprintf(buf + l, size - l, "; parser: %s",
                                !isempty(parse_error) ? parse_error : strerror(-parse_r));
        }
}

char *nvidia_drop_lost_lines(const char *t, size_t len, size_t *ret_len) {
        char *out = malloc(len + 1);
        size_t o = 0;

        if (!out)
                return NULL;
        for (const char *l = t; l < t + len; ) {
                const char *e = memchr(l, '\n', (size_t) (t + len - l));
                size_t n = e ? (size_t) (e - l) + 1 : (size_t) (t + len - l);
                NvidiaSmiError err;

                if (!(nvidia_smi_parse_error(l, n, &err) > 0 && err.kind == NVIDIA_SMI_ERROR_GPU_LOST)) {
                        memcpy(out + o, l, n);
                        o += n;
                }
                l += n;
        }
        out[o] = 0;
        *ret_len = o;
        return out;
}

