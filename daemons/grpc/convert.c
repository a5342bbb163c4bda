/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * convert.c — translation between the kubelet's protobuf messages and io.kgpu.Broker1.
 *
 * Contract: see convert.h. Protobuf answers are built from heap copies and released with
 * protobuf_c_message_free_unpacked(), so a half-built message is always safe to free.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/resource-name.h"
#include "common/util.h"
#include "daemons/grpc/convert.h"
#include "deviceplugin.pb-c.h"

void grpcd_devices_free(GrpcdDevice *d, size_t n) {
        if (!d)
                return;
        for (size_t i = 0; i < n; i++) {
                free(d[i].id);
                free(d[i].numa_nodes);
        }
        free(d);
}

bool grpcd_utf8_valid(const char *s, size_t max) {
        const unsigned char *p = (const unsigned char *) s;
        size_t n = 0;

        if (!s)
                return false;
        while (*p) {
                unsigned c = *p;
                size_t k;
                uint32_t cp;

                if (c < 0x80) {
                        k = 0;
                        cp = c;
                } else if ((c & 0xe0) == 0xc0) {
                        k = 1;
                        cp = c & 0x1f;
                } else if ((c & 0xf0) == 0xe0) {
                        k = 2;
                        cp = c & 0x0f;
                } else if ((c & 0xf8) == 0xf0) {
                        k = 3;
                        cp = c & 0x07;
                } else
                        return false;
                for (size_t i = 1; i <= k; i++) {
                        if ((p[i] & 0xc0) != 0x80)
                                return false;
                        cp = (cp << 6) | (p[i] & 0x3f);
                }
                /* Overlong forms, surrogates, beyond U+10FFFF. */
                if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
                    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
                        return false;
                p += k + 1;
                n += k + 1;
                if (n > max)
                        return false;
        }
        return true;
}

bool grpcd_device_id_valid(const char *id) {
        if (isempty(id))
                return false;
        if (!grpcd_utf8_valid(id, GRPCD_ID_MAX))
                return false;
        for (const unsigned char *p = (const unsigned char *) id; *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                        return false;
        return true;
}

GrpcStatus grpcd_status_from_bus_error(const char *error_name) {
        static const struct {
                const char *name;
                GrpcStatus status;
        } table[] = {
                { KGPU_ERROR_UNKNOWN_RESOURCE,                   GRPC_STATUS_INVALID_ARGUMENT },
                { KGPU_ERROR_UNKNOWN_DEVICE,                     GRPC_STATUS_INVALID_ARGUMENT },
                { KGPU_ERROR_INVALID_ARGS,                       GRPC_STATUS_INVALID_ARGUMENT },
                { SD_BUS_ERROR_INVALID_ARGS,                     GRPC_STATUS_INVALID_ARGUMENT },
                { KGPU_ERROR_UNHEALTHY,                          GRPC_STATUS_FAILED_PRECONDITION },
                { KGPU_ERROR_EXHAUSTED,                          GRPC_STATUS_FAILED_PRECONDITION },
                { KGPU_ERROR_NO_GAS_POD,                         GRPC_STATUS_FAILED_PRECONDITION },
                { KGPU_ERROR_TOO_MANY_ALLOCATIONS,               GRPC_STATUS_RESOURCE_EXHAUSTED },
                { KGPU_ERROR_ACCESS_DENIED,                      GRPC_STATUS_PERMISSION_DENIED },
                { SD_BUS_ERROR_ACCESS_DENIED,                    GRPC_STATUS_PERMISSION_DENIED },
                { KGPU_ERROR_STATE,                              GRPC_STATUS_UNAVAILABLE },
                { SD_BUS_ERROR_SERVICE_UNKNOWN,                  GRPC_STATUS_UNAVAILABLE },
                { SD_BUS_ERROR_NAME_HAS_NO_OWNER,                GRPC_STATUS_UNAVAILABLE },
                { SD_BUS_ERROR_NO_REPLY,                         GRPC_STATUS_UNAVAILABLE },
                { SD_BUS_ERROR_TIMEOUT,                          GRPC_STATUS_UNAVAILABLE },
                { SD_BUS_ERROR_DISCONNECTED,                     GRPC_STATUS_UNAVAILABLE },
                { SD_BUS_ERROR_LIMITS_EXCEEDED,                  GRPC_STATUS_RESOURCE_EXHAUSTED },
                { SD_BUS_ERROR_NO_MEMORY,                        GRPC_STATUS_RESOURCE_EXHAUSTED },
                { SD_BUS_ERROR_UNKNOWN_METHOD,                   GRPC_STATUS_UNIMPLEMENTED },
                { SD_BUS_ERROR_NOT_SUPPORTED,                    GRPC_STATUS_UNIMPLEMENTED },
        };

        for (size_t i = 0; i < ELEMENTSOF(table); i++)
                if (streq(error_name, table[i].name))
                        return table[i].status;
        return GRPC_STATUS_INTERNAL;
}

/* Appends p to a heap array of pointers, growing it; *n counts the elements in it. */
static int ptr_array_push(void *array, size_t *n, void *p) {
        void ***a = array;
        void **na;

        na = reallocarray(*a, *n + 1, sizeof(void *));
        if (!na)
                return -ENOMEM;
        na[(*n)++] = p;
        *a = na;
        return 0;
}

static int bus_to_errno(int r) {
        /* Shape errors while reading a reply are all "bad message" to our callers. */
        return r == -ENOMEM ? r : -EBADMSG;
}

static int cmp_id_ptr(const void *a, const void *b) {
        return strcmp(*(char * const *) a, *(char * const *) b);
}

/* The kubelet keys devices by id: a duplicate is a broker bug. Sorting a copy of the id
 * pointers keeps this O(n log n) (a pairwise check cost 24 ms at 4096 devices). */
static int devices_check_unique(const GrpcdDevice *d, size_t n) {
        _cleanup_free_ char **ids = NULL;

        if (n < 2)
                return 0;
        ids = calloc(n, sizeof(char *));
        if (!ids)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                ids[i] = d[i].id;
        qsort(ids, n, sizeof(char *), cmp_id_ptr);
        for (size_t i = 1; i < n; i++)
                if (streq(ids[i - 1], ids[i]))
                        return -EBADMSG;
        return 0;
}

/* One (ssai) entry of GetDevices: id, health and NUMA nodes. */
static int device_init(GrpcdDevice *d, const char *id, const char *health, const int32_t *numa, size_t n_numa) {
        *d = (GrpcdDevice) {
                .id = strdup(id),
                .healthy = streq(health, "Healthy"),
        };
        if (!d->id)
                return -ENOMEM;
        if (n_numa == 0)
                return 0;
        d->numa_nodes = calloc(n_numa, sizeof(int64_t));
        if (!d->numa_nodes)
                return -ENOMEM;
        for (size_t i = 0; i < n_numa; i++)
                d->numa_nodes[i] = numa[i];
        d->n_numa_nodes = n_numa;
        return 0;
}

int grpcd_devices_from_bus(sd_bus_message *m, GrpcdDevice **ret, size_t *ret_n) {
        GrpcdDevice *d = NULL;
        size_t n = 0, allocated = 0;
        int r;

        r = sd_bus_message_enter_container(m, 'a', "(ssai)");
        if (r <= 0)
                return -EBADMSG;
        for (;;) {
                const char *id, *health;
                const int32_t *numa;
                size_t sz, n_numa;
                GrpcdDevice *nd;

                r = sd_bus_message_enter_container(m, 'r', "ssai");
                if (r < 0)
                        goto fail;
                if (r == 0)
                        break;
                if (n >= GRPCD_DEVICES_MAX) {
                        r = -EBADMSG;
                        goto fail;
                }
                r = sd_bus_message_read(m, "ss", &id, &health);
                if (r < 0)
                        goto fail;
                r = sd_bus_message_read_array(m, 'i', (const void **) &numa, &sz);
                if (r < 0)
                        goto fail;
                n_numa = sz / sizeof(int32_t);
                if (!grpcd_device_id_valid(id) || n_numa > GRPCD_NUMA_NODES_MAX) {
                        r = -EBADMSG;
                        goto fail;
                }
                r = sd_bus_message_exit_container(m);
                if (r < 0)
                        goto fail;

                if (n == allocated) {
                        allocated = MIN(MAX(allocated * 2, (size_t) 16), (size_t) GRPCD_DEVICES_MAX);
                        nd = reallocarray(d, allocated, sizeof(GrpcdDevice));
                        if (!nd) {
                                r = -ENOMEM;
                                goto fail;
                        }
                        d = nd;
                }
                /* Counted at once: grpcd_devices_free() frees what it got so far. */
                r = device_init(&d[n++], id, health, numa, n_numa);
                if (r < 0)
                        goto fail;
        }
        r = sd_bus_message_exit_container(m);
        if (r < 0)
                goto fail;
        r = devices_check_unique(d, n);
        if (r < 0)
                goto fail;

        *ret = d;
        *ret_n = n;
        return 0;

fail:
        grpcd_devices_free(d, n);
        return bus_to_errno(r);
}

int grpcd_message_pack(const ProtobufCMessage *msg, uint8_t **ret, size_t *ret_len) {
        size_t len = protobuf_c_message_get_packed_size(msg);
        uint8_t *buf;

        /* Never return NULL for an empty message: callers treat NULL as failure. */
        buf = malloc(len > 0 ? len : 1);
        if (!buf)
                return -ENOMEM;
        if (protobuf_c_message_pack(msg, buf) != len) {
                free(buf);
                return -EIO;
        }
        *ret = buf;
        *ret_len = len;
        return 0;
}

int grpcd_list_and_watch_encode(const GrpcdDevice *d, size_t n, uint8_t **ret, size_t *ret_len) {
        V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
        _cleanup_free_ V1beta1__Device *devs = NULL;
        _cleanup_free_ V1beta1__Device **devp = NULL;
        _cleanup_free_ V1beta1__TopologyInfo *topo = NULL;
        _cleanup_free_ V1beta1__NUMANode *nodes = NULL;
        _cleanup_free_ V1beta1__NUMANode **nodep = NULL;
        size_t n_nodes = 0, k = 0;

        if (n > GRPCD_DEVICES_MAX)
                return -E2BIG;
        for (size_t i = 0; i < n; i++)
                n_nodes += d[i].n_numa_nodes;

        if (n > 0) {
                devs = calloc(n, sizeof(V1beta1__Device));
                devp = calloc(n, sizeof(V1beta1__Device *));
                topo = calloc(n, sizeof(V1beta1__TopologyInfo));
                if (!devs || !devp || !topo)
                        return -ENOMEM;
        }
        if (n_nodes > 0) {
                nodes = calloc(n_nodes, sizeof(V1beta1__NUMANode));
                nodep = calloc(n_nodes, sizeof(V1beta1__NUMANode *));
                if (!nodes || !nodep)
                        return -ENOMEM;
        }

        for (size_t i = 0; i < n; i++) {
                v1beta1__device__init(&devs[i]);
                devs[i].id = d[i].id;
                devs[i].health = (char *) (d[i].healthy ? "Healthy" : "Unhealthy");
                if (d[i].n_numa_nodes > 0) {
                        v1beta1__topology_info__init(&topo[i]);
                        topo[i].n_nodes = d[i].n_numa_nodes;
                        topo[i].nodes = nodep + k;
                        for (size_t j = 0; j < d[i].n_numa_nodes; j++, k++) {
                                v1beta1__numanode__init(&nodes[k]);
                                nodes[k].id = d[i].numa_nodes[j];
                                nodep[k] = &nodes[k];
                        }
                        devs[i].topology = &topo[i];
                }
                devp[i] = &devs[i];
        }
        resp.n_devices = n;
        resp.devices = devp;

        return grpcd_message_pack(&resp.base, ret, ret_len);
}

int grpcd_options_encode(bool pre_start_required, bool get_preferred_allocation_available,
                         uint8_t **ret, size_t *ret_len) {
        V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;

        o.pre_start_required = pre_start_required;
        o.get_preferred_allocation_available = get_preferred_allocation_available;
        return grpcd_message_pack(&o.base, ret, ret_len);
}

int grpcd_prestart_reply_encode(uint8_t **ret, size_t *ret_len) {
        V1beta1__PreStartContainerResponse o = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;

        return grpcd_message_pack(&o.base, ret, ret_len);
}

int grpcd_register_request_encode(const char *endpoint, const char *resource,
                                  bool pre_start_required,
                                  bool get_preferred_allocation_available,
                                  uint8_t **ret, size_t *ret_len) {
        V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
        V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;

        if (isempty(endpoint) || !resource_name_valid(resource))
                return -EINVAL;
        o.pre_start_required = pre_start_required;
        o.get_preferred_allocation_available = get_preferred_allocation_available;
        req.version = (char *) "v1beta1";
        req.endpoint = (char *) endpoint;
        req.resource_name = (char *) resource;
        req.options = &o;
        return grpcd_message_pack(&req.base, ret, ret_len);
}

/* Checks and appends one list of device ids as "as". */
static int append_ids(sd_bus_message *m, char **ids, size_t n, bool allow_empty,
                      const char **ret_reason) {
        int r;

        if (n == 0 && !allow_empty) {
                *ret_reason = "a container request names no device";
                return -EINVAL;
        }
        if (n > GRPCD_IDS_MAX) {
                *ret_reason = "too many device ids in one container request";
                return -EINVAL;
        }
        for (size_t i = 0; i < n; i++)
                if (!grpcd_device_id_valid(ids[i])) {
                        *ret_reason = "invalid device id (empty, too long, not UTF-8 or control characters)";
                        return -EINVAL;
                }

        r = sd_bus_message_open_container(m, 'a', "s");
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                r = sd_bus_message_append_basic(m, 's', ids[i]);
                if (r < 0)
                        return r;
        }
        return sd_bus_message_close_container(m);
}

int grpcd_allocate_request_to_bus(const uint8_t *msg, size_t len, sd_bus_message *m,
                                  size_t *ret_n_containers, V1beta1__AllocateRequest **ret_request,
                                  const char **ret_reason) {
        V1beta1__AllocateRequest *req;
        size_t n;
        int r;

        req = v1beta1__allocate_request__unpack(NULL, len, msg);
        if (!req) {
                *ret_reason = "malformed AllocateRequest";
                return -EBADMSG;
        }
        n = req->n_container_requests;
        if (n == 0 || n > GRPCD_CONTAINERS_MAX) {
                *ret_reason = n == 0 ? "AllocateRequest has no container requests"
                                     : "too many container requests";
                r = -EINVAL;
                goto finish;
        }

        r = sd_bus_message_open_container(m, 'a', "as");
        if (r < 0)
                goto finish;
        for (size_t i = 0; i < n; i++) {
                r = append_ids(m, req->container_requests[i]->devices_ids,
                               req->container_requests[i]->n_devices_ids, false, ret_reason);
                if (r < 0)
                        goto finish;
        }
        r = sd_bus_message_close_container(m);
        if (r < 0)
                goto finish;

        if (ret_n_containers)
                *ret_n_containers = n;
        if (ret_request)
                *ret_request = TAKE_PTR(req);
        r = 0;
finish:
        if (req)
                v1beta1__allocate_request__free_unpacked(req, NULL);
        return r;
}

int grpcd_preferred_request_to_bus(const uint8_t *msg, size_t len, sd_bus_message *m,
                                   size_t *ret_n_containers, const char **ret_reason) {
        V1beta1__PreferredAllocationRequest *req;
        size_t n;
        int r;

        req = v1beta1__preferred_allocation_request__unpack(NULL, len, msg);
        if (!req) {
                *ret_reason = "malformed PreferredAllocationRequest";
                return -EBADMSG;
        }
        n = req->n_container_requests;
        if (n == 0 || n > GRPCD_CONTAINERS_MAX) {
                *ret_reason = n == 0 ? "PreferredAllocationRequest has no container requests"
                                     : "too many container requests";
                r = -EINVAL;
                goto finish;
        }

        r = sd_bus_message_open_container(m, 'a', "(asasi)");
        if (r < 0)
                goto finish;
        for (size_t i = 0; i < n; i++) {
                V1beta1__ContainerPreferredAllocationRequest *c = req->container_requests[i];

                if (c->allocation_size <= 0 || (size_t) c->allocation_size > GRPCD_IDS_MAX) {
                        *ret_reason = "allocation_size out of range";
                        r = -EINVAL;
                        goto finish;
                }
                r = sd_bus_message_open_container(m, 'r', "asasi");
                if (r < 0)
                        goto finish;
                r = append_ids(m, c->available_deviceids, c->n_available_deviceids, true, ret_reason);
                if (r < 0)
                        goto finish;
                r = append_ids(m, c->must_include_deviceids, c->n_must_include_deviceids, true, ret_reason);
                if (r < 0)
                        goto finish;
                r = sd_bus_message_append_basic(m, 'i', &c->allocation_size);
                if (r < 0)
                        goto finish;
                r = sd_bus_message_close_container(m);
                if (r < 0)
                        goto finish;
        }
        r = sd_bus_message_close_container(m);
        if (r < 0)
                goto finish;

        if (ret_n_containers)
                *ret_n_containers = n;
        r = 0;
finish:
        v1beta1__preferred_allocation_request__free_unpacked(req, NULL);
        return r;
}

int grpcd_prestart_request_to_bus(const uint8_t *msg, size_t len, sd_bus_message *m,
                                  const char **ret_reason) {
        V1beta1__PreStartContainerRequest *req;
        int r;

        req = v1beta1__pre_start_container_request__unpack(NULL, len, msg);
        if (!req) {
                *ret_reason = "malformed PreStartContainerRequest";
                return -EBADMSG;
        }
        r = append_ids(m, req->devices_ids, req->n_devices_ids, false, ret_reason);
        v1beta1__pre_start_container_request__free_unpacked(req, NULL);
        return r;
}

/* Reads one bounded string into a heap copy. */
static int read_string_dup(sd_bus_message *m, char **ret) {
        const char *s;
        char *c;
        int r;

        r = sd_bus_message_read_basic(m, 's', &s);
        if (r <= 0)
                return -EBADMSG;
        if (strnlen(s, GRPCD_STRING_MAX + 1) > GRPCD_STRING_MAX)
                return -EBADMSG;
        c = strdup(s);
        if (!c)
                return -ENOMEM;
        *ret = c;
        return 0;
}

/* The shape of a D-Bus array whose items each become one protobuf message. */
typedef struct ListShape {
        const char *array;              /* contents of the array: "(ssb)" */
        char type;                      /* of one item: 'r', 'e' or 'a' */
        const char *item;               /* contents of one item: "ssb" */
} ListShape;

typedef int (*ItemReader)(sd_bus_message *m, void *item);

/* Reads the array as shaped, at most max items: each is allocated as a message of desc,
 * appended to *items (so it is freed with its parent even when reading fails) and
 * filled by read_item from inside the item's container. */
static int read_message_list(sd_bus_message *m, const ListShape *shape, size_t max,
                             const ProtobufCMessageDescriptor *desc, ItemReader read_item,
                             void *items, size_t *n_items) {
        int r;

        r = sd_bus_message_enter_container(m, 'a', shape->array);
        if (r <= 0)
                return -EBADMSG;
        for (;;) {
                ProtobufCMessage *item;

                r = sd_bus_message_enter_container(m, shape->type, shape->item);
                if (r < 0)
                        return bus_to_errno(r);
                if (r == 0)
                        break;
                if (*n_items >= max)
                        return -EBADMSG;
                item = malloc(desc->sizeof_message);
                if (!item)
                        return -ENOMEM;
                protobuf_c_message_init(desc, item);
                r = ptr_array_push(items, n_items, item);
                if (r < 0) {
                        free(item);
                        return r;
                }
                r = read_item(m, item);
                if (r < 0)
                        return r;
                r = sd_bus_message_exit_container(m);
                if (r < 0)
                        return bus_to_errno(r);
        }
        r = sd_bus_message_exit_container(m);
        return r < 0 ? bus_to_errno(r) : 0;
}

/* a{ss} -> map entries. The generated entry types share the MapEntry layout (base, key,
 * value). */
typedef struct MapEntry {
        ProtobufCMessage base;
        char *key;
        char *value;
} MapEntry;

static int read_map_entry(sd_bus_message *m, void *item) {
        MapEntry *e = item;
        int r;

        r = read_string_dup(m, &e->key);
        if (r < 0)
                return r;
        return read_string_dup(m, &e->value);
}

static int read_map(sd_bus_message *m, const ProtobufCMessageDescriptor *desc,
                    void *entries, size_t *n_entries) {
        static const ListShape shape = { "{ss}", 'e', "ss" };

        return read_message_list(m, &shape, GRPCD_ENTRIES_MAX, desc, read_map_entry, entries, n_entries);
}

static int read_mount(sd_bus_message *m, void *item) {
        V1beta1__Mount *mt = item;
        int ro, r;

        r = read_string_dup(m, &mt->container_path);
        if (r < 0)
                return r;
        r = read_string_dup(m, &mt->host_path);
        if (r < 0)
                return r;
        r = sd_bus_message_read_basic(m, 'b', &ro);
        if (r <= 0)
                return -EBADMSG;
        mt->read_only = !!ro;
        return 0;
}

static int read_device_spec(sd_bus_message *m, void *item) {
        V1beta1__DeviceSpec *ds = item;
        int r;

        r = read_string_dup(m, &ds->container_path);
        if (r < 0)
                return r;
        r = read_string_dup(m, &ds->host_path);
        if (r < 0)
                return r;
        return read_string_dup(m, &ds->permissions);
}

static int read_cdi_devices(sd_bus_message *m, V1beta1__ContainerAllocateResponse *c) {
        int r;

        r = sd_bus_message_enter_container(m, 'a', "s");
        if (r <= 0)
                return -EBADMSG;
        for (;;) {
                V1beta1__CDIDevice *cdi;
                const char *name;

                r = sd_bus_message_read_basic(m, 's', &name);
                if (r < 0)
                        return bus_to_errno(r);
                if (r == 0)
                        break;
                if (c->n_cdi_devices >= GRPCD_ENTRIES_MAX)
                        return -EBADMSG;
                if (strnlen(name, GRPCD_STRING_MAX + 1) > GRPCD_STRING_MAX)
                        return -EBADMSG;
                cdi = malloc(sizeof(*cdi));
                if (!cdi)
                        return -ENOMEM;
                v1beta1__cdidevice__init(cdi);
                r = ptr_array_push(&c->cdi_devices, &c->n_cdi_devices, cdi);
                if (r < 0) {
                        free(cdi);
                        return r;
                }
                cdi->name = strdup(name);
                if (!cdi->name)
                        return -ENOMEM;
        }
        r = sd_bus_message_exit_container(m);
        return r < 0 ? bus_to_errno(r) : 0;
}

static int read_container_response(sd_bus_message *m, void *item) {
        static const ListShape mounts = { "(ssb)", 'r', "ssb" }, devices = { "(sss)", 'r', "sss" };
        V1beta1__ContainerAllocateResponse *c = item;
        int r;

        r = read_map(m, &v1beta1__container_allocate_response__envs_entry__descriptor,
                     &c->envs, &c->n_envs);
        if (r < 0)
                return r;
        r = read_message_list(m, &mounts, GRPCD_ENTRIES_MAX, &v1beta1__mount__descriptor, read_mount,
                              &c->mounts, &c->n_mounts);
        if (r < 0)
                return r;
        r = read_message_list(m, &devices, GRPCD_ENTRIES_MAX, &v1beta1__device_spec__descriptor,
                              read_device_spec, &c->devices, &c->n_devices);
        if (r < 0)
                return r;
        r = read_map(m, &v1beta1__container_allocate_response__annotations_entry__descriptor,
                     &c->annotations, &c->n_annotations);
        if (r < 0)
                return r;
        return read_cdi_devices(m, c);
}

int grpcd_allocate_reply_read(sd_bus_message *reply, size_t n_containers, V1beta1__AllocateResponse **ret) {
        static const ListShape shape = { "(a{ss}a(ssb)a(sss)a{ss}as)", 'r', "a{ss}a(ssb)a(sss)a{ss}as" };
        V1beta1__AllocateResponse *resp;
        int r;

        resp = malloc(sizeof(*resp));
        if (!resp)
                return -ENOMEM;
        v1beta1__allocate_response__init(resp);

        r = read_message_list(reply, &shape, n_containers, &v1beta1__container_allocate_response__descriptor,
                              read_container_response, &resp->container_responses, &resp->n_container_responses);
        if (r >= 0 && resp->n_container_responses != n_containers)
                r = -EBADMSG;
        if (r >= 0) {
                *ret = TAKE_PTR(resp);
                return 0;
        }
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return r;
}

int grpcd_allocate_reply_from_bus(sd_bus_message *reply, size_t n_containers,
                                  uint8_t **ret, size_t *ret_len) {
        V1beta1__AllocateResponse *resp = NULL;
        int r;

        r = grpcd_allocate_reply_read(reply, n_containers, &resp);
        if (r < 0)
                return r;
        r = grpcd_message_pack(&resp->base, ret, ret_len);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return r;
}

static int read_preferred_ids(sd_bus_message *m, void *item) {
        V1beta1__ContainerPreferredAllocationResponse *c = item;
        int r;

        for (;;) {
                const char *id;
                char *dup;

                r = sd_bus_message_read_basic(m, 's', &id);
                if (r < 0)
                        return bus_to_errno(r);
                if (r == 0)
                        return 0;
                if (c->n_deviceids >= GRPCD_IDS_MAX || !grpcd_device_id_valid(id))
                        return -EBADMSG;
                dup = strdup(id);
                if (!dup)
                        return -ENOMEM;
                r = ptr_array_push(&c->deviceids, &c->n_deviceids, dup);
                if (r < 0) {
                        free(dup);
                        return r;
                }
        }
}

int grpcd_preferred_reply_from_bus(sd_bus_message *reply, size_t n_containers,
                                   uint8_t **ret, size_t *ret_len) {
        static const ListShape shape = { "as", 'a', "s" };
        V1beta1__PreferredAllocationResponse *resp;
        int r;

        resp = malloc(sizeof(*resp));
        if (!resp)
                return -ENOMEM;
        v1beta1__preferred_allocation_response__init(resp);

        r = read_message_list(reply, &shape, n_containers,
                              &v1beta1__container_preferred_allocation_response__descriptor, read_preferred_ids,
                              &resp->container_responses, &resp->n_container_responses);
        if (r >= 0 && resp->n_container_responses != n_containers)
                r = -EBADMSG;
        if (r >= 0)
                r = grpcd_message_pack(&resp->base, ret, ret_len);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return r;
}
