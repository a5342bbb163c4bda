/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-probe-client-nvidia.c — the broker's parser of the NVIDIA io.kgpu.Gpu1 properties
 * (Index, Uuid, Product, MemoryBytes, ComputeMode, MigMode, MigDevices,
 * ComputeCapability, Links, MpsState, MpsPipeDirectory).
 *
 * Contract checked: valid values land in GpuInfo; a known property with a wrong type or
 * a value out of bounds makes the whole update fail with -EBADMSG, leaves the GpuInfo as
 * it was and still consumes the a{sv} (the "end" marker after it is readable).
 */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <systemd/sd-bus.h>

#include "common/util.h"
#include "daemons/broker/probe-client.h"
#include "tests/unit/test-main.h"

static sd_bus *bus;

static void setup(void) {
        int fds[2];

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0, fds), 0);
        ck_assert_int_ge(sd_bus_new(&bus), 0);
        ck_assert_int_ge(sd_bus_set_fd(bus, fds[0], fds[0]), 0);
        ck_assert_int_ge(sd_bus_start(bus), 0);
        close(fds[1]);
}

static void teardown(void) {
        bus = sd_bus_close_unref(bus);
}

typedef struct Mig {
        uint32_t index;
        const char *uuid, *profile;
        uint32_t gi, ci;
        const char *node;       /* NULL: none; "MANY": RESOURCES_NODES_MAX + 1 nodes */
        uint64_t memory;
} Mig;

typedef struct Link {
        const char *peer, *type;
        uint8_t nvlinks;
} Link;

/* Which optional properties a message carries. */
typedef struct Props {
        const char *uuid, *product, *compute_mode, *mig_mode, *cc, *mps_state, *mps_pipe;
        bool have_index, have_memory;
        int32_t index;
        uint64_t memory;
        const Mig *mig;
        size_t n_mig;           /* SIZE_MAX: no MigDevices property */
        const Link *links;
        size_t n_links;         /* SIZE_MAX: no Links property */
        unsigned n_links_repeat; /* >1: the links list repeated with numbered peers */
        const char *wrong_type; /* a property name sent with type "u" */
} Props;

static void append_s(sd_bus_message *m, const char *name, const char *v) {
        if (!v)
                return;
        ck_assert_int_ge(sd_bus_message_append(m, "{sv}", name, "s", v), 0);
}

static sd_bus_message *build(const Props *p) {
        sd_bus_message *m = NULL;

        ck_assert_int_ge(sd_bus_message_new_signal(bus, &m, "/io/kgpu/Probe1/gpu/x",
                                                   "org.freedesktop.DBus.Properties", "PropertiesChanged"), 0);
        ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "{sv}"), 0);
        append_s(m, "Uuid", p->uuid);
        append_s(m, "Product", p->product);
        append_s(m, "ComputeMode", p->compute_mode);
        append_s(m, "MigMode", p->mig_mode);
        append_s(m, "ComputeCapability", p->cc);
        append_s(m, "MpsState", p->mps_state);
        append_s(m, "MpsPipeDirectory", p->mps_pipe);
        if (p->have_index)
                ck_assert_int_ge(sd_bus_message_append(m, "{sv}", "Index", "i", p->index), 0);
        if (p->have_memory)
                ck_assert_int_ge(sd_bus_message_append(m, "{sv}", "MemoryBytes", "t", p->memory), 0);
        if (p->wrong_type)
                ck_assert_int_ge(sd_bus_message_append(m, "{sv}", p->wrong_type, "u", 7), 0);
        if (p->n_mig != SIZE_MAX) {
                ck_assert_int_ge(sd_bus_message_open_container(m, 'e', "sv"), 0);
                ck_assert_int_ge(sd_bus_message_append(m, "s", "MigDevices"), 0);
                ck_assert_int_ge(sd_bus_message_open_container(m, 'v', "a(ussuuast)"), 0);
                ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "(ussuuast)"), 0);
                for (size_t i = 0; i < p->n_mig; i++) {
                        const Mig *d = &p->mig[i];

                        ck_assert_int_ge(sd_bus_message_open_container(m, 'r', "ussuuast"), 0);
                        ck_assert_int_ge(sd_bus_message_append(m, "ussuu", d->index, d->uuid, d->profile,
                                                               d->gi, d->ci), 0);
                        ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "s"), 0);
                        if (d->node && streq(d->node, "MANY"))
                                for (unsigned k = 0; k <= RESOURCES_NODES_MAX; k++) {
                                        char n[64];

                                        snprintf(n, sizeof n, "/dev/nvidia-caps/nvidia-cap%u", k);
                                        ck_assert_int_ge(sd_bus_message_append(m, "s", n), 0);
                                }
                        else if (d->node)
                                ck_assert_int_ge(sd_bus_message_append(m, "s", d->node), 0);
                        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                        ck_assert_int_ge(sd_bus_message_append(m, "t", d->memory), 0);
                        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                }
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        }
        if (p->n_links != SIZE_MAX) {
                unsigned rep = p->n_links_repeat ?: 1;

                ck_assert_int_ge(sd_bus_message_open_container(m, 'e', "sv"), 0);
                ck_assert_int_ge(sd_bus_message_append(m, "s", "Links"), 0);
                ck_assert_int_ge(sd_bus_message_open_container(m, 'v', "a(ssy)"), 0);
                ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "(ssy)"), 0);
                for (unsigned k = 0; k < rep; k++)
                        for (size_t i = 0; i < p->n_links; i++) {
                                char peer[300];

                                if (rep > 1)
                                        snprintf(peer, sizeof peer, "%s-%u", p->links[i].peer, k);
                                else
                                        snprintf(peer, sizeof peer, "%s", p->links[i].peer);
                                ck_assert_int_ge(sd_bus_message_append(m, "(ssy)", peer, p->links[i].type,
                                                                       p->links[i].nvlinks), 0);
                        }
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        }
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "s", "end"), 0);
        ck_assert_int_ge(sd_bus_message_seal(m, 1, 0), 0);
        ck_assert_int_ge(sd_bus_message_rewind(m, true), 0);
        return m;
}

static int apply(const Props *p, GpuInfo *info) {
        sd_bus_message *m = build(p);
        const char *s = NULL;
        int r;

        r = probe_gpu_properties_apply(m, info);
        ck_assert_int_gt(sd_bus_message_read(m, "s", &s), 0);
        ck_assert_str_eq(s, "end");
        sd_bus_message_unref(m);
        return r;
}

#define NO_LISTS .n_mig = SIZE_MAX, .n_links = SIZE_MAX

static const Mig h100_mig[] = {
        { 0, "MIG-a", "3g.40gb", 2, 0, "/dev/nvidia-caps/nvidia-cap21", 40ULL << 30 },
        { 1, "MIG-b", "2g.20gb", 3, 0, "/dev/nvidia-caps/nvidia-cap30", 20ULL << 30 },
        { 2, "MIG-c", "1g.10gb", 9, 0, NULL, 10ULL << 30 },
};
static const Link links8[] = {
        { "GPU-1", "NV", 18 }, { "GPU-2", "PIX", 0 }, { "GPU-3", "SYS", 0 },
};

static void fill_valid(GpuInfo *info) {
        const Props p = {
                .uuid = "GPU-0", .product = "NVIDIA H100 80GB HBM3", .compute_mode = "Default",
                .mig_mode = "Enabled", .cc = "9.0", .mps_state = "running",
                .mps_pipe = "/run/kgpu/mps/GPU-0/pipe",
                .have_index = true, .index = 3, .have_memory = true, .memory = 80ULL << 30,
                .mig = h100_mig, .n_mig = ELEMENTSOF(h100_mig),
                .links = links8, .n_links = ELEMENTSOF(links8),
        };

        *info = (GpuInfo) { .numa_node = -1, .index = -1 };
        ck_assert_int_eq(apply(&p, info), 0);
}

START_TEST(test_nvidia_valid) {
        GpuInfo info;

        fill_valid(&info);
        ck_assert_str_eq(info.uuid, "GPU-0");
        ck_assert_str_eq(info.product, "NVIDIA H100 80GB HBM3");
        ck_assert_str_eq(info.compute_mode, "Default");
        ck_assert_str_eq(info.mig_mode, "Enabled");
        ck_assert_str_eq(info.compute_capability, "9.0");
        ck_assert_str_eq(info.mps_state, "running");
        ck_assert_str_eq(info.mps_pipe_directory, "/run/kgpu/mps/GPU-0/pipe");
        ck_assert_int_eq(info.index, 3);
        ck_assert_uint_eq(info.memory_bytes, 80ULL << 30);
        ck_assert_uint_eq(info.n_mig_devices, 3);
        ck_assert_uint_eq(info.mig_devices[0].index, 0);
        ck_assert_str_eq(info.mig_devices[0].uuid, "MIG-a");
        ck_assert_str_eq(info.mig_devices[0].profile, "3g.40gb");
        ck_assert_uint_eq(info.mig_devices[0].gi, 2);
        ck_assert_uint_eq(info.mig_devices[0].ci, 0);
        ck_assert_uint_eq(info.mig_devices[0].memory_bytes, 40ULL << 30);
        ck_assert_ptr_nonnull(info.mig_devices[0].device_nodes);
        ck_assert_str_eq(info.mig_devices[0].device_nodes[0], "/dev/nvidia-caps/nvidia-cap21");
        ck_assert_ptr_null(info.mig_devices[0].device_nodes[1]);
        /* No nodes: an empty list, never NULL. */
        ck_assert_ptr_nonnull(info.mig_devices[2].device_nodes);
        ck_assert_ptr_null(info.mig_devices[2].device_nodes[0]);
        ck_assert_uint_eq(info.n_links, 3);
        ck_assert_str_eq(info.links[0].peer, "GPU-1");
        ck_assert_str_eq(info.links[0].type, "NV");
        ck_assert_uint_eq(info.links[0].nvlinks, 18);
        ck_assert_str_eq(info.links[2].type, "SYS");

        /* A later update replaces lists as a whole: an empty MigDevices clears them. */
        const Props q = { .mig_mode = "Disabled", .n_mig = 0, .n_links = SIZE_MAX };
        ck_assert_int_eq(apply(&q, &info), 0);
        ck_assert_uint_eq(info.n_mig_devices, 0);
        ck_assert_ptr_null(info.mig_devices);
        ck_assert_uint_eq(info.n_links, 3);
        ck_assert_str_eq(info.mig_mode, "Disabled");

        /* Intel's "unknown" values are accepted. */
        const Props intel = { .uuid = "", .compute_mode = "", .mig_mode = "", .cc = "", .mps_state = "",
                              .mps_pipe = "", .have_index = true, .index = -1, .n_mig = 0, .n_links = 0 };
        ck_assert_int_eq(apply(&intel, &info), 0);
        ck_assert_int_eq(info.index, -1);
        ck_assert_str_eq(info.mps_pipe_directory, "");
        ck_assert_uint_eq(info.n_links, 0);
        gpu_info_done(&info);
}
END_TEST

/* Each hostile update must fail and leave the object as it was. */
static void check_refused(const Props *p) {
        GpuInfo info, before = {};

        fill_valid(&info);
        ck_assert_int_eq(gpu_info_copy(&info, &before), 0);
        ck_assert_int_eq(apply(p, &info), -EBADMSG);
        ck_assert_str_eq(info.uuid, before.uuid);
        ck_assert_str_eq(info.mps_pipe_directory, before.mps_pipe_directory);
        ck_assert_str_eq(info.compute_mode, before.compute_mode);
        ck_assert_int_eq(info.index, before.index);
        ck_assert_uint_eq(info.memory_bytes, before.memory_bytes);
        ck_assert_uint_eq(info.n_mig_devices, before.n_mig_devices);
        ck_assert_uint_eq(info.n_links, before.n_links);
        ck_assert_str_eq(info.mig_devices[1].uuid, "MIG-b");
        ck_assert_str_eq(info.links[1].peer, "GPU-2");
        gpu_info_done(&info);
        gpu_info_done(&before);
}

START_TEST(test_nvidia_hostile) {
        char long_id[RESOURCES_ID_MAX + 2];
        char long_word[80];

        memset(long_id, 'G', sizeof long_id - 1);
        long_id[sizeof long_id - 1] = 0;
        memset(long_word, 'x', sizeof long_word - 1);
        long_word[sizeof long_word - 1] = 0;

        /* Wrong types. */
        const char *typed[] = { "Index", "MemoryBytes", "MigDevices", "Links", "Uuid", "MpsState",
                                "MpsPipeDirectory", "ComputeMode", "MigMode", "ComputeCapability", "Product" };
        for (size_t i = 0; i < ELEMENTSOF(typed); i++) {
                const Props p = { NO_LISTS, .wrong_type = typed[i] };
                check_refused(&p);
        }
        /* Scalars out of bounds. */
        check_refused(&(const Props) { NO_LISTS, .have_index = true, .index = -2 });
        check_refused(&(const Props) { NO_LISTS, .have_index = true, .index = 4096 });
        check_refused(&(const Props) { NO_LISTS, .have_memory = true, .memory = UINT64_MAX });
        check_refused(&(const Props) { NO_LISTS, .uuid = long_id });
        check_refused(&(const Props) { NO_LISTS, .uuid = "GPU-\x01" });
        check_refused(&(const Props) { NO_LISTS, .compute_mode = long_word });
        check_refused(&(const Props) { NO_LISTS, .mps_state = "run ning" });
        check_refused(&(const Props) { NO_LISTS, .cc = "9/0" });
        /* The pipe directory becomes a mount source: absolute, no dot components. */
        check_refused(&(const Props) { NO_LISTS, .mps_pipe = "run/kgpu/mps" });
        check_refused(&(const Props) { NO_LISTS, .mps_pipe = "/run/kgpu/../../etc" });
        check_refused(&(const Props) { NO_LISTS, .mps_pipe = "/run//kgpu" });
        check_refused(&(const Props) { NO_LISTS, .mps_pipe = "/run/kgpu/./x" });
        check_refused(&(const Props) { NO_LISTS, .mps_pipe = "/" });

        /* MIG devices. */
        const Mig dup_index[] = { { 1, "MIG-a", "1g.10gb", 1, 0, NULL, 1 }, { 1, "MIG-b", "1g.10gb", 2, 0, NULL, 1 } };
        const Mig dup_uuid[] = { { 1, "MIG-a", "1g.10gb", 1, 0, NULL, 1 }, { 2, "MIG-a", "1g.10gb", 2, 0, NULL, 1 } };
        const Mig bad_node[] = { { 1, "MIG-a", "1g.10gb", 1, 0, "/etc/shadow", 1 } };
        const Mig dot_node[] = { { 1, "MIG-a", "1g.10gb", 1, 0, "/dev/../etc/shadow", 1 } };
        const Mig many_nodes[] = { { 1, "MIG-a", "1g.10gb", 1, 0, "MANY", 1 } };
        const Mig empty_uuid[] = { { 1, "", "1g.10gb", 1, 0, NULL, 1 } };
        const Mig empty_profile[] = { { 1, "MIG-a", "", 1, 0, NULL, 1 } };
        const Mig slash_profile[] = { { 1, "MIG-a", "1g/10gb", 1, 0, NULL, 1 } };
        const Mig huge_memory[] = { { 1, "MIG-a", "1g.10gb", 1, 0, NULL, UINT64_MAX } };
        const Mig *bad_migs[] = { dup_index, dup_uuid, bad_node, dot_node, many_nodes, empty_uuid,
                                  empty_profile, slash_profile, huge_memory };
        const size_t n_bad_migs[] = { 2, 2, 1, 1, 1, 1, 1, 1, 1 };
        for (size_t i = 0; i < ELEMENTSOF(bad_migs); i++) {
                const Props p = { .mig = bad_migs[i], .n_mig = n_bad_migs[i], .n_links = SIZE_MAX };
                check_refused(&p);
        }
        /* More MIG devices than PROBE_MIG_DEVICES_MAX (64). */
        Mig many[65];
        char uuids[65][16];
        for (size_t i = 0; i < ELEMENTSOF(many); i++) {
                snprintf(uuids[i], sizeof uuids[i], "MIG-%zu", i);
                many[i] = (Mig) { (uint32_t) i, uuids[i], "1g.10gb", 1, 0, NULL, 1 };
        }
        check_refused(&(const Props) { .mig = many, .n_mig = 65, .n_links = SIZE_MAX });
        /* 64 is fine. */
        {
                GpuInfo info;

                fill_valid(&info);
                ck_assert_int_eq(apply(&(const Props) { .mig = many, .n_mig = 64, .n_links = SIZE_MAX }, &info), 0);
                ck_assert_uint_eq(info.n_mig_devices, 64);
                gpu_info_done(&info);
        }

        /* Links. */
        const Link dup_peer[] = { { "GPU-1", "NV", 2 }, { "GPU-1", "SYS", 0 } };
        const Link bad_type[] = { { "GPU-1", "C2C", 0 } };
        const Link nvlinks_not_nv[] = { { "GPU-1", "PIX", 4 } };
        const Link empty_peer[] = { { "", "NV", 4 } };
        const Link *bad_links[] = { dup_peer, bad_type, nvlinks_not_nv, empty_peer };
        const size_t n_bad_links[] = { 2, 1, 1, 1 };
        for (size_t i = 0; i < ELEMENTSOF(bad_links); i++) {
                const Props p = { .links = bad_links[i], .n_links = n_bad_links[i], .n_mig = SIZE_MAX };
                check_refused(&p);
        }
        /* More links than PROBE_LINKS_MAX (1024). */
        const Link one[] = { { "GPU-x", "SYS", 0 } };
        check_refused(&(const Props) { .links = one, .n_links = 1, .n_links_repeat = 1025, .n_mig = SIZE_MAX });
        {
                GpuInfo info;

                fill_valid(&info);
                ck_assert_int_eq(apply(&(const Props) { .links = one, .n_links = 1, .n_links_repeat = 1024,
                                                        .n_mig = SIZE_MAX }, &info), 0);
                ck_assert_uint_eq(info.n_links, 1024);
                gpu_info_done(&info);
        }
}
END_TEST

static Suite *nvidia_suite(void) {
        Suite *s = suite_create("probe-client-nvidia");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_nvidia_valid);
        tcase_add_test(tc, test_nvidia_hostile);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(nvidia_suite)
