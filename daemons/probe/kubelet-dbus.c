/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kubelet-dbus.c — the io.kgpu.Kubelet1 vtable on /io/kgpu/Probe1 (contract:
 * dbus/io.kgpu.Probe1.xml; the work is kubelet.c's).
 *
 * The userdata is the KubeletDir. Its methods are allowed for uid 0 and the front end's
 * uid (kubelet_dir_caller_uid()) only, whatever the bus policy says; refusals map to
 * io.kgpu.Error.InvalidArgs (-EINVAL), io.kgpu.Error.Refused (-EPERM: another domain,
 * something unsafe at the kubelet's socket) and io.kgpu.Error.KubeletUnavailable (the
 * rest), each with kubelet.c's message.
 */

#include <errno.h>
#include <string.h>

#include "common/bus-creds.h"
#include "common/bus-names.h"
#include "common/util.h"
#include "daemons/probe/kubelet-dbus.h"
#include "daemons/probe/kubelet.h"

static int property_get_kubelet_string(sd_bus *bus, const char *path, const char *interface,
                                       const char *property, sd_bus_message *reply,
                                       void *userdata, sd_bus_error *error) {
        KubeletDir *k = userdata;
        const char *v;

        if (streq(property, "DevicePluginPath"))
                v = kubelet_dir_device_plugin_path(k);
        else if (streq(property, "RegistrationSocket"))
                v = kubelet_dir_socket_path(k, KUBELET_SOCKET_REGISTRATION);
        else if (streq(property, "PodResourcesSocket"))
                v = kubelet_dir_socket_path(k, KUBELET_SOCKET_POD_RESOURCES);
        else if (streq(property, "KubeletState"))
                v = kubelet_dir_kubelet_state(k);
        else
                v = kubelet_dir_last_error(k);
        return sd_bus_message_append(reply, "s", v);
}

static int property_get_kubelet_inode(sd_bus *bus, const char *path, const char *interface,
                                      const char *property, sd_bus_message *reply,
                                      void *userdata, sd_bus_error *error) {
        return sd_bus_message_append(reply, "t", kubelet_dir_kubelet_inode(userdata));
}

static int property_get_plugin_sockets(sd_bus *bus, const char *path, const char *interface,
                                       const char *property, sd_bus_message *reply,
                                       void *userdata, sd_bus_error *error) {
        const KubeletPluginSocket *l;
        size_t n;
        int r;

        l = kubelet_dir_plugin_sockets(userdata, &n);
        r = sd_bus_message_open_container(reply, 'a', "(st)");
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                r = sd_bus_message_append(reply, "(st)", l[i].name, l[i].inode);
                if (r < 0)
                        return r;
        }
        return sd_bus_message_close_container(reply);
}

static int kubelet_error(sd_bus_error *error, int r, const char *message) {
        const char *name = r == -EINVAL ? KGPU_ERROR_INVALID_ARGS :
                           r == -EPERM ? KGPU_ERROR_REFUSED : KGPU_ERROR_KUBELET_UNAVAILABLE;

        if (message)
                return sd_bus_error_set(error, name, message);
        return sd_bus_error_setf(error, name, "%s", strerror(r < 0 ? -r : r));
}

static int method_open_plugin_socket(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        _cleanup_free_ char *msg = NULL;
        _cleanup_close_ int fd = -EBADF;
        KubeletDir *k = userdata;
        const char *resource;
        uint64_t inode;
        int r;

        r = bus_check_sender_uid(message, kubelet_dir_caller_uid(k), error);
        if (r < 0)
                return r;
        r = sd_bus_message_read(message, "s", &resource);
        if (r < 0)
                return r;
        r = kubelet_dir_open_plugin_socket(k, resource, message, &fd, &inode, &msg);
        if (r < 0)
                return kubelet_error(error, r, msg);
        return sd_bus_reply_method_return(message, "ht", fd, inode);
}

static int method_close_plugin_socket(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        KubeletDir *k = userdata;
        const char *resource;
        uint64_t inode;
        int r;

        r = bus_check_sender_uid(message, kubelet_dir_caller_uid(k), error);
        if (r < 0)
                return r;
        r = sd_bus_message_read(message, "st", &resource, &inode);
        if (r < 0)
                return r;
        r = kubelet_dir_close_plugin_socket(k, resource, inode);
        if (r < 0)
                return kubelet_error(error, r, NULL);
        return sd_bus_reply_method_return(message, NULL);
}

static int kubelet_connect(sd_bus_message *message, KubeletDir *k, KubeletSocketKind kind, sd_bus_error *error) {
        _cleanup_free_ char *msg = NULL;
        _cleanup_close_ int fd = -EBADF;
        int r;

        r = bus_check_sender_uid(message, kubelet_dir_caller_uid(k), error);
        if (r < 0)
                return r;
        r = kubelet_dir_connect(k, kind, &fd, &msg);
        if (r < 0)
                return kubelet_error(error, r, msg);
        return sd_bus_reply_method_return(message, "h", fd);
}

static int method_connect_kubelet(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        return kubelet_connect(message, userdata, KUBELET_SOCKET_REGISTRATION, error);
}

static int method_connect_pod_resources(sd_bus_message *message, void *userdata, sd_bus_error *error) {
        return kubelet_connect(message, userdata, KUBELET_SOCKET_POD_RESOURCES, error);
}

int kubelet_dbus_emit(sd_bus *bus) {
        if (!bus)
                return 0;
        return sd_bus_emit_properties_changed(bus, KGPU_PROBE_PATH, KGPU_KUBELET_INTERFACE,
                                              "DevicePluginPath", "RegistrationSocket", "PodResourcesSocket",
                                              "KubeletInode", "KubeletState", "PluginSockets", "LastError", NULL);
}

#define KUBELET_PROP(name, sig, getter) \
        SD_BUS_PROPERTY(name, sig, getter, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE)

const sd_bus_vtable kubelet_dbus_vtable[] = {
        SD_BUS_VTABLE_START(0),
        KUBELET_PROP("DevicePluginPath", "s", property_get_kubelet_string),
        KUBELET_PROP("RegistrationSocket", "s", property_get_kubelet_string),
        KUBELET_PROP("PodResourcesSocket", "s", property_get_kubelet_string),
        KUBELET_PROP("KubeletInode", "t", property_get_kubelet_inode),
        KUBELET_PROP("KubeletState", "s", property_get_kubelet_string),
        KUBELET_PROP("PluginSockets", "a(st)", property_get_plugin_sockets),
        KUBELET_PROP("LastError", "s", property_get_kubelet_string),
        SD_BUS_METHOD_WITH_ARGS("OpenPluginSocket", SD_BUS_ARGS("s", resource),
                                SD_BUS_RESULT("h", listener, "t", inode), method_open_plugin_socket,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ClosePluginSocket", SD_BUS_ARGS("s", resource, "t", inode),
                                SD_BUS_NO_RESULT, method_close_plugin_socket, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ConnectKubelet", SD_BUS_NO_ARGS, SD_BUS_RESULT("h", socket),
                                method_connect_kubelet, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ConnectPodResources", SD_BUS_NO_ARGS, SD_BUS_RESULT("h", socket),
                                method_connect_pod_resources, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
};


int kubelet_dbus_add(sd_bus *bus, KubeletDir *k) {
        return sd_bus_add_object_vtable(bus, NULL, KGPU_PROBE_PATH, KGPU_KUBELET_INTERFACE, kubelet_dbus_vtable, k);
}
