/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store-pack.c — the device ids of one allocation packed into one column (schema v4), and
 * the UTF-8 check every text read back from the file goes through.
 *
 * Contract: see store-internal.h (STORE_IDS_SEPARATOR). The same rule is applied when an
 * allocation is written and when it is read back, so whatever the store writes reads back,
 * and whatever reads back could have been written. Reading is bounded before it starts
 * (STORE_PACKED_MAX bytes) and never trusts a length it has not checked.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/broker/store-internal.h"

bool store_utf8_valid(const unsigned char *s, size_t n) {
        size_t i = 0;

        while (i < n) {
                unsigned char c = s[i];
                uint32_t cp;
                size_t len;

                if (c == 0)
                        return false;
                if (c < 0x80) {
                        i++;
                        continue;
                }
                if ((c & 0xe0) == 0xc0) {
                        len = 2;
                        cp = c & 0x1f;
                } else if ((c & 0xf0) == 0xe0) {
                        len = 3;
                        cp = c & 0x0f;
                } else if ((c & 0xf8) == 0xf0) {
                        len = 4;
                        cp = c & 0x07;
                } else
                        return false;
                if (n - i < len)
                        return false;
                for (size_t j = 1; j < len; j++) {
                        if ((s[i + j] & 0xc0) != 0x80)
                                return false;
                        cp = (cp << 6) | (s[i + j] & 0x3f);
                }
                if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
                    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                        return false;
                i += len;
        }
        return true;
}

/* One id: 1..STORE_STRING_MAX bytes of UTF-8, no NUL, no separator. NULL if valid, else why. */
static const char *id_problem(const char *p, size_t n) {
        if (n == 0)
                return "empty device id";
        if (n > STORE_STRING_MAX)
                return "device id longer than 256 bytes";
        if (memchr(p, STORE_IDS_SEPARATOR, n))
                return "device id with a line break";
        if (!store_utf8_valid((const unsigned char *) p, n))
                return "device id not valid UTF-8 (or with a NUL byte)";
        return NULL;
}

static int str_ptr_cmp(const void *a, const void *b) {
        return strcmp(*(const char * const *) a, *(const char * const *) b);
}

/* true if an id is in l[0..n) twice. */
static bool has_duplicate(char * const *l, size_t n) {
        _cleanup_free_ const char **sorted = NULL;

        if (n < 2)
                return false;
        if (n == 2)
                return streq(l[0], l[1]);
        sorted = malloc(n * sizeof(char *));
        if (!sorted)
                return true;    /* cannot tell: refuse rather than guess */
        memcpy(sorted, l, n * sizeof(char *));
        qsort(sorted, n, sizeof(char *), str_ptr_cmp);
        for (size_t i = 1; i < n; i++)
                if (streq(sorted[i - 1], sorted[i]))
                        return true;
        return false;
}

int store_ids_pack(char * const *ids, char **ret, size_t *ret_len) {
        size_t n = 0, len = 0;
        char *text, *p;

        for (char * const *i = ids; i && *i; i++) {
                size_t l = strlen(*i);

                if (id_problem(*i, l) || ++n > STORE_IDS_MAX)
                        return -EINVAL;
                len += l + 1;
        }
        if (n == 0 || has_duplicate(ids, n))
                return -EINVAL;
        text = malloc(len);
        if (!text)
                return -ENOMEM;
        p = text;
        for (char * const *i = ids; *i; i++) {
                size_t l = strlen(*i);

                memcpy(p, *i, l);
                p += l;
                *p++ = STORE_IDS_SEPARATOR;
        }
        p[-1] = 0;              /* the last separator ends the string */
        *ret = text;
        if (ret_len)
                *ret_len = len - 1;
        return 0;
}

static int why(char *buf, size_t size, const char *format, ...) __attribute__((format(printf, 3, 4)));
static int why(char *buf, size_t size, const char *format, ...) {
        va_list ap;

        if (buf && size > 0) {
                va_start(ap, format);
                vsnprintf(buf, size, format, ap);
                va_end(ap);
        }
        return -EBADMSG;
}

int store_ids_unpack(const void *data, size_t len, char ***ret, char *problem, size_t problem_size) {
        const char *text = data, *p, *end;
        size_t n = 1;
        char **l, *copy;

        if (!data || len == 0)
                return why(problem, problem_size, "no device ids");
        if (len > STORE_PACKED_MAX)
                return why(problem, problem_size, "device ids of %zu bytes, more than %zu", len, (size_t) STORE_PACKED_MAX);
        for (size_t i = 0; i < len; i++)
                if (text[i] == STORE_IDS_SEPARATOR && ++n > STORE_IDS_MAX)
                        return why(problem, problem_size, "more than %d device ids", STORE_IDS_MAX);
        /* Each id checked in place before anything is allocated. */
        p = text;
        end = text + len;
        for (size_t i = 0; i < n; i++) {
                const char *e = memchr(p, STORE_IDS_SEPARATOR, (size_t) (end - p)) ?: end;
                const char *bad = id_problem(p, (size_t) (e - p));

                if (bad)
                        return why(problem, problem_size, "device id %zu: %s", i + 1, bad);
                p = e + 1;
        }
        /* One allocation: the pointers, then the ids, each NUL-terminated (strv_pack()'s layout). */
        l = malloc((n + 1) * sizeof(char *) + len + 1);
        if (!l)
                return -ENOMEM;
        copy = (char *) (l + n + 1);
        memcpy(copy, text, len);
        copy[len] = 0;
        l[0] = copy;
        for (size_t i = 0, k = 1; i < len; i++)
                if (copy[i] == STORE_IDS_SEPARATOR) {
                        copy[i] = 0;
                        l[k++] = copy + i + 1;
                }
        l[n] = NULL;
        if (has_duplicate(l, n)) {
                free(l);
                return why(problem, problem_size, "a device id twice in one allocation");
        }
        *ret = l;
        return 0;
}
