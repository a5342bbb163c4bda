/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * udev-scan.c — Intel GPU discovery with libudev (see udev-scan.h).
 *
 * Ownership: udev references are dropped before returning; Gpu objects go to the caller.
 */

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/udev-scan.h"

static inline void udev_enumerate_unrefp(struct udev_enumerate **e) {
        if (*e)
                udev_enumerate_unref(*e);
}
static inline void udev_device_unrefp(struct udev_device **d) {
        if (*d)
                udev_device_unref(*d);
}
static inline void closedirp(DIR **d) {
        if (*d)
                closedir(*d);
}

#define INTEL_VENDOR_ID 0x8086

static int attr_read(int dir_fd, const char *name, char **ret) {
        char *v = NULL;
        size_t n;
        int r;

        r = read_one_line_file_at(dir_fd, name, GPU_SYSFS_VALUE_MAX, &v);
        if (r < 0)
                return r;
        n = strlen(v);
        while (n > 0 && isspace((unsigned char) v[n - 1]))
                v[--n] = 0;
        *ret = v;
        return 0;
}

static int dir_open(const char *path) {
        int fd = open(path, O_PATH|O_DIRECTORY|O_CLOEXEC);

        return fd < 0 ? negative_errno() : fd;
}

static unsigned count_entries(int dir_fd, const char *subdir, const char *prefix, size_t max_digits) {
        _cleanup_(closedirp) DIR *d = NULL;
        unsigned n = 0;
        int fd;

        fd = openat(dir_fd, subdir, O_RDONLY|O_DIRECTORY|O_CLOEXEC);
        if (fd < 0)
                return 0;
        d = fdopendir(fd);
        if (!d) {
                safe_close(fd);
                return 0;
        }
        for (struct dirent *de; (de = readdir(d)) && n < GPU_TILES_MAX; ) {
                const char *p = startswith(de->d_name, prefix);
                size_t k;

                if (!p)
                        continue;
                for (k = 0; p[k] && isdigit((unsigned char) p[k]); k++)
                        ;
                if (k == 0 || p[k] != 0 || k > max_digits)
                        continue;
                n++;
        }
        return n;
}

bool gpu_driver_is_intel(const char *driver) {
        return streq(driver, "i915") || streq(driver, "xe");
}

uint32_t udev_scan_count_tiles(int card_dir_fd) {
        unsigned n;

        /* i915: card/gt/gt<N>; xe: card/device/tile<N> (one digit, as other tools count). */
        n = count_entries(card_dir_fd, "gt", "gt", 3) + count_entries(card_dir_fd, "device", "tile", 1);
        return (uint32_t) MIN(MAX(n, 1u), (unsigned) GPU_TILES_MAX);
}

struct udev_device *udev_scan_pci_parent(struct udev_device *drm) {
        struct udev_device *p;

        /* The parent is owned by the child; hand out our own reference. */
        p = udev_device_get_parent_with_subsystem_devtype(drm, "pci", NULL);
        return p ? udev_device_ref(p) : NULL;
}

static bool by_path_link_is_valid(const char *l) {
        const char *p = startswith(l, UDEV_SCAN_BY_PATH_DIR);

        if (!p || isempty(p) || strlen(l) > 255)
                return false;
        for (; *p; p++)
                if (!isalnum((unsigned char) *p) && !strchr(":.-_", *p))
                        return false;
        return true;
}

/* udev's /dev/dri/by-path links of one DRM node. libudev lists devlinks from the udev
 * database; the DEVLINKS property carries the same names (and is all an umockdev
 * testbed has), so both are read, duplicates dropped. */
static int collect_by_path(struct udev_device *d, char ***l) {
        _cleanup_free_ char *copy = NULL;
        struct udev_list_entry *i;
        const char *prop;
        char *state = NULL;
        int r;

        udev_list_entry_foreach(i, udev_device_get_devlinks_list_entry(d)) {
                const char *name = udev_list_entry_get_name(i);

                if (!name || !by_path_link_is_valid(name) || strv_contains(*l, name))
                        continue;
                if (strv_length(*l) >= UDEV_SCAN_BY_PATH_MAX)
                        return 0;
                r = strv_extend(l, name);
                if (r < 0)
                        return r;
        }

        prop = udev_device_get_property_value(d, "DEVLINKS");
        if (isempty(prop) || strlen(prop) > 4096)
                return 0;
        copy = strdup(prop);
        if (!copy)
                return -ENOMEM;
        for (char *w = strtok_r(copy, " ", &state); w; w = strtok_r(NULL, " ", &state)) {
                if (!by_path_link_is_valid(w) || strv_contains(*l, w))
                        continue;
                if (strv_length(*l) >= UDEV_SCAN_BY_PATH_MAX)
                        return 0;
                r = strv_extend(l, w);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int read_drm_children(struct udev *udev, struct udev_device *pci, Gpu *g) {
        _cleanup_(udev_enumerate_unrefp) struct udev_enumerate *e = NULL;
        _cleanup_strv_free_ char **card_links = NULL, **render_links = NULL;
        struct udev_list_entry *i;
        int r;

        e = udev_enumerate_new(udev);
        if (!e)
                return -ENOMEM;
        r = udev_enumerate_add_match_subsystem(e, "drm");
        if (r < 0)
                return r;
        r = udev_enumerate_add_match_parent(e, pci);
        if (r < 0)
                return r;
        r = udev_enumerate_scan_devices(e);
        if (r < 0)
                return r;

        udev_list_entry_foreach(i, udev_enumerate_get_list_entry(e)) {
                _cleanup_(udev_device_unrefp) struct udev_device *d = NULL;
                const char *syspath = udev_list_entry_get_name(i), *node, *devtype;
                GpuNodeKind kind;
                char **node_p, **syspath_p;

                d = udev_device_new_from_syspath(udev, syspath);
                if (!d)
                        continue;
                kind = gpu_node_kind_from_sysname(udev_device_get_sysname(d));
                devtype = udev_device_get_devtype(d);
                if (kind == GPU_NODE_NONE || (devtype && !streq(devtype, "drm_minor")))
                        continue;
                node = udev_device_get_devnode(d);
                if (isempty(node)) {
                        log_debug("%s: no device node, ignoring.", syspath);
                        continue;
                }
                if (strlen(node) > 255 || node[0] != '/') {
                        log_debug("%s: odd device node, ignoring.", syspath);
                        continue;
                }

                node_p = kind == GPU_NODE_CARD ? &g->card_node : &g->render_node;
                syspath_p = kind == GPU_NODE_CARD ? &g->card_syspath : &g->render_syspath;
                /* One of each per GPU; the first in enumeration (sorted) order wins. */
                if (!isempty(*node_p))
                        continue;
                r = free_and_strdup(node_p, node);
                if (r < 0)
                        return r;
                r = free_and_strdup(syspath_p, syspath);
                if (r < 0)
                        return r;
                r = collect_by_path(d, kind == GPU_NODE_CARD ? &card_links : &render_links);
                if (r < 0)
                        return r;
        }

        /* Card links first, then render links. */
        for (char **l = card_links; l && *l; l++)
                if ((r = strv_extend(&g->by_path_nodes, *l)) < 0)
                        return r;
        for (char **l = render_links; l && *l; l++)
                if ((r = strv_extend(&g->by_path_nodes, *l)) < 0)
                        return r;
        return 0;
}

static bool digits_only(const char *s, size_t max) {
        size_t n = strlen(s);

        return n > 0 && n <= max && strspn(s, "0123456789") == n;
}

/* The GPU's MEI nodes, as the Intel plugin finds them for its monitoring resource: the
 * mei<N> devices below an auxiliary device "<driver>.mei-<name>.<n>" that is a direct
 * child of the PCI device (i915.mei-gsc.768/mei/mei0), with udev's device node. */
static int read_mei_children(struct udev *udev, struct udev_device *pci, Gpu *g) {
        _cleanup_(udev_enumerate_unrefp) struct udev_enumerate *e = NULL;
        const char *pci_syspath = udev_device_get_syspath(pci);
        struct udev_list_entry *i;
        int r;

        e = udev_enumerate_new(udev);
        if (!e)
                return -ENOMEM;
        if ((r = udev_enumerate_add_match_subsystem(e, "mei")) < 0 ||
            (r = udev_enumerate_add_match_parent(e, pci)) < 0 ||
            (r = udev_enumerate_scan_devices(e)) < 0)
                return r;

        udev_list_entry_foreach(i, udev_enumerate_get_list_entry(e)) {
                _cleanup_(udev_device_unrefp) struct udev_device *d = NULL;
                struct udev_device *aux, *above;
                const char *sysname, *node, *n;

                d = udev_device_new_from_syspath(udev, udev_list_entry_get_name(i));
                if (!d)
                        continue;
                sysname = udev_device_get_sysname(d);
                if (!sysname || !(n = startswith(sysname, "mei")) || !digits_only(n, 9))
                        continue;
                /* d's parents are owned by d. */
                aux = udev_device_get_parent(d);
                above = aux ? udev_device_get_parent(aux) : NULL;
                if (!aux || !above || !strstr(udev_device_get_sysname(aux) ?: "", ".mei-") ||
                    !streq_ptr(udev_device_get_syspath(above), pci_syspath))
                        continue;
                node = udev_device_get_devnode(d);
                if (isempty(node) || !(n = startswith(node, "/dev/mei")) || !digits_only(n, 9)) {
                        log_debug("%s: MEI device without a /dev/mei<N> node, ignoring.",
                                  udev_list_entry_get_name(i));
                        continue;
                }
                if (strv_contains(g->mei_nodes, node))
                        continue;
                if (strv_length(g->mei_nodes) >= UDEV_SCAN_MEI_MAX)
                        break;
                r = strv_extend(&g->mei_nodes, node);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* xe: the sum of <pci>/tile<N>/physical_vram_size_bytes. Returns 1 and the sum if at
 * least one tile's value was valid, 0 if none was. */
static int read_xe_vram(int pci_fd, uint64_t *ret) {
        uint64_t total = 0;
        bool found = false;

        for (unsigned t = 0; t < 10; t++) {
                _cleanup_free_ char *v = NULL;
                char name[64];
                uint64_t b;

                snprintf(name, sizeof(name), "tile%u/physical_vram_size_bytes", t);
                if (attr_read(pci_fd, name, &v) < 0)
                        continue;
                if (gpu_parse_memory_bytes(v, &b) < 0 || total > UINT64_MAX - b)
                        continue;
                total += b;
                found = true;
        }
        if (!found)
                return 0;
        *ret = total;
        return 1;
}

/* The PF's PCI address from the VF's physfn link, "" when there is none or it is odd. */
static int read_physfn(int pci_fd, Gpu *g) {
        char buf[256];
        const char *base;
        ssize_t n;

        n = readlinkat(pci_fd, "physfn", buf, sizeof(buf) - 1);
        if (n < 0 || n >= (ssize_t) sizeof(buf) - 1)
                return 0;
        buf[n] = 0;
        base = strrchr(buf, '/');
        base = base ? base + 1 : buf;
        if (!gpu_pci_address_is_valid(base))
                return 0;
        return free_and_strdup(&g->physical_function, base);
}

/* Device id, class and NUMA node; garbage gives the safe default. */
static void read_pci_attrs(int pci_fd, const char *address, Gpu *g) {
        _cleanup_free_ char *device = NULL, *class = NULL, *numa = NULL;
        int r;

        r = attr_read(pci_fd, "device", &device);
        if (r < 0 || gpu_parse_pci_id(device, &g->device_id) < 0) {
                log_debug("%s: unreadable or invalid device id, using 0.", address);
                g->device_id = 0;
        }

        r = attr_read(pci_fd, "class", &class);
        if (r < 0 || gpu_parse_pci_class(class, &g->pci_class) < 0) {
                log_debug("%s: unreadable or invalid class, using 0.", address);
                g->pci_class = 0;
        }

        r = attr_read(pci_fd, "numa_node", &numa);
        if (r < 0 || gpu_parse_numa_node(numa, &g->numa_node) < 0) {
                if (r != -ENOENT)
                        log_debug("%s: unreadable or invalid numa_node, using -1.", address);
                g->numa_node = -1;
        }
}

/* Tiles and local memory: i915 lmem_total_bytes x tiles, xe its VRAM sizes. */
static void read_tiles_and_memory(int pci_fd, const char *address, const char *driver, Gpu *g) {
        _cleanup_close_ int card_fd = -EBADF;
        _cleanup_free_ char *lmem = NULL;
        uint64_t per_tile = 0;

        if (g->card_syspath) {
                card_fd = dir_open(g->card_syspath);
                if (card_fd >= 0) {
                        g->tiles = udev_scan_count_tiles(card_fd);
                        if (attr_read(card_fd, "lmem_total_bytes", &lmem) >= 0) {
                                if (gpu_parse_memory_bytes(lmem, &per_tile) < 0) {
                                        log_debug("%s: invalid lmem_total_bytes, using 0.", address);
                                        per_tile = 0;
                                } else
                                        g->memory_known = true;
                        }
                }
        }
        g->memory_bytes = gpu_memory_total(per_tile, g->tiles);
        if (streq(driver, "xe") && read_xe_vram(pci_fd, &g->memory_bytes) > 0)
                g->memory_known = true;
        else if (g->memory_known && g->memory_bytes == 0 && per_tile > 0)
                g->memory_known = false;        /* overflow */
}

int udev_scan_read_gpu(struct udev *udev, struct udev_device *pci, Gpu **ret) {
        _cleanup_(gpu_freep) Gpu *g = NULL;
        _cleanup_close_ int pci_fd = -EBADF;
        _cleanup_free_ char *vendor = NULL, *numvfs = NULL;
        uint32_t n_vfs = 0;
        const char *address, *driver, *syspath;
        uint16_t vendor_id;
        int r;

        address = udev_device_get_sysname(pci);
        syspath = udev_device_get_syspath(pci);
        if (!gpu_pci_address_is_valid(address) || !syspath)
                return 0;
        driver = udev_device_get_driver(pci);
        if (!gpu_driver_is_intel(driver))
                return 0;

        pci_fd = dir_open(syspath);
        if (pci_fd < 0)
                return log_debug_errno(pci_fd, "%s: cannot open sysfs directory: %m", address);

        r = attr_read(pci_fd, "vendor", &vendor);
        if (r < 0 || gpu_parse_pci_id(vendor, &vendor_id) < 0 || vendor_id != INTEL_VENDOR_ID) {
                log_debug("%s: vendor is not Intel, ignoring.", address);
                return 0;
        }

        /* A PF with VFs enabled stays with the host: only its VFs are served. */
        r = attr_read(pci_fd, "sriov_numvfs", &numvfs);
        if (r >= 0 && safe_atou32(numvfs, &n_vfs) >= 0 && n_vfs > 0) {
                log_debug("%s: SR-IOV PF with %u VFs enabled, leaving it out.", address, n_vfs);
                return 0;
        }

        r = gpu_new(address, &g);
        if (r < 0)
                return r;
        g->vendor_id = vendor_id;
        if ((r = free_and_strdup(&g->vendor, "intel")) < 0 ||
            (r = free_and_strdup(&g->driver, driver)) < 0 ||
            (r = free_and_strdup(&g->pci_address, address)) < 0)
                return r;

        read_pci_attrs(pci_fd, address, g);
        r = read_physfn(pci_fd, g);
        if (r < 0)
                return r;

        r = read_drm_children(udev, pci, g);
        if (r < 0)
                return r;
        if (isempty(g->card_node) && isempty(g->render_node)) {
                log_debug("%s: no DRM nodes, ignoring.", address);
                return 0;
        }

        read_tiles_and_memory(pci_fd, address, driver, g);

        r = read_mei_children(udev, pci, g);
        if (r < 0)
                return r;

        r = gpu_update_device_nodes(g);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(g);
        return 1;
}

Gpu **udev_scan_gpus_free(Gpu **l) {
        if (!l)
                return NULL;
        for (Gpu **i = l; *i; i++)
                gpu_free(*i);
        return mfree(l);
}

static inline void udev_scan_gpus_freep(Gpu ***l) {
        udev_scan_gpus_free(*l);
}

static int gpu_cmp(const void *a, const void *b) {
        return strcmp((*(Gpu * const *) a)->id, (*(Gpu * const *) b)->id);
}

int udev_scan_describe_skipped(struct udev_device *drm, char **ret) {
        _cleanup_(udev_device_unrefp) struct udev_device *pci = NULL;
        _cleanup_close_ int pci_fd = -EBADF;
        _cleanup_free_ char *vendor = NULL;
        const char *sysname = udev_device_get_sysname(drm), *driver, *syspath;
        uint16_t vendor_id = 0;
        int r;

        if (gpu_node_kind_from_sysname(sysname) != GPU_NODE_CARD)
                return 0;
        pci = udev_scan_pci_parent(drm);
        if (!pci)
                r = asprintf(ret, "%s (no PCI device): not an Intel GPU, skipped.", sysname);
        else {
                driver = udev_device_get_driver(pci);
                syspath = udev_device_get_syspath(pci);
                pci_fd = syspath ? dir_open(syspath) : -EBADF;
                if (pci_fd < 0 || attr_read(pci_fd, "vendor", &vendor) < 0 ||
                    gpu_parse_pci_id(vendor, &vendor_id) < 0)
                        vendor_id = 0;
                if (vendor_id == INTEL_VENDOR_ID && gpu_driver_is_intel(driver))
                        return 0;
                r = asprintf(ret, "%s (%s, vendor 0x%04x, driver %s): not an Intel GPU driven by i915 or xe, "
                             "skipped%s.", sysname, udev_device_get_sysname(pci) ?: "?", (unsigned) vendor_id,
                             isempty(driver) ? "none" : driver,
                             vendor_id == 0x10de ? " (NVIDIA GPUs are read with nvidia-smi)" : "");
        }
        if (r < 0) {
                *ret = NULL;
                return -ENOMEM;
        }
        return 1;
}

static int pci_function_cmp(const void *a, const void *b) {
        return strcmp(((const LabelsIntelPci *) a)->address, ((const LabelsIntelPci *) b)->address);
}

int udev_scan_pci_display_functions(struct udev *udev, LabelsIntelPci **ret) {
        _cleanup_(udev_enumerate_unrefp) struct udev_enumerate *e = NULL;
        _cleanup_free_ LabelsIntelPci *l = NULL;
        struct udev_list_entry *i;
        size_t n = 0;
        int r;

        e = udev_enumerate_new(udev);
        if (!e)
                return -ENOMEM;
        if ((r = udev_enumerate_add_match_subsystem(e, "pci")) < 0 ||
            (r = udev_enumerate_scan_devices(e)) < 0)
                return r;
        l = calloc(UDEV_SCAN_GPUS_MAX, sizeof(LabelsIntelPci));
        if (!l)
                return -ENOMEM;

        udev_list_entry_foreach(i, udev_enumerate_get_list_entry(e)) {
                _cleanup_close_ int fd = -EBADF;
                _cleanup_free_ char *vendor = NULL, *class = NULL, *device = NULL;
                const char *syspath = udev_list_entry_get_name(i), *address;
                uint16_t vendor_id = 0, device_id = 0;
                uint32_t cls = 0;

                address = strrchr(syspath, '/');
                address = address ? address + 1 : syspath;
                if (!gpu_pci_address_is_valid(address) || strlen(address) >= sizeof(l[0].address))
                        continue;
                fd = dir_open(syspath);
                if (fd < 0 ||
                    attr_read(fd, "vendor", &vendor) < 0 || gpu_parse_pci_id(vendor, &vendor_id) < 0 ||
                    vendor_id != INTEL_VENDOR_ID ||
                    attr_read(fd, "class", &class) < 0 || gpu_parse_pci_class(class, &cls) < 0 ||
                    ((cls >> 8) != 0x0300 && (cls >> 8) != 0x0380) ||
                    attr_read(fd, "device", &device) < 0 || gpu_parse_pci_id(device, &device_id) < 0)
                        continue;
                if (n >= UDEV_SCAN_GPUS_MAX) {
                        log_debug("More than %d Intel display functions, ignoring the rest.", UDEV_SCAN_GPUS_MAX);
                        break;
                }
                strcpy(l[n].address, address);
                l[n].pci_class = cls;
                l[n].device_id = device_id;
                n++;
        }
        if (n > 1)
                qsort(l, n, sizeof(LabelsIntelPci), pci_function_cmp);
        *ret = TAKE_PTR(l);
        return (int) n;
}

int udev_scan_enumerate(struct udev *udev, Gpu ***ret) {
        return udev_scan_enumerate_full(udev, ret, NULL);
}

int udev_scan_enumerate_full(struct udev *udev, Gpu ***ret, char ***ret_skipped) {
        _cleanup_(udev_enumerate_unrefp) struct udev_enumerate *e = NULL;
        _cleanup_(udev_scan_gpus_freep) Gpu **gpus = NULL;
        _cleanup_strv_free_ char **parents = NULL, **skipped = NULL;
        struct udev_list_entry *i;
        size_t n = 0;
        int r;

        e = udev_enumerate_new(udev);
        if (!e)
                return -ENOMEM;
        if ((r = udev_enumerate_add_match_subsystem(e, "drm")) < 0 ||
            (r = udev_enumerate_add_match_sysname(e, "card[0-9]*")) < 0 ||
            (r = udev_enumerate_add_match_sysname(e, "renderD[0-9]*")) < 0)
                return r;
        r = udev_enumerate_scan_devices(e);
        if (r < 0)
                return r;

        /* Group the DRM minors by PCI parent. */
        udev_list_entry_foreach(i, udev_enumerate_get_list_entry(e)) {
                _cleanup_(udev_device_unrefp) struct udev_device *d = NULL, *pci = NULL;
                const char *devtype;

                d = udev_device_new_from_syspath(udev, udev_list_entry_get_name(i));
                if (!d)
                        continue;
                if (gpu_node_kind_from_sysname(udev_device_get_sysname(d)) == GPU_NODE_NONE)
                        continue;
                devtype = udev_device_get_devtype(d);
                if (devtype && !streq(devtype, "drm_minor"))
                        continue;
                if (ret_skipped) {
                        char *line = NULL;

                        r = udev_scan_describe_skipped(d, &line);
                        if (r < 0)
                                return r;
                        if (r > 0 && (r = strv_consume(&skipped, line)) < 0)
                                return r;
                }
                pci = udev_scan_pci_parent(d);
                if (!pci)
                        continue;
                if (strv_contains(parents, udev_device_get_syspath(pci)))
                        continue;
                if (strv_length(parents) >= UDEV_SCAN_GPUS_MAX) {
                        log_debug("More than %d GPU candidates, ignoring the rest.", UDEV_SCAN_GPUS_MAX);
                        break;
                }
                r = strv_extend(&parents, udev_device_get_syspath(pci));
                if (r < 0)
                        return r;
        }

        gpus = calloc(strv_length(parents) + 1, sizeof(Gpu *));
        if (!gpus)
                return -ENOMEM;

        for (char **p = parents; p && *p; p++) {
                _cleanup_(udev_device_unrefp) struct udev_device *pci = NULL;
                Gpu *g;

                pci = udev_device_new_from_syspath(udev, *p);
                if (!pci)
                        continue;
                r = udev_scan_read_gpu(udev, pci, &g);
                if (r < 0) {
                        log_debug_errno(r, "%s: failed to read GPU, ignoring: %m", *p);
                        continue;
                }
                if (r > 0)
                        gpus[n++] = g;
        }

        if (n > 1)
                qsort(gpus, n, sizeof(Gpu *), gpu_cmp);

        *ret = TAKE_PTR(gpus);
        if (ret_skipped)
                *ret_skipped = TAKE_PTR(skipped);
        return (int) n;
}
