/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * manager.c — kgpu-probed's event loop, udev monitor and GPU table (see manager.h).
 *
 * Latency path for hot-unplug: udev monitor fd readable -> manager_handle_device() ->
 * the source's device_event (source-intel.c) -> manager_mark_removed() ->
 * sd_bus_emit_properties_changed() (written to the bus socket at once when the write
 * queue is empty). No timers, no debouncing.
 */

#include <errno.h>
#include <inttypes.h>
#include <pwd.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "common/bus-names.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/kubelet.h"
#include "daemons/probe/labels.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/node-config.h"
#include "daemons/probe/mps.h"
#include "daemons/probe/outputs.h"
#include "daemons/probe/probe-dbus.h"
#include "daemons/probe/source.h"

/* udev events handled per wakeup, so a flood cannot starve the bus. */
#define MANAGER_EVENTS_PER_WAKEUP 64
#define MANAGER_UDEV_RCVBUF (4 * 1024 * 1024)

static inline void udev_device_unrefp(struct udev_device **d) {
        if (*d)
                udev_device_unref(*d);
}

int manager_new(Manager **ret) {
        _cleanup_(manager_freep) Manager *m = NULL;
        int r;

        m = calloc(1, sizeof(Manager));
        if (!m)
                return -ENOMEM;
        m->broker_uid = (uid_t) -1;
        m->start_time = now_usec(CLOCK_REALTIME);

        r = sd_event_default(&m->event);
        if (r < 0)
                return r;
        for (size_t i = 0; i < gpu_sources_count; i++)
                if (gpu_sources[i]->new) {
                        r = gpu_sources[i]->new(m, &m->source_data[i]);
                        if (r < 0)
                                return r;
                }
        r = kubelet_dir_new(m->event, probe_dbus_kubelet_changed, m, &m->kubelet);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(m);
        return 0;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;
        for (size_t i = 0; i < gpu_sources_count; i++)
                if (gpu_sources[i]->free && m->source_data[i])
                        gpu_sources[i]->free(m, m->source_data[i]);
        kubelet_dir_free(m->kubelet);
        probe_node_config_free(m->node_config);
        /* The MPS daemons stay (see mps.h); pending SetMps calls get their error now. */
        mps_free(m->mps);
        free(m->config_error);
        sd_event_source_unref(m->outputs_source);
        free(m->feature_file);
        free(m->cdi_directory);
        sd_event_source_unref(m->monitor_source);
        if (m->monitor)
                udev_monitor_unref(m->monitor);
        if (m->udev)
                udev_unref(m->udev);
        sd_bus_flush_close_unref(m->bus);
        sd_event_unref(m->event);
        for (size_t i = 0; i < m->n_gpus; i++)
                gpu_free(m->gpus[i]);
        free(m->gpus);
        return mfree(m);
}

static int resolve_user(const char *user, uid_t *ret) {
        struct passwd *pw;

        *ret = (uid_t) -1;
        if (isempty(user))
                return 0;
        errno = 0;
        pw = getpwnam(user);
        if (!pw)
                return errno > 0 ? -errno : -ESRCH;
        *ret = pw->pw_uid;
        return 0;
}

int manager_set_broker_user(Manager *m, const char *user) {
        return resolve_user(user, &m->broker_uid);
}

int manager_set_grpc_user(Manager *m, const char *user) {
        uid_t uid;
        int r;

        r = resolve_user(user, &uid);
        kubelet_dir_set_caller_uid(m->kubelet, uid);
        return r;
}

/* The configuration moves the files (or turns them off): what kgpu wrote at the old
 * place would stay behind with nobody to update or remove it. */
static void manager_retire_outputs(Manager *m, const char *feature_file, const char *cdi_directory) {
        int r;

        if (!m->publishing)
                return;
        if (m->feature_file && !streq_ptr(m->feature_file, feature_file)) {
                r = outputs_remove_feature_file(m->feature_file);
                if (r < 0 && r != -EEXIST)
                        log_warning_errno(r, "Failed to remove the node labels at the old place %s, ignoring: %m",
                                          m->feature_file);
        }
        if (m->cdi_directory && !streq_ptr(m->cdi_directory, cdi_directory)) {
                r = outputs_remove_cdi_specs(m->cdi_directory);
                if (r < 0)
                        log_warning_errno(r, "Failed to remove the CDI specs from the old directory %s, ignoring: %m",
                                          m->cdi_directory);
        }
}

void *manager_source_data(Manager *m, const GpuSource *source) {
        for (size_t i = 0; i < gpu_sources_count; i++)
                if (gpu_sources[i] == source)
                        return m->source_data[i];
        return NULL;
}

int manager_configure(Manager *m, const Config *c, const char **ret_key) {
        int r;

        /* Checked before anything changes: a refused reload leaves all as it was. */
        m->config_error = mfree(m->config_error);
        for (size_t i = 0; i < gpu_sources_count; i++)
                if (gpu_sources[i]->check) {
                        r = gpu_sources[i]->check(m, m->source_data[i], c, ret_key);
                        if (r < 0)
                                return r;
                }
        r = kubelet_dir_configure(m->kubelet, c);
        if (r == -EINVAL) {
                *ret_key = "kubelet.devicePluginPath, kubelet.socket or kubelet.podResourcesSocket: "
                           "expected an absolute path to a file";
                return r;
        }
        if (r < 0)
                return r;

        manager_retire_outputs(m, c->labels_feature_file, c->cdi_spec_directory);
        if (free_and_strdup(&m->feature_file, c->labels_feature_file) < 0 ||
            free_and_strdup(&m->cdi_directory, c->cdi_spec_directory) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < gpu_sources_count; i++)
                if (gpu_sources[i]->configure) {
                        r = gpu_sources[i]->configure(m, m->source_data[i], c);
                        if (r < 0)
                                return r;
                }
        return 0;
}

int manager_write_outputs(Manager *m) {
        int r = 0, k;

        if (!m->publishing)
                return 0;

        if (m->feature_file) {
                _cleanup_strv_free_ char **lines = NULL;

                k = labels_build(m, &lines);
                if (k >= 0)
                        k = labels_write_feature_file(m->feature_file, lines);
                if (k < 0) {
                        log_warning_errno(k, "Failed to write the node labels to %s, ignoring: %m", m->feature_file);
                        r = k;
                }
        }
        for (size_t i = 0; m->cdi_directory && i < gpu_sources_count; i++) {
                if (!gpu_sources[i]->cdi_write)
                        continue;
                k = gpu_sources[i]->cdi_write(m, m->source_data[i], m->cdi_directory, m->gpus, m->n_gpus);
                if (k < 0) {
                        log_warning_errno(k, "Failed to write the %s CDI spec to %s, ignoring: %m",
                                          gpu_sources[i]->name, m->cdi_directory);
                        if (r == 0)
                                r = k;
                }
        }
        return r;
}

static int on_outputs(sd_event_source *s, void *userdata) {
        Manager *m = userdata;

        (void) manager_write_outputs(m);
        return 0;
}

/* Inventory changed: rewrite the files once, after this loop iteration's events (so the
 * D-Bus signals go out first and a burst of uevents costs one write). */
void manager_schedule_outputs(Manager *m) {
        int r;

        if (!m->event || !m->publishing || (!m->feature_file && !m->cdi_directory))
                return;
        if (m->outputs_source) {
                r = sd_event_source_set_enabled(m->outputs_source, SD_EVENT_ONESHOT);
        } else {
                r = sd_event_add_defer(m->event, &m->outputs_source, on_outputs, m);
                if (r >= 0) {
                        (void) sd_event_source_set_description(m->outputs_source, "outputs");
                        r = sd_event_source_set_enabled(m->outputs_source, SD_EVENT_ONESHOT);
                }
        }
        if (r < 0)
                log_warning_errno(r, "Failed to schedule the label and CDI update, ignoring: %m");
}

Gpu *manager_find_gpu(Manager *m, const char *id) {
        for (size_t i = 0; i < m->n_gpus; i++)
                if (streq(m->gpus[i]->id, id))
                        return m->gpus[i];
        return NULL;
}

static size_t manager_count_healthy(Manager *m) {
        size_t n = 0;

        for (size_t i = 0; i < m->n_gpus; i++)
                if (streq(m->gpus[i]->health, GPU_HEALTHY))
                        n++;
        return n;
}

void manager_notify_status(Manager *m) {
        size_t healthy = manager_count_healthy(m);

        if (healthy == m->n_gpus)
                (void) sd_notifyf(false, "STATUS=%zu GPUs", m->n_gpus);
        else
                (void) sd_notifyf(false, "STATUS=%zu GPUs (%zu unhealthy)", m->n_gpus, m->n_gpus - healthy);
}

int manager_remove_gpu(Manager *m, const char *id) {
        size_t i;
        int r;

        for (i = 0; i < m->n_gpus && !streq(m->gpus[i]->id, id); i++)
                ;
        if (i >= m->n_gpus)
                return 0;
        /* Emitted while the object is still found, so its interfaces are named. */
        r = probe_dbus_emit_gpu_removed(m, m->gpus[i]);
        if (r < 0)
                log_debug_errno(r, "Failed to emit InterfacesRemoved for %s, ignoring: %m", id);
        gpu_free(m->gpus[i]);
        memmove(m->gpus + i, m->gpus + i + 1, (m->n_gpus - i - 1) * sizeof(Gpu *));
        m->n_gpus--;
        manager_notify_status(m);
        manager_schedule_outputs(m);
        return 1;
}

static void log_gpu_found(const Gpu *g) {
        const GpuSource *source = gpu_source_find(g->vendor);

        if (source && source->log_found) {
                source->log_found(g);
                return;
        }
        log_struct(LOG_INFO, KGPU_MESSAGE_GPU_ADDED,
                   "Found GPU %s (%s, 0x%04x:0x%04x, %s%s%s, %u tiles, %" PRIu64 " bytes, NUMA node %d).",
                   g->id, g->driver, g->vendor_id, g->device_id, g->card_node,
                   isempty(g->render_node) ? "" : " ", g->render_node,
                   g->tiles, g->memory_bytes, g->numa_node);
}

int manager_upsert_gpu(Manager *m, Gpu *g) {
        _cleanup_(gpu_freep) Gpu *owned = g;
        _cleanup_strv_free_ char **changed = NULL;
        Gpu *old, **a;
        size_t pos;
        int r;

        old = manager_find_gpu(m, g->id);
        if (old) {
                bool was_unhealthy = !streq(old->health, GPU_HEALTHY);

                r = gpu_diff_properties(old, g, &changed);
                if (r < 0)
                        return r;
                r = gpu_copy_properties(old, g);
                if (r < 0)
                        return r;
                if (was_unhealthy && streq(old->health, GPU_HEALTHY))
                        log_struct(LOG_NOTICE, KGPU_MESSAGE_GPU_HEALTH,
                                   "GPU %s is back (%s), healthy again.", old->id, old->card_node);
                r = probe_dbus_emit_gpu_changed(m, old, changed);
                if (r < 0)
                        log_debug_errno(r, "Failed to emit PropertiesChanged for %s, ignoring: %m", old->id);
                if (strv_length(changed) > 0) {
                        manager_notify_status(m);
                        manager_schedule_outputs(m);
                }
                return 0;
        }

        if (m->n_gpus >= MANAGER_GPUS_MAX) {
                log_debug("GPU table full, ignoring %s.", g->id);
                return 0;
        }
        a = reallocarray(m->gpus, m->n_gpus + 1, sizeof(Gpu *));
        if (!a)
                return -ENOMEM;
        m->gpus = a;
        for (pos = 0; pos < m->n_gpus && strcmp(m->gpus[pos]->id, g->id) < 0; pos++)
                ;
        memmove(m->gpus + pos + 1, m->gpus + pos, (m->n_gpus - pos) * sizeof(Gpu *));
        m->gpus[pos] = TAKE_PTR(owned);
        m->n_gpus++;

        log_gpu_found(g);
        /* An MPS daemon adopted before the GPU was listed (mps.c). */
        if (m->mps && mps_get_state(m->mps, g->id) != MPS_STATE_OFF &&
            (free_and_strdup(&g->mps_state, mps_state_to_string(mps_get_state(m->mps, g->id))) < 0 ||
             free_and_strdup(&g->mps_pipe_directory, mps_get_pipe_directory(m->mps, g->id)) < 0))
                log_oom();
        r = probe_dbus_emit_gpu_added(m, g);
        if (r < 0)
                log_debug_errno(r, "Failed to emit InterfacesAdded for %s, ignoring: %m", g->id);
        manager_notify_status(m);
        manager_schedule_outputs(m);
        return 1;
}

int manager_set_gpu_health(Manager *m, Gpu *g, const char *health, const char *reason) {
        char *names[] = { (char *) "Health", (char *) "HealthReason", NULL };
        int r;

        r = gpu_set_health(g, health, reason);
        if (r <= 0)
                return r;
        r = probe_dbus_emit_gpu_changed(m, g, names);
        if (r < 0)
                log_debug_errno(r, "Failed to emit PropertiesChanged for %s, ignoring: %m", g->id);
        return 1;
}

int manager_mark_gpu_removed(Manager *m, Gpu *g) {
        int r;

        r = manager_set_gpu_health(m, g, GPU_UNHEALTHY, "removed");
        if (r <= 0)
                return r;
        log_struct(LOG_WARNING, KGPU_MESSAGE_GPU_REMOVED,
                   "GPU %s (%s) was removed, marking it unhealthy.", g->id, g->card_node);
        manager_notify_status(m);
        manager_schedule_outputs(m);
        return 1;
}

int manager_mark_removed(Manager *m, const char *syspath) {
        if (isempty(syspath))
                return 0;
        for (size_t i = 0; i < m->n_gpus; i++) {
                Gpu *g = m->gpus[i];

                if (streq(g->card_syspath, syspath) || streq(g->render_syspath, syspath))
                        return manager_mark_gpu_removed(m, g);
        }
        return 0;
}

int manager_handle_device(Manager *m, struct udev_device *d) {
        int r = 0;

        /* Every source sees the event; the first that did something (or failed) answers. */
        for (size_t i = 0; i < gpu_sources_count; i++)
                if (gpu_sources[i]->device_event) {
                        int k = gpu_sources[i]->device_event(m, m->source_data[i], d);

                        if (r == 0)
                                r = k;
                }
        return r;
}

static int on_udev_event(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Manager *m = userdata;

        for (unsigned k = 0; k < MANAGER_EVENTS_PER_WAKEUP; k++) {
                _cleanup_(udev_device_unrefp) struct udev_device *d = NULL;
                int r;

                errno = 0;
                d = udev_monitor_receive_device(m->monitor);
                if (!d) {
                        if (errno == ENOBUFS) {
                                /* The socket overflowed and events were lost: what we
                                 * hold may be stale, so read everything again. */
                                log_warning("udev event queue overflowed, rescanning.");
                                r = manager_rescan(m);
                                if (r < 0)
                                        log_warning_errno(r, "Rescan failed, ignoring: %m");
                        }
                        break;
                }
                r = manager_handle_device(m, d);
                if (r < 0)
                        log_warning_errno(r, "Failed to handle %s event for %s, ignoring: %m",
                                          udev_device_get_action(d) ?: "?",
                                          udev_device_get_syspath(d) ?: "?");
        }
        return 0;
}

int manager_rescan(Manager *m) {
        int r;

        /* In table order; the first failure stops (nothing later is read with it). */
        for (size_t i = 0; i < gpu_sources_count; i++)
                if (gpu_sources[i]->rescan) {
                        r = gpu_sources[i]->rescan(m, m->source_data[i]);
                        if (r < 0)
                                return r;
                }
        return 0;
}

int manager_wait_initial(Manager *m) {
        int r;

        for (size_t i = 0; i < gpu_sources_count; i++)
                if (gpu_sources[i]->wait_initial) {
                        r = gpu_sources[i]->wait_initial(m, m->source_data[i]);
                        if (r < 0)
                                return r;
                }
        return 0;
}

int manager_reply_when_done(Manager *m, sd_bus_message *message) {
        for (size_t i = 0; i < gpu_sources_count; i++)
                if (gpu_sources[i]->reply_when_done &&
                    gpu_sources[i]->reply_when_done(m, m->source_data[i], message) > 0)
                        return 1;
        return 0;
}

static int manager_start_udev(Manager *m) {
        int r;

        m->udev = udev_new();
        if (!m->udev)
                return log_error_errno(-ENOMEM, "Failed to create udev context: %m");

        /* The "udev" group: events after udevd processed them, so device nodes exist. */
        m->monitor = udev_monitor_new_from_netlink(m->udev, "udev");
        if (!m->monitor)
                return log_error_errno(-EIO, "Failed to create udev monitor.");
        /* Room for bursts (needs CAP_NET_ADMIN beyond rmem_max; best effort). */
        r = udev_monitor_set_receive_buffer_size(m->monitor, MANAGER_UDEV_RCVBUF);
        if (r < 0)
                log_debug_errno(r, "Failed to enlarge udev monitor buffer, ignoring: %m");
        r = udev_monitor_filter_add_match_subsystem_devtype(m->monitor, "drm", NULL);
        if (r < 0)
                return log_error_errno(r, "Failed to set udev monitor filter: %m");
        r = udev_monitor_enable_receiving(m->monitor);
        if (r < 0)
                return log_error_errno(r, "Failed to enable udev monitor: %m");

        r = sd_event_add_io(m->event, &m->monitor_source, udev_monitor_get_fd(m->monitor),
                            EPOLLIN, on_udev_event, m);
        if (r < 0)
                return log_error_errno(r, "Failed to watch udev monitor: %m");
        (void) sd_event_source_set_description(m->monitor_source, "udev-monitor");
        return 0;
}

static int manager_connect_bus(Manager *m) {
        int r;

        r = bus_open_attached(m->event, "kgpu-probed", &m->bus);
        if (r < 0)
                return r;
        r = probe_dbus_register(m);
        if (r < 0)
                return log_error_errno(r, "Failed to register D-Bus objects: %m");
        r = sd_bus_request_name(m->bus, KGPU_PROBE_BUS_NAME, 0);
        if (r < 0)
                return log_error_errno(r, "Failed to acquire bus name %s: %m", KGPU_PROBE_BUS_NAME);
        return 0;
}

int manager_start(Manager *m) {
        int r;

        /* Monitor first, so nothing between enumeration and the first event is lost. */
        r = manager_start_udev(m);
        if (r < 0)
                return r;

        /* Enumerate before taking the name, so clients never see a half-filled tree. */
        r = manager_rescan(m);
        if (r < 0)
                return log_error_errno(r, "Failed to enumerate GPUs: %m");
        r = manager_wait_initial(m);
        if (r < 0)
                return r;

        r = manager_connect_bus(m);
        if (r < 0)
                return r;

        /* Only now, with the name ours, do labels and CDI specs follow the GPU table: a
         * probe that fails before this point leaves nothing behind. Written before
         * READY=1 (failures are logged and not fatal). */
        m->publishing = true;
        (void) manager_write_outputs(m);

        /* With the name taken, so that every change of the kubelet's directory is seen. */
        r = kubelet_dir_start(m->kubelet);
        if (r < 0)
                return log_error_errno(r, "Failed to watch the kubelet's directories: %m");

        manager_notify_status(m);
        return 0;
}
