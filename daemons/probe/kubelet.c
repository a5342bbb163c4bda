/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kubelet.c — the kubelet's directories, touched only by the root probe (see kubelet.h).
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/resource-name.h"
#include "common/util.h"
#include "daemons/probe/kubelet.h"

/* How often a missing directory is looked for. */
#define KUBELET_DIR_RETRY_USEC (1000 * 1000ULL)

typedef struct MadeSocket {
        char *name;
        uint64_t inode;
} MadeSocket;

struct KubeletDir {
        sd_event *event;
        KubeletDirChanged changed;
        void *userdata;

        char *device_plugin_path;
        char *kubelet_socket;
        char *pod_resources_socket;
        Config domains;                 /* only the vendors' enabled flags: resource_domain_enabled() */
        uid_t owner_uid;                /* whose sockets are trusted: root, or the probe's uid */
        uid_t caller_uid;               /* the front end's uid, (uid_t) -1: none */

        bool started;
        bool waiting_for_dir;           /* the watch is on the parent, for the directory to appear */
        int inotify_fd;
        sd_event_source *inotify_source;
        sd_event_source *retry_timer;   /* while a watched directory is missing */

        /* The state, read from the directories after every change. */
        uint64_t kubelet_inode;
        char *kubelet_state;
        char *last_error;
        KubeletPluginSocket *sockets;
        size_t n_sockets;

        /* Sockets made for callers; removed when they all left the bus. */
        MadeSocket *made;
        size_t n_made;
        sd_bus_track *track;
};

static void plugin_sockets_free(KubeletPluginSocket *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(s[i].name);
        free(s);
}

static void kubelet_dir_stop_watch(KubeletDir *k) {
        k->waiting_for_dir = false;
        k->inotify_source = sd_event_source_disable_unref(k->inotify_source);
        k->retry_timer = sd_event_source_disable_unref(k->retry_timer);
        k->inotify_fd = safe_close(k->inotify_fd);
}

KubeletDir *kubelet_dir_free(KubeletDir *k) {
        if (!k)
                return NULL;
        kubelet_dir_stop_watch(k);
        k->track = sd_bus_track_unref(k->track);
        for (size_t i = 0; i < k->n_made; i++)
                free(k->made[i].name);
        free(k->made);
        plugin_sockets_free(k->sockets, k->n_sockets);
        free(k->device_plugin_path);
        free(k->kubelet_socket);
        free(k->pod_resources_socket);
        free(k->kubelet_state);
        free(k->last_error);
        sd_event_unref(k->event);
        return mfree(k);
}

int kubelet_dir_new(sd_event *event, KubeletDirChanged changed, void *userdata, KubeletDir **ret) {
        KubeletDir *k;

        k = calloc(1, sizeof(*k));
        if (!k)
                return -ENOMEM;
        k->event = sd_event_ref(event);
        k->changed = changed;
        k->userdata = userdata;
        k->inotify_fd = -EBADF;
        k->owner_uid = geteuid();
        k->caller_uid = (uid_t) -1;
        k->kubelet_state = strdup("absent");
        k->last_error = strdup("");
        if (!k->kubelet_state || !k->last_error) {
                kubelet_dir_free(k);
                return -ENOMEM;
        }
        *ret = k;
        return 0;
}

/* Splits "/a/b/c" into "/a/b" and "c" (both allocated). */
static int split_path(const char *path, char **ret_dir, char **ret_base) {
        _cleanup_free_ char *dir = NULL, *base = NULL;
        const char *slash;

        if (!path || path[0] != '/')
                return -EINVAL;
        slash = strrchr(path, '/');
        if (isempty(slash + 1))
                return -EINVAL;
        dir = slash == path ? strdup("/") : strndup(path, slash - path);
        base = strdup(slash + 1);
        if (!dir || !base)
                return -ENOMEM;
        *ret_dir = TAKE_PTR(dir);
        *ret_base = TAKE_PTR(base);
        return 0;
}

static const char *file_type_name(mode_t mode) {
        switch (mode & S_IFMT) {
        case S_IFLNK:  return "a symbolic link";
        case S_IFREG:  return "a regular file";
        case S_IFIFO:  return "a FIFO";
        case S_IFDIR:  return "a directory";
        case S_IFCHR:  return "a character device";
        case S_IFBLK:  return "a block device";
        case S_IFSOCK: return "a socket";
        default:       return "a file of unknown type";
        }
}

static char *user_name_of(uid_t uid) {
        struct passwd *pw = getpwuid(uid);
        char *s = NULL;

        if (pw && pw->pw_name && asprintf(&s, " (%s)", pw->pw_name) < 0)
                s = NULL;
        return s ?: strdup("");
}

char *kubelet_describe_unsafe(const struct stat *st, uid_t owner_uid) {
        _cleanup_free_ char *who = NULL, *owner = NULL;
        char *s;
        int r;

        if (S_ISSOCK(st->st_mode) && st->st_uid == owner_uid)
                return NULL;
        who = user_name_of(st->st_uid);
        if (!who)
                return NULL;
        if (S_ISSOCK(st->st_mode)) {
                owner = user_name_of(owner_uid);
                if (!owner)
                        return NULL;
                r = asprintf(&s, "a socket owned by uid %u%s, not by uid %u%s",
                             (unsigned) st->st_uid, who, (unsigned) owner_uid, owner);
        } else
                r = asprintf(&s, "%s owned by uid %u%s, not a socket", file_type_name(st->st_mode),
                             (unsigned) st->st_uid, who);
        return r < 0 ? NULL : s;
}

static int set_string(char **p, const char *s, bool *changed) {
        if (streq_ptr(*p, s))
                return 0;
        *changed = true;
        return free_and_strdup(p, s);
}

static int cmp_socket(const void *a, const void *b) {
        return strcmp(((const KubeletPluginSocket *) a)->name, ((const KubeletPluginSocket *) b)->name);
}

/* The kgpu-*.sock sockets in the device-plugins directory, sorted by name. */
static int read_plugin_sockets(KubeletDir *k, KubeletPluginSocket **ret, size_t *ret_n) {
        KubeletPluginSocket *l = NULL;
        size_t n = 0, allocated = 0;
        struct dirent *de;
        DIR *d;
        int fd, r = 0;

        fd = open(k->device_plugin_path, O_RDONLY|O_DIRECTORY|O_CLOEXEC);
        if (fd < 0)
                return -errno;
        d = fdopendir(fd);
        if (!d) {
                r = -errno;
                safe_close(fd);
                return r;
        }
        while ((errno = 0, de = readdir(d))) {
                struct stat st;

                if (!resource_socket_name_is_ours(de->d_name))
                        continue;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;       /* gone meanwhile */
                if (!S_ISSOCK(st.st_mode) || st.st_uid != k->owner_uid)
                        continue;
                if (n >= KUBELET_PLUGIN_SOCKETS_MAX)
                        break;
                r = array_reserve((void **) &l, &allocated, n + 1, sizeof(*l));
                if (r < 0)
                        break;
                l[n].name = strdup(de->d_name);
                if (!l[n].name) {
                        r = -ENOMEM;
                        break;
                }
                l[n++].inode = (uint64_t) st.st_ino;
        }
        closedir(d);
        if (r < 0) {
                plugin_sockets_free(l, n);
                return r;
        }
        if (n > 1)
                qsort(l, n, sizeof(*l), cmp_socket);
        *ret = l;
        *ret_n = n;
        return 0;
}

static bool plugin_sockets_equal(const KubeletPluginSocket *a, size_t na, const KubeletPluginSocket *b, size_t nb) {
        if (na != nb)
                return false;
        for (size_t i = 0; i < na; i++)
                if (a[i].inode != b[i].inode || !streq(a[i].name, b[i].name))
                        return false;
        return true;
}

/* What is at the registration socket's path: inode (0 unless an acceptable socket) and
 * the state in words. */
static int read_kubelet_socket(KubeletDir *k, uint64_t *ret_inode, char **ret_state) {
        _cleanup_free_ char *dir = NULL, *base = NULL, *why = NULL;
        _cleanup_close_ int dfd = -EBADF;
        struct stat st;
        char *s;
        int r;

        r = split_path(k->kubelet_socket, &dir, &base);
        if (r < 0)
                return r;
        dfd = open(dir, O_PATH|O_DIRECTORY|O_CLOEXEC);
        if (dfd < 0) {
                *ret_inode = 0;
                s = strdup(errno == ENOENT ? "no directory" : "directory not accessible");
                goto done;
        }
        if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                *ret_inode = 0;
                s = strdup("absent");
                goto done;
        }
        why = kubelet_describe_unsafe(&st, k->owner_uid);
        if (why) {
                *ret_inode = 0;
                if (asprintf(&s, "refused: %s", why) < 0)
                        s = NULL;
                goto done;
        }
        *ret_inode = (uint64_t) st.st_ino;
        s = strdup("present");
done:
        if (!s)
                return -ENOMEM;
        *ret_state = s;
        return 0;
}

/* Reads the state again; runs the changed callback when anything differs. */
static void kubelet_dir_refresh(KubeletDir *k) {
        _cleanup_free_ char *state = NULL;
        KubeletPluginSocket *socks = NULL;
        size_t n = 0;
        uint64_t inode = 0;
        bool changed = false;
        int r;

        r = read_kubelet_socket(k, &inode, &state);
        if (r < 0) {
                log_warning_errno(r, "Failed to read the state of %s, ignoring: %m", k->kubelet_socket);
                return;
        }
        r = read_plugin_sockets(k, &socks, &n);
        if (r < 0 && r != -ENOENT && r != -ENOTDIR)
                log_debug_errno(r, "Failed to list %s: %m", k->device_plugin_path);

        if (inode != k->kubelet_inode) {
                k->kubelet_inode = inode;
                changed = true;
        }
        if (set_string(&k->kubelet_state, state, &changed) < 0) {
                plugin_sockets_free(socks, n);
                log_oom();
                return;
        }
        if (!plugin_sockets_equal(socks, n, k->sockets, k->n_sockets)) {
                plugin_sockets_free(k->sockets, k->n_sockets);
                k->sockets = socks;
                k->n_sockets = n;
                changed = true;
        } else
                plugin_sockets_free(socks, n);

        if (changed) {
                log_debug("Kubelet socket %s: %s (inode %" PRIu64 "); %zu kgpu socket(s) in %s.",
                          k->kubelet_socket, k->kubelet_state, k->kubelet_inode, k->n_sockets,
                          k->device_plugin_path);
                if (k->changed)
                        k->changed(k, k->userdata);
        }
}

static int kubelet_dir_setup_watch(KubeletDir *k);

/* The unit's ReadWritePaths= only applies to paths that exist when it starts: a
 * device-plugins directory the kubelet made later stays read-only in our mount
 * namespace. Under a service manager, exit so that it restarts us with write access
 * (Restart=on-failure); otherwise say so once. */
static void kubelet_dir_check_writable(KubeletDir *k) {
        _cleanup_close_ int fd = -EBADF;
        struct statvfs sv;

        fd = open(k->device_plugin_path, O_PATH|O_DIRECTORY|O_CLOEXEC);
        if (fd < 0 || fstatvfs(fd, &sv) < 0 || !(sv.f_flag & ST_RDONLY))
                return;
        if (getenv("INVOCATION_ID")) {
                log_error("%s is read-only for kgpu-probed: it was created after the probe started. "
                          "Exiting so that the service manager starts the probe again with write access.",
                          k->device_plugin_path);
                (void) sd_event_exit(k->event, KUBELET_EXIT_RESTART);
        } else
                log_warning("%s is read-only for kgpu-probed: the front end's sockets cannot be made there.",
                            k->device_plugin_path);
}

static int on_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        KubeletDir *k = userdata;

        k->retry_timer = sd_event_source_disable_unref(k->retry_timer);
        (void) kubelet_dir_setup_watch(k);
        return 0;
}

static void kubelet_dir_schedule_retry(KubeletDir *k) {
        int r;

        if (k->retry_timer)
                return;
        r = sd_event_add_time_relative(k->event, &k->retry_timer, CLOCK_MONOTONIC, KUBELET_DIR_RETRY_USEC,
                                       100 * 1000, on_retry, k);
        if (r < 0)
                log_warning_errno(r, "Failed to schedule a look for %s, ignoring: %m", k->device_plugin_path);
        else
                (void) sd_event_source_set_description(k->retry_timer, "kubelet-dir-retry");
}

static int on_inotify(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        KubeletDir *k = userdata;
        bool lost = false;

        if (k->waiting_for_dir) {
                /* Something appeared in the parent: try the real watch again. */
                (void) kubelet_dir_setup_watch(k);
                return 0;
        }

        for (;;) {
                _Alignas(struct inotify_event) uint8_t buf[4096];
                ssize_t l;

                l = read(fd, buf, sizeof(buf));
                if (l < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                break;
                        log_warning_errno(errno, "Failed to read inotify events, watching again: %m");
                        lost = true;
                        break;
                }
                if (l == 0)
                        break;
                for (uint8_t *p = buf; p + sizeof(struct inotify_event) <= buf + l; ) {
                        struct inotify_event *e = (struct inotify_event *) p;

                        if ((size_t) (buf + l - p) < sizeof(*e) + e->len)
                                break;
                        p += sizeof(*e) + e->len;
                        if (e->mask & (IN_IGNORED|IN_DELETE_SELF|IN_MOVE_SELF|IN_UNMOUNT))
                                lost = true;
                }
        }
        if (lost) {
                log_notice("A watched kubelet directory (%s) went away; waiting for it to come back.",
                           k->device_plugin_path);
                kubelet_dir_stop_watch(k);
                kubelet_dir_schedule_retry(k);
        }
        kubelet_dir_refresh(k);
        return 0;
}

/* Watches the device-plugins directory and, if elsewhere, the registration socket's;
 * looks again once a second while one is missing. */
static int kubelet_dir_setup_watch(KubeletDir *k) {
        _cleanup_free_ char *kdir = NULL, *kbase = NULL;
        /* IN_ATTRIB: an owner or a mode changed is a changed state too. */
        const uint32_t mask = IN_CREATE|IN_DELETE|IN_MOVED_FROM|IN_MOVED_TO|IN_ATTRIB|IN_DELETE_SELF|
                              IN_MOVE_SELF|IN_ONLYDIR;
        int r;

        kubelet_dir_stop_watch(k);
        r = split_path(k->kubelet_socket, &kdir, &kbase);
        if (r < 0)
                return r;

        k->inotify_fd = inotify_init1(IN_NONBLOCK|IN_CLOEXEC);
        if (k->inotify_fd < 0)
                return log_error_errno(errno, "Failed to create an inotify instance: %m");
        if (inotify_add_watch(k->inotify_fd, k->device_plugin_path, mask) < 0 ||
            inotify_add_watch(k->inotify_fd, kdir, mask) < 0) {
                _cleanup_free_ char *parent = NULL, *base = NULL;

                r = -errno;
                if (r != -ENOENT && r != -ENOTDIR)
                        log_warning_errno(r, "Failed to watch %s: %m", k->device_plugin_path);
                /* Missing (the kubelet makes it when it starts): watch the parent for it,
                 * and look again once a second in case the parent is missing too. */
                k->inotify_fd = safe_close(k->inotify_fd);
                kubelet_dir_schedule_retry(k);
                k->inotify_fd = inotify_init1(IN_NONBLOCK|IN_CLOEXEC);
                if (k->inotify_fd >= 0 && split_path(k->device_plugin_path, &parent, &base) >= 0 &&
                    inotify_add_watch(k->inotify_fd, parent, IN_CREATE|IN_MOVED_TO|IN_ONLYDIR) >= 0 &&
                    sd_event_add_io(k->event, &k->inotify_source, k->inotify_fd, EPOLLIN, on_inotify, k) >= 0)
                        k->waiting_for_dir = true;
                else {
                        k->inotify_source = sd_event_source_disable_unref(k->inotify_source);
                        k->inotify_fd = safe_close(k->inotify_fd);
                }
                kubelet_dir_refresh(k);
                return 0;
        }
        r = sd_event_add_io(k->event, &k->inotify_source, k->inotify_fd, EPOLLIN, on_inotify, k);
        if (r < 0)
                return log_error_errno(r, "Failed to add the inotify event source: %m");
        /* Before bus traffic: re-registration after a kubelet restart should not wait. */
        (void) sd_event_source_set_priority(k->inotify_source, SD_EVENT_PRIORITY_NORMAL - 10);
        (void) sd_event_source_set_description(k->inotify_source, "kubelet-dir-watch");
        log_debug("Watching %s for the kubelet (%s).", k->device_plugin_path, k->kubelet_socket);
        kubelet_dir_check_writable(k);
        kubelet_dir_refresh(k);
        return 0;
}

int kubelet_dir_configure(KubeletDir *k, const Config *c) {
        _cleanup_free_ char *dp = NULL, *ks = NULL, *pr = NULL;
        bool moved;

        k->domains = (Config) {
                .intel_enabled = c->intel_enabled,
                .nvidia_enabled = c->nvidia_enabled,
        };
        if (isempty(c->device_plugin_path)) {
                /* Not configured (only a Config made by hand; the loader always sets it). */
                if (k->started)
                        kubelet_dir_stop_watch(k);
                k->device_plugin_path = mfree(k->device_plugin_path);
                k->kubelet_socket = mfree(k->kubelet_socket);
                k->pod_resources_socket = mfree(k->pod_resources_socket);
                return 0;
        }
        if (c->device_plugin_path[0] != '/')
                return -EINVAL;
        dp = strdup(c->device_plugin_path);
        if (!dp)
                return -ENOMEM;
        if (!isempty(c->kubelet_socket))
                ks = strdup(c->kubelet_socket);
        else if (asprintf(&ks, "%s/kubelet.sock", c->device_plugin_path) < 0)
                ks = NULL;
        if (!ks)
                return -ENOMEM;
        if (ks[0] != '/' || isempty(strrchr(ks, '/') + 1))
                return -EINVAL;
        if (!isempty(c->pod_resources_socket)) {
                if (c->pod_resources_socket[0] != '/')
                        return -EINVAL;
                pr = strdup(c->pod_resources_socket);
                if (!pr)
                        return -ENOMEM;
        }

        moved = !streq_ptr(dp, k->device_plugin_path) || !streq_ptr(ks, k->kubelet_socket);
        free_and_replace(k->device_plugin_path, dp);
        free_and_replace(k->kubelet_socket, ks);
        free_and_replace(k->pod_resources_socket, pr);
        if (moved && k->started) {
                log_info("Kubelet paths changed: device plugins in %s, registration socket %s.",
                         k->device_plugin_path, k->kubelet_socket);
                return kubelet_dir_setup_watch(k);
        }
        return 0;
}

void kubelet_dir_set_caller_uid(KubeletDir *k, uid_t uid) {
        k->caller_uid = uid;
}

uid_t kubelet_dir_caller_uid(const KubeletDir *k) {
        return k->caller_uid;
}

int kubelet_dir_start(KubeletDir *k) {
        k->started = true;
        if (!k->device_plugin_path)
                return 0;       /* nothing to watch */
        return kubelet_dir_setup_watch(k);
}

const char *kubelet_dir_device_plugin_path(const KubeletDir *k) {
        return k->device_plugin_path ?: "";
}

const char *kubelet_dir_socket_path(const KubeletDir *k, KubeletSocketKind kind) {
        const char *p = kind == KUBELET_SOCKET_REGISTRATION ? k->kubelet_socket : k->pod_resources_socket;

        return p ?: "";
}

uint64_t kubelet_dir_kubelet_inode(const KubeletDir *k) {
        return k->kubelet_inode;
}

const char *kubelet_dir_kubelet_state(const KubeletDir *k) {
        return k->kubelet_state;
}

const char *kubelet_dir_last_error(const KubeletDir *k) {
        return k->last_error;
}

const KubeletPluginSocket *kubelet_dir_plugin_sockets(const KubeletDir *k, size_t *ret_n) {
        *ret_n = k->n_sockets;
        return k->sockets;
}

/* Records the outcome of an operation done for a caller (LastError); returns r. */
static int kubelet_dir_outcome(KubeletDir *k, int r, char *message, char **ret_message) {
        bool changed = false;

        if (set_string(&k->last_error, r < 0 ? (message ?: "failed") : "", &changed) < 0)
                log_oom();
        if (r < 0) {
                log_debug("%s", message ?: "failed");
                if (ret_message)
                        *ret_message = message;
                else
                        free(message);
        } else
                free(message);
        if (changed && k->changed)
                k->changed(k, k->userdata);
        return r;
}

static int fmt_message(char **ret, const char *fmt, ...) _printf_(2, 3);
static int fmt_message(char **ret, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = vasprintf(ret, fmt, ap);
        va_end(ap);
        if (r < 0)
                *ret = NULL;
        return r < 0 ? -ENOMEM : 0;
}

static bool kubelet_dir_resource_allowed(const KubeletDir *k, const char *resource) {
        return resource_domain_enabled(&k->domains, resource);
}

static MadeSocket *kubelet_dir_find_made(KubeletDir *k, const char *name) {
        for (size_t i = 0; i < k->n_made; i++)
                if (streq(k->made[i].name, name))
                        return k->made + i;
        return NULL;
}

static void kubelet_dir_forget_made(KubeletDir *k, const char *name) {
        MadeSocket *s = kubelet_dir_find_made(k, name);

        if (!s)
                return;
        free(s->name);
        memmove(s, s + 1, (k->made + k->n_made - s - 1) * sizeof(*s));
        k->n_made--;
}

static int on_track_empty(sd_bus_track *t, void *userdata) {
        KubeletDir *k = userdata;
        _cleanup_close_ int dfd = -EBADF;
        size_t removed = 0;

        dfd = k->device_plugin_path ? open(k->device_plugin_path, O_PATH|O_DIRECTORY|O_CLOEXEC) : -EBADF;
        for (size_t i = 0; i < k->n_made; i++) {
                struct stat st;

                if (dfd >= 0 && fstatat(dfd, k->made[i].name, &st, AT_SYMLINK_NOFOLLOW) >= 0 &&
                    S_ISSOCK(st.st_mode) && (uint64_t) st.st_ino == k->made[i].inode &&
                    unlinkat(dfd, k->made[i].name, 0) >= 0)
                        removed++;
                free(k->made[i].name);
        }
        k->made = mfree(k->made);
        k->n_made = 0;
        k->track = sd_bus_track_unref(k->track);
        log_info("The front end left the bus; removed %zu of its socket(s) from %s.", removed,
                 k->device_plugin_path);
        return 0;
}

static int kubelet_dir_track(KubeletDir *k, sd_bus_message *caller) {
        int r;

        if (!caller)
                return 0;
        if (!k->track) {
                r = sd_bus_track_new(sd_bus_message_get_bus(caller), &k->track, on_track_empty, k);
                if (r < 0)
                        return r;
        }
        return sd_bus_track_add_sender(k->track, caller);
}

/* EROFS: the directory appeared after the probe started, so the unit's ReadWritePaths=
 * (which only applies to paths that exist at start) did not make it writable here. */
static const char *erofs_hint(int r) {
        return r == -EROFS ? " (read-only for kgpu-probed: the directory appeared after it started; "
                             "`systemctl restart kgpu-probed` makes it writable)" : "";
}

int kubelet_dir_open_plugin_socket(KubeletDir *k, const char *resource, sd_bus_message *caller,
                                   int *ret_fd, uint64_t *ret_inode, char **ret_message) {
        _cleanup_free_ char *name = NULL;
        _cleanup_close_ int dfd = -EBADF, fd = -EBADF;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char *msg = NULL;
        struct stat st;
        mode_t old_mask;
        int r, n;

        if (!resource_name_valid(resource)) {
                (void) fmt_message(&msg, "'%s' is not a valid resource name.",
                                   resource && strlen(resource) <= RESOURCE_NAME_MAX ? resource : "(too long)");
                return kubelet_dir_outcome(k, -EINVAL, msg, ret_message);
        }
        if (!kubelet_dir_resource_allowed(k, resource)) {
                (void) fmt_message(&msg, "Resource %s is not in the domain of a vendor kgpu serves here "
                                   "(gpu.intel.com with intel.enabled, nvidia.com with nvidia.enabled).", resource);
                return kubelet_dir_outcome(k, -EPERM, msg, ret_message);
        }
        r = resource_socket_name(resource, &name);
        if (r < 0)
                return kubelet_dir_outcome(k, r, NULL, ret_message);
        if (!k->device_plugin_path) {
                (void) fmt_message(&msg, "No device plugin directory is configured.");
                return kubelet_dir_outcome(k, -ENOENT, msg, ret_message);
        }
        if (!kubelet_dir_find_made(k, name) && k->n_made >= KUBELET_PLUGIN_SOCKETS_MAX) {
                (void) fmt_message(&msg, "Already %u sockets made for the front end.", KUBELET_PLUGIN_SOCKETS_MAX);
                return kubelet_dir_outcome(k, -E2BIG, msg, ret_message);
        }

        dfd = open(k->device_plugin_path, O_PATH|O_DIRECTORY|O_CLOEXEC);
        if (dfd < 0) {
                r = -errno;
                (void) fmt_message(&msg, "Cannot open the device plugin directory %s: %s%s", k->device_plugin_path,
                                   strerror(-r), r == -ENOENT ? " (the kubelet creates it when it starts)" : "");
                return kubelet_dir_outcome(k, r, msg, ret_message);
        }
        n = snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dfd, name);
        if (n < 0 || (size_t) n >= sizeof(sa.sun_path)) {
                (void) fmt_message(&msg, "Resource name %s is too long for a socket path.", resource);
                return kubelet_dir_outcome(k, -ENAMETOOLONG, msg, ret_message);
        }
        /* Whatever has our name goes: a symlink is removed, not followed. */
        if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT) {
                r = -errno;
                (void) fmt_message(&msg, "Cannot replace %s/%s: %s%s", k->device_plugin_path, name,
                                   strerror(-r), erofs_hint(r));
                return kubelet_dir_outcome(k, r, msg, ret_message);
        }
        fd = socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC|SOCK_NONBLOCK, 0);
        if (fd < 0)
                return kubelet_dir_outcome(k, -errno, NULL, ret_message);
        /* Only the kubelet (root) connects to it. */
        old_mask = umask(0177);
        r = bind(fd, (struct sockaddr *) &sa, offsetof(struct sockaddr_un, sun_path) + n + 1) < 0 ? -errno : 0;
        umask(old_mask);
        if (r < 0) {
                (void) fmt_message(&msg, "Cannot bind %s/%s: %s%s", k->device_plugin_path, name, strerror(-r),
                                   erofs_hint(r));
                return kubelet_dir_outcome(k, r, msg, ret_message);
        }
        if (listen(fd, SOMAXCONN) < 0 || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                r = -errno;
                (void) unlinkat(dfd, name, 0);
                (void) fmt_message(&msg, "Cannot listen on %s/%s: %s", k->device_plugin_path, name, strerror(-r));
                return kubelet_dir_outcome(k, r, msg, ret_message);
        }

        {
                MadeSocket *s = kubelet_dir_find_made(k, name);

                if (!s) {
                        MadeSocket *a = reallocarray(k->made, k->n_made + 1, sizeof(*a));

                        if (!a) {
                                (void) unlinkat(dfd, name, 0);
                                return kubelet_dir_outcome(k, -ENOMEM, NULL, ret_message);
                        }
                        k->made = a;
                        s = k->made + k->n_made++;
                        *s = (MadeSocket) { .name = TAKE_PTR(name) };
                }
                s->inode = (uint64_t) st.st_ino;
                r = kubelet_dir_track(k, caller);
                if (r < 0)
                        log_debug_errno(r, "Failed to track the caller of OpenPluginSocket, ignoring: %m");
                log_debug("Made %s/%s (inode %" PRIu64 ") for %s.", k->device_plugin_path, s->name, s->inode,
                          caller ? sd_bus_message_get_sender(caller) ?: "?" : "a test");
        }
        *ret_fd = TAKE_FD(fd);
        *ret_inode = (uint64_t) st.st_ino;
        return kubelet_dir_outcome(k, 0, NULL, ret_message);
}

int kubelet_dir_close_plugin_socket(KubeletDir *k, const char *resource, uint64_t inode) {
        _cleanup_free_ char *name = NULL;
        _cleanup_close_ int dfd = -EBADF;
        struct stat st;
        int r;

        r = resource_socket_name(resource, &name);
        if (r < 0)
                return r;
        if (!k->device_plugin_path)
                return 0;
        dfd = open(k->device_plugin_path, O_PATH|O_DIRECTORY|O_CLOEXEC);
        if (dfd < 0)
                return errno == ENOENT ? 0 : -errno;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) >= 0 && S_ISSOCK(st.st_mode) &&
            (uint64_t) st.st_ino == inode) {
                if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
                        return -errno;
                kubelet_dir_forget_made(k, name);
        }
        return 0;
}

int kubelet_dir_connect(KubeletDir *k, KubeletSocketKind kind, int *ret_fd, char **ret_message) {
        _cleanup_free_ char *dir = NULL, *base = NULL, *why = NULL;
        _cleanup_close_ int dfd = -EBADF, pfd = -EBADF, fd = -EBADF;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        const char *path = kubelet_dir_socket_path(k, kind);
        char *msg = NULL;
        struct stat st;
        int r, n;

        if (isempty(path)) {
                (void) fmt_message(&msg, "No %s socket is configured.",
                                   kind == KUBELET_SOCKET_REGISTRATION ? "registration" : "PodResources");
                return kubelet_dir_outcome(k, -ENOENT, msg, ret_message);
        }
        r = split_path(path, &dir, &base);
        if (r < 0)
                return kubelet_dir_outcome(k, r, NULL, ret_message);
        dfd = open(dir, O_PATH|O_DIRECTORY|O_CLOEXEC);
        if (dfd < 0) {
                r = -errno;
                (void) fmt_message(&msg, "Cannot open %s: %s", dir, strerror(-r));
                return kubelet_dir_outcome(k, r, msg, ret_message);
        }
        pfd = openat(dfd, base, O_PATH|O_NOFOLLOW|O_CLOEXEC);
        if (pfd < 0) {
                r = -errno;
                (void) fmt_message(&msg, "%s: %s%s", path, strerror(-r),
                                   r == -ENOENT ? " (is the kubelet running?)" : "");
                return kubelet_dir_outcome(k, r, msg, ret_message);
        }
        if (fstat(pfd, &st) < 0)
                return kubelet_dir_outcome(k, -errno, NULL, ret_message);
        why = kubelet_describe_unsafe(&st, k->owner_uid);
        if (why) {
                (void) fmt_message(&msg, "Refusing %s: it is %s.", path, why);
                log_warning("%s", msg ?: "Refusing an unsafe kubelet socket.");
                return kubelet_dir_outcome(k, -EPERM, msg, ret_message);
        }

        n = snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d", pfd);
        fd = socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC|SOCK_NONBLOCK, 0);
        if (fd < 0)
                return kubelet_dir_outcome(k, -errno, NULL, ret_message);
        if (connect(fd, (struct sockaddr *) &sa, offsetof(struct sockaddr_un, sun_path) + n + 1) < 0) {
                r = -errno;
                (void) fmt_message(&msg, "Cannot connect to %s: %s%s", path, strerror(-r),
                                   r == -ECONNREFUSED ? " (nobody listens: the kubelet is starting or stopped)" :
                                   r == -EAGAIN ? " (its backlog is full)" : "");
                return kubelet_dir_outcome(k, r, msg, ret_message);
        }
        *ret_fd = TAKE_FD(fd);
        return kubelet_dir_outcome(k, 0, NULL, ret_message);
}
