/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * bus-util.h — readers for the D-Bus values every client of the probe and the broker
 * parses: bounded string lists ("as"), property maps ("a{sv}") and the interface maps
 * of the ObjectManager ("a{sa{sv}}").
 *
 * Contract: the message is read from its current position; every function returns 0
 * on success or a negative errno (sd-bus's own for malformed messages, -ENOMEM) and
 * writes ret_* on success only. Values from the bus are hostile: a list is bounded
 * before anything is kept, and a refused list is still consumed whole, so the caller
 * can read on (refuse one property, go on with the next).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <systemd/sd-bus.h>

typedef bool (*BusStringCheck)(const char *s);

/* Reads an "as" into a (possibly empty, never NULL) strv, duplicates dropped. Every
 * entry must pass check (NULL: any); more than max entries or one that fails is
 * -EBADMSG, with the whole array consumed and *ret untouched. */
int bus_read_strv_bounded(sd_bus_message *m, size_t max, BusStringCheck check, char ***ret);

/* Called for each entry of a property map, inside its variant: contents is the
 * variant's signature. Returns 1 when it read the value, 0 to have it skipped, or a
 * negative errno that ends the walk. */
typedef int (*BusPropertyHandler)(sd_bus_message *m, const char *name, const char *contents, void *userdata);

/* Walks an "a{sv}" entry by entry, calling handler for each. Returns 0 once the whole
 * map is consumed, or the first negative errno of sd-bus or the handler. */
int bus_read_property_map(sd_bus_message *m, BusPropertyHandler handler, void *userdata);

/* Called with the "a{sv}" of the interface bus_read_interface_map() looks for. Returns 1
 * when it read the map, 0 to have it skipped, or a negative errno that ends the walk. */
typedef int (*BusInterfaceHandler)(sd_bus_message *m, void *userdata);

/* Walks an "a{sa{sv}}" (InterfacesAdded, one object of GetManagedObjects): the first
 * entry of interface goes to handler, every other entry is skipped. Returns 1 when
 * interface was there, 0 when it was not, or the first negative errno. */
int bus_read_interface_map(sd_bus_message *m, const char *interface, BusInterfaceHandler handler, void *userdata);

/* Reads an "s" and replaces *p by a copy of it. */
int bus_read_string_dup(sd_bus_message *m, char **p);
