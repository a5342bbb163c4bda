/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mps-client.c — SetMps calls from the broker to the probe (see mps-client.h).
 *
 * Contract: see mps-client.h. A boundary: logs every SetMps it sends and its outcome.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-bus.h>

#include "common/bus-names.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/manager.h"
#include "daemons/broker/mps-client.h"

#define SET_MPS_TIMEOUT_USEC (60ULL * 1000000ULL)  /* compute mode + daemon start on a busy node */

typedef struct MpsSent {
        char *path;
        bool warned;            /* the reason it gets no MPS was logged */
        bool asked;             /* a SetMps was sent with the values below */
        bool enabled;
        uint64_t memory;
        uint32_t percentage;
} MpsSent;

struct MpsClient {
        MpsSent *sent;
        size_t n_sent;
};

typedef struct SetMpsCall {
        bool enabled;
        uint64_t memory;
        uint32_t percentage;
        char id[];
} SetMpsCall;

static bool entry_names_gpu(const ConfigSharedResource *e, const GpuInfo *g) {
        char index[16];

        if (!e->devices)
                return true;
        snprintf(index, sizeof index, "%" PRIi32, g->index);
        for (char **d = e->devices; *d; d++)
                if ((g->index >= 0 && streq(*d, index)) || (!isempty(g->uuid) && streq(*d, g->uuid)) ||
                    streq(*d, g->id))
                        return true;
        return false;
}

void mps_plan_for_gpu(const Config *c, const GpuInfo *g, MpsPlan *ret) {
        MpsPlan p = {};
        bool named = false;

        if (!c->nvidia_enabled || !streq_ptr(g->vendor, "nvidia")) {
                *ret = p;
                return;
        }
        for (size_t i = 0; i < c->nvidia_mps.n_resources; i++) {
                const ConfigSharedResource *e = &c->nvidia_mps.resources[i];
                uint64_t memory;
                uint32_t pct;

                if (!entry_names_gpu(e, g))
                        continue;
                if (!streq_ptr(e->name, RESOURCE_NVIDIA_GPU)) {
                        /* nvidia.com/mig-<profile>: MPS inside MIG devices. */
                        if (!p.skipped)
                                p.skipped = "MPS on MIG devices is not supported";
                        continue;
                }
                named = true;
                if (e->replicas == 0)
                        continue;
                if (e->memory_bytes > 0) {
                        memory = e->memory_bytes;
                        pct = g->memory_bytes > 0 ? (uint32_t) MIN(100 * memory / g->memory_bytes, 100)
                                                  : 100 / e->replicas;
                } else {
                        memory = g->memory_bytes / e->replicas;
                        pct = 100 / e->replicas;
                }
                pct = MAX(pct, 1u);
                p.n_slices += e->replicas;
                if (!p.enabled || memory < p.pinned_memory_bytes ||
                    (memory == p.pinned_memory_bytes && pct < p.active_thread_percentage)) {
                        p.pinned_memory_bytes = memory;
                        p.active_thread_percentage = pct;
                }
                p.enabled = true;
        }
        if (p.enabled && streq_ptr(g->mig_mode, "Enabled")) {
                p = (MpsPlan) { .skipped = "MIG is enabled on it (MPS needs whole GPUs)" };
        } else if (p.enabled && p.pinned_memory_bytes == 0) {
                p = (MpsPlan) { .skipped = "its memory size is unknown and no memoryGB is set" };
        } else if (!named && !p.skipped)
                p = (MpsPlan) {};
        *ret = p;
}

static MpsSent *sent_find(MpsClient *c, const char *path) {
        for (size_t i = 0; i < c->n_sent; i++)
                if (streq(c->sent[i].path, path))
                        return &c->sent[i];
        return NULL;
}

static void sent_drop(MpsClient *c, size_t i) {
        free(c->sent[i].path);
        c->sent[i] = c->sent[--c->n_sent];
}

MpsClient *mps_client_free(MpsClient *c) {
        if (!c)
                return NULL;
        while (c->n_sent > 0)
                sent_drop(c, c->n_sent - 1);
        free(c->sent);
        return mfree(c);
}

static int on_set_mps_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        SetMpsCall *call = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);

        if (e)
                log_warning("Probe refused SetMps(%s, %s, %" PRIu64 " MiB, %" PRIu32 "%%): %s: %s",
                            call->id, call->enabled ? "on" : "off", call->memory >> 20, call->percentage,
                            e->name, e->message ?: "");
        else if (call->enabled)
                log_info("MPS on GPU %s: running with default limits %" PRIu64 " MiB pinned memory, "
                         "%" PRIu32 "%% active threads.", call->id, call->memory >> 20, call->percentage);
        else
                log_info("MPS on GPU %s: stopped.", call->id);
        return 0;
}

static int set_mps(Manager *m, const char *id, bool enabled, uint64_t memory, uint32_t pct) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *msg = NULL;
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        SetMpsCall *call;
        int r;

        call = malloc(sizeof(SetMpsCall) + strlen(id) + 1);
        if (!call)
                return log_oom();
        *call = (SetMpsCall) { .enabled = enabled, .memory = memory, .percentage = pct };
        strcpy(call->id, id);

        r = sd_bus_message_new_method_call(m->bus, &msg, m->probe_owner, KGPU_PROBE_PATH,
                                           KGPU_PROBE_INTERFACE, "SetMps");
        if (r >= 0)
                r = sd_bus_message_append(msg, "sbtu", id, enabled, memory, pct);
        if (r >= 0)
                r = sd_bus_call_async(m->bus, &slot, msg, on_set_mps_reply, call, SET_MPS_TIMEOUT_USEC);
        if (r < 0) {
                free(call);
                return log_warning_errno(r, "Failed to call SetMps for GPU %s, ignoring: %m", id);
        }
        (void) sd_bus_slot_set_destroy_callback(slot, free);
        (void) sd_bus_slot_set_floating(slot, 1);
        log_info("Asking the probe to %s MPS on GPU %s (%" PRIu64 " MiB, %" PRIu32 "%%).",
                 enabled ? "run" : "stop", id, memory >> 20, pct);
        return 0;
}

static MpsSent *sent_get(MpsClient *c, const char *path) {
        MpsSent *s = sent_find(c, path), *t;

        if (s)
                return s;
        t = reallocarray(c->sent, c->n_sent + 1, sizeof(MpsSent));
        if (!t)
                return NULL;
        c->sent = t;
        s = &c->sent[c->n_sent];
        *s = (MpsSent) { .path = strdup(path) };
        if (!s->path)
                return NULL;
        c->n_sent++;
        return s;
}

int mps_client_sync(Manager *m, bool force) {
        MpsClient *c;

        if (!m->mps) {
                m->mps = calloc(1, sizeof(MpsClient));
                if (!m->mps)
                        return log_oom();
        }
        c = m->mps;

        /* Forget GPUs that are gone; with force, everything. */
        for (size_t i = c->n_sent; i > 0; i--)
                if (force || !resources_get_gpu(m->resources, c->sent[i - 1].path))
                        sent_drop(c, i - 1);
        if (!m->bus || !m->probe_owner)
                return 0;

        for (size_t i = 0; i < m->resources->n_gpus; i++) {
                const Gpu *g = &m->resources->gpus[i];
                MpsSent *s = sent_find(c, g->path);
                bool active = !isempty(g->info.mps_state);
                MpsPlan p;

                mps_plan_for_gpu(m->config, &g->info, &p);
                if (p.skipped && !(s && s->warned)) {
                        log_warning("The configuration puts GPU %s under MPS, but %s; not running MPS there.",
                                    g->info.id, p.skipped);
                        s = sent_get(c, g->path);
                        if (!s)
                                return log_oom();
                        s->warned = true;
                }

                if (p.enabled) {
                        if (s && s->asked && s->enabled && s->memory == p.pinned_memory_bytes &&
                            s->percentage == p.active_thread_percentage)
                                continue;
                } else if (s && s->asked && !s->enabled) {
                        if (!active)
                                s->asked = false;       /* done; a later stray MPS is stopped again */
                        continue;
                } else if (!(s && s->asked && s->enabled) && !active)
                        continue;       /* never under MPS */

                s = sent_get(c, g->path);
                if (!s)
                        return log_oom();
                s->asked = true;
                s->enabled = p.enabled;
                s->memory = p.pinned_memory_bytes;
                s->percentage = p.active_thread_percentage;
                (void) set_mps(m, g->info.id, p.enabled, p.pinned_memory_bytes, p.active_thread_percentage);
        }
        return 0;
}
