/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-runner.c — one NVIDIA tool invocation on sd-event (see nvidia-runner.h).
 *
 * The child is watched with an sd-event child source (pidfd based where the kernel has
 * it) that owns the process, so freeing the run kills and reaps it. Output is read as
 * it comes; once the child is reaped, whatever is left in the pipes is drained without
 * waiting for EOF (a daemonising tool such as `nvidia-cuda-mps-control -d` may leave a
 * grandchild holding them) and the callback runs.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "daemons/probe/nvidia-runner.h"

extern char **environ;

typedef struct RunBuffer {
        char *data;
        size_t len;
        int fd;
        sd_event_source *source;
} RunBuffer;

struct NvidiaRun {
        sd_event *event;
        pid_t pid;
        sd_event_source *child_source;
        sd_event_source *timer_source;
        RunBuffer out, err;

        int in_fd;
        sd_event_source *in_source;
        char *in_data;
        size_t in_len, in_off;

        size_t output_max;
        uint64_t start_usec;
        bool exited, done, timed_out, truncated;
        int exit_status, signal;

        NvidiaRunCallback callback;
        void *userdata;
};

static void run_buffer_close(RunBuffer *b) {
        b->source = sd_event_source_disable_unref(b->source);
        b->fd = safe_close(b->fd);
}

static void run_stdin_close(NvidiaRun *run) {
        run->in_source = sd_event_source_disable_unref(run->in_source);
        run->in_fd = safe_close(run->in_fd);
}

NvidiaRun *nvidia_run_free(NvidiaRun *run) {
        if (!run)
                return NULL;
        /* The child source owns the process: unref kills (SIGKILL) and reaps it. */
        run->child_source = sd_event_source_disable_unref(run->child_source);
        run->timer_source = sd_event_source_disable_unref(run->timer_source);
        run_buffer_close(&run->out);
        run_buffer_close(&run->err);
        run_stdin_close(run);
        free(run->out.data);
        free(run->err.data);
        free(run->in_data);
        sd_event_unref(run->event);
        return mfree(run);
}

int nvidia_run_get_pid(const NvidiaRun *run) {
        return run && !run->exited ? run->pid : 0;
}

static void run_kill(NvidiaRun *run) {
        /* Not reaped yet (the child source does that), so the pid cannot be reused. */
        if (!run->exited && run->pid > 0)
                (void) kill(run->pid, SIGKILL);
}

/* Reads what is available; returns 1 on EOF, 0 when it would block, <0 on error. */
static int run_buffer_read(NvidiaRun *run, RunBuffer *b) {
        for (;;) {
                char chunk[16384];
                ssize_t n;
                size_t room, take;

                if (b->fd < 0)
                        return 1;
                n = read(b->fd, chunk, sizeof(chunk));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return 0;
                        return -errno;
                }
                if (n == 0)
                        return 1;

                room = run->output_max - b->len;
                take = MIN((size_t) n, room);
                if (take > 0) {
                        memcpy(b->data + b->len, chunk, take);
                        b->len += take;
                        b->data[b->len] = 0;
                }
                if ((size_t) n > room) {
                        run->truncated = true;
                        run_kill(run);
                        return 1;
                }
        }
}

static void run_finish(NvidiaRun *run) {
        NvidiaRunResult result;
        int error;

        if (run->done)
                return;
        run->done = true;

        (void) run_buffer_read(run, &run->out);
        (void) run_buffer_read(run, &run->err);
        run_buffer_close(&run->out);
        run_buffer_close(&run->err);
        run_stdin_close(run);
        run->timer_source = sd_event_source_disable_unref(run->timer_source);

        result = (NvidiaRunResult) {
                .exit_status = run->exit_status,
                .signal = run->signal,
                .timed_out = run->timed_out,
                .truncated = run->truncated,
                .out = run->out.data,
                .out_len = run->out.len,
                .err = run->err.data,
                .err_len = run->err.len,
                .duration_usec = now_usec(CLOCK_MONOTONIC) - run->start_usec,
        };
        error = run->timed_out ? -ETIME : run->truncated ? -EMSGSIZE : 0;
        /* Last thing: the callback may free the run. */
        run->callback(run, error, &result, run->userdata);
}

static int on_output(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        NvidiaRun *run = userdata;
        RunBuffer *b = fd == run->out.fd ? &run->out : &run->err;
        int r;

        r = run_buffer_read(run, b);
        if (r != 0 && run->truncated)
                /* Keep the pipe open: the child dies of our SIGKILL, not of a SIGPIPE. */
                (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
        else if (r != 0)
                run_buffer_close(b);
        return 0;
}

static int on_stdin(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        NvidiaRun *run = userdata;

        while (run->in_off < run->in_len) {
                ssize_t n = write(run->in_fd, run->in_data + run->in_off, run->in_len - run->in_off);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return 0;
                        break;  /* EPIPE: the child does not read its input; it tells us how it ends */
                }
                run->in_off += (size_t) n;
        }
        run_stdin_close(run);
        return 0;
}

static int on_child(sd_event_source *s, const siginfo_t *si, void *userdata) {
        NvidiaRun *run = userdata;

        run->exited = true;
        if (si->si_code == CLD_EXITED) {
                run->exit_status = si->si_status;
                run->signal = 0;
        } else {
                run->exit_status = -1;
                run->signal = si->si_status;
        }
        run_finish(run);
        return 0;
}

static int on_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        NvidiaRun *run = userdata;

        run->timed_out = true;
        run_kill(run);
        return 0;
}

/* sd-event can only watch children with SIGCHLD blocked; a write to a pipe whose reader
 * died must be an EPIPE, not a fatal signal. */
static int run_prepare_signals(void) {
        struct sigaction sa;
        sigset_t ss;

        if (sigemptyset(&ss) < 0 || sigaddset(&ss, SIGCHLD) < 0 || sigprocmask(SIG_BLOCK, &ss, NULL) < 0)
                return -errno;
        if (sigaction(SIGPIPE, NULL, &sa) < 0)
                return -errno;
        if (sa.sa_handler == SIG_DFL && !(sa.sa_flags & SA_SIGINFO)) {
                sa = (struct sigaction) { .sa_handler = SIG_IGN };
                if (sigaction(SIGPIPE, &sa, NULL) < 0)
                        return -errno;
        }
        return 0;
}

static int run_new(sd_event *event, size_t output_max, NvidiaRunCallback callback, void *userdata,
                   NvidiaRun **ret) {
        _cleanup_(nvidia_run_freep) NvidiaRun *run = NULL;

        run = calloc(1, sizeof(NvidiaRun));
        if (!run)
                return -ENOMEM;
        *run = (NvidiaRun) {
                .event = sd_event_ref(event),
                .out.fd = -EBADF,
                .err.fd = -EBADF,
                .in_fd = -EBADF,
                .output_max = output_max,
                .callback = callback,
                .userdata = userdata,
                .exit_status = -1,
        };
        run->out.data = malloc(output_max + 1);
        run->err.data = malloc(output_max + 1);
        if (!run->out.data || !run->err.data)
                return -ENOMEM;
        run->out.data[0] = run->err.data[0] = 0;
        *ret = TAKE_PTR(run);
        return 0;
}

/* Our ends non-blocking in run, the child's (blocking) in the ret_* fds; stdin only
 * with data to send. */
static int run_open_pipes(NvidiaRun *run, const NvidiaRunOptions *o, int *ret_out_w, int *ret_err_w,
                          int *ret_in_r) {
        _cleanup_close_ int out_w = -EBADF, err_w = -EBADF, in_r = -EBADF;
        int fds[2];

        if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0)
                return -errno;
        run->out.fd = fds[0];
        out_w = fds[1];
        if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0)
                return -errno;
        run->err.fd = fds[0];
        err_w = fds[1];
        if (o->stdin_len > 0) {
                run->in_data = malloc(o->stdin_len);
                if (!run->in_data)
                        return -ENOMEM;
                memcpy(run->in_data, o->stdin_data, o->stdin_len);
                run->in_len = o->stdin_len;
                if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0)
                        return -errno;
                in_r = fds[0];
                run->in_fd = fds[1];
                /* The child gets a blocking stdin. */
                if (fcntl(in_r, F_SETFL, 0) < 0)
                        return -errno;
        }
        /* The write ends are blocking for the child too. */
        if (fcntl(out_w, F_SETFL, 0) < 0 || fcntl(err_w, F_SETFL, 0) < 0)
                return -errno;
        *ret_out_w = TAKE_FD(out_w);
        *ret_err_w = TAKE_FD(err_w);
        *ret_in_r = TAKE_FD(in_r);
        return 0;
}

/* The child: default signal dispositions, nothing blocked, stdin from in_r (or
 * /dev/null), stdout and stderr into the pipes. Returns a positive errno on failure
 * (posix_spawn's convention). */
static int run_spawn(NvidiaRun *run, const char *path, char * const *argv, char * const *env,
                     int in_r, int out_w, int err_w) {
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        pid_t pid;
        int r;

        r = posix_spawn_file_actions_init(&fa);
        if (r != 0)
                return r;
        r = posix_spawnattr_init(&attr);
        if (r != 0) {
                posix_spawn_file_actions_destroy(&fa);
                return r;
        }
        {
                sigset_t none, all;

                sigemptyset(&none);
                sigfillset(&all);
                r = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
                if (r == 0)
                        r = posix_spawnattr_setsigmask(&attr, &none);
                if (r == 0)
                        r = posix_spawnattr_setsigdefault(&attr, &all);
        }
        if (r == 0)
                r = in_r >= 0 ? posix_spawn_file_actions_adddup2(&fa, in_r, STDIN_FILENO)
                              : posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
        if (r == 0)
                r = posix_spawn_file_actions_adddup2(&fa, out_w, STDOUT_FILENO);
        if (r == 0)
                r = posix_spawn_file_actions_adddup2(&fa, err_w, STDERR_FILENO);
        if (r == 0) {
                run->start_usec = now_usec(CLOCK_MONOTONIC);
                r = posix_spawn(&pid, path, &fa, &attr, argv, env);
        }
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&attr);
        if (r != 0)
                return r;
        run->pid = pid;
        return 0;
}

/* The event sources of a started child: its exit, its output, its stdin, the timeout. */
static int run_watch(NvidiaRun *run, sd_event *event, uint64_t timeout_usec) {
        int r;

        r = sd_event_add_child(event, &run->child_source, run->pid, WEXITED, on_child, run);
        if (r < 0) {
                (void) kill(run->pid, SIGKILL);
                (void) waitpid(run->pid, NULL, 0);
                return r;
        }
        r = sd_event_source_set_child_process_own(run->child_source, true);
        if (r < 0)
                return r;
        /* Drain output before handling the exit. */
        r = sd_event_source_set_priority(run->child_source, SD_EVENT_PRIORITY_NORMAL + 10);
        if (r < 0)
                return r;

        r = sd_event_add_io(event, &run->out.source, run->out.fd, EPOLLIN, on_output, run);
        if (r < 0)
                return r;
        r = sd_event_add_io(event, &run->err.source, run->err.fd, EPOLLIN, on_output, run);
        if (r < 0)
                return r;
        if (run->in_fd >= 0) {
                r = sd_event_add_io(event, &run->in_source, run->in_fd, EPOLLOUT, on_stdin, run);
                if (r < 0)
                        return r;
        }
        return sd_event_add_time_relative(event, &run->timer_source, CLOCK_MONOTONIC, timeout_usec, 0,
                                          on_timeout, run);
}

int nvidia_run_start(sd_event *event, const char *path, char * const *argv, const NvidiaRunOptions *opts,
                     NvidiaRunCallback callback, void *userdata, NvidiaRun **ret) {
        _cleanup_(nvidia_run_freep) NvidiaRun *run = NULL;
        _cleanup_close_ int out_w = -EBADF, err_w = -EBADF, in_r = -EBADF;
        NvidiaRunOptions o = opts ? *opts : (NvidiaRunOptions) {};
        size_t argc;
        int r;

        if (!event || !callback || !ret || isempty(path) || path[0] != '/' || !argv || !argv[0])
                return -EINVAL;
        argc = strv_length((char **) argv);
        if (argc > NVIDIA_RUN_ARGV_MAX)
                return -E2BIG;
        if (o.stdin_len > NVIDIA_RUN_STDIN_MAX || (o.stdin_len > 0 && !o.stdin_data))
                return -EINVAL;
        if (o.timeout_usec == 0)
                o.timeout_usec = NVIDIA_RUN_TIMEOUT_USEC_DEFAULT;
        if (o.output_max == 0)
                o.output_max = NVIDIA_RUN_OUTPUT_MAX_DEFAULT;
        if (o.output_max > 64U * 1024U * 1024U)
                return -EINVAL;

        r = run_prepare_signals();
        if (r < 0)
                return r;
        r = run_new(event, o.output_max, callback, userdata, &run);
        if (r < 0)
                return r;
        r = run_open_pipes(run, &o, &out_w, &err_w, &in_r);
        if (r < 0)
                return r;
        r = run_spawn(run, path, argv, o.env ? o.env : environ, in_r, out_w, err_w);
        if (r != 0)
                return -r;
        out_w = safe_close(out_w);
        err_w = safe_close(err_w);
        in_r = safe_close(in_r);
        r = run_watch(run, event, o.timeout_usec);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(run);
        return 0;
}

static int untrusted(char **ret_reason, const char *fmt, ...) _printf_(2, 3);
static int untrusted(char **ret_reason, const char *fmt, ...) {
        va_list ap;

        if (!ret_reason)
                return -EPERM;
        free(*ret_reason);
        va_start(ap, fmt);
        if (vasprintf(ret_reason, fmt, ap) < 0)
                *ret_reason = NULL;
        va_end(ap);
        return -EPERM;
}

/* Who may change what is at this inode: root or this process's own user only. A
 * directory writable by others is acceptable with the sticky bit (nobody else can
 * remove or replace the entries root or we own there, /tmp). */
static int check_inode(const char *where, const struct stat *st, char **ret_reason) {
        uid_t me = geteuid();

        if (st->st_uid != 0 && st->st_uid != me)
                return untrusted(ret_reason, "%s is owned by uid %u, not root", where, (unsigned) st->st_uid);
        if ((st->st_mode & (S_IWGRP|S_IWOTH)) && !(S_ISDIR(st->st_mode) && (st->st_mode & S_ISVTX)))
                return untrusted(ret_reason, "%s is writable by group or others (mode %04o)", where,
                                 (unsigned) (st->st_mode & 07777));
        return 0;
}

int nvidia_path_check_trusted(const char *path, bool want_dir, char **ret_reason) {
        _cleanup_free_ char *todo = NULL, *where = NULL;
        _cleanup_close_ int fd = -EBADF;
        unsigned links = 0;
        struct stat st;
        int r;

        if (isempty(path) || path[0] != '/' || strlen(path) >= PATH_MAX)
                return -EINVAL;
        todo = strdup(path);
        where = malloc(PATH_MAX);
        if (!todo || !where)
                return -ENOMEM;
        where[0] = 0;
        fd = open("/", O_PATH|O_DIRECTORY|O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0)
                return -errno;
        r = check_inode("/", &st, ret_reason);
        if (r < 0)
                return r;

        for (;;) {
                char *c = todo, *rest;

                while (*c == '/')
                        c++;
                if (!*c)
                        /* "/" itself, or a path ending in "/" after a directory. */
                        return want_dir ? 0 : -EISDIR;
                rest = strchr(c, '/');
                if (rest)
                        *rest++ = 0;
                while (rest && *rest == '/')
                        rest++;
                if (rest && !*rest)
                        rest = NULL;

                if (streq(c, ".")) {
                        /* nothing */
                } else if (streq(c, "..")) {
                        /* Back into a directory already checked on the way here. */
                        char *slash = strrchr(where, '/');
                        int p = openat(fd, "..", O_PATH|O_DIRECTORY|O_CLOEXEC);

                        if (p < 0)
                                return -errno;
                        safe_close(fd);
                        fd = p;
                        if (slash)
                                *slash = 0;
                } else {
                        if (strlen(where) + 1 + strlen(c) >= PATH_MAX)
                                return -ENAMETOOLONG;
                        strcat(where, "/");
                        strcat(where, c);
                        if (fstatat(fd, c, &st, AT_SYMLINK_NOFOLLOW) < 0)
                                return -errno;
                        if (S_ISLNK(st.st_mode)) {
                                /* Only who may write the directory holding it could change it:
                                 * checked. Go on with its target, then the rest. */
                                char target[PATH_MAX];
                                ssize_t k;
                                char *next;

                                if (++links > 32)
                                        return -ELOOP;
                                k = readlinkat(fd, c, target, sizeof(target) - 1);
                                if (k < 0)
                                        return -errno;
                                target[k] = 0;
                                if (asprintf(&next, "%s/%s", target, rest ?: "") < 0)
                                        return -ENOMEM;
                                if (target[0] == '/') {
                                        safe_close(fd);
                                        fd = open("/", O_PATH|O_DIRECTORY|O_CLOEXEC);
                                        if (fd < 0)
                                                return -errno;
                                        where[0] = 0;
                                } else
                                        *strrchr(where, '/') = 0;
                                free(todo);
                                todo = next;
                                continue;
                        }
                        if (!rest) {
                                if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
                                        return untrusted(ret_reason, "%s is not a %s", where,
                                                         want_dir ? "directory" : "regular file");
                                return check_inode(where, &st, ret_reason);
                        }
                        {
                                int d = openat(fd, c, O_PATH|O_DIRECTORY|O_NOFOLLOW|O_CLOEXEC);

                                if (d < 0)
                                        return -errno;
                                safe_close(fd);
                                fd = d;
                        }
                        if (fstat(fd, &st) < 0)
                                return -errno;
                        r = check_inode(where, &st, ret_reason);
                        if (r < 0)
                                return r;
                }
                if (!rest)
                        return want_dir ? 0 : -EISDIR;
                memmove(todo, rest, strlen(rest) + 1);
        }
}

int nvidia_tool_find(const char *driver_root, const char *configured, const char *name, char **ret,
                     char **ret_reason) {
        static const char *const dirs[] = {
                "/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/nvidia/bin",
        };
        const char *root;
        int r;

        if (!ret)
                return -EINVAL;
        if (!isempty(configured)) {
                char *p;

                if (configured[0] != '/')
                        return -EINVAL;
                r = nvidia_path_check_trusted(configured, false, ret_reason);
                if (r < 0)
                        return r;
                if (access(configured, X_OK) < 0)
                        return -errno;
                p = strdup(configured);
                if (!p)
                        return -ENOMEM;
                *ret = p;
                return 0;
        }
        if (isempty(name) || strchr(name, '/') || strlen(name) > 255)
                return -EINVAL;
        root = isempty(driver_root) || streq(driver_root, "/") ? "" : driver_root;
        if (root[0] && root[0] != '/')
                return -EINVAL;
        r = nvidia_path_check_trusted(root[0] ? root : "/", true, ret_reason);
        if (r < 0)
                return r;

        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                _cleanup_free_ char *p = NULL;

                if (asprintf(&p, "%s%s/%s", root, dirs[i], name) < 0)
                        return -ENOMEM;
                if (access(p, X_OK) < 0)
                        continue;
                /* The first one found is the one that would run: refused, never skipped. */
                r = nvidia_path_check_trusted(p, false, ret_reason);
                if (r < 0)
                        return r;
                *ret = TAKE_PTR(p);
                return 0;
        }
        return -ENOENT;
}
