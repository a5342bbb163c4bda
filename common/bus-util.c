/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * bus-util.c — bounded string lists and property maps read from D-Bus messages.
 *
 * Contract: implements common/bus-util.h; allocates only what it hands out.
 */

#include <errno.h>
#include <stdlib.h>

#include "common/bus-util.h"
#include "common/util.h"

int bus_read_strv_bounded(sd_bus_message *m, size_t max, BusStringCheck check, char ***ret) {
        _cleanup_strv_free_ char **l = NULL;
        bool bad = false;
        size_t n = 0;
        int r;

        l = calloc(1, sizeof(char *));
        if (!l)
                return -ENOMEM;
        r = sd_bus_message_enter_container(m, 'a', "s");
        if (r < 0)
                return r;
        for (;;) {
                const char *v;

                r = sd_bus_message_read_basic(m, 's', &v);
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                if (++n > max || (check && !check(v)))
                        bad = true;
                if (bad || strv_contains(l, v))
                        continue;       /* read on to consume it, keep nothing */
                r = strv_extend(&l, v);
                if (r < 0)
                        return r;
        }
        r = sd_bus_message_exit_container(m);
        if (r < 0)
                return r;
        if (bad)
                return -EBADMSG;
        *ret = TAKE_PTR(l);
        return 0;
}

int bus_read_property_map(sd_bus_message *m, BusPropertyHandler handler, void *userdata) {
        int r;

        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        if (r < 0)
                return r;
        for (;;) {
                const char *name, *contents;

                r = sd_bus_message_enter_container(m, 'e', "sv");
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                r = sd_bus_message_read_basic(m, 's', &name);
                if (r < 0)
                        return r;
                r = sd_bus_message_peek_type(m, NULL, &contents);
                if (r < 0)
                        return r;
                r = sd_bus_message_enter_container(m, 'v', contents);
                if (r < 0)
                        return r;
                r = handler(m, name, contents, userdata);
                if (r == 0)
                        r = sd_bus_message_skip(m, contents);
                if (r < 0)
                        return r;
                r = sd_bus_message_exit_container(m);
                if (r < 0)
                        return r;
                r = sd_bus_message_exit_container(m);
                if (r < 0)
                        return r;
        }
        return sd_bus_message_exit_container(m);
}

int bus_read_interface_map(sd_bus_message *m, const char *interface, BusInterfaceHandler handler, void *userdata) {
        bool found = false;
        int r;

        r = sd_bus_message_enter_container(m, 'a', "{sa{sv}}");
        if (r < 0)
                return r;
        for (;;) {
                const char *name;

                r = sd_bus_message_enter_container(m, 'e', "sa{sv}");
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                r = sd_bus_message_read_basic(m, 's', &name);
                if (r < 0)
                        return r;
                r = 0;
                if (streq(name, interface) && !found) {
                        found = true;
                        r = handler(m, userdata);
                }
                if (r == 0)
                        r = sd_bus_message_skip(m, "a{sv}");
                if (r < 0)
                        return r;
                r = sd_bus_message_exit_container(m);
                if (r < 0)
                        return r;
        }
        r = sd_bus_message_exit_container(m);
        if (r < 0)
                return r;
        return found;
}

int bus_read_string_dup(sd_bus_message *m, char **p) {
        const char *s;
        int r;

        r = sd_bus_message_read_basic(m, 's', &s);
        if (r < 0)
                return r;
        if (r == 0)
                return -EBADMSG;
        return free_and_strdup(p, s);
}
