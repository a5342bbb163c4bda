/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * bus-introspect.h — print the introspection XML that sd-bus generates from vtables.
 *
 * Used by every daemon's --introspect: the vtables are registered on one end of a
 * private in-process socketpair bus and org.freedesktop.DBus.Introspectable.Introspect
 * is called from the other end, so the output is exactly what a bus client would see.
 * Only io.kgpu.* interfaces are kept, wrapped in one <node>. No bus daemon is needed.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <systemd/sd-bus.h>

typedef struct BusIntrospectEntry {
        const char *path;               /* object path (for fallback: the prefix) */
        const char *interface;
        const sd_bus_vtable *vtable;
        bool fallback;                  /* registered with sd_bus_add_fallback_vtable */
} BusIntrospectEntry;

/* Returns the XML in *ret (caller frees); n == 0 gives an empty <node> at once. */
int bus_introspect_xml(const BusIntrospectEntry *entries, size_t n, char **ret);
/* Writes the XML to stdout; returns 0 or negative errno (already logged). */
int bus_introspect_print(const BusIntrospectEntry *entries, size_t n);
/* For a daemon that exports nothing: an empty <node> holding why as an XML comment
 * (why must not contain "--"). */
int bus_introspect_print_none(const char *why);
