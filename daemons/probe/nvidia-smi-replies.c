/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-smi-replies.c — parsers of the short answers: versions, compute mode, nvidia-cuda-mps-control (see nvidia-smi.h; shared text handling in nvidia-smi-internal.h).
 */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/nvidia-smi-internal.h"
#include "daemons/probe/nvidia-smi.h"

/* ---- versions ---- */

/* Finds "<key>" followed by blanks, ':' and blanks; copies the next token. */
static int find_key_token(char *line, const char *key, char dst[static NVIDIA_VERSION_MAX]) {
        char *p = strstr(line, key), tokbuf[NVIDIA_VERSION_MAX];
        size_t k;

        if (!p)
                return 0;
        p += strlen(key);
        while (smi_is_blank(*p))
                p++;
        if (*p != ':')
                return 0;
        p++;
        while (smi_is_blank(*p))
                p++;
        k = strcspn(p, " \t|");
        if (k == 0 || k >= sizeof(tokbuf))
                return -EBADMSG;
        memcpy(tokbuf, p, k);
        tokbuf[k] = 0;
        if (smi_version_copy(dst, tokbuf) < 0)
                return -EBADMSG;
        return 1;
}

int nvidia_smi_parse_versions(const char *text, size_t len, NvidiaVersions *ret, char **ret_error) {
        _cleanup_(smi_lines_done) Lines l = {};
        NvidiaVersions v = {};
        char kmd[NVIDIA_VERSION_MAX] = "", umd[NVIDIA_VERSION_MAX] = "";
        int r;

        r = smi_lines_open(text, len, &l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = l.line[i];

                if (!v.driver[0] && (r = find_key_token(s, "Driver Version", v.driver)) < 0)
                        return smi_fail(ret_error, r, i + 1, "bad driver version");
                if (!kmd[0] && (r = find_key_token(s, "KMD Version", kmd)) < 0)
                        return smi_fail(ret_error, r, i + 1, "bad KMD version");
                if (!v.cuda[0] && (r = find_key_token(s, "CUDA Version", v.cuda)) < 0)
                        return smi_fail(ret_error, r, i + 1, "bad CUDA version");
                if (!umd[0] && (r = find_key_token(s, "CUDA UMD Version", umd)) < 0)
                        return smi_fail(ret_error, r, i + 1, "bad CUDA UMD version");
        }
        if (!v.driver[0])
                memcpy(v.driver, kmd, sizeof(kmd));
        if (!v.cuda[0])
                memcpy(v.cuda, umd, sizeof(umd));
        if (!v.driver[0])
                return smi_fail(ret_error, -EBADMSG, 0, "no driver version");

        *ret = v;
        return 0;
}

/* ---- compute mode reply ---- */

int nvidia_smi_parse_compute_mode_reply(const char *text, size_t len, NvidiaComputeMode *ret_mode,
                                        char **ret_error) {
        _cleanup_(smi_lines_done) Lines l = {};
        NvidiaComputeMode mode = NVIDIA_COMPUTE_MODE_UNKNOWN;
        bool done = false;
        int r;

        r = smi_lines_open(text, len, &l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = smi_strip(l.line[i]), *p, *e;

                if (isempty(s))
                        continue;
                if ((p = (char *) startswith(s, "Set compute mode to ")) ||
                    (p = (char *) startswith(s, "Compute mode is already set to "))) {
                        e = strstr(p, " for GPU ");
                        if (!e)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "no GPU in '%.80s'", s);
                        *e = 0;
                        if (nvidia_compute_mode_from_string(p, &mode) < 0)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "unknown compute mode '%.32s'", p);
                } else if (startswith(s, "Setting compute mode to ") && strstr(s, "is not supported")) {
                        return smi_fail(ret_error, -EOPNOTSUPP, i + 1, "%s", s);
                } else if (startswith(s, "Unable to set the compute mode")) {
                        return smi_fail(ret_error, strstr(s, "Not Supported") ? -EOPNOTSUPP : -EIO, i + 1, "%s", s);
                } else if (streq(s, "All done.")) {
                        done = true;
                } else if (!startswith(s, "Treating as warning") && !startswith(s, "Warning:"))
                        return smi_fail(ret_error, -EBADMSG, i + 1, "unexpected line '%.80s'", s);
        }
        if (mode == NVIDIA_COMPUTE_MODE_UNKNOWN || !done)
                return smi_fail(ret_error, -EBADMSG, 0, "no confirmation of the compute mode");
        *ret_mode = mode;
        return 0;
}

int nvidia_smi_parse_compute_mode_query(const char *text, size_t len, NvidiaComputeMode *ret_mode,
                                        char **ret_error) {
        _cleanup_(smi_lines_done) Lines l = {};
        NvidiaComputeMode mode = NVIDIA_COMPUTE_MODE_UNKNOWN;
        size_t n = 0;
        int r;

        r = smi_lines_open(text, len, &l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = smi_strip(l.line[i]);

                if (isempty(s))
                        continue;
                if (++n > 1)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "more than one GPU in the answer");
                if (nvidia_compute_mode_from_string(s, &mode) < 0)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "unknown compute mode '%.32s'", s);
        }
        if (mode == NVIDIA_COMPUTE_MODE_UNKNOWN)
                return smi_fail(ret_error, -EBADMSG, 0, "no compute mode in the answer");
        *ret_mode = mode;
        return 0;
}

/* ---- nvidia-cuda-mps-control ---- */

int nvidia_mps_parse_reply(const char *text, size_t len, char **ret_error) {
        _cleanup_(smi_lines_done) Lines l = {};
        int r;

        r = smi_lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        for (size_t i = 0; i < l.n; i++) {
                char *s = smi_strip(l.line[i]);

                if (isempty(s))
                        continue;
                if (startswith(s, "Cannot find MPS control daemon process"))
                        return smi_fail(ret_error, -ESRCH, i + 1, "%s", s);
                if (startswith(s, "An instance of this daemon is already running"))
                        return smi_fail(ret_error, -EEXIST, i + 1, "%s", s);
                return smi_fail(ret_error, -EBADMSG, i + 1, "unexpected answer '%.80s'", s);
        }
        return 0;
}

int nvidia_mps_parse_percentage_reply(const char *text, size_t len, uint32_t *ret_tenths, char **ret_error) {
        _cleanup_(smi_lines_done) Lines l = {};
        bool found = false;
        uint32_t tenths = 0;
        int r;

        r = smi_lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        for (size_t i = 0; i < l.n; i++) {
                char *s = smi_strip(l.line[i]), *dot;
                uint32_t whole, frac = 0;

                if (isempty(s))
                        continue;
                if (startswith(s, "Cannot find MPS control daemon process"))
                        return smi_fail(ret_error, -ESRCH, i + 1, "%s", s);
                if (found)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "unexpected answer '%.80s'", s);
                /* "<whole>[.<one digit>]", at most 100.0 */
                dot = strchr(s, '.');
                if (dot) {
                        if (!isdigit((unsigned char) dot[1]) || dot[2] != 0)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "unexpected answer '%.80s'", s);
                        frac = (uint32_t) (dot[1] - '0');
                        *dot = 0;
                }
                if (smi_parse_small_uint(s, 100, &whole) < 0 || (whole == 100 && frac > 0))
                        return smi_fail(ret_error, -EBADMSG, i + 1, "unexpected answer '%.80s'", s);
                tenths = whole * 10 + frac;
                found = true;
        }
        if (!found)
                return smi_fail(ret_error, -EBADMSG, 0, "no active thread percentage in the answer");
        *ret_tenths = tenths;
        return 0;
}

int nvidia_mps_parse_server_list(const char *text, size_t len, pid_t **ret, size_t *ret_n, char **ret_error) {
        _cleanup_(smi_lines_done) Lines l = {};
        _cleanup_free_ pid_t *pids = NULL;
        size_t n = 0;
        int r;

        r = smi_lines_split(text, len, &l, ret_error);
        if (r < 0)
                return r;
        for (size_t i = 0; i < l.n; i++) {
                char *s = smi_strip(l.line[i]);
                uint32_t v;

                if (isempty(s))
                        continue;
                if (startswith(s, "Cannot find MPS control daemon process"))
                        return smi_fail(ret_error, -ESRCH, i + 1, "%s", s);
                if (smi_parse_small_uint(s, 4194304, &v) < 0 || v == 0)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad PID '%.32s'", s);
                if (n >= NVIDIA_MPS_SERVERS_MAX)
                        return smi_fail(ret_error, -E2BIG, i + 1, "more than %u servers", NVIDIA_MPS_SERVERS_MAX);
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
