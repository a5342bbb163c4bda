/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kgpuctl-status.c — "kgpuctl status": which daemons answer, their versions, uptime and
 * the front end's registration state.
 *
 * The probe and the broker answer on D-Bus (Version, StartTime). kgpu-grpcd has no
 * D-Bus interface, on purpose (it only translates), so its state is read from what the
 * root probe sees of the kubelet's device-plugins directory (io.kgpu.Kubelet1, readable
 * by everyone; nobody but root can look into that directory): for each resource the
 * broker advertises, whether its plugin socket is there, the state of the kubelet's
 * socket ("present", "absent", "refused: ...") and the last failure of an operation the
 * probe did for grpcd. That works with any bus and without systemd. When systemd is on
 * the bus, the unit's state, its StatusText (grpcd reports "N resources registered"
 * there) and its uptime are shown too. Last, the broker's named NVIDIA config: the one in
 * force, the one the node label asked for, and why that one is not in force.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bus-names.h"
#include "common/cleanup.h"
#include "common/config.h"
#include "common/resource-name.h"
#include "common/util.h"
#include "tools/kgpuctl.h"

typedef struct DaemonStatus {
        const char *name;
        const char *bus_name;
        const char *path;
        const char *interface;
        char *version;
        uint64_t start_time;
        char *error;
        /* The broker's named NVIDIA config (NodeConfig, NodeConfigRequested,
         * NodeConfigError); node_config NULL: not asked or not answered. */
        bool has_node_config;
        char *node_config, *node_config_requested, *node_config_error;
} DaemonStatus;

static void query_node_config(Ctl *c, DaemonStatus *d) {
        char **v[] = { &d->node_config, &d->node_config_requested, &d->node_config_error };
        static const char * const names[] = { "NodeConfig", "NodeConfigRequested", "NodeConfigError" };

        for (size_t i = 0; i < ELEMENTSOF(v); i++) {
                sd_bus_error e = SD_BUS_ERROR_NULL;

                if (sd_bus_get_property_string(c->bus, d->bus_name, d->path, d->interface, names[i], &e, v[i]) < 0)
                        *v[i] = NULL;   /* a broker older than these properties */
                sd_bus_error_free(&e);
        }
}

/* A value of the broker's shown on a terminal: control characters as '?'. */
static void print_plain(const char *s) {
        for (; s && *s; s++)
                putchar((unsigned char) *s < 0x20 || *s == 0x7f ? '?' : *s);
}

static void print_node_config(Ctl *c, const DaemonStatus *d) {
        if (c->json) {
                if (!d->node_config)
                        return;
                printf(",\"node_config\":{\"in_force\":");
                ctl_json_string(d->node_config);
                printf(",\"requested\":");
                ctl_json_string(d->node_config_requested ?: "");
                printf(",\"error\":");
                ctl_json_string(d->node_config_error ?: "");
                printf("}");
                return;
        }
        printf("\nNVIDIA node config in force: ");
        if (!d->node_config) {
                printf("unknown (%s)\n", d->error ? "the broker is not running" : "not reported by the broker");
                return;
        }
        if (isempty(d->node_config))
                printf("kgpu.yaml's own NVIDIA settings\n");
        else {
                print_plain(d->node_config);
                printf("\n");
        }
        printf("Requested (node label): ");
        if (isempty(d->node_config_requested))
                printf("none (label unset, or kgpu-clusterd has not called since the broker started)\n");
        else {
                print_plain(d->node_config_requested);
                printf("\n");
        }
        if (!isempty(d->node_config_error)) {
                printf("Not in force because: ");
                print_plain(d->node_config_error);
                printf("\n");
        }
}

static void query(Ctl *c, DaemonStatus *d) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        int r;

        r = sd_bus_get_property_string(c->bus, d->bus_name, d->path, d->interface, "Version", &e, &d->version);
        if (r >= 0)
                r = sd_bus_get_property_trivial(c->bus, d->bus_name, d->path, d->interface, "StartTime", &e, 't',
                                                &d->start_time);
        if (r < 0) {
                if (sd_bus_error_has_name(&e, SD_BUS_ERROR_SERVICE_UNKNOWN) ||
                    sd_bus_error_has_name(&e, SD_BUS_ERROR_NAME_HAS_NO_OWNER))
                        d->error = strdup("not running");
                else
                        d->error = strdup(e.message ?: "error");
        }
        sd_bus_error_free(&e);
}

typedef struct SocketState {
        char *resource;
        const char *state;              /* "serving", "no socket", "unknown" */
} SocketState;

/* The front end as systemd sees it; best effort, all fields stay NULL/0 without systemd. */
typedef struct UnitInfo {
        char *active_state;
        char *status_text;
        uint64_t active_enter;          /* CLOCK_REALTIME µs */
} UnitInfo;

static void query_unit(Ctl *c, const char *unit, UnitInfo *u) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        const char *path;
        int r;

        r = sd_bus_call_method(c->bus, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                               "org.freedesktop.systemd1.Manager", "GetUnit", &e, &reply, "s", unit);
        if (r >= 0 && sd_bus_message_read(reply, "o", &path) > 0) {
                (void) sd_bus_get_property_string(c->bus, "org.freedesktop.systemd1", path,
                                                  "org.freedesktop.systemd1.Unit", "ActiveState", NULL,
                                                  &u->active_state);
                (void) sd_bus_get_property_string(c->bus, "org.freedesktop.systemd1", path,
                                                  "org.freedesktop.systemd1.Service", "StatusText", NULL,
                                                  &u->status_text);
                (void) sd_bus_get_property_trivial(c->bus, "org.freedesktop.systemd1", path,
                                                   "org.freedesktop.systemd1.Unit", "ActiveEnterTimestamp", NULL,
                                                   't', &u->active_enter);
        }
        sd_bus_message_unref(reply);
        sd_bus_error_free(&e);
}

/* What the probe reports of the kubelet's directory (io.kgpu.Kubelet1). */
typedef struct KubeletView {
        char *dir;
        char *state;
        char *last_error;
        char **sockets;                 /* kgpu-*.sock file names present */
        bool known;
} KubeletView;

static void kubelet_view_done(KubeletView *v) {
        free(v->dir);
        free(v->state);
        free(v->last_error);
        strv_free(v->sockets);
}

static void query_kubelet(Ctl *c, KubeletView *v) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        int r;

        r = sd_bus_get_property_string(c->bus, KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH, KGPU_KUBELET_INTERFACE,
                                       "DevicePluginPath", &e, &v->dir);
        if (r >= 0)
                r = sd_bus_get_property_string(c->bus, KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH,
                                               KGPU_KUBELET_INTERFACE, "KubeletState", &e, &v->state);
        if (r >= 0)
                r = sd_bus_get_property_string(c->bus, KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH,
                                               KGPU_KUBELET_INTERFACE, "LastError", &e, &v->last_error);
        if (r >= 0)
                r = sd_bus_get_property(c->bus, KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH, KGPU_KUBELET_INTERFACE,
                                        "PluginSockets", &e, &reply, "a(st)");
        if (r >= 0)
                r = sd_bus_message_enter_container(reply, 'a', "(st)");
        while (r > 0) {
                const char *name;
                uint64_t inode;

                r = sd_bus_message_read(reply, "(st)", &name, &inode);
                if (r > 0 && strv_length(v->sockets) < 1024 && strv_extend(&v->sockets, name) < 0)
                        r = -ENOMEM;
        }
        v->known = r >= 0;
        sd_bus_message_unref(reply);
        sd_bus_error_free(&e);
}

/* Fills *ret with one entry per advertised resource; returns the count or negative errno. */
static int query_sockets(Ctl *c, const KubeletView *v, SocketState **ret) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        SocketState *s = NULL;
        size_t n = 0;
        int r;

        r = sd_bus_call_method(c->bus, KGPU_BROKER_BUS_NAME, KGPU_BROKER_PATH, KGPU_BROKER_INTERFACE,
                               "ListResources", &e, &reply, "");
        sd_bus_error_free(&e);
        if (r < 0)
                return r;
        r = sd_bus_message_enter_container(reply, 'a', "(sbb)");
        while (r > 0) {
                _cleanup_free_ char *sock = NULL;
                const char *name;
                int a, b;
                SocketState *t;

                r = sd_bus_message_read(reply, "(sbb)", &name, &a, &b);
                if (r <= 0)
                        break;
                if (n >= 1024) {
                        r = -E2BIG;
                        break;
                }
                t = reallocarray(s, n + 1, sizeof(SocketState));
                if (!t) {
                        r = -ENOMEM;
                        break;
                }
                s = t;
                s[n].resource = strdup(name);
                if (!s[n].resource) {
                        r = -ENOMEM;
                        break;
                }
                if (!v->known)
                        s[n].state = "unknown";
                else if (resource_socket_name(name, &sock) >= 0 && strv_contains(v->sockets, sock))
                        s[n].state = "serving";
                else
                        s[n].state = "no socket";
                n++;
        }
        sd_bus_message_unref(reply);
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        free(s[i].resource);
                free(s);
                return r;
        }
        *ret = s;
        return (int) n;
}

static void print_uptime(uint64_t up) {
        printf("%llud %02lluh %02llum %02llus", (unsigned long long) up / 86400, (unsigned long long) up / 3600 % 24,
               (unsigned long long) up / 60 % 60, (unsigned long long) up % 60);
}

static void print_daemon(Ctl *c, const DaemonStatus *d, bool first, uint64_t now) {
        uint64_t up = d->start_time && now > d->start_time ? (now - d->start_time) / 1000000ULL : 0;

        if (c->json) {
                printf("%s{\"daemon\":", first ? "" : ",");
                ctl_json_string(d->name);
                printf(",\"running\":%s,\"version\":", d->error ? "false" : "true");
                ctl_json_string(d->version);
                printf(",\"uptime_seconds\":%llu", (unsigned long long) up);
                if (d->error) {
                        printf(",\"error\":");
                        ctl_json_string(d->error);
                }
                if (d->has_node_config)
                        print_node_config(c, d);
                printf("}");
        } else if (d->error)
                printf("%-14s %-10s %-10s %s\n", d->name, "down", "-", d->error);
        else {
                printf("%-14s %-10s %-10s ", d->name, "running", d->version);
                print_uptime(up);
                printf("\n");
        }
}

/* What is known of kgpu-grpcd: its unit, the kubelet as the probe sees it, and the
 * plugin sockets of the broker's resources (n_socks < 0: unknown). */
typedef struct GrpcdView {
        UnitInfo unit;
        KubeletView kv;
        SocketState *socks;
        int n_socks;
        bool up;
        const char *state;
        const char *dir;
} GrpcdView;

static void print_grpcd(Ctl *c, const GrpcdView *g, uint64_t now) {
        uint64_t up = g->unit.active_enter && now > g->unit.active_enter ?
                      (now - g->unit.active_enter) / 1000000ULL : 0;
        bool kubelet = g->kv.known && streq_ptr(g->kv.state, "present");

        if (c->json) {
                printf(",{\"daemon\":\"kgpu-grpcd\",\"running\":%s,\"state\":", g->up ? "true" : "false");
                ctl_json_string(g->state);
                printf(",\"uptime_seconds\":%llu,\"status_text\":", (unsigned long long) up);
                ctl_json_string(g->unit.status_text);
                printf(",\"device_plugin_path\":");
                ctl_json_string(g->dir);
                printf(",\"kubelet_socket\":%s,\"kubelet_state\":", kubelet ? "true" : "false");
                ctl_json_string(g->kv.state);
                printf(",\"last_error\":");
                ctl_json_string(g->kv.last_error);
                printf(",\"resources\":[");
                for (int i = 0; i < g->n_socks; i++) {
                        printf("%s{\"resource\":", i ? "," : "");
                        ctl_json_string(g->socks[i].resource);
                        printf(",\"socket\":");
                        ctl_json_string(g->socks[i].state);
                        printf("}");
                }
                printf("]}]\n");
                return;
        }
        printf("%-14s %-10s %-10s ", "kgpu-grpcd", g->state, "-");
        if (up)
                print_uptime(up);
        else
                printf("-");
        printf("%s%s\n", g->unit.status_text && *g->unit.status_text ? "  " : "",
               g->unit.status_text ?: "");
        printf("\nKubelet socket: %s\n", g->kv.known ? g->kv.state : "unknown (kgpu-probed is not running)");
        if (!isempty(g->kv.last_error))
                printf("Last failure reaching the kubelet: %s\n", g->kv.last_error);
        printf("\nPlugin sockets in %s:\n", g->dir);
        if (g->n_socks < 0)
                printf("  unknown: the broker is not running\n");
        else if (g->n_socks == 0)
                printf("  no resources advertised\n");
        for (int i = 0; i < g->n_socks; i++)
                printf("  %-40s %s\n", g->socks[i].resource, g->socks[i].state);
}

int ctl_status(Ctl *c, int argc, char **argv) {
        DaemonStatus ds[] = {
                { "kgpu-probed", KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH, KGPU_PROBE_INTERFACE },
                { "kgpu-brokerd", KGPU_BROKER_BUS_NAME, KGPU_BROKER_PATH, KGPU_BROKER_INTERFACE },
        };
        uint64_t now = now_usec(CLOCK_REALTIME);
        GrpcdView g = { .n_socks = -1 };
        bool all_up = true;
        size_t serving = 0;

        if (argc > 1) {
                fprintf(stderr, "status takes no arguments.\n");
                return -EINVAL;
        }
        for (size_t i = 0; i < ELEMENTSOF(ds); i++) {
                query(c, &ds[i]);
                all_up = all_up && !ds[i].error;
        }
        ds[1].has_node_config = true;
        if (!ds[1].error)
                query_node_config(c, &ds[1]);
        if (!ds[0].error)
                query_kubelet(c, &g.kv);
        g.dir = g.kv.dir ?: "(unknown: kgpu-probed is not running)";
        if (!ds[1].error)
                g.n_socks = query_sockets(c, &g.kv, &g.socks);
        for (int i = 0; i < g.n_socks; i++)
                serving += streq(g.socks[i].state, "serving");
        query_unit(c, "kgpu-grpcd.service", &g.unit);

        /* systemd's word wins; without systemd, sockets being served mean it runs. */
        if (g.unit.active_state)
                g.up = streq(g.unit.active_state, "active") || streq(g.unit.active_state, "reloading");
        else
                g.up = serving > 0;
        g.state = g.unit.active_state ? g.unit.active_state : g.up ? "serving" : g.n_socks > 0 ? "down?" : "unknown";
        if (g.n_socks > 0 && !g.up)
                all_up = false;

        if (c->json)
                printf("[");
        else
                printf("%-14s %-10s %-10s %s\n", "DAEMON", "STATE", "VERSION", "UPTIME");
        for (size_t i = 0; i < ELEMENTSOF(ds); i++)
                print_daemon(c, &ds[i], i == 0, now);
        print_grpcd(c, &g, now);
        if (!c->json)
                print_node_config(c, &ds[1]);
        for (size_t i = 0; i < ELEMENTSOF(ds); i++) {
                free(ds[i].version);
                free(ds[i].error);
                free(ds[i].node_config);
                free(ds[i].node_config_requested);
                free(ds[i].node_config_error);
        }

        for (int i = 0; i < g.n_socks; i++)
                free(g.socks[i].resource);
        free(g.socks);
        free(g.unit.active_state);
        free(g.unit.status_text);
        kubelet_view_done(&g.kv);
        return all_up ? 0 : -ENOTCONN;
}
