/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* util.c — small string, vector and file helpers (see util.h). */

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

const char *startswith(const char *s, const char *prefix) {
        size_t l;

        if (!s || !prefix)
                return NULL;
        l = strlen(prefix);
        if (strncmp(s, prefix, l) != 0)
                return NULL;
        return s + l;
}

char **strv_free(char **l) {
        if (!l)
                return NULL;
        for (char **i = l; *i; i++)
                free(*i);
        free(l);
        return NULL;
}

size_t strv_length(char * const *l) {
        size_t n = 0;

        if (!l)
                return 0;
        while (l[n])
                n++;
        return n;
}

bool strv_contains(char * const *l, const char *s) {
        if (!l || !s)
                return false;
        for (char * const *i = l; *i; i++)
                if (streq(*i, s))
                        return true;
        return false;
}

int strv_consume(char ***l, char *s) {
        size_t n;
        char **c;

        if (!s)
                return -ENOMEM;
        n = strv_length(*l);
        c = reallocarray(*l, n + 2, sizeof(char *));
        if (!c) {
                free(s);
                return -ENOMEM;
        }
        c[n] = s;
        c[n + 1] = NULL;
        *l = c;
        return 0;
}

int strv_extend(char ***l, const char *s) {
        return strv_consume(l, strdup(s ?: ""));
}

char **strv_copy(char * const *l) {
        _cleanup_strv_free_ char **c = NULL;
        size_t n = strv_length(l);

        c = calloc(n + 1, sizeof(char *));
        if (!c)
                return NULL;
        for (size_t i = 0; i < n; i++) {
                c[i] = strdup(l[i]);
                if (!c[i])
                        return NULL;
        }
        return TAKE_PTR(c);
}

char **strv_pack(char * const *l) {
        size_t n = strv_length(l), bytes = (n + 1) * sizeof(char *);
        char **c, *p;

        for (size_t i = 0; i < n; i++)
                bytes += strlen(l[i]) + 1;
        c = malloc(bytes);
        if (!c)
                return NULL;
        p = (char *) (c + n + 1);
        for (size_t i = 0; i < n; i++) {
                size_t len = strlen(l[i]) + 1;

                memcpy(p, l[i], len);
                c[i] = p;
                p += len;
        }
        c[n] = NULL;
        return c;
}

char *strv_join(char * const *l, const char *sep) {
        size_t n = 0, k, sl = strlen(sep ?: "");
        char *r, *p;

        if (l)
                for (char * const *i = l; *i; i++)
                        n += strlen(*i) + sl;
        r = malloc(n + 1);
        if (!r)
                return NULL;
        p = r;
        if (l)
                for (char * const *i = l; *i; i++) {
                        if (i != l && sl) {
                                memcpy(p, sep, sl);
                                p += sl;
                        }
                        k = strlen(*i);
                        memcpy(p, *i, k);
                        p += k;
                }
        *p = 0;
        return r;
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char * const *) a, *(char * const *) b);
}

void strv_sort(char **l) {
        size_t n = strv_length(l);

        if (n > 1)
                qsort(l, n, sizeof(char *), cmp_str);
}

bool strv_equal(char * const *a, char * const *b) {
        size_t n = strv_length(a);

        if (n != strv_length(b))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!streq(a[i], b[i]))
                        return false;
        return true;
}

int array_reserve_bounded(void **p, size_t *allocated, size_t need, size_t size, size_t max) {
        size_t na;
        void *v;

        if (need <= *allocated)
                return 0;
        if (need > max)
                return -E2BIG;
        na = MIN(MAX(MAX(*allocated * 2, need), (size_t) 8), max);
        v = reallocarray(*p, na, size);
        if (!v)
                return -ENOMEM;
        memset((char *) v + *allocated * size, 0, (na - *allocated) * size);
        *p = v;
        *allocated = na;
        return 0;
}

int array_reserve(void **p, size_t *allocated, size_t need, size_t size) {
        return array_reserve_bounded(p, allocated, need, size, SIZE_MAX);
}

int free_and_strdup(char **p, const char *s) {
        char *t = NULL;

        if (s) {
                t = strdup(s);
                if (!t)
                        return -ENOMEM;
        }
        free(*p);
        *p = t;
        return 0;
}

int read_fd_bounded(int fd, size_t max, char **ret, size_t *ret_len) {
        _cleanup_free_ char *buf = NULL;
        size_t n = 0;
        ssize_t k;

        buf = malloc(max + 1);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                k = read(fd, buf + n, max + 1 - n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (k == 0)
                        break;
                n += (size_t) k;
                if (n > max)
                        return -EFBIG;
        }
        buf[n] = 0;
        if (ret_len)
                *ret_len = n;
        *ret = TAKE_PTR(buf);
        return 0;
}

int read_one_line_file_at(int dir_fd, const char *path, size_t max, char **ret) {
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *buf = NULL;
        size_t n = 0;
        int r;

        fd = openat(dir_fd, path, O_RDONLY|O_CLOEXEC|O_NOCTTY);
        if (fd < 0)
                return negative_errno();
        r = read_fd_bounded(fd, max, &buf, &n);
        if (r < 0)
                return r;
        if (memchr(buf, 0, n))
                return -EBADMSG;
        if (n > 0 && buf[n - 1] == '\n')
                buf[n - 1] = 0;
        *ret = TAKE_PTR(buf);
        return 0;
}

/* 64 bits for a temporary file's name: from the kernel's random pool, else (pool not yet
 * initialised early at boot) from the clock and a counter. O_EXCL, not this, is what makes
 * the name safe; this only keeps others from guessing it and taking it first. */
static uint64_t random_u64(void) {
        static uint64_t counter;
        uint64_t v;

        if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t) sizeof(v))
                return v;
        v = now_usec(CLOCK_MONOTONIC) ^ ((uint64_t) getpid() << 32) ^ (++counter * UINT64_C(0x9e3779b97f4a7c15));
        return v;
}

/* Makes a rename into the directory of dir_fd/path (base: path's last component)
 * durable. Best effort: the file's content was synced before the rename. */
static void fsync_parent_at(int dir_fd, const char *path, const char *base) {
        _cleanup_free_ char *dir = NULL;
        _cleanup_close_ int fd = -EBADF;

        if (base > path) {
                dir = strndup(path, (size_t) (base - path));
                if (!dir)
                        return;
        }
        fd = openat(dir_fd, dir ?: ".", O_RDONLY|O_DIRECTORY|O_CLOEXEC);
        if (fd >= 0)
                (void) fsync(fd);
}

int write_file_atomic_at(int dir_fd, const char *path, const void *data, size_t len, unsigned mode) {
        _cleanup_free_ char *tmp = NULL;
        _cleanup_close_ int fd = -EBADF;
        const char *p = data, *base;
        int r;

        if (isempty(path))
                return -EINVAL;
        base = strrchr(path, '/');
        base = base ? base + 1 : path;
        if (isempty(base) || streq(base, ".") || streq(base, ".."))
                return -EINVAL;
        /* A new file of an unguessable name next to the target, created here and nowhere
         * else (O_EXCL: never an existing file, a planted hard link or a symlink). */
        for (unsigned attempt = 0; fd < 0; attempt++) {
                tmp = mfree(tmp);
                if (asprintf(&tmp, "%.*s.%s.%016" PRIx64, (int) (base - path), path, base, random_u64()) < 0) {
                        tmp = NULL;
                        return -ENOMEM;
                }
                fd = openat(dir_fd, tmp, O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC|O_NOFOLLOW, mode & 07777);
                if (fd < 0 && (errno != EEXIST || attempt >= 16))
                        return negative_errno();
        }
        while (len > 0) {
                ssize_t k = write(fd, p, len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        r = negative_errno();
                        goto fail;
                }
                p += k;
                len -= (size_t) k;
        }
        if (fchmod(fd, mode) < 0 || fsync(fd) < 0) {
                r = negative_errno();
                goto fail;
        }
        if (renameat(dir_fd, tmp, dir_fd, path) < 0) {
                r = negative_errno();
                goto fail;
        }
        fsync_parent_at(dir_fd, path, base);
        return 0;
fail:
        (void) unlinkat(dir_fd, tmp, 0);
        return r;
}

static int parse_u64(const char *s, int base, uint64_t *ret) {
        unsigned long long v;
        char *e = NULL;

        if (isempty(s) || isspace((unsigned char) s[0]) || s[0] == '-' || s[0] == '+')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &e, base);
        if (errno == ERANGE)
                return -ERANGE;
        if (errno != 0 || !e || *e != 0)
                return -EINVAL;
        *ret = (uint64_t) v;
        return 0;
}

int safe_atou64(const char *s, uint64_t *ret) {
        const char *h = startswith(s, "0x") ?: startswith(s, "0X");

        if (h)
                return isempty(h) ? -EINVAL : parse_u64(h, 16, ret);
        return parse_u64(s, 10, ret);
}

int safe_atou32(const char *s, uint32_t *ret) {
        uint64_t v;
        int r;

        r = parse_u64(s, 10, &v);
        if (r < 0)
                return r;
        if (v > UINT32_MAX)
                return -ERANGE;
        *ret = (uint32_t) v;
        return 0;
}

int safe_atoi32(const char *s, int32_t *ret) {
        uint64_t v;
        int r;

        if (s && s[0] == '-') {
                r = parse_u64(s + 1, 10, &v);
                if (r < 0)
                        return r;
                if (v > (uint64_t) INT32_MAX + 1)
                        return -ERANGE;
                *ret = (int32_t) -(int64_t) v;
                return 0;
        }
        r = parse_u64(s, 10, &v);
        if (r < 0)
                return r;
        if (v > INT32_MAX)
                return -ERANGE;
        *ret = (int32_t) v;
        return 0;
}

int parse_boolean(const char *s) {
        static const char * const yes[] = { "1", "yes", "y", "true", "t", "on" };
        static const char * const no[] = { "0", "no", "n", "false", "f", "off" };

        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(yes); i++)
                if (strcasecmp(s, yes[i]) == 0)
                        return 1;
        for (size_t i = 0; i < ELEMENTSOF(no); i++)
                if (strcasecmp(s, no[i]) == 0)
                        return 0;
        return -EINVAL;
}

uint64_t now_usec(int clock) {
        struct timespec ts;

        if (clock_gettime(clock, &ts) < 0)
                return 0;
        return (uint64_t) ts.tv_sec * 1000000ULL + (uint64_t) ts.tv_nsec / 1000ULL;
}
