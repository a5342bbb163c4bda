/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-opt-parse.c — Go-style command lines (opt-parse.c) and what the daemons make of
 * them (daemon_parse_argv(): klog's flags, no abbreviations). */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/daemon.h"
#include "common/opt-parse.h"
#include "common/util.h"
#include "tests/unit/test-main.h"

enum { O_HELP = 1, O_VERSION, O_CONFIG, O_BOOL, O_V };

static const struct option table[] = {
        { "help",    no_argument,       NULL, O_HELP    },
        { "version", no_argument,       NULL, O_VERSION },
        { "config",  required_argument, NULL, O_CONFIG  },
        { "flag",    optional_argument, NULL, O_BOOL    },
        { "v",       required_argument, NULL, O_V       },
        {}
};

/* Parses args (NULL-terminated, argv[0] added) to the end of the options; returns
 * the vals seen, "val:value" each, space-separated, then "|" and the arguments left,
 * or "ERR arg: why". */
static char *parse(const char * const *args) {
        char *argv[32] = { (char *) "prog" }, *out = NULL;
        const char *value;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);
        OptParser p;
        int argc = 1, r;

        for (; args[argc - 1]; argc++)
                argv[argc] = (char *) args[argc - 1];
        opt_parser_init(&p, argc, argv, table);
        while ((r = opt_next(&p, &value)) > 0)
                fprintf(f, "%d:%s ", r, value ?: "-");
        if (r < 0)
                fprintf(f, "ERR %s: %s", p.arg, p.error);
        else {
                fputs("|", f);
                for (int i = p.index; i < argc; i++)
                        fprintf(f, " %s", argv[i]);
        }
        fclose(f);
        return out;
}

#define assert_parse(want, ...) do {                                            \
                static const char * const _a[] = { __VA_ARGS__, NULL };         \
                char *_got = parse(_a);                                         \
                ck_assert_str_eq(_got, want);                                   \
                free(_got);                                                     \
        } while (0)

START_TEST(test_forms) {
        /* One or two dashes, value after '=' or as the next argument. */
        assert_parse("5:4 |", "-v", "4");
        assert_parse("5:4 |", "-v=4");
        assert_parse("5:4 |", "--v=4");
        assert_parse("5:4 |", "--v", "4");
        assert_parse("3:FILE 3:x=y |", "-config", "FILE", "--config=x=y");
        assert_parse("3: |", "--config=");
        assert_parse("1:- 2:- |", "-help", "--version");
        /* An optional value only after '=' (Go's booleans): the next argument stays. */
        assert_parse("4:- | true", "-flag", "true");
        assert_parse("4:false |", "-flag=false");
        /* The end: "--" (consumed), an argument, "-" and "-<digit>" are arguments. */
        assert_parse("4:- | -v 4", "-flag", "--", "-v", "4");
        assert_parse("| x -v 4", "x", "-v", "4");
        assert_parse("| -", "-");
        assert_parse("| -1", "-1");
        assert_parse("|", "--");
}
END_TEST

START_TEST(test_exact_names) {
        /* getopt_long_only() took these as abbreviations of --version and --help. */
        assert_parse("ERR -vers: unknown option", "-vers");
        assert_parse("ERR --vers: unknown option", "--vers");
        assert_parse("ERR -he: unknown option", "-he");
        assert_parse("ERR --conf=x: unknown option", "--conf=x");
        assert_parse("ERR ---v: unknown option", "---v", "4");
        assert_parse("ERR -=x: unknown option", "-=x");
        assert_parse("ERR -v: needs a value", "-v");
        assert_parse("ERR --help=yes: takes no value", "--help=yes");
}
END_TEST

/* --- daemon_parse_argv(): the daemons' command line ---------------------------------- */

static const DaemonInfo info = { .name = "test", .description = "test" };

static int daemon_parse(const char * const *args, DaemonArgs *a) {
        char *argv[32] = { (char *) "kgpu-test" };
        int argc = 1;

        for (; args[argc - 1]; argc++)
                argv[argc] = (char *) args[argc - 1];
        return daemon_parse_argv(&info, argc, argv, a);
}

/* The log level the command line gives, with KGPU_LOG_LEVEL=notice and no file; NULL
 * when the command line is refused. */
static char *level_of(const char * const *args) {
        _cleanup_(daemon_args_done) DaemonArgs a = {};
        _cleanup_(config_freep) Config *c = NULL;

        setenv("KGPU_CONFIG", "", 1);
        setenv("KGPU_LOG_LEVEL", "notice", 1);
        if (daemon_parse(args, &a) != 1 || daemon_load_config(&a, &c) < 0)
                return NULL;
        return strdup(c->log_level);
}

#define assert_level(want, ...) do {                                            \
                static const char * const _a[] = { __VA_ARGS__, NULL };         \
                char *_got = level_of(_a);                                      \
                ck_assert_ptr_nonnull(_got);                                    \
                ck_assert_str_eq(_got, want);                                   \
                free(_got);                                                     \
        } while (0)

START_TEST(test_klog_verbosity) {
        static const char * const none[] = { NULL };
        char *l = level_of(none);

        ck_assert_str_eq(l, "notice");
        free(l);
        /* -v beats KGPU_LOG_LEVEL, as --log-level does; 0..3 info, 4 and more debug. */
        assert_level("debug", "-v", "4");
        assert_level("debug", "-v=4");
        assert_level("debug", "--v=10");
        assert_level("info", "-v", "0");
        assert_level("info", "-v=1");
        assert_level("info", "--v", "3");
        assert_level("info", "-v=-1");
        /* With --log-level the later flag wins. */
        assert_level("warning", "-v=4", "--log-level=warning");
        assert_level("debug", "--log-level=warning", "-v", "4");
}
END_TEST

START_TEST(test_klog_refused) {
        static const char * const bad[][3] = {
                { "-v", NULL },                         /* was --version: printed it, exit 0 */
                { "-v", "x" },
                { "-v=", NULL },
                { "-vers", NULL },                      /* abbreviations, once --version */
                { "--introspec", NULL },
                { "-conf", "/x" },
                { "-stderrthreshold=LOUD", NULL },
                { "-stderrthreshold=4", NULL },
                { "-logtostderr=maybe", NULL },
                { "-log_file_max_size=-1", NULL },
                { "-vmodule=foo", NULL },
                { "-vmodule==2", NULL },
                { "-vmodule=foo=x", NULL },
                { "-log_backtrace_at=main:10", NULL },
                { "-log_backtrace_at=main.go:0", NULL },
                { "-log_backtrace_at=main.go", NULL },
        };
        static const char * const then_arg[] = { "-v", "4", "4", NULL };

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                DaemonArgs a = {};

                ck_assert_msg(daemon_parse(bad[i], &a) == -EINVAL, "accepted: %s %s", bad[i][0],
                              bad[i][1] ?: "");
        }
        {
                DaemonArgs a = {};

                ck_assert_int_eq(daemon_parse(then_arg, &a), -EINVAL);
        }
}
END_TEST

START_TEST(test_klog_accepted) {
        static const char * const all[] = {
                "-v=2", "-logtostderr", "-alsologtostderr=false", "-stderrthreshold=INFO",
                "--stderrthreshold", "error", "-stderrthreshold=2", "-log_dir", "/var/log",
                "-log_file=/var/log/x.log", "-log_file_max_size=1800", "-add_dir_header",
                "-skip_headers=true", "-skip_log_headers", "-one_output=1", "-vmodule=gpu*=4,,main=2",
                "-vmodule=", "-log_backtrace_at=main.go:42", "-log_backtrace_at=",
                "-legacy_stderr_threshold_behavior=false", "-shared-dev-num=2", NULL };
        _cleanup_(daemon_args_done) DaemonArgs a = {};

        ck_assert_int_eq(daemon_parse(all, &a), 1);
        ck_assert(klog_flags_log_to_stderr(&a.klog));
        ck_assert_ptr_null(a.verb);
        /* Every flag without effect is noted, once the log target is set. */
        ck_assert_uint_ne(a.klog.ignored, 0);
}
END_TEST

START_TEST(test_klog_stderr) {
        static const struct {
                const char *args[3];
                bool want;
        } cases[] = {
                { { NULL }, false },
                { { "-logtostderr", NULL }, true },
                { { "--logtostderr=true", NULL }, true },
                { { "-logtostderr=false", NULL }, false },
                { { "-alsologtostderr", NULL }, true },
                { { "-logtostderr", "-logtostderr=0", NULL }, false },
                { { "-logtostderr=false", "-alsologtostderr=t", NULL }, true },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(daemon_args_done) DaemonArgs a = {};

                ck_assert_int_eq(daemon_parse(cases[i].args, &a), 1);
                ck_assert_msg(klog_flags_log_to_stderr(&a.klog) == cases[i].want, "case %zu", i);
        }
}
END_TEST

static Suite *opt_parse_suite(void) {
        Suite *s = suite_create("opt-parse");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_forms);
        tcase_add_test(tc, test_exact_names);
        tcase_add_test(tc, test_klog_verbosity);
        tcase_add_test(tc, test_klog_refused);
        tcase_add_test(tc, test_klog_accepted);
        tcase_add_test(tc, test_klog_stderr);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(opt_parse_suite)
