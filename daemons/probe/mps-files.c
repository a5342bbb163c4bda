/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mps-files.c — the MPS directories of a GPU and the records kgpu keeps in them (the compute mode to restore, the limits in force) (see mps.h, mps-internal.h).
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/mps-internal.h"

static int mkdir_mode(const char *path) {
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
                return -errno;
        /* Whatever the umask was: containers must reach the socket. */
        if (chmod(path, 0755) < 0)
                return -errno;
        return 0;
}

int mps_entry_make_dirs(Entry *e) {
        _cleanup_free_ char *p = strdup(e->mps->directory);
        int r;

        if (!p)
                return -ENOMEM;
        /* Parents of the mps directory as needed, then the mps directory itself. */
        for (char *s = p + 1; *s; s++) {
                if (*s != '/')
                        continue;
                *s = 0;
                if (mkdir(p, 0755) < 0 && errno != EEXIST)
                        return -errno;
                *s = '/';
        }
        if ((r = mkdir_mode(e->mps->directory)) < 0 ||
            (r = mkdir_mode(e->base_dir)) < 0 ||
            (r = mkdir_mode(e->pipe_dir)) < 0 ||
            (r = mkdir_mode(e->log_dir)) < 0)
                return r;
        return 0;
}

/* Removes everything below the directory fd (closed here), never following a symlink:
 * a subdirectory is opened O_NOFOLLOW relative to its parent and emptied first. Depth is
 * bounded; what is deeper stays. Returns the first error, after trying everything. */
static int remove_below(int fd, unsigned depth) {
        struct dirent *de;
        DIR *d;
        int r = 0;

        d = fdopendir(fd);
        if (!d) {
                r = -errno;
                safe_close(fd);
                return r;
        }
        while ((de = readdir(d))) {
                int k = 0;

                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                if (unlinkat(dirfd(d), de->d_name, 0) >= 0 || errno == ENOENT)
                        continue;
                if (errno != EISDIR)
                        k = -errno;
                else if (depth >= MPS_REMOVE_DEPTH_MAX)
                        k = -ELOOP;
                else {
                        int sub = openat(dirfd(d), de->d_name, O_RDONLY|O_DIRECTORY|O_CLOEXEC|O_NOFOLLOW);

                        k = sub < 0 ? -errno : remove_below(sub, depth + 1);
                        if (unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT && k >= 0)
                                k = -errno;
                }
                if (k < 0 && r >= 0)
                        r = k;
        }
        closedir(d);
        return r;
}

/* Removes dir and everything in it (a symlink is removed, never followed). */
static int remove_tree(const char *dir) {
        int fd, r;

        fd = open(dir, O_RDONLY|O_DIRECTORY|O_CLOEXEC|O_NOFOLLOW);
        if (fd < 0)
                return errno == ENOENT ? 0 : -errno;
        r = remove_below(fd, 0);
        if (rmdir(dir) < 0 && errno != ENOENT && r >= 0)
                r = -errno;
        return r;
}

/* Best effort: a disable that has stopped the daemon and restored the compute mode has
 * done what matters. The pipe directory was mounted into pods (read-only, but a future
 * runtime or a privileged pod may differ), so whatever is left there is logged, not
 * turned into a failure that would mark the GPU unhealthy. */
void mps_entry_remove_dirs(Entry *e) {
        int r;

        r = remove_tree(e->base_dir);
        if (r < 0)
                log_warning_errno(r, "MPS of GPU %s is off, but %s could not be removed completely, leaving it: %m",
                                  e->uuid, e->base_dir);
}

const char *mps_compute_mode_argument(NvidiaComputeMode mode) {
        switch (mode) {
        case NVIDIA_COMPUTE_MODE_EXCLUSIVE_THREAD:  return "EXCLUSIVE_THREAD";
        case NVIDIA_COMPUTE_MODE_PROHIBITED:        return "PROHIBITED";
        case NVIDIA_COMPUTE_MODE_EXCLUSIVE_PROCESS: return "EXCLUSIVE_PROCESS";
        default:                                    return "DEFAULT";
        }
}

/* The compute mode found before MPS, kept in <base dir>/compute-mode until MPS is off
 * again (so a probe restart in between still restores it); DEFAULT when there is no
 * valid record (a daemon an earlier probe version started, which restored Default). */
NvidiaComputeMode mps_entry_load_compute_mode(Entry *e, bool *ret_found) {
        _cleanup_free_ char *p = NULL, *line = NULL;
        NvidiaComputeMode mode;

        if (ret_found)
                *ret_found = false;
        if (mps_asprintf_safe(&p, "%s/%s", e->base_dir, MPS_MODE_FILE) < 0 ||
            read_one_line_file_at(AT_FDCWD, p, 32, &line) < 0 ||
            nvidia_compute_mode_from_string(line, &mode) < 0 || mode == NVIDIA_COMPUTE_MODE_UNKNOWN)
                return NVIDIA_COMPUTE_MODE_DEFAULT;
        if (ret_found)
                *ret_found = true;
        return mode;
}

/* Records the mode to restore, in a directory only root can write (not the pipe
 * directory pods see). Makes the GPU's directory first. */
int mps_entry_save_compute_mode(Entry *e, NvidiaComputeMode mode) {
        _cleanup_free_ char *p = NULL, *text = NULL;

        if (mps_asprintf_safe(&p, "%s/%s", e->base_dir, MPS_MODE_FILE) < 0 ||
            mps_asprintf_safe(&text, "%s\n", mps_compute_mode_argument(mode)) < 0)
                return -ENOMEM;
        return write_file_atomic_at(AT_FDCWD, p, text, strlen(text), 0644);
}

/* The daemon's pid from the pid file it keeps in its pipe directory, 0 if unreadable. */
static pid_t entry_daemon_pid(Entry *e) {
        _cleanup_free_ char *p = NULL, *line = NULL;
        uint32_t v;

        if (mps_asprintf_safe(&p, "%s/%s", e->pipe_dir, MPS_PID_FILE) < 0 ||
            read_one_line_file_at(AT_FDCWD, p, 32, &line) < 0 ||
            safe_atou32(line, &v) < 0 || v == 0 || v > INT32_MAX)
                return 0;
        return (pid_t) v;
}

/* Remembers the limits sent to the daemon now running, for a later probe's adoption. */
void mps_entry_save_limits(Entry *e) {
        _cleanup_free_ char *p = NULL, *text = NULL;
        pid_t pid = entry_daemon_pid(e);
        int r;

        if (mps_asprintf_safe(&p, "%s/%s", e->base_dir, MPS_LIMITS_FILE) < 0)
                return;
        if (pid <= 0) {
                (void) unlink(p);
                return;
        }
        if (mps_asprintf_safe(&text, "%d %" PRIu64 " %" PRIu32 "\n", (int) pid, e->pinned_mib, e->pct) < 0)
                return;
        r = write_file_atomic_at(AT_FDCWD, p, text, strlen(text), 0644);
        if (r < 0)
                log_debug_errno(r, "Failed to write %s, ignoring: %m", p);
}

/* The limits an earlier probe sent to the daemon that runs now (same pid), or 0/0. */
void mps_entry_load_limits(Entry *e) {
        _cleanup_free_ char *p = NULL, *line = NULL;
        unsigned long long mib = 0;
        unsigned pct = 0;
        int pid = 0;

        e->pinned_mib = 0;
        e->pct = 0;
        if (mps_asprintf_safe(&p, "%s/%s", e->base_dir, MPS_LIMITS_FILE) < 0 ||
            read_one_line_file_at(AT_FDCWD, p, 128, &line) < 0 ||
            sscanf(line, "%d %llu %u", &pid, &mib, &pct) != 3)
                return;
        if (pid <= 0 || pid != entry_daemon_pid(e) || mib == 0 || pct < 1 || pct > 100)
                return;
        e->pinned_mib = mib;
        e->pct = pct;
}

/* environ without the MPS variables, plus ours for this GPU. */
