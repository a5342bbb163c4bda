/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * manager.h — kgpu-probed's state: the event loop, the bus, libudev and the GPU table.
 *
 * Vendor code sits behind the GPU sources (source.h): the manager creates, configures,
 * rescans and asks them in table order and never asks which vendor a GPU belongs to.
 * The Manager owns every Gpu (kept sorted by id, never removed: a GPU that disappears
 * stays exported as Unhealthy/"removed"). udev events are read from a udev_monitor on
 * the sd-event loop and applied directly, with no timer in between, so a remove event
 * turns into a PropertiesChanged signal within the same loop iteration.
 * Functions return negative errno; manager_start() logs its own failures (it is the
 * boundary), the others log at debug at most except for the operator events
 * (GPU found, removed, healthy again) which carry MESSAGE_IDs.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <libudev.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "common/cleanup.h"
#include "common/config.h"
#include "daemons/probe/gpu.h"
#include "daemons/probe/source.h"

/* Most GPUs the probe tracks; further ones are ignored. */
#define MANAGER_GPUS_MAX 256

typedef struct Manager {
        sd_event *event;
        sd_bus *bus;
        struct udev *udev;
        struct udev_monitor *monitor;
        sd_event_source *monitor_source;

        Gpu **gpus;             /* sorted by id */
        size_t n_gpus;

        /* Each GPU source's state, by its place in gpu_sources[] (source.h). */
        void *source_data[GPU_SOURCES_MAX];

        /* The generated files (labels, CDI specs). */
        char *feature_file;             /* NFD feature file, NULL: none */
        char *cdi_directory;            /* CDI spec directory, NULL: none */
        sd_event_source *outputs_source; /* defer: rewrite them once per loop iteration */
        bool publishing;                /* the bus name is ours: the files may be written */

        struct NvidiaProbe *nvidia;     /* the NVIDIA source's state (source-nvidia.c, owned
                                         * by source_data), for the MPS policy and tests */
        struct Mps *mps;                /* MPS control daemons, SetMps (mps.c) */

        struct KubeletDir *kubelet;     /* the kubelet's directories, for grpcd (kubelet.c) */

        char *config_error;     /* why manager_configure() refused the last configuration */

        struct ProbeNodeConfig *node_config; /* the broker's NodeConfig, followed (node-config.c) */

        uid_t broker_uid;       /* (uid_t) -1 when the broker user does not exist */
        uint64_t start_time;    /* CLOCK_REALTIME usec */
} Manager;

int manager_new(Manager **ret);
Manager *manager_free(Manager *m);
DEFINE_CLEANUP_FUNC(Manager, manager_free);

/* Resolves the broker user (may be NULL or unknown: then only root may call Rescan). */
int manager_set_broker_user(Manager *m, const char *user);
/* Resolves the front end's user (NULL or unknown: only root may call io.kgpu.Kubelet1). */
int manager_set_grpc_user(Manager *m, const char *user);

/* Takes the output paths, the kubelet paths and each GPU source's options from the
 * configuration. Returns -EINVAL and the offending key with what was expected in *ret_key
 * (valid until the next call) for an invalid kubelet path or a value a source refuses
 * (its check(), e.g. a GPU_MEMORY_* value, or an NVIDIA tool or driver root the probe
 * must not run as root), having changed nothing. When a publishing probe's labels.featureFile or
 * cdi.specDirectory changes, kgpu's files at the old place are removed (the new place is
 * written by the caller's next manager_write_outputs()). */
int manager_configure(Manager *m, const Config *c, const char **ret_key);

/* Writes the NFD feature file and the CDI specs from the GPU table now (each when its
 * path is set), or removes the file that would have no content (no label, no GPU of a
 * kind). Does nothing (returns 0) until m->publishing: a probe that never got its bus
 * name serves nobody, and its labels would advertise GPUs no plugin hands out. Returns
 * the first error. */
int manager_write_outputs(Manager *m);

/* Opens libudev and the monitor, enumerates, connects to the system bus, exports the
 * objects and takes the bus name; then (publishing) writes the labels and CDI specs.
 * Logs failures. */
int manager_start(Manager *m);

/* Asks every source to read its GPUs again and reconcile the GPU table (the signals go
 * out as the table changes); the first failure stops and is returned. */
int manager_rescan(Manager *m);

/* Runs the event loop until every source's first rescan is complete (source.h). */
int manager_wait_initial(Manager *m);

/* Replies to a Rescan call once the sources' asynchronous rescans ended: returns 1 if a
 * source took message, 0 when none runs (the caller replies itself). */
int manager_reply_when_done(Manager *m, sd_bus_message *message);

/* Hands one udev event (action, drm device) to the sources. Exposed for tests. */
int manager_handle_device(Manager *m, struct udev_device *d);

/* The state of source (source.h), or NULL if it is not in the table. */
void *manager_source_data(Manager *m, const GpuSource *source);

Gpu *manager_find_gpu(Manager *m, const char *id);

/* Inserts a new GPU (takes ownership) or updates the existing one with its values;
 * emits InterfacesAdded or PropertiesChanged when connected. Returns 1 if added. */
int manager_upsert_gpu(Manager *m, Gpu *g);

/* Marks the GPU whose card or render node has this syspath unhealthy ("removed").
 * Returns 1 if a GPU changed, 0 if none matched or it was already unhealthy. */
int manager_mark_removed(Manager *m, const char *syspath);

/* Marks g Unhealthy "removed" (logged, signalled, outputs rescheduled). Returns 1 if it
 * changed, 0 if it already was. */
int manager_mark_gpu_removed(Manager *m, Gpu *g);

/* Sets g's health and reason and emits PropertiesChanged for them. Returns 1 if they
 * changed, 0 if not; the caller logs and reschedules. */
int manager_set_gpu_health(Manager *m, Gpu *g, const char *health, const char *reason);

/* Takes a GPU off the bus (InterfacesRemoved) and out of the table (NVIDIA GPUs that
 * nvidia-smi no longer lists). Returns 1 if it was there. */
int manager_remove_gpu(Manager *m, const char *id);

/* Rewrites labels and CDI specs once after this loop iteration. */
void manager_schedule_outputs(Manager *m);

/* Sends STATUS="N GPUs" to the service manager. */
void manager_notify_status(Manager *m);
