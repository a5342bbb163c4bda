/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * labels.h — the NFD local feature file: every GPU source's node labels in one file.
 *
 * Contract: labels_build() asks each source (source.h) for its label lines, in table
 * order, and sorts them all; labels_write_feature_file() writes them ("name=value\n"
 * each) atomically (outputs_write_atomic), or, with no line, removes the file if it is
 * kgpu's (outputs_remove_feature_file(): one kgpu did not write stays). The vendor label
 * modules (labels-intel.c, labels-nvidia.c) build their lines with the LabelTable below:
 * a key/value table where a later set of a key replaces its value (as NFD merges rules
 * that write the same label), printed as sorted lines.
 * Functions return 0 or a negative errno and do not log above debug.
 */
#pragma once

#include <stdarg.h>
#include <stddef.h>

#include "common/util.h"

typedef struct Manager Manager;

typedef struct LabelTable {
        char **keys;
        char **values;
        size_t n;
} LabelTable;

void label_table_done(LabelTable *t);
int label_table_set(LabelTable *t, const char *key, const char *value);
int label_table_setf(LabelTable *t, const char *key, const char *fmt, ...) _printf_(3, 4);
int label_table_setfv(LabelTable *t, const char *key, const char *fmt, va_list ap) _printf_(3, 0);
/* The "key=value" lines, sorted, into *ret (NULL for an empty table). */
int label_table_lines(const LabelTable *t, char ***ret);

/* Every source's labels for the manager's GPUs, sorted. */
int labels_build(Manager *m, char ***ret);

/* Writes lines to the feature file at path, or removes kgpu's file there for none. */
int labels_write_feature_file(const char *path, char * const *lines);
