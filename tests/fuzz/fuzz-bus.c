/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-bus.c — D-Bus messages from fuzz input (see fuzz-bus.h for the recipe format).
 */

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz-bus.h"

#define STRING_MAX 65600u

uint8_t fuzz_input_byte(FuzzInput *in) {
        uint8_t b;

        if (in->n == 0)
                return 0;
        b = in->p[0];
        in->p++;
        in->n--;
        return b;
}

uint32_t fuzz_input_u32(FuzzInput *in) {
        uint32_t v = 0;

        for (unsigned i = 0; i < 4; i++)
                v = (v << 8) | fuzz_input_byte(in);
        return v;
}

const char *fuzz_input_string(FuzzInput *in, size_t *ret_len) {
        static const size_t bounds[] = { 253, 254, 1024, 1025, 65536, 65537 };
        static char *buf;
        uint8_t l = fuzz_input_byte(in);
        size_t n;

        if (!buf) {
                buf = malloc(STRING_MAX + 1);
                if (!buf)
                        abort();
        }
        if (l == 0xfd) {
                size_t nw = 0;
                uint8_t k = fuzz_input_byte(in);

                while (in->words && in->words[nw])
                        nw++;
                if (nw == 0)
                        n = 0;
                else {
                        n = strlen(in->words[k % nw]);
                        memcpy(buf, in->words[k % nw], n);
                }
        } else if (l == 0xfe || l == 0xff) {
                uint8_t fill;

                if (l == 0xfe)
                        n = (size_t) fuzz_input_byte(in) << 8;
                else
                        n = bounds[fuzz_input_byte(in) % (sizeof bounds / sizeof bounds[0])];
                fill = fuzz_input_byte(in);
                if (in->bytes + n > FUZZ_BUS_BYTES_MAX)
                        n = 0;
                in->bytes += n;
                memset(buf, fill ?: 'a', n);
        } else {
                n = l < in->n ? l : in->n;
                memcpy(buf, in->p, n);
                in->p += n;
                in->n -= n;
        }
        buf[n] = 0;
        if (ret_len)
                *ret_len = n;
        return buf;
}

sd_bus *fuzz_bus_get(void) {
        static sd_bus *bus;
        int fds[2];

        if (bus)
                return bus;
        /* A started (never authenticated) peer bus is enough to build messages. */
        if (socketpair(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0, fds) < 0)
                abort();
        if (sd_bus_new(&bus) < 0 || sd_bus_set_fd(bus, fds[0], fds[0]) < 0 || sd_bus_start(bus) < 0)
                abort();
        close(fds[1]);
        return bus;
}

/* Length of the first complete type in s, 0 if s is empty or malformed. */
static size_t type_len(const char *s) {
        size_t depth = 0, i = 0;

        for (;;) {
                switch (s[i]) {
                case 0:
                        return 0;
                case 'a':
                        i++;
                        continue;       /* the element follows */
                case '(':
                case '{':
                        depth++;
                        break;
                case ')':
                case '}':
                        if (depth == 0)
                                return 0;
                        depth--;
                        break;
                default:
                        break;
                }
                i++;
                if (depth == 0)
                        return i;
        }
}

/* Contents a variant may hold. */
static const char *const variant_types[] = {
        "s", "i", "u", "q", "t", "x", "b", "y", "n", "d", "o", "g",
        "as", "ai", "a{sv}", "a{ss}", "(ss)", "v", "aas", "a(ssai)",
};

static int append_one(sd_bus_message *m, const char *t, size_t len, FuzzInput *in, unsigned depth);

static int append_all(sd_bus_message *m, const char *sig, size_t len, FuzzInput *in, unsigned depth) {
        size_t i = 0;
        int r;

        while (i < len) {
                size_t l = type_len(sig + i);

                if (l == 0 || i + l > len)
                        return -EINVAL;
                r = append_one(m, sig + i, l, in, depth);
                if (r < 0)
                        return r;
                i += l;
        }
        return 0;
}

static int append_one(sd_bus_message *m, const char *t, size_t len, FuzzInput *in, unsigned depth) {
        char contents[256];
        int r;

        if (depth > FUZZ_BUS_DEPTH_MAX)
                return -ELOOP;
        if (in->budget == 0)
                return -E2BIG;
        in->budget--;

        switch (t[0]) {
        case 'y': {
                uint8_t v = fuzz_input_byte(in);
                return sd_bus_message_append_basic(m, 'y', &v);
        }
        case 'b': {
                int v = fuzz_input_byte(in) & 1;
                return sd_bus_message_append_basic(m, 'b', &v);
        }
        case 'n':
        case 'q': {
                uint16_t v = (uint16_t) ((fuzz_input_byte(in) << 8) | fuzz_input_byte(in));
                return sd_bus_message_append_basic(m, t[0], &v);
        }
        case 'i':
        case 'u': {
                uint32_t v = fuzz_input_u32(in);
                return sd_bus_message_append_basic(m, t[0], &v);
        }
        case 'x':
        case 't': {
                uint64_t v = ((uint64_t) fuzz_input_u32(in) << 32) | fuzz_input_u32(in);
                return sd_bus_message_append_basic(m, t[0], &v);
        }
        case 'd': {
                uint64_t bits = ((uint64_t) fuzz_input_u32(in) << 32) | fuzz_input_u32(in);
                double v;

                memcpy(&v, &bits, sizeof v);
                return sd_bus_message_append_basic(m, 'd', &v);
        }
        case 's': {
                const char *s = fuzz_input_string(in, NULL);

                r = sd_bus_message_append_basic(m, 's', s);
                if (r < 0)      /* invalid UTF-8: the bus would not carry it */
                        r = sd_bus_message_append_basic(m, 's', "");
                return r;
        }
        case 'o': {
                static const char *const paths[] = {
                        "/", "/io/kgpu/Probe1", "/io/kgpu/Probe1/gpu/pci_0000_03_00_0", "/io/kgpu/Broker1",
                };
                return sd_bus_message_append_basic(m, 'o', paths[fuzz_input_byte(in) % 4]);
        }
        case 'g': {
                static const char *const sigs[] = { "", "s", "a{sv}", "a(ssai)" };
                return sd_bus_message_append_basic(m, 'g', sigs[fuzz_input_byte(in) % 4]);
        }
        case 'v': {
                const char *vt = variant_types[fuzz_input_byte(in) % (sizeof variant_types / sizeof variant_types[0])];

                r = sd_bus_message_open_container(m, 'v', vt);
                if (r < 0)
                        return r;
                r = append_all(m, vt, strlen(vt), in, depth + 1);
                if (r < 0)
                        return r;
                return sd_bus_message_close_container(m);
        }
        case 'a': {
                uint32_t count = fuzz_input_byte(in);

                /* Mostly small arrays; 0xff asks for a big one (up to past the bounds). */
                if (count == 0xff)
                        count = ((uint32_t) fuzz_input_byte(in) * 20u) % (FUZZ_BUS_ARRAY_MAX + 1);
                else
                        count %= 8;
                if (len - 1 >= sizeof contents)
                        return -EINVAL;
                memcpy(contents, t + 1, len - 1);
                contents[len - 1] = 0;
                r = sd_bus_message_open_container(m, 'a', contents);
                if (r < 0)
                        return r;
                for (uint32_t i = 0; i < count && in->budget > 0; i++) {
                        r = append_all(m, contents, len - 1, in, depth + 1);
                        if (r < 0)
                                return r;
                }
                return sd_bus_message_close_container(m);
        }
        case '(':
        case '{':
                if (len < 2 || len - 2 >= sizeof contents)
                        return -EINVAL;
                memcpy(contents, t + 1, len - 2);
                contents[len - 2] = 0;
                r = sd_bus_message_open_container(m, t[0] == '(' ? 'r' : 'e', contents);
                if (r < 0)
                        return r;
                r = append_all(m, contents, len - 2, in, depth + 1);
                if (r < 0)
                        return r;
                return sd_bus_message_close_container(m);
        default:
                return -EINVAL;
        }
}

int fuzz_bus_append(sd_bus_message *m, const char *signature, FuzzInput *in) {
        if (in->budget == 0)
                in->budget = FUZZ_BUS_BUDGET;
        return append_all(m, signature, strlen(signature), in, 0);
}

int fuzz_bus_build(const char *signature, FuzzInput *in, sd_bus_message **ret) {
        static uint64_t cookie = 1;
        sd_bus_message *m = NULL;
        int r;

        r = sd_bus_message_new_method_call(fuzz_bus_get(), &m, "io.kgpu.Fuzz", "/io/kgpu/Fuzz",
                                           "io.kgpu.Fuzz", "Reply");
        if (r < 0)
                return r;
        r = fuzz_bus_append(m, signature, in);
        if (r >= 0)
                r = sd_bus_message_seal(m, cookie++, 0);
        if (r >= 0)
                r = sd_bus_message_rewind(m, true);
        if (r < 0) {
                sd_bus_message_unref(m);
                return r;
        }
        *ret = m;
        return 0;
}
