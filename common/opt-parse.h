/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * opt-parse.h — command lines read the way Go's flag package reads them, over the same
 * struct option tables getopt_long() takes. Used by the daemons, kgpuctl and
 * kgpu-render-device (libc only: the static helper links it).
 *
 * One or two dashes mean the same ("-v", "--v", "-config", "--config"). A value
 * follows '=' or is the next argument ("-v=4", "-v 4", "--config FILE"); an option
 * with an optional value (the booleans) takes it only after '=' ("-logtostderr",
 * "-logtostderr=false"), as Go does. Names match exactly: no abbreviations, unlike
 * getopt_long_only() ("-v" is never --version, "--vers" is an unknown option).
 * An argument "-" followed by a digit ("-1") is not an option: no option name starts
 * with a digit, so it is left to the caller as an argument (a negative number).
 *
 * opt_next() stops at "--" (consumed; later calls return 0 at once) and at the first
 * argument that is not an option; p->index is then that argument (or argc). A caller
 * that takes options anywhere (kgpuctl) reads the argument, increments p->index and
 * calls opt_next() again. The struct option .flag field is ignored; .val must be > 0.
 */
#pragma once

#include <getopt.h>
#include <stdbool.h>

typedef struct OptParser {
        int argc;
        char **argv;
        const struct option *options;   /* ended by an entry with name NULL */
        int index;                      /* next argument to read */
        bool done;                      /* "--" seen: no more options */
        const char *arg;                /* the argument opt_next() looked at last, for messages */
        const char *error;              /* why opt_next() failed: "unknown option", ... */
} OptParser;

/* Starts at argv[1]. */
void opt_parser_init(OptParser *p, int argc, char **argv, const struct option *options);

/* Returns the matched option's val, with *ret_value the value (NULL when none was
 * given, for no_argument and optional_argument options); 0 at the end of the options
 * (see above); -EINVAL when p->arg is an unknown option, lacks its value or has one it
 * does not take (p->error says which). */
int opt_next(OptParser *p, const char **ret_value);
