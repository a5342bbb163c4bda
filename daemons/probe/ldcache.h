/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * ldcache.h — reads a glibc dynamic linker cache (/etc/ld.so.cache), the file `ldconfig`
 * writes: how kgpu finds the NVIDIA driver's libraries under a driver root without
 * running anything from that root.
 *
 * Format (glibc's, "new" format): the 17-byte magic "glibc-ld.so.cache" and the version
 * "1.1"; uint32 nlibs, uint32 len_strings, uint8 flags (byte order: 0 unknown,
 * 2 little, 3 big endian), 3 bytes padding, uint32 extension_offset, 3 uint32 unused
 * (48 bytes); then nlibs entries of 24 bytes: int32 flags (bits 0-7 the ELF/libc kind,
 * 3 = ELF libc6; bits 8-15 the ABI, 0x03 x86-64, 0x0a AArch64, 0 the 32-bit one),
 * uint32 key and value (offsets, from the header's first byte, of NUL-terminated strings:
 * the soname "libcuda.so.1" and the path "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
 * uint32 osversion, uint64 hwcap; then the strings. Caches of glibc before 2.32 may
 * start with the old format ("ld.so-1.7.0", uint32 nlibs, 12-byte entries) with the new
 * one after it, 8-byte aligned; both layouts are read.
 *
 * The parser is pure and bounded: the input is hostile (any bytes, any length); every
 * offset and count is checked against the size before use, strings must end inside
 * the file and be at most LDCACHE_STRING_MAX bytes, at most LDCACHE_ENTRIES_MAX entries
 * are read. Entries whose strings are bad are skipped, a header that is bad is -EINVAL
 * (-EBADMSG for a byte order that is not the host's). The returned strings point into
 * data (which must stay valid).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define LDCACHE_MAGIC "glibc-ld.so.cache"
#define LDCACHE_VERSION "1.1"
#define LDCACHE_OLD_MAGIC "ld.so-1.7.0"
/* Larger files are not read (a real cache is around 100 KiB). */
#define LDCACHE_FILE_MAX (16U * 1024U * 1024U)
#define LDCACHE_ENTRIES_MAX 65536U
#define LDCACHE_STRING_MAX 4095U

#define LDCACHE_FLAG_TYPE_MASK 0x00ff
#define LDCACHE_FLAG_ELF_LIBC6 0x0003
#define LDCACHE_FLAG_X8664_LIB64 0x0300
#define LDCACHE_FLAG_AARCH64_LIB64 0x0a00

typedef struct LdCacheEntry {
        const char *key;        /* the soname: "libcuda.so.1" */
        const char *value;      /* the path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1" */
        int32_t flags;
} LdCacheEntry;

/* The flags of libraries the host's dynamic linker loads (ELF libc6 of its own ABI). */
int32_t ldcache_host_flags(void);

/* Parses data; *ret (caller frees, may be NULL with *ret_n 0) gets the entries whose
 * flags equal want_flags (all entries when want_flags is -1), in file order. */
int ldcache_parse(const void *data, size_t size, int32_t want_flags, LdCacheEntry **ret, size_t *ret_n);
