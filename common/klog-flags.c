/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* klog-flags.c — klog's logging flags mapped onto kgpu's logging (see klog-flags.h). */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/klog-flags.h"
#include "common/log.h"
#include "common/util.h"

typedef enum KlogKind {
        KLOG_VERBOSITY,                 /* -v */
        KLOG_TO_STDERR,                 /* -logtostderr */
        KLOG_ALSO_TO_STDERR,            /* -alsologtostderr */
        KLOG_BOOL,                      /* without effect */
        KLOG_STRING,                    /* without effect */
        KLOG_SIZE,                      /* uint64, without effect */
        KLOG_SEVERITY,                  /* INFO..FATAL or 0..3, without effect */
        KLOG_VMODULE,                   /* pattern=N,..., without effect */
        KLOG_TRACE,                     /* file.go:N or empty, without effect */
} KlogKind;

typedef struct KlogFlag {
        const char *name;
        KlogKind kind;
        const char *why;                /* the notice for a flag without effect */
} KlogFlag;

/* At most 32: KlogFlags.ignored has a bit for each. */
static const KlogFlag flags[] = {
        { "v",                  KLOG_VERBOSITY,      NULL },
        { "logtostderr",        KLOG_TO_STDERR,      NULL },
        { "alsologtostderr",    KLOG_ALSO_TO_STDERR, NULL },
        { "stderrthreshold",    KLOG_SEVERITY,       "every message at or above the log level goes to the one log target" },
        { "log_dir",            KLOG_STRING,         "kgpu writes no log files (journal or stderr)" },
        { "log_file",           KLOG_STRING,         "kgpu writes no log files (journal or stderr)" },
        { "log_file_max_size",  KLOG_SIZE,           "kgpu writes no log files (journal or stderr)" },
        { "add_dir_header",     KLOG_BOOL,           "kgpu's messages carry no file header" },
        { "skip_headers",       KLOG_BOOL,           "kgpu's stderr lines have no klog header" },
        { "skip_log_headers",   KLOG_BOOL,           "kgpu writes no log files (journal or stderr)" },
        { "one_output",         KLOG_BOOL,           "kgpu writes each message once" },
        { "vmodule",            KLOG_VMODULE,        "kgpu has one log level for all its files (-v, --log-level)" },
        { "log_backtrace_at",   KLOG_TRACE,          "kgpu logs no stack traces" },
        { "legacy_stderr_threshold_behavior", KLOG_BOOL, "every message at or above the log level goes to the one log target" },
};

const struct option *klog_getopt_options(void) {
        static struct option opts[ELEMENTSOF(flags) + 1];

        if (!opts[0].name)
                for (size_t i = 0; i < ELEMENTSOF(flags); i++) {
                        bool boolean = flags[i].kind == KLOG_TO_STDERR || flags[i].kind == KLOG_ALSO_TO_STDERR ||
                                       flags[i].kind == KLOG_BOOL;

                        opts[i] = (struct option) {
                                .name = flags[i].name,
                                .has_arg = boolean ? optional_argument : required_argument,
                                .val = KLOG_OPTION_VAL_BASE + (int) i,
                        };
                }
        return opts;
}

bool klog_option_val(int val) {
        return val >= KLOG_OPTION_VAL_BASE && (size_t) (val - KLOG_OPTION_VAL_BASE) < ELEMENTSOF(flags);
}

static bool valid_severity(const char *s) {
        static const char * const names[] = { "INFO", "WARNING", "ERROR", "FATAL" };
        int32_t v;

        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (strcasecmp(s, names[i]) == 0)
                        return true;
        return safe_atoi32(s, &v) == 0 && v >= 0 && v <= 3;
}

/* klog's moduleSpec: comma-separated pattern=N, empty entries skipped. */
static bool valid_vmodule(const char *s) {
        for (const char *p = s; *p; ) {
                size_t len = strcspn(p, ",");
                const char *eq = memchr(p, '=', len);
                char level[16];
                int32_t v;

                if (len > 0) {
                        if (!eq || eq == p || (size_t) (p + len - eq - 1) >= sizeof(level))
                                return false;
                        memcpy(level, eq + 1, (size_t) (p + len - eq - 1));
                        level[p + len - eq - 1] = 0;
                        if (memchr(eq + 1, '=', (size_t) (p + len - eq - 1)) || safe_atoi32(level, &v) < 0)
                                return false;
                }
                p += len;
                if (*p == ',')
                        p++;
        }
        return true;
}

/* klog's traceLocation: empty, or file:N with a '.' in file and N > 0. */
static bool valid_trace(const char *s) {
        const char *colon = strchr(s, ':');
        int32_t line;

        if (isempty(s))
                return true;
        if (!colon || strchr(colon + 1, ':') || !memchr(s, '.', (size_t) (colon - s)))
                return false;
        return safe_atoi32(colon + 1, &line) == 0 && line > 0;
}

int klog_flag_apply(KlogFlags *k, int val, const char *value, const char **ret_why) {
        const KlogFlag *f;
        uint64_t size;
        int32_t v;
        int b = 1;

        if (!klog_option_val(val)) {
                *ret_why = "not a klog flag";
                return -EINVAL;
        }
        f = &flags[val - KLOG_OPTION_VAL_BASE];
        switch (f->kind) {
        case KLOG_VERBOSITY:
                if (!value || safe_atoi32(value, &v) < 0) {
                        *ret_why = "expected a verbosity number (0..3: info, 4 and more: debug)";
                        return -EINVAL;
                }
                k->log_level = v >= 4 ? "debug" : "info";
                return 1;
        case KLOG_TO_STDERR:
        case KLOG_ALSO_TO_STDERR:
        case KLOG_BOOL:
                if (value) {
                        b = parse_boolean(value);
                        if (b < 0) {
                                *ret_why = "expected a boolean (true or false)";
                                return -EINVAL;
                        }
                }
                if (f->kind == KLOG_TO_STDERR)
                        k->logtostderr = b;
                else if (f->kind == KLOG_ALSO_TO_STDERR)
                        k->alsologtostderr = b;
                break;
        case KLOG_STRING:
                break;
        case KLOG_SIZE:
                if (!value || safe_atou64(value, &size) < 0) {
                        *ret_why = "expected a size in megabytes";
                        return -EINVAL;
                }
                break;
        case KLOG_SEVERITY:
                if (!value || !valid_severity(value)) {
                        *ret_why = "expected INFO, WARNING, ERROR, FATAL or 0..3";
                        return -EINVAL;
                }
                break;
        case KLOG_VMODULE:
                if (!value || !valid_vmodule(value)) {
                        *ret_why = "expected a comma-separated list of pattern=N";
                        return -EINVAL;
                }
                break;
        case KLOG_TRACE:
                if (!value || !valid_trace(value)) {
                        *ret_why = "expected file.go:N";
                        return -EINVAL;
                }
                break;
        }
        if (f->why)
                k->ignored |= UINT32_C(1) << (val - KLOG_OPTION_VAL_BASE);
        return 0;
}

bool klog_flags_log_to_stderr(const KlogFlags *k) {
        return k->logtostderr || k->alsologtostderr;
}

void klog_flags_log_ignored(const KlogFlags *k) {
        for (size_t i = 0; i < ELEMENTSOF(flags); i++)
                if (k->ignored & (UINT32_C(1) << i))
                        log_notice("klog flag -%s has no effect: %s.", flags[i].name, flags[i].why);
}

void klog_print_help(void) {
        printf("\nklog flags (Kubernetes components' logging flags; one or two dashes):\n"
               "  -v=N                             0..3: --log-level=info, 4 and more: --log-level=debug\n"
               "  -logtostderr, -alsologtostderr   log to stderr (as KGPU_LOG_TARGET=stderr)\n"
               "  -stderrthreshold, -log_dir, -log_file, -log_file_max_size, -add_dir_header,\n"
               "  -skip_headers, -skip_log_headers, -one_output, -vmodule, -log_backtrace_at,\n"
               "  -legacy_stderr_threshold_behavior\n"
               "                                   checked, then without effect (no log files)\n");
}
