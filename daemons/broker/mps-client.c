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
#include "daemons/broker/nvidia.h"

#define SET_MPS_TIMEOUT_USEC (60ULL * 1000000ULL)  /* compute mode + daemon start on a busy node */
#define SET_MPS_RETRY_USEC   (1ULL * 1000000ULL)   /* the first retry after a refusal, then doubled */
#define SET_MPS_RETRIES_MAX  6U                    /* 1 + 2 + ... + 32 s: about a minute */

typedef struct MpsSent {
        char *path;
        bool asked;             /* a SetMps was sent with the values below */
        bool enabled;
        uint64_t memory;
        uint32_t percentage;
} MpsSent;

typedef struct MpsPlan {
        bool enabled;
        uint64_t pinned_memory_bytes;
        uint32_t active_thread_percentage;
} MpsPlan;

struct MpsClient {
        MpsSent *sent;
        size_t n_sent;
        sd_event_source *retry; /* asks again after a refusal */
        unsigned n_retries;     /* since the last forced sync from outside */
};

typedef struct SetMpsCall {
        Manager *manager;
        bool enabled;
        uint64_t memory;
        uint32_t percentage;
        char id[];
} SetMpsCall;

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
        sd_event_source_disable_unref(c->retry);
        return mfree(c);
}

static int sync_requests(Manager *m, bool force);

static int on_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        (void) sync_requests(m, true);
        return 0;
}

/* The probe refused to turn MPS on where this broker's configuration puts it: most
 * likely it has not read that kgpu.yaml yet (systemctl reload kgpu.target reloads both
 * at once, the broker may ask first). Ask again, later and later, then leave it until the
 * next change. */
static void retry_later(Manager *m) {
        MpsClient *c = m->mps;
        uint64_t usec;
        int r = 0;

        if (!c || !m->event || (c->retry && sd_event_source_get_enabled(c->retry, NULL) > 0))
                return;
        if (c->n_retries >= SET_MPS_RETRIES_MAX) {
                if (c->n_retries++ == SET_MPS_RETRIES_MAX)
                        log_warning("The probe keeps refusing SetMps; not asking again until the configuration or "
                                    "the probe changes (is its kgpu.yaml the broker's?).");
                return;
        }
        usec = SET_MPS_RETRY_USEC << c->n_retries++;
        if (!c->retry) {
                r = sd_event_add_time_relative(m->event, &c->retry, CLOCK_MONOTONIC, usec, 0, on_retry, m);
                if (r >= 0)
                        (void) sd_event_source_set_description(c->retry, "mps-retry");
        } else {
                r = sd_event_source_set_time_relative(c->retry, usec);
                if (r >= 0)
                        r = sd_event_source_set_enabled(c->retry, SD_EVENT_ONESHOT);
        }
        if (r < 0)
                log_warning_errno(r, "Failed to arm the SetMps retry, ignoring: %m");
        else
                log_info("Asking the probe again in %" PRIu64 " s.", (uint64_t) (usec / 1000000U));
}

static int on_set_mps_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        SetMpsCall *call = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);

        if (e) {
                log_warning("Probe refused SetMps(%s, %s, %" PRIu64 " MiB, %" PRIu32 "%%): %s: %s",
                            call->id, call->enabled ? "on" : "off", call->memory >> 20, call->percentage,
                            e->name, e->message ?: "");
                if (call->enabled && sd_bus_error_has_name(e, KGPU_ERROR_REFUSED))
                        retry_later(call->manager);
        } else if (call->enabled)
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
        *call = (SetMpsCall) { .manager = m, .enabled = enabled, .memory = memory, .percentage = pct };
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
        /* A reload or the probe (re)appearing: refusals may be over, retries start anew. */
        if (force && m->mps)
                m->mps->n_retries = 0;
        return sync_requests(m, force);
}

static int sync_requests(Manager *m, bool force) {
        NvidiaMpsRequest *req = NULL;
        size_t n_req = 0;
        MpsClient *c;
        int r;

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

        r = resources_nvidia_mps_requests(m->resources, &req, &n_req);
        if (r < 0)
                return log_oom();
        for (size_t i = 0; i < m->resources->n_gpus; i++) {
                const Gpu *g = &m->resources->gpus[i];
                MpsSent *s = sent_find(c, g->path);
                bool active = !isempty(g->info.mps_state);
                MpsPlan p = {};

                for (size_t j = 0; j < n_req; j++)
                        if (streq(req[j].gpu_id, g->info.id)) {
                                p = (MpsPlan) { .enabled = req[j].enabled,
                                                .pinned_memory_bytes = req[j].pinned_memory_bytes,
                                                .active_thread_percentage = req[j].active_thread_percentage };
                                break;
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
                if (!s) {
                        nvidia_mps_requests_free(req, n_req);
                        return log_oom();
                }
                s->asked = true;
                s->enabled = p.enabled;
                s->memory = p.pinned_memory_bytes;
                s->percentage = p.active_thread_percentage;
                (void) set_mps(m, g->info.id, p.enabled, p.pinned_memory_bytes, p.active_thread_percentage);
        }
        nvidia_mps_requests_free(req, n_req);
        return 0;
}
