/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * peer.c — the broker's peer socket (see peer.h).
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>
#include <systemd/sd-id128.h>

#include "common/bus-names.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/util.h"
#include "daemons/broker/access.h"
#include "daemons/broker/broker-dbus.h"
#include "daemons/broker/manager.h"
#include "daemons/broker/peer.h"

#define PEER_BACKLOG 16

_Static_assert(PEER_MAX == sizeof(((Manager *) NULL)->peers) / sizeof(BrokerPeer *),
               "Manager.peers holds PEER_MAX connections");

static const char *strna(const char *s) {
        return s ?: "n/a";
}

static BrokerPeer *peer_free(BrokerPeer *p) {
        if (!p)
                return NULL;
        if (p->bus) {
                (void) sd_bus_detach_event(p->bus);
                sd_bus_close(p->bus);
                p->bus = sd_bus_unref(p->bus);
        }
        return mfree(p);
}

/* Frees the peers marked dead: from the event loop, never from inside one of their own
 * callbacks. */
static int on_peer_collect(sd_event_source *s, void *userdata) {
        Manager *m = userdata;
        size_t j = 0;

        for (size_t i = 0; i < m->n_peers; i++) {
                if (m->peers[i]->dead)
                        peer_free(m->peers[i]);
                else
                        m->peers[j++] = m->peers[i];
        }
        m->n_peers = j;
        return 0;
}

static void peer_drop(BrokerPeer *p, const char *why) {
        Manager *m = p->manager;
        int r;

        if (p->dead)
                return;
        p->dead = true;
        log_debug("Peer connection of uid %u (pid %d) closed: %s; %" PRIu64 " call(s) served.",
                  (unsigned) p->uid, (int) p->pid, why, p->calls);
        sd_bus_close(p->bus);
        if (!m->peer_collect) {
                r = sd_event_add_defer(m->event, &m->peer_collect, on_peer_collect, m);
                if (r < 0) {
                        log_warning_errno(r, "Failed to arrange freeing a closed peer connection, "
                                          "it stays until the next one: %m");
                        return;
                }
                (void) sd_event_source_set_description(m->peer_collect, "peer-collect");
        }
        (void) sd_event_source_set_enabled(m->peer_collect, SD_EVENT_ONESHOT);
}

int broker_peer_check_sent(BrokerPeer *p, int r) {
        uint64_t queued = 0;

        if (p->dead)
                return r;
        if (r < 0) {
                peer_drop(p, strerror(-r));
                return r;
        }
        if (sd_bus_get_n_queued_write(p->bus, &queued) >= 0 && queued >= PEER_WQUEUE_MAX) {
                log_notice("Closing the peer connection of uid %u (pid %d): %" PRIu64 " messages wait for it "
                           "to read.", (unsigned) p->uid, (int) p->pid, queued);
                peer_drop(p, "not reading");
        }
        return r;
}

int broker_peer_uid(Manager *m, sd_bus *bus, uid_t *ret) {
        for (size_t i = 0; bus && i < m->n_peers; i++)
                if (m->peers[i]->bus == bus) {
                        *ret = m->peers[i]->uid;
                        return 0;
                }
        return -ENXIO;
}

/* Every message from a peer passes here before the object dispatch: the bus policy's
 * part, which no bus daemon plays on this socket. */
static int on_peer_message(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        BrokerPeer *p = userdata;
        Manager *m = p->manager;
        BrokerCallers callers;
        const char *member;
        int r;

        if (sd_bus_message_is_signal(msg, "org.freedesktop.DBus.Local", "Disconnected")) {
                peer_drop(p, "disconnected");
                return 1;
        }
        if (p->dead)
                return 1;
        /* The broker calls nothing on a peer: replies and signals from it are dropped. */
        if (!sd_bus_message_is_method_call(msg, NULL, NULL))
                return 1;
        r = broker_peer_check_sent(p, 0);
        if (p->dead)
                return 1;

        member = sd_bus_message_get_member(msg);
        callers = broker_access_callers(sd_bus_message_get_interface(msg), member);
        if (!broker_access_allowed(m, p->uid, callers)) {
                if (!p->refusal_logged)
                        log_warning("Refusing %s.%s from uid %u (pid %d) on the peer socket: only root and %s may "
                                    "call it.", strna(sd_bus_message_get_interface(msg)), strna(member),
                                    (unsigned) p->uid, (int) p->pid, broker_access_user(m, callers));
                p->refusal_logged = true;
                r = sd_bus_reply_method_errorf(msg, KGPU_ERROR_ACCESS_DENIED, "%s is only allowed to root and user '%s'",
                                               strna(member), broker_access_user(m, callers));
                (void) broker_peer_check_sent(p, r);
                return 1;
        }
        p->calls++;
        m->peer_calls++;
        return 0;
}

/* sd-bus reads the authentication lines in blocks, so a client that sends its first
 * call right after BEGIN (libdbus does) may have it read along with BEGIN; nothing wakes
 * the loop for it then. Once a connection is authenticated, its buffered input is
 * processed from here (after the event that finished the authentication). */
static int on_peer_post(sd_event_source *s, void *userdata) {
        Manager *m = userdata;
        bool pending = false;

        for (size_t i = 0; i < m->n_peers; i++) {
                BrokerPeer *p = m->peers[i];
                int r = 0;

                if (p->dead || p->running)
                        continue;
                if (sd_bus_is_ready(p->bus) <= 0) {
                        pending = true;
                        continue;
                }
                p->running = true;
                for (unsigned k = 0; k < 256 && !p->dead; k++) {
                        r = sd_bus_process(p->bus, NULL);
                        if (r <= 0)
                                break;
                }
                if (r < 0)
                        peer_drop(p, strerror(-r));
        }
        if (!pending)
                (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
        return 0;
}

static size_t peers_of_uid(Manager *m, uid_t uid) {
        size_t n = 0;

        for (size_t i = 0; i < m->n_peers; i++)
                if (!m->peers[i]->dead && m->peers[i]->uid == uid)
                        n++;
        return n;
}

static int peer_add(Manager *m, int fd, const struct ucred *uc) {
        _cleanup_(sd_bus_unrefp) sd_bus *bus = NULL;
        BrokerPeer *p;
        int r;

        p = calloc(1, sizeof(BrokerPeer));
        if (!p)
                return -ENOMEM;
        *p = (BrokerPeer) { .manager = m, .uid = uc->uid, .pid = uc->pid };

        r = sd_bus_new(&bus);
        if (r >= 0)
                r = sd_bus_set_fd(bus, fd, fd);
        if (r < 0) {
                close(fd);
                free(p);
                return r;
        }
        /* From here the bus owns fd (closed with it). */
        r = sd_bus_set_server(bus, true, m->peer_server_id);
        if (r >= 0)
                r = sd_bus_negotiate_fds(bus, false);   /* Broker1 passes no descriptors */
        if (r >= 0)
                r = sd_bus_set_description(bus, "peer");
        if (r >= 0)
                r = broker_dbus_register_on(m, bus);
        if (r >= 0)
                r = sd_bus_add_filter(bus, NULL, on_peer_message, p);
        if (r >= 0)
                r = sd_bus_attach_event(bus, m->event, SD_EVENT_PRIORITY_NORMAL);
        if (r >= 0)
                r = sd_bus_start(bus);
        if (r < 0) {
                (void) sd_bus_detach_event(bus);
                free(p);
                return r;
        }
        p->bus = TAKE_PTR(bus);
        m->peers[m->n_peers++] = p;
        if (!m->peer_post) {
                r = sd_event_add_post(m->event, &m->peer_post, on_peer_post, m);
                if (r < 0)
                        return log_debug_errno(r, "Failed to watch peer authentications: %m"), 0;
                (void) sd_event_source_set_description(m->peer_post, "peer-post");
        }
        (void) sd_event_source_set_enabled(m->peer_post, SD_EVENT_ON);
        return 0;
}

static int on_peer_connect(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Manager *m = userdata;
        struct ucred uc = {};
        socklen_t l = sizeof(uc);
        int cfd, r;

        cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC|SOCK_NONBLOCK);
        if (cfd < 0) {
                if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                        log_warning_errno(errno, "Failed to accept on %s, ignoring: %m", m->peer_path);
                return 0;
        }
        if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &uc, &l) < 0 || l != sizeof(uc)) {
                log_warning_errno(errno, "Cannot read the credentials of a connection on %s, closing it: %m",
                                  m->peer_path);
                close(cfd);
                return 0;
        }
        if (!broker_access_trusted(m, uc.uid)) {
                /* Reads only: the system bus serves them (peer.h). */
                log_debug("Closing a peer connection of uid %u (pid %d): it may only read, and reads are "
                          "served on the system bus.", (unsigned) uc.uid, (int) uc.pid);
                close(cfd);
                return 0;
        }
        if (m->n_peers >= PEER_MAX || peers_of_uid(m, uc.uid) >= PEER_PER_UID_MAX) {
                log_notice("Closing a peer connection of uid %u (pid %d): %zu connection(s) open, at most %u, "
                           "%u per uid.", (unsigned) uc.uid, (int) uc.pid, m->n_peers, PEER_MAX, PEER_PER_UID_MAX);
                close(cfd);
                return 0;
        }
        r = peer_add(m, cfd, &uc);
        if (r < 0) {
                log_warning_errno(r, "Failed to set up the peer connection of uid %u, closing it: %m",
                                  (unsigned) uc.uid);
                return 0;       /* cfd was closed, alone or with the bus */
        }
        log_debug("Peer connection of uid %u (pid %d) accepted, %zu open.", (unsigned) uc.uid, (int) uc.pid,
                  m->n_peers);
        return 0;
}

/* Removes a socket a killed broker left at path; refuses anything else there. */
static int remove_stale_socket(const char *path) {
        struct stat st;

        if (lstat(path, &st) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISSOCK(st.st_mode))
                return -EEXIST;
        if (st.st_uid != geteuid())
                return -EPERM;
        return unlink(path) < 0 ? -errno : 0;
}

bool broker_peer_uid_mapped(const char *uid_map, uid_t uid) {
        /* Lines "inside outside count"; the uids this process sees are the inside ones. */
        for (const char *l = uid_map; l && *l; ) {
                unsigned long inside, outside, count;

                if (sscanf(l, "%lu %lu %lu", &inside, &outside, &count) == 3 &&
                    uid >= inside && uid - inside < count)
                        return true;
                l = strchr(l, '\n');
                if (l)
                        l++;
        }
        return false;
}

/* Under a user namespace that does not map grpc.user (systemd's PrivateUsers=), the
 * kernel reports its connections as uid 65534: no peer could be told from another. */
static bool grpc_uid_visible(Manager *m) {
        char map[4096];
        ssize_t n;
        int fd;

        if (m->grpc_uid == (uid_t) -1)
                return true;    /* no such user: only root and the broker's own uid use the socket */
        fd = open("/proc/self/uid_map", O_RDONLY|O_CLOEXEC);
        if (fd < 0)
                return true;    /* no /proc: no namespace to worry about */
        n = read(fd, map, sizeof(map) - 1);     /* at most 340 lines, each well under 4096 bytes */
        close(fd);
        if (n < 0)
                return true;
        map[n] = 0;
        return broker_peer_uid_mapped(map, m->grpc_uid);
}

int broker_peer_listen(Manager *m) {
        const char *path = m->config->broker_socket;
        _cleanup_free_ char *dir = NULL;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct stat st;
        int fd, r;

        if (isempty(path)) {
                log_info("No peer socket (broker.socket is empty): every client uses the system bus.");
                return 0;
        }
        if (strlen(path) >= sizeof(sa.sun_path)) {
                log_warning("Peer socket path %s is longer than %zu bytes, serving the system bus only.", path,
                            sizeof(sa.sun_path) - 1);
                return 0;
        }
        strcpy(sa.sun_path, path);

        if (!grpc_uid_visible(m)) {
                log_warning("The uid of %s (%u) is not mapped in the broker's user namespace (PrivateUsers= in "
                            "its unit?): peer connections could not be told apart, serving the system bus only.",
                            m->config->grpc_user, (unsigned) m->grpc_uid);
                return 0;
        }
        r = sd_id128_randomize(&m->peer_server_id);
        if (r < 0)
                return log_warning_errno(r, "Failed to make a server id, serving the system bus only: %m"), 0;

        dir = strdup(path);
        if (!dir)
                return log_oom();
        *strrchr(dir, '/') = 0;
        if (!isempty(dir)) {
                r = mkdir_p(dir, 0755);
                if (r < 0)
                        log_debug_errno(r, "Failed to create %s, trying to bind anyway: %m", dir);
        }
        r = remove_stale_socket(path);
        if (r < 0)
                return log_warning_errno(r, "Not replacing %s (%s), serving the system bus only: %m", path,
                                         r == -EEXIST ? "not a socket" : "not ours"), 0;

        fd = socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC|SOCK_NONBLOCK, 0);
        if (fd < 0)
                return log_warning_errno(errno, "Failed to create the peer socket, serving the system bus only: %m"), 0;
        if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                r = -errno;
                close(fd);
                return log_warning_errno(r, "Failed to bind %s, serving the system bus only: %m", path), 0;
        }
        /* Everyone may connect; the broker decides by uid (peer.h). */
        if (chmod(path, 0666) < 0 || listen(fd, PEER_BACKLOG) < 0 || stat(path, &st) < 0) {
                r = -errno;
                (void) unlink(path);
                close(fd);
                return log_warning_errno(r, "Failed to set up %s, serving the system bus only: %m", path), 0;
        }
        m->peer_path = strdup(path);
        if (!m->peer_path) {
                (void) unlink(path);
                close(fd);
                return log_oom();
        }
        m->peer_fd = fd;
        m->peer_dev = st.st_dev;
        m->peer_ino = st.st_ino;
        r = sd_event_add_io(m->event, &m->peer_source, fd, EPOLLIN, on_peer_connect, m);
        if (r < 0) {
                broker_peer_stop(m);
                return log_warning_errno(r, "Failed to watch %s, serving the system bus only: %m", path), 0;
        }
        (void) sd_event_source_set_description(m->peer_source, "peer-socket");
        log_debug("Listening on %s for peer connections.", path);
        return 0;
}

void broker_peer_stop(Manager *m) {
        struct stat st;

        for (size_t i = 0; i < m->n_peers; i++)
                peer_free(m->peers[i]);
        m->n_peers = 0;
        m->peer_collect = sd_event_source_disable_unref(m->peer_collect);
        m->peer_post = sd_event_source_disable_unref(m->peer_post);
        m->peer_source = sd_event_source_disable_unref(m->peer_source);
        if (m->peer_fd >= 0) {
                /* Only our own socket: a broker started meanwhile may have bound a new one. */
                if (m->peer_path && lstat(m->peer_path, &st) >= 0 && st.st_ino == m->peer_ino &&
                    st.st_dev == m->peer_dev)
                        (void) unlink(m->peer_path);
                close(m->peer_fd);
                m->peer_fd = -EBADF;
        }
        m->peer_path = mfree(m->peer_path);
}
