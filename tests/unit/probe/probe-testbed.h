/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * probe-testbed.h — shared by the probe's Check suites: load a layout from
 * tests/data/testbeds/ into an in-process umockdev testbed, and cleanup helpers for the
 * scan results. Include after the project headers (glib redefines MIN/MAX).
 */
#pragma once

#include <check.h>
#include <stdlib.h>

#include <libudev.h>
#include <umockdev.h>

#include "daemons/probe/udev-scan.h"

static inline void udev_unrefp(struct udev **u) {
        if (*u)
                udev_unref(*u);
}

static inline void gpus_freep(Gpu ***l) {
        udev_scan_gpus_free(*l);
}

/* The layout file minus its comment lines; fails the test if it cannot be loaded. */
static inline UMockdevTestbed *testbed_load(const char *layout) {
        g_autoptr(GError) error = NULL;
        g_autofree char *path = NULL, *contents = NULL;
        g_auto(GStrv) lines = NULL;
        g_autoptr(GString) text = g_string_new(NULL);
        UMockdevTestbed *tb;
        const char *src = getenv("KGPU_SOURCE_ROOT");

        ck_assert_ptr_nonnull(src);
        path = g_strdup_printf("%s/tests/data/testbeds/%s.umockdev", src, layout);
        ck_assert_msg(g_file_get_contents(path, &contents, NULL, &error), "%s", path);
        lines = g_strsplit(contents, "\n", -1);
        for (size_t i = 0; lines[i]; i++)
                if (lines[i][0] != '#')
                        g_string_append_printf(text, "%s\n", lines[i]);

        tb = umockdev_testbed_new();
        ck_assert_ptr_nonnull(tb);
        ck_assert_msg(umockdev_testbed_add_from_string(tb, g_strstrip(text->str), &error), "%s",
                      error ? error->message : "?");
        return tb;
}
