/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-proto.c — libFuzzer target for protobuf-c decoding of every kubelet message
 * kgpu-grpcd receives (and the answers it builds, which the tests decode).
 *
 * Contract: the first input byte selects the message type, the rest is decoded; a
 * decoded message is packed again and freed. Any crash, leak or sanitizer report is
 * a bug.
 */

#include <stdint.h>
#include <stdlib.h>

#include "deviceplugin.pb-c.h"
#include "podresources.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const ProtobufCMessageDescriptor *const descriptors[] = {
        &v1beta1__allocate_request__descriptor,
        &v1beta1__preferred_allocation_request__descriptor,
        &v1beta1__pre_start_container_request__descriptor,
        &v1beta1__register_request__descriptor,
        &v1beta1__list_and_watch_response__descriptor,
        &v1beta1__allocate_response__descriptor,
        &v1beta1__preferred_allocation_response__descriptor,
        &v1beta1__device_plugin_options__descriptor,
        &v1beta1__empty__descriptor,
        &v1__list_pod_resources_response__descriptor,
        &v1__allocatable_resources_response__descriptor,
        &v1__get_pod_resources_response__descriptor,
        &v1__get_pod_resources_request__descriptor,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const ProtobufCMessageDescriptor *d;
        ProtobufCMessage *m;
        uint8_t *out;
        size_t n;

        if (size < 1)
                return 0;
        d = descriptors[data[0] % (sizeof descriptors / sizeof descriptors[0])];
        m = protobuf_c_message_unpack(d, NULL, size - 1, data + 1);
        if (!m)
                return 0;
        n = protobuf_c_message_get_packed_size(m);
        out = malloc(n ? n : 1);
        if (!out)
                abort();
        if (protobuf_c_message_pack(m, out) != n)
                abort();
        free(out);
        protobuf_c_message_free_unpacked(m, NULL);
        return 0;
}
