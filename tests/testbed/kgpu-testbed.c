/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kgpu-testbed.c — an umockdev testbed of Intel GPUs, driven line by line from stdin.
 *
 * Contract (tests/integration/harness.py and tests/testbed/test-probe-testbed.c rely on
 * it): `kgpu-testbed [--layout] NAME|FILE` loads tests/data/testbeds/NAME.umockdev (or
 * FILE when it contains a '/'), prints "UMOCKDEV_DIR=<dir>" and "ready" (flushed), then
 * reads one command per line and answers exactly one line, "ok" or "error: <why>":
 *   remove <pci-address>  send "remove" uevents for the GPU's DRM devices, then delete
 *                         their sysfs entries (the GPU's PCI device stays)
 *   add <pci-address>     re-create the DRM devices and send "add" uevents
 *   change <pci-address>  send "change" uevents for the DRM devices
 *   quit                  (or EOF, SIGTERM, SIGINT) remove the testbed directory, exit 0
 * Processes started with LD_PRELOAD=libumockdev-preload.so.0 and UMOCKDEV_DIR=<dir> see
 * the testbed; uevents reach their udev monitors through the event sockets umockdev
 * keeps in <dir>.
 */

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <umockdev.h>

#ifndef KGPU_TESTBED_DATA_DIR
#error "KGPU_TESTBED_DATA_DIR must be defined"
#endif

#define LINE_MAX_LEN 1024
#define PRELOAD "libumockdev-preload.so.0"

static bool isempty_str(const char *s) {
        return !s || !*s;
}
#define BLOCKS_MAX 256

typedef struct Block {
        char *devpath;          /* "/devices/..." as in the P: line */
        char *text;             /* the record, comments stripped */
} Block;

typedef struct Testbed {
        UMockdevTestbed *tb;
        Block blocks[BLOCKS_MAX];
        size_t n_blocks;
} Testbed;

static void testbed_done(Testbed *t) {
        for (size_t i = 0; i < t->n_blocks; i++) {
                g_free(t->blocks[i].devpath);
                g_free(t->blocks[i].text);
        }
        if (t->tb)
                g_object_unref(t->tb);
}

/* Splits the file into blank-line separated records, dropping '#' comment lines. */
static int testbed_parse(Testbed *t, const char *contents) {
        g_auto(GStrv) lines = g_strsplit(contents, "\n", -1);
        g_autoptr(GString) cur = g_string_new(NULL);
        g_autofree char *devpath = NULL;

        for (size_t i = 0; ; i++) {
                const char *l = lines[i];

                if (!l || l[0] == 0) {
                        if (devpath) {
                                if (t->n_blocks >= BLOCKS_MAX)
                                        return -E2BIG;
                                t->blocks[t->n_blocks].devpath = g_steal_pointer(&devpath);
                                t->blocks[t->n_blocks].text = g_strdup(cur->str);
                                t->n_blocks++;
                        }
                        g_string_truncate(cur, 0);
                        if (!l)
                                break;
                        continue;
                }
                if (l[0] == '#')
                        continue;
                if (g_str_has_prefix(l, "P: ")) {
                        if (devpath)
                                return -EINVAL;
                        devpath = g_strdup(l + 3);
                }
                g_string_append(cur, l);
                g_string_append_c(cur, '\n');
        }
        return 0;
}

/* Whether block b is a DRM device of the PCI device pci. */
static bool block_is_drm_of(const Block *b, const char *pci) {
        g_autofree char *needle = g_strdup_printf("/%s/drm/", pci);

        return strstr(b->devpath, needle) != NULL;
}

static bool sysfs_exists(Testbed *t, const char *devpath) {
        g_autofree char *sys = umockdev_testbed_get_sys_dir(t->tb);
        g_autofree char *p = g_strconcat(sys, devpath, NULL);

        return g_file_test(p, G_FILE_TEST_IS_DIR);
}

static const char *cmd_remove(Testbed *t, const char *pci) {
        size_t n = 0;

        /* Children first: blocks are listed parent first, so walk backwards. */
        for (size_t i = t->n_blocks; i-- > 0; ) {
                g_autofree char *sys = NULL;

                if (!block_is_drm_of(&t->blocks[i], pci) || !sysfs_exists(t, t->blocks[i].devpath))
                        continue;
                sys = g_strconcat("/sys", t->blocks[i].devpath, NULL);
                umockdev_testbed_uevent(t->tb, sys, "remove");
                n++;
        }
        for (size_t i = t->n_blocks; i-- > 0; ) {
                g_autofree char *sys = NULL;

                if (!block_is_drm_of(&t->blocks[i], pci) || !sysfs_exists(t, t->blocks[i].devpath))
                        continue;
                sys = g_strconcat("/sys", t->blocks[i].devpath, NULL);
                umockdev_testbed_remove_device(t->tb, sys);
        }
        return n > 0 ? NULL : "no DRM devices present for this address";
}

static char *strip_node_lines(const char *text) {
        g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
        GString *s = g_string_new(NULL);

        for (size_t i = 0; lines[i]; i++) {
                if (g_str_has_prefix(lines[i], "N: ") || lines[i][0] == 0)
                        continue;
                g_string_append(s, lines[i]);
                g_string_append_c(s, '\n');
        }
        return g_string_free(s, FALSE);
}

static const char *cmd_add(Testbed *t, const char *pci) {
        size_t n = 0;

        for (size_t i = 0; i < t->n_blocks; i++) {
                g_autoptr(GError) error = NULL;
                g_autofree char *sys = NULL, *text = NULL;

                if (!block_is_drm_of(&t->blocks[i], pci) || sysfs_exists(t, t->blocks[i].devpath))
                        continue;
                /* umockdev keeps the /dev node of a removed device; creating it again
                 * would abort, so re-add without "N:" (DEVNAME stays in the E: lines). */
                text = strip_node_lines(t->blocks[i].text);
                if (!umockdev_testbed_add_from_string(t->tb, text, &error))
                        return "failed to add device";
                sys = g_strconcat("/sys", t->blocks[i].devpath, NULL);
                umockdev_testbed_uevent(t->tb, sys, "add");
                n++;
        }
        return n > 0 ? NULL : "no removed DRM devices for this address";
}

static const char *cmd_change(Testbed *t, const char *pci) {
        size_t n = 0;

        for (size_t i = 0; i < t->n_blocks; i++) {
                g_autofree char *sys = NULL;

                if (!block_is_drm_of(&t->blocks[i], pci) || !sysfs_exists(t, t->blocks[i].devpath))
                        continue;
                sys = g_strconcat("/sys", t->blocks[i].devpath, NULL);
                umockdev_testbed_uevent(t->tb, sys, "change");
                n++;
        }
        return n > 0 ? NULL : "no DRM devices present for this address";
}

static void reply(const char *error) {
        if (error)
                printf("error: %s\n", error);
        else
                printf("ok\n");
        fflush(stdout);
}

static int load_layout(Testbed *t, const char *layout) {
        g_autoptr(GError) error = NULL;
        g_autofree char *path = NULL, *contents = NULL;
        int r;

        if (strchr(layout, '/'))
                path = g_strdup(layout);
        else
                path = g_strdup_printf("%s/%s.umockdev",
                                       g_getenv("KGPU_TESTBED_DATA_DIR") ?: KGPU_TESTBED_DATA_DIR, layout);
        if (!g_file_get_contents(path, &contents, NULL, &error)) {
                fprintf(stderr, "kgpu-testbed: cannot read layout %s: %s\n", path, error->message);
                return -ENOENT;
        }
        r = testbed_parse(t, contents);
        if (r < 0) {
                fprintf(stderr, "kgpu-testbed: %s: malformed layout (%s)\n", path, strerror(-r));
                return r;
        }
        for (size_t i = 0; i < t->n_blocks; i++)
                if (!umockdev_testbed_add_from_string(t->tb, t->blocks[i].text, &error)) {
                        fprintf(stderr, "kgpu-testbed: %s: %s: %s\n", path, t->blocks[i].devpath,
                                error->message);
                        return -EINVAL;
                }
        return 0;
}

/* umockdev's uevent sender resolves devices with libudev in this process, and libudev
 * refuses syspaths outside /sys unless the preload library maps /sys to the testbed. So
 * the tool runs itself under libumockdev-preload, like umockdev-wrapper would. */
static int reexec_under_preload(char *argv[]) {
        const char *old = getenv("LD_PRELOAD");
        g_autofree char *value = NULL, *asan = NULL;

        /* umockdev_in_mock_environment() only says yes once UMOCKDEV_DIR is set. */
        if (old && strstr(old, "libumockdev-preload"))
                return 0;
        if (getenv("KGPU_TESTBED_REEXECED"))
                return -ELOOP;
        value = isempty_str(old) ? g_strdup(PRELOAD) : g_strconcat(PRELOAD, " ", old, NULL);
        /* ASan builds insist on coming first in the library list; let them accept the
         * preload (ignored by non-ASan builds). */
        asan = isempty_str(getenv("ASAN_OPTIONS")) ? g_strdup("verify_asan_link_order=0")
                                                   : g_strconcat(getenv("ASAN_OPTIONS"), ":verify_asan_link_order=0", NULL);
        if (setenv("LD_PRELOAD", value, 1) < 0 || setenv("KGPU_TESTBED_REEXECED", "1", 1) < 0 ||
            setenv("ASAN_OPTIONS", asan, 1) < 0)
                return -errno;
        execv("/proc/self/exe", argv);
        return -errno;
}

static volatile sig_atomic_t terminate = 0;

static void on_terminate(int sig) {
        terminate = 1;
}

/* SIGTERM/SIGINT/SIGHUP interrupt the blocking read (no SA_RESTART), so the testbed
 * directory is still removed when a test runner kills the tool. */
static int install_signal_handlers(void) {
        struct sigaction sa = { .sa_handler = on_terminate };

        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0 ||
            sigaction(SIGHUP, &sa, NULL) < 0)
                return -errno;
        return 0;
}

static void help(void) {
        printf("kgpu-testbed [--layout] NAME|FILE\n\n"
               "Builds an umockdev testbed, prints UMOCKDEV_DIR=<dir> and 'ready', then reads\n"
               "'remove PCI', 'add PCI', 'change PCI' and 'quit' lines on stdin.\n"
               "Layouts: %s/<NAME>.umockdev (KGPU_TESTBED_DATA_DIR overrides).\n",
               KGPU_TESTBED_DATA_DIR);
}

int main(int argc, char *argv[]) {
        static const struct option options[] = {
                { "help",   no_argument,       NULL, 'h' },
                { "layout", required_argument, NULL, 'l' },
                {}
        };
        Testbed t = {};
        const char *layout = NULL;
        g_autofree char *root = NULL;
        char line[LINE_MAX_LEN];
        int c, r, ret = EXIT_FAILURE;

        while ((c = getopt_long(argc, argv, "hl:", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return EXIT_SUCCESS;
                case 'l':
                        layout = optarg;
                        break;
                default:
                        return EXIT_FAILURE;
                }
        if (!layout && optind < argc)
                layout = argv[optind++];
        if (!layout)
                layout = "two-gpus";

        r = reexec_under_preload(argv);
        if (r < 0) {
                fprintf(stderr, "kgpu-testbed: cannot re-execute under %s: %s\n", PRELOAD, strerror(-r));
                return EXIT_FAILURE;
        }

        r = install_signal_handlers();
        if (r < 0) {
                fprintf(stderr, "kgpu-testbed: cannot install signal handlers: %s\n", strerror(-r));
                return EXIT_FAILURE;
        }

        t.tb = umockdev_testbed_new();
        if (!t.tb) {
                fprintf(stderr, "kgpu-testbed: cannot create testbed\n");
                return EXIT_FAILURE;
        }
        if (load_layout(&t, layout) < 0)
                goto out;

        root = umockdev_testbed_get_root_dir(t.tb);
        printf("UMOCKDEV_DIR=%s\nready\n", root);
        fflush(stdout);

        while (!terminate && fgets(line, sizeof(line), stdin)) {
                char *arg;

                if (!strchr(line, '\n') && !feof(stdin)) {
                        /* Overlong line: swallow the rest, answer once. */
                        int ch;

                        while ((ch = getchar()) != EOF && ch != '\n')
                                ;
                        reply("line too long");
                        continue;
                }
                g_strstrip(line);
                if (line[0] == 0)
                        continue;
                arg = strchr(line, ' ');
                if (arg) {
                        *arg++ = 0;
                        while (*arg == ' ')
                                arg++;
                }

                if (strcmp(line, "quit") == 0) {
                        reply(NULL);
                        break;
                }
                if (!arg || !*arg || strchr(arg, '/') || strchr(arg, ' ')) {
                        reply("expected: remove|add|change <pci-address>");
                        continue;
                }
                if (strcmp(line, "remove") == 0)
                        reply(cmd_remove(&t, arg));
                else if (strcmp(line, "add") == 0)
                        reply(cmd_add(&t, arg));
                else if (strcmp(line, "change") == 0)
                        reply(cmd_change(&t, arg));
                else
                        reply("unknown command");
        }
        ret = EXIT_SUCCESS;
out:
        testbed_done(&t);
        return ret;
}
