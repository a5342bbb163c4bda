/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-convert.c — libFuzzer target for kgpu-grpcd's translation between the kubelet's
 * protobuf requests and io.kgpu.Broker1 (daemons/grpc/convert.c), both directions.
 *
 * Contract: input byte 0 picks the case (0xf3..0xf7: case 7, else byte 0 mod 7):
 *   0-2  an AllocateRequest / PreferredAllocationRequest / PreStartContainerRequest
 *        (the rest of the input, as the kubelet would send it) -> Broker1 arguments; a
 *        refusal must come with a reason, an accepted request must seal as a message;
 *   3    a GetDevices reply (fuzz-bus.h recipe) -> ListAndWatchResponse;
 *   4, 5 an Allocate / GetPreferredAllocation reply for N containers (next byte) ->
 *        AllocateResponse / PreferredAllocationResponse;
 *   6    the string helpers (resource names, socket names, ids, bus error names);
 *   7    the gate (gate.h) with a hostile inventory and a hostile answer: a
 *        GetManagedObjects reply of up to 5 objects (path from a table, then up to 15
 *        properties: a name, a type byte indexing gate_types, the value's recipe), read
 *        with probe_gpus_replace(); then a PropertiesChanged a{sv} of the same form
 *        applied to the first object; a resource (byte, gate_resources), a request of 1..3
 *        containers of 0..3 ids each, and an Allocate answer for it (fuzz-bus.h recipe,
 *        gate_words). An accepted answer must hold only what some exported GPU has
 *        (device nodes, by-path links, MPS pipe directories) or what kgpu makes itself
 *        (the NVIDIA control nodes, /dev/null, /dev/shm, /dev/dri/by-path), env names
 *        of the fixed set, kgpu's CDI kinds and the annotation prefix; a refusal must
 *        come with a short printable reason; the inventory must stay within its bounds.
 * Every encoded answer must decode again with protobuf-c into the same number of
 * containers. A crash, a leak or a sanitizer report is a bug.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "common/log.h"
#include "common/resource-name.h"
#include "common/util.h"
#include "daemons/grpc/convert.h"
#include "daemons/grpc/gate.h"
#include "daemons/grpc/probe-gpus.h"
#include "deviceplugin.pb-c.h"
#include "fuzz-bus.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const words[] = {
        "0000:03:00.0", "0000:03:00.0-1", "GPU-3a5c1b7e-0000-0000-0000-000000000000::0",
        "/dev/dri/card0", "/dev/dri/renderD128", "rw", "rwm", "", "gpu.intel.com/i915",
        "NVIDIA_VISIBLE_DEVICES", "cdi.k8s.io/kgpu", "intel.com/gpu=0000:03:00.0", NULL,
};

/* Right shapes first (twice, to weigh them), then wrong ones. */
static const char *const devices_sigs[] = { "a(ssai)", "a(ssai)", "a(sbai)", "a(ssau)", "as", "a(ss)" };
static const char *const allocate_sigs[] = {
        "a(a{ss}a(ssb)a(sss)a{ss}as)", "a(a{ss}a(ssb)a(sss)a{ss}as)",
        "a(a{ss}a(sss)a(sss)a{ss}as)", "a(a{ss}a(ssb)a(sss)a{ss})", "aas", "a(sss)",
};
static const char *const preferred_sigs[] = { "aas", "aas", "as", "a(as)", "aa{ss}" };

#define PICK(a, in) ((a)[fuzz_input_byte(in) % (sizeof (a) / sizeof (a)[0])])

static void request_case(unsigned kind, const uint8_t *p, size_t n) {
        sd_bus_message *m = NULL;
        const char *reason = NULL;
        size_t n_containers = SIZE_MAX;
        int r;

        if (sd_bus_message_new_method_call(fuzz_bus_get(), &m, "io.kgpu.Broker1", "/io/kgpu/Broker1",
                                           "io.kgpu.Broker1", "Fuzz") < 0)
                abort();
        if (sd_bus_message_append(m, "s", "gpu.intel.com/i915") < 0)
                abort();
        switch (kind) {
        case 0:
                r = grpcd_allocate_request_to_bus(p, n, m, &n_containers, NULL, &reason);
                break;
        case 1:
                r = grpcd_preferred_request_to_bus(p, n, m, &n_containers, &reason);
                break;
        default:
                r = grpcd_prestart_request_to_bus(p, n, m, &reason);
                n_containers = 0;
                break;
        }
        if (r < 0) {
                if (!reason || !*reason)
                        abort();
        } else {
                if (n_containers > GRPCD_CONTAINERS_MAX)
                        abort();
                /* What was appended must be a complete, valid body. */
                if (sd_bus_message_seal(m, 1, 0) < 0)
                        abort();
        }
        sd_bus_message_unref(m);
}

static void devices_case(FuzzInput *in) {
        sd_bus_message *m = NULL;
        GrpcdDevice *d = NULL;
        uint8_t *buf = NULL;
        size_t n = 0, len = 0;

        if (fuzz_bus_build(PICK(devices_sigs, in), in, &m) < 0)
                return;
        if (grpcd_devices_from_bus(m, &d, &n) >= 0) {
                if (n > GRPCD_DEVICES_MAX)
                        abort();
                for (size_t i = 0; i < n; i++)
                        if (!grpcd_device_id_valid(d[i].id) || d[i].n_numa_nodes > GRPCD_NUMA_NODES_MAX)
                                abort();
                if (grpcd_list_and_watch_encode(d, n, &buf, &len) >= 0) {
                        V1beta1__ListAndWatchResponse *lw =
                                v1beta1__list_and_watch_response__unpack(NULL, len, buf);
                        if (!lw || lw->n_devices != n)
                                abort();
                        v1beta1__list_and_watch_response__free_unpacked(lw, NULL);
                        free(buf);
                }
                grpcd_devices_free(d, n);
        }
        sd_bus_message_unref(m);
}

static void reply_case(unsigned kind, FuzzInput *in) {
        size_t n_containers = fuzz_input_byte(in) % 5;
        sd_bus_message *m = NULL;
        uint8_t *buf = NULL;
        size_t len = 0;
        int r;

        if (fuzz_bus_build(kind == 4 ? PICK(allocate_sigs, in) : PICK(preferred_sigs, in), in, &m) < 0)
                return;
        if (kind == 4)
                r = grpcd_allocate_reply_from_bus(m, n_containers, &buf, &len);
        else
                r = grpcd_preferred_reply_from_bus(m, n_containers, &buf, &len);
        if (r >= 0) {
                if (kind == 4) {
                        V1beta1__AllocateResponse *a = v1beta1__allocate_response__unpack(NULL, len, buf);
                        if (!a || a->n_container_responses != n_containers)
                                abort();
                        v1beta1__allocate_response__free_unpacked(a, NULL);
                } else {
                        V1beta1__PreferredAllocationResponse *p =
                                v1beta1__preferred_allocation_response__unpack(NULL, len, buf);
                        if (!p || p->n_container_responses != n_containers)
                                abort();
                        v1beta1__preferred_allocation_response__free_unpacked(p, NULL);
                }
                free(buf);
        }
        sd_bus_message_unref(m);
}

static void strings_case(const uint8_t *p, size_t n) {
        char *s = malloc(n + 1), *sock = NULL;

        if (!s)
                abort();
        memcpy(s, p, n);
        s[n] = 0;
        if (resource_socket_name(s, &sock) >= 0) {
                if (!resource_name_valid(s) || strchr(sock, '/') || strlen(sock) > 5 + RESOURCE_NAME_MAX + 5)
                        abort();
                free(sock);
        } else if (resource_name_valid(s))
                abort();
        if (grpcd_device_id_valid(s) && (n == 0 || strlen(s) > GRPCD_ID_MAX || !grpcd_utf8_valid(s, GRPCD_ID_MAX)))
                abort();
        (void) grpcd_utf8_valid(s, n);
        (void) grpcd_status_from_bus_error(s);
        free(s);
}

/* Case 7: names and values of a node's GPU objects and answers, right and hostile. */
static const char *const gate_words[] = {
        /* 0.. property names */
        "Id", "Vendor", "Driver", "Uuid", "Index", "CardNode", "RenderNode", "DeviceNodes",
        "ByPathNodes", "MigDevices", "MpsPipeDirectory", "Health",
        /* 12.. ids */
        "0000:03:00.0", "0000:03:00.0-1", "GPU-aaaa", "GPU-aaaa::0", "MIG-bbbb", "MIG-bbbb::2", "all", "0", "0:1",
        "intel", "nvidia", "i915", "xe",
        /* 25.. paths */
        "/dev/dri/card0", "/dev/dri/renderD128", "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-caps/nvidia-cap12",
        "/dev/dri/by-path/pci-0000:03:00.0-card", "/dev/dri/by-path", "/run/kgpu/mps/GPU-aaaa/pipe",
        "/mps/nvidia.com/gpu/pipe", "/dev/shm", "/dev/null", "/var/run/nvidia-container-devices/GPU-aaaa",
        "/var/run/nvidia-container-devices", "/", "/host", "/dev/sda", "/dev/../etc/shadow", "/dev//dri",
        "/etc/passwd", "dri/card0",
        /* 45.. answer words */
        "rw", "rwm", "r", "NVIDIA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "LD_PRELOAD", "0=1024M", "50", "GPU-aaaa,0",
        "cdi.k8s.io/nvidia-device-plugin_0123456789abcdef", "nvidia.com/gpu=GPU-aaaa", "nvidia.com/gpu=0:1",
        "gpu.intel.com/gpu=0000:03:00.0", "vendor.com/x=y", "",
        NULL,
};

static const char *const gate_types[] = { "s", "s", "as", "as", "i", "a(ussuuast)", "t", "b", "ai", "a(ussuuas)" };

static const char *const gate_paths[] = {
        "/io/kgpu/Probe1/gpu/a", "/io/kgpu/Probe1/gpu/b", "/io/kgpu/Probe1/gpu/c", "/io/kgpu/Probe1/gpu/a",
        "/io/kgpu/Probe1", "/io/kgpu/Probe1/gpu/a/b", "/",
};

static const char *const gate_resources[] = {
        "gpu.intel.com/i915", "gpu.intel.com/i915_monitoring", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb",
        "example.com/gpu",
};

static const char *const gate_envs[] = {
        "NVIDIA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", NULL,
};

#define GATE_PICK(a, in) ((a)[fuzz_input_byte(in) % (sizeof (a) / sizeof (a)[0])])

/* Appends an a{sv} of up to 15 properties, types from gate_types. */
static int gate_append_props(sd_bus_message *m, FuzzInput *in) {
        unsigned n = fuzz_input_byte(in) % 16;
        int r;

        r = sd_bus_message_open_container(m, 'a', "{sv}");
        for (unsigned i = 0; r >= 0 && i < n; i++) {
                const char *name = fuzz_input_string(in, NULL), *t;

                r = sd_bus_message_open_container(m, 'e', "sv");
                if (r >= 0 && sd_bus_message_append_basic(m, 's', name) < 0)
                        r = sd_bus_message_append_basic(m, 's', "");
                t = GATE_PICK(gate_types, in);
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'v', t);
                if (r >= 0)
                        r = fuzz_bus_append(m, t, in);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        return r;
}

static int gate_seal(sd_bus_message *m) {
        static uint64_t cookie = 1;
        int r = sd_bus_message_seal(m, cookie++, 0);

        return r < 0 ? r : sd_bus_message_rewind(m, true);
}

/* A GetManagedObjects reply (a{oa{sa{sv}}}) of up to 5 objects with one Gpu1 each. */
static int gate_build_inventory(FuzzInput *in, sd_bus_message **ret) {
        sd_bus_message *m = NULL;
        unsigned n = fuzz_input_byte(in) % 6;
        int r;

        r = sd_bus_message_new_method_call(fuzz_bus_get(), &m, "io.kgpu.Fuzz", "/", "io.kgpu.Fuzz", "Reply");
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "{oa{sa{sv}}}");
        for (unsigned i = 0; r >= 0 && i < n; i++) {
                r = sd_bus_message_open_container(m, 'e', "oa{sa{sv}}");
                if (r >= 0)
                        r = sd_bus_message_append_basic(m, 'o', GATE_PICK(gate_paths, in));
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'a', "{sa{sv}}");
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'e', "sa{sv}");
                if (r >= 0)
                        r = sd_bus_message_append_basic(m, 's', fuzz_input_byte(in) % 8 ? "io.kgpu.Gpu1" : "io.kgpu.Other1");
                if (r >= 0)
                        r = gate_append_props(m, in);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r >= 0)
                r = gate_seal(m);
        if (r < 0) {
                sd_bus_message_unref(m);
                return r;
        }
        *ret = m;
        return 0;
}

static bool gpu_sane(const ProbeGpu *g) {
        if (!g->path || !g->id || !g->vendor || !g->driver || !g->uuid || !g->card_node || !g->render_node ||
            !g->mps_pipe_directory || !g->device_nodes || !g->by_path_nodes || isempty(g->id) ||
            g->index < -1 || g->index > PROBE_GPUS_INDEX_MAX || g->n_migs > PROBE_GPUS_MIG_MAX ||
            strv_length(g->device_nodes) > PROBE_GPUS_NODES_MAX || strv_length(g->by_path_nodes) > PROBE_GPUS_NODES_MAX ||
            streq(g->mps_pipe_directory, "/") || strstr(g->mps_pipe_directory, "..") ||
            (!isempty(g->card_node) && !startswith(g->card_node, "/dev/")))
                return false;
        for (char **p = g->device_nodes; *p; p++)
                if (!startswith(*p, "/dev/") || strstr(*p, ".."))
                        return false;
        for (char **p = g->by_path_nodes; *p; p++)
                if (!startswith(*p, "/dev/dri/by-path/"))
                        return false;
        if (!g->mei_nodes || strv_length(g->mei_nodes) > PROBE_GPUS_NODES_MAX)
                return false;
        for (char **p = g->mei_nodes; *p; p++)
                if (!startswith(*p, "/dev/mei") || strchr(*p + strlen("/dev/mei"), '/'))
                        return false;
        for (size_t i = 0; i < g->n_migs; i++)
                if (!g->migs[i].uuid || !g->migs[i].nodes || strv_length(g->migs[i].nodes) > PROBE_GPUS_NODES_MAX)
                        return false;
        return true;
}

/* Whether any exported GPU has path in one of its lists (the oracle, independent of the
 * grant: an accepted answer can at least never name what the probe does not export). */
static bool exported_node(const ProbeGpus *s, const char *path) {
        static const char *const control[] = { GATE_NVIDIA_CONTROL_NODES };

        for (size_t i = 0; i < ELEMENTSOF(control); i++)
                if (streq(path, control[i]))
                        return true;
        for (size_t i = 0; i < s->n_gpus; i++) {
                const ProbeGpu *g = s->gpus[i];

                if (streq(g->card_node, path) || streq(g->render_node, path) || strv_contains(g->device_nodes, path))
                        return true;
                for (size_t j = 0; j < g->n_migs; j++)
                        if (strv_contains(g->migs[j].nodes, path))
                                return true;
        }
        return false;
}

static bool exported_mount(const ProbeGpus *s, const char *path) {
        if (streq(path, GATE_BY_PATH_DIR) || streq(path, GATE_NVIDIA_VOLUME_MOUNTS_HOST) || streq(path, GATE_MPS_SHM))
                return true;
        for (size_t i = 0; i < s->n_gpus; i++)
                if (strv_contains(s->gpus[i]->by_path_nodes, path) ||
                    (!isempty(s->gpus[i]->mps_pipe_directory) && streq(s->gpus[i]->mps_pipe_directory, path)))
                        return true;
        return false;
}

static void gate_case(FuzzInput *in) {
        ProbeGpus *s = NULL;
        sd_bus_message *inv = NULL, *props = NULL, *reply = NULL;
        V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
        V1beta1__ContainerAllocateRequest creq[3], *creqp[3];
        char *ids[3][3];
        V1beta1__AllocateResponse *answer = NULL;
        const char *resource;
        char *reason = NULL;
        size_t n_containers, skipped = 0;
        int r;

        in->words = gate_words;
        in->budget = FUZZ_BUS_BUDGET;
        s = probe_gpus_new();
        if (!s)
                abort();
        if (gate_build_inventory(in, &inv) < 0)
                goto finish;
        r = probe_gpus_replace(s, inv, &skipped);
        if (r < 0) {
                if (r != -EBADMSG || s->known || s->n_gpus != 0)
                        abort();
                goto finish;
        }
        if (!s->known || s->n_gpus > 5)
                abort();
        for (size_t i = 0; i < s->n_gpus; i++)
                if (!gpu_sane(s->gpus[i]) || (i > 0 && strcmp(s->gpus[i - 1]->path, s->gpus[i]->path) >= 0))
                        abort();

        /* A PropertiesChanged for the first object: applied whole or not at all. */
        if (sd_bus_message_new_method_call(fuzz_bus_get(), &props, "io.kgpu.Fuzz", "/", "io.kgpu.Fuzz", "P") < 0)
                abort();
        if (gate_append_props(props, in) >= 0 && gate_seal(props) >= 0 && s->n_gpus > 0) {
                ProbeGpu *g = s->gpus[0];
                char *id = strdup(g->id);

                if (!id)
                        abort();
                r = probe_gpu_apply_properties(g, props);
                if (r == -EBADMSG && !streq(g->id, id))
                        abort();
                free(id);
                if (probe_gpus_reindex(s) < 0 || !gpu_sane(g))
                        abort();
        }

        resource = GATE_PICK(gate_resources, in);
        n_containers = 1 + fuzz_input_byte(in) % 3;
        for (size_t i = 0; i < n_containers; i++) {
                v1beta1__container_allocate_request__init(&creq[i]);
                creq[i].n_devices_ids = fuzz_input_byte(in) % 4;
                for (size_t j = 0; j < creq[i].n_devices_ids; j++) {
                        ids[i][j] = strdup(fuzz_input_string(in, NULL));
                        if (!ids[i][j])
                                abort();
                }
                creq[i].devices_ids = ids[i];
                creqp[i] = &creq[i];
        }
        req.container_requests = creqp;
        req.n_container_requests = n_containers;

        if (fuzz_bus_build(PICK(allocate_sigs, in), in, &reply) >= 0 &&
            grpcd_allocate_reply_read(reply, n_containers, &answer) >= 0) {
                r = gate_check_allocate(s, "cdi.k8s.io/", resource, &req, answer, &reason);
                if (r == -EPERM) {
                        if (!reason || strlen(reason) > 2048)
                                abort();
                        for (const char *p = reason; *p; p++)
                                if ((unsigned char) *p < 0x20 || (unsigned char) *p >= 0x7f)
                                        abort();
                } else if (r == 0) {
                        if (reason)
                                abort();
                        for (size_t i = 0; i < answer->n_container_responses; i++) {
                                const V1beta1__ContainerAllocateResponse *c = answer->container_responses[i];

                                for (size_t j = 0; j < c->n_devices; j++)
                                        if (!streq(c->devices[j]->host_path, c->devices[j]->container_path) ||
                                            !exported_node(s, c->devices[j]->host_path) ||
                                            strchr(c->devices[j]->permissions, 'm'))
                                                abort();
                                for (size_t j = 0; j < c->n_mounts; j++)
                                        if (!exported_mount(s, c->mounts[j]->host_path))
                                                abort();
                                for (size_t j = 0; j < c->n_envs; j++)
                                        if (!strv_contains((char **) gate_envs, c->envs[j]->key))
                                                abort();
                                for (size_t j = 0; j < c->n_annotations; j++)
                                        if (!startswith(c->annotations[j]->key, "cdi.k8s.io/"))
                                                abort();
                                for (size_t j = 0; j < c->n_cdi_devices; j++)
                                        if (!startswith(c->cdi_devices[j]->name, GATE_CDI_KIND_INTEL "=") &&
                                            !startswith(c->cdi_devices[j]->name, GATE_CDI_KIND_NVIDIA "="))
                                                abort();
                        }
                } else if (r != -ENOMEM)
                        abort();
        }

        for (size_t i = 0; i < n_containers; i++)
                for (size_t j = 0; j < creq[i].n_devices_ids; j++)
                        free(ids[i][j]);
finish:
        free(reason);
        if (answer)
                protobuf_c_message_free_unpacked(&answer->base, NULL);
        sd_bus_message_unref(reply);
        sd_bus_message_unref(props);
        sd_bus_message_unref(inv);
        probe_gpus_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        FuzzInput in = { .p = data + 1, .n = size ? size - 1 : 0, .words = words };
        unsigned kind;

        log_set_max_level(LOG_CRIT);
        if (size < 1)
                return 0;
        /* 0xf3..0xf7 (no older corpus input starts so) pick the gate; the rest keeps the
         * meaning it had before the gate was added. */
        kind = data[0] >= 0xf3 && data[0] <= 0xf7 ? 7 : data[0] % 7;
        switch (kind) {
        case 0:
        case 1:
        case 2:
                request_case(kind, data + 1, size - 1);
                break;
        case 3:
                devices_case(&in);
                break;
        case 4:
        case 5:
                reply_case(kind, &in);
                break;
        case 6:
                strings_case(data + 1, size - 1);
                break;
        default:
                gate_case(&in);
                break;
        }
        return 0;
}
