/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* log.c — journal or stderr logging (see log.h). */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SD_JOURNAL_SUPPRESS_LOCATION 1
#include <systemd/sd-journal.h>

#include "common/log.h"
#include "common/util.h"

/* Process-wide logging settings: the one exception to "no mutable globals", as in
 * every daemon we take after; set once at start-up. */
static int log_max_level = LOG_INFO;
static const char *log_ident = "kgpu";
static int log_to_journal = -1; /* -1: decide on first use */

void log_setup(const char *ident) {
        log_ident = ident;
}

void log_set_max_level(int level) {
        log_max_level = level;
}

int log_get_max_level(void) {
        return log_max_level;
}

int log_level_from_string(const char *s) {
        static const char * const names[] = {
                "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
        };
        uint32_t v;

        if (!s)
                return -EINVAL;
        if (safe_atou32(s, &v) == 0)
                return v <= LOG_DEBUG ? (int) v : -ERANGE;
        if (streq(s, "error"))
                return LOG_ERR;
        if (streq(s, "warn"))
                return LOG_WARNING;
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (streq(s, names[i]))
                        return (int) i;
        return -EINVAL;
}

static bool stderr_is_journal(void) {
        const char *e = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;

        if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
                return false;
        if (fstat(STDERR_FILENO, &st) < 0)
                return false;
        return (unsigned long long) st.st_dev == dev && (unsigned long long) st.st_ino == ino;
}

void log_parse_environment(void) {
        const char *e;
        int l;

        e = getenv("KGPU_LOG_LEVEL");
        if (e) {
                l = log_level_from_string(e);
                if (l >= 0)
                        log_max_level = l;
        }
        e = getenv("KGPU_LOG_TARGET");
        if (streq(e, "journal"))
                log_to_journal = 1;
        else if (streq(e, "stderr"))
                log_to_journal = 0;
}

void log_set_target_stderr(void) {
        log_to_journal = 0;
}

int log_internal(int level, int error, const char *file, int line, const char *func,
                 const char *message_id, const char *format, ...) {
        static const char * const prefix[] = {
                "<emerg>", "<alert>", "<crit>", "<error>", "<warning>", "<notice>", "", "<debug>",
        };
        char buf[2048];
        va_list ap;
        int e = error < 0 ? -error : error;

        if (log_to_journal < 0)
                log_to_journal = stderr_is_journal();

        errno = e;
        va_start(ap, format);
        (void) vsnprintf(buf, sizeof(buf), format, ap);
        va_end(ap);

        if (log_to_journal) {
                char cf[256], cl[32], mid[64], er[32];

                (void) snprintf(cf, sizeof(cf), "CODE_FILE=%s", file);
                (void) snprintf(cl, sizeof(cl), "CODE_LINE=%d", line);
                (void) snprintf(er, sizeof(er), "ERRNO=%d", e);
                (void) snprintf(mid, sizeof(mid), "MESSAGE_ID=%s", message_id ?: "");
                (void) sd_journal_send("MESSAGE=%s", buf,
                                       "PRIORITY=%d", level & 7,
                                       "SYSLOG_IDENTIFIER=%s", log_ident,
                                       "CODE_FUNC=%s", func,
                                       cf, cl,
                                       e ? er : "ERRNO=0",
                                       message_id ? mid : NULL,
                                       NULL);
        } else
                fprintf(stderr, "%s[%d]: %s%s%s\n", log_ident, (int) getpid(),
                        prefix[level & 7], (level & 7) == LOG_INFO ? "" : " ", buf);

        return -e;
}
