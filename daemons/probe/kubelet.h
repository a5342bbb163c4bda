/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kubelet.h — the kubelet's directories, seen and touched only by the root probe on
 * behalf of kgpu-grpcd (io.kgpu.Kubelet1).
 *
 * Why: the kubelet makes /var/lib/kubelet, device-plugins/ and pod-resources/ 0750
 * root:root and creates its sockets under umask 0022, so an unprivileged user can
 * neither traverse to them nor connect to them. grpcd never gets access; the probe does
 * every filesystem operation there and hands over descriptors.
 *
 * Contract:
 *  - kubelet_dir_open_plugin_socket() binds a listening socket named
 *    resource_socket_name(resource) ("kgpu-*.sock", never a caller-chosen path) in the
 *    device-plugins directory, replacing whatever entry had that name (unlinkat: a
 *    symlink is removed, never followed), mode 0600 root, and returns the listening fd
 *    and the socket file's inode. The resource must be a valid resource name in the
 *    domain of a vendor the configuration enables (gpu.intel.com, nvidia.com).
 *  - kubelet_dir_connect() connects to the kubelet's registration or PodResources
 *    socket and returns the connected fd. It trusts nothing another user could have
 *    placed there: the entry is opened with O_PATH|O_NOFOLLOW relative to its directory,
 *    must be a socket owned by root (by the probe's own uid when the probe is not root,
 *    as in tests) and is connected through /proc/self/fd/N, so what was checked is what
 *    is connected to. A symlink, a regular file, a FIFO, a directory or a socket of
 *    another owner is refused with a message naming the path, what it is and its owner.
 *  - The device-plugins directory (and the registration socket's directory, when it is
 *    configured elsewhere) is watched with inotify; after every batch of events the
 *    state is read again from the directory, never from the events: the registration
 *    socket's inode (0 while it is absent or refused), its state in words, and the
 *    kgpu-*.sock sockets present with their inodes. The changed callback runs when any
 *    of it changed. While the directory does not exist it is looked for once a second.
 *  - Under a service manager (INVOCATION_ID set), a device-plugins directory that is
 *    read-only in the probe's mount namespace (it appeared after the unit started, so
 *    ReadWritePaths= did not apply) ends the event loop with KUBELET_EXIT_RESTART.
 *  - Sockets made for a bus peer are tracked: when that peer leaves the bus, those still
 *    in place (same inode) are removed. Restarting the probe removes nothing.
 *  - Errors: negative errno; operations that can be refused also return a message for
 *    the caller in *ret_message (freed by the caller), naming the path.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "common/cleanup.h"
#include "common/config.h"

typedef struct KubeletDir KubeletDir;

typedef enum KubeletSocketKind {
        KUBELET_SOCKET_REGISTRATION,
        KUBELET_SOCKET_POD_RESOURCES,
} KubeletSocketKind;

typedef struct KubeletPluginSocket {
        char *name;
        uint64_t inode;
} KubeletPluginSocket;

/* Event loop exit code when the device-plugins directory is read-only in the probe's
 * mount namespace (see kubelet_dir_check_writable()): the service manager restarts it. */
#define KUBELET_EXIT_RESTART 75

/* Most kgpu-*.sock entries reported, and sockets made for callers. */
#define KUBELET_PLUGIN_SOCKETS_MAX 256u

typedef void (*KubeletDirChanged)(KubeletDir *k, void *userdata);

int kubelet_dir_new(sd_event *event, KubeletDirChanged changed, void *userdata, KubeletDir **ret);
KubeletDir *kubelet_dir_free(KubeletDir *k);
DEFINE_CLEANUP_FUNC(KubeletDir, kubelet_dir_free);

/* Takes the paths and the enabled vendors from the configuration. A changed path
 * restarts the watch (when started). -EINVAL for a relative path, -ENOMEM. */
int kubelet_dir_configure(KubeletDir *k, const Config *c);
/* The uid besides root that may call io.kgpu.Kubelet1 (the front end's), (uid_t) -1: none. */
void kubelet_dir_set_caller_uid(KubeletDir *k, uid_t uid);
uid_t kubelet_dir_caller_uid(const KubeletDir *k);
/* Starts watching; reads the state once. */
int kubelet_dir_start(KubeletDir *k);

const char *kubelet_dir_device_plugin_path(const KubeletDir *k);
const char *kubelet_dir_socket_path(const KubeletDir *k, KubeletSocketKind kind);
uint64_t kubelet_dir_kubelet_inode(const KubeletDir *k);
/* "absent", "present", "no directory" or why the entry is refused. */
const char *kubelet_dir_kubelet_state(const KubeletDir *k);
/* The last refused or failed operation done for a caller, "" after a success. */
const char *kubelet_dir_last_error(const KubeletDir *k);
const KubeletPluginSocket *kubelet_dir_plugin_sockets(const KubeletDir *k, size_t *ret_n);

int kubelet_dir_open_plugin_socket(KubeletDir *k, const char *resource, sd_bus_message *caller,
                                   int *ret_fd, uint64_t *ret_inode, char **ret_message);
/* Removes the socket of resource if its inode is still `inode`. 0 if removed or absent. */
int kubelet_dir_close_plugin_socket(KubeletDir *k, const char *resource, uint64_t inode);
int kubelet_dir_connect(KubeletDir *k, KubeletSocketKind kind, int *ret_fd, char **ret_message);

/* Describes what fstat() found at a path in words ("a symbolic link owned by uid 998
 * (kgpu)"); NULL if it is an acceptable socket for owner_uid. Exposed for tests. */
char *kubelet_describe_unsafe(const struct stat *st, uid_t owner_uid);
