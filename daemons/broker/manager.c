/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * manager.c — kgpu-brokerd's Manager: state directory, store, bus.
 *
 * Contract: see manager.h. Start-up order: (privileges dropped and signals handled by
 * the daemon skeleton) state directory, store, bus connection, Broker1 object, probe
 * client, bus name; then the skeleton's watchdog, "started" and READY=1.
 * A store that cannot be opened is logged with MESSAGE_ID KGPU_MESSAGE_STATE_ERROR and
 * the broker keeps serving reads, answering Allocate with StateUnavailable.
 */

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "common/bus-names.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/util.h"
#include "daemons/broker/broker-dbus.h"
#include "daemons/broker/manager.h"
#include "daemons/broker/gas.h"
#include "daemons/broker/inventory.h"
#include "daemons/broker/mps-client.h"
#include "daemons/broker/probe-client.h"
#include "daemons/broker/reload.h"

int manager_read_boot_id(char **ret) {
        _cleanup_free_ char *s = NULL;
        int r;

        r = read_one_line_file_at(AT_FDCWD, "/proc/sys/kernel/random/boot_id", 64, &s);
        if (r < 0) {
                log_debug("Cannot read the boot id, storing none: %s", strerror(-r));
                s = strdup("");
                if (!s)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(s);
        return 0;
}

int manager_new(Config *config, Manager **ret) {
        /* Logs its own errors. */
        _cleanup_(config_freep) Config *c = config;
        _cleanup_(manager_freep) Manager *m = NULL;
        BackendNote *notes = NULL;
        const char *what = NULL;
        size_t n_notes = 0;
        struct passwd *pw;
        int r;

        m = calloc(1, sizeof(Manager));
        if (!m)
                return log_oom();
        m->config = TAKE_PTR(c);
        m->start_time = now_usec(CLOCK_REALTIME);
        m->grpc_uid = (uid_t) -1;

        r = sd_event_default(&m->event);
        if (r < 0)
                return log_error_errno(r, "Failed to allocate the event loop: %m");
        r = resources_new_from_config(m->config, &m->resources, &what);
        if (r == -ENOMEM)
                return log_oom();
        if (r < 0)
                return log_error_errno(r, "Invalid %s: %m", what ?: "configuration");
        r = resources_describe(m->resources, m->config, &notes, &n_notes);
        if (r < 0)
                return log_oom();
        for (size_t i = 0; i < n_notes; i++)
                log_full_errno(notes[i].level, 0, "%s", notes[i].text);
        notes = backend_notes_free(notes, n_notes);
        r = manager_read_boot_id(&m->boot_id);
        if (r < 0)
                return log_oom();
        if (isempty(m->boot_id))
                log_warning("Cannot read /proc/sys/kernel/random/boot_id; allocations are recorded without "
                            "a boot id, ignoring.");

        node_config_set_user(m, m->config);
        m->node_config.in_force = strdup("");
        if (!m->node_config.in_force)
                return log_oom();
        if (!isempty(m->config->grpc_user)) {
                errno = 0;
                pw = getpwnam(m->config->grpc_user);
                if (pw)
                        m->grpc_uid = pw->pw_uid;
        }

        *ret = TAKE_PTR(m);
        return 0;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;
        probe_client_stop(m);
        sd_event_source_disable_unref(m->checkpoint_source);
        sd_bus_flush_close_unref(m->bus);
        mps_client_free(m->mps);
        free(m->problem);
        node_config_done(&m->node_config);
        sd_event_unref(m->event);
        store_free(m->store);
        free(m->store_error);
        resources_free(m->resources);
        gas_set_free(m->gas_pods);
        free(m->boot_id);
        config_free(m->config);
        return mfree(m);
}

void manager_log_problem(Manager *m) {
        const char *label = NULL, *p = resources_problem(m->resources, &label);

        if (streq_ptr(p, m->problem))
                return;
        if (p)
                log_warning("%s not advertised as configured: %s", label ?: "GPUs", p);
        else if (m->problem)
                log_info("%s are advertised as configured again.", m->problem_label ?: "GPUs");
        m->problem_label = label;
        free(m->problem);
        m->problem = p ? strdup(p) : NULL;       /* NULL on OOM: logged again next time */
}

void manager_update_status(Manager *m) {
        size_t n = strv_length(m->resources->seen);

        if (m->store)
                (void) sd_notifyf(false, "STATUS=Serving %zu resource(s), %zu GPU object(s).",
                                  n, m->resources->n_gpus);
        else
                (void) sd_notifyf(false, "STATUS=Serving %zu resource(s); state database unavailable, "
                                  "refusing allocations.", n);
}

static int on_checkpoint(sd_event_source *source, void *userdata) {
        Manager *m = userdata;
        int r;

        if (!m->store)
                return 0;
        r = store_checkpoint(m->store);
        if (r == -EBUSY)
                log_debug("A reader of %s kept part of its WAL; checkpointing again later.",
                          store_get_path(m->store));
        else if (r < 0)
                log_warning_errno(r, "Failed to checkpoint the WAL of %s, trying again after a later commit: %m",
                                  store_get_path(m->store));
        return 0;
}

/* The store asks from inside a commit: the checkpoint runs once the loop is idle, i.e.
 * after the reply of the call that committed has been sent. If this cannot be arranged,
 * the store checkpoints by itself once the WAL reaches STORE_WAL_FRAMES_MAX. */
static void on_checkpoint_wanted(Store *s, void *userdata) {
        Manager *m = userdata;
        int r;

        if (!m->checkpoint_source) {
                r = sd_event_add_defer(m->event, &m->checkpoint_source, on_checkpoint, m);
                if (r < 0) {
                        log_debug_errno(r, "Failed to arrange a WAL checkpoint, the store makes it later: %m");
                        return;
                }
                (void) sd_event_source_set_priority(m->checkpoint_source, SD_EVENT_PRIORITY_IDLE);
                (void) sd_event_source_set_description(m->checkpoint_source, "wal-checkpoint");
        }
        r = sd_event_source_set_enabled(m->checkpoint_source, SD_EVENT_ONESHOT);
        if (r < 0)
                log_debug_errno(r, "Failed to arrange a WAL checkpoint, the store makes it later: %m");
}

static void manager_open_store(Manager *m) {
        _cleanup_free_ char *error = NULL;
        const char *dir = m->config->state_directory;
        struct stat st;
        int r;

        r = mkdir_p(dir, 0700);
        if (r < 0)
                log_warning_errno(r, "Failed to create state directory %s, trying to use it anyway: %m", dir);
        else if (stat(dir, &st) >= 0 && (st.st_mode & 0022) != 0)
                /* Anyone who can write there can swap the database under us. */
                log_warning("State directory %s is writable by group or others (mode %04o), "
                            "the allocation records are not protected.", dir, (unsigned) (st.st_mode & 07777));

        r = store_open(dir, m->boot_id, &m->store, &error);
        if (r < 0) {
                m->store_error = TAKE_PTR(error);
                if (!m->store_error && asprintf(&m->store_error, "%s/%s: %s", dir, STORE_FILE_NAME, strerror(-r)) < 0)
                        m->store_error = NULL;
                log_struct(LOG_ERR, KGPU_MESSAGE_STATE_ERROR,
                           "State database unusable, refusing all allocations until it is fixed "
                           "(the file is left untouched): %s", m->store_error ?: strerror(-r));
                return;
        }
        store_set_max_allocations(m->store, m->config->max_allocations);
        store_set_checkpoint_func(m->store, on_checkpoint_wanted, m);
        if (!isempty(store_get_previous_boot_id(m->store)) && !isempty(m->boot_id) &&
            !streq(store_get_previous_boot_id(m->store), m->boot_id))
                log_info("State database %s was last used in another boot (%s).", store_get_path(m->store),
                         store_get_previous_boot_id(m->store));
        log_debug("State database %s opened.", store_get_path(m->store));
}

int manager_start(Manager *m) {
        int r;

        manager_open_store(m);
        r = node_config_restore(m);     /* before the GPUs: they are built into its resources */
        if (r < 0)
                return r;
        (void) inventory_load(m);

        r = bus_open_attached(m->event, "kgpu-brokerd", &m->bus);
        if (r < 0)
                return r;

        r = broker_dbus_register(m);
        if (r < 0)
                return r;
        r = probe_client_start(m);
        if (r < 0)
                return r;

        r = sd_bus_request_name(m->bus, KGPU_BROKER_BUS_NAME, 0);
        if (r < 0)
                return log_error_errno(r, "Failed to acquire bus name %s (another broker running?): %m",
                                       KGPU_BROKER_BUS_NAME);
        return 0;
}

int manager_run(Manager *m) {
        int r;

        r = sd_event_loop(m->event);
        if (r < 0)
                return log_error_errno(r, "Event loop failed: %m");
        return r;
}
