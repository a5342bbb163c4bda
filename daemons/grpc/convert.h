/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * convert.h — translation between the kubelet's protobuf messages and io.kgpu.Broker1.
 *
 * Contract: pure helpers, no logging above debug, no I/O. Everything that comes in (a
 * protobuf request from the kubelet, a D-Bus reply from the broker) is bounded by the
 * GRPCD_*_MAX limits below and validated before use.
 *  - grpcd_*_request_to_bus() decode a request and append the Broker1 arguments (after the
 *    resource name the caller appended) to m. -EBADMSG: the request is not a valid
 *    message of that type; -EINVAL: it breaks a bound or carries a bad id; both set
 *    *ret_reason to a static text for the gRPC status message. ret_n_containers, when
 *    given, receives the number of container requests.
 *    grpcd_allocate_request_to_bus() also hands out the decoded request when asked
 *    (ret_request, freed with protobuf_c_message_free_unpacked()).
 *  - grpcd_*_reply_from_bus() read a Broker1 reply and encode the protobuf answer into a newly
 *    allocated buffer. -EBADMSG: the reply does not have the expected shape or breaks a
 *    bound (including a container count other than n_containers).
 *    grpcd_allocate_reply_read() stops before the encoding, so that the answer can be
 *    checked first (gate.h); grpcd_message_pack() encodes it then.
 *  - Buffers are returned in *ret and *ret_len, freed by the caller; ret_* are untouched on
 *    failure.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>

#include "common/cleanup.h"
#include "grpc/grpc-h2.h"
#include "deviceplugin.pb-c.h"

#define GRPCD_RESOURCES_MAX        256u   /* resources the broker may advertise */
#define GRPCD_DEVICES_MAX          4096u  /* devices per resource */
#define GRPCD_ID_MAX               1024u  /* bytes per device id */
#define GRPCD_NUMA_NODES_MAX       64u    /* NUMA nodes per device */
#define GRPCD_CONTAINERS_MAX       256u   /* container requests per call */
#define GRPCD_IDS_MAX              4096u  /* device ids per container request */
#define GRPCD_ENTRIES_MAX          4096u  /* envs, mounts, devices, annotations, CDI names */
#define GRPCD_STRING_MAX           65536u /* bytes per path, env value, annotation */

/* One device as the broker reports it (GetDevices: a(ssai)). */
typedef struct GrpcdDevice {
        char *id;
        bool healthy;
        int64_t *numa_nodes;
        size_t n_numa_nodes;
} GrpcdDevice;

void grpcd_devices_free(GrpcdDevice *d, size_t n);

/* Valid UTF-8, no NUL, 1..GRPCD_ID_MAX bytes, no control characters. */
bool grpcd_device_id_valid(const char *id);
bool grpcd_utf8_valid(const char *s, size_t max);

/* D-Bus error of a Broker1 call -> gRPC status. */
GrpcStatus grpcd_status_from_bus_error(const char *error_name);

/* GetDevices reply body (a(ssai)) -> device list (devices sorted by nothing: broker order). */
int grpcd_devices_from_bus(sd_bus_message *m, GrpcdDevice **ret, size_t *ret_n);
/* Device list -> encoded ListAndWatchResponse. */
int grpcd_list_and_watch_encode(const GrpcdDevice *d, size_t n, uint8_t **ret, size_t *ret_len);
/* DevicePluginOptions. */
int grpcd_options_encode(bool pre_start_required, bool get_preferred_allocation_available,
                         uint8_t **ret, size_t *ret_len);

int grpcd_allocate_request_to_bus(const uint8_t *msg, size_t len, sd_bus_message *m,
                                  size_t *ret_n_containers, V1beta1__AllocateRequest **ret_request,
                                  const char **ret_reason);
int grpcd_allocate_reply_from_bus(sd_bus_message *reply, size_t n_containers,
                                  uint8_t **ret, size_t *ret_len);
int grpcd_allocate_reply_read(sd_bus_message *reply, size_t n_containers, V1beta1__AllocateResponse **ret);
/* Encodes any protobuf message into a new buffer (never NULL, also when empty). */
int grpcd_message_pack(const ProtobufCMessage *msg, uint8_t **ret, size_t *ret_len);

int grpcd_preferred_request_to_bus(const uint8_t *msg, size_t len, sd_bus_message *m,
                                   size_t *ret_n_containers, const char **ret_reason);
int grpcd_preferred_reply_from_bus(sd_bus_message *reply, size_t n_containers,
                                   uint8_t **ret, size_t *ret_len);

int grpcd_prestart_request_to_bus(const uint8_t *msg, size_t len, sd_bus_message *m,
                                  const char **ret_reason);
/* Encoded (empty) PreStartContainerResponse. */
int grpcd_prestart_reply_encode(uint8_t **ret, size_t *ret_len);

/* Encoded RegisterRequest for the kubelet. */
int grpcd_register_request_encode(const char *endpoint, const char *resource,
                                  bool pre_start_required,
                                  bool get_preferred_allocation_available,
                                  uint8_t **ret, size_t *ret_len);
