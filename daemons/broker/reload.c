/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reload.c — re-read kgpu.yaml without dropping allocations (SIGHUP, Broker1.Reload).
 *
 * Contract: see reload.h. Everything that can fail happens on new objects; the running
 * configuration and resources are replaced only at the end, by pointer swaps.
 */

#include <errno.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "common/bus-names.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/broker-dbus.h"
#include "daemons/broker/manager.h"
#include "daemons/broker/mps-client.h"
#include "daemons/broker/node-config.h"
#include "daemons/broker/reload.h"

static bool devices_equal(const Resources *a, const Resources *b, const char *resource) {
        _cleanup_free_ Device *da = NULL, *db = NULL;
        size_t na = 0, nb = 0;
        bool ka = resources_known(a, resource), kb = resources_known(b, resource);

        if (ka != kb)
                return false;
        if (!ka)
                return true;
        if (resources_get_devices(a, resource, &da, &na) < 0 || resources_get_devices(b, resource, &db, &nb) < 0)
                return false;   /* cannot tell: say it changed */
        if (na != nb)
                return false;
        for (size_t i = 0; i < na; i++)
                if (!streq(da[i].id, db[i].id) || da[i].healthy != db[i].healthy ||
                    da[i].numa_node != db[i].numa_node)
                        return false;
        return true;
}

/* Names (sorted, unique) of resources whose device lists differ between a and b. */
static int resources_diff(const Resources *a, const Resources *b, char ***ret) {
        _cleanup_strv_free_ char **all = NULL, **changed = NULL;
        int r;

        all = strv_copy(a->seen);
        if (!all)
                return -ENOMEM;
        for (char **i = b->seen; i && *i; i++)
                if (!strv_contains(all, *i)) {
                        r = strv_extend(&all, *i);
                        if (r < 0)
                                return r;
                }
        strv_sort(all);
        for (char **i = all; i && *i; i++)
                if (!devices_equal(a, b, *i)) {
                        r = strv_extend(&changed, *i);
                        if (r < 0)
                                return r;
                }
        *ret = TAKE_PTR(changed);
        return 0;
}

static int build_resources(const Config *c, const Resources *old, Resources **ret, char **ret_error) {
        _cleanup_(resources_freep) Resources *res = NULL;
        const char *what = NULL;
        int r;

        r = resources_new_from_config(c, &res, &what);
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                if (asprintf(ret_error, "%s: invalid %s", c->file ?: "configuration", what ?: "configuration") < 0)
                        *ret_error = NULL;
                return -EINVAL;
        }
        for (size_t i = 0; i < old->n_gpus; i++) {
                r = resources_update_gpu(res, old->gpus[i].path, &old->gpus[i].info, NULL);
                if (r == -ENOMEM)
                        return r;
                /* Other refusals were logged when the probe first reported the GPU. */
        }
        *ret = TAKE_PTR(res);
        return 0;
}

int broker_apply_config(Manager *m, Config *config, const char *name, const char *note, char **ret_error) {
        _cleanup_(config_freep) Config *c = config;
        _cleanup_(resources_freep) Resources *res = NULL;
        _cleanup_strv_free_ char **changed = NULL;
        _cleanup_free_ char *error = NULL, *list = NULL;
        int r;

        r = build_resources(c, m->resources, &res, &error);
        if (r >= 0)
                r = resources_diff(m->resources, res, &changed);
        if (r < 0) {
                if (!error && asprintf(&error, "%s", strerror(-r)) < 0)
                        error = NULL;
                if (ret_error)
                        *ret_error = TAKE_PTR(error);
                return r == -ENOMEM ? r : -EINVAL;
        }

        if (!streq_ptr(c->state_directory, m->config->state_directory))
                log_notice("stateDirectory changed to %s; the broker keeps using %s until it is restarted.",
                           c->state_directory, m->config->state_directory);
        if (!streq_ptr(c->broker_user, m->config->broker_user))
                log_notice("broker.user changed; it takes effect when the broker is restarted.");

        /* Swap: nothing below can fail. */
        if (!isempty(c->grpc_user)) {
                struct passwd *pw = getpwnam(c->grpc_user);

                m->grpc_uid = pw ? pw->pw_uid : (uid_t) -1;
        } else
                m->grpc_uid = (uid_t) -1;
        node_config_set_user(m, c);
        if (c->log_level) {
                int level = log_level_from_string(c->log_level);

                if (level >= 0)
                        log_set_max_level(level);
        }
        resources_free(m->resources);
        m->resources = TAKE_PTR(res);
        config_free(m->config);
        m->config = TAKE_PTR(c);
        if (m->store)
                store_set_max_allocations(m->store, m->config->max_allocations);
        /* Before SetMps goes out: the probe follows NodeConfig for its MPS policy, and
         * sees the change before the call (one connection, in order). */
        node_config_commit(m, name, note);

        list = strv_join(changed, " ");
        log_info("Applied the configuration from %s; %zu resource(s) changed%s%s; allocations kept.",
                 m->config->file ?: "defaults", strv_length(changed), strv_length(changed) > 0 ? ": " : "",
                 list ?: "");
        (void) broker_dbus_emit_resources_changed(m, changed);
        manager_log_problem(m);
        (void) mps_client_sync(m, true);        /* MPS added, changed or removed */
        return 0;
}

int broker_reload(Manager *m, char **ret_error) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *error = NULL, *name = NULL, *note = NULL;
        int r;

        (void) sd_notify(false, "RELOADING=1\nSTATUS=Reloading the configuration...");

        /* The loader and command line of the start (the daemon skeleton's), without its
         * logging: the error goes to the caller and logLevel applies only at the swap;
         * with the named NVIDIA config the node label asks for (node-config.h). */
        r = node_config_load_for_reload(m, &c, &name, &note, &error);
        if (r >= 0)
                r = broker_apply_config(m, TAKE_PTR(c), name, note, &error);
        if (r < 0) {
                if (!error && asprintf(&error, "%s", strerror(-r)) < 0)
                        error = NULL;
                log_error("Refusing to reload the configuration, the running one stays in force: %s",
                          error ?: "out of memory");
                (void) sd_notify(false, "READY=1");
                manager_update_status(m);
                if (ret_error)
                        *ret_error = TAKE_PTR(error);
                return r == -ENOMEM ? r : -EINVAL;
        }
        log_info("Reloaded the configuration from %s%s%s.", m->config->file ?: "defaults",
                 isempty(name) ? "" : " with the named NVIDIA config ", name ?: "");
        (void) sd_notify(false, "READY=1");
        manager_update_status(m);
        return 0;
}

int reload_method(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        _cleanup_free_ char *message = NULL;
        Manager *m = userdata;
        int r;

        r = broker_dbus_check_caller(m, msg, "Reload", error);
        if (r < 0)
                return r;
        r = broker_reload(m, &message);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return sd_bus_error_setf(error, KGPU_ERROR_INVALID_CONFIG, "Configuration refused, the running one "
                                         "stays in force: %s", message ?: "invalid");
        return sd_bus_reply_method_return(msg, NULL);
}
