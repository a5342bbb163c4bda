/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * log.h — one logging front for all kgpu processes.
 *
 * Messages go to the journal (sd_journal_send, with CODE_FILE/CODE_LINE and an optional
 * MESSAGE_ID) when stderr is connected to it (JOURNAL_STREAM matches) or when
 * KGPU_LOG_TARGET=journal; otherwise to stderr as "name[pid]: <level> message".
 * The log_*_errno() forms set errno for %m and return -abs(error), so boundary code
 * can write `return log_error_errno(r, "Failed to ...: %m");`.
 * Helper code logs at debug at most; callers at the boundary log once.
 */
#pragma once

#include <stdbool.h>
#include <syslog.h>

#include "common/cleanup.h"

void log_setup(const char *ident);
void log_set_max_level(int level);
int log_get_max_level(void);
/* Parses "debug", "info", "notice", "warning", "err"/"error", "crit", or 0..7. */
int log_level_from_string(const char *s);
/* KGPU_LOG_LEVEL and KGPU_LOG_TARGET (stderr|journal|auto). */
void log_parse_environment(void);
/* Logs to stderr from now on, whatever KGPU_LOG_TARGET says (klog's -logtostderr). */
void log_set_target_stderr(void);

int log_internal(int level, int error, const char *file, int line, const char *func,
                 const char *message_id, const char *format, ...) _printf_(7, 8);

#define log_full_errno(level, error, ...)                                               \
        ({                                                                              \
                int _l_ = (level), _e_ = (error);                                       \
                (_l_ <= log_get_max_level())                                            \
                        ? log_internal(_l_, _e_, __FILE__, __LINE__, __func__, NULL, __VA_ARGS__) \
                        : -(_e_ < 0 ? -_e_ : _e_);                                      \
        })

#define log_debug(...)   log_full_errno(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...)    log_full_errno(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...)  log_full_errno(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...) log_full_errno(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...)   log_full_errno(LOG_ERR, 0, __VA_ARGS__)

#define log_debug_errno(e, ...)   log_full_errno(LOG_DEBUG, e, __VA_ARGS__)
#define log_info_errno(e, ...)    log_full_errno(LOG_INFO, e, __VA_ARGS__)
#define log_notice_errno(e, ...)  log_full_errno(LOG_NOTICE, e, __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_WARNING, e, __VA_ARGS__)
#define log_error_errno(e, ...)   log_full_errno(LOG_ERR, e, __VA_ARGS__)

/* Structured event with a stable journal MESSAGE_ID (32 hex digits). */
#define log_struct(level, message_id, ...) \
        log_internal(level, 0, __FILE__, __LINE__, __func__, message_id, __VA_ARGS__)

#define log_oom() log_error_errno(-ENOMEM, "Out of memory.")

/* Stable MESSAGE_IDs for operator-relevant events. */
#define KGPU_MESSAGE_STARTED        "9c1f4a3b2e7d4f5a8b6c0d1e2f3a4b50"
#define KGPU_MESSAGE_GPU_ADDED      "9c1f4a3b2e7d4f5a8b6c0d1e2f3a4b51"
#define KGPU_MESSAGE_GPU_REMOVED    "9c1f4a3b2e7d4f5a8b6c0d1e2f3a4b52"
#define KGPU_MESSAGE_GPU_HEALTH     "9c1f4a3b2e7d4f5a8b6c0d1e2f3a4b53"
#define KGPU_MESSAGE_ALLOCATED      "9c1f4a3b2e7d4f5a8b6c0d1e2f3a4b54"
#define KGPU_MESSAGE_REGISTERED     "9c1f4a3b2e7d4f5a8b6c0d1e2f3a4b55"
#define KGPU_MESSAGE_KUBELET_GONE   "9c1f4a3b2e7d4f5a8b6c0d1e2f3a4b56"
#define KGPU_MESSAGE_STATE_ERROR    "9c1f4a3b2e7d4f5a8b6c0d1e2f3a4b57"
#define KGPU_MESSAGE_ANSWER_REFUSED "9c1f4a3b2e7d4f5a8b6c0d1e2f3a4b58"  /* grpcd's gate refused an Allocate answer */
#define KGPU_MESSAGE_ALLOCATIONS_FULL "9c1f4a3b2e7d4f5a8b6c0d1e2f3a4b5c"  /* the broker refused an Allocate at broker.maxAllocations */
