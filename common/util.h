/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * util.h — small string, vector and file helpers shared by all daemons.
 *
 * All functions return 0/positive on success and a negative errno on failure and never
 * write their ret_* arguments on failure.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cleanup.h"

static inline bool streq(const char *a, const char *b) {
        return a && b && __builtin_strcmp(a, b) == 0;
}
static inline bool streq_ptr(const char *a, const char *b) {
        if (!a || !b)
                return a == b;
        return __builtin_strcmp(a, b) == 0;
}
static inline bool isempty(const char *s) {
        return !s || !*s;
}
const char *startswith(const char *s, const char *prefix);

size_t strv_length(char * const *l);
bool strv_contains(char * const *l, const char *s);
/* Appends a copy of s. */
int strv_extend(char ***l, const char *s);
/* Takes ownership of s (freed on failure). */
int strv_consume(char ***l, char *s);
char **strv_copy(char * const *l);
/* A copy in ONE allocation (the pointers, then the strings): free() it, never
 * strv_free(). For long-lived lists kept by the thousand. */
char **strv_pack(char * const *l);
/* Joins with sep; returns NULL on OOM. */
char *strv_join(char * const *l, const char *sep);
void strv_sort(char **l);
bool strv_equal(char * const *a, char * const *b);

/* Makes the array *p (of elements of size bytes, *allocated of them) hold at least need
 * elements, growing it geometrically (at least 8). -ENOMEM leaves it as it was. */
int array_reserve(void **p, size_t *allocated, size_t need, size_t size);
/* The same for an array of at most max elements (-E2BIG when need is more); the elements
 * it adds are zero-filled (so are array_reserve()'s). */
int array_reserve_bounded(void **p, size_t *allocated, size_t need, size_t size, size_t max);

/* Replaces *p by a copy of s (s may be NULL). */
int free_and_strdup(char **p, const char *s);

/* Reads a whole small file (at most max bytes, else -EFBIG), NUL-terminated, with one
 * trailing newline stripped. dir_fd may be AT_FDCWD. */
/* Reads all of fd into a NUL-terminated buffer of at most max bytes (-EFBIG beyond);
 * *ret_len (may be NULL) gets the length read. */
int read_fd_bounded(int fd, size_t max, char **ret, size_t *ret_len);
int read_one_line_file_at(int dir_fd, const char *path, size_t max, char **ret);
/* The one atomic file writer of kgpu: writes data to dir_fd/path via a new temp file
 * next to it (".<name>.<16 random hex digits>", created with O_EXCL|O_NOFOLLOW, so
 * nothing planted there is ever opened), fsync of the file, rename() over path, then
 * fsync of the directory holding it (best effort: the content is complete either way),
 * so that after a crash a reader finds the old or the new content, never a mix or an
 * empty file; mode for the new file. dir_fd may be AT_FDCWD or an O_PATH fd. */
int write_file_atomic_at(int dir_fd, const char *path, const void *data, size_t len, unsigned mode);

int safe_atou32(const char *s, uint32_t *ret);   /* decimal, whole string, no sign */
int safe_atoi32(const char *s, int32_t *ret);    /* decimal, whole string */
int safe_atou64(const char *s, uint64_t *ret);   /* decimal or 0x hex, whole string */
int parse_boolean(const char *s);                /* 1, 0 or -EINVAL */

uint64_t now_usec(int clock);
