/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-probe-testbed.c — kgpu-probed end to end: private dbus-daemon, kgpu-testbed,
 * the probe under libumockdev-preload, checked over D-Bus with sd-bus.
 *
 * Usage: test-probe-testbed KGPU_PROBED KGPU_TESTBED (meson passes both; KGPU_SOURCE_ROOT
 * names the tree for tests/integration/bus.conf.in and the dbus/ policies). Exit 0 pass, 1 fail
 * (with the daemons' logs printed), 77 skip (no dbus-daemon). Checks: enumeration of the
 * "two-gpus" layout with every property, READY=1/STATUS from sd_notify, remove ->
 * PropertiesChanged(Health=Unhealthy, HealthReason=removed) within 100 ms, add ->
 * Healthy again, Rescan allowed for root and refused with io.kgpu.Error.AccessDenied for
 * another uid, the "garbage" layout giving safe values, SIGTERM -> exit 0, bus gone ->
 * exit 1.
 * KGPU_TEST_KEEP_TMP=1 keeps the temp directory.
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-bus.h>

#include "common/bus-names.h"
#include "common/cleanup.h"
#include "common/util.h"

#define LATENCY_MAX_USEC 100000ULL

typedef struct Node {
        char tmp[64];
        char bus_address[128];
        pid_t bus_pid, testbed_pid, probe_pid;
        FILE *testbed_in, *testbed_out;
        int notify_fd;
        char umockdev_dir[256];
        char notified[16384];   /* every sd_notify message so far */
        sd_bus *bus;
} Node;

static const char *arg_probed, *arg_testbed;
static Node *current;   /* for fail(): stop everything and show the logs */

static void node_stop(Node *n, bool show_logs);
static void drain_notify(Node *n);
static void stop_pid(pid_t *pid, uint64_t grace_usec);

static _printf_(1, 2) _Noreturn void fail(const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        fputs("FAIL: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        if (current)
                node_stop(current, true);
        exit(EXIT_FAILURE);
}

#define check(cond) do { if (!(cond)) fail("%s:%d: %s", __FILE__, __LINE__, #cond); } while (0)
#define check_r(expr) do { int _r = (expr); if (_r < 0) fail("%s:%d: %s: %s", __FILE__, __LINE__, #expr, strerror(-_r)); } while (0)

static uint64_t now_mono(void) {
        return now_usec(CLOCK_MONOTONIC);
}

static pid_t spawn(char * const argv[], char * const env[], int in_fd, int out_fd, const char *log) {
        pid_t pid = fork();

        if (pid < 0)
                fail("fork: %m");
        if (pid == 0) {
                int fd;

                (void) prctl(PR_SET_PDEATHSIG, SIGTERM);
                fd = open(log, O_WRONLY|O_CREAT|O_APPEND|O_CLOEXEC, 0644);
                if (fd < 0)
                        _exit(127);
                if (dup2(in_fd >= 0 ? in_fd : open("/dev/null", O_RDONLY|O_CLOEXEC), 0) < 0 ||
                    dup2(out_fd >= 0 ? out_fd : fd, 1) < 0 || dup2(fd, 2) < 0)
                        _exit(127);
                for (size_t i = 0; env && env[i]; i++)
                        putenv(env[i]);
                execvp(argv[0], argv);
                _exit(127);
        }
        return pid;
}

static char *read_file(const char *path) {
        char *s = NULL;

        if (read_one_line_file_at(AT_FDCWD, path, 1 << 20, &s) < 0)
                return NULL;
        return s;
}

/* Replaces every occurrence of what (the template names them in its comment too). */
static char *replace(const char *s, const char *what, const char *with) {
        _cleanup_free_ char *r = strdup(s);
        char *p;

        while (r && (p = strstr(r, what))) {
                char *t;

                if (asprintf(&t, "%.*s%s%s", (int) (p - r), r, with, p + strlen(what)) < 0)
                        return NULL;
                free(r);
                r = t;
        }
        return TAKE_PTR(r);
}

static void write_bus_config(Node *n) {
        _cleanup_free_ char *in = NULL, *a = NULL, *b = NULL, *c = NULL, *path = NULL,
                *conf = NULL, *policy = NULL, *sock = NULL, *self = NULL, *extra = NULL;
        const char *src = getenv("KGPU_SOURCE_ROOT");
        FILE *f;

        check(src);
        check(asprintf(&path, "%s/tests/integration/bus.conf.in", src) > 0);
        in = read_file(path);
        check(in);
        check(asprintf(&sock, "%s/bus.sock", n->tmp) > 0);
        check(asprintf(&policy, "%s/dbus", src) > 0);
        a = replace(in, "@BUS_SOCKET@", sock);
        b = replace(a, "@POLICY_DIR@", policy);
        /* Let uids 1 and 65534 connect and reach the probe through the bus policy, so the
         * daemon's own uid check is what decides about Rescan. */
        /* Not root: the probe runs as the caller, who then needs root's rights on the name. */
        if (getuid() != 0) {
                struct passwd *pw = getpwuid(getuid());

                check(pw);
                check(asprintf(&self, "<policy user=\"%s\"><allow own=\"io.kgpu.Probe1\"/>"
                               "<allow send_destination=\"io.kgpu.Probe1\"/></policy>\n", pw->pw_name) > 0);
        }
        check(asprintf(&extra,
                       "<policy context=\"default\"><allow user=\"*\"/></policy>\n"
                       "<policy user=\"nobody\"><allow send_destination=\"io.kgpu.Probe1\"/></policy>\n"
                       "<policy user=\"daemon\"><allow send_destination=\"io.kgpu.Probe1\"/></policy>\n%s",
                       self ?: "") > 0);
        c = replace(b, "@EXTRA_POLICY@", extra);
        check(a && b && c);
        check(asprintf(&conf, "%s/bus.conf", n->tmp) > 0);
        f = fopen(conf, "we");
        check(f);
        fputs(c, f);
        check(fclose(f) == 0);
        snprintf(n->bus_address, sizeof(n->bus_address), "unix:path=%s", sock);
}

static void wait_for_file(const char *path, uint64_t timeout_usec) {
        uint64_t end = now_mono() + timeout_usec;

        while (access(path, F_OK) < 0) {
                if (now_mono() > end)
                        fail("%s did not appear", path);
                usleep(10000);
        }
}

static void node_start_bus(Node *n) {
        _cleanup_free_ char *cfg = NULL, *log = NULL, *sock = NULL;

        write_bus_config(n);
        check(asprintf(&cfg, "--config-file=%s/bus.conf", n->tmp) > 0);
        check(asprintf(&log, "%s/bus.log", n->tmp) > 0);
        char *argv[] = { (char *) "dbus-daemon", cfg, (char *) "--nofork", (char *) "--nopidfile", NULL };
        n->bus_pid = spawn(argv, NULL, -1, -1, log);
        check(asprintf(&sock, "%s/bus.sock", n->tmp) > 0);
        wait_for_file(sock, 5000000);
}

static void node_start_testbed(Node *n, const char *layout) {
        _cleanup_free_ char *log = NULL;
        int in[2], out[2];
        char line[512];

        check(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
        check(asprintf(&log, "%s/testbed.log", n->tmp) > 0);
        char *argv[] = { (char *) arg_testbed, (char *) "--layout", (char *) layout, NULL };
        n->testbed_pid = spawn(argv, NULL, in[0], out[1], log);
        close(in[0]);
        close(out[1]);
        n->testbed_in = fdopen(in[1], "we");
        n->testbed_out = fdopen(out[0], "re");
        check(n->testbed_in && n->testbed_out);

        while (fgets(line, sizeof(line), n->testbed_out)) {
                const char *v;

                line[strcspn(line, "\n")] = 0;
                if ((v = startswith(line, "UMOCKDEV_DIR=")))
                        snprintf(n->umockdev_dir, sizeof(n->umockdev_dir), "%s", v);
                else if (streq(line, "ready"))
                        break;
        }
        check(n->umockdev_dir[0]);
}

static void testbed_send(Node *n, const char *cmd) {
        drain_notify(n);
        fprintf(n->testbed_in, "%s\n", cmd);
        fflush(n->testbed_in);
}

static void testbed_reply(Node *n, const char *cmd, const char *expect) {
        char line[512];

        check(fgets(line, sizeof(line), n->testbed_out));
        line[strcspn(line, "\n")] = 0;
        if (!startswith(line, expect))
                fail("testbed answered '%s' to '%s'", line, cmd);
}

static void testbed_cmd(Node *n, const char *cmd, const char *expect) {
        testbed_send(n, cmd);
        testbed_reply(n, cmd, expect);
}

/* Reads whatever sd_notify datagrams are queued, without blocking. The queue of a
 * datagram socket is short (net.unix.max_dgram_qlen, 10 by default) and a full one
 * blocks the sender, so every wait loop drains it. */
static void drain_notify(Node *n) {
        char buf[4096];

        for (;;) {
                size_t used = strlen(n->notified);
                ssize_t k = recv(n->notify_fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);

                if (k <= 0)
                        return;
                buf[k] = 0;
                snprintf(n->notified + used, sizeof(n->notified) - used, "%s\n", buf);
        }
}

/* Reads sd_notify datagrams into n->notified until it contains want (or timeout). */
static void wait_notify(Node *n, const char *want, uint64_t timeout_usec) {
        uint64_t end = now_mono() + timeout_usec;
        char buf[4096];

        for (;;) {
                size_t used = strlen(n->notified);

                if (strstr(n->notified, want))
                        return;
                struct pollfd p = { .fd = n->notify_fd, .events = POLLIN };
                int64_t left = (int64_t) (end - now_mono());
                ssize_t k;

                if (left <= 0)
                        fail("probe did not send '%s' via sd_notify", want);
                if (poll(&p, 1, (int) (left / 1000) + 1) <= 0)
                        continue;
                k = recv(n->notify_fd, buf, sizeof(buf) - 1, 0);
                if (k <= 0)
                        continue;
                buf[k] = 0;
                snprintf(n->notified + used, sizeof(n->notified) - used, "%s\n", buf);
        }
}

static void node_start_probe(Node *n) {
        _cleanup_free_ char *log = NULL, *notify = NULL, *e_dir = NULL, *e_bus = NULL, *e_notify = NULL,
                *e_broker = NULL, *e_labels = NULL, *e_cdi = NULL;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };

        check(asprintf(&notify, "%s/notify", n->tmp) > 0);
        check(strlen(notify) < sizeof(sa.sun_path));
        strcpy(sa.sun_path, notify);
        n->notify_fd = socket(AF_UNIX, SOCK_DGRAM|SOCK_CLOEXEC, 0);
        check(n->notify_fd >= 0);
        check(bind(n->notify_fd, (struct sockaddr *) &sa, sizeof(sa)) == 0);

        check(asprintf(&log, "%s/probe.log", n->tmp) > 0);
        check(asprintf(&e_dir, "UMOCKDEV_DIR=%s", n->umockdev_dir) > 0);
        check(asprintf(&e_bus, "DBUS_SYSTEM_BUS_ADDRESS=%s", n->bus_address) > 0);
        check(asprintf(&e_notify, "NOTIFY_SOCKET=%s", notify) > 0);
        /* The broker user may Rescan: "daemon" (uid 1) as root, else the caller itself. */
        if (getuid() == 0)
                e_broker = strdup("KGPU_BROKER_USER=daemon");
        else {
                struct passwd *pw = getpwuid(getuid());

                check(pw);
                check(asprintf(&e_broker, "KGPU_BROKER_USER=%s", pw->pw_name) > 0);
        }
        check(e_broker);
        /* The probe's generated files go to the temp directory, never the host's. */
        check(asprintf(&e_labels, "KGPU_LABELS_FEATURE_FILE=%s/nfd/kgpu", n->tmp) > 0);
        check(asprintf(&e_cdi, "KGPU_CDI_SPEC_DIRECTORY=%s/cdi", n->tmp) > 0);
        char *env[] = { (char *) "LD_PRELOAD=libumockdev-preload.so.0", e_dir, e_bus, e_notify,
                        (char *) "KGPU_LOG_LEVEL=debug", e_broker, e_labels, e_cdi,
                        (char *) "ASAN_OPTIONS=verify_asan_link_order=0", NULL };
        n->probe_pid = spawn((char *[]) { (char *) arg_probed, NULL }, env, -1, -1, log);
        wait_notify(n, "READY=1", 10000000);
}

static void node_connect(Node *n) {
        check_r(sd_bus_new(&n->bus));
        check_r(sd_bus_set_address(n->bus, n->bus_address));
        check_r(sd_bus_set_bus_client(n->bus, true));
        check_r(sd_bus_start(n->bus));
}

static void node_start(Node *n, const char *layout) {
        memset(n, 0, sizeof(*n));
        n->notify_fd = -EBADF;
        snprintf(n->tmp, sizeof(n->tmp), "/tmp/kgpu-test-probe-XXXXXX");
        check(mkdtemp(n->tmp));
        check(chmod(n->tmp, 0755) == 0);        /* other uids connect to the bus socket */
        current = n;
        node_start_bus(n);
        node_start_testbed(n, layout);
        node_start_probe(n);
        node_connect(n);
}

static void cat_log(const char *tmp, const char *name) {
        _cleanup_free_ char *p = NULL, *s = NULL;

        if (asprintf(&p, "%s/%s", tmp, name) < 0)
                return;
        s = read_file(p);
        fprintf(stderr, "---- %s ----\n%s\n", name, s ?: "(none)");
}

/* Waits up to grace_usec for the process to exit by itself, then SIGTERM, then SIGKILL. */
static void stop_pid(pid_t *pid, uint64_t grace_usec) {
        uint64_t end = now_mono() + grace_usec;

        if (*pid <= 0)
                return;
        while (grace_usec > 0 && waitpid(*pid, NULL, WNOHANG) == 0) {
                if (now_mono() > end)
                        break;
                usleep(5000);
        }
        if (grace_usec > 0 && now_mono() <= end) {
                *pid = 0;
                return;
        }
        end = now_mono() + 5000000;
        (void) kill(*pid, SIGTERM);
        while (waitpid(*pid, NULL, WNOHANG) == 0) {
                if (now_mono() > end) {
                        fprintf(stderr, "pid %d ignored SIGTERM, killing it\n", (int) *pid);
                        (void) kill(*pid, SIGKILL);
                        (void) waitpid(*pid, NULL, 0);
                        break;
                }
                usleep(10000);
        }
        *pid = 0;
}

static void node_stop(Node *n, bool show_logs) {
        current = NULL;
        n->bus = sd_bus_flush_close_unref(n->bus);
        stop_pid(&n->probe_pid, 0);
        if (n->testbed_in) {
                fputs("quit\n", n->testbed_in);
                fclose(n->testbed_in);
                n->testbed_in = NULL;
        }
        stop_pid(&n->testbed_pid, 3000000);
        if (n->testbed_out) {
                fclose(n->testbed_out);
                n->testbed_out = NULL;
        }
        stop_pid(&n->bus_pid, 0);
        n->notify_fd = safe_close(n->notify_fd);
        if (show_logs) {
                cat_log(n->tmp, "probe.log");
                cat_log(n->tmp, "testbed.log");
                cat_log(n->tmp, "bus.log");
        }
        if (!getenv("KGPU_TEST_KEEP_TMP") && n->tmp[0]) {
                _cleanup_free_ char *cmd = NULL;

                if (asprintf(&cmd, "rm -rf '%s'", n->tmp) > 0)
                        (void) system(cmd);
        }
}

static char *gpu_path(const char *id) {
        char *p = NULL;

        check_r(sd_bus_path_encode(KGPU_GPU_PATH_PREFIX, id, &p));
        return p;
}

static char *get_s(Node *n, const char *path, const char *prop) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        char *s = NULL;
        int r;

        r = sd_bus_get_property_string(n->bus, KGPU_PROBE_BUS_NAME, path, KGPU_GPU_INTERFACE, prop, &e, &s);
        if (r < 0)
                fail("Get %s %s: %s", path, prop, e.message ?: strerror(-r));
        return s;
}

static void get_basic(Node *n, const char *path, const char *prop, char type, void *ret) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        int r;

        r = sd_bus_get_property_trivial(n->bus, KGPU_PROBE_BUS_NAME, path, KGPU_GPU_INTERFACE, prop, &e, type, ret);
        if (r < 0)
                fail("Get %s %s: %s", path, prop, e.message ?: strerror(-r));
}

static void expect_s(Node *n, const char *path, const char *prop, const char *want) {
        _cleanup_free_ char *s = get_s(n, path, prop);

        if (!streq(s, want))
                fail("%s %s = '%s', expected '%s'", path, prop, s, want);
}

/* For values that follow from later uevents of the same command (the render node's add
 * comes after the card's). */
static void expect_s_eventually(Node *n, const char *path, const char *prop, const char *want) {
        uint64_t end = now_mono() + 2000000;

        for (;;) {
                _cleanup_free_ char *s = get_s(n, path, prop);

                if (streq(s, want))
                        return;
                if (now_mono() > end)
                        fail("%s %s = '%s', expected '%s'", path, prop, s, want);
                drain_notify(n);
                usleep(5000);
        }
}

static unsigned count_managed_objects(Node *n) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        unsigned count = 0;
        int r;

        r = sd_bus_call_method(n->bus, KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH,
                               "org.freedesktop.DBus.ObjectManager", "GetManagedObjects", &e, &reply, "");
        if (r < 0)
                fail("GetManagedObjects: %s", e.message ?: strerror(-r));
        check_r(sd_bus_message_enter_container(reply, 'a', "{oa{sa{sv}}}"));
        while ((r = sd_bus_message_enter_container(reply, 'e', "oa{sa{sv}}")) > 0) {
                const char *path;

                check_r(sd_bus_message_read(reply, "o", &path));
                check(startswith(path, KGPU_GPU_PATH_PREFIX "/"));
                check_r(sd_bus_message_skip(reply, "a{sa{sv}}"));
                check_r(sd_bus_message_exit_container(reply));
                count++;
        }
        check_r(r);
        return count;
}

typedef struct HealthWait {
        const char *want;
        bool seen;
        char reason[64];
} HealthWait;

static int on_properties_changed(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        HealthWait *w = userdata;
        const char *iface, *name, *health = NULL, *reason = NULL;
        int r;

        r = sd_bus_message_read(m, "s", &iface);
        if (r < 0 || !streq(iface, KGPU_GPU_INTERFACE))
                return 0;
        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        if (r < 0)
                return 0;
        while (sd_bus_message_enter_container(m, 'e', "sv") > 0) {
                const char **target = NULL;

                if (sd_bus_message_read(m, "s", &name) < 0)
                        return 0;
                if (streq(name, "Health"))
                        target = &health;
                else if (streq(name, "HealthReason"))
                        target = &reason;
                if (target) {
                        if (sd_bus_message_read(m, "v", "s", target) < 0)
                                return 0;
                } else if (sd_bus_message_skip(m, "v") < 0)
                        return 0;
                if (sd_bus_message_exit_container(m) < 0)
                        return 0;
        }
        if (health && streq(health, w->want)) {
                w->seen = true;
                snprintf(w->reason, sizeof(w->reason), "%s", reason ?: "(not sent)");
        }
        return 0;
}

/* Sends cmd to the testbed and returns the usec until Health == want is signalled. The
 * testbed's answer is read afterwards: it sends the uevents first and then deletes the
 * sysfs entries, which takes umockdev several ms that are not the probe's latency. */
static uint64_t measure_health_signal(Node *n, const char *path, const char *cmd, const char *want,
                                      char *ret_reason, size_t reason_size) {
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        HealthWait w = { .want = want };
        uint64_t t0, t, end;

        check_r(sd_bus_match_signal(n->bus, &slot, KGPU_PROBE_BUS_NAME, path,
                                    "org.freedesktop.DBus.Properties", "PropertiesChanged",
                                    on_properties_changed, &w));
        t0 = now_mono();
        testbed_send(n, cmd);
        end = t0 + 5000000;
        while (!w.seen) {
                int r = sd_bus_process(n->bus, NULL);

                check_r(r);
                drain_notify(n);
                if (w.seen)
                        break;
                if (now_mono() > end)
                        fail("no PropertiesChanged with Health=%s after '%s'", want, cmd);
                if (r == 0)
                        check_r(sd_bus_wait(n->bus, 10000));
        }
        t = now_mono() - t0;
        testbed_reply(n, cmd, "ok");
        snprintf(ret_reason, reason_size, "%s", w.reason);
        return t;
}

static void call_rescan_as(Node *n, uid_t uid, const char *want_error) {
        pid_t pid = fork();
        int status;

        check(pid >= 0);
        if (pid == 0) {
                _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
                sd_bus *b = NULL;
                int r;

                if (uid != 0 && setresuid(uid, uid, uid) < 0)
                        _exit(2);
                if (sd_bus_new(&b) < 0 || sd_bus_set_address(b, n->bus_address) < 0 ||
                    sd_bus_set_bus_client(b, true) < 0 || sd_bus_start(b) < 0)
                        _exit(3);
                r = sd_bus_call_method(b, KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH, KGPU_PROBE_INTERFACE,
                                       "Rescan", &e, NULL, "");
                if (!want_error) {
                        if (r < 0)
                                fprintf(stderr, "Rescan as uid %u: %s: %s\n", (unsigned) uid,
                                        e.name ?: "?", e.message ?: strerror(-r));
                        _exit(r >= 0 ? 0 : 4);
                }
                if (r >= 0)
                        _exit(5);
                fprintf(stderr, "Rescan as uid %u: %s: %s\n", (unsigned) uid, e.name, e.message);
                _exit(streq(e.name, want_error) ? 0 : 6);
        }
        while (waitpid(pid, &status, WNOHANG) == 0) {
                drain_notify(n);
                usleep(1000);
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fail("Rescan as uid %u: child status %d", (unsigned) uid, status);
}

static void test_two_gpus(void) {
        _cleanup_free_ char *p3 = gpu_path("0000:03:00.0"), *p4 = gpu_path("0000:04:00.0");
        char reason[64];
        uint16_t q;
        uint32_t u;
        int32_t i;
        uint64_t t, lat;
        Node n;

        node_start(&n, "two-gpus");
        wait_notify(&n, "STATUS=2 GPUs", 0);    /* sent before READY=1 */

        check(count_managed_objects(&n) == 2);

        expect_s(&n, p3, "Id", "0000:03:00.0");
        expect_s(&n, p3, "Vendor", "intel");
        expect_s(&n, p3, "Driver", "i915");
        expect_s(&n, p3, "PciAddress", "0000:03:00.0");
        expect_s(&n, p3, "CardNode", "/dev/dri/card0");
        expect_s(&n, p3, "RenderNode", "/dev/dri/renderD128");
        expect_s(&n, p3, "Health", "Healthy");
        expect_s(&n, p3, "HealthReason", "");
        expect_s(&n, p3, "Product", "");
        get_basic(&n, p3, "VendorId", 'q', &q);
        check(q == 0x8086);
        get_basic(&n, p3, "DeviceId", 'q', &q);
        check(q == 0x56a0);
        get_basic(&n, p3, "Tiles", 'u', &u);
        check(u == 1);
        get_basic(&n, p3, "NumaNode", 'i', &i);
        check(i == 0);
        get_basic(&n, p3, "MemoryBytes", 't', &t);
        check(t == UINT64_C(17179869184));

        expect_s(&n, p4, "Driver", "xe");
        expect_s(&n, p4, "CardNode", "/dev/dri/card1");
        expect_s(&n, p4, "RenderNode", "/dev/dri/renderD129");
        get_basic(&n, p4, "DeviceId", 'q', &q);
        check(q == 0xe20b);
        get_basic(&n, p4, "MemoryBytes", 't', &t);
        check(t == UINT64_C(12884901888));      /* xe: tile0/physical_vram_size_bytes */

        /* A change event re-reads the GPU and changes nothing (no signal expected). It
         * also warms up umockdev's uevent sender in the testbed, which is created on
         * first use, so the timing below is the probe's path and not that setup. */
        testbed_cmd(&n, "change 0000:04:00.0", "ok");
        expect_s(&n, p4, "Health", "Healthy");

        /* Hot-unplug: signal within 100 ms, object kept. */
        lat = measure_health_signal(&n, p3, "remove 0000:03:00.0", "Unhealthy", reason, sizeof(reason));
        printf("remove -> PropertiesChanged(Health=Unhealthy): %.3f ms\n", lat / 1000.0);
        check(streq(reason, "removed"));
        if (lat > LATENCY_MAX_USEC)
                fail("remove signal took %.3f ms (limit %.0f ms)", lat / 1000.0, LATENCY_MAX_USEC / 1000.0);
        check(count_managed_objects(&n) == 2);
        expect_s(&n, p3, "HealthReason", "removed");
        expect_s(&n, p4, "Health", "Healthy");
        wait_notify(&n, "STATUS=2 GPUs (1 unhealthy)", 2000000);

        lat = measure_health_signal(&n, p3, "add 0000:03:00.0", "Healthy", reason, sizeof(reason));
        printf("add -> PropertiesChanged(Health=Healthy): %.3f ms\n", lat / 1000.0);
        check(streq(reason, ""));
        expect_s_eventually(&n, p3, "RenderNode", "/dev/dri/renderD128");
        expect_s(&n, p3, "HealthReason", "");

        /* The xe GPU too, and repeatedly. */
        for (int k = 0; k < 3; k++) {
                lat = measure_health_signal(&n, p4, "remove 0000:04:00.0", "Unhealthy", reason, sizeof(reason));
                printf("remove #%d (xe): %.3f ms\n", k, lat / 1000.0);
                check(lat <= LATENCY_MAX_USEC);
                (void) measure_health_signal(&n, p4, "add 0000:04:00.0", "Healthy", reason, sizeof(reason));
        }

        testbed_cmd(&n, "remove 0000:09:00.0", "error:");
        testbed_cmd(&n, "frobnicate 0000:03:00.0", "error:");

        /* Rescan: root and the broker user ("daemon" here) yes, others no; the bus
         * policy lets both through on purpose, so the probe's own check decides. Not
         * root: the caller is the broker user and only that is checked. */
        call_rescan_as(&n, getuid(), NULL);
        if (getuid() == 0) {
                call_rescan_as(&n, 1, NULL);
                call_rescan_as(&n, 65534, KGPU_ERROR_ACCESS_DENIED);
        }
        check(count_managed_objects(&n) == 2);
        expect_s(&n, p3, "Health", "Healthy");

        /* SIGTERM: clean exit. */
        {
                int status;

                check(kill(n.probe_pid, SIGTERM) == 0);
                check(waitpid(n.probe_pid, &status, 0) == n.probe_pid);
                n.probe_pid = 0;
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                        fail("probe exit status %d after SIGTERM", status);
        }
        node_stop(&n, false);
}

static void test_garbage(void) {
        _cleanup_free_ char *p3 = gpu_path("0000:03:00.0"), *p5 = gpu_path("0000:05:00.0");
        uint16_t q;
        uint32_t u;
        int32_t i;
        uint64_t t;
        Node n;

        node_start(&n, "garbage");
        check(count_managed_objects(&n) == 2);

        get_basic(&n, p3, "DeviceId", 'q', &q);
        check(q == 0);
        get_basic(&n, p3, "NumaNode", 'i', &i);
        check(i == -1);
        get_basic(&n, p3, "MemoryBytes", 't', &t);
        check(t == 0);
        get_basic(&n, p3, "Tiles", 'u', &u);
        check(u == 1);
        expect_s(&n, p3, "RenderNode", "");

        get_basic(&n, p5, "NumaNode", 'i', &i);
        check(i == -1);
        get_basic(&n, p5, "MemoryBytes", 't', &t);
        check(t == 0);
        get_basic(&n, p5, "Tiles", 'u', &u);
        check(u == 3);

        /* The bus goes away: the probe exits with a failure (systemd restarts it). */
        {
                uint64_t end = now_mono() + 5000000;
                int status;

                check(kill(n.probe_pid, 0) == 0);
                stop_pid(&n.bus_pid, 0);
                while (waitpid(n.probe_pid, &status, WNOHANG) == 0) {
                        if (now_mono() > end)
                                fail("probe still running 5 s after the bus went away");
                        usleep(10000);
                }
                n.probe_pid = 0;
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 1)
                        fail("probe exit status %d after losing the bus, expected 1", status);
        }
        node_stop(&n, false);
}

int main(int argc, char *argv[]) {
        if (argc != 3) {
                fprintf(stderr, "Usage: %s KGPU_PROBED KGPU_TESTBED\n", argv[0]);
                return EXIT_FAILURE;
        }
        arg_probed = argv[1];
        arg_testbed = argv[2];
        if (system("command -v dbus-daemon >/dev/null") != 0) {
                fprintf(stderr, "dbus-daemon not found, skipping.\n");
                return 77;
        }
        (void) signal(SIGPIPE, SIG_IGN);        /* a dead testbed must not kill the test */
        unsetenv("KGPU_CONFIG");
        unsetenv("CONFIG_FILE");

        test_two_gpus();
        test_garbage();
        printf("all probe end-to-end checks passed\n");
        return EXIT_SUCCESS;
}
