/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * labels.c — the NFD feature file and the label table the vendors share (see labels.h).
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/labels.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/outputs.h"
#include "daemons/probe/source.h"

void label_table_done(LabelTable *t) {
        strv_free(t->keys);
        strv_free(t->values);
}

int label_table_set(LabelTable *t, const char *key, const char *value) {
        int r;

        for (size_t i = 0; i < t->n; i++)
                if (streq(t->keys[i], key))
                        return free_and_strdup(&t->values[i], value);
        r = strv_extend(&t->keys, key);
        if (r < 0)
                return r;
        r = strv_extend(&t->values, value);
        if (r < 0)
                return r;
        t->n++;
        return 0;
}

int label_table_setfv(LabelTable *t, const char *key, const char *fmt, va_list ap) {
        _cleanup_free_ char *v = NULL;

        if (vasprintf(&v, fmt, ap) < 0)
                return -ENOMEM;
        return label_table_set(t, key, v);
}

int label_table_setf(LabelTable *t, const char *key, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = label_table_setfv(t, key, fmt, ap);
        va_end(ap);
        return r;
}

int label_table_lines(const LabelTable *t, char ***ret) {
        _cleanup_strv_free_ char **lines = NULL;
        int r;

        for (size_t i = 0; i < t->n; i++) {
                char *line;

                if (asprintf(&line, "%s=%s", t->keys[i], t->values[i]) < 0)
                        return -ENOMEM;
                r = strv_consume(&lines, line);
                if (r < 0)
                        return r;
        }
        strv_sort(lines);
        *ret = TAKE_PTR(lines);
        return 0;
}

int labels_build(Manager *m, char ***ret) {
        _cleanup_strv_free_ char **all = NULL;
        int r;

        for (size_t i = 0; i < gpu_sources_count; i++) {
                _cleanup_strv_free_ char **l = NULL;

                if (!gpu_sources[i]->labels)
                        continue;
                r = gpu_sources[i]->labels(m, m->source_data[i], m->gpus, m->n_gpus, &l);
                if (r < 0)
                        return r;
                for (char **p = l; p && *p; p++) {
                        r = strv_extend(&all, *p);
                        if (r < 0)
                                return r;
                }
        }
        strv_sort(all);
        *ret = TAKE_PTR(all);
        return 0;
}

int labels_write_feature_file(const char *path, char * const *lines) {
        _cleanup_free_ char *text = NULL, *t = NULL;
        int r;

        if (strv_length((char **) lines) == 0) {
                /* No GPU: no label, and no file NFD would have to read. */
                r = outputs_remove_feature_file(path);
                if (r == -EEXIST) {
                        log_debug("%s was not written by kgpu, leaving it.", path);
                        return 0;
                }
                return r < 0 ? r : 0;
        }
        text = strv_join((char **) lines, "\n");
        if (!text)
                return -ENOMEM;
        if (asprintf(&t, "%s\n", text) < 0)
                return -ENOMEM;
        return outputs_write_atomic(path, t, strlen(t));
}
