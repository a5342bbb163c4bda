/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * broker-dbus.c — io.kgpu.Broker1 at /io/kgpu/Broker1: resources, allocations, signal.
 *
 * Contract: see broker-dbus.h and dbus/io.kgpu.Broker1.xml. Every list is read element
 * by element against the bounds of resources.h, so an oversized request costs no more
 * than the bound before it is refused. This is a boundary: refusals are logged at
 * notice (access denied at warning), allocations at info with MESSAGE_ID.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-bus.h>

#include "common/bus-introspect.h"
#include "common/bus-names.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/broker-dbus.h"
#include "daemons/broker/gas-dbus.h"
#include "daemons/broker/manager.h"
#include "daemons/broker/node-config.h"
#include "daemons/broker/reconcile.h"
#include "daemons/broker/reload.h"
#include "daemons/broker/policy.h"
#include "daemons/broker/resources.h"
#include "daemons/broker/sharing.h"
#include "daemons/broker/store.h"

#define LIST_ALLOCATIONS_MAX 65536      /* newest allocations listed */
#define PREFERRED_IDS_MAX 8192          /* ids in all lists of one GetPreferredAllocation */

static int reply_resource_error(const ResourceError *e, int r, sd_bus_error *error) {
        return sd_bus_error_set(error, e->name ?: KGPU_ERROR_INVALID_ARGS,
                                isempty(e->message) ? strerror(r < 0 ? -r : r) : e->message);
}

/* Reads an "as" into a (possibly empty, never NULL) strv, with the bounds of resources.h.
 * *total counts ids across calls when not NULL, up to total_max. */
static int read_ids(sd_bus_message *msg, char ***ret, size_t *total, size_t total_max, sd_bus_error *error) {
        _cleanup_strv_free_ char **l = NULL;
        size_t n = 0;
        int r;

        l = calloc(1, sizeof(char *));
        if (!l)
                return -ENOMEM;
        r = sd_bus_message_enter_container(msg, 'a', "s");
        if (r < 0)
                return r;
        for (;;) {
                const char *s;

                r = sd_bus_message_read(msg, "s", &s);
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                if (++n > RESOURCES_IDS_MAX)
                        return sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS,
                                                 "More than %u device ids in one request",
                                                 RESOURCES_IDS_MAX);
                if (total && ++*total > total_max)
                        return sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS,
                                                 "More than %zu device ids in one call", total_max);
                if (strnlen(s, RESOURCES_ID_MAX + 1) > RESOURCES_ID_MAX)
                        return sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS,
                                                 "Device id longer than %u bytes", RESOURCES_ID_MAX);
                /* Appending in place: strv_extend() would walk the list each time. */
                char **c = reallocarray(l, n + 1, sizeof(char *));
                if (!c)
                        return -ENOMEM;
                l = c;
                l[n - 1] = strdup(s);
                l[n] = NULL;
                if (!l[n - 1])
                        return -ENOMEM;
        }
        r = sd_bus_message_exit_container(msg);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(l);
        return 0;
}

static int read_resource(sd_bus_message *msg, const char **ret, sd_bus_error *error) {
        const char *s;
        int r;

        r = sd_bus_message_read(msg, "s", &s);
        if (r < 0)
                return r;
        if (isempty(s) || strnlen(s, RESOURCES_NAME_MAX + 1) > RESOURCES_NAME_MAX)
                return sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS,
                                         "Resource name is empty or longer than %u bytes",
                                         RESOURCES_NAME_MAX);
        *ret = s;
        return 0;
}

static const char *strna_sender(sd_bus_message *msg) {
        return sd_bus_message_get_sender(msg) ?: "n/a";
}

/* The caller's uid as the bus daemon tells it, remembered per unique name. */
int broker_dbus_caller_uid(Manager *m, sd_bus_message *msg, uid_t *ret) {
        _cleanup_(sd_bus_creds_unrefp) sd_bus_creds *creds = NULL;
        const char *sender = sd_bus_message_get_sender(msg);
        size_t n = sizeof(m->callers) / sizeof(m->callers[0]);
        uid_t uid = (uid_t) -1;
        int r;

        for (size_t i = 0; sender && i < n; i++)
                if (streq(m->callers[i].name, sender)) {
                        *ret = m->callers[i].uid;
                        return 0;
                }

        r = sd_bus_query_sender_creds(msg, SD_BUS_CREDS_EUID|SD_BUS_CREDS_UID, &creds);
        if (r < 0)
                return r;
        /* Credentials from the bus daemon only, never from racy /proc reads. */
        if ((sd_bus_creds_get_augmented_mask(creds) & (SD_BUS_CREDS_EUID|SD_BUS_CREDS_UID)) != 0)
                return -EPERM;
        r = sd_bus_creds_get_euid(creds, &uid);
        if (r < 0)
                r = sd_bus_creds_get_uid(creds, &uid);
        if (r < 0)
                return r;
        if (sender && sender[0] == ':' && strlen(sender) < sizeof(m->callers[0].name)) {
                unsigned i = m->callers_next++ % n;

                strcpy(m->callers[i].name, sender);
                m->callers[i].uid = uid;
        }
        *ret = uid;
        return 0;
}

int broker_dbus_check_caller(Manager *m, sd_bus_message *msg, const char *method, sd_bus_error *error) {
        uid_t uid = (uid_t) -1;
        int r;

        r = broker_dbus_caller_uid(m, msg, &uid);

        /* The broker's own uid is the same principal (it could just as well write the
         * database): allowing it makes an unprivileged test setup work. */
        if (r >= 0 && (uid == 0 || uid == geteuid() ||
                       (m->grpc_uid != (uid_t) -1 && uid == m->grpc_uid)))
                return 0;

        if (r < 0)
                log_warning_errno(r, "Refusing %s from %s: cannot get its uid: %m", method,
                                  strna_sender(msg));
        else
                log_warning("Refusing %s from %s (uid %u): only root and %s may call it.", method,
                            strna_sender(msg), (unsigned) uid, m->config->grpc_user);
        return sd_bus_error_setf(error, KGPU_ERROR_ACCESS_DENIED,
                                 "%s is only allowed to root and user '%s'", method, m->config->grpc_user);
}

static int property_get_version(sd_bus *bus, const char *path, const char *interface,
                                const char *property, sd_bus_message *reply, void *userdata,
                                sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", KGPU_VERSION);
}

static int method_list_resources(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        Manager *m = userdata;
        int r;

        r = sd_bus_message_new_method_return(msg, &reply);
        if (r < 0)
                return r;
        r = sd_bus_message_open_container(reply, 'a', "(sbb)");
        if (r < 0)
                return r;
        for (char **i = m->resources->seen; i && *i; i++) {
                /* Intel: no PreStartContainer needed; GetPreferredAllocation offered. */
                r = sd_bus_message_append(reply, "(sbb)", *i, 0, 1);
                if (r < 0)
                        return r;
        }
        r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

static int method_get_devices(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_free_ Device *d = NULL;
        Manager *m = userdata;
        ResourceError e = {};
        const char *resource;
        size_t n;
        int r;

        r = read_resource(msg, &resource, error);
        if (r < 0)
                return r;
        r = resources_check_name(m->resources, resource, &e);
        if (r < 0)
                return reply_resource_error(&e, r, error);
        r = resources_get_devices(m->resources, resource, &d, &n);
        if (r < 0)
                return r;

        r = sd_bus_message_new_method_return(msg, &reply);
        if (r < 0)
                return r;
        r = sd_bus_message_open_container(reply, 'a', "(ssai)");
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                r = sd_bus_message_open_container(reply, 'r', "ssai");
                if (r < 0)
                        return r;
                r = sd_bus_message_append(reply, "ss", d[i].id, d[i].healthy ? "Healthy" : "Unhealthy");
                if (r < 0)
                        return r;
                if (d[i].numa_node >= 0)
                        r = sd_bus_message_append(reply, "ai", 1, d[i].numa_node);
                else
                        r = sd_bus_message_append(reply, "ai", 0);
                if (r < 0)
                        return r;
                r = sd_bus_message_close_container(reply);
                if (r < 0)
                        return r;
        }
        r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

static int method_get_preferred_allocation(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        Manager *m = userdata;
        ResourceError e = {};
        const char *resource;
        size_t n = 0, total = 0;
        int r;

        r = read_resource(msg, &resource, error);
        if (r < 0)
                return r;
        r = resources_check_name(m->resources, resource, &e);
        if (r < 0)
                return reply_resource_error(&e, r, error);

        r = sd_bus_message_new_method_return(msg, &reply);
        if (r < 0)
                return r;
        r = sd_bus_message_open_container(reply, 'a', "as");
        if (r < 0)
                return r;

        r = sd_bus_message_enter_container(msg, 'a', "(asasi)");
        if (r < 0)
                return r;
        for (;;) {
                _cleanup_strv_free_ char **available = NULL, **must = NULL, **preferred = NULL;
                int32_t size;

                r = sd_bus_message_enter_container(msg, 'r', "asasi");
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                if (++n > RESOURCES_REQUESTS_MAX)
                        return sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS,
                                                 "More than %u container requests in one call",
                                                 RESOURCES_REQUESTS_MAX);
                r = read_ids(msg, &available, &total, PREFERRED_IDS_MAX, error);
                if (r < 0)
                        return r;
                r = read_ids(msg, &must, &total, PREFERRED_IDS_MAX, error);
                if (r < 0)
                        return r;
                r = sd_bus_message_read(msg, "i", &size);
                if (r < 0)
                        return r;
                r = sd_bus_message_exit_container(msg);
                if (r < 0)
                        return r;

                if (gas_applies(m, resource) && n == 1) {
                        r = resources_check_preferred(m->resources, resource,
                                                      (char * const *[]) { must, available }, 2, size, &e);
                        if (r >= 0)
                                r = gas_preferred(m, resource, available, must, size, &preferred);
                } else
                        r = resources_preferred_allocation(m->resources, resource, available, must, size,
                                                           &preferred, &e);
                if (r < 0)
                        return reply_resource_error(&e, r, error);
                r = sd_bus_message_append_strv(reply, preferred);
                if (r < 0)
                        return r;
        }
        r = sd_bus_message_exit_container(msg);
        if (r < 0)
                return r;
        if (n == 0)
                return sd_bus_error_set(error, KGPU_ERROR_INVALID_ARGS, "No container request");

        r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

typedef struct Requests {
        char ***lists;
        size_t n;
} Requests;

static void requests_done(Requests *q) {
        for (size_t i = 0; i < q->n; i++)
                strv_free(q->lists[i]);
        q->lists = mfree(q->lists);
        q->n = 0;
}

static int read_requests(sd_bus_message *msg, Requests *q, sd_bus_error *error) {
        size_t total = 0;
        int r;

        q->lists = calloc(RESOURCES_REQUESTS_MAX, sizeof(char **));
        if (!q->lists)
                return -ENOMEM;
        r = sd_bus_message_enter_container(msg, 'a', "as");
        if (r < 0)
                return r;
        for (;;) {
                r = sd_bus_message_at_end(msg, false);
                if (r < 0)
                        return r;
                if (r > 0)
                        break;
                if (q->n >= RESOURCES_REQUESTS_MAX)
                        return sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS,
                                                 "More than %u container requests in one call",
                                                 RESOURCES_REQUESTS_MAX);
                r = read_ids(msg, &q->lists[q->n], &total, RESOURCES_IDS_MAX, error);
                if (r < 0)
                        return r;
                q->n++;
        }
        return sd_bus_message_exit_container(msg);
}

/* Sharing limit (intel.sharedDevNum): see sharing.h. */
static int check_share_limit(Manager *m, const char *resource, const Requests *q, sd_bus_error *error) {
        ResourceError e = {};
        int r;

        r = sharing_check_store(m->store, m->resources, resource, m->boot_id, (char ** const *) q->lists, q->n, &e);
        if (r < 0) {
                log_notice("Refusing Allocate of %s: %s", resource, e.message);
                return reply_resource_error(&e, r, error);
        }
        return 0;
}

/* Appends an a{ss} from a flat key, value strv. */
static int append_pairs(sd_bus_message *reply, char * const *pairs) {
        int r;

        r = sd_bus_message_open_container(reply, 'a', "{ss}");
        if (r < 0)
                return r;
        for (size_t i = 0; pairs && pairs[i] && pairs[i + 1]; i += 2) {
                r = sd_bus_message_append(reply, "{ss}", pairs[i], pairs[i + 1]);
                if (r < 0)
                        return r;
        }
        return sd_bus_message_close_container(reply);
}

static int append_allocate_response(Manager *m, sd_bus_message *reply, const char *resource, char * const *ids,
                                    const char *affinity_mask) {
        _cleanup_free_ DeviceSpec *specs = NULL;
        _cleanup_free_ MountSpec *mounts = NULL;
        _cleanup_strv_free_ char **cdi = NULL, **envs = NULL, **annotations = NULL;
        size_t n, n_mounts;
        int r;

        r = resources_allocate_container(m->resources, resource, ids, &specs, &n);
        if (r < 0)
                return r;
        r = resources_allocate_extras(m->resources, resource, ids, &mounts, &n_mounts, &cdi);
        if (r < 0)
                return r;
        r = resources_allocate_envs(m->resources, resource, ids, &envs, &annotations);
        if (r < 0)
                return r;
        if (affinity_mask) {
                r = strv_extend(&envs, GAS_AFFINITY_ENV);
                if (r >= 0)
                        r = strv_extend(&envs, affinity_mask);
                if (r < 0)
                        return r;
        }

        r = sd_bus_message_open_container(reply, 'r', "a{ss}a(ssb)a(sss)a{ss}as");
        if (r < 0)
                return r;
        r = append_pairs(reply, envs);
        if (r < 0)
                return r;
        r = sd_bus_message_open_container(reply, 'a', "(ssb)");
        if (r < 0)
                return r;
        for (size_t i = 0; i < n_mounts; i++) {
                r = sd_bus_message_append(reply, "(ssb)", mounts[i].container_path, mounts[i].host_path,
                                          mounts[i].read_only);
                if (r < 0)
                        return r;
        }
        r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        r = sd_bus_message_open_container(reply, 'a', "(sss)");
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                r = sd_bus_message_append(reply, "(sss)", specs[i].container_path, specs[i].host_path,
                                          specs[i].permissions);
                if (r < 0)
                        return r;
        }
        r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        r = append_pairs(reply, annotations);
        if (r < 0)
                return r;
        r = sd_bus_message_append_strv(reply, cdi);
        if (r < 0)
                return r;
        return sd_bus_message_close_container(reply);
}

/* "12, 15": the allocations request i superseded; NULL if none (or out of memory). */
static char *superseded_list(const StoreSuperseded *old, size_t n, size_t request) {
        _cleanup_strv_free_ char **l = NULL;

        for (size_t i = 0; i < n; i++) {
                char *t;

                if (old[i].request != request)
                        continue;
                if (asprintf(&t, "%" PRIu64, old[i].id) < 0 || strv_consume(&l, t) < 0)
                        return NULL;
        }
        return l ? strv_join(l, ", ") : NULL;
}

static int method_allocate(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_(requests_done) Requests q = {};
        _cleanup_free_ uint64_t *ids = NULL;
        _cleanup_free_ StoreSuperseded *superseded = NULL;
        GasChoice gas = {};
        size_t n_superseded = 0;
        Manager *m = userdata;
        ResourceError e = {};
        const char *resource;
        int r;

        r = broker_dbus_check_caller(m, msg, "Allocate", error);
        if (r < 0)
                return r;
        r = read_resource(msg, &resource, error);
        if (r < 0)
                return r;
        r = read_requests(msg, &q, error);
        if (r < 0)
                return r;

        r = resources_check_allocate(m->resources, resource, (char ** const *) q.lists, q.n, &e);
        if (r < 0) {
                log_notice("Refusing Allocate of %s from %s: %s", resource, strna_sender(msg), e.message);
                return reply_resource_error(&e, r, error);
        }
        if (!m->store) {
                log_notice("Refusing Allocate of %s: state database unavailable.", resource);
                return sd_bus_error_setf(error, KGPU_ERROR_STATE,
                                         "State database unavailable, refusing to allocate: %s",
                                         m->store_error ?: "not open");
        }
        if (gas_applies(m, resource)) {
                r = gas_allocate_choose(m, resource, (char ** const *) q.lists, q.n, &gas, error);
                if (r < 0)
                        return r;
        }
        r = check_share_limit(m, resource, &q, error);
        if (r < 0)
                return r;

        /* Build the whole answer first, so that after the commit nothing can fail but the send. */
        r = sd_bus_message_new_method_return(msg, &reply);
        if (r < 0)
                return r;
        r = sd_bus_message_open_container(reply, 'a', "(a{ss}a(ssb)a(sss)a{ss}as)");
        if (r < 0)
                return r;
        for (size_t i = 0; i < q.n; i++) {
                r = append_allocate_response(m, reply, resource, q.lists[i], gas.mask);
                if (r < 0)
                        return r;
        }
        r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;

        ids = calloc(q.n, sizeof(uint64_t));
        if (!ids)
                return -ENOMEM;
        r = store_allocate(m->store, resource, (char ** const *) q.lists, q.n, now_usec(CLOCK_REALTIME), ids,
                           &superseded, &n_superseded);
        if (r == -EDQUOT) {
                log_struct(LOG_WARNING, KGPU_MESSAGE_ALLOCATIONS_FULL,
                           "Refusing Allocate of %s from %s: the broker records at most %zu allocations "
                           "(broker.maxAllocations), %zu are recorded.", resource, strna_sender(msg),
                           store_get_max_allocations(m->store), store_get_n_allocations(m->store));
                return sd_bus_error_setf(error, KGPU_ERROR_TOO_MANY_ALLOCATIONS,
                                         "The broker records at most %zu allocations (broker.maxAllocations) "
                                         "and %zu are recorded; those no live container holds are released "
                                         "by the next reconciliation with the kubelet's PodResources",
                                         store_get_max_allocations(m->store), store_get_n_allocations(m->store));
        }
        if (r < 0) {
                log_struct(LOG_ERR, KGPU_MESSAGE_STATE_ERROR,
                           "Failed to record an allocation of %s in %s, refusing it: %s",
                           resource, store_get_path(m->store), strerror(-r));
                return sd_bus_error_setf(error, KGPU_ERROR_STATE,
                                         "Failed to record the allocation: %s", strerror(-r));
        }

        for (size_t i = 0; i < q.n; i++) {
                _cleanup_free_ char *list = strv_join(q.lists[i], ","), *old = superseded_list(superseded,
                                                                                               n_superseded, i);

                log_struct(LOG_INFO, KGPU_MESSAGE_ALLOCATED, "Allocation %" PRIu64 ": %s %s%s%s%s.",
                           ids[i], resource, list ?: "(out of memory)", old ? " (supersedes " : "", old ?: "",
                           old ? ", whose devices went to this container)" : "");
        }
        gas_allocate_done(m, &gas);
        return sd_bus_send(NULL, reply, NULL);
}

static int method_pre_start_container(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        _cleanup_strv_free_ char **ids = NULL;
        Manager *m = userdata;
        ResourceError e = {};
        const char *resource;
        int r;

        r = broker_dbus_check_caller(m, msg, "PreStartContainer", error);
        if (r < 0)
                return r;
        r = read_resource(msg, &resource, error);
        if (r < 0)
                return r;
        r = read_ids(msg, &ids, NULL, 0, error);
        if (r < 0)
                return r;
        r = resources_check_ids(m->resources, resource, ids, true, false, &e);
        if (r < 0) {
                log_notice("Refusing PreStartContainer of %s: %s", resource, e.message);
                return reply_resource_error(&e, r, error);
        }
        return sd_bus_reply_method_return(msg, NULL);
}

static int append_allocation(uint64_t id, const char *resource, char * const *device_ids,
                             uint64_t created_usec, const char *boot_id, bool seen, void *userdata) {
        sd_bus_message *reply = userdata;
        int r;

        r = sd_bus_message_open_container(reply, 'r', "tsast");
        if (r < 0)
                return r;
        r = sd_bus_message_append(reply, "ts", id, resource);
        if (r < 0)
                return r;
        r = sd_bus_message_append_strv(reply, (char **) device_ids);
        if (r < 0)
                return r;
        r = sd_bus_message_append(reply, "t", created_usec);
        if (r < 0)
                return r;
        return sd_bus_message_close_container(reply);
}

static int method_list_allocations(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        Manager *m = userdata;
        int r;

        if (!m->store)
                return sd_bus_error_setf(error, KGPU_ERROR_STATE, "State database unavailable: %s",
                                         m->store_error ?: "not open");

        r = sd_bus_message_new_method_return(msg, &reply);
        if (r < 0)
                return r;
        r = sd_bus_message_open_container(reply, 'a', "(tsast)");
        if (r < 0)
                return r;
        r = store_foreach_allocation(m->store, LIST_ALLOCATIONS_MAX, append_allocation, reply);
        if (r < 0) {
                log_warning_errno(r, "Failed to list allocations from %s: %m", store_get_path(m->store));
                return sd_bus_error_setf(error, KGPU_ERROR_STATE, "Failed to read the state database: %s",
                                         strerror(-r));
        }
        r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

const sd_bus_vtable broker_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", property_get_version, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("StartTime", "t", NULL, offsetof(Manager, start_time), SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("HolderDependentResources", "as", reconcile_property_holder_dependent, 0, 0),
        SD_BUS_METHOD_WITH_ARGS("ListResources",
                                SD_BUS_NO_ARGS,
                                SD_BUS_RESULT("a(sbb)", resources),
                                method_list_resources, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetDevices",
                                SD_BUS_ARGS("s", resource),
                                SD_BUS_RESULT("a(ssai)", devices),
                                method_get_devices, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetPreferredAllocation",
                                SD_BUS_ARGS("s", resource, "a(asasi)", requests),
                                SD_BUS_RESULT("aas", preferred),
                                method_get_preferred_allocation, SD_BUS_VTABLE_UNPRIVILEGED),
        /* Allocate and PreStartContainer check the caller themselves (check_caller()). */
        SD_BUS_METHOD_WITH_ARGS("Allocate",
                                SD_BUS_ARGS("s", resource, "aas", requests),
                                SD_BUS_RESULT("a(a{ss}a(ssb)a(sss)a{ss}as)", responses),
                                method_allocate, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("PreStartContainer",
                                SD_BUS_ARGS("s", resource, "as", device_ids),
                                SD_BUS_NO_RESULT,
                                method_pre_start_container, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListAllocations",
                                SD_BUS_NO_ARGS,
                                SD_BUS_RESULT("a(tsast)", allocations),
                                method_list_allocations, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Reconcile",
                                SD_BUS_ARGS("a(sassss)", containers),
                                SD_BUS_RESULT("at", released),
                                reconcile_method, SD_BUS_VTABLE_UNPRIVILEGED),
        /* GPU Aware Scheduling's pod annotations (gas-dbus.c; kgpu-clusterd's call). */
        SD_BUS_METHOD_WITH_ARGS("SetGasPods",
                                SD_BUS_ARGS("a(ssssssaa{sx})", pods),
                                SD_BUS_NO_RESULT,
                                gas_method_set_pods, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Reload",
                                SD_BUS_NO_ARGS,
                                SD_BUS_NO_RESULT,
                                reload_method, SD_BUS_VTABLE_UNPRIVILEGED),
        /* The named NVIDIA config a node label selects (node-config.c; kgpu-clusterd's call). */
        SD_BUS_PROPERTY("NodeConfig", "s", node_config_property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("NodeConfigRequested", "s", node_config_property_get, 0,
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("NodeConfigError", "s", node_config_property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_METHOD_WITH_ARGS("SetNodeConfig",
                                SD_BUS_ARGS("s", name),
                                SD_BUS_NO_RESULT,
                                node_config_set_method, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_SIGNAL_WITH_ARGS("ResourcesChanged",
                                SD_BUS_ARGS("as", resources),
                                0),
        SD_BUS_VTABLE_END,
};

int broker_dbus_register(Manager *m) {
        int r;

        r = sd_bus_add_object_vtable(m->bus, NULL, KGPU_BROKER_PATH, KGPU_BROKER_INTERFACE, broker_vtable, m);
        if (r < 0)
                return log_error_errno(r, "Failed to register %s: %m", KGPU_BROKER_PATH);
        return 0;
}

int broker_dbus_emit_resources_changed(Manager *m, char * const *names) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *sig = NULL;
        _cleanup_free_ char *list = NULL;
        int r;

        if (!m->bus || strv_length(names) == 0)
                return 0;
        r = sd_bus_message_new_signal(m->bus, &sig, KGPU_BROKER_PATH, KGPU_BROKER_INTERFACE, "ResourcesChanged");
        if (r >= 0)
                r = sd_bus_message_append_strv(sig, (char **) names);
        if (r >= 0)
                r = sd_bus_send(m->bus, sig, NULL);
        if (r < 0)
                return log_warning_errno(r, "Failed to emit ResourcesChanged: %m");
        list = strv_join((char **) names, " ");
        log_debug("Emitted ResourcesChanged(%s).", list ?: "");
        return 0;
}

int broker_dbus_introspect(void) {
        static const BusIntrospectEntry entries[] = {
                { KGPU_BROKER_PATH, KGPU_BROKER_INTERFACE, broker_vtable, false },
        };

        return bus_introspect_print(entries, ELEMENTSOF(entries));
}
