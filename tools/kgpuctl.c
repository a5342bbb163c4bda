/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* kgpuctl.c — command-line client of kgpu: dispatch and shared helpers. */

#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "tools/kgpuctl.h"

static const struct {
        const char *name;
        int (*run)(Ctl *c, int argc, char **argv);
        bool bus;
        const char *help;
} verbs[] = {
        { "status",        ctl_status,        true,  "daemons, versions, uptime, registration state" },
        { "devices",       ctl_devices,       true,  "GPUs the probe sees" },
        { "resources",     ctl_resources,     true,  "resources the broker advertises, with their devices" },
        { "allocations",   ctl_allocations,   true,  "allocations the broker holds" },
        { "labels",        ctl_labels,        false, "node labels the probe published for NFD" },
        { "rescan",        ctl_rescan,        true,  "make the probe enumerate the GPUs again (root)" },
        { "render-device", ctl_render_device, false, "[N] path of the Nth render node (no daemons needed)" },
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
        printf("kgpuctl [OPTIONS] COMMAND\n\n"
               "Inspect the kgpu GPU device plugin.\n\n"
               "Commands:\n");
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                printf("  %-14s %s\n", verbs[i].name, verbs[i].help);
        printf("\nOptions:\n"
               "  -h --help      show this help\n"
               "     --version   show the version\n"
               "     --json      print JSON instead of tables\n"
               "     --config=FILE  configuration file (default %s)\n"
               "\nThe system bus is used (DBUS_SYSTEM_BUS_ADDRESS overrides its address).\n",
               KGPU_CONFIG_FILE_DEFAULT);
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "help",    no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                { "json",    no_argument, NULL, 'j' },
                { "config",  required_argument, NULL, 'c' },
                {}
        };
        Ctl c = {};
        int r, o;

        log_setup("kgpuctl");
        while ((o = getopt_long(argc, argv, "+h", opts, NULL)) >= 0)
                switch (o) {
                case 'h':
                        help();
                        return EXIT_SUCCESS;
                case 'V':
                        printf("kgpuctl %s\n", KGPU_VERSION);
                        return EXIT_SUCCESS;
                case 'j':
                        c.json = true;
                        break;
                case 'c':
                        c.config_path = optarg;
                        break;
                default:
                        return EXIT_FAILURE;
                }

        if (optind >= argc) {
                help();
                return EXIT_FAILURE;
        }
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++) {
                if (!streq(argv[optind], verbs[i].name))
                        continue;
                if (verbs[i].bus) {
                        r = sd_bus_open_system(&c.bus);
                        if (r < 0) {
                                fprintf(stderr, "Cannot connect to the system bus: %s\n", strerror(-r));
                                return EXIT_FAILURE;
                        }
                }
                r = verbs[i].run(&c, argc - optind, argv + optind);
                sd_bus_flush_close_unref(c.bus);
                config_free(c.config);
                return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
        }
        fprintf(stderr, "Unknown command '%s'; see kgpuctl --help.\n", argv[optind]);
        return EXIT_FAILURE;
}
