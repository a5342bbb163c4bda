/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * source-nvidia.c — the NVIDIA GPU source (see source-nvidia.h).
 */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "common/bus-names.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/cdi-nvidia.h"
#include "daemons/probe/labels-nvidia.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/mps.h"
#include "daemons/probe/nvidia.h"
#include "daemons/probe/nvidia-driver-files.h"
#include "daemons/probe/probe-dbus.h"
#include "daemons/probe/source-nvidia.h"

static int nvidia_new(Manager *m, void **ret) {
        NvidiaProbe *p = NULL;
        int r;

        r = nvidia_probe_new(m, &p);
        if (r < 0)
                return r;
        m->nvidia = p;
        *ret = p;
        return 0;
}

static void nvidia_free(Manager *m, void *data) {
        if (m->nvidia == data)
                m->nvidia = NULL;
        nvidia_probe_free(data);
}

static int nvidia_check(Manager *m, void *data, const Config *c, const char **ret_key) {
        int r;

        /* m->config_error: cleared by manager_configure(), holds the text *ret_key names. */
        r = nvidia_tools_check(c, &m->config_error);
        if (r == -EPERM) {
                *ret_key = m->config_error;
                return -EINVAL;
        }
        return r;
}

static int nvidia_configure(Manager *m, void *data, const Config *c) {
        Config *lc = NULL;
        int r;

        r = labels_nvidia_config_copy(c, &lc);
        if (r < 0)
                return r;
        nvidia_probe_set_config(data, lc);
        r = mps_configure(&m->mps, m->event, c, probe_dbus_mps_state_changed, m);
        if (r < 0)
                return r;
        return nvidia_probe_configure(data, c);
}

static int nvidia_rescan(Manager *m, void *data) {
        (void) nvidia_probe_inventory(data, true);
        return 0;
}

static int nvidia_wait_initial(Manager *m, void *data) {
        return nvidia_probe_wait_initial(data);
}

static int nvidia_reply_when_done(Manager *m, void *data, sd_bus_message *message) {
        return nvidia_probe_reply_when_done(data, message);
}

static void nvidia_log_found(const Gpu *g) {
        log_struct(LOG_INFO, KGPU_MESSAGE_GPU_ADDED,
                   "Found NVIDIA GPU %s (index %d, %s, %s, %" PRIu64 " bytes, MIG %s, %zu MIG devices, "
                   "NUMA node %d).", g->id, g->index, g->product, g->pci_address, g->memory_bytes,
                   isempty(g->mig_mode) ? "not capable" : g->mig_mode, g->n_mig_devices, g->numa_node);
}

static int nvidia_labels(Manager *m, void *data, Gpu * const *gpus, size_t n, char ***ret) {
        return labels_nvidia_from_gpus(gpus, n, nvidia_probe_config(data), ret);
}

/* The hook binary the spec names: KGPU_CDI_HOOK (tests), else the installed one. */
static const char *nvidia_cdi_hook(void) {
        const char *e = getenv("KGPU_CDI_HOOK");

        return !isempty(e) && e[0] == '/' ? e : KGPU_CDI_HOOK_DEFAULT;
}

static int nvidia_cdi_write(Manager *m, void *data, const char *directory, Gpu * const *gpus, size_t n) {
        _cleanup_(nvidia_driver_files_freep) NvidiaDriverFiles *files = NULL;
        const char *version = cdi_nvidia_driver_version(gpus, n), *root = nvidia_probe_driver_root(data);
        CdiNvidiaOptions o = { .dev_root = nvidia_probe_dev_root(data), .hook = nvidia_cdi_hook() };
        int r;

        if (version) {
                r = nvidia_driver_files_find(root, version, &files);
                if (r == -ENOMEM)
                        return r;
                if (r < 0)
                        /* Device nodes only: a container still gets its GPU, not the driver. */
                        log_warning_errno(r, "Failed to find the files of NVIDIA driver %s under %s, "
                                          "the CDI spec names the device nodes only: %m", version, root);
                else
                        log_debug("NVIDIA driver %s under %s: %zu files for the CDI spec.", version, root,
                                  files->n_mounts);
        }
        o.files = files;
        return cdi_nvidia_write_with(directory, gpus, n, &o);
}

const GpuSource gpu_source_nvidia = {
        .name = "NVIDIA",
        .vendor = "nvidia",
        .label_prefix = LABELS_NVIDIA_PREFIX,
        .cdi_file = CDI_NVIDIA_FILE,
        .mps = true,
        .new = nvidia_new,
        .free = nvidia_free,
        .check = nvidia_check,
        .configure = nvidia_configure,
        .rescan = nvidia_rescan,
        .wait_initial = nvidia_wait_initial,
        .reply_when_done = nvidia_reply_when_done,
        .log_found = nvidia_log_found,
        .labels = nvidia_labels,
        .cdi_write = nvidia_cdi_write,
};
