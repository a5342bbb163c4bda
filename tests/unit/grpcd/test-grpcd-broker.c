/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-grpcd-broker.c — kgpu-grpcd following io.kgpu.Broker1 and forwarding calls to it,
 * over a private dbus-daemon, in one process and one event loop.
 *
 * This process plays the broker on a second bus connection (a vtable answering
 * ListResources, GetDevices, Allocate, GetPreferredAllocation, PreStartContainer; it can
 * be told to fail or to never answer), serves the probe's io.kgpu.Kubelet1 on a third
 * (the probe's own KubeletDir and vtable, making the plugin sockets in the test's
 * directory) with one Intel GPU object under its ObjectManager, and plays the kubelet
 * (gRPC client calls on the plugin socket). Checks: waiting for an absent broker,
 * serving once it appears, the Allocate answer, an answer with a node of no GPU refused
 * (PERMISSION_DENIED, nothing of it forwarded), error mapping (UnknownDevice, Unhealthy, AccessDenied), health changes through
 * ResourcesChanged, a broker that does not answer (UNAVAILABLE after
 * Config.broker_timeout_ms), a broker that leaves the bus (UNAVAILABLE at once) and a
 * resource the broker stops listing (closed after the grace period), a failed GetDevices
 * (tried again). Exits 77 without
 * dbus-daemon.
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "common/bus-names.h"
#include "common/config.h"
#include "grpc/grpc-h2.h"
#include "common/util.h"
#include "daemons/grpc/manager.h"
#include "daemons/grpc/plugin.h"
#include "daemons/probe/kubelet.h"
#include "daemons/probe/kubelet-dbus.h"
#include "deviceplugin.pb-c.h"
#include "tests/unit/test-main.h"

#define RES "gpu.intel.com/i915"
#define GPU "0000:03:00.0"

static char dir[] = "/tmp/kgpu-test-grpcd-broker-XXXXXX";
static char sock_path[PATH_MAX];
static pid_t bus_pid = -1;
static sd_event *event;
static sd_bus *fake;                    /* the fake broker's connection */
static sd_bus *probe_bus;               /* the probe's Kubelet1 */
static KubeletDir *kdir;

static void on_kubelet_changed(KubeletDir *k, void *userdata) {
        ck_assert_int_ge(kubelet_dbus_emit(probe_bus), 0);
}

/* The probe's GPU object for GPU, as io.kgpu.Gpu1 exports it (only what grpcd reads). */
static const char *gpu_strings[] = { GPU, "intel", "i915", "", "/dev/dri/card0", "/dev/dri/renderD128", "" };
static char *gpu_nodes[] = { (char *) "/dev/dri/card0", (char *) "/dev/dri/renderD128", NULL };

static int gpu_string(sd_bus *bus, const char *path, const char *interface, const char *property,
                      sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        return sd_bus_message_append_basic(reply, 's', *(const char **) userdata);
}

static int gpu_index(sd_bus *bus, const char *path, const char *interface, const char *property,
                     sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        return sd_bus_message_append(reply, "i", -1);
}

static int gpu_node_list(sd_bus *bus, const char *path, const char *interface, const char *property,
                         sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        return sd_bus_message_append_strv(reply, streq(property, "DeviceNodes") ? gpu_nodes : (char *[]) { NULL });
}

static int gpu_migs(sd_bus *bus, const char *path, const char *interface, const char *property,
                    sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        return sd_bus_message_append(reply, "a(ussuuast)", 0);
}

static const sd_bus_vtable gpu_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Id", "s", gpu_string, 0 * sizeof(char *), SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Vendor", "s", gpu_string, 1 * sizeof(char *), SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Driver", "s", gpu_string, 2 * sizeof(char *), 0),
        SD_BUS_PROPERTY("Uuid", "s", gpu_string, 3 * sizeof(char *), 0),
        SD_BUS_PROPERTY("CardNode", "s", gpu_string, 4 * sizeof(char *), 0),
        SD_BUS_PROPERTY("RenderNode", "s", gpu_string, 5 * sizeof(char *), 0),
        SD_BUS_PROPERTY("MpsPipeDirectory", "s", gpu_string, 6 * sizeof(char *), 0),
        SD_BUS_PROPERTY("Index", "i", gpu_index, 0, 0),
        SD_BUS_PROPERTY("DeviceNodes", "as", gpu_node_list, 0, 0),
        SD_BUS_PROPERTY("ByPathNodes", "as", gpu_node_list, 0, 0),
        SD_BUS_PROPERTY("MigDevices", "a(ussuuast)", gpu_migs, 0, 0),
        SD_BUS_VTABLE_END,
};

/* io.kgpu.Kubelet1 as the probe serves it, for the test's directory, and the
 * ObjectManager with one Intel GPU object (what grpcd checks Allocate answers against). */
static void probe_start(void) {
        Config c = { .device_plugin_path = dir, .intel_enabled = true };

        ck_assert_int_eq(kubelet_dir_new(event, on_kubelet_changed, NULL, &kdir), 0);
        ck_assert_int_eq(kubelet_dir_configure(kdir, &c), 0);
        ck_assert_int_ge(sd_bus_open_system(&probe_bus), 0);
        ck_assert_int_ge(sd_bus_attach_event(probe_bus, event, 0), 0);
        ck_assert_int_ge(kubelet_dbus_add(probe_bus, kdir), 0);
        ck_assert_int_ge(sd_bus_add_object_manager(probe_bus, NULL, KGPU_PROBE_PATH), 0);
        ck_assert_int_ge(sd_bus_add_object_vtable(probe_bus, NULL, KGPU_GPU_PATH_PREFIX "/pci_0000_03_00_0",
                                                  KGPU_GPU_INTERFACE, gpu_vtable, gpu_strings), 0);
        ck_assert_int_ge(sd_bus_request_name(probe_bus, KGPU_PROBE_BUS_NAME, 0), 0);
        ck_assert_int_eq(kubelet_dir_start(kdir), 0);
}

static struct {
        bool listed;
        bool healthy;
        bool silent;                    /* never answer Allocate */
        bool deny;                      /* PreStartContainer: AccessDenied */
        bool foreign;                   /* Allocate: also a node of no GPU (/dev/sda) */
        unsigned fail_get_devices;      /* GetDevices calls still to fail */
        sd_bus_message *held;           /* an unanswered Allocate */
        unsigned n_allocate;
} broker;

static int fake_list_resources(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;

        ck_assert_int_ge(sd_bus_message_new_method_return(m, &reply), 0);
        ck_assert_int_ge(sd_bus_message_open_container(reply, 'a', "(sbb)"), 0);
        if (broker.listed)
                ck_assert_int_ge(sd_bus_message_append(reply, "(sbb)", RES, 0, 1), 0);
        ck_assert_int_ge(sd_bus_message_close_container(reply), 0);
        return sd_bus_send(NULL, reply, NULL);
}

static int fake_get_devices(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        const char *res;

        ck_assert_int_ge(sd_bus_message_read(m, "s", &res), 0);
        if (!broker.listed || !streq(res, RES))
                return sd_bus_error_setf(error, KGPU_ERROR_UNKNOWN_RESOURCE, "unknown resource %s", res);
        if (broker.fail_get_devices > 0) {
                broker.fail_get_devices--;
                return sd_bus_error_set(error, KGPU_ERROR_STATE, "busy");
        }
        ck_assert_int_ge(sd_bus_message_new_method_return(m, &reply), 0);
        ck_assert_int_ge(sd_bus_message_append(reply, "a(ssai)", 1, GPU,
                                               broker.healthy ? "Healthy" : "Unhealthy", 1, 0), 0);
        return sd_bus_send(NULL, reply, NULL);
}

static int fake_allocate(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_strv_free_ char **ids = NULL;
        const char *res;

        broker.n_allocate++;
        if (broker.silent) {
                sd_bus_message_unref(broker.held);
                broker.held = sd_bus_message_ref(m);
                return 1;
        }
        ck_assert_int_ge(sd_bus_message_read(m, "s", &res), 0);
        ck_assert_str_eq(res, RES);
        ck_assert_int_ge(sd_bus_message_enter_container(m, 'a', "as"), 0);
        ck_assert_int_ge(sd_bus_message_read_strv(m, &ids), 0);
        for (char **i = ids; *i; i++) {
                if (!streq(*i, GPU))
                        return sd_bus_error_setf(error, KGPU_ERROR_UNKNOWN_DEVICE, "unknown device '%s'", *i);
                if (!broker.healthy)
                        return sd_bus_error_setf(error, KGPU_ERROR_UNHEALTHY, "device '%s' is unhealthy", *i);
        }
        ck_assert_int_ge(sd_bus_message_new_method_return(m, &reply), 0);
        ck_assert_int_ge(sd_bus_message_open_container(reply, 'a', "(a{ss}a(ssb)a(sss)a{ss}as)"), 0);
        ck_assert_int_ge(sd_bus_message_open_container(reply, 'r', "a{ss}a(ssb)a(sss)a{ss}as"), 0);
        ck_assert_int_ge(sd_bus_message_append(reply, "a{ss}a(ssb)", 0, 0), 0);
        ck_assert_int_ge(sd_bus_message_append(reply, "a(sss)", broker.foreign ? 3 : 2,
                                               "/dev/dri/card0", "/dev/dri/card0", "rw",
                                               "/dev/dri/renderD128", "/dev/dri/renderD128", "rw",
                                               "/dev/sda", "/dev/sda", "rwm"), 0);
        ck_assert_int_ge(sd_bus_message_append(reply, "a{ss}as", 0, 0), 0);
        ck_assert_int_ge(sd_bus_message_close_container(reply), 0);
        ck_assert_int_ge(sd_bus_message_close_container(reply), 0);
        return sd_bus_send(NULL, reply, NULL);
}

static int fake_preferred(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        /* Always prefers GPU, one container. */
        return sd_bus_reply_method_return(m, "aas", 1, 1, GPU);
}

static int fake_prestart(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        if (broker.deny)
                return sd_bus_error_set(error, KGPU_ERROR_ACCESS_DENIED, "not allowed");
        return sd_bus_reply_method_return(m, NULL);
}

static const sd_bus_vtable fake_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD("ListResources", "", "a(sbb)", fake_list_resources, 0),
        SD_BUS_METHOD("GetDevices", "s", "a(ssai)", fake_get_devices, 0),
        SD_BUS_METHOD("GetPreferredAllocation", "sa(asasi)", "aas", fake_preferred, 0),
        SD_BUS_METHOD("Allocate", "saas", "a(a{ss}a(ssb)a(sss)a{ss}as)", fake_allocate, 0),
        SD_BUS_METHOD("PreStartContainer", "sas", "", fake_prestart, 0),
        SD_BUS_SIGNAL("ResourcesChanged", "as", 0),
        SD_BUS_VTABLE_END,
};

static void run_for(uint64_t usec) {
        uint64_t end = now_usec(CLOCK_MONOTONIC) + usec;

        while (now_usec(CLOCK_MONOTONIC) < end)
                ck_assert_int_ge(sd_event_run(event, 10 * 1000), 0);
}

typedef bool (*Cond)(void *userdata);

static void run_until(Cond cond, void *userdata, uint64_t timeout_usec, const char *what) {
        uint64_t end = now_usec(CLOCK_MONOTONIC) + timeout_usec;

        while (!cond(userdata)) {
                ck_assert_msg(now_usec(CLOCK_MONOTONIC) < end, "timed out waiting for %s", what);
                ck_assert_int_ge(sd_event_run(event, 10 * 1000), 0);
        }
}

static bool cond_socket(void *userdata) {
        struct stat st;
        bool want = userdata != NULL;

        return (lstat(sock_path, &st) == 0 && S_ISSOCK(st.st_mode)) == want;
}

static bool cond_health(void *userdata) {
        Manager *m = userdata;
        Plugin *p = manager_find_plugin(m, RES);

        return p && p->n_devices == 1 && p->devices[0].healthy == broker.healthy;
}

static bool cond_broker_present(void *userdata) {
        Manager *m = userdata;

        return m->broker_present;
}

static bool cond_broker_absent(void *userdata) {
        Manager *m = userdata;

        return !m->broker_present;
}

typedef struct Reply {
        bool done;
        GrpcStatus status;
        char *message;
        uint8_t *msg;
        size_t len;
        uint64_t usec;
} Reply;

static void on_reply(GrpcStatus status, const char *message, const uint8_t *msg, size_t len, void *userdata) {
        Reply *r = userdata;

        r->done = true;
        r->status = status;
        r->message = message ? strdup(message) : NULL;
        r->msg = len > 0 ? malloc(len) : NULL;
        if (len > 0)
                memcpy(r->msg, msg, len);
        r->len = len;
}

static bool cond_reply(void *userdata) {
        return ((Reply *) userdata)->done;
}

static void call(const char *method, const uint8_t *req, size_t len, Reply *r) {
        uint64_t t0 = now_usec(CLOCK_MONOTONIC);

        *r = (Reply) {};
        ck_assert_int_ge(grpc_client_call_unary(event, sock_path, method, req, len, 5 * 1000 * 1000,
                                                on_reply, r, NULL), 0);
        run_until(cond_reply, r, 10 * 1000 * 1000, method);
        r->usec = now_usec(CLOCK_MONOTONIC) - t0;
}

static void reply_done(Reply *r) {
        free(r->message);
        free(r->msg);
        *r = (Reply) {};
}

static void allocate(const char *id, Reply *r) {
        V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
        V1beta1__ContainerAllocateRequest c = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT, *cp = &c;
        char *ids[] = { (char *) id };
        uint8_t buf[256];
        size_t len;

        c.devices_ids = ids;
        c.n_devices_ids = 1;
        req.container_requests = &cp;
        req.n_container_requests = 1;
        len = v1beta1__allocate_request__pack(&req, buf);
        call("/v1beta1.DevicePlugin/Allocate", buf, len, r);
}

static void prestart(Reply *r) {
        V1beta1__PreStartContainerRequest req = V1BETA1__PRE_START_CONTAINER_REQUEST__INIT;
        char *ids[] = { (char *) GPU };
        uint8_t buf[256];
        size_t len;

        req.devices_ids = ids;
        req.n_devices_ids = 1;
        len = v1beta1__pre_start_container_request__pack(&req, buf);
        call("/v1beta1.DevicePlugin/PreStartContainer", buf, len, r);
}

static void emit_changed(void) {
        ck_assert_int_ge(sd_bus_emit_signal(fake, KGPU_BROKER_PATH, KGPU_BROKER_INTERFACE,
                                            "ResourcesChanged", "as", 1, RES), 0);
}

static void bus_daemon_start(void) {
        char conf[PATH_MAX], bus_conf[4096], addr[512] = {};
        int p[2], fd;
        ssize_t k;
        size_t n = 0;

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
                char conf_arg[PATH_MAX + 20];

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
}

static void bus_daemon_stop(void) {
        char p[PATH_MAX];

        if (bus_pid > 0) {
                kill(bus_pid, SIGTERM);
                waitpid(bus_pid, NULL, 0);
                bus_pid = -1;
        }
        snprintf(p, sizeof(p), "%s/bus.conf", dir);
        (void) unlink(p);
        snprintf(p, sizeof(p), "%s/bus", dir);
        (void) unlink(p);
}

/* test_follow_and_forward, step by step: each step starts from the state the one before
 * left (one manager, one event loop, one fake broker on one private bus). */

/* No broker yet: nothing served. */
static void step_no_broker_yet(Manager *m) {
        run_for(100 * 1000);
        ck_assert(!m->broker_present);
        ck_assert_uint_eq(m->n_plugins, 0);
}

/* The broker appears: its resource gets a socket (after GetDevices is retried
 * once: the first call fails). Returns the slot of the fake broker's vtable. */
static sd_bus_slot *step_broker_appears(Manager *m) {
        sd_bus_slot *vslot = NULL;

        broker.listed = true;
        broker.healthy = true;
        broker.fail_get_devices = 1;
        ck_assert_int_ge(sd_bus_open_system(&fake), 0);
        ck_assert_int_ge(sd_bus_attach_event(fake, event, 0), 0);
        ck_assert_int_ge(sd_bus_add_object_vtable(fake, &vslot, KGPU_BROKER_PATH, KGPU_BROKER_INTERFACE,
                                                  fake_vtable, NULL), 0);
        ck_assert_int_ge(sd_bus_request_name(fake, KGPU_BROKER_BUS_NAME, 0), 0);
        run_until(cond_socket, (void *) 1, 5 * 1000 * 1000, "the plugin socket");
        ck_assert_uint_eq(m->n_plugins, 1);
        ck_assert_uint_eq(broker.fail_get_devices, 0);
        return vslot;
}

static void step_options(void) {
        V1beta1__DevicePluginOptions *o;
        Reply r;

        call("/v1beta1.DevicePlugin/GetDevicePluginOptions", (const uint8_t *) "", 0, &r);
        ck_assert_int_eq(r.status, GRPC_STATUS_OK);
        o = v1beta1__device_plugin_options__unpack(NULL, r.len, r.msg);
        ck_assert_ptr_nonnull(o);
        ck_assert(!o->pre_start_required);
        ck_assert(o->get_preferred_allocation_available);
        v1beta1__device_plugin_options__free_unpacked(o, NULL);
        reply_done(&r);
}

/* Allocate: the broker's device specs reach the kubelet. */
static void step_allocate(void) {
        V1beta1__AllocateResponse *ar;
        Reply r;

        allocate(GPU, &r);
        ck_assert_int_eq(r.status, GRPC_STATUS_OK);
        ar = v1beta1__allocate_response__unpack(NULL, r.len, r.msg);
        ck_assert_ptr_nonnull(ar);
        ck_assert_uint_eq(ar->n_container_responses, 1);
        ck_assert_uint_eq(ar->container_responses[0]->n_devices, 2);
        ck_assert_str_eq(ar->container_responses[0]->devices[1]->host_path, "/dev/dri/renderD128");
        ck_assert_str_eq(ar->container_responses[0]->devices[1]->permissions, "rw");
        v1beta1__allocate_response__free_unpacked(ar, NULL);
        reply_done(&r);
}

/* An answer with a node of no GPU the probe exports does not reach the kubelet. */
static void step_foreign_node_refused(void) {
        Reply r;

        broker.foreign = true;
        allocate(GPU, &r);
        ck_assert_int_eq(r.status, GRPC_STATUS_PERMISSION_DENIED);
        ck_assert_ptr_nonnull(strstr(r.message, "/dev/sda"));
        ck_assert_uint_eq(r.len, 0);
        reply_done(&r);
        broker.foreign = false;
}

/* Errors map to gRPC statuses with the broker's message. */
static void step_errors_map_to_statuses(void) {
        Reply r;

        allocate("0000:99:00.0", &r);
        ck_assert_int_eq(r.status, GRPC_STATUS_INVALID_ARGUMENT);
        ck_assert_ptr_nonnull(strstr(r.message, "0000:99:00.0"));
        ck_assert_ptr_nonnull(strstr(r.message, KGPU_ERROR_UNKNOWN_DEVICE));
        reply_done(&r);
}

/* Health change through ResourcesChanged; then Allocate is refused. */
static void step_health_change(Manager *m) {
        Reply r;

        broker.healthy = false;
        emit_changed();
        run_until(cond_health, m, 5 * 1000 * 1000, "the health change");
        allocate(GPU, &r);
        ck_assert_int_eq(r.status, GRPC_STATUS_FAILED_PRECONDITION);
        reply_done(&r);
        broker.healthy = true;
        emit_changed();
        run_until(cond_health, m, 5 * 1000 * 1000, "the health change back");
}

/* GetPreferredAllocation. */
static void step_preferred_allocation(void) {
        V1beta1__PreferredAllocationRequest preq = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
        V1beta1__ContainerPreferredAllocationRequest pc = V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT, *pcp = &pc;
        V1beta1__PreferredAllocationResponse *pr;
        char *avail[] = { (char *) GPU };
        uint8_t pbuf[256];
        size_t plen;
        Reply r;

        pc.available_deviceids = avail;
        pc.n_available_deviceids = 1;
        pc.allocation_size = 1;
        preq.container_requests = &pcp;
        preq.n_container_requests = 1;
        plen = v1beta1__preferred_allocation_request__pack(&preq, pbuf);
        call("/v1beta1.DevicePlugin/GetPreferredAllocation", pbuf, plen, &r);
        ck_assert_int_eq(r.status, GRPC_STATUS_OK);
        pr = v1beta1__preferred_allocation_response__unpack(NULL, r.len, r.msg);
        ck_assert_ptr_nonnull(pr);
        ck_assert_uint_eq(pr->n_container_responses, 1);
        ck_assert_str_eq(pr->container_responses[0]->deviceids[0], GPU);
        v1beta1__preferred_allocation_response__free_unpacked(pr, NULL);
        reply_done(&r);
}

/* PreStartContainer, allowed and denied. */
static void step_prestart(void) {
        Reply r;

        prestart(&r);
        ck_assert_int_eq(r.status, GRPC_STATUS_OK);
        reply_done(&r);
        broker.deny = true;
        prestart(&r);
        ck_assert_int_eq(r.status, GRPC_STATUS_PERMISSION_DENIED);
        reply_done(&r);
}

/* A broker that does not answer: UNAVAILABLE after broker-timeout-ms, no hang. */
static void step_silent_broker(void) {
        Reply r;

        broker.silent = true;
        allocate(GPU, &r);
        ck_assert_int_eq(r.status, GRPC_STATUS_UNAVAILABLE);
        ck_assert_uint_ge(r.usec, 250 * 1000);
        ck_assert_uint_lt(r.usec, 2 * 1000 * 1000);
        reply_done(&r);
        broker.silent = false;
}

/* The broker leaves the bus: UNAVAILABLE at once. */
static void step_broker_leaves(Manager *m) {
        Reply r;

        ck_assert_int_ge(sd_bus_release_name(fake, KGPU_BROKER_BUS_NAME), 0);
        run_until(cond_broker_absent, m, 5 * 1000 * 1000, "the broker to be gone");
        allocate(GPU, &r);
        ck_assert_int_eq(r.status, GRPC_STATUS_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(r.message, "not running"));
        ck_assert_uint_lt(r.usec, 200 * 1000);
        reply_done(&r);
}

/* It comes back listing nothing: the resource stays for the grace period, then
 * its socket goes away. */
static void step_broker_back_listing_nothing(Manager *m) {
        broker.listed = false;
        ck_assert_int_ge(sd_bus_request_name(fake, KGPU_BROKER_BUS_NAME, 0), 0);
        run_until(cond_broker_present, m, 5 * 1000 * 1000, "the broker to be back");
        run_for(500 * 1000);
        ck_assert(cond_socket((void *) 1));
        run_until(cond_socket, NULL, PLUGIN_REMOVE_GRACE_USEC + 3 * 1000 * 1000, "the socket removal");
        ck_assert_uint_eq(m->n_plugins, 0);
}

START_TEST(test_follow_and_forward) {
        _cleanup_(config_freep) Config *config = NULL;
        _cleanup_free_ char *error = NULL;
        ConfigOverride ov[] = {
                { "device-plugin-path", dir },
                { "broker-timeout-ms", "300" },
        };
        sd_bus_slot *vslot = NULL;
        Manager *m = NULL;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(sock_path, sizeof(sock_path), "%s/kgpu-gpu.intel.com-i915.sock", dir);
        bus_daemon_start();
        ck_assert_int_ge(sd_event_new(&event), 0);

        ck_assert_int_eq(config_load_string("", 0, "test", ov, ELEMENTSOF(ov), &config, &error), 0);
        ck_assert_int_eq(manager_new(event, TAKE_PTR(config), &m), 0);
        probe_start();
        ck_assert_int_eq(manager_start(m), 0);

        step_no_broker_yet(m);
        vslot = step_broker_appears(m);
        step_options();
        step_allocate();
        step_foreign_node_refused();
        step_errors_map_to_statuses();
        step_health_change(m);
        step_preferred_allocation();
        step_prestart();
        step_silent_broker();
        step_broker_leaves(m);
        step_broker_back_listing_nothing(m);

        m = manager_free(m);
        sd_bus_slot_unref(vslot);
        broker.held = sd_bus_message_unref(broker.held);
        fake = sd_bus_flush_close_unref(fake);
        probe_bus = sd_bus_flush_close_unref(probe_bus);
        kdir = kubelet_dir_free(kdir);
        event = sd_event_unref(event);
        bus_daemon_stop();
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("grpcd-broker");
        TCase *tc = tcase_create("broker");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_follow_and_forward);
        suite_add_tcase(s, tc);
        return s;
}

static int grpcd_broker_prepare(void) {
        if (access("/usr/bin/dbus-daemon", X_OK) < 0)
                return 77;
        unsetenv("KGPU_DEVICE_PLUGIN_PATH");
        unsetenv("KGPU_KUBELET_SOCKET");
        unsetenv("KGPU_BROKER_TIMEOUT_MS");
        unsetenv("KGPU_CONFIG");
        unsetenv("CONFIG_FILE");
        return 0;
}

KGPU_TEST_PREPARE(grpcd_broker_prepare)
KGPU_TEST_SUITE(suite)
