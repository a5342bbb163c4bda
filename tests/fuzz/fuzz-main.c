/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-main.c — replays fuzz inputs without libFuzzer, so the corpora run as unit tests.
 *
 * Contract: every argument is a file or a directory of files; each file is passed once
 * to LLVMFuzzerTestOneInput(). Exit 0 when all were replayed, 1 when one could not be
 * read, 77 (skip) when there was nothing to replay.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX_INPUT (4U * 1024U * 1024U)

static int replay_file(int dir_fd, const char *name) {
        uint8_t *buf;
        ssize_t n;
        int fd;

        fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        buf = malloc(REPLAY_MAX_INPUT);
        if (!buf) {
                close(fd);
                return -ENOMEM;
        }
        n = read(fd, buf, REPLAY_MAX_INPUT);
        close(fd);
        if (n < 0) {
                free(buf);
                return -EIO;
        }
        (void) LLVMFuzzerTestOneInput(buf, (size_t) n);
        free(buf);
        return 0;
}

int main(int argc, char *argv[]) {
        unsigned n = 0;

        for (int i = 1; i < argc; i++) {
                struct stat st;
                DIR *d;
                struct dirent *de;

                if (stat(argv[i], &st) < 0) {
                        fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
                        return 1;
                }
                if (!S_ISDIR(st.st_mode)) {
                        if (replay_file(AT_FDCWD, argv[i]) < 0)
                                return 1;
                        n++;
                        continue;
                }
                d = opendir(argv[i]);
                if (!d)
                        return 1;
                while ((de = readdir(d))) {
                        if (de->d_name[0] == '.')
                                continue;
                        if (replay_file(dirfd(d), de->d_name) < 0) {
                                fprintf(stderr, "%s/%s: cannot read\n", argv[i], de->d_name);
                                closedir(d);
                                return 1;
                        }
                        n++;
                }
                closedir(d);
        }
        printf("replayed %u inputs\n", n);
        return n > 0 ? 0 : 77;
}
