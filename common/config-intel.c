/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * config-intel.c — the Intel GPU plugin's options that need more than a generic type:
 * the PCI device id lists (-allow-ids, -deny-ids) and the monitoring mode
 * (-monitoring-mode), with the Intel plugin's rules.
 *
 * Contract: see config-internal.h. An id list is split at ',', each item trimmed of
 * spaces; every item must then be "0x" and four lowercase hex digits, and no item may be
 * empty (the Intel plugin's validation: "0x1234 ,0x9876" is accepted, "56c0", "0x56C0"
 * and "0x1234," are refused). The two lists exclude each other (checked once all sources
 * are applied).
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config-internal.h"

const char * const config_intel_monitoring_mode_names[] = {
        [INTEL_MONITORING_MODE_SINGLE] = "single",
        [INTEL_MONITORING_MODE_SPLIT] = "split",
        NULL
};

const char *config_intel_monitoring_mode_to_string(ConfigIntelMonitoringMode m) {
        if ((size_t) m >= ELEMENTSOF(config_intel_monitoring_mode_names) - 1)
                return NULL;
        return config_intel_monitoring_mode_names[m];
}

bool config_pci_id_valid(const char *s) {
        if (!s || strlen(s) != 6 || s[0] != '0' || s[1] != 'x')
                return false;
        for (size_t i = 2; i < 6; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

int config_pci_id_item(const char *item, size_t len, char **ret, const char **ret_why) {
        while (len > 0 && *item == ' ')
                item++, len--;
        while (len > 0 && item[len - 1] == ' ')
                len--;
        if (len == 0) {
                *ret_why = "empty PCI device id in the list";
                return -EINVAL;
        }
        *ret = strndup(item, len);
        if (!*ret)
                return -ENOMEM;
        if (!config_pci_id_valid(*ret)) {
                *ret = mfree(*ret);
                *ret_why = "expected PCI device ids of 0x and four lowercase hex digits (0x56c0), comma separated";
                return -EINVAL;
        }
        return 0;
}

int config_set_pci_ids(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        _cleanup_strv_free_ char **l = NULL;
        const char *s = value;

        /* An empty value: no list (every id), as the Intel plugin's default "". */
        if (!isempty(value))
                for (;;) {
                        size_t n = strcspn(s, ",");
                        char *id = NULL;
                        int r;

                        r = config_pci_id_item(s, n, &id, ret_why);
                        if (r < 0)
                                return r;
                        r = strv_consume(&l, id);
                        if (r < 0)
                                return r;
                        if (s[n] == 0)
                                break;
                        s += n + 1;
                }
        strv_free(*(char ***) p);
        *(char ***) p = TAKE_PTR(l);
        return 0;
}

int config_intel_check(const Config *c, char **ret_error) {
        if (strv_length(c->intel_allow_ids) > 0 && strv_length(c->intel_deny_ids) > 0) {
                *ret_error = strdup("intel.allowIDs (-allow-ids) and intel.denyIDs (-deny-ids) cannot be used "
                                    "together (as in the Intel GPU plugin): set only one of them");
                return *ret_error ? -EINVAL : -ENOMEM;
        }
        return 0;
}
