/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kgpuctl-labels.c — "kgpuctl labels": the node labels kgpu-probed published for NFD.
 *
 * Contract: reads the NFD local feature file named by the configuration key
 * labels.featureFile (default /etc/kubernetes/node-feature-discovery/features.d/kgpu;
 * kgpuctl --config=FILE or KGPU_LABELS_FEATURE_FILE pick another) and prints its
 * "name=value" lines as a table, or a JSON object with --json. '#' lines (NFD
 * directives such as expiry time) are skipped. The file is bounded (LABELS_FILE_MAX)
 * and every line must hold a '=' after a non-empty name; anything else is a clear
 * error naming the file and line. A missing file or an empty key says that the probe
 * has published no labels.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/config.h"
#include "common/util.h"
#include "tools/kgpuctl.h"

#define LABELS_FILE_MAX (1024 * 1024)

typedef struct Label {
        const char *name;
        const char *value;
} Label;

static int read_bounded(const char *path, char **ret) {
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        int r;

        fd = open(path, O_RDONLY|O_CLOEXEC|O_NOCTTY);
        if (fd < 0)
                return -errno;
        r = read_fd_bounded(fd, LABELS_FILE_MAX, &buf, &len);
        if (r < 0)
                return r;
        if (strlen(buf) != len)
                return -EBADMSG;        /* NUL bytes */
        *ret = TAKE_PTR(buf);
        return 0;
}

int ctl_labels(Ctl *c, int argc, char **argv) {
        _cleanup_free_ char *text = NULL;
        _cleanup_free_ Label *labels = NULL;
        const char *path;
        unsigned n = 0, lineno = 0;
        int r;

        if (argc > 1) {
                fprintf(stderr, "labels takes no arguments.\n");
                return -EINVAL;
        }
        r = ctl_load_config(c);
        if (r < 0)
                return r;
        path = c->config->labels_feature_file;
        if (isempty(path)) {
                fprintf(stderr, "No feature file configured (labels.featureFile is empty): kgpu-probed "
                        "publishes no labels.\n");
                return -ENOENT;
        }
        r = read_bounded(path, &text);
        if (r == -ENOENT) {
                fprintf(stderr, "No labels: %s does not exist (is kgpu-probed running?).\n", path);
                return r;
        }
        if (r == -EFBIG || r == -EBADMSG) {
                fprintf(stderr, "Cannot read %s: %s.\n", path,
                        r == -EFBIG ? "larger than 1 MiB" : "contains NUL bytes");
                return r;
        }
        if (r < 0) {
                fprintf(stderr, "Cannot read %s: %s\n", path, strerror(-r));
                return r;
        }

        /* Validate every line before printing anything: no partial output on error. */
        labels = calloc(strlen(text) / 2 + 1, sizeof(Label));     /* a label takes >= 2 bytes */
        if (!labels)
                return -ENOMEM;
        for (char *line = text, *next; line && *line; line = next) {
                char *eq;

                next = strchr(line, '\n');
                if (next)
                        *next++ = 0;
                lineno++;
                if (line[0] == '#' || line[strspn(line, " \t\r")] == 0)
                        continue;
                eq = strchr(line, '=');
                if (!eq || eq == line) {
                        fprintf(stderr, "%s:%u: expected name=value, got '%.64s'.\n", path, lineno, line);
                        return -EBADMSG;
                }
                *eq = 0;
                labels[n].name = line;
                labels[n].value = eq + 1;
                n++;
        }

        if (c->json)
                printf("{");
        else if (n > 0)
                printf("%-50s %s\n", "LABEL", "VALUE");
        for (unsigned i = 0; i < n; i++) {
                if (c->json) {
                        printf("%s", i ? "," : "");
                        ctl_json_string(labels[i].name);
                        printf(":");
                        ctl_json_string(labels[i].value);
                } else
                        printf("%-50s %s\n", labels[i].name, labels[i].value);
        }
        if (c->json)
                printf("}\n");
        else if (n == 0)
                printf("No labels in %s.\n", path);
        return 0;
}
