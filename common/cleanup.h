/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cleanup.h — scope-bound ownership helpers.
 *
 * Variables declared with a _cleanup_*_ attribute are released when they go out of
 * scope. Hand ownership out with TAKE_PTR()/TAKE_FD(), which reset the variable so
 * the cleanup becomes a no-op. Every destructor used here accepts NULL (or -EBADF).
 */
#pragma once

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _pure_ __attribute__((pure))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _likely_(x) (__builtin_expect(!!(x), 1))
#define _unlikely_(x) (__builtin_expect(!!(x), 0))
#define _public_ __attribute__((visibility("default")))
#define _fallthrough_ __attribute__((fallthrough))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Move a pointer out of a cleanup variable. */
#define TAKE_PTR(p)                                     \
        ({                                              \
                __typeof__(p) _tp_ = (p);               \
                (p) = NULL;                             \
                _tp_;                                   \
        })

/* Move an fd out of a cleanup variable. */
#define TAKE_FD(fd)                                     \
        ({                                              \
                int _tf_ = (fd);                        \
                (fd) = -EBADF;                          \
                _tf_;                                   \
        })

/* Define fooptr cleanup for a destructor that takes a pointer and may return anything. */
#define DEFINE_CLEANUP_FUNC(type, func)                 \
        static inline void func##p(type **p) {          \
                if (*p)                                 \
                        func(*p);                       \
        }

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline int safe_close(int fd) {
        if (fd >= 0) {
                int saved = errno;
                (void) close(fd);
                errno = saved;
        }
        return -EBADF;
}

static inline void closep(int *fd) {
        safe_close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

static inline void fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}
#define _cleanup_fclose_ _cleanup_(fclosep)

/* NULL-terminated string vectors. */
char **strv_free(char **l);
static inline void strv_freep(char ***l) {
        strv_free(*l);
}
#define _cleanup_strv_free_ _cleanup_(strv_freep)

static inline void *mfree(void *p) {
        free(p);
        return NULL;
}

/* Frees a and moves b into it, leaving b NULL. */
#define free_and_replace(a, b)                          \
        ({                                              \
                free(a);                                \
                (a) = (b);                              \
                (b) = NULL;                             \
                0;                                      \
        })

static inline int negative_errno(void) {
        /* Use at call sites of libc functions that set errno; never returns 0. */
        return errno > 0 ? -errno : -EIO;
}
