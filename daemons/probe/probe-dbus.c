/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * probe-dbus.c — io.kgpu.Probe1 / io.kgpu.Gpu1 vtables and signal helpers (see probe-dbus.h).
 *
 * Reads go through sd-bus' offset-based getters on the Gpu found for the path. The
 * mutations of io.kgpu.Probe1 (Rescan, SetMps) are allowed for uid 0 and the broker's
 * uid only, those of io.kgpu.Kubelet1 (sockets in the kubelet's directories) for uid 0
 * and the front end's uid only, whatever the bus policy says.
 */

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "common/bus-creds.h"
#include "common/bus-names.h"
#include "common/log.h"
#include "common/nvidia-sharing.h"
#include "common/util.h"
#include "daemons/probe/kubelet-dbus.h"
#include "daemons/probe/kubelet.h"
#include "daemons/probe/mps.h"
#include "daemons/probe/nvidia.h"
#include "daemons/probe/probe-dbus.h"
#include "daemons/probe/source.h"

static int property_get_version(sd_bus *bus, const char *path, const char *interface,
                                const char *property, sd_bus_message *reply,
                                void *userdata, sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", KGPU_VERSION);
}

static int property_get_device_nodes(sd_bus *bus, const char *path, const char *interface,
                                     const char *property, sd_bus_message *reply,
                                     void *userdata, sd_bus_error *error) {
        Gpu *g = userdata;

        return sd_bus_message_append_strv(reply, g->device_nodes);
}

static int property_get_by_path_nodes(sd_bus *bus, const char *path, const char *interface,
                                      const char *property, sd_bus_message *reply,
                                      void *userdata, sd_bus_error *error) {
        Gpu *g = userdata;

        return sd_bus_message_append_strv(reply, g->by_path_nodes);
}

static int property_get_mei_nodes(sd_bus *bus, const char *path, const char *interface,
                                  const char *property, sd_bus_message *reply,
                                  void *userdata, sd_bus_error *error) {
        Gpu *g = userdata;

        return sd_bus_message_append_strv(reply, g->mei_nodes);
}

static int property_get_mig_devices(sd_bus *bus, const char *path, const char *interface,
                                    const char *property, sd_bus_message *reply,
                                    void *userdata, sd_bus_error *error) {
        Gpu *g = userdata;
        int r;

        r = sd_bus_message_open_container(reply, 'a', "(ussuuast)");
        if (r < 0)
                return r;
        for (size_t i = 0; i < g->n_mig_devices; i++) {
                const GpuMigDevice *d = &g->mig_devices[i];

                r = sd_bus_message_open_container(reply, 'r', "ussuuast");
                if (r < 0)
                        return r;
                r = sd_bus_message_append(reply, "ussuu", d->device_index, d->uuid, d->profile,
                                          d->gi_id, d->ci_id);
                if (r < 0)
                        return r;
                r = sd_bus_message_append_strv(reply, d->device_nodes);
                if (r < 0)
                        return r;
                r = sd_bus_message_append(reply, "t", d->memory_bytes);
                if (r < 0)
                        return r;
                r = sd_bus_message_close_container(reply);
                if (r < 0)
                        return r;
        }
        return sd_bus_message_close_container(reply);
}

static int property_get_links(sd_bus *bus, const char *path, const char *interface,
                              const char *property, sd_bus_message *reply,
                              void *userdata, sd_bus_error *error) {
        Gpu *g = userdata;
        int r;

        r = sd_bus_message_open_container(reply, 'a', "(ssy)");
        if (r < 0)
                return r;
        for (size_t i = 0; i < g->n_links; i++) {
                r = sd_bus_message_append(reply, "(ssy)", g->links[i].peer_id, g->links[i].type,
                                          g->links[i].nvlinks);
                if (r < 0)
                        return r;
        }
        return sd_bus_message_close_container(reply);
}

int probe_dbus_check_sender(Manager *m, sd_bus_message *message, sd_bus_error *error) {
        return bus_check_sender_uid(message, m->broker_uid, error);
}

static int method_rescan(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        int r;

        r = probe_dbus_check_sender(m, message, error);
        if (r < 0)
                return r;

        r = manager_rescan(m);
        if (r < 0)
                return sd_bus_error_set_errnof(error, r, "Rescan failed: %m");

        /* Some sources read their GPUs asynchronously (NVIDIA's child processes): answer
         * once they did. */
        if (manager_reply_when_done(m, message) > 0)
                return 1;
        return sd_bus_reply_method_return(message, NULL);
}

/* HealthReason while a GPU's MPS failed (the NVIDIA contract). */
#define PROBE_REASON_MPS_FAILED "mps-failed"

static void on_set_mps_done(Mps *mps, int error, const char *message, void *userdata) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *call = userdata;
        int r;

        if (error >= 0)
                r = sd_bus_reply_method_return(call, NULL);
        else
                r = sd_bus_reply_method_errorf(call, KGPU_ERROR_MPS_FAILED, "%s",
                                               isempty(message) ? "MPS control failed." : message);
        if (r < 0)
                log_debug_errno(r, "Failed to reply to SetMps, ignoring: %m");
}

/* Answered when the tools have run (mps.c); one request per GPU at a time, in order. */
static int method_set_mps(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        _cleanup_free_ char *why = NULL;
        Manager *m = userdata;
        MpsRequest req;
        const char *id;
        uint64_t pinned;
        uint32_t pct;
        const GpuSource *source;
        int enabled, r;
        Gpu *g;

        r = probe_dbus_check_sender(m, message, error);
        if (r < 0)
                return r;
        r = sd_bus_message_read(message, "sbtu", &id, &enabled, &pinned, &pct);
        if (r < 0)
                return r;
        g = manager_find_gpu(m, id);
        source = g ? gpu_source_find(g->vendor) : NULL;
        if (!source || !source->mps || g->index < 0)
                /* Echoed only whole: a cut could split a UTF-8 sequence. */
                return sd_bus_error_setf(error, KGPU_ERROR_UNKNOWN_DEVICE, "No NVIDIA GPU '%s'.",
                                         strlen(id) <= 128 ? id : "(too long)");
        if (!m->mps)
                return sd_bus_error_setf(error, KGPU_ERROR_MPS_FAILED, "MPS control is not available.");
        req = (MpsRequest) {
                .uuid = g->id,
                .index = (uint32_t) g->index,
                .mig_enabled = streq(g->mig_mode, "Enabled"),
                /* The probe's own policy: the same rule the broker builds its slices by,
                 * from the same kgpu.yaml, so a caller with the broker's uid cannot put a
                 * GPU under MPS that the configuration does not. */
                .in_mps_config = config_nvidia_mps_names_gpu(nvidia_probe_config(m->nvidia), g->index, g->uuid, g->id),
                .gpu_memory_bytes = g->memory_bytes,
                .enabled = enabled,
                .pinned_memory_bytes = pinned,
                .active_thread_percentage = pct,
        };
        r = mps_request_validate(&req, &why);
        if (r == -EPERM) {
                log_warning("Refused SetMps for GPU %s: %s", g->id, why ?: "not under MPS in the configuration.");
                return sd_bus_error_setf(error, KGPU_ERROR_REFUSED, "%s", why ?: "Refused.");
        }
        if (r < 0)
                return sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS, "%s", why ?: "Invalid arguments.");
        r = mps_set(m->mps, &req, on_set_mps_done, message);
        if (r == -EBUSY)
                return sd_bus_error_setf(error, KGPU_ERROR_MPS_FAILED,
                                         "Too many MPS requests queued for GPU %s, try again.", g->id);
        if (r < 0)
                return sd_bus_error_set_errnof(error, r, "SetMps failed: %m");
        sd_bus_message_ref(message);
        return 1;
}

void probe_dbus_mps_state_changed(Mps *mps, const char *uuid, MpsState state, const char *pipe_directory,
                                  const char *message, void *userdata) {
        _cleanup_strv_free_ char **names = NULL;
        const char *s = mps_state_to_string(state);
        Manager *m = userdata;
        bool health = false;
        Gpu *g;
        int r = 0;

        g = manager_find_gpu(m, uuid);
        if (!g)
                return;
        if (!streq(g->mps_state, s) && ((r = free_and_strdup(&g->mps_state, s)) < 0 ||
                                        (r = strv_extend(&names, "MpsState")) < 0))
                goto oom;
        if (!streq(g->mps_pipe_directory, pipe_directory) &&
            ((r = free_and_strdup(&g->mps_pipe_directory, pipe_directory)) < 0 ||
             (r = strv_extend(&names, "MpsPipeDirectory")) < 0))
                goto oom;
        if (state == MPS_STATE_FAILED && streq(g->health, GPU_HEALTHY)) {
                r = gpu_set_health(g, GPU_UNHEALTHY, PROBE_REASON_MPS_FAILED);
                health = r > 0;
                if (health)
                        log_struct(LOG_WARNING, KGPU_MESSAGE_GPU_HEALTH,
                                   "MPS of GPU %s failed, marking it unhealthy: %s", g->id, message ?: "");
        } else if (state != MPS_STATE_FAILED && streq(g->health_reason, PROBE_REASON_MPS_FAILED)) {
                r = gpu_set_health(g, GPU_HEALTHY, "");
                health = r > 0;
                if (health)
                        log_struct(LOG_NOTICE, KGPU_MESSAGE_GPU_HEALTH, "MPS of GPU %s is %s, healthy again.",
                                   g->id, isempty(s) ? "off" : s);
        }
        if (r < 0)
                goto oom;
        if (health && ((r = strv_extend(&names, "Health")) < 0 || (r = strv_extend(&names, "HealthReason")) < 0))
                goto oom;
        r = probe_dbus_emit_gpu_changed(m, g, names);
        if (r < 0)
                log_debug_errno(r, "Failed to emit PropertiesChanged for %s, ignoring: %m", g->id);
        if (health) {
                manager_notify_status(m);
                manager_schedule_outputs(m);
        }
        return;
oom:
        log_oom();
}

static const sd_bus_vtable probe_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", property_get_version, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("StartTime", "t", NULL, offsetof(Manager, start_time), SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_METHOD_WITH_ARGS("Rescan", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_rescan,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("SetMps",
                                SD_BUS_ARGS("s", gpu_id, "b", enabled, "t", pinned_memory_bytes,
                                            "u", active_thread_percentage),
                                SD_BUS_NO_RESULT, method_set_mps, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
};

void probe_dbus_kubelet_changed(KubeletDir *k, void *userdata) {
        Manager *m = userdata;
        int r;

        r = kubelet_dbus_emit(m->bus);
        if (r < 0)
                log_debug_errno(r, "Failed to emit PropertiesChanged for %s, ignoring: %m", KGPU_KUBELET_INTERFACE);
}

#define GPU_PROP_CONST(name, sig, field) \
        SD_BUS_PROPERTY(name, sig, NULL, offsetof(Gpu, field), SD_BUS_VTABLE_PROPERTY_CONST)
#define GPU_PROP(name, sig, field) \
        SD_BUS_PROPERTY(name, sig, NULL, offsetof(Gpu, field), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE)

static const sd_bus_vtable gpu_vtable[] = {
        SD_BUS_VTABLE_START(0),
        GPU_PROP_CONST("Id", "s", id),
        GPU_PROP_CONST("Vendor", "s", vendor),
        GPU_PROP("Driver", "s", driver),
        GPU_PROP_CONST("PciAddress", "s", pci_address),
        GPU_PROP_CONST("VendorId", "q", vendor_id),
        GPU_PROP_CONST("DeviceId", "q", device_id),
        GPU_PROP("Product", "s", product),
        GPU_PROP("MemoryBytes", "t", memory_bytes),
        GPU_PROP("Tiles", "u", tiles),
        GPU_PROP("NumaNode", "i", numa_node),
        GPU_PROP("CardNode", "s", card_node),
        GPU_PROP("RenderNode", "s", render_node),
        SD_BUS_PROPERTY("DeviceNodes", "as", property_get_device_nodes, 0,
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        GPU_PROP("Uuid", "s", uuid),
        GPU_PROP("Health", "s", health),
        GPU_PROP("HealthReason", "s", health_reason),
        GPU_PROP_CONST("PciClass", "u", pci_class),
        SD_BUS_PROPERTY("ByPathNodes", "as", property_get_by_path_nodes, 0,
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        GPU_PROP("PhysicalFunction", "s", physical_function),
        SD_BUS_PROPERTY("MeiNodes", "as", property_get_mei_nodes, 0,
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        GPU_PROP("Index", "i", index),
        GPU_PROP("ComputeMode", "s", compute_mode),
        GPU_PROP("MigMode", "s", mig_mode),
        SD_BUS_PROPERTY("MigDevices", "a(ussuuast)", property_get_mig_devices, 0,
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        GPU_PROP("ComputeCapability", "s", compute_capability),
        GPU_PROP("DriverVersion", "s", driver_version),
        GPU_PROP("CudaVersion", "s", cuda_version),
        SD_BUS_PROPERTY("Links", "a(ssy)", property_get_links, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        GPU_PROP("MpsState", "s", mps_state),
        GPU_PROP("MpsPipeDirectory", "s", mps_pipe_directory),
        SD_BUS_VTABLE_END
};

static const BusIntrospectEntry introspect_entries[] = {
        { KGPU_PROBE_PATH, KGPU_PROBE_INTERFACE, probe_vtable, false },
        { KGPU_PROBE_PATH, KGPU_KUBELET_INTERFACE, kubelet_dbus_vtable, false },
        { KGPU_GPU_PATH_PREFIX, KGPU_GPU_INTERFACE, gpu_vtable, true },
};

const BusIntrospectEntry *probe_dbus_introspect_entries(size_t *ret_n) {
        *ret_n = ELEMENTSOF(introspect_entries);
        return introspect_entries;
}

int probe_dbus_gpu_path(const char *id, char **ret) {
        return sd_bus_path_encode(KGPU_GPU_PATH_PREFIX, id, ret);
}

static int gpu_object_find(sd_bus *bus, const char *path, const char *interface,
                           void *userdata, void **ret_found, sd_bus_error *error) {
        _cleanup_free_ char *id = NULL;
        Manager *m = userdata;
        Gpu *g;
        int r;

        r = sd_bus_path_decode(path, KGPU_GPU_PATH_PREFIX, &id);
        if (r <= 0)
                return 0;
        g = manager_find_gpu(m, id);
        if (!g)
                return 0;
        *ret_found = g;
        return 1;
}

static int gpu_node_enumerator(sd_bus *bus, const char *path, void *userdata,
                               char ***ret_nodes, sd_bus_error *error) {
        _cleanup_strv_free_ char **l = NULL;
        Manager *m = userdata;
        int r;

        l = calloc(m->n_gpus + 1, sizeof(char *));
        if (!l)
                return -ENOMEM;
        for (size_t i = 0; i < m->n_gpus; i++) {
                r = probe_dbus_gpu_path(m->gpus[i]->id, &l[i]);
                if (r < 0)
                        return r;
        }
        *ret_nodes = TAKE_PTR(l);
        return 1;
}

int probe_dbus_register(Manager *m) {
        int r;

        r = sd_bus_add_object_vtable(m->bus, NULL, KGPU_PROBE_PATH, KGPU_PROBE_INTERFACE,
                                     probe_vtable, m);
        if (r < 0)
                return r;
        r = kubelet_dbus_add(m->bus, m->kubelet);
        if (r < 0)
                return r;
        r = sd_bus_add_fallback_vtable(m->bus, NULL, KGPU_GPU_PATH_PREFIX, KGPU_GPU_INTERFACE,
                                       gpu_vtable, gpu_object_find, m);
        if (r < 0)
                return r;
        r = sd_bus_add_node_enumerator(m->bus, NULL, KGPU_GPU_PATH_PREFIX, gpu_node_enumerator, m);
        if (r < 0)
                return r;
        return sd_bus_add_object_manager(m->bus, NULL, KGPU_PROBE_PATH);
}

int probe_dbus_emit_gpu_added(Manager *m, const Gpu *g) {
        _cleanup_free_ char *path = NULL;
        int r;

        if (!m->bus)
                return 0;
        r = probe_dbus_gpu_path(g->id, &path);
        if (r < 0)
                return r;
        return sd_bus_emit_object_added(m->bus, path);
}

int probe_dbus_emit_gpu_changed(Manager *m, const Gpu *g, char **names) {
        _cleanup_free_ char *path = NULL;
        int r;

        if (!m->bus || strv_length(names) == 0)
                return 0;
        r = probe_dbus_gpu_path(g->id, &path);
        if (r < 0)
                return r;
        return sd_bus_emit_properties_changed_strv(m->bus, path, KGPU_GPU_INTERFACE, names);
}

int probe_dbus_emit_gpu_removed(Manager *m, const Gpu *g) {
        _cleanup_free_ char *path = NULL;
        int r;

        if (!m->bus)
                return 0;
        r = probe_dbus_gpu_path(g->id, &path);
        if (r < 0)
                return r;
        return sd_bus_emit_object_removed(m->bus, path);
}
