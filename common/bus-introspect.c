/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bus-introspect.c — introspection XML from vtables over an in-process bus (see header). */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <systemd/sd-event.h>

#include "common/bus-introspect.h"
#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"


typedef struct IntrospectState {
        sd_event *event;
        char **xml;             /* one slot per entry */
        size_t n;
        size_t pending;
        int error;
} IntrospectState;

typedef struct IntrospectSlot {
        IntrospectState *state;
        size_t index;
} IntrospectSlot;

static void state_done(IntrospectState *st) {
        if (st->xml)
                for (size_t i = 0; i < st->n; i++)
                        free(st->xml[i]);
        free(st->xml);
}

static int fallback_find(sd_bus *bus, const char *path, const char *interface,
                         void *userdata, void **ret_found, sd_bus_error *error) {
        *ret_found = NULL;
        return 1;
}

static int on_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        IntrospectSlot *slot = userdata;
        IntrospectState *st = slot->state;
        const sd_bus_error *e = sd_bus_message_get_error(m);
        const char *s;
        int r;

        if (e)
                st->error = -sd_bus_error_get_errno(e) ?: -EIO;
        else {
                r = sd_bus_message_read(m, "s", &s);
                if (r < 0)
                        st->error = r;
                else {
                        st->xml[slot->index] = strdup(s);
                        if (!st->xml[slot->index])
                                st->error = -ENOMEM;
                }
        }
        if (--st->pending == 0)
                return sd_event_exit(st->event, 0);
        return 0;
}

/* Appends every <interface name="io.kgpu.*"> ... </interface> block of xml to out. */
static int append_kgpu_interfaces(FILE *out, const char *xml, char ***seen) {
        const char *p = xml;

        for (;;) {
                const char *b = strstr(p, "<interface name=\"io.kgpu.");
                const char *e, *q;
                _cleanup_free_ char *name = NULL;

                if (!b)
                        return 0;
                e = strstr(b, "</interface>");
                if (!e)
                        return -EBADMSG;
                e += strlen("</interface>");
                q = strchr(b + strlen("<interface name=\""), '"');
                if (!q)
                        return -EBADMSG;
                name = strndup(b + strlen("<interface name=\""), (size_t) (q - b) - strlen("<interface name=\""));
                if (!name)
                        return -ENOMEM;
                if (!strv_contains(*seen, name)) {
                        fprintf(out, " %.*s\n", (int) (e - b), b);
                        if (strv_consume(seen, TAKE_PTR(name)) < 0)
                                return -ENOMEM;
                }
                p = e;
        }
}

/* A connected pair of anonymous private buses on event: server serves the vtables of
 * entries, client asks. */
static int bus_pair_new(sd_event *event, const BusIntrospectEntry *entries, size_t n,
                        sd_bus **ret_server, sd_bus **ret_client) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *server = NULL, *client = NULL;
        sd_id128_t id;
        int pair[2], r;

        if (socketpair(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC|SOCK_NONBLOCK, 0, pair) < 0)
                return negative_errno();

        r = sd_bus_new(&server);
        if (r >= 0)
                r = sd_bus_set_fd(server, pair[0], pair[0]);
        if (r < 0) {
                safe_close(pair[0]);
                safe_close(pair[1]);
                return r;
        }
        r = sd_bus_new(&client);
        if (r >= 0)
                r = sd_bus_set_fd(client, pair[1], pair[1]);
        if (r < 0) {
                safe_close(pair[1]);
                return r;
        }
        r = sd_id128_randomize(&id);
        if (r < 0)
                return r;
        r = sd_bus_set_server(server, 1, id);
        if (r < 0)
                return r;
        r = sd_bus_set_anonymous(server, 1);
        if (r < 0)
                return r;
        r = sd_bus_set_anonymous(client, 1);
        if (r < 0)
                return r;

        for (size_t i = 0; i < n; i++) {
                if (entries[i].fallback)
                        r = sd_bus_add_fallback_vtable(server, NULL, entries[i].path, entries[i].interface,
                                                       entries[i].vtable, fallback_find, NULL);
                else
                        r = sd_bus_add_object_vtable(server, NULL, entries[i].path, entries[i].interface,
                                                     entries[i].vtable, NULL);
                if (r < 0)
                        return r;
        }

        r = sd_bus_start(server);
        if (r < 0)
                return r;
        r = sd_bus_start(client);
        if (r < 0)
                return r;
        r = sd_bus_attach_event(server, event, 0);
        if (r < 0)
                return r;
        r = sd_bus_attach_event(client, event, 0);
        if (r < 0)
                return r;
        *ret_server = TAKE_PTR(server);
        *ret_client = TAKE_PTR(client);
        return 0;
}

/* Asks for the introspection data of each entry's object (a child, for a fallback) and
 * runs the loop until every answer is in state->xml. */
static int introspect_objects(sd_bus *client, const BusIntrospectEntry *entries, size_t n,
                              IntrospectState *state, IntrospectSlot *slots) {
        int r;

        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *p = NULL;

                if (entries[i].fallback) {
                        if (asprintf(&p, "%s/example", entries[i].path) < 0)
                                return -ENOMEM;
                } else {
                        p = strdup(entries[i].path);
                        if (!p)
                                return -ENOMEM;
                }
                slots[i] = (IntrospectSlot) { .state = state, .index = i };
                r = sd_bus_call_method_async(client, NULL, NULL, p,
                                             "org.freedesktop.DBus.Introspectable", "Introspect",
                                             on_reply, &slots[i], "");
                if (r < 0)
                        return r;
                state->pending++;
        }
        r = sd_event_loop(state->event);
        if (r < 0)
                return r;
        return state->error < 0 ? state->error : 0;
}

#define INTROSPECT_HEADER \
        "<!DOCTYPE node PUBLIC \"-//freedesktop//DTD D-BUS Object Introspection 1.0//EN\"\n" \
        " \"http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd\">\n<node>\n"

int bus_introspect_xml(const BusIntrospectEntry *entries, size_t n, char **ret) {
        /* Closed without a flush: the pair's other end is this thread, so a flush that
         * waits on it (the authentication of a pair nobody called over) would wait for
         * sd-bus's timeout. */
        _cleanup_(sd_bus_close_unrefp) sd_bus *server = NULL, *client = NULL;
        _cleanup_(sd_event_unrefp) sd_event *event = NULL;
        _cleanup_strv_free_ char **seen = NULL;
        _cleanup_free_ char *buf = NULL;
        _cleanup_fclose_ FILE *out = NULL;
        _cleanup_(state_done) IntrospectState state = {};
        _cleanup_free_ IntrospectSlot *slots = NULL;
        size_t sz = 0;
        int r;

        if (n == 0) {
                /* Nothing to ask: no bus at all. */
                buf = strdup(INTROSPECT_HEADER "</node>\n");
                if (!buf)
                        return -ENOMEM;
                *ret = TAKE_PTR(buf);
                return 0;
        }
        r = sd_event_new(&event);
        if (r < 0)
                return r;
        r = bus_pair_new(event, entries, n, &server, &client);
        if (r < 0)
                return r;

        out = open_memstream(&buf, &sz);
        if (!out)
                return -ENOMEM;
        fputs(INTROSPECT_HEADER, out);
        state.event = event;
        state.n = n;
        state.xml = calloc(n + 1, sizeof(char *));
        slots = calloc(n + 1, sizeof(IntrospectSlot));
        if (!state.xml || !slots)
                return -ENOMEM;
        r = introspect_objects(client, entries, n, &state, slots);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                r = append_kgpu_interfaces(out, state.xml[i] ?: "", &seen);
                if (r < 0)
                        return r;
        }
        fputs("</node>\n", out);
        if (fflush(out) != 0)
                return -ENOMEM;
        out = (fclose(out), NULL);
        *ret = TAKE_PTR(buf);
        return 0;
}

int bus_introspect_print(const BusIntrospectEntry *entries, size_t n) {
        _cleanup_free_ char *xml = NULL;
        int r;

        r = bus_introspect_xml(entries, n, &xml);
        if (r < 0)
                return log_error_errno(r, "Failed to generate introspection data: %m");
        fputs(xml, stdout);
        return fflush(stdout) == 0 ? 0 : -EIO;
}

int bus_introspect_print_none(const char *why) {
        printf(INTROSPECT_HEADER " <!-- %s -->\n</node>\n", why);
        return fflush(stdout) == 0 ? 0 : -EIO;
}
