/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* opt-parse.c — Go-style command lines over struct option tables (see opt-parse.h). */

#include <errno.h>
#include <string.h>

#include "common/opt-parse.h"

void opt_parser_init(OptParser *p, int argc, char **argv, const struct option *options) {
        *p = (OptParser) {
                .argc = argc,
                .argv = argv,
                .options = options,
                .index = 1,
        };
}

static const struct option *opt_find(const struct option *options, const char *name, size_t len) {
        for (const struct option *o = options; o->name; o++)
                if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
                        return o;
        return NULL;
}

static int opt_fail(OptParser *p, const char *why) {
        p->error = why;
        return -EINVAL;
}

int opt_next(OptParser *p, const char **ret_value) {
        const struct option *o;
        const char *a, *name, *eq;

        *ret_value = NULL;
        if (p->done || p->index >= p->argc)
                return 0;
        a = p->argv[p->index];
        p->arg = a;
        if (a[0] != '-' || a[1] == 0 || (a[1] >= '0' && a[1] <= '9'))
                return 0;                       /* an argument: "x", "-", "-1" */
        if (a[1] == '-' && a[2] == 0) {
                p->index++;
                p->done = true;
                return 0;
        }
        name = a + (a[1] == '-' ? 2 : 1);
        if (name[0] == '-' || name[0] == '=')
                return opt_fail(p, "unknown option");   /* "---x", "-=x", as Go refuses them */
        eq = strchr(name, '=');
        o = opt_find(p->options, name, eq ? (size_t) (eq - name) : strlen(name));
        if (!o)
                return opt_fail(p, "unknown option");
        p->index++;
        switch (o->has_arg) {
        case no_argument:
                if (eq)
                        return opt_fail(p, "takes no value");
                break;
        case optional_argument:
                if (eq)
                        *ret_value = eq + 1;
                break;
        default:
                if (eq)
                        *ret_value = eq + 1;
                else if (p->index < p->argc)
                        *ret_value = p->argv[p->index++];
                else
                        return opt_fail(p, "needs a value");
        }
        return o->val;
}
