/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-smi-internal.h — the text handling the nvidia-smi parsers share (nvidia-smi.c),
 * for the parser files only (nvidia-smi-*.c); nothing else includes it.
 *
 * Contract: smi_lines_split() copies and validates a tool's whole output (size, NUL
 * bytes, control characters; CR before LF and ANSI SGR escapes dropped, tabs kept) and
 * cuts it into lines the parsers may modify in place. smi_fail() sets *ret_error (when
 * ret_error is not NULL) to the message, prefixed "line N: " for N > 0, and returns r.
 * The value helpers return -EBADMSG for anything outside their format and never write
 * their output then.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cleanup.h"
#include "daemons/probe/nvidia-smi.h"

typedef struct Lines {
        char *buf;
        char **line;
        size_t n;
} Lines;

void smi_lines_done(Lines *l);
int smi_lines_split(const char *text, size_t len, Lines *ret, char **ret_error);
/* If any line is a known error output, returns its errno with the tool's words. */
int smi_lines_check_error(const Lines *l, char **ret_error);
/* The opening of every parser: smi_lines_split(), then smi_lines_check_error(). */
int smi_lines_open(const char *text, size_t len, Lines *ret, char **ret_error);

/* Whether a line is one of nvidia-smi's error outputs; e: its kind and words. */
bool smi_classify_line(const char *l, NvidiaSmiError *e);

int smi_fail(char **ret_error, int r, size_t line, const char *fmt, ...) _printf_(4, 5);

bool smi_is_blank(char c);
/* Strips blanks at both ends, in place. */
char *smi_strip(char *s);
bool smi_is_printable(const char *s);
/* Copies a printable string that fits into size bytes. */
int smi_copy_field(char *dst, size_t size, const char *s);
/* Splits s in place on blanks into at most max tokens; returns the count or -E2BIG. */
int smi_tokenize(char *s, char **tok, size_t max);
/* "", "N/A", "[Not Supported]" and the other ways nvidia-smi says "no value". */
bool smi_is_na(const char *s);
bool smi_is_hex_run(const char *s, size_t n);
/* 8-4-4-4-12 hex digits at s; returns the length consumed (36) or 0. */
size_t smi_uuid_body_len(const char *s);
/* Decimal, at most max. */
int smi_parse_small_uint(const char *s, uint32_t max, uint32_t *ret);
/* "MIG-GPU-<uuid>/<gi>/<ci>" -> gi, ci; or "MIG-<uuid>" -> -1, -1. */
int smi_mig_uuid_parse(const char *s, int32_t *ret_gi, int32_t *ret_ci);
/* A version of digits and dots that fits NVIDIA_VERSION_MAX. */
int smi_version_copy(char dst[static NVIDIA_VERSION_MAX], const char *s);

/* A MIG profile name as nvidia-smi -L prints it ("1g.10gb", "1c.3g.40gb"). */
bool smi_profile_is_valid(const char *s);

/* -q output: the indentation of a line; "Key   : value" -> key, value (both stripped),
 * false when there is no ':'. */
size_t smi_indent_of(const char *s);
bool smi_q_key_value(char *s, char **ret_key, char **ret_value);
