/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mps-systemd.c — kgpu-mps@.service instances through systemd's D-Bus API (see
 * mps-systemd.h).
 *
 * One bus connection of its own (the probe's main connection is set up later, after
 * the first enumeration, and carries the probe's name), one JobRemoved match on it, and
 * a list of the jobs waited for, each with its method-call slot and a timer.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-bus.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/mps-systemd.h"

#define SYSTEMD_BUS        "org.freedesktop.systemd1"
#define SYSTEMD_PATH       "/org/freedesktop/systemd1"
#define SYSTEMD_MANAGER    "org.freedesktop.systemd1.Manager"
#define JOB_TIMEOUT_USEC   (60ULL * 1000ULL * 1000ULL)
#define UNIT_NAME_MAX      255U
#define ENV_VALUE_MAX      1024U

struct MpsSystemd {
        sd_event *event;
        sd_bus *bus;
        sd_bus_slot *job_removed;
        MpsSystemdJob *jobs;
};

struct MpsSystemdJob {
        MpsSystemd *systemd;
        char *method;
        char *unit;
        char *path;             /* the job's object path, once the call answered */
        sd_bus_slot *call;
        sd_event_source *timer;
        MpsSystemdJobCallback callback;
        void *userdata;
        MpsSystemdJob *prev, *next;
};

MpsSystemdJob *mps_systemd_job_free(MpsSystemdJob *j) {
        if (!j)
                return NULL;
        if (j->systemd) {
                if (j->prev)
                        j->prev->next = j->next;
                else
                        j->systemd->jobs = j->next;
                if (j->next)
                        j->next->prev = j->prev;
        }
        sd_bus_slot_unref(j->call);
        sd_event_source_disable_unref(j->timer);
        free(j->method);
        free(j->unit);
        free(j->path);
        return mfree(j);
}

MpsSystemd *mps_systemd_free(MpsSystemd *s) {
        if (!s)
                return NULL;
        /* Jobs still waited for lose their manager; their owners free them. */
        for (MpsSystemdJob *j = s->jobs, *next; j; j = next) {
                next = j->next;
                j->systemd = NULL;
                j->prev = j->next = NULL;
                j->call = sd_bus_slot_unref(j->call);
                j->timer = sd_event_source_disable_unref(j->timer);
        }
        sd_bus_slot_unref(s->job_removed);
        sd_bus_flush_close_unref(s->bus);
        sd_event_unref(s->event);
        return mfree(s);
}

/* Ends the job: the callback is the last thing (it may free the job). */
static void job_finish(MpsSystemdJob *j, int error, const char *message) {
        j->call = sd_bus_slot_unref(j->call);
        j->timer = sd_event_source_disable_unref(j->timer);
        j->callback(j, error, message, j->userdata);
}

static int on_job_removed(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        MpsSystemd *s = userdata;
        const char *path, *unit, *result;
        uint32_t id;
        int r;

        r = sd_bus_message_read(m, "uoss", &id, &path, &unit, &result);
        if (r < 0) {
                log_debug_errno(r, "Failed to read a JobRemoved signal, ignoring: %m");
                return 0;
        }
        for (MpsSystemdJob *j = s->jobs; j; j = j->next) {
                _cleanup_free_ char *msg = NULL;

                if (!j->path || !streq(j->path, path))
                        continue;
                if (streq(result, "done")) {
                        job_finish(j, 0, NULL);
                        return 0;
                }
                if (asprintf(&msg, "%s %s: the job ended with result '%s' (see journalctl -u %s)",
                             j->method, j->unit, result, j->unit) < 0)
                        msg = NULL;
                job_finish(j, -EIO, msg ?: "The systemd job failed.");
                return 0;
        }
        return 0;
}

static int on_job_queued(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        MpsSystemdJob *j = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        _cleanup_free_ char *msg = NULL;
        const char *path;
        int r;

        j->call = sd_bus_slot_unref(j->call);
        if (e) {
                r = sd_bus_error_has_name(e, "org.freedesktop.systemd1.NoSuchUnit") ? -ENOENT :
                    sd_bus_message_get_errno(reply);
                if (asprintf(&msg, "%s %s: %s", j->method, j->unit, e->message ?: e->name) < 0)
                        msg = NULL;
                job_finish(j, r < 0 ? r : -EIO, msg ?: "The systemd call failed.");
                return 0;
        }
        r = sd_bus_message_read(reply, "o", &path);
        if (r >= 0)
                r = free_and_strdup(&j->path, path);
        if (r < 0) {
                if (asprintf(&msg, "%s %s: unreadable answer from systemd", j->method, j->unit) < 0)
                        msg = NULL;
                job_finish(j, r, msg ?: "Unreadable answer from systemd.");
        }
        return 0;
}

static int on_job_timeout(sd_event_source *source, uint64_t usec, void *userdata) {
        MpsSystemdJob *j = userdata;
        _cleanup_free_ char *msg = NULL;

        if (asprintf(&msg, "%s %s: no result from systemd in time", j->method, j->unit) < 0)
                msg = NULL;
        job_finish(j, -ETIME, msg ?: "No result from systemd in time.");
        return 0;
}

int mps_systemd_open(sd_event *event, MpsSystemd **ret) {
        _cleanup_(mps_systemd_freep) MpsSystemd *s = NULL;
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        int r;

        if (!event || !ret)
                return -EINVAL;
        s = calloc(1, sizeof(MpsSystemd));
        if (!s)
                return -ENOMEM;
        s->event = sd_event_ref(event);
        r = sd_bus_open_system(&s->bus);
        if (r < 0)
                return r;
        /* Answered by the bus itself: no activation, no systemd needed to say "no". */
        r = sd_bus_call_method(s->bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                               "GetNameOwner", &error, &reply, "s", SYSTEMD_BUS);
        if (r < 0) {
                if (sd_bus_error_has_name(&error, SD_BUS_ERROR_NAME_HAS_NO_OWNER)) {
                        *ret = NULL;
                        return 0;
                }
                return r;
        }
        r = sd_bus_attach_event(s->bus, event, SD_EVENT_PRIORITY_NORMAL);
        if (r < 0)
                return r;
        r = sd_bus_match_signal_async(s->bus, &s->job_removed, SYSTEMD_BUS, SYSTEMD_PATH, SYSTEMD_MANAGER,
                                      "JobRemoved", on_job_removed, NULL, s);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 1;
}

static bool unit_char_ok(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == ':' || c == '-' || c == '_' || c == '.';
}

int mps_systemd_unit_name(const char *uuid, char **ret) {
        char *n;

        if (isempty(uuid) || !ret || strlen(uuid) > UNIT_NAME_MAX - strlen(MPS_SYSTEMD_TEMPLATE))
                return -EINVAL;
        for (const char *p = uuid; *p; p++)
                if (!unit_char_ok(*p))
                        return -EINVAL;
        if (asprintf(&n, "kgpu-mps@%s.service", uuid) < 0)
                return -ENOMEM;
        *ret = n;
        return 0;
}

/* Characters that an EnvironmentFile and a shell word both take as they are. */
static bool env_value_ok(const char *v) {
        if (isempty(v) || strlen(v) > ENV_VALUE_MAX)
                return false;
        for (const char *p = v; *p; p++)
                if (!unit_char_ok(*p) && *p != '/' && *p != '+' && *p != ',' && *p != '@')
                        return false;
        return true;
}

int mps_systemd_write_environment(const char *base_dir, const char *uuid, const char *pipe_dir,
                                  const char *log_dir, const char *control_path, const char *library_path,
                                  const char **ret_bad) {
        static const char *const names[] = {
                "CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "KGPU_NVIDIA_MPS_CONTROL",
        };
        const char *values[] = { uuid, pipe_dir, log_dir, control_path };
        _cleanup_free_ char *text = NULL, *path = NULL;
        size_t len = 0;
        FILE *f;

        if (isempty(base_dir) || base_dir[0] != '/')
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (!env_value_ok(values[i])) {
                        if (ret_bad)
                                *ret_bad = names[i];
                        return -EINVAL;
                }
        if (library_path && !env_value_ok(library_path)) {
                if (ret_bad)
                        *ret_bad = "LD_LIBRARY_PATH";
                return -EINVAL;
        }
        f = open_memstream(&text, &len);
        if (!f)
                return -ENOMEM;
        fprintf(f, "# Written by kgpu-probed before it starts kgpu-mps@%s.service (rewritten at each start).\n",
                uuid);
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                fprintf(f, "%s=%s\n", names[i], values[i]);
        if (library_path)
                fprintf(f, "LD_LIBRARY_PATH=%s\n", library_path);
        if (fclose(f) != 0 || !text)
                return -ENOMEM;
        if (asprintf(&path, "%s/%s", base_dir, MPS_SYSTEMD_ENVIRONMENT_FILE) < 0)
                return -ENOMEM;
        return write_file_atomic_at(AT_FDCWD, path, text, len, 0644);
}

int mps_systemd_job(MpsSystemd *s, const char *method, const char *unit, uint64_t timeout_usec,
                    MpsSystemdJobCallback callback, void *userdata, MpsSystemdJob **ret) {
        _cleanup_(mps_systemd_job_freep) MpsSystemdJob *j = NULL;
        int r;

        if (!s || !callback || !ret || isempty(unit) ||
            !(streq_ptr(method, "RestartUnit") || streq_ptr(method, "StopUnit")))
                return -EINVAL;
        j = calloc(1, sizeof(MpsSystemdJob));
        if (!j)
                return -ENOMEM;
        j->callback = callback;
        j->userdata = userdata;
        j->method = strdup(method);
        j->unit = strdup(unit);
        if (!j->method || !j->unit)
                return -ENOMEM;
        r = sd_bus_call_method_async(s->bus, &j->call, SYSTEMD_BUS, SYSTEMD_PATH, SYSTEMD_MANAGER, method,
                                     on_job_queued, j, "ss", unit, "replace");
        if (r < 0)
                return r;
        r = sd_event_add_time_relative(s->event, &j->timer, CLOCK_MONOTONIC,
                                       timeout_usec > 0 ? timeout_usec : JOB_TIMEOUT_USEC, 0, on_job_timeout, j);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(j->timer, "mps-systemd-job");
        j->systemd = s;
        j->next = s->jobs;
        if (s->jobs)
                s->jobs->prev = j;
        s->jobs = j;
        *ret = TAKE_PTR(j);
        return 0;
}
