/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * source-intel.c — the Intel GPU source (see source-intel.h).
 */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/cdi-intel.h"
#include "daemons/probe/labels-intel.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/probe-dbus.h"
#include "daemons/probe/source-intel.h"
#include "daemons/probe/udev-scan.h"

typedef struct IntelSource {
        uint64_t memory_override;       /* GPU_MEMORY_OVERRIDE */
        uint64_t memory_reserved;       /* GPU_MEMORY_RESERVED */
        unsigned pci_grouping_level;    /* GPU_PCI_GROUPING_LEVEL */

        /* What check() accepted, taken by configure(). */
        uint64_t checked_override, checked_reserved;

        /* Said once: GPUs whose memory is below GPU_MEMORY_RESERVED (ids, until the
         * reserve changes), DRM cards skipped as not Intel (their lines). */
        char **reserve_warned;
        char **skipped_said;
} IntelSource;

/* Most entries each "said once" list keeps. */
#define INTEL_SAID_MAX 1024

static inline void udev_device_unrefp(struct udev_device **d) {
        if (*d)
                udev_device_unref(*d);
}

static int intel_new(Manager *m, void **ret) {
        IntelSource *s = calloc(1, sizeof(IntelSource));

        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

static void intel_free(Manager *m, void *data) {
        IntelSource *s = data;

        if (s) {
                strv_free(s->reserve_warned);
                strv_free(s->skipped_said);
        }
        free(s);
}

/* Adds key to a "said once" list; returns 1 if it was not there (say it now). */
static int said_once(char ***l, const char *key) {
        int r;

        if (strv_contains(*l, key))
                return 0;
        if (strv_length(*l) >= INTEL_SAID_MAX) {
                strv_free(*l);
                *l = NULL;
        }
        r = strv_extend(l, key);
        return r < 0 ? r : 1;
}

static void log_skipped(IntelSource *s, const char *line) {
        if (said_once(&s->skipped_said, line) > 0)
                log_info("%s", line);
}

static int intel_check(Manager *m, void *data, const Config *c, const char **ret_key) {
        IntelSource *s = data;
        uint64_t override = 0, reserved = 0;

        if (c->intel_memory_override && gpu_parse_memory_env(c->intel_memory_override, &override) < 0) {
                *ret_key = "intel.memoryOverride (GPU_MEMORY_OVERRIDE): expected a byte count";
                return -EINVAL;
        }
        if (c->intel_memory_reserved && gpu_parse_memory_env(c->intel_memory_reserved, &reserved) < 0) {
                *ret_key = "intel.memoryReserved (GPU_MEMORY_RESERVED): expected a byte count";
                return -EINVAL;
        }
        s->checked_override = override;
        s->checked_reserved = reserved;
        return 0;
}

static int intel_configure(Manager *m, void *data, const Config *c) {
        IntelSource *s = data;

        if (s->memory_reserved != s->checked_reserved)
                s->reserve_warned = strv_free(s->reserve_warned);
        s->memory_override = s->checked_override;
        s->memory_reserved = s->checked_reserved;
        s->pci_grouping_level = MIN(c->intel_pci_grouping_level, (uint32_t) LABELS_INTEL_PCI_LEVEL_MAX);
        return 0;
}

static IntelSource *intel_source(Manager *m) {
        return manager_source_data(m, &gpu_source_intel);
}

/* A GPU read from sysfs, with the memory policy applied, into the manager's table. */
static int intel_upsert(Manager *m, Gpu *g) {
        IntelSource *s = intel_source(m);

        /* The Intel labeler turns such a GPU's memory into 0 without a word; say it. */
        if (g->memory_known && s->memory_reserved > g->memory_bytes &&
            said_once(&s->reserve_warned, g->id) > 0)
                log_warning("GPU %s: GPU_MEMORY_RESERVED (intel.memoryReserved) %" PRIu64 " bytes is more than "
                            "its memory of %" PRIu64 " bytes; its memory counts as 0 in gpu.intel.com/memory.max.",
                            g->id, s->memory_reserved, g->memory_bytes);
        gpu_apply_memory_policy(g, s->memory_override, s->memory_reserved);
        return manager_upsert_gpu(m, g);
}

int manager_recheck_pf(Manager *m, const char *pf_address) {
        _cleanup_(udev_device_unrefp) struct udev_device *pci = NULL;
        Gpu *g = NULL, *old;
        int r;

        if (!m->udev || !gpu_pci_address_is_valid(pf_address))
                return 0;
        pci = udev_device_new_from_subsystem_sysname(m->udev, "pci", pf_address);
        if (!pci)
                return 0;
        r = udev_scan_read_gpu(m->udev, pci, &g);
        if (r < 0)
                return r;
        if (r > 0)
                /* VFs disabled: the PF is a GPU (again). */
                return intel_upsert(m, g);

        /* VFs enabled on a PF we serve: it stays with the host from now on. */
        old = manager_find_gpu(m, pf_address);
        if (!old || !streq(old->health, GPU_HEALTHY))
                return 0;
        r = manager_set_gpu_health(m, old, GPU_UNHEALTHY, GPU_REASON_SRIOV_PF);
        if (r <= 0)
                return r;
        log_struct(LOG_NOTICE, KGPU_MESSAGE_GPU_HEALTH,
                   "GPU %s has SR-IOV VFs enabled now, no longer serving it (its VFs are served).", old->id);
        manager_notify_status(m);
        manager_schedule_outputs(m);
        return 1;
}

static int intel_device_removed(Manager *m, const char *syspath) {
        int r;

        r = manager_mark_removed(m, syspath);
        /* A VF going away (VFs being disabled): its PF may be a GPU again. */
        for (size_t i = 0; r > 0 && i < m->n_gpus; i++)
                if ((streq(m->gpus[i]->card_syspath, syspath) ||
                     streq(m->gpus[i]->render_syspath, syspath)) &&
                    !isempty(m->gpus[i]->physical_function)) {
                        _cleanup_free_ char *pf = strdup(m->gpus[i]->physical_function);

                        if (pf)
                                (void) manager_recheck_pf(m, pf);
                        break;
                }
        return r;
}

static int intel_device_event(Manager *m, void *data, struct udev_device *d) {
        _cleanup_(udev_device_unrefp) struct udev_device *pci = NULL;
        const char *action = udev_device_get_action(d);
        Gpu *g;
        int r;

        if (gpu_node_kind_from_sysname(udev_device_get_sysname(d)) == GPU_NODE_NONE)
                return 0;

        if (streq(action, "remove"))
                return intel_device_removed(m, udev_device_get_syspath(d));

        if (!streq(action, "add") && !streq(action, "change") && !streq(action, "bind") &&
            !streq(action, "move"))
                return 0;

        if (streq(action, "add")) {
                _cleanup_free_ char *line = NULL;

                if (udev_scan_describe_skipped(d, &line) > 0)
                        log_skipped(data, line);
        }
        pci = udev_scan_pci_parent(d);
        if (!pci)
                return 0;
        r = udev_scan_read_gpu(m->udev, pci, &g);
        if (r <= 0)
                return r;
        if (!isempty(g->physical_function)) {
                _cleanup_free_ char *pf = strdup(g->physical_function);

                r = intel_upsert(m, g);
                /* A VF appeared: its PF has VFs enabled and is no GPU to serve any more. */
                if (r >= 0 && pf)
                        (void) manager_recheck_pf(m, pf);
                return r;
        }
        return intel_upsert(m, g);
}

static int intel_rescan(Manager *m, void *data) {
        _cleanup_strv_free_ char **skipped = NULL;
        Gpu **found = NULL;
        int r, n;

        n = udev_scan_enumerate_full(m->udev, &found, &skipped);
        if (n < 0)
                return n;
        /* So that an operator who sees "0 GPUs" knows why: once per card. */
        for (char **l = skipped; l && *l; l++)
                log_skipped(data, *l);

        /* Intel GPUs we know that are gone now are kept, unhealthy. */
        for (size_t i = 0; i < m->n_gpus; i++) {
                const GpuSource *owner = gpu_source_find(m->gpus[i]->vendor);
                bool present = owner && owner != &gpu_source_intel;     /* another source's */

                for (Gpu **f = found; *f; f++)
                        if (streq((*f)->id, m->gpus[i]->id)) {
                                present = true;
                                break;
                        }
                if (!present)
                        (void) manager_mark_gpu_removed(m, m->gpus[i]);
        }

        r = 0;
        for (Gpu **f = found; *f; f++) {
                int k = intel_upsert(m, TAKE_PTR(*f));

                if (k < 0 && r == 0)
                        r = k;
        }
        free(found);
        return r;
}

static int intel_labels(Manager *m, void *data, Gpu * const *gpus, size_t n, char ***ret) {
        _cleanup_free_ LabelsIntelPci *pci = NULL;
        IntelSource *s = data;
        int n_pci = 0;

        /* NFD counts PCI functions, not served GPUs: read them as they are now. */
        if (m->udev) {
                n_pci = udev_scan_pci_display_functions(m->udev, &pci);
                if (n_pci < 0) {
                        log_debug_errno(n_pci, "Cannot list the Intel PCI display functions, ignoring: %m");
                        n_pci = 0;
                }
        }
        return labels_intel_build(gpus, n, pci, (size_t) n_pci, s->pci_grouping_level, ret);
}

static int intel_cdi_write(Manager *m, void *data, const char *directory, Gpu * const *gpus, size_t n) {
        return cdi_intel_write(directory, gpus, n);
}

const GpuSource gpu_source_intel = {
        .name = "Intel",
        .vendor = "intel",
        .label_prefix = LABELS_INTEL_PREFIX,
        .cdi_file = CDI_INTEL_FILE,
        .new = intel_new,
        .free = intel_free,
        .check = intel_check,
        .configure = intel_configure,
        .rescan = intel_rescan,
        .device_event = intel_device_event,
        .labels = intel_labels,
        .cdi_write = intel_cdi_write,
};
