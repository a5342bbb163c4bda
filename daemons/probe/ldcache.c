/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * ldcache.c — the glibc ld.so.cache reader (see ldcache.h).
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/ldcache.h"

#define HEADER_SIZE 48U
#define ENTRY_SIZE 24U
#define OLD_HEADER_SIZE 16U     /* 11-byte magic, padded to 12, uint32 nlibs */
#define OLD_ENTRY_SIZE 12U

int32_t ldcache_host_flags(void) {
#if defined(__x86_64__)
        return LDCACHE_FLAG_ELF_LIBC6 | LDCACHE_FLAG_X8664_LIB64;
#elif defined(__aarch64__)
        return LDCACHE_FLAG_ELF_LIBC6 | LDCACHE_FLAG_AARCH64_LIB64;
#else
        return LDCACHE_FLAG_ELF_LIBC6;
#endif
}

static uint32_t get_u32(const uint8_t *p) {
        uint32_t v;

        memcpy(&v, p, sizeof(v));
        return v;
}

/* The string at offset off of the size-byte block at base, or NULL when it does not end
 * inside the block, is empty or is longer than LDCACHE_STRING_MAX. */
static const char *get_string(const uint8_t *base, size_t size, uint32_t off) {
        const uint8_t *end;
        size_t max;

        if (off >= size)
                return NULL;
        max = MIN(size - off, (size_t) LDCACHE_STRING_MAX + 1);
        end = memchr(base + off, 0, max);
        if (!end || end == base + off)
                return NULL;
        return (const char *) (base + off);
}

/* Where the new-format header starts: 0, or after an old-format block. */
static int find_new_header(const uint8_t *d, size_t size, size_t *ret) {
        uint32_t nlibs;
        size_t off;

        if (size >= HEADER_SIZE && memcmp(d, LDCACHE_MAGIC LDCACHE_VERSION, 20) == 0) {
                *ret = 0;
                return 0;
        }
        if (size < OLD_HEADER_SIZE || memcmp(d, LDCACHE_OLD_MAGIC, strlen(LDCACHE_OLD_MAGIC)) != 0)
                return -EINVAL;
        nlibs = get_u32(d + 12);
        if (nlibs > LDCACHE_ENTRIES_MAX)
                return -EINVAL;
        off = OLD_HEADER_SIZE + (size_t) nlibs * OLD_ENTRY_SIZE;
        /* glibc aligns the new header to its own alignment: try 8, then 4. */
        for (size_t align = 8; align >= 4; align /= 2) {
                size_t o = (off + align - 1) & ~(align - 1);

                if (o <= size && size - o >= HEADER_SIZE && memcmp(d + o, LDCACHE_MAGIC LDCACHE_VERSION, 20) == 0) {
                        *ret = o;
                        return 0;
                }
        }
        return -EINVAL;
}

int ldcache_parse(const void *data, size_t size, int32_t want_flags, LdCacheEntry **ret, size_t *ret_n) {
        const uint8_t *d = data, *h;
        _cleanup_free_ LdCacheEntry *l = NULL;
        size_t start, hsize, n = 0;
        uint32_t nlibs;
        uint8_t order;
        int r;

        if (!data || !ret || !ret_n)
                return -EINVAL;
        if (size > LDCACHE_FILE_MAX)
                return -EFBIG;
        r = find_new_header(d, size, &start);
        if (r < 0)
                return r;
        h = d + start;
        hsize = size - start;
        nlibs = get_u32(h + 20);
        order = h[28];
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        if (order != 0 && order != 2)
                return -EBADMSG;
#else
        if (order != 0 && order != 3)
                return -EBADMSG;
#endif
        if (nlibs > LDCACHE_ENTRIES_MAX || (size_t) nlibs > (hsize - HEADER_SIZE) / ENTRY_SIZE)
                return -EINVAL;

        if (nlibs > 0) {
                l = calloc(nlibs, sizeof(LdCacheEntry));
                if (!l)
                        return -ENOMEM;
        }
        for (uint32_t i = 0; i < nlibs; i++) {
                const uint8_t *e = h + HEADER_SIZE + (size_t) i * ENTRY_SIZE;
                int32_t flags;
                const char *key, *value;

                memcpy(&flags, e, sizeof(flags));
                if (want_flags != -1 && flags != want_flags)
                        continue;
                key = get_string(h, hsize, get_u32(e + 4));
                value = get_string(h, hsize, get_u32(e + 8));
                if (!key || !value)
                        continue;
                l[n++] = (LdCacheEntry) { .key = key, .value = value, .flags = flags };
        }
        if (n == 0)
                l = mfree(l);
        *ret = TAKE_PTR(l);
        *ret_n = n;
        return 0;
}
