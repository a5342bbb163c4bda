/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* kgpuctl.c — command-line client of kgpu: dispatch and shared helpers. */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/config.h"
#include "common/log.h"
#include "common/opt-parse.h"
#include "common/util.h"
#include "tools/kgpuctl.h"

static const struct {
        const char *name;
        int (*run)(Ctl *c, int argc, char **argv);
        bool bus;
        bool args;              /* takes arguments; the others refuse any */
        const char *help;
} verbs[] = {
        { "status",        ctl_status,        true,  false, "daemons, versions, uptime, registration state" },
        { "devices",       ctl_devices,       true,  false, "GPUs the probe sees" },
        { "resources",     ctl_resources,     true,  false, "resources the broker advertises, with their devices" },
        { "allocations",   ctl_allocations,   true,  false, "allocations the broker holds" },
        { "labels",        ctl_labels,        false, false, "node labels the probe published for NFD" },
        { "rescan",        ctl_rescan,        true,  false, "make the probe enumerate the GPUs again (root)" },
        { "render-device", ctl_render_device, false, true,
          "[N] [COMMAND ARG...] the Nth render node; or run COMMAND with it appended" },
};

int ctl_load_config(Ctl *c) {
        _cleanup_free_ char *error = NULL;
        int r;

        if (c->config)
                return 0;
        r = config_load(c->config_path, NULL, 0, &c->config, &error);
        if (r < 0) {
                fprintf(stderr, "Invalid configuration: %s\n", error ?: strerror(-r));
                return r;
        }
        return 0;
}

int ctl_call_failed(const char *what, const char *daemon, const sd_bus_error *e, int r) {
        if (e && (sd_bus_error_has_name(e, SD_BUS_ERROR_SERVICE_UNKNOWN) ||
                  sd_bus_error_has_name(e, SD_BUS_ERROR_NAME_HAS_NO_OWNER)))
                fprintf(stderr, "%s: %s is not running (no owner for its bus name).\n", what, daemon);
        else if (e && (sd_bus_error_has_name(e, SD_BUS_ERROR_ACCESS_DENIED) ||
                       sd_bus_error_has_name(e, KGPU_ERROR_ACCESS_DENIED)))
                fprintf(stderr, "%s: access denied by %s: %s\n", what, daemon, e->message ?: "");
        else
                fprintf(stderr, "%s: %s\n", what, e && e->message ? e->message : strerror(r < 0 ? -r : r));
        return r < 0 ? r : -EIO;
}

int ctl_call(Ctl *c, const char *what, const char *daemon, const char *destination, const char *path,
             const char *interface, const char *member, sd_bus_message **reply, const char *types, ...) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        va_list ap;
        int r;

        va_start(ap, types);
        r = sd_bus_call_methodv(c->bus, destination, path, interface, member, &e, reply, types, ap);
        va_end(ap);
        if (r < 0)
                r = ctl_call_failed(what, daemon, &e, r);
        sd_bus_error_free(&e);
        return r;
}

static void help(void) {
        printf("kgpuctl [OPTIONS] COMMAND [ARGS] [OPTIONS]\n\n"
               "Inspect the kgpu GPU device plugin.\n\n"
               "Commands:\n");
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                printf("  %-14s %s\n", verbs[i].name, verbs[i].help);
        printf("\nOptions (before or after the command; one or two dashes; \"--\" ends them):\n"
               "  -h --help      show this help\n"
               "     --version   show the version\n"
               "     --json      print JSON instead of tables\n"
               "     --config=FILE  configuration file (default %s)\n"
               "\nThe system bus is used (DBUS_SYSTEM_BUS_ADDRESS overrides its address).\n",
               KGPU_CONFIG_FILE_DEFAULT);
}

static int verb_find(const char *name) {
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                if (streq(name, verbs[i].name))
                        return (int) i;
        return -1;
}

/* Options anywhere: before the command, after it, between its arguments; "--" ends
 * them, and so does the command of "render-device [N] COMMAND ARG...", whose own
 * options (vainfo --device) are never ours. args gets the command and its arguments. */
static int parse_argv(Ctl *c, int argc, char **argv, char **args, size_t *ret_n) {
        static const struct option opts[] = {
                { "help",    no_argument,       NULL, 'h' },
                { "h",       no_argument,       NULL, 'h' },
                { "version", no_argument,       NULL, 'V' },
                { "json",    no_argument,       NULL, 'j' },
                { "config",  required_argument, NULL, 'c' },
                {}
        };
        const char *value;
        size_t n = 0;
        int verb = -1, o;
        OptParser p;

        opt_parser_init(&p, argc, argv, opts);
        for (;;) {
                o = opt_next(&p, &value);
                switch (o) {
                case -EINVAL:
                        fprintf(stderr, "%s: %s; see kgpuctl --help.\n", p.arg, p.error);
                        return -EINVAL;
                case 'h':
                        help();
                        return 0;
                case 'V':
                        printf("kgpuctl %s\n", KGPU_VERSION);
                        return 0;
                case 'j':
                        c->json = true;
                        continue;
                case 'c':
                        c->config_path = value;
                        continue;
                }
                if (p.index >= argc)
                        break;
                if (p.done) {
                        while (p.index < argc)
                                args[n++] = argv[p.index++];
                        break;
                }
                args[n++] = argv[p.index++];
                if (n == 1)
                        verb = verb_find(args[0]);
                else if (verb >= 0 && verbs[verb].run == ctl_render_device &&
                         ctl_render_device_command_starts(args + 1, n - 1)) {
                        while (p.index < argc)
                                args[n++] = argv[p.index++];
                        break;
                }
        }
        *ret_n = n;
        return 1;
}

int main(int argc, char **argv) {
        _cleanup_free_ char **args = NULL;
        Ctl c = {};
        size_t n = 0;
        int r, v;

        log_setup("kgpuctl");
        args = calloc((size_t) argc + 1, sizeof(char *));
        if (!args) {
                fprintf(stderr, "Out of memory.\n");
                return EXIT_FAILURE;
        }
        r = parse_argv(&c, argc, argv, args, &n);
        if (r <= 0)
                return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
        if (n == 0) {
                help();
                return EXIT_FAILURE;
        }
        v = verb_find(args[0]);
        if (v < 0) {
                fprintf(stderr, "Unknown command '%s'; see kgpuctl --help.\n", args[0]);
                return EXIT_FAILURE;
        }
        if (n > 1 && !verbs[v].args) {
                fprintf(stderr, "%s takes no arguments (got '%s'); see kgpuctl --help.\n", args[0], args[1]);
                return EXIT_FAILURE;
        }
        if (verbs[v].bus) {
                r = sd_bus_open_system(&c.bus);
                if (r < 0) {
                        fprintf(stderr, "Cannot connect to the system bus: %s\n", strerror(-r));
                        return EXIT_FAILURE;
                }
        }
        r = verbs[v].run(&c, (int) n, args);
        sd_bus_flush_close_unref(c.bus);
        config_free(c.config);
        return r < 0 ? (c.exit_status ?: EXIT_FAILURE) : EXIT_SUCCESS;
}
