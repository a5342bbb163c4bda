/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-broker-dbus.c — Broker1 over a private dbus-daemon, with this process playing a
 * (sometimes hostile) io.kgpu.Probe1.
 *
 * The broker's Manager runs in a forked child against DBUS_SYSTEM_BUS_ADDRESS; the test
 * exports Gpu1 objects under an ObjectManager on one connection and calls the broker
 * asynchronously on the same connection, pumping it until the answer comes. Exits 77 if
 * dbus-daemon is not installed.
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-bus.h>

#include "common/bus-names.h"
#include "common/config.h"
#include "common/util.h"
#include "daemons/broker/manager.h"
#include "tests/unit/test-main.h"

#define TIMEOUT_USEC (5 * 1000000ULL)

typedef struct FakeGpu {
        char *path;
        char *id, *vendor, *driver, *card, *render, *health, *reason;
        int32_t numa;
        uint16_t device_id;
        sd_bus_slot *slot;
} FakeGpu;

static char dir[] = "/tmp/kgpu-test-broker-XXXXXX";
static char state_dir[300];
static pid_t bus_pid = -1, broker_pid = -1;
static sd_bus *bus;                     /* our connection: fake probe and client */
static FakeGpu gpus[8];
static size_t n_gpus;
static char *changed[64];               /* ResourcesChanged received, joined */
static size_t n_changed;

static const sd_bus_vtable gpu_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Id", "s", NULL, offsetof(FakeGpu, id), SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Vendor", "s", NULL, offsetof(FakeGpu, vendor), SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Driver", "s", NULL, offsetof(FakeGpu, driver), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DeviceId", "q", NULL, offsetof(FakeGpu, device_id), SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("NumaNode", "i", NULL, offsetof(FakeGpu, numa), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("CardNode", "s", NULL, offsetof(FakeGpu, card), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("RenderNode", "s", NULL, offsetof(FakeGpu, render), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Health", "s", NULL, offsetof(FakeGpu, health), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("HealthReason", "s", NULL, offsetof(FakeGpu, reason), SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_VTABLE_END,
};

static void pump_once(void) {
        int r;

        r = sd_bus_process(bus, NULL);
        ck_assert_int_ge(r, 0);
        if (r == 0)
                ck_assert_int_ge(sd_bus_wait(bus, 50000), 0);
}

static void pump_for(uint64_t usec) {
        uint64_t end = now_usec(CLOCK_MONOTONIC) + usec;

        while (now_usec(CLOCK_MONOTONIC) < end)
                pump_once();
}

static FakeGpu *fake_gpu_add(const char *name, const char *id, const char *driver, const char *card,
                             bool announce) {
        FakeGpu *g = &gpus[n_gpus++];

        ck_assert_uint_le(n_gpus, ELEMENTSOF(gpus));
        *g = (FakeGpu) {
                .id = strdup(id),
                .vendor = strdup("intel"),
                .driver = strdup(driver),
                .card = strdup(card),
                .render = strdup(""),
                .health = strdup("Healthy"),
                .reason = strdup(""),
                .numa = 0,
                .device_id = 0x56a0,
        };
        ck_assert_int_ge(asprintf(&g->path, "%s/%s", KGPU_GPU_PATH_PREFIX, name), 0);
        ck_assert_int_ge(sd_bus_add_object_vtable(bus, &g->slot, g->path, KGPU_GPU_INTERFACE, gpu_vtable, g), 0);
        if (announce)
                ck_assert_int_ge(sd_bus_emit_interfaces_added(bus, g->path, KGPU_GPU_INTERFACE, NULL), 0);
        return g;
}

static void fake_gpu_set(FakeGpu *g, char **field, const char *value, const char *property) {
        free(*field);
        *field = strdup(value);
        ck_assert_int_ge(sd_bus_emit_properties_changed(bus, g->path, KGPU_GPU_INTERFACE, property, NULL), 0);
}

static int on_resources_changed(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_strv_free_ char **l = NULL;

        ck_assert_int_ge(sd_bus_message_read_strv(m, &l), 0);
        ck_assert_uint_lt(n_changed, ELEMENTSOF(changed));
        changed[n_changed++] = strv_join(l, ",");
        return 0;
}

/* Pumps until a ResourcesChanged naming exactly `names` arrives. */
static void wait_changed(const char *names) {
        uint64_t end = now_usec(CLOCK_MONOTONIC) + TIMEOUT_USEC;

        for (;;) {
                for (size_t i = 0; i < n_changed; i++)
                        if (streq(changed[i], names)) {
                                for (size_t j = 0; j < n_changed; j++)
                                        free(changed[j]);
                                n_changed = 0;
                                return;
                        }
                ck_assert_msg(now_usec(CLOCK_MONOTONIC) < end, "no ResourcesChanged(%s)", names);
                pump_once();
        }
}

typedef struct Reply {
        bool done;
        sd_bus_message *m;
} Reply;

static int on_reply(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Reply *r = userdata;

        r->m = sd_bus_message_ref(m);
        r->done = true;
        return 0;
}

static void wait_reply(Reply *rep) {
        uint64_t end = now_usec(CLOCK_MONOTONIC) + TIMEOUT_USEC;

        while (!rep->done) {
                ck_assert_msg(now_usec(CLOCK_MONOTONIC) < end, "no reply");
                pump_once();
        }
}

/* Calls a Broker1 method with the arguments already in m; returns the reply. */
static sd_bus_message *call(sd_bus_message *m) {
        Reply rep = {};

        ck_assert_int_ge(sd_bus_call_async(bus, NULL, m, on_reply, &rep, 0), 0);
        sd_bus_message_unref(m);
        wait_reply(&rep);
        return rep.m;
}

static sd_bus_message *new_call(const char *method) {
        sd_bus_message *m = NULL;

        ck_assert_int_ge(sd_bus_message_new_method_call(bus, &m, KGPU_BROKER_BUS_NAME, KGPU_BROKER_PATH,
                                                        KGPU_BROKER_INTERFACE, method), 0);
        return m;
}

/* GetDevices as "id=Health@numa;..." */
static char *get_devices(const char *resource, const char **ret_error) {
        static char buf[1024];
        sd_bus_message *m = new_call("GetDevices"), *r;
        const char *id, *health;
        size_t n = 0;

        ck_assert_int_ge(sd_bus_message_append(m, "s", resource), 0);
        r = call(m);
        buf[0] = 0;
        if (sd_bus_message_is_method_error(r, NULL)) {
                static char err[256];

                snprintf(err, sizeof(err), "%s", sd_bus_message_get_error(r)->name);
                *ret_error = err;
                sd_bus_message_unref(r);
                return buf;
        }
        *ret_error = NULL;
        ck_assert_int_ge(sd_bus_message_enter_container(r, 'a', "(ssai)"), 0);
        while (sd_bus_message_enter_container(r, 'r', "ssai") > 0) {
                const int32_t *numa;
                size_t sz;

                ck_assert_int_ge(sd_bus_message_read(r, "ss", &id, &health), 0);
                ck_assert_int_ge(sd_bus_message_read_array(r, 'i', (const void **) &numa, &sz), 0);
                n += (size_t) snprintf(buf + n, sizeof(buf) - n, "%s%s=%s@%d", n ? ";" : "", id, health,
                                       sz ? numa[0] : -1);
                ck_assert_int_ge(sd_bus_message_exit_container(r), 0);
        }
        sd_bus_message_unref(r);
        return buf;
}

static const char *devices(const char *resource) {
        const char *err;
        char *d = get_devices(resource, &err);

        ck_assert_msg(!err, "GetDevices(%s): %s", resource, err);
        return d;
}

/* Allocate of one container; returns the error name or NULL, and the device specs. */
static const char *allocate(const char *resource, char **ids, char *ret_specs, size_t size) {
        static char err[256];
        sd_bus_message *m = new_call("Allocate"), *r;

        ck_assert_int_ge(sd_bus_message_append(m, "s", resource), 0);
        ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "as"), 0);
        ck_assert_int_ge(sd_bus_message_append_strv(m, ids), 0);
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        r = call(m);
        if (sd_bus_message_is_method_error(r, NULL)) {
                snprintf(err, sizeof(err), "%s", sd_bus_message_get_error(r)->name);
                sd_bus_message_unref(r);
                return err;
        }
        if (ret_specs) {
                const char *c, *h, *p;
                size_t n = 0;

                ret_specs[0] = 0;
                ck_assert_int_ge(sd_bus_message_enter_container(r, 'a', "(a{ss}a(ssb)a(sss)a{ss}as)"), 0);
                ck_assert_int_gt(sd_bus_message_enter_container(r, 'r', "a{ss}a(ssb)a(sss)a{ss}as"), 0);
                ck_assert_int_ge(sd_bus_message_skip(r, "a{ss}a(ssb)"), 0);
                ck_assert_int_ge(sd_bus_message_enter_container(r, 'a', "(sss)"), 0);
                while (sd_bus_message_read(r, "(sss)", &c, &h, &p) > 0)
                        n += (size_t) snprintf(ret_specs + n, size - n, "%s%s:%s:%s", n ? ";" : "", c, h, p);
        }
        sd_bus_message_unref(r);
        return NULL;
}

static bool broker_on_bus(void) {
        sd_bus_message *m = NULL, *r;
        int has = 0;

        ck_assert_int_ge(sd_bus_message_new_method_call(bus, &m, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                        "org.freedesktop.DBus", "NameHasOwner"), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "s", KGPU_BROKER_BUS_NAME), 0);
        r = call(m);
        ck_assert(!sd_bus_message_is_method_error(r, NULL));
        ck_assert_int_ge(sd_bus_message_read(r, "b", &has), 0);
        sd_bus_message_unref(r);
        return has;
}

static void start_broker(void) {
        uint64_t end = now_usec(CLOCK_MONOTONIC) + TIMEOUT_USEC;

        broker_pid = fork();
        ck_assert_int_ge(broker_pid, 0);
        if (broker_pid == 0) {
                _cleanup_free_ char *yaml = NULL, *err = NULL;
                Manager *m = NULL;
                Config *c = NULL;
                sigset_t mask;
                int r;

                if (asprintf(&yaml, "stateDirectory: %s\nlogLevel: debug\n", state_dir) < 0 ||
                    config_load_string(yaml, strlen(yaml), "test.yaml", NULL, 0, &c, &err) < 0)
                        _exit(10);
                if (manager_new(c, &m) < 0)
                        _exit(11);
                /* SIGTERM ends the loop with 0, as the daemon skeleton arranges. */
                if (sigemptyset(&mask) < 0 || sigaddset(&mask, SIGTERM) < 0 ||
                    sigprocmask(SIG_BLOCK, &mask, NULL) < 0 ||
                    sd_event_add_signal(m->event, NULL, SIGTERM, NULL, NULL) < 0)
                        _exit(11);
                if (manager_start(m) < 0)
                        _exit(12);
                r = manager_run(m);
                manager_free(m);
                _exit(r == 0 ? 0 : 13);
        }
        while (!broker_on_bus()) {
                int status;

                ck_assert_msg(waitpid(broker_pid, &status, WNOHANG) == 0, "broker died (status %d)", status);
                ck_assert_msg(now_usec(CLOCK_MONOTONIC) < end, "broker did not take its name");
                usleep(10000);
        }
}

static void stop_broker(void) {
        int status;

        if (broker_pid <= 0)
                return;
        ck_assert_int_eq(kill(broker_pid, SIGTERM), 0);
        ck_assert_int_eq(waitpid(broker_pid, &status, 0), broker_pid);
        broker_pid = -1;
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "broker exit status %d", status);
}

static void setup(void) {
        char conf[400], bus_conf[4096], addr[512] = {};
        int p[2], fd;
        ssize_t k;
        size_t n = 0;

        if (access("/usr/bin/dbus-daemon", X_OK) < 0)
                exit(77);

        strcpy(dir, "/tmp/kgpu-test-broker-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(state_dir, sizeof(state_dir), "%s/state", dir);
        ck_assert_int_eq(mkdir(state_dir, 0700), 0);
        snprintf(conf, sizeof(conf), "%s/bus.conf", dir);
        snprintf(bus_conf, sizeof(bus_conf),
                 "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\"\n"
                 " \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n"
                 "<busconfig><type>custom</type><listen>unix:path=%s/bus</listen><auth>EXTERNAL</auth>\n"
                 "<policy context=\"default\"><allow user=\"*\"/><allow own=\"*\"/>"
                 "<allow send_destination=\"*\"/><allow receive_sender=\"*\"/></policy></busconfig>\n", dir);
        fd = open(conf, O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0644);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, bus_conf, strlen(bus_conf)), (ssize_t) strlen(bus_conf));
        close(fd);

        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        bus_pid = fork();
        ck_assert_int_ge(bus_pid, 0);
        if (bus_pid == 0) {
                char conf_arg[450];

                snprintf(conf_arg, sizeof(conf_arg), "--config-file=%s", conf);
                if (dup2(p[1], 3) < 0)
                        _exit(1);
                execl("/usr/bin/dbus-daemon", "dbus-daemon", conf_arg, "--nofork", "--nopidfile",
                      "--print-address=3", "--nosyslog", (char *) NULL);
                _exit(1);
        }
        close(p[1]);
        while (n < sizeof(addr) - 1 && (k = read(p[0], addr + n, sizeof(addr) - 1 - n)) > 0) {
                n += (size_t) k;
                if (memchr(addr, '\n', n))
                        break;
        }
        close(p[0]);
        ck_assert_ptr_nonnull(strchr(addr, '\n'));
        *strchr(addr, '\n') = 0;
        ck_assert_int_eq(setenv("DBUS_SYSTEM_BUS_ADDRESS", addr, 1), 0);

        ck_assert_int_ge(sd_bus_open_system(&bus), 0);
        ck_assert_int_ge(sd_bus_match_signal(bus, NULL, NULL, KGPU_BROKER_PATH, KGPU_BROKER_INTERFACE,
                                             "ResourcesChanged", on_resources_changed, NULL), 0);
        ck_assert_int_ge(sd_bus_add_object_manager(bus, NULL, KGPU_PROBE_PATH), 0);
}

static void teardown(void) {
        char p[400];

        if (broker_pid > 0) {
                kill(broker_pid, SIGKILL);
                waitpid(broker_pid, NULL, 0);
        }
        for (size_t i = 0; i < n_gpus; i++) {
                FakeGpu *g = &gpus[i];

                sd_bus_slot_unref(g->slot);
                free(g->path);
                free(g->id);
                free(g->vendor);
                free(g->driver);
                free(g->card);
                free(g->render);
                free(g->health);
                free(g->reason);
        }
        n_gpus = 0;
        bus = sd_bus_flush_close_unref(bus);
        if (bus_pid > 0) {
                kill(bus_pid, SIGTERM);
                waitpid(bus_pid, NULL, 0);
        }
        for (const char *f = "kgpu.db\0kgpu.db-wal\0kgpu.db-shm\0"; *f; f += strlen(f) + 1) {
                snprintf(p, sizeof(p), "%s/%s", state_dir, f);
                (void) unlink(p);
        }
        (void) rmdir(state_dir);
        snprintf(p, sizeof(p), "%s/bus.conf", dir);
        (void) unlink(p);
        snprintf(p, sizeof(p), "%s/bus", dir);
        (void) unlink(p);
        (void) rmdir(dir);
}

START_TEST(test_broker_follows_probe) {
        char specs[512];
        char *ids_a[] = { (char *) "0000:03:00.0", NULL };
        const char *err;
        FakeGpu *a, *x, *c;

        a = fake_gpu_add("a", "0000:03:00.0", "i915", "/dev/dri/card0", false);
        free(a->render);
        a->render = strdup("/dev/dri/renderD128");
        x = fake_gpu_add("x", "0000:04:00.0", "xe", "/dev/dri/card1", false);
        ck_assert_int_ge(sd_bus_request_name(bus, KGPU_PROBE_BUS_NAME, 0), 0);

        start_broker();
        wait_changed("gpu.intel.com/i915,gpu.intel.com/xe");
        ck_assert_str_eq(devices("gpu.intel.com/i915"), "0000:03:00.0=Healthy@0");
        ck_assert_str_eq(devices("gpu.intel.com/xe"), "0000:04:00.0=Healthy@0");
        get_devices("nvidia.com/gpu", &err);
        ck_assert_str_eq(err, KGPU_ERROR_UNKNOWN_RESOURCE);

        ck_assert_ptr_null(allocate("gpu.intel.com/i915", ids_a, specs, sizeof(specs)));
        ck_assert_str_eq(specs, "/dev/dri/card0:/dev/dri/card0:rw;/dev/dri/renderD128:/dev/dri/renderD128:rw");

        /* Health follows PropertiesChanged, at once. */
        fake_gpu_set(a, &a->health, "Unhealthy", "Health");
        wait_changed("gpu.intel.com/i915");
        ck_assert_str_eq(devices("gpu.intel.com/i915"), "0000:03:00.0=Unhealthy@0");
        ck_assert_str_eq(allocate("gpu.intel.com/i915", ids_a, NULL, 0), KGPU_ERROR_UNHEALTHY);
        fake_gpu_set(a, &a->health, "Healthy", "Health");
        wait_changed("gpu.intel.com/i915");

        /* A new GPU appears. */
        c = fake_gpu_add("c", "0000:02:00.0", "i915", "/dev/dri/card2", true);
        wait_changed("gpu.intel.com/i915");
        ck_assert_str_eq(devices("gpu.intel.com/i915"), "0000:02:00.0=Healthy@0;0000:03:00.0=Healthy@0");

        /* Removed: gone from the list, the resource stays advertised. */
        ck_assert_int_ge(sd_bus_emit_interfaces_removed(bus, x->path, KGPU_GPU_INTERFACE, NULL), 0);
        wait_changed("gpu.intel.com/xe");
        ck_assert_str_eq(devices("gpu.intel.com/xe"), "");
        (void) c;

        stop_broker();
}
END_TEST

START_TEST(test_broker_hostile_probe) {
        FakeGpu *a, *bad, *dup;
        sd_bus *other = NULL;
        sd_bus_message *sig = NULL;

        a = fake_gpu_add("a", "0000:03:00.0", "i915", "/dev/dri/card0", false);
        ck_assert_int_ge(sd_bus_request_name(bus, KGPU_PROBE_BUS_NAME, 0), 0);
        start_broker();
        wait_changed("gpu.intel.com/i915");

        /* A device node outside /dev and a second object with a taken id are ignored;
         * a valid GPU announced after them still gets through. */
        bad = fake_gpu_add("bad", "0000:07:00.0", "i915", "/etc/shadow", true);
        dup = fake_gpu_add("dup", "0000:03:00.0", "i915", "/dev/dri/card5", true);
        fake_gpu_add("ok", "0000:08:00.0", "i915", "/dev/dri/card8", true);
        wait_changed("gpu.intel.com/i915");
        ck_assert_str_eq(devices("gpu.intel.com/i915"), "0000:03:00.0=Healthy@0;0000:08:00.0=Healthy@0");
        (void) bad;
        (void) dup;

        /* Another connection (not the probe) claiming a health change is not believed. */
        ck_assert_int_ge(sd_bus_open_system(&other), 0);
        ck_assert_int_ge(sd_bus_message_new_signal(other, &sig, a->path, "org.freedesktop.DBus.Properties",
                                                   "PropertiesChanged"), 0);
        ck_assert_int_ge(sd_bus_message_append(sig, "sa{sv}as", KGPU_GPU_INTERFACE, 1, "Health", "s",
                                               "Unhealthy", 0), 0);
        ck_assert_int_ge(sd_bus_send(other, sig, NULL), 0);
        sd_bus_message_unref(sig);
        ck_assert_int_ge(sd_bus_flush(other), 0);
        /* A real change after it proves the broker has processed the spoofed one. */
        a->numa = 1;
        ck_assert_int_ge(sd_bus_emit_properties_changed(bus, a->path, KGPU_GPU_INTERFACE, "NumaNode", NULL), 0);
        wait_changed("gpu.intel.com/i915");
        ck_assert_str_eq(devices("gpu.intel.com/i915"), "0000:03:00.0=Healthy@1;0000:08:00.0=Healthy@0");
        sd_bus_flush_close_unref(other);

        /* The probe leaves: the inventory stays as it was. */
        ck_assert_int_ge(sd_bus_release_name(bus, KGPU_PROBE_BUS_NAME), 0);
        pump_for(200000);
        ck_assert_str_eq(devices("gpu.intel.com/i915"), "0000:03:00.0=Healthy@1;0000:08:00.0=Healthy@0");

        /* It comes back with one GPU less and one unhealthy: a full resync. */
        sd_bus_slot_unref(gpus[n_gpus - 1].slot);
        gpus[n_gpus - 1].slot = NULL;
        free(a->health);
        a->health = strdup("Unhealthy");
        ck_assert_int_ge(sd_bus_request_name(bus, KGPU_PROBE_BUS_NAME, 0), 0);
        wait_changed("gpu.intel.com/i915");
        ck_assert_str_eq(devices("gpu.intel.com/i915"), "0000:03:00.0=Unhealthy@1");

        stop_broker();
}
END_TEST

START_TEST(test_broker_state_unavailable) {
        static const char garbage[] = "this is not a database, and must stay exactly like this";
        char *ids[] = { (char *) "0000:03:00.0", NULL };
        sd_bus_message *r;
        char path[400], back[128] = {};
        int fd;

        snprintf(path, sizeof(path), "%s/kgpu.db", state_dir);
        fd = open(path, O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, garbage, sizeof(garbage)), (ssize_t) sizeof(garbage));
        close(fd);

        fake_gpu_add("a", "0000:03:00.0", "i915", "/dev/dri/card0", false);
        ck_assert_int_ge(sd_bus_request_name(bus, KGPU_PROBE_BUS_NAME, 0), 0);
        start_broker();
        wait_changed("gpu.intel.com/i915");

        /* Reads still work; allocations and the allocation list are refused. */
        ck_assert_str_eq(devices("gpu.intel.com/i915"), "0000:03:00.0=Healthy@0");
        ck_assert_str_eq(allocate("gpu.intel.com/i915", ids, NULL, 0), KGPU_ERROR_STATE);
        r = call(new_call("ListAllocations"));
        ck_assert(sd_bus_message_is_method_error(r, KGPU_ERROR_STATE));
        sd_bus_message_unref(r);
        stop_broker();

        fd = open(path, O_RDONLY|O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(read(fd, back, sizeof(back)), (ssize_t) sizeof(garbage));
        close(fd);
        ck_assert(memcmp(back, garbage, sizeof(garbage)) == 0);
}
END_TEST

START_TEST(test_broker_allocations_persist) {
        char *ids[] = { (char *) "0000:03:00.0", NULL };
        sd_bus_message *r;
        const char *res;
        uint64_t id, created;
        char **devs = NULL;

        fake_gpu_add("a", "0000:03:00.0", "i915", "/dev/dri/card0", false);
        ck_assert_int_ge(sd_bus_request_name(bus, KGPU_PROBE_BUS_NAME, 0), 0);
        start_broker();
        wait_changed("gpu.intel.com/i915");
        ck_assert_ptr_null(allocate("gpu.intel.com/i915", ids, NULL, 0));
        /* kill -9 right after the reply: the allocation is on disk. */
        ck_assert_int_eq(kill(broker_pid, SIGKILL), 0);
        ck_assert_int_eq(waitpid(broker_pid, NULL, 0), broker_pid);
        broker_pid = -1;

        start_broker();
        r = call(new_call("ListAllocations"));
        ck_assert(!sd_bus_message_is_method_error(r, NULL));
        ck_assert_int_gt(sd_bus_message_enter_container(r, 'a', "(tsast)"), 0);
        ck_assert_int_gt(sd_bus_message_enter_container(r, 'r', "tsast"), 0);
        ck_assert_int_ge(sd_bus_message_read(r, "ts", &id, &res), 0);
        ck_assert_int_ge(sd_bus_message_read_strv(r, &devs), 0);
        ck_assert_int_ge(sd_bus_message_read(r, "t", &created), 0);
        ck_assert_uint_eq(id, 1);
        ck_assert_str_eq(res, "gpu.intel.com/i915");
        ck_assert_str_eq(devs[0], "0000:03:00.0");
        ck_assert_uint_gt(created, 0);
        strv_free(devs);
        sd_bus_message_unref(r);
        stop_broker();
}
END_TEST

static Suite *broker_dbus_suite(void) {
        Suite *s = suite_create("broker-dbus");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_broker_follows_probe);
        tcase_add_test(tc, test_broker_hostile_probe);
        tcase_add_test(tc, test_broker_state_unavailable);
        tcase_add_test(tc, test_broker_allocations_persist);
        suite_add_tcase(s, tc);
        return s;
}

static int broker_dbus_prepare(void) {
        if (access("/usr/bin/dbus-daemon", X_OK) < 0)
                return 77;
        /* The broker logs to stderr in the children. */
        setenv("KGPU_LOG_TARGET", "stderr", 1);
        return 0;
}

KGPU_TEST_PREPARE(broker_dbus_prepare)
KGPU_TEST_SUITE(broker_dbus_suite)
