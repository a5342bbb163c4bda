/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-store-ids.c — libFuzzer target for the packed device ids column of the broker's
 * store (daemons/broker/store-pack.c, schema v4).
 *
 * Contract: each input is the column's bytes as a hostile file may hold them. Reading
 * returns 0 or -EBADMSG/-ENOMEM and never touches *ret on failure; on success it gives 1
 * to STORE_IDS_MAX ids, each 1 to STORE_STRING_MAX bytes, valid UTF-8, no NUL, no line
 * break, no id twice, and packing them again gives the input byte for byte; the writer
 * accepts exactly what the reader accepts (the same ids split at the line breaks). Any
 * crash, leak, sanitizer report or broken contract aborts.
 */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/broker/store-internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SENTINEL ((char **) 0x1)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char **ids = SENTINEL, problem[128] = "";
        _cleanup_free_ char *again = NULL, *split = NULL;
        _cleanup_free_ char **parts = NULL;
        size_t n = 0, len = 0, n_parts = 1;
        int r, w;

        r = store_ids_unpack(size > 0 ? data : NULL, size, &ids, problem, sizeof(problem));
        if (r < 0) {
                if ((r != -EBADMSG && r != -ENOMEM) || ids != SENTINEL)
                        abort();
                if (r == -EBADMSG && problem[0] == 0)
                        abort();
        } else {
                if (r != 0 || !ids || ids == SENTINEL)
                        abort();
                for (n = 0; ids[n]; n++) {
                        size_t l = strlen(ids[n]);

                        if (l == 0 || l > STORE_STRING_MAX || strchr(ids[n], '\n') ||
                            !store_utf8_valid((const unsigned char *) ids[n], l))
                                abort();
                        for (size_t j = 0; j < n; j++)
                                if (streq(ids[j], ids[n]))
                                        abort();
                }
                if (n == 0 || n > STORE_IDS_MAX)
                        abort();
                if (store_ids_pack(ids, &again, &len) != 0 || len != size || memcmp(again, data, size) != 0)
                        abort();
                free(ids);
        }

        /* The writer, given the input split at its line breaks (NUL-free inputs, which a
         * C string can carry, of a bounded count): accepts exactly when the reader does. */
        if (size == 0 || size > STORE_PACKED_MAX || memchr(data, 0, size))
                return 0;
        for (size_t i = 0; i < size; i++)
                if (data[i] == '\n' && ++n_parts > STORE_IDS_MAX + 1)
                        return 0;
        split = malloc(size + 1);
        parts = calloc(n_parts + 1, sizeof(char *));
        if (!split || !parts)
                return 0;
        memcpy(split, data, size);
        split[size] = 0;
        parts[0] = split;
        for (size_t i = 0, k = 1; i < size; i++)
                if (split[i] == '\n') {
                        split[i] = 0;
                        parts[k++] = split + i + 1;
                }
        free(again);
        again = NULL;
        w = store_ids_pack(parts, &again, &len);
        if (r != -ENOMEM && w != -ENOMEM && (w == 0) != (r == 0))
                abort();
        return 0;
}
