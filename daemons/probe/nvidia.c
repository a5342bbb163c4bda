/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia.c — the probe's NVIDIA inventory and health polls (see nvidia.h).
 *
 * One inventory is a chain of nvidia-smi runs on the event loop (query -> -L -> -q ->
 * [summary] -> [topo -m]); each callback stores its answer and starts the next, the
 * last one builds the Gpu objects (nvidia_build_gpus, pure) and reconciles the
 * manager's table. Health polls are one --query-gpu run each, off a timer. The pure
 * part, from parsed answers to Gpu objects, is nvidia-build.c.
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "common/bus-names.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/nvidia-failure.h"
#include "daemons/probe/nvidia-runner.h"
#include "daemons/probe/nvidia.h"
#include "daemons/probe/nvidia-driver-files.h"
#include "daemons/probe/probe-dbus.h"

#define NVIDIA_POLL_TIMEOUT_MAX_USEC (10U * 1000U * 1000U)
#define NVIDIA_POLL_TIMEOUT_MIN_USEC (1U * 1000U * 1000U)
#define NVIDIA_WAITERS_MAX 64U
#define NVIDIA_HEALTH_REASON_MAX 255U

typedef enum InventoryStep {
        STEP_NONE,
        STEP_QUERY,
        STEP_LIST,
        STEP_Q,
        STEP_SUMMARY,
        STEP_TOPO,
} InventoryStep;

struct NvidiaProbe {
        Manager *manager;

        bool enabled;
        bool fail_on_init;
        char *driver_root;
        char *dev_root;                 /* flags.nvidiaDevRoot, NULL: the driver root */
        char *smi_configured;
        char *smi;                      /* the tool found, NULL: none */
        char **smi_env;                 /* its environment when it is the driver root's, else NULL */
        uint32_t health_interval_ms;
        uint32_t recover_polls;

        /* inventory */
        NvidiaRun *run;
        InventoryStep step;
        bool refresh_topology;
        bool again, again_refresh;
        bool no_compute_cap;            /* the driver refused the compute_cap field (before R510) */
        NvidiaGpu *gpus;
        size_t n_gpus;
        NvidiaSmiError *lost;
        size_t n_lost;
        NvidiaMigDevice *migs;
        size_t n_migs;
        bool migs_known;
        NvidiaQMigDevice *q_migs;
        size_t n_q_migs;
        NvidiaQGpu *q_gpus;
        size_t n_q_gpus;
        NvidiaVersions versions;
        NvidiaTopology *topology;       /* cache */
        int last_error;
        char *last_message;
        Config *config;                 /* what the labels and the SetMps policy read */
        unsigned n_inventories;
        sd_bus_message *waiters[NVIDIA_WAITERS_MAX];
        size_t n_waiters;

        /* health */
        sd_event_source *health_timer;
        NvidiaRun *health_run;
        uint64_t n_polls;
};

static void inventory_reset(NvidiaProbe *p) {
        p->gpus = mfree(p->gpus);
        p->lost = mfree(p->lost);
        p->migs = mfree(p->migs);
        p->q_migs = mfree(p->q_migs);
        p->q_gpus = mfree(p->q_gpus);
        p->n_gpus = p->n_lost = p->n_migs = p->n_q_migs = p->n_q_gpus = 0;
        p->migs_known = false;
        p->versions = (NvidiaVersions) {};
}

int nvidia_probe_new(Manager *m, NvidiaProbe **ret) {
        NvidiaProbe *p;

        p = calloc(1, sizeof(NvidiaProbe));
        if (!p)
                return -ENOMEM;
        p->manager = m;
        p->recover_polls = 1;
        *ret = p;
        return 0;
}

NvidiaProbe *nvidia_probe_free(NvidiaProbe *p) {
        if (!p)
                return NULL;
        nvidia_run_free(p->run);
        nvidia_run_free(p->health_run);
        sd_event_source_disable_unref(p->health_timer);
        for (size_t i = 0; i < p->n_waiters; i++)
                sd_bus_message_unref(p->waiters[i]);
        inventory_reset(p);
        free(p->topology);
        free(p->last_message);
        config_free(p->config);
        free(p->driver_root);
        free(p->dev_root);
        strv_free(p->smi_env);
        free(p->smi_configured);
        free(p->smi);
        return mfree(p);
}

bool nvidia_probe_busy(const NvidiaProbe *p) {
        return p && p->step != STEP_NONE;
}

int nvidia_probe_last_error(const NvidiaProbe *p, const char **ret_message) {
        if (ret_message)
                *ret_message = p->last_message ?: "";
        return p->last_error;
}

const Config *nvidia_probe_config(const NvidiaProbe *p) {
        return p ? p->config : NULL;
}

void nvidia_probe_set_config(NvidiaProbe *p, Config *c) {
        config_free(p->config);
        p->config = c;
}

uint64_t nvidia_probe_n_polls(const NvidiaProbe *p) {
        return p->n_polls;
}

/* ---- the manager side ---- */

static bool gpu_is_nvidia(const Gpu *g) {
        return streq(g->vendor, "nvidia");
}

static bool reason_is_ours(const char *reason) {
        return streq(reason, NVIDIA_REASON_GPU_LOST) || startswith(reason, NVIDIA_REASON_SMI_FAILED);
}

/* Sets a GPU's health and tells the bus at once (same dispatch). */
static void nvidia_set_health(NvidiaProbe *p, Gpu *g, const char *health, const char *reason) {
        char *names[] = { (char *) "Health", (char *) "HealthReason", NULL };
        bool was_healthy = streq(g->health, GPU_HEALTHY);
        int r;

        r = gpu_set_health(g, health, reason);
        if (r <= 0)
                return;
        r = probe_dbus_emit_gpu_changed(p->manager, g, names);
        if (r < 0)
                log_debug_errno(r, "Failed to emit PropertiesChanged for %s, ignoring: %m", g->id);
        if (was_healthy && !streq(health, GPU_HEALTHY))
                log_struct(LOG_WARNING, KGPU_MESSAGE_GPU_HEALTH, "NVIDIA GPU %s (index %d) is unhealthy: %s.",
                           g->id, g->index, reason);
        else if (!was_healthy && streq(health, GPU_HEALTHY))
                log_struct(LOG_NOTICE, KGPU_MESSAGE_GPU_HEALTH, "NVIDIA GPU %s (index %d) is healthy again.",
                           g->id, g->index);
        manager_notify_status(p->manager);
        manager_schedule_outputs(p->manager);
}

/* One observation of a GPU: good (answered) or bad (lost / poll failed). */
static void nvidia_observe(NvidiaProbe *p, Gpu *g, bool good, const char *reason) {
        if (!good) {
                g->nvidia_good_polls = 0;
                /* A GPU unhealthy for another reason (MPS) stays so; ours get the new one. */
                if (streq(g->health, GPU_HEALTHY) || reason_is_ours(g->health_reason))
                        nvidia_set_health(p, g, GPU_UNHEALTHY, reason);
                return;
        }
        if (streq(g->health, GPU_HEALTHY) || !reason_is_ours(g->health_reason))
                return;
        if (g->nvidia_good_polls < UINT32_MAX)
                g->nvidia_good_polls++;
        if (g->nvidia_good_polls >= p->recover_polls) {
                g->nvidia_good_polls = 0;
                nvidia_set_health(p, g, GPU_HEALTHY, "");
        }
}

static void nvidia_fail_all(NvidiaProbe *p, const char *message) {
        _cleanup_free_ char *reason = NULL;

        if (asprintf(&reason, "%s: %s", NVIDIA_REASON_SMI_FAILED, isempty(message) ? "unknown error" : message) < 0) {
                log_oom();
                return;
        }
        /* The broker takes HealthReason up to 256 bytes: a quoted output is cut (and a
         * UTF-8 sequence cut in two made '?'). */
        if (strlen(reason) > NVIDIA_HEALTH_REASON_MAX) {
                strcpy(reason + NVIDIA_HEALTH_REASON_MAX - 3, "...");
                nvidia_utf8_sanitize(reason);
        }
        for (size_t i = 0; i < p->manager->n_gpus; i++)
                if (gpu_is_nvidia(p->manager->gpus[i]))
                        nvidia_observe(p, p->manager->gpus[i], false, reason);
}

static bool lost_matches(const NvidiaProbe *p, const Gpu *g) {
        for (size_t i = 0; i < p->n_lost; i++)
                if (!isempty(p->lost[i].pci_address) && streq(p->lost[i].pci_address, g->pci_address))
                        return true;
        return false;
}

static char *read_mig_minors(void) {
        const char *path = getenv("KGPU_NVIDIA_CAPS_MIG_MINORS") ?: NVIDIA_CAPS_MIG_MINORS_DEFAULT;
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *buf = NULL;
        size_t n = 0;

        fd = open(path, O_RDONLY|O_CLOEXEC|O_NOCTTY);
        if (fd < 0) {
                log_debug_errno(negative_errno(), "No MIG capability minors at %s: %m", path);
                return NULL;
        }
        buf = malloc(NVIDIA_CAPS_MIG_MINORS_MAX + 1);
        if (!buf)
                return NULL;
        for (;;) {
                ssize_t k = read(fd, buf + n, NVIDIA_CAPS_MIG_MINORS_MAX - n);

                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        log_debug_errno(negative_errno(), "Failed to read %s, ignoring: %m", path);
                        return NULL;
                }
                if (k == 0)
                        break;
                n += (size_t) k;
                if (n >= NVIDIA_CAPS_MIG_MINORS_MAX) {
                        log_warning("%s is larger than %u bytes, ignoring it.", path, NVIDIA_CAPS_MIG_MINORS_MAX);
                        return NULL;
                }
        }
        buf[n] = 0;
        if (strlen(buf) != n)
                return NULL;
        return TAKE_PTR(buf);
}

/* GPUs nvidia-smi names lost that no object stands for (lost before they were ever
 * read, at start for one): each becomes an Unhealthy "gpu-lost" object under the id
 * NVIDIA_LOST_ID_PREFIX + its PCI address, its UUID being unknown. */
static void nvidia_add_lost(NvidiaProbe *p) {
        Manager *m = p->manager;
        int r;

        for (size_t i = 0; i < p->n_lost; i++) {
                const NvidiaSmiError *e = &p->lost[i];
                _cleanup_free_ char *id = NULL;
                bool known = false;
                Gpu *g = NULL;

                if (isempty(e->pci_address)) {
                        log_warning("nvidia-smi reports a GPU lost without naming its PCI address, it cannot be "
                                    "advertised: %s", e->message);
                        continue;
                }
                for (size_t k = 0; k < m->n_gpus && !known; k++)
                        known = gpu_is_nvidia(m->gpus[k]) && streq(m->gpus[k]->pci_address, e->pci_address);
                if (known)
                        continue;
                if (asprintf(&id, "%s%s", NVIDIA_LOST_ID_PREFIX, e->pci_address) < 0) {
                        log_oom();
                        return;
                }
                r = gpu_new(id, &g);
                if (r >= 0 && ((r = free_and_strdup(&g->vendor, "nvidia")) < 0 ||
                               (r = free_and_strdup(&g->driver, "nvidia")) < 0 ||
                               (r = free_and_strdup(&g->pci_address, e->pci_address)) < 0 ||
                               (r = free_and_strdup(&g->health, GPU_UNHEALTHY)) < 0 ||
                               (r = free_and_strdup(&g->health_reason, NVIDIA_REASON_GPU_LOST)) < 0))
                        g = gpu_free(g);
                if (r < 0) {
                        log_oom();
                        return;
                }
                g->vendor_id = 0x10de;
                r = manager_upsert_gpu(m, g);
                if (r < 0) {
                        log_warning_errno(r, "Failed to add the lost NVIDIA GPU %s, ignoring: %m", id);
                        continue;
                }
                log_struct(LOG_WARNING, KGPU_MESSAGE_GPU_HEALTH,
                           "NVIDIA GPU at %s is lost (nvidia-smi: %s): advertised as %s, Unhealthy \"%s\".",
                           e->pci_address, e->message, id, NVIDIA_REASON_GPU_LOST);
        }
}

static void nvidia_apply_inventory(NvidiaProbe *p) {
        Manager *m = p->manager;
        _cleanup_free_ char *mig_minors = read_mig_minors();
        Gpu **built = NULL;
        size_t n_built = 0;
        int r;

        r = nvidia_build_gpus(p->gpus, p->n_gpus, p->migs, p->n_migs, p->q_migs, p->n_q_migs,
                              p->q_gpus, p->n_q_gpus, p->topology, &p->versions, mig_minors, &built, &n_built);
        if (r < 0) {
                log_warning_errno(r, "Failed to build the NVIDIA GPU objects: %m");
                p->last_error = r;
                return;
        }

        /* Known GPUs nvidia-smi no longer lists: lost ones stay (unhealthy), others go. */
        for (size_t i = m->n_gpus; i > 0; i--) {
                Gpu *g = m->gpus[i - 1];
                bool present = false;

                if (!gpu_is_nvidia(g))
                        continue;
                for (size_t k = 0; k < n_built && !present; k++)
                        present = streq(built[k]->id, g->id);
                if (present)
                        continue;
                /* A lost GPU is named by bus id (or not at all): keep it, unhealthy. */
                if (lost_matches(p, g) || (p->n_lost > 0 && isempty(p->lost[0].pci_address)))
                        nvidia_observe(p, g, false, NVIDIA_REASON_GPU_LOST);
                else {
                        log_struct(LOG_WARNING, KGPU_MESSAGE_GPU_REMOVED,
                                   "NVIDIA GPU %s is no longer listed by nvidia-smi, removing it.", g->id);
                        (void) manager_remove_gpu(m, g->id);
                }
        }

        for (size_t k = 0; k < n_built; k++) {
                Gpu *g = TAKE_PTR(built[k]), *old = manager_find_gpu(m, g->id);

                if (old) {
                        /* Health and MPS state are kept: polls and SetMps own them. */
                        if (free_and_strdup(&g->health, old->health) < 0 ||
                            free_and_strdup(&g->health_reason, old->health_reason) < 0 ||
                            free_and_strdup(&g->mps_state, old->mps_state) < 0 ||
                            free_and_strdup(&g->mps_pipe_directory, old->mps_pipe_directory) < 0) {
                                gpu_free(g);
                                log_oom();
                                continue;
                        }
                        if (!p->migs_known)
                                (void) gpu_set_mig_devices(g, old->mig_devices, old->n_mig_devices);
                        g->nvidia_good_polls = old->nvidia_good_polls;
                }
                r = manager_upsert_gpu(m, g);
                if (r < 0)
                        log_warning_errno(r, "Failed to add NVIDIA GPU, ignoring: %m");
        }
        nvidia_add_lost(p);
        /* An answered GPU counts as one good observation. */
        for (size_t k = 0; k < p->n_gpus; k++) {
                Gpu *g = manager_find_gpu(m, p->gpus[k].uuid);

                if (g)
                        nvidia_observe(p, g, true, NULL);
        }
        free(built);
}

static void nvidia_finish_inventory(NvidiaProbe *p, int error, const char *message) {
        int r;

        p->step = STEP_NONE;
        p->run = nvidia_run_free(p->run);
        p->last_error = error;
        (void) free_and_strdup(&p->last_message, message ?: "");
        p->n_inventories++;

        if (error < 0) {
                log_warning("Failed to read the NVIDIA GPUs with %s: %s", p->smi, isempty(message) ? "error" : message);
                nvidia_fail_all(p, message);
        } else {
                nvidia_apply_inventory(p);
                log_debug("NVIDIA inventory done: %zu GPUs, %zu MIG devices, %zu lost.", p->n_gpus, p->n_migs,
                          p->n_lost);
                if (p->n_gpus == 0 && p->n_lost > 0) {
                        /* Every GPU lost: no usable one, an initialization failure as any
                         * other (failOnInitError applies); the lost ones stay advertised. */
                        _cleanup_free_ char *m = NULL;

                        p->last_error = -EIO;
                        if (asprintf(&m, "every NVIDIA GPU is lost: %s", p->lost[0].message) >= 0) {
                                nvidia_utf8_sanitize(m);
                                free(p->last_message);
                                p->last_message = TAKE_PTR(m);
                        }
                }
        }
        inventory_reset(p);

        if (p->again) {
                bool refresh = p->again_refresh;

                p->again = p->again_refresh = false;
                r = nvidia_probe_inventory(p, refresh);
                if (r >= 0 && nvidia_probe_busy(p))
                        return;
        }
        for (size_t i = 0; i < p->n_waiters; i++) {
                if (p->last_error < 0)
                        r = sd_bus_reply_method_errorf(p->waiters[i], SD_BUS_ERROR_FAILED,
                                                       "Reading the NVIDIA GPUs failed: %s", p->last_message);
                else
                        r = sd_bus_reply_method_return(p->waiters[i], NULL);
                if (r < 0)
                        log_debug_errno(r, "Failed to reply to Rescan, ignoring: %m");
                p->waiters[i] = sd_bus_message_unref(p->waiters[i]);
        }
        p->n_waiters = 0;
}

static int inventory_start_step(NvidiaProbe *p, InventoryStep step);

/* One inventory step's answer: its text (t, len) and the run's own failure (run_error:
 * an error, a timeout or a cut output; else 0). The handlers below return the next
 * step, or STEP_NONE when they ended the inventory themselves. */
typedef struct StepAnswer {
        const NvidiaRunResult *res;
        const char *t;
        size_t len;
        int run_error;
} StepAnswer;

static InventoryStep on_query(NvidiaProbe *p, const StepAnswer *a) {
        _cleanup_free_ char *perr = NULL;
        char msg[NVIDIA_FAILURE_MAX];
        int r = a->run_error;

        if (r >= 0)
                r = nvidia_smi_parse_query_gpu_health(a->t, a->len, p->no_compute_cap ? NVIDIA_SMI_QUERY_FIELDS :
                                                      NVIDIA_INVENTORY_FIELDS, &p->gpus, &p->n_gpus,
                                                      &p->lost, &p->n_lost, &perr);
        if (r < 0 && a->run_error >= 0 && !p->no_compute_cap && a->res && a->res->exit_status != 0 &&
            memmem(a->t, a->len, "\"compute_cap\"", 13)) {
                /* 'Field "compute_cap" is not a valid field to query.': an older
                 * driver; ask without it (ComputeCapability stays ""). */
                log_info("nvidia-smi does not know the compute_cap field, reading without it.");
                p->no_compute_cap = true;
                p->gpus = mfree(p->gpus);
                p->lost = mfree(p->lost);
                p->n_gpus = p->n_lost = 0;
                return STEP_QUERY;
        }
        if (r == -ENODEV) {
                /* "No devices were found": a node without NVIDIA GPUs, no error. */
                log_info("nvidia-smi found no NVIDIA GPUs.");
                nvidia_finish_inventory(p, 0, NULL);
                return STEP_NONE;
        }
        if (r < 0) {
                nvidia_describe_failure(a->run_error, r, a->res, perr, msg, sizeof(msg));
                nvidia_finish_inventory(p, r, msg);
                return STEP_NONE;
        }
        if (p->n_gpus == 0 && p->n_lost > 0) {
                /* Only lost GPUs: -L, -q and topo -m have nothing more to say. */
                nvidia_finish_inventory(p, 0, NULL);
                return STEP_NONE;
        }
        return STEP_LIST;
}

static InventoryStep on_list(NvidiaProbe *p, const StepAnswer *a) {
        _cleanup_free_ char *perr = NULL;
        _cleanup_free_ NvidiaGpu *list_gpus = NULL;
        size_t n_list_gpus = 0;
        char msg[NVIDIA_FAILURE_MAX];
        int r = a->run_error;

        if (r >= 0)
                r = nvidia_smi_parse_list(a->t, a->len, &list_gpus, &n_list_gpus, &p->migs, &p->n_migs, &perr);
        if (r == -EIO && p->n_lost > 0) {
                /* Some GPUs lost (the query said so): the others' lines still count. */
                _cleanup_free_ char *kept = NULL;
                size_t kept_len = 0;

                kept = nvidia_drop_lost_lines(a->t, a->len, &kept_len);
                if (!kept) {
                        log_oom();
                        return STEP_Q;
                }
                perr = mfree(perr);
                r = nvidia_smi_parse_list(kept, kept_len, &list_gpus, &n_list_gpus, &p->migs, &p->n_migs, &perr);
        }
        if (r < 0) {
                nvidia_describe_failure(a->run_error, r, a->res, perr, msg, sizeof(msg));
                log_warning("nvidia-smi -L failed, MIG devices stay as they were: %s", msg);
        } else
                p->migs_known = true;
        return STEP_Q;
}

static InventoryStep on_q(NvidiaProbe *p, const StepAnswer *a) {
        _cleanup_free_ char *perr = NULL;
        char msg[NVIDIA_FAILURE_MAX];
        int r = a->run_error;

        if (r >= 0)
                r = nvidia_smi_parse_q_gpus(a->t, a->len, &p->q_gpus, &p->n_q_gpus, &perr);
        if (r >= 0) {
                perr = mfree(perr);
                r = nvidia_smi_parse_q_mig_devices(a->t, a->len, &p->q_migs, &p->n_q_migs, &perr);
        }
        if (r >= 0) {
                perr = mfree(perr);
                (void) nvidia_smi_parse_versions(a->t, a->len, &p->versions, &perr);
        }
        if (r < 0) {
                nvidia_describe_failure(a->run_error, r, a->res, perr, msg, sizeof(msg));
                log_info("nvidia-smi -q failed, device minors taken from the indices: %s", msg);
        }
        return isempty(p->versions.cuda) ? STEP_SUMMARY : STEP_TOPO;
}

static InventoryStep on_summary(NvidiaProbe *p, const StepAnswer *a) {
        _cleanup_free_ char *perr = NULL;
        char msg[NVIDIA_FAILURE_MAX];
        int r;

        if (a->run_error >= 0)
                (void) nvidia_smi_parse_versions(a->t, a->len, &p->versions, &perr);
        if (p->n_migs == 0 || p->n_q_migs > 0)
                return STEP_TOPO;
        /* -q failed: the table's MIG box gives each MIG device's GPU and compute instance
         * (without them its capability nodes are unknown and it is not published). */
        perr = mfree(perr);
        r = a->run_error;
        if (r >= 0)
                r = nvidia_smi_parse_summary_mig_devices(a->t, a->len, &p->q_migs, &p->n_q_migs, &perr);
        if (r < 0) {
                nvidia_describe_failure(a->run_error, r, a->res, perr, msg, sizeof(msg));
                log_warning("nvidia-smi failed, the MIG devices' GPU and compute instances are unknown: %s", msg);
        }
        return STEP_TOPO;
}

static InventoryStep on_topo(NvidiaProbe *p, const StepAnswer *a) {
        _cleanup_free_ char *perr = NULL;
        char msg[NVIDIA_FAILURE_MAX];
        NvidiaTopology *topo = NULL;
        int r = a->run_error;

        if (r >= 0)
                r = nvidia_smi_parse_topology(a->t, a->len, &topo, &perr);
        if (r < 0) {
                nvidia_describe_failure(a->run_error, r, a->res, perr, msg, sizeof(msg));
                log_warning("nvidia-smi topo -m failed, links and NUMA nodes unknown: %s", msg);
                p->topology = mfree(p->topology);
        } else {
                free(p->topology);
                p->topology = topo;
        }
        nvidia_finish_inventory(p, 0, NULL);
        return STEP_NONE;
}

static void on_inventory_run(NvidiaRun *run, int error, const NvidiaRunResult *res, void *userdata) {
        NvidiaProbe *p = userdata;
        StepAnswer a = { .res = res, .t = "", .run_error = error };
        char msg[NVIDIA_FAILURE_MAX];
        InventoryStep next = STEP_NONE;
        int r;

        if (res)
                a.t = nvidia_result_text(res, &a.len);
        if (a.run_error >= 0 && res && (res->timed_out || res->truncated))
                a.run_error = res->timed_out ? -ETIME : -EMSGSIZE;

        switch (p->step) {
        case STEP_QUERY:
                next = on_query(p, &a);
                break;
        case STEP_LIST:
                next = on_list(p, &a);
                break;
        case STEP_Q:
                next = on_q(p, &a);
                break;
        case STEP_SUMMARY:
                next = on_summary(p, &a);
                break;
        case STEP_TOPO:
                next = on_topo(p, &a);
                break;
        case STEP_NONE:
                break;
        }
        if (next == STEP_NONE)
                return;

        if (next == STEP_TOPO && !p->refresh_topology && p->topology) {
                nvidia_finish_inventory(p, 0, NULL);
                return;
        }
        r = inventory_start_step(p, next);
        if (r < 0) {
                (void) snprintf(msg, sizeof(msg), "cannot run %s: %s", p->smi, strerror(-r));
                nvidia_finish_inventory(p, r, msg);
        }
}

static int inventory_start_step(NvidiaProbe *p, InventoryStep step) {
        static char *const argv_query[] = { (char *) "nvidia-smi", (char *) "--query-gpu=" NVIDIA_INVENTORY_FIELDS,
                                            (char *) "--format=csv,noheader,nounits", NULL };
        static char *const argv_query_old[] = { (char *) "nvidia-smi", (char *) "--query-gpu=" NVIDIA_SMI_QUERY_FIELDS,
                                                (char *) "--format=csv,noheader,nounits", NULL };
        static char *const argv_list[] = { (char *) "nvidia-smi", (char *) "-L", NULL };
        static char *const argv_q[] = { (char *) "nvidia-smi", (char *) "-q", NULL };
        static char *const argv_summary[] = { (char *) "nvidia-smi", NULL };
        static char *const argv_topo[] = { (char *) "nvidia-smi", (char *) "topo", (char *) "-m", NULL };
        char * const *argv = step == STEP_QUERY ? (p->no_compute_cap ? argv_query_old : argv_query) :
                             step == STEP_LIST ? argv_list :
                             step == STEP_Q ? argv_q : step == STEP_SUMMARY ? argv_summary : argv_topo;
        NvidiaRunOptions opts = { .env = p->smi_env };
        int r;

        p->run = nvidia_run_free(p->run);
        p->step = step;
        r = nvidia_run_start(p->manager->event, p->smi, argv, &opts, on_inventory_run, p, &p->run);
        if (r < 0)
                p->step = STEP_NONE;
        return r;
}

int nvidia_probe_inventory(NvidiaProbe *p, bool refresh_topology) {
        int r;

        if (!p || !p->smi || !p->manager->event)
                return 0;
        if (nvidia_probe_busy(p)) {
                p->again = true;
                p->again_refresh = p->again_refresh || refresh_topology;
                return 0;
        }
        inventory_reset(p);
        p->refresh_topology = refresh_topology;
        r = inventory_start_step(p, STEP_QUERY);
        if (r < 0) {
                char msg[256];

                (void) snprintf(msg, sizeof(msg), "cannot run %s: %s", p->smi, strerror(-r));
                nvidia_finish_inventory(p, r, msg);
                return r;
        }
        return 0;
}

int nvidia_probe_wait_initial(NvidiaProbe *p) {
        sd_event *e;
        int r;

        if (!p)
                return 0;
        e = p->manager->event;
        while (nvidia_probe_busy(p)) {
                r = sd_event_run(e, UINT64_MAX);
                if (r < 0)
                        return log_error_errno(r, "Event loop failed while reading the NVIDIA GPUs: %m");
                if (sd_event_get_state(e) == SD_EVENT_FINISHED)
                        return log_error_errno(-ECANCELED, "Stopped while reading the NVIDIA GPUs.");
        }
        if (p->smi && p->last_error < 0) {
                if (p->fail_on_init)
                        return log_error_errno(p->last_error,
                                               "NVIDIA initialization failed: %s failed: %s "
                                               "(failOnInitError is set; set it to false to start without NVIDIA GPUs).",
                                               p->smi, p->last_message ?: "");
                log_warning("NVIDIA initialization failed (%s), no usable NVIDIA GPU until the next rescan "
                            "(failOnInitError is false).", p->last_message ?: "");
        }
        return 0;
}

int nvidia_probe_reply_when_done(NvidiaProbe *p, sd_bus_message *message) {
        if (!nvidia_probe_busy(p))
                return 0;
        if (p->n_waiters >= NVIDIA_WAITERS_MAX)
                return 0;
        p->waiters[p->n_waiters++] = sd_bus_message_ref(message);
        return 1;
}

/* ---- health ---- */

static void on_health_run(NvidiaRun *run, int error, const NvidiaRunResult *res, void *userdata) {
        NvidiaProbe *p = userdata;
        _cleanup_free_ NvidiaGpu *gpus = NULL;
        _cleanup_free_ NvidiaSmiError *lost = NULL;
        _cleanup_free_ char *perr = NULL;
        size_t n = 0, n_lost = 0, len = 0;
        const char *t = "";
        int run_error = error, r;

        p->n_polls++;
        if (res)
                t = nvidia_result_text(res, &len);
        if (run_error >= 0 && res && (res->timed_out || res->truncated))
                run_error = res->timed_out ? -ETIME : -EMSGSIZE;
        r = run_error;
        if (r >= 0)
                r = nvidia_smi_parse_query_gpu_health(t, len, NVIDIA_SMI_QUERY_FIELDS, &gpus, &n, &lost, &n_lost, &perr);
        if (r == -ENODEV) {
                /* No devices at all: every GPU we serve is gone. */
                n = 0;
                r = 0;
        }
        if (r < 0) {
                char msg[NVIDIA_FAILURE_MAX];

                nvidia_describe_failure(run_error, r, res, perr, msg, sizeof(msg));
                log_debug("NVIDIA health poll failed: %s", msg);
                nvidia_fail_all(p, msg);
        } else
                for (size_t i = 0; i < p->manager->n_gpus; i++) {
                        Gpu *g = p->manager->gpus[i];
                        bool present = false;

                        if (!gpu_is_nvidia(g))
                                continue;
                        for (size_t k = 0; k < n && !present; k++)
                                present = streq(gpus[k].uuid, g->id);
                        nvidia_observe(p, g, present, NVIDIA_REASON_GPU_LOST);
                }
        /* The callback may free the run: drop our pointer last. */
        p->health_run = nvidia_run_free(p->health_run);
}

static uint64_t poll_timeout_usec(const NvidiaProbe *p) {
        uint64_t t = (uint64_t) p->health_interval_ms * 1000U;

        return t < NVIDIA_POLL_TIMEOUT_MIN_USEC ? NVIDIA_POLL_TIMEOUT_MIN_USEC :
               t > NVIDIA_POLL_TIMEOUT_MAX_USEC ? NVIDIA_POLL_TIMEOUT_MAX_USEC : t;
}

static int on_health_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        static char *const argv[] = { (char *) "nvidia-smi", (char *) "--query-gpu=" NVIDIA_SMI_QUERY_FIELDS,
                                      (char *) "--format=csv,noheader,nounits", NULL };
        NvidiaProbe *p = userdata;
        NvidiaRunOptions opts = { .timeout_usec = poll_timeout_usec(p), .env = p->smi_env };
        int r;

        r = sd_event_source_set_time_relative(s, (uint64_t) p->health_interval_ms * 1000U);
        if (r >= 0)
                r = sd_event_source_set_enabled(s, SD_EVENT_ON);
        if (r < 0)
                log_warning_errno(r, "Failed to re-arm the NVIDIA health timer: %m");

        /* Never two polls at once, and none while the inventory runs. */
        if (p->health_run || nvidia_probe_busy(p) || !p->smi)
                return 0;
        r = nvidia_run_start(p->manager->event, p->smi, argv, &opts, on_health_run, p, &p->health_run);
        if (r < 0) {
                char msg[128];

                (void) snprintf(msg, sizeof(msg), "cannot run nvidia-smi: %s", strerror(-r));
                p->n_polls++;
                nvidia_fail_all(p, msg);
        }
        return 0;
}

static int nvidia_arm_health(NvidiaProbe *p) {
        int r;

        p->health_timer = sd_event_source_disable_unref(p->health_timer);
        p->health_run = nvidia_run_free(p->health_run);
        if (!p->smi || p->health_interval_ms == 0 || !p->manager->event)
                return 0;
        r = sd_event_add_time_relative(p->manager->event, &p->health_timer, CLOCK_MONOTONIC,
                                       (uint64_t) p->health_interval_ms * 1000U, 0, on_health_timer, p);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(p->health_timer, "nvidia-health");
        return 0;
}

int nvidia_tools_check(const Config *c, char **ret_error) {
        const struct {
                const char *name, *key, *configured;
        } tools[] = {
                { "nvidia-smi", "nvidia.smiPath", c->nvidia_smi_path },
                { "nvidia-cuda-mps-control", "nvidia.mpsControlPath", c->nvidia_mps_control_path },
        };

        if (!c->nvidia_enabled)
                return 0;
        if (!isempty(c->nvidia_driver_root) && !streq(c->nvidia_driver_root, "/")) {
                /* Refused even while both tools are configured: the next reload may use it. */
                _cleanup_free_ char *why = NULL;
                int r;

                r = nvidia_path_check_trusted(c->nvidia_driver_root, true, &why);
                if (r == -ENOMEM)
                        return r;
                if (r == -EPERM) {
                        if (asprintf(ret_error, "flags.nvidiaDriverRoot: refusing to look for the NVIDIA tools "
                                     "there: %s", why ?: "not trusted") < 0)
                                return -ENOMEM;
                        return -EPERM;
                }
        }
        if (!isempty(c->nvidia_dev_root) && !streq(c->nvidia_dev_root, "/")) {
                /* The device nodes the CDI spec hands to containers come from there. */
                _cleanup_free_ char *why = NULL;
                int r;

                r = nvidia_path_check_trusted(c->nvidia_dev_root, true, &why);
                if (r == -ENOMEM)
                        return r;
                if (r == -EPERM) {
                        if (asprintf(ret_error, "flags.nvidiaDevRoot: refusing to hand out device nodes "
                                     "from there: %s", why ?: "not trusted") < 0)
                                return -ENOMEM;
                        return -EPERM;
                }
        }
        for (size_t i = 0; i < ELEMENTSOF(tools); i++) {
                const char *configured = tools[i].configured;
                _cleanup_free_ char *found = NULL, *why = NULL;
                int r;

                r = nvidia_tool_find(c->nvidia_driver_root, configured, tools[i].name, &found, &why);
                if (r == -ENOMEM)
                        return r;
                if (r == -EPERM) {
                        if (asprintf(ret_error, "%s: refusing to run %s as root: %s",
                                     !isempty(configured) ? tools[i].key : "flags.nvidiaDriverRoot",
                                     tools[i].name, why ?: "not trusted") < 0)
                                return -ENOMEM;
                        return -EPERM;
                }
                /* Not found is no error here: no NVIDIA GPU, or MPS unavailable (said later). */
        }
        return 0;
}

const char *nvidia_probe_driver_root(const NvidiaProbe *p) {
        return p && !isempty(p->driver_root) ? p->driver_root : "/";
}

const char *nvidia_probe_dev_root(const NvidiaProbe *p) {
        return p && p->dev_root ? p->dev_root : nvidia_probe_driver_root(p);
}

int nvidia_probe_configure(NvidiaProbe *p, const Config *c) {
        _cleanup_free_ char *smi = NULL;
        bool enabled = c->nvidia_enabled;
        int r = 0;

        if (free_and_strdup(&p->driver_root, c->nvidia_driver_root) < 0 ||
            free_and_strdup(&p->dev_root, c->nvidia_dev_root) < 0 ||
            free_and_strdup(&p->smi_configured, c->nvidia_smi_path) < 0)
                return -ENOMEM;
        p->fail_on_init = c->nvidia_fail_on_init_error;
        p->health_interval_ms = c->nvidia_health_interval_ms;
        p->recover_polls = MAX(c->nvidia_health_recover_polls, 1U);

        if (enabled) {
                _cleanup_free_ char *why = NULL;

                r = nvidia_tool_find(p->driver_root, p->smi_configured, "nvidia-smi", &smi, &why);
                if (r == -ENOMEM)
                        return r;
                if (r == -EPERM)
                        /* nvidia_tools_check() refused this configuration before: only a
                         * change between the two gets here. */
                        log_error("Not running nvidia-smi: %s.", why ?: "not trusted");
                else if (r < 0) {
                        if (!p->smi)
                                log_notice("No NVIDIA driver: nvidia-smi not found%s%s, serving no NVIDIA GPUs.",
                                           isempty(p->smi_configured) ? "" : " at ",
                                           p->smi_configured ?: "");
                        else
                                log_notice("nvidia-smi is gone, keeping the NVIDIA GPUs read last.");
                }
        }
        if (smi || !enabled || r == -EPERM) {
                free(p->smi);
                p->smi = TAKE_PTR(smi);
                p->smi_env = strv_free(p->smi_env);
                r = nvidia_tool_env(p->driver_root, p->smi, &p->smi_env);
                if (r == -ENOMEM)
                        return r;
                if (r < 0)
                        log_notice_errno(r, "No library directories in the ld cache of the driver root %s, "
                                         "%s runs with the host's libraries: %m", p->driver_root, p->smi);
                else if (p->smi_env)
                        log_debug("%s runs with the libraries of the driver root %s.", p->smi, p->driver_root);
        }
        if (!enabled && nvidia_probe_busy(p))
                /* Switched off while reading: that read is void. */
                nvidia_finish_inventory(p, -ECANCELED, "NVIDIA support was switched off");
        if (!enabled)
                /* Switched off: the NVIDIA GPUs leave the bus. */
                for (size_t i = p->manager->n_gpus; i > 0; i--)
                        if (gpu_is_nvidia(p->manager->gpus[i - 1]))
                                (void) manager_remove_gpu(p->manager, p->manager->gpus[i - 1]->id);
        return nvidia_arm_health(p);
}
