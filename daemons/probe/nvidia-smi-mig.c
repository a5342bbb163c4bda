/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-smi-mig.c — parsers of nvidia-smi -q (MIG devices, GPUs) and nvidia-smi mig -lgip / -lgi / -lci (see nvidia-smi.h; shared text handling in nvidia-smi-internal.h).
 */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/nvidia-smi-internal.h"
#include "daemons/probe/nvidia-smi.h"

/* ---- nvidia-smi -q MIG devices ---- */

int nvidia_smi_parse_q_mig_devices(const char *text, size_t len, NvidiaQMigDevice **ret, size_t *ret_n,
                                   char **ret_error) {
        _cleanup_(smi_lines_done) Lines l = {};
        _cleanup_free_ NvidiaQMigDevice *devs = NULL;
        char gpu[NVIDIA_PCI_ADDRESS_MAX] = "";
        bool in_mig = false, in_fb = false, seen_log = false;
        unsigned have = 0;      /* bits: 1 index, 2 gi, 4 ci of the current block */
        size_t n = 0, cap = 0;
        int r;

        r = smi_lines_open(text, len, &l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i <= l.n; i++) {
                char *s = i < l.n ? l.line[i] : (char *) "", *key, *value;
                size_t ind = smi_indent_of(s);
                uint32_t v;

                /* A MIG Device block ends at the next line indented 4 or less. */
                if (in_mig && (i == l.n || (ind <= 4 && !isempty(smi_strip(s))))) {
                        if (have != 7)
                                return smi_fail(ret_error, -EBADMSG, i, "MIG device block without index, GPU and "
                                            "compute instance IDs");
                        in_mig = false;
                }
                if (i == l.n)
                        break;
                s = smi_strip(s);
                if (isempty(s))
                        continue;
                if (strstr(s, "NVSMI LOG"))
                        seen_log = true;
                if (ind == 0 && startswith(s, "GPU ") && !strchr(s + 4, ' ')) {
                        if (nvidia_pci_address_normalize(s + 4, gpu) < 0)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "bad GPU block '%.40s'", s);
                        continue;
                }
                if (ind == 4 && streq(s, "MIG Device")) {
                        if (!gpu[0])
                                return smi_fail(ret_error, -EBADMSG, i + 1, "MIG device outside a GPU block");
                        if (n >= NVIDIA_MIG_DEVICES_MAX)
                                return smi_fail(ret_error, -E2BIG, i + 1, "more than %u MIG devices",
                                            NVIDIA_MIG_DEVICES_MAX);
                        r = array_reserve_bounded((void **) &devs, &cap, n + 1, sizeof(NvidiaQMigDevice),
                                                  NVIDIA_MIG_DEVICES_MAX);
                        if (r < 0)
                                return r;
                        memcpy(devs[n].pci_address, gpu, sizeof(gpu));
                        n++;
                        in_mig = true;
                        in_fb = false;
                        have = 0;
                        continue;
                }
                if (!in_mig)
                        continue;
                if (ind == 8)
                        in_fb = streq(s, "FB Memory Usage") || streq(s, "Shared FB Memory Usage");
                if (in_fb && ind == 12 && smi_q_key_value(s, &key, &value) && streq(key, "Total")) {
                        uint64_t mib;
                        char *sp = strchr(value, ' ');

                        /* "40448 MiB"; anything else leaves the size unknown (0). */
                        if (sp && streq(sp, " MiB") && sp - value <= 9 && isdigit((unsigned char) value[0])) {
                                *sp = 0;
                                if (safe_atou64(value, &mib) >= 0)
                                        devs[n - 1].memory_mib = mib;
                        }
                        continue;
                }
                if (ind != 8 || !smi_q_key_value(s, &key, &value))
                        continue;
                if (streq(key, "Index") || streq(key, "GPU Instance ID") || streq(key, "Compute Instance ID")) {
                        if (smi_parse_small_uint(value, 1024, &v) < 0)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "%s: bad value '%.32s'", key, value);
                        if (streq(key, "Index")) {
                                devs[n - 1].device_index = v;
                                have |= 1;
                        } else if (streq(key, "GPU Instance ID")) {
                                devs[n - 1].gi_id = v;
                                have |= 2;
                        } else {
                                devs[n - 1].ci_id = v;
                                have |= 4;
                        }
                }
        }
        if (!seen_log && !gpu[0])
                return smi_fail(ret_error, -EBADMSG, 0, "not nvidia-smi -q output");
        for (size_t a = 0; a < n; a++)
                for (size_t b = a + 1; b < n; b++)
                        if (streq(devs[a].pci_address, devs[b].pci_address) &&
                            (devs[a].device_index == devs[b].device_index ||
                             (devs[a].gi_id == devs[b].gi_id && devs[a].ci_id == devs[b].ci_id)))
                                return smi_fail(ret_error, -EBADMSG, 0, "MIG device %u of GPU %s listed twice",
                                            devs[b].device_index, devs[b].pci_address);

        *ret = TAKE_PTR(devs);
        *ret_n = n;
        return 0;
}

int nvidia_smi_parse_q_gpus(const char *text, size_t len, NvidiaQGpu **ret, size_t *ret_n, char **ret_error) {
        _cleanup_(smi_lines_done) Lines l = {};
        _cleanup_free_ NvidiaQGpu *gpus = NULL;
        bool seen_log = false;
        size_t n = 0, cap = 0;
        int r;

        r = smi_lines_open(text, len, &l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = l.line[i], *key, *value;
                size_t ind = smi_indent_of(s);
                uint32_t v;

                s = smi_strip(s);
                if (isempty(s))
                        continue;
                if (strstr(s, "NVSMI LOG"))
                        seen_log = true;
                if (ind == 0 && startswith(s, "GPU ") && !strchr(s + 4, ' ')) {
                        if (n >= NVIDIA_GPUS_MAX)
                                return smi_fail(ret_error, -E2BIG, i + 1, "more than %u GPUs", NVIDIA_GPUS_MAX);
                        r = array_reserve_bounded((void **) &gpus, &cap, n + 1, sizeof(NvidiaQGpu),
                                                  NVIDIA_GPUS_MAX);
                        if (r < 0)
                                return r;
                        gpus[n] = (NvidiaQGpu) { .minor_number = -1 };
                        if (nvidia_pci_address_normalize(s + 4, gpus[n].pci_address) < 0)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "bad GPU block '%.40s'", s);
                        n++;
                        continue;
                }
                if (n == 0 || ind != 4 || !smi_q_key_value(s, &key, &value) || !streq(key, "Minor Number"))
                        continue;
                if (smi_is_na(value))
                        continue;
                if (smi_parse_small_uint(value, 255, &v) < 0)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "Minor Number: bad value '%.32s'", value);
                gpus[n - 1].minor_number = (int32_t) v;
        }
        if (!seen_log && n == 0)
                return smi_fail(ret_error, -EBADMSG, 0, "not nvidia-smi -q output");
        for (size_t a = 0; a < n; a++)
                for (size_t b = a + 1; b < n; b++)
                        if (streq(gpus[a].pci_address, gpus[b].pci_address))
                                return smi_fail(ret_error, -EBADMSG, 0, "GPU %s listed twice", gpus[a].pci_address);

        *ret = TAKE_PTR(gpus);
        *ret_n = n;
        return 0;
}

int nvidia_mig_devices_set_instance_ids(NvidiaMigDevice *migs, size_t n_migs, const NvidiaGpu *gpus,
                                        size_t n_gpus, const NvidiaQMigDevice *q, size_t n_q) {
        int set = 0;

        if ((n_migs > 0 && !migs) || (n_gpus > 0 && !gpus) || (n_q > 0 && !q))
                return -EINVAL;
        for (size_t m = 0; m < n_migs; m++) {
                const NvidiaGpu *g = NULL;
                bool found = false;

                for (size_t k = 0; k < n_gpus && !g; k++)
                        if (gpus[k].index == migs[m].gpu_index && gpus[k].pci_address[0])
                                g = &gpus[k];
                if (!g)
                        return -ENXIO;
                for (size_t k = 0; k < n_q && !found; k++)
                        if (streq(q[k].pci_address, g->pci_address) && q[k].device_index == migs[m].device_index) {
                                if ((migs[m].gi_id >= 0 && (uint32_t) migs[m].gi_id != q[k].gi_id) ||
                                    (migs[m].ci_id >= 0 && (uint32_t) migs[m].ci_id != q[k].ci_id))
                                        return -ENXIO;  /* R450 UUIDs carry the IDs: they must agree */
                                migs[m].gi_id = (int32_t) q[k].gi_id;
                                migs[m].ci_id = (int32_t) q[k].ci_id;
                                found = true;
                        }
                if (!found)
                        return -ENXIO;
                set++;
        }
        return set;
}

/* One line of a boxed table (mig -lgip, -lgi, -lci): a border ("+---+") or the rule under
 * the header ("|===|", only after the title; sets *seen_rule) is consumed and returns 0;
 * a row "| ... |" returns 1 with *ret_s its inside, stripped. */
static int table_line(char *s, size_t line, bool seen_title, bool *seen_rule, char **ret_s, char **ret_error) {
        size_t sl = strlen(s);

        if (s[0] == '+') {
                if (strspn(s, "+-") != sl)
                        return smi_fail(ret_error, -EBADMSG, line, "bad border line");
                return 0;
        }
        if (s[0] != '|' || sl < 2 || s[sl - 1] != '|')
                return smi_fail(ret_error, -EBADMSG, line, "unexpected line '%.80s'", s);
        s[sl - 1] = 0;
        s = smi_strip(s + 1);
        if (s[0] == '=') {
                if (strspn(s, "=") != strlen(s) || !seen_title)
                        return smi_fail(ret_error, -EBADMSG, line, "bad rule line");
                *seen_rule = true;
                return 0;
        }
        *ret_s = s;
        return 1;
}

/* ---- nvidia-smi mig -lgip ---- */

/* "9.50" (GiB, up to two decimals) -> MiB. */
static int gib_to_mib(const char *s, uint64_t *ret) {
        const char *dot = strchr(s, '.');
        char whole[8] = "";
        uint32_t w, frac = 0;
        size_t wl = dot ? (size_t) (dot - s) : strlen(s);

        if (wl == 0 || wl >= sizeof(whole))
                return -EBADMSG;
        memcpy(whole, s, wl);
        if (smi_parse_small_uint(whole, 1U << 20, &w) < 0)
                return -EBADMSG;
        if (dot) {
                size_t fl = strlen(dot + 1);

                if (fl < 1 || fl > 2 || strspn(dot + 1, "0123456789") != fl)
                        return -EBADMSG;
                frac = (uint32_t) strtoul(dot + 1, NULL, 10) * (fl == 1 ? 10 : 1);
        }
        *ret = (uint64_t) w * 1024 + (uint64_t) frac * 1024 / 100;
        return 0;
}

int nvidia_smi_parse_mig_profiles(const char *text, size_t len, NvidiaMigProfile **ret, size_t *ret_n,
                                  char **ret_error) {
        _cleanup_(smi_lines_done) Lines l = {};
        _cleanup_free_ NvidiaMigProfile *p = NULL;
        bool seen_title = false, seen_rule = false;
        size_t n = 0, cap = 0;
        int r;

        r = smi_lines_open(text, len, &l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = smi_strip(l.line[i]), *tok[12], *slash;
                NvidiaMigProfile m = {};
                int nt;

                if (isempty(s))
                        continue;
                r = table_line(s, i + 1, seen_title, &seen_rule, &s, ret_error);
                if (r < 0)
                        return r;
                if (r == 0)
                        continue;
                if (!seen_rule) {
                        if (startswith(s, "GPU instance profiles:"))
                                seen_title = true;
                        else if (!seen_title)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "not a GPU instance profile table");
                        continue;
                }

                nt = smi_tokenize(s, tok, ELEMENTSOF(tok));
                if (nt >= 1 && nt <= 3)
                        continue;       /* second line of a row: CE JPEG [OFA] */
                if (nt != 10 || !streq(tok[1], "MIG"))
                        return smi_fail(ret_error, -EBADMSG, i + 1, "%d columns in a profile row", nt);
                if (smi_parse_small_uint(tok[0], NVIDIA_GPUS_MAX * 16, &m.gpu_index) < 0)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad GPU index");
                if (!smi_profile_is_valid(tok[2]))
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad profile name");
                (void) smi_copy_field(m.profile, sizeof(m.profile), tok[2]);
                if (smi_parse_small_uint(tok[3], 1024, &m.profile_id) < 0)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad profile id");
                slash = strchr(tok[4], '/');
                if (!slash)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad instance count");
                *slash = 0;
                if (smi_parse_small_uint(tok[4], 64, &m.free) < 0 || smi_parse_small_uint(slash + 1, 64, &m.total) < 0 ||
                    m.free > m.total)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad instance count");
                if (gib_to_mib(tok[5], &m.memory_mib) < 0)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad memory '%.16s'", tok[5]);
                if (streq(tok[6], "Yes"))
                        m.p2p = true;
                else if (!streq(tok[6], "No"))
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad P2P '%.16s'", tok[6]);
                if (smi_parse_small_uint(tok[7], 1024, &m.sm) < 0)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad SM count");

                for (size_t j = 0; j < n; j++)
                        if (p[j].gpu_index == m.gpu_index && p[j].profile_id == m.profile_id)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "profile %u listed twice", m.profile_id);
                r = array_reserve_bounded((void **) &p, &cap, n + 1, sizeof(NvidiaMigProfile),
                                          NVIDIA_MIG_DEVICES_MAX);
                if (r < 0)
                        return smi_fail(ret_error, r, i + 1, "too many profiles");
                p[n++] = m;
        }

        if (!seen_rule || n == 0)
                return smi_fail(ret_error, -EBADMSG, 0, "no GPU instance profile table");
        *ret = TAKE_PTR(p);
        *ret_n = n;
        return 0;
}

/* ---- nvidia-smi mig -lgi / -lci ---- */

static int placement_parse(char *s, uint32_t *ret_start, uint32_t *ret_size) {
        char *c = strchr(s, ':');

        if (!c)
                return -EBADMSG;
        *c = 0;
        if (smi_parse_small_uint(s, 64, ret_start) < 0 || smi_parse_small_uint(c + 1, 64, ret_size) < 0 || *ret_size == 0)
                return -EBADMSG;
        return 0;
}

int nvidia_smi_parse_mig_instances(const char *text, size_t len, bool compute_instances,
                                   NvidiaMigInstance **ret, size_t *ret_n, char **ret_error) {
        _cleanup_(smi_lines_done) Lines l = {};
        _cleanup_free_ NvidiaMigInstance *inst = NULL;
        const char *title = compute_instances ? "Compute instances:" : "GPU instances:";
        const char *none = compute_instances ? "No compute instances found" : "No GPU instances found";
        bool seen_title = false, seen_rule = false;
        size_t n = 0, cap = 0;
        int r;

        r = smi_lines_open(text, len, &l, ret_error);
        if (r < 0)
                return r;

        for (size_t i = 0; i < l.n; i++) {
                char *s = smi_strip(l.line[i]), *tok[10];
                NvidiaMigInstance m = { .ci_id = -1 };
                size_t k = 0;
                uint32_t ci;
                int nt;

                if (isempty(s))
                        continue;
                if (startswith(s, none)) {
                        if (seen_title)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "'%s' after a table", none);
                        *ret = NULL;
                        *ret_n = 0;
                        return 0;
                }
                r = table_line(s, i + 1, seen_title, &seen_rule, &s, ret_error);
                if (r < 0)
                        return r;
                if (r == 0)
                        continue;
                if (!seen_rule) {
                        /* Title and header lines. */
                        if (startswith(s, title))
                                seen_title = true;
                        else if (!seen_title)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "not a '%s' table", title);
                        continue;
                }

                nt = smi_tokenize(s, tok, ELEMENTSOF(tok));
                if (nt < 0)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "too many columns");
                if (nt != (compute_instances ? 7 : 6) && nt != (compute_instances ? 6 : 5))
                        return smi_fail(ret_error, -EBADMSG, i + 1, "%d columns in a table row", nt);
                if (smi_parse_small_uint(tok[k++], NVIDIA_GPUS_MAX * 16, &m.gpu_index) < 0)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad GPU index");
                if (compute_instances && smi_parse_small_uint(tok[k++], 1024, &m.gi_id) < 0)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad GPU instance id");
                if (streq(tok[k], "MIG"))
                        k++;
                if ((size_t) nt - k != 4 || !smi_profile_is_valid(tok[k]))
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad profile name");
                (void) smi_copy_field(m.profile, sizeof(m.profile), tok[k++]);
                if (smi_parse_small_uint(tok[k++], 1024, &m.profile_id) < 0)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad profile id");
                if (compute_instances) {
                        if (smi_parse_small_uint(tok[k++], 1024, &ci) < 0)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "bad compute instance id");
                        m.ci_id = (int32_t) ci;
                } else if (smi_parse_small_uint(tok[k++], 1024, &m.gi_id) < 0)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad instance id");
                if (placement_parse(tok[k], &m.placement_start, &m.placement_size) < 0)
                        return smi_fail(ret_error, -EBADMSG, i + 1, "bad placement");

                if (n >= NVIDIA_MIG_DEVICES_MAX)
                        return smi_fail(ret_error, -E2BIG, i + 1, "more than %u instances", NVIDIA_MIG_DEVICES_MAX);
                for (size_t j = 0; j < n; j++)
                        if (inst[j].gpu_index == m.gpu_index && inst[j].gi_id == m.gi_id && inst[j].ci_id == m.ci_id)
                                return smi_fail(ret_error, -EBADMSG, i + 1, "instance listed twice");
                r = array_reserve_bounded((void **) &inst, &cap, n + 1, sizeof(NvidiaMigInstance),
                                          NVIDIA_MIG_DEVICES_MAX);
                if (r < 0)
                        return r;
                inst[n++] = m;
        }

        if (!seen_title || !seen_rule)
                return smi_fail(ret_error, -EBADMSG, 0, "no '%s' table", title);
        *ret = TAKE_PTR(inst);
        *ret_n = n;
        return 0;
}
