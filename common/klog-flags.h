/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * klog-flags.h — the logging flags of Kubernetes' klog (k8s.io/klog/v2 InitFlags),
 * accepted by every daemon so that a DaemonSet or unit written for a Go device plugin
 * (the Intel plugin's "-v=4", "-logtostderr") starts kgpu unchanged. Any of the forms
 * of opt-parse.h: -v 4, -v=4, --v=4.
 *
 * What each one does in kgpu (which has one log target and levels, no log files):
 *   -v N               N <= 3: --log-level=info; N >= 4: --log-level=debug (the
 *                      Kubernetes convention: V(0)..V(3) are operator information, V(4)
 *                      and above debug detail). A command-line flag like --log-level: it
 *                      beats KGPU_LOG_LEVEL and logLevel, and the later of the two flags
 *                      wins.
 *   -logtostderr, -alsologtostderr (true when given without a value)
 *                      log to stderr, as KGPU_LOG_TARGET=stderr (the flag wins). With
 *                      =false: no change (klog would write files; kgpu writes none).
 *   -stderrthreshold, -log_dir, -log_file, -log_file_max_size, -add_dir_header,
 *   -skip_headers, -skip_log_headers, -one_output, -vmodule, -log_backtrace_at,
 *   -legacy_stderr_threshold_behavior
 *                      checked like klog checks them (a bad value is an error), then
 *                      without effect, said once at notice (klog_flags_log_ignored()).
 */
#pragma once

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct KlogFlags {
        const char *log_level;          /* from -v: "info" or "debug"; NULL: no -v */
        bool logtostderr;               /* -logtostderr given true */
        bool alsologtostderr;           /* -alsologtostderr given true */
        uint32_t ignored;               /* flags without effect given: bit = index in the table */
} KlogFlags;

/* struct option vals KLOG_OPTION_VAL_BASE + index; the table ends with a NULL name. */
#define KLOG_OPTION_VAL_BASE 0x800
const struct option *klog_getopt_options(void);
bool klog_option_val(int val);

/* Applies one flag (val from the table, value as given or NULL). Returns 1 when it
 * was -v (k->log_level set), 0 for the others, or -EINVAL with *ret_why saying what
 * the value should be. Logs nothing. */
int klog_flag_apply(KlogFlags *k, int val, const char *value, const char **ret_why);

/* Whether the flags ask for stderr. */
bool klog_flags_log_to_stderr(const KlogFlags *k);
/* The notice, once per flag given, that it has no effect: call it once the log
 * target is set, so that the notices go where the flags said. */
void klog_flags_log_ignored(const KlogFlags *k);

/* "--help" lines. */
void klog_print_help(void);
