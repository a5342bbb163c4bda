/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-probe-kubelet.c — the probe's side of the kubelet's directories (kubelet.c), on a
 * real directory, without a bus.
 *
 * Asserts: plugin sockets are made only under kgpu-*.sock names of valid resource names
 * of an enabled vendor, listening, mode 0600, replacing a stale socket and a symlink
 * (which is removed, its target left alone); the state (registration socket inode and
 * words, the kgpu sockets listed) follows the directory through inotify and the changed
 * callback; connecting works to a listening socket owned by the probe's uid and is
 * refused, naming what is there, for a symlink, a regular file, a FIFO and a socket of
 * another owner (as root: owned by nobody); a stale socket is ECONNREFUSED; close
 * removes only the socket with the given inode; a missing directory is waited for.
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "common/config.h"
#include "common/util.h"
#include "daemons/probe/kubelet.h"
#include "tests/unit/test-main.h"

static char root[] = "/tmp/kgpu-test-kubelet-XXXXXX";
static char dp[256], ksock[512], prsock[512];
static sd_event *event;
static unsigned changes;

static void on_changed(KubeletDir *k, void *userdata) {
        changes++;
}

static void run_for(uint64_t usec) {
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + usec;

        while (now_usec(CLOCK_MONOTONIC) < deadline)
                ck_assert_int_ge(sd_event_run(event, 10 * 1000), 0);
}

/* Runs the loop until the registration socket's inode is `inode` (5 s at most). */
static void run_until_inode(KubeletDir *k, uint64_t inode) {
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + 5 * 1000 * 1000;

        while (kubelet_dir_kubelet_inode(k) != inode && now_usec(CLOCK_MONOTONIC) < deadline)
                ck_assert_int_ge(sd_event_run(event, 20 * 1000), 0);
        ck_assert_uint_eq(kubelet_dir_kubelet_inode(k), inode);
}

static int listen_at(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd;

        ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
        memcpy(sa.sun_path, path, strlen(path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ck_assert_int_eq(listen(fd, 4), 0);
        return fd;
}

static uint64_t inode_of(const char *path) {
        struct stat st;

        ck_assert_int_eq(lstat(path, &st), 0);
        return st.st_ino;
}

static KubeletDir *new_dir(bool intel, bool nvidia) {
        Config c = {
                .device_plugin_path = dp,
                .pod_resources_socket = prsock,
                .intel_enabled = intel,
                .nvidia_enabled = nvidia,
        };
        KubeletDir *k = NULL;

        ck_assert_int_eq(kubelet_dir_new(event, on_changed, NULL, &k), 0);
        ck_assert_int_eq(kubelet_dir_configure(k, &c), 0);
        return k;
}

/* Asserts kubelet_dir_connect() refuses with a message containing `what`. */
static void assert_refused(KubeletDir *k, KubeletSocketKind kind, const char *what) {
        _cleanup_free_ char *msg = NULL;
        int fd = -1;

        ck_assert_int_eq(kubelet_dir_connect(k, kind, &fd, &msg), -EPERM);
        ck_assert_int_eq(fd, -1);
        ck_assert_ptr_nonnull(msg);
        ck_assert_msg(strstr(msg, what), "message '%s' lacks '%s'", msg, what);
        ck_assert_msg(strstr(msg, kind == KUBELET_SOCKET_REGISTRATION ? ksock : prsock), "message '%s' lacks the path", msg);
        ck_assert_str_eq(kubelet_dir_last_error(k), msg);
}

START_TEST(test_plugin_sockets) {
        _cleanup_(kubelet_dir_freep) KubeletDir *k = NULL;
        _cleanup_free_ char *msg = NULL;
        char path[1024], target[1024];
        const KubeletPluginSocket *l;
        uint64_t inode, inode2;
        struct stat st;
        size_t n;
        int fd = -1, fd2 = -1;

        k = new_dir(true, false);
        ck_assert_int_eq(kubelet_dir_start(k), 0);

        /* Names of other vendors, other domains and invalid names: refused, nothing made. */
        ck_assert_int_eq(kubelet_dir_open_plugin_socket(k, "nvidia.com/gpu", NULL, &fd, &inode, &msg), -EPERM);
        ck_assert_ptr_nonnull(strstr(msg, "nvidia.com/gpu"));
        msg = mfree(msg);
        ck_assert_int_eq(kubelet_dir_open_plugin_socket(k, "example.com/x", NULL, &fd, &inode, &msg), -EPERM);
        msg = mfree(msg);
        ck_assert_int_eq(kubelet_dir_open_plugin_socket(k, "../../etc/passwd", NULL, &fd, &inode, &msg), -EINVAL);
        msg = mfree(msg);
        ck_assert_int_eq(kubelet_dir_open_plugin_socket(k, "gpu.intel.com/kubelet.sock/x", NULL, &fd, &inode, &msg),
                         -EINVAL);
        msg = mfree(msg);
        ck_assert_int_eq(fd, -1);

        /* A valid name: a listening socket, 0600, our file name. */
        ck_assert_int_eq(kubelet_dir_open_plugin_socket(k, "gpu.intel.com/i915", NULL, &fd, &inode, &msg), 0);
        ck_assert_ptr_null(msg);
        snprintf(path, sizeof(path), "%s/kgpu-gpu.intel.com-i915.sock", dp);
        ck_assert_int_eq(lstat(path, &st), 0);
        ck_assert(S_ISSOCK(st.st_mode));
        ck_assert_uint_eq(st.st_mode & 0777, 0600);
        ck_assert_uint_eq(st.st_ino, inode);
        ck_assert_str_eq(kubelet_dir_last_error(k), "");
        {
                int val = 0;
                socklen_t sl = sizeof(val);

                ck_assert_int_eq(getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &val, &sl), 0);
                ck_assert_int_eq(val, 1);
        }

        /* The listing follows the directory. */
        changes = 0;
        run_for(100 * 1000);
        ck_assert_uint_ge(changes, 1);
        l = kubelet_dir_plugin_sockets(k, &n);
        ck_assert_uint_eq(n, 1);
        ck_assert_str_eq(l[0].name, "kgpu-gpu.intel.com-i915.sock");
        ck_assert_uint_eq(l[0].inode, inode);

        /* Asked again: a new socket replaces the old one. */
        ck_assert_int_eq(kubelet_dir_open_plugin_socket(k, "gpu.intel.com/i915", NULL, &fd2, &inode2, &msg), 0);
        ck_assert_uint_ne(inode, inode2);
        ck_assert_uint_eq(inode_of(path), inode2);
        run_for(100 * 1000);
        l = kubelet_dir_plugin_sockets(k, &n);
        ck_assert_uint_eq(n, 1);
        ck_assert_uint_eq(l[0].inode, inode2);

        /* Close with a stale inode: nothing removed; with the current one: removed. */
        ck_assert_int_eq(kubelet_dir_close_plugin_socket(k, "gpu.intel.com/i915", inode), 0);
        ck_assert_uint_eq(inode_of(path), inode2);
        ck_assert_int_eq(kubelet_dir_close_plugin_socket(k, "gpu.intel.com/i915", inode2), 0);
        ck_assert_int_eq(lstat(path, &st), -1);
        run_for(100 * 1000);
        (void) kubelet_dir_plugin_sockets(k, &n);
        ck_assert_uint_eq(n, 0);
        fd = safe_close(fd);
        fd2 = safe_close(fd2);

        /* A symlink with our name (to a file outside): the link goes, its target stays. */
        snprintf(target, sizeof(target), "%s/outside", root);
        ck_assert_int_eq(close(open(target, O_CREAT|O_WRONLY|O_CLOEXEC, 0644)), 0);
        snprintf(path, sizeof(path), "%s/kgpu-gpu.intel.com-xe.sock", dp);
        ck_assert_int_eq(symlink(target, path), 0);
        ck_assert_int_eq(kubelet_dir_open_plugin_socket(k, "gpu.intel.com/xe", NULL, &fd, &inode, &msg), 0);
        ck_assert_int_eq(lstat(path, &st), 0);
        ck_assert(S_ISSOCK(st.st_mode));
        ck_assert_int_eq(lstat(target, &st), 0);
        ck_assert(S_ISREG(st.st_mode));
        fd = safe_close(fd);
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(unlink(target), 0);

        /* A directory in the way: a clear error, no socket. */
        ck_assert_int_eq(mkdir(path, 0755), 0);
        ck_assert_int_lt(kubelet_dir_open_plugin_socket(k, "gpu.intel.com/xe", NULL, &fd, &inode, &msg), 0);
        ck_assert_ptr_nonnull(strstr(msg, "Cannot replace"));
        ck_assert_str_eq(kubelet_dir_last_error(k), msg);
        msg = mfree(msg);
        ck_assert_int_eq(rmdir(path), 0);
}
END_TEST

START_TEST(test_connect_and_refusals) {
        _cleanup_(kubelet_dir_freep) KubeletDir *k = NULL;
        _cleanup_free_ char *msg = NULL;
        char target[1024];
        int lfd, fd = -1;
        uint64_t inode;

        k = new_dir(true, true);
        ck_assert_int_eq(kubelet_dir_start(k), 0);

        /* Absent: no inode, "absent", connecting says the kubelet is not running. */
        ck_assert_uint_eq(kubelet_dir_kubelet_inode(k), 0);
        ck_assert_str_eq(kubelet_dir_kubelet_state(k), "absent");
        ck_assert_int_eq(kubelet_dir_connect(k, KUBELET_SOCKET_REGISTRATION, &fd, &msg), -ENOENT);
        ck_assert_ptr_nonnull(strstr(msg, "is the kubelet running?"));
        msg = mfree(msg);

        /* The kubelet's socket: present, its inode published, connected. */
        lfd = listen_at(ksock);
        inode = inode_of(ksock);
        run_until_inode(k, inode);
        ck_assert_str_eq(kubelet_dir_kubelet_state(k), "present");
        ck_assert_int_eq(kubelet_dir_connect(k, KUBELET_SOCKET_REGISTRATION, &fd, &msg), 0);
        ck_assert_int_ge(fd, 0);
        {
                int a = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

                ck_assert_int_ge(a, 0);
                safe_close(a);
        }
        fd = safe_close(fd);

        /* Nobody listening any more (a stale socket): refused by the kernel. */
        lfd = safe_close(lfd);
        ck_assert_int_eq(kubelet_dir_connect(k, KUBELET_SOCKET_REGISTRATION, &fd, &msg), -ECONNREFUSED);
        ck_assert_ptr_nonnull(strstr(msg, "nobody listens"));
        msg = mfree(msg);
        ck_assert_int_eq(unlink(ksock), 0);
        run_until_inode(k, 0);

        /* A symlink to a real, listening socket: refused, never followed. */
        snprintf(target, sizeof(target), "%s/elsewhere.sock", root);
        lfd = listen_at(target);
        ck_assert_int_eq(symlink(target, ksock), 0);
        assert_refused(k, KUBELET_SOCKET_REGISTRATION, "a symbolic link");
        run_for(100 * 1000);
        ck_assert_uint_eq(kubelet_dir_kubelet_inode(k), 0);
        ck_assert_ptr_nonnull(strstr(kubelet_dir_kubelet_state(k), "refused: a symbolic link"));
        ck_assert_int_eq(unlink(ksock), 0);

        /* A regular file, a FIFO: refused. */
        ck_assert_int_eq(close(open(ksock, O_CREAT|O_WRONLY|O_CLOEXEC, 0666)), 0);
        assert_refused(k, KUBELET_SOCKET_REGISTRATION, "a regular file");
        ck_assert_int_eq(unlink(ksock), 0);
        ck_assert_int_eq(mkfifo(ksock, 0666), 0);
        assert_refused(k, KUBELET_SOCKET_REGISTRATION, "a FIFO");
        ck_assert_int_eq(unlink(ksock), 0);

        /* A listening socket of another owner (root can make one for nobody). */
        if (geteuid() == 0) {
                struct passwd *pw = getpwnam("nobody");
                int ofd;

                ck_assert_ptr_nonnull(pw);
                ofd = listen_at(ksock);
                ck_assert_int_eq(lchown(ksock, pw->pw_uid, pw->pw_gid), 0);
                assert_refused(k, KUBELET_SOCKET_REGISTRATION, "a socket owned by uid");
                run_for(100 * 1000);
                ck_assert_uint_eq(kubelet_dir_kubelet_inode(k), 0);
                ck_assert_ptr_nonnull(strstr(kubelet_dir_kubelet_state(k), "refused: a socket owned by"));
                safe_close(ofd);
                ck_assert_int_eq(unlink(ksock), 0);
        }

        /* PodResources: same rules, its own path. */
        {
                char prdir[512];
                int pfd;

                snprintf(prdir, sizeof(prdir), "%s/pod-resources", root);
                ck_assert_int_eq(mkdir(prdir, 0750), 0);
                ck_assert_int_eq(symlink(target, prsock), 0);
                assert_refused(k, KUBELET_SOCKET_POD_RESOURCES, "a symbolic link");
                ck_assert_int_eq(unlink(prsock), 0);
                pfd = listen_at(prsock);
                ck_assert_int_eq(kubelet_dir_connect(k, KUBELET_SOCKET_POD_RESOURCES, &fd, &msg), 0);
                fd = safe_close(fd);
                safe_close(pfd);
                ck_assert_int_eq(unlink(prsock), 0);
                ck_assert_int_eq(rmdir(prdir), 0);
        }
        safe_close(lfd);
        ck_assert_int_eq(unlink(target), 0);
}
END_TEST

START_TEST(test_directory_appears) {
        _cleanup_(kubelet_dir_freep) KubeletDir *k = NULL;
        _cleanup_free_ char *msg = NULL;
        uint64_t inode, t0;
        int fd = -1, lfd;

        ck_assert_int_eq(rmdir(dp), 0);
        k = new_dir(true, true);
        ck_assert_int_eq(kubelet_dir_start(k), 0);
        ck_assert_str_eq(kubelet_dir_kubelet_state(k), "no directory");
        ck_assert_int_eq(kubelet_dir_open_plugin_socket(k, "gpu.intel.com/i915", NULL, &fd, &inode, &msg), -ENOENT);
        ck_assert_ptr_nonnull(strstr(msg, "the kubelet creates it"));

        /* The kubelet makes the directory and listens: seen at once (a watch on the parent). */
        ck_assert_int_eq(mkdir(dp, 0750), 0);
        lfd = listen_at(ksock);
        t0 = now_usec(CLOCK_MONOTONIC);
        run_until_inode(k, inode_of(ksock));
        ck_assert_uint_lt(now_usec(CLOCK_MONOTONIC) - t0, 900 * 1000);
        ck_assert_str_eq(kubelet_dir_kubelet_state(k), "present");
        safe_close(lfd);
        ck_assert_int_eq(unlink(ksock), 0);
}
END_TEST

START_TEST(test_describe_unsafe) {
        struct stat st = { .st_mode = S_IFSOCK | 0755, .st_uid = 0 };
        _cleanup_free_ char *a = NULL, *b = NULL;

        ck_assert_ptr_null(kubelet_describe_unsafe(&st, 0));
        a = kubelet_describe_unsafe(&st, 12345);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(strstr(a, "a socket owned by uid 0"));
        st.st_mode = S_IFLNK | 0777;
        b = kubelet_describe_unsafe(&st, 0);
        ck_assert_ptr_nonnull(strstr(b, "a symbolic link owned by uid 0"));
        ck_assert_ptr_nonnull(strstr(b, "not a socket"));
}
END_TEST

static void setup(void) {
        strcpy(root, "/tmp/kgpu-test-kubelet-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(root));
        snprintf(dp, sizeof(dp), "%s/device-plugins", root);
        snprintf(ksock, sizeof(ksock), "%s/kubelet.sock", dp);
        snprintf(prsock, sizeof(prsock), "%s/pod-resources/kubelet.sock", root);
        ck_assert_int_eq(mkdir(dp, 0750), 0);
        ck_assert_int_ge(sd_event_new(&event), 0);
}

static void teardown(void) {
        _cleanup_free_ char *cmd = NULL;

        event = sd_event_unref(event);
        ck_assert_int_ge(asprintf(&cmd, "rm -rf '%s'", root), 0);
        ck_assert_int_eq(system(cmd), 0);
}

static Suite *suite(void) {
        Suite *s = suite_create("probe-kubelet");
        TCase *tc = tcase_create("kubelet");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_plugin_sockets);
        tcase_add_test(tc, test_connect_and_refusals);
        tcase_add_test(tc, test_directory_appears);
        tcase_add_test(tc, test_describe_unsafe);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(suite)
