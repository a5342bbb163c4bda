/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kgpu-cdi-hook.c — the OCI hook that kgpu's NVIDIA CDI spec runs at createContainer
 * (daemons/probe/cdi-nvidia.h), in place of NVIDIA's nvidia-ctk/nvidia-cdi-hook, so no
 * NVIDIA toolkit is needed on the node. libc only, linked statically where the build
 * allows (it runs in the runtime's context, possibly from a minimal host image).
 *
 *   kgpu-cdi-hook create-symlinks --link TARGET::LINK [--link ...]
 *   kgpu-cdi-hook update-ldcache --folder DIR [--folder ...] [--ldconfig-path PATH]
 *
 * The container comes from the OCI state on stdin (JSON, at most 1 MiB): its "bundle",
 * whose config.json (at most 4 MiB) names the root file system ("root": {"path": ...},
 * relative to the bundle or absolute). Everything it touches is inside that root, every
 * path resolved in it as if it were "/" (common/inroot.h): no symlink of the image can
 * lead a write out of it.
 * - create-symlinks: LINK must be a plain absolute path (inroot_path_is_plain()), TARGET
 *   a non-empty string without control characters; missing parent directories are
 *   created (0755); an existing symlink is replaced (atomically), anything else at LINK
 *   is left alone with a warning.
 * - update-ldcache: writes /etc/ld.so.conf.d/00-kgpu-nvidia.conf (the folders, one a
 *   line) so the container's own ldconfig finds the libraries, then, when the image has
 *   an ldconfig (/sbin/ldconfig or /usr/sbin/ldconfig, as NVIDIA's hook checks), runs
 *   the host's (--ldconfig-path, default /sbin/ldconfig) as `ldconfig -r <root> DIR...`
 *   (ldconfig chroots into the root itself). Images without one (busybox, distroless)
 *   still get the symlinks of create-symlinks.
 * Exit status 0, or 1 with one line on stderr ("kgpu-cdi-hook: ...") per problem; bad
 * input never leaves anything half done outside the container.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/inroot.h"
#include "common/util.h"

#define STATE_MAX (1024U * 1024U)
#define CONFIG_MAX (4U * 1024U * 1024U)
#define JSON_DEPTH_MAX 64
#define ARGS_MAX 4096
#define LDCONF_FILE "00-kgpu-nvidia.conf"

static void warn(const char *fmt, ...) _printf_(1, 2);
static void warn(const char *fmt, ...) {
        va_list ap;

        fputs("kgpu-cdi-hook: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
}

/* --- a small JSON reader: finds the string at a path of object keys ---------------- */

typedef struct Json {
        const char *p, *end;
        int depth;
} Json;

static void json_ws(Json *j) {
        while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
                j->p++;
}

static int hexval(char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
               c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Reads a string (j->p at its '"'); *ret (may be NULL: skipped) gets it decoded. */
static int json_string(Json *j, char **ret) {
        _cleanup_free_ char *s = NULL;
        size_t n = 0, cap = 0;

        if (j->p >= j->end || *j->p != '"')
                return -EBADMSG;
        j->p++;
        for (;;) {
                char c, out[4];
                size_t k = 0;

                if (j->p >= j->end)
                        return -EBADMSG;
                c = *j->p++;
                if (c == '"')
                        break;
                if ((unsigned char) c < 0x20)
                        return -EBADMSG;
                if (c != '\\')
                        out[k++] = c;
                else {
                        if (j->p >= j->end)
                                return -EBADMSG;
                        c = *j->p++;
                        switch (c) {
                        case '"': case '\\': case '/': out[k++] = c; break;
                        case 'b': out[k++] = '\b'; break;
                        case 'f': out[k++] = '\f'; break;
                        case 'n': out[k++] = '\n'; break;
                        case 'r': out[k++] = '\r'; break;
                        case 't': out[k++] = '\t'; break;
                        case 'u': {
                                unsigned v = 0;

                                if (j->end - j->p < 4)
                                        return -EBADMSG;
                                for (int i = 0; i < 4; i++) {
                                        int h = hexval(j->p[i]);

                                        if (h < 0)
                                                return -EBADMSG;
                                        v = v * 16 + (unsigned) h;
                                }
                                j->p += 4;
                                /* No NUL, no surrogates: a path never needs them. */
                                if (v == 0 || (v >= 0xd800 && v <= 0xdfff))
                                        return -EBADMSG;
                                if (v < 0x80)
                                        out[k++] = (char) v;
                                else if (v < 0x800) {
                                        out[k++] = (char) (0xc0 | (v >> 6));
                                        out[k++] = (char) (0x80 | (v & 0x3f));
                                } else {
                                        out[k++] = (char) (0xe0 | (v >> 12));
                                        out[k++] = (char) (0x80 | ((v >> 6) & 0x3f));
                                        out[k++] = (char) (0x80 | (v & 0x3f));
                                }
                                break;
                        }
                        default:
                                return -EBADMSG;
                        }
                }
                if (!ret)
                        continue;
                if (n + k + 1 > cap) {
                        char *q;

                        cap = MAX(cap * 2, n + k + 64);
                        if (cap > PATH_MAX * 2)
                                return -ENAMETOOLONG;
                        q = realloc(s, cap);
                        if (!q)
                                return -ENOMEM;
                        s = q;
                }
                memcpy(s + n, out, k);
                n += k;
                s[n] = 0;
        }
        if (ret) {
                if (!s && !(s = strdup("")))
                        return -ENOMEM;
                *ret = TAKE_PTR(s);
        }
        return 0;
}

/* Skips one value, or, when keys[0] is set and the value is an object, looks for that
 * key in it and goes on with keys + 1; *ret gets the string found at the end. */
static int json_value(Json *j, const char * const *keys, char **ret) {
        int r;

        json_ws(j);
        if (j->p >= j->end)
                return -EBADMSG;
        if (*j->p == '"') {
                if (keys && !keys[0] && ret && !*ret)
                        return json_string(j, ret);
                return json_string(j, NULL);
        }
        if (*j->p == '{' || *j->p == '[') {
                bool object = *j->p == '{';
                char close = object ? '}' : ']';

                if (++j->depth > JSON_DEPTH_MAX)
                        return -EBADMSG;
                j->p++;
                json_ws(j);
                if (j->p < j->end && *j->p == close) {
                        j->p++;
                        j->depth--;
                        return 0;
                }
                for (;;) {
                        bool match = false;

                        if (object) {
                                _cleanup_free_ char *key = NULL;

                                json_ws(j);
                                r = json_string(j, &key);
                                if (r < 0)
                                        return r;
                                json_ws(j);
                                if (j->p >= j->end || *j->p != ':')
                                        return -EBADMSG;
                                j->p++;
                                match = keys && keys[0] && streq(key, keys[0]);
                        }
                        r = json_value(j, match ? keys + 1 : NULL, match ? ret : NULL);
                        if (r < 0)
                                return r;
                        json_ws(j);
                        if (j->p >= j->end)
                                return -EBADMSG;
                        if (*j->p == ',') {
                                j->p++;
                                continue;
                        }
                        if (*j->p != close)
                                return -EBADMSG;
                        j->p++;
                        j->depth--;
                        return 0;
                }
        }
        /* Numbers, true, false, null: the characters they may hold. */
        {
                const char *s = j->p;

                while (j->p < j->end && strchr("0123456789+-.eEtruefalsn", *j->p) && *j->p)
                        j->p++;
                return j->p == s ? -EBADMSG : 0;
        }
}

/* The string at keys in the JSON document text (len bytes); -ENOENT if absent. */
static int json_find(const char *text, size_t len, const char * const *keys, char **ret) {
        Json j = { .p = text, .end = text + len };
        _cleanup_free_ char *s = NULL;
        int r;

        r = json_value(&j, keys, &s);
        if (r < 0)
                return r;
        json_ws(&j);
        if (j.p != j.end)
                return -EBADMSG;
        if (!s)
                return -ENOENT;
        *ret = TAKE_PTR(s);
        return 0;
}

/* --- the container's root ------------------------------------------------------------ */

static int read_all(int fd, size_t max, char **ret, size_t *ret_len) {
        _cleanup_free_ char *buf = malloc(max + 1);
        size_t n = 0;

        if (!buf)
                return -ENOMEM;
        for (;;) {
                ssize_t k = read(fd, buf + n, max + 1 - n);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (k == 0)
                        break;
                n += (size_t) k;
                if (n > max)
                        return -EFBIG;
        }
        buf[n] = 0;
        *ret = TAKE_PTR(buf);
        *ret_len = n;
        return 0;
}

static int container_root(char **ret) {
        static const char *const bundle_key[] = { "bundle", NULL };
        static const char *const root_key[] = { "root", "path", NULL };
        _cleanup_free_ char *state = NULL, *bundle = NULL, *config = NULL, *path = NULL, *root = NULL;
        _cleanup_close_ int bundle_fd = -EBADF, fd = -EBADF;
        size_t len;
        int r;

        r = read_all(STDIN_FILENO, STATE_MAX, &state, &len);
        if (r < 0) {
                warn("failed to read the container state on stdin: %s", strerror(-r));
                return r;
        }
        r = json_find(state, len, bundle_key, &bundle);
        if (r < 0 || bundle[0] != '/' || strlen(bundle) > INROOT_PATH_MAX) {
                warn("the container state on stdin has no absolute \"bundle\"%s%s", r < 0 ? ": " : "",
                     r < 0 ? strerror(-r) : "");
                return -EINVAL;
        }
        bundle_fd = open(bundle, O_PATH|O_DIRECTORY|O_CLOEXEC);
        if (bundle_fd < 0) {
                warn("failed to open the bundle %s: %m", bundle);
                return -errno;
        }
        fd = openat(bundle_fd, "config.json", O_RDONLY|O_NOFOLLOW|O_CLOEXEC|O_NOCTTY);
        if (fd < 0) {
                warn("failed to open %s/config.json: %m", bundle);
                return -errno;
        }
        r = read_all(fd, CONFIG_MAX, &config, &len);
        if (r >= 0)
                r = json_find(config, len, root_key, &path);
        if (r < 0 || isempty(path)) {
                warn("%s/config.json names no root.path: %s", bundle, r < 0 ? strerror(-r) : "empty");
                return -EINVAL;
        }
        if (path[0] == '/')
                root = TAKE_PTR(path);
        else if (asprintf(&root, "%s/%s", bundle, path) < 0)
                return -ENOMEM;
        if (strlen(root) > INROOT_PATH_MAX || streq(root, "/")) {
                warn("refusing the container root \"%s\"", root);
                return -EINVAL;
        }
        *ret = TAKE_PTR(root);
        return 0;
}

/* --- create-symlinks ----------------------------------------------------------------- */

static bool target_is_valid(const char *t) {
        if (isempty(t) || strlen(t) > INROOT_PATH_MAX)
                return false;
        for (const char *c = t; *c; c++)
                if ((unsigned char) *c < 0x20 || *c == 0x7f)
                        return false;
        return true;
}

static int create_symlink(int root_fd, const char *spec) {
        _cleanup_free_ char *target = NULL, *parent = NULL, *current = NULL;
        _cleanup_close_ int dir_fd = -EBADF;
        const char *sep = strstr(spec, "::"), *link, *name;
        char tmp[64];
        struct stat st;

        if (!sep || strstr(sep + 2, "::")) {
                warn("--link %s: expected TARGET::LINK", spec);
                return -EINVAL;
        }
        target = strndup(spec, (size_t) (sep - spec));
        if (!target)
                return -ENOMEM;
        link = sep + 2;
        if (!target_is_valid(target) || !inroot_path_is_plain(link)) {
                warn("--link %s: the target must be a non-empty path, the link a plain absolute path", spec);
                return -EINVAL;
        }
        name = strrchr(link, '/') + 1;
        parent = strndup(link, (size_t) (name - link - 1));
        if (!parent)
                return -ENOMEM;
        dir_fd = inroot_mkdir_p(root_fd, isempty(parent) ? "/" : parent, 0755);
        if (dir_fd < 0) {
                warn("--link %s: failed to open or create %s in the container: %s", spec,
                     isempty(parent) ? "/" : parent, strerror(-dir_fd));
                return dir_fd;
        }
        if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno != ENOENT)
                        return -errno;
                if (symlinkat(target, dir_fd, name) < 0) {
                        warn("--link %s: %m", spec);
                        return -errno;
                }
                return 0;
        }
        if (!S_ISLNK(st.st_mode)) {
                warn("--link %s: the image has something else at %s, left alone", spec, link);
                return 0;
        }
        current = calloc(1, PATH_MAX + 1);
        if (!current)
                return -ENOMEM;
        if (readlinkat(dir_fd, name, current, PATH_MAX) >= 0 && streq(current, target))
                return 0;
        (void) snprintf(tmp, sizeof(tmp), ".kgpu-link.%d", (int) getpid());
        (void) unlinkat(dir_fd, tmp, 0);
        if (symlinkat(target, dir_fd, tmp) < 0 || renameat(dir_fd, tmp, dir_fd, name) < 0) {
                int e = errno;

                (void) unlinkat(dir_fd, tmp, 0);
                warn("--link %s: failed to replace the image's link: %s", spec, strerror(e));
                return -e;
        }
        return 0;
}

/* --- update-ldcache ------------------------------------------------------------------ */

static bool root_has_ldconfig(int root_fd) {
        static const char *const paths[] = { "/sbin/ldconfig", "/usr/sbin/ldconfig" };

        for (size_t i = 0; i < ELEMENTSOF(paths); i++) {
                _cleanup_close_ int fd = inroot_openat(root_fd, paths[i], O_PATH, 0);
                struct stat st;

                if (fd >= 0 && fstat(fd, &st) >= 0 && S_ISREG(st.st_mode))
                        return true;
        }
        return false;
}

static int update_ldcache(int root_fd, const char *root, char **folders, const char *ldconfig) {
        _cleanup_free_ char *text = NULL, *joined = NULL;
        _cleanup_close_ int dir_fd = -EBADF;
        char *argv[ARGS_MAX + 4];
        size_t n = 0;
        pid_t pid;
        int r, status;

        for (size_t i = 0; folders && folders[i]; i++)
                if (!inroot_path_is_plain(folders[i])) {
                        warn("--folder %s: expected a plain absolute path", folders[i]);
                        return -EINVAL;
                }
        if (isempty(ldconfig) || ldconfig[0] != '/') {
                warn("--ldconfig-path must be absolute");
                return -EINVAL;
        }
        joined = strv_join(folders, "\n");
        if (!joined || asprintf(&text, "# Written by kgpu-cdi-hook: the NVIDIA driver's libraries.\n%s\n",
                                joined) < 0)
                return -ENOMEM;
        dir_fd = inroot_mkdir_p(root_fd, "/etc/ld.so.conf.d", 0755);
        if (dir_fd < 0) {
                warn("failed to open or create /etc/ld.so.conf.d in the container: %s", strerror(-dir_fd));
                return dir_fd;
        }
        r = write_file_atomic_at(dir_fd, LDCONF_FILE, text, strlen(text), 0644);
        if (r < 0) {
                warn("failed to write /etc/ld.so.conf.d/" LDCONF_FILE " in the container: %s", strerror(-r));
                return r;
        }
        if (!root_has_ldconfig(root_fd))
                return 0;       /* nothing in the image reads an ld cache */

        argv[n++] = (char *) "ldconfig";
        argv[n++] = (char *) "-r";
        argv[n++] = (char *) root;
        for (size_t i = 0; folders && folders[i] && n < ARGS_MAX; i++)
                argv[n++] = folders[i];
        argv[n] = NULL;
        fflush(stderr);
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                int null = open("/dev/null", O_RDONLY|O_CLOEXEC);

                if (null >= 0)
                        (void) dup2(null, STDIN_FILENO);
                execv(ldconfig, argv);
                _exit(127);
        }
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                warn("%s -r %s failed (status %d)", ldconfig, root, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
                return -EIO;
        }
        return 0;
}

/* --- main ---------------------------------------------------------------------------- */

static void usage(FILE *f) {
        fputs("kgpu-cdi-hook create-symlinks --link TARGET::LINK [--link ...]\n"
              "kgpu-cdi-hook update-ldcache --folder DIR [--folder ...] [--ldconfig-path PATH]\n\n"
              "The OCI createContainer hook of kgpu's NVIDIA CDI spec; the container's state\n"
              "comes on stdin. Every path is resolved inside the container's root.\n", f);
}

int main(int argc, char **argv) {
        _cleanup_strv_free_ char **links = NULL, **folders = NULL;
        _cleanup_free_ char *root = NULL;
        _cleanup_close_ int root_fd = -EBADF;
        const char *command, *ldconfig = "/sbin/ldconfig";
        int r = 0;

        if (argc > 1 && (streq(argv[1], "-h") || streq(argv[1], "--help"))) {
                usage(stdout);
                return EXIT_SUCCESS;
        }
        if (argc > 1 && streq(argv[1], "--version")) {
                printf("kgpu-cdi-hook %s\n", KGPU_VERSION);
                return EXIT_SUCCESS;
        }
        if (argc < 2 || argc > ARGS_MAX) {
                usage(stderr);
                return EXIT_FAILURE;
        }
        command = argv[1];
        if (!streq(command, "create-symlinks") && !streq(command, "update-ldcache")) {
                warn("unknown command \"%s\"", command);
                return EXIT_FAILURE;
        }
        for (int i = 2; i < argc; i += 2) {
                const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

                if (!val) {
                        warn("%s: missing value", opt);
                        return EXIT_FAILURE;
                }
                if (streq(command, "create-symlinks") && streq(opt, "--link"))
                        r = strv_extend(&links, val);
                else if (streq(command, "update-ldcache") && streq(opt, "--folder"))
                        r = strv_extend(&folders, val);
                else if (streq(command, "update-ldcache") && streq(opt, "--ldconfig-path"))
                        ldconfig = val;
                else {
                        warn("%s: unknown option \"%s\"", command, opt);
                        return EXIT_FAILURE;
                }
                if (r < 0)
                        return EXIT_FAILURE;
        }

        if (container_root(&root) < 0)
                return EXIT_FAILURE;
        root_fd = inroot_open_root(root);
        if (root_fd < 0) {
                warn("failed to open the container root %s: %s", root, strerror(-root_fd));
                return EXIT_FAILURE;
        }
        if (streq(command, "create-symlinks")) {
                int failed = 0;

                for (size_t i = 0; links && links[i]; i++)
                        if (create_symlink(root_fd, links[i]) < 0)
                                failed = 1;
                return failed ? EXIT_FAILURE : EXIT_SUCCESS;
        }
        return update_ldcache(root_fd, root, folders, ldconfig) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
