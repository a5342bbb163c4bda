/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-ldcache.c — libFuzzer target for the ld.so.cache reader (daemons/probe/ldcache.c).
 *
 * Contract: each input is a whole cache file, parsed for every entry and for the host's
 * ABI only. The parser returns 0 or a negative errno; on failure *ret is untouched; on
 * success every entry's key and value start inside the input, end (NUL) inside it, are
 * non-empty and at most LDCACHE_STRING_MAX bytes, at most LDCACHE_ENTRIES_MAX of them,
 * and the host-ABI list is never longer than the full one. Any crash, leak, sanitizer
 * report or broken contract aborts.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemons/probe/ldcache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SENTINEL ((LdCacheEntry *) 0x1)

static int check(const uint8_t *data, size_t size, int32_t flags, size_t *ret_n) {
        LdCacheEntry *e = SENTINEL;
        size_t n = 0;
        int r;

        r = ldcache_parse(data, size, flags, &e, &n);
        if (r > 0)
                abort();
        if (r < 0) {
                if (e != SENTINEL)
                        abort();
                return r;
        }
        if (n > LDCACHE_ENTRIES_MAX || (n > 0) != (e != NULL))
                abort();
        for (size_t i = 0; i < n; i++) {
                const char *s[2] = { e[i].key, e[i].value };

                for (int k = 0; k < 2; k++) {
                        const uint8_t *p = (const uint8_t *) s[k], *nul;

                        if (p < data || p >= data + size)
                                abort();
                        nul = memchr(p, 0, (size_t) (data + size - p));
                        if (!nul || nul == p || (size_t) (nul - p) > LDCACHE_STRING_MAX)
                                abort();
                }
                if (flags != -1 && e[i].flags != flags)
                        abort();
        }
        free(e);
        *ret_n = n;
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        size_t all = 0, host = 0;
        int a, b;

        a = check(data, size, -1, &all);
        b = check(data, size, ldcache_host_flags(), &host);
        if ((a < 0) != (b < 0) || host > all)
                abort();
        return 0;
}
