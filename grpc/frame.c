/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * frame.c — the gRPC message layer of grpc-h2: status names, grpc-message percent
 * encoding, grpc-timeout values, the 5-byte length prefix and the incremental reader.
 *
 * Contract: pure functions over memory, no I/O. grpc_reader_feed() bounds a message by
 * GrpcReader.max before growing its buffer; the reader owns its buffer until
 * grpc_reader_done(). Functions returning pointers return NULL on OOM.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/grpc-h2.h"
#include "grpc/grpc-h2-internal.h"
#include "grpc/grpc-h2-private.h"
#include "common/log.h"
#include "common/util.h"

static const char *const status_names[] = {
        [GRPC_STATUS_OK] = "OK",
        [GRPC_STATUS_CANCELLED] = "CANCELLED",
        [GRPC_STATUS_UNKNOWN] = "UNKNOWN",
        [GRPC_STATUS_INVALID_ARGUMENT] = "INVALID_ARGUMENT",
        [GRPC_STATUS_DEADLINE_EXCEEDED] = "DEADLINE_EXCEEDED",
        [GRPC_STATUS_NOT_FOUND] = "NOT_FOUND",
        [GRPC_STATUS_ALREADY_EXISTS] = "ALREADY_EXISTS",
        [GRPC_STATUS_PERMISSION_DENIED] = "PERMISSION_DENIED",
        [GRPC_STATUS_RESOURCE_EXHAUSTED] = "RESOURCE_EXHAUSTED",
        [GRPC_STATUS_FAILED_PRECONDITION] = "FAILED_PRECONDITION",
        [GRPC_STATUS_ABORTED] = "ABORTED",
        [GRPC_STATUS_OUT_OF_RANGE] = "OUT_OF_RANGE",
        [GRPC_STATUS_UNIMPLEMENTED] = "UNIMPLEMENTED",
        [GRPC_STATUS_INTERNAL] = "INTERNAL",
        [GRPC_STATUS_UNAVAILABLE] = "UNAVAILABLE",
        [GRPC_STATUS_DATA_LOSS] = "DATA_LOSS",
        [GRPC_STATUS_UNAUTHENTICATED] = "UNAUTHENTICATED",
};

_public_ const char *grpc_status_to_string(GrpcStatus s) {
        if ((unsigned) s >= ELEMENTSOF(status_names))
                return "UNKNOWN";
        return status_names[s];
}

static bool is_unreserved(unsigned char c) {
        /* gRPC: percent-encode everything outside printable ASCII, and '%' itself. */
        return c >= 0x20 && c <= 0x7e && c != '%';
}

char *grpc_percent_encode(const char *s) {
        static const char hex[] = "0123456789ABCDEF";
        size_t n = 0;
        char *out, *p;

        if (!s)
                s = "";
        for (const char *q = s; *q; q++)
                n += is_unreserved((unsigned char) *q) ? 1 : 3;
        out = malloc(n + 1);
        if (!out)
                return NULL;
        p = out;
        for (const char *q = s; *q; q++) {
                unsigned char c = (unsigned char) *q;
                if (is_unreserved(c))
                        *p++ = (char) c;
                else {
                        *p++ = '%';
                        *p++ = hex[c >> 4];
                        *p++ = hex[c & 15];
                }
        }
        *p = 0;
        return out;
}

static int unhex(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

char *grpc_percent_decode(const char *s, size_t len) {
        char *out, *p;

        out = malloc(len + 1);
        if (!out)
                return NULL;
        p = out;
        for (size_t i = 0; i < len; i++) {
                int a, b;

                /* Invalid sequences are kept verbatim, as the gRPC spec asks. */
                if (s[i] == '%' && i + 2 < len && (a = unhex(s[i + 1])) >= 0 &&
                    (b = unhex(s[i + 2])) >= 0) {
                        *p++ = (char) (a << 4 | b);
                        i += 2;
                } else
                        *p++ = s[i];
        }
        *p = 0;
        return out;
}

void grpc_timeout_format(uint64_t usec, char buf[static 10]) {
        /* At most 8 digits; round up so the peer never sees a shorter deadline. */
        static const struct {
                char unit;
                uint64_t usec;
        } units[] = {
                { 'u', 1 },
                { 'm', 1000 },
                { 'S', 1000000 },
                { 'M', 60000000 },
                { 'H', 3600000000ULL },
        };

        for (size_t i = 0; i < ELEMENTSOF(units); i++) {
                uint64_t v = usec / units[i].usec + (usec % units[i].usec != 0);
                if (v <= 99999999ULL) {
                        snprintf(buf, 10, "%" PRIu64 "%c", v, units[i].unit);
                        return;
                }
        }
        snprintf(buf, 10, "99999999H");
}


uint8_t *grpc_frame_new(const uint8_t *msg, size_t len, size_t *ret_len) {
        uint8_t *f;

        if (len > UINT32_MAX)
                return NULL;
        f = malloc(GRPC_PREFIX_SIZE + len);
        if (!f)
                return NULL;
        f[0] = 0;
        f[1] = (uint8_t) (len >> 24);
        f[2] = (uint8_t) (len >> 16);
        f[3] = (uint8_t) (len >> 8);
        f[4] = (uint8_t) len;
        if (len > 0)
                memcpy(f + GRPC_PREFIX_SIZE, msg, len);
        *ret_len = GRPC_PREFIX_SIZE + len;
        return f;
}

void grpc_reader_done(GrpcReader *r) {
        r->msg = mfree(r->msg);
        r->msg_got = r->msg_alloc = 0;
}

bool grpc_reader_partial(const GrpcReader *r) {
        return r->prefix_len > 0 || r->in_body;
}

/* Accepts at most one message (both method kinds take one request, and a unary answer
 * is one message). */
GrpcReadError grpc_reader_feed(GrpcReader *r, const uint8_t *data, size_t len) {
        while (len > 0) {
                if (!r->in_body) {
                        size_t k = MIN(len, GRPC_PREFIX_SIZE - r->prefix_len);

                        if (r->n_msgs > 0)
                                return GRPC_READ_EXTRA_MESSAGE;
                        memcpy(r->prefix + r->prefix_len, data, k);
                        r->prefix_len += k;
                        data += k;
                        len -= k;
                        if (r->prefix_len < GRPC_PREFIX_SIZE)
                                break;
                        if (r->prefix[0] & 1)
                                return GRPC_READ_COMPRESSED;
                        r->msg_len = (uint32_t) r->prefix[1] << 24 | (uint32_t) r->prefix[2] << 16 |
                                     (uint32_t) r->prefix[3] << 8 | r->prefix[4];
                        if (r->msg_len > r->max)
                                return GRPC_READ_TOO_BIG;
                        r->prefix_len = 0;
                        r->in_body = true;
                }

                size_t k = MIN(len, (size_t) r->msg_len - r->msg_got);
                if (r->msg_got + k > r->msg_alloc) {
                        size_t n = MAX(r->msg_alloc * 2, MAX(r->msg_got + k, (size_t) 256));
                        uint8_t *m;

                        n = MIN(n, (size_t) r->msg_len);
                        m = realloc(r->msg, n);
                        if (!m)
                                return GRPC_READ_NOMEM;
                        r->msg = m;
                        r->msg_alloc = n;
                }
                if (k > 0)
                        memcpy(r->msg + r->msg_got, data, k);
                r->msg_got += k;
                data += k;
                len -= k;
                if (r->msg_got == r->msg_len) {
                        r->in_body = false;
                        r->n_msgs++;
                }
        }
        return GRPC_READ_OK;
}
