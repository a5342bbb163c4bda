/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kgpuctl.h — shared state of the kgpuctl subcommands.
 *
 * Each subcommand lives in its own kgpuctl-<name>.c, reads over D-Bus and prints a
 * table (or JSON with --json). Subcommands return 0 or a negative errno after
 * printing a clear error that names the daemon that is down or the denial.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <systemd/sd-bus.h>

typedef struct Config Config;

typedef struct Ctl {
        sd_bus *bus;                    /* NULL for commands that need no bus */
        bool json;
        const char *config_path;        /* --config=FILE, NULL: the default */
        Config *config;                 /* loaded on first use by ctl_load_config() */
        int exit_status;                /* set by a command that fails with its own status; 0: 1 */
} Ctl;

/* Loads kgpu.yaml (and the environment) once; prints a clear error on failure. */
int ctl_load_config(Ctl *c);

/* Turns a failed call into one clear line on stderr; returns r. */
int ctl_call_failed(const char *what, const char *daemon, const sd_bus_error *e, int r);
/* sd_bus_call_method() to daemon; a failure is printed as by ctl_call_failed(what, ...)
 * and returned as its negative errno. */
int ctl_call(Ctl *c, const char *what, const char *daemon, const char *destination, const char *path,
             const char *interface, const char *member, sd_bus_message **reply, const char *types, ...);
/* Prints s as a JSON string literal. */
void ctl_json_string(const char *s);

int ctl_status(Ctl *c, int argc, char **argv);
int ctl_devices(Ctl *c, int argc, char **argv);
int ctl_resources(Ctl *c, int argc, char **argv);
int ctl_allocations(Ctl *c, int argc, char **argv);
int ctl_labels(Ctl *c, int argc, char **argv);
int ctl_rescan(Ctl *c, int argc, char **argv);
int ctl_render_device(Ctl *c, int argc, char **argv);
/* render-device's arguments: whether s is meant as N ("2", "0", "-1"); whether the
 * newest of the n arguments so far (args[n - 1]) starts the command, after which
 * nothing is an option of ours. */
bool ctl_render_device_looks_numeric(const char *s);
bool ctl_render_device_command_starts(char **args, size_t n);
