/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * config-value.c — one configuration value from text: the names of the enumerations
 * and a parser per option type, the same for the file, the environment and the flags.
 *
 * Contract: see config-internal.h. config_option_set() checks the length and the
 * characters of every value, then hands it to the setter of its OptionType; a refused
 * value leaves the field as it was.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config-internal.h"
#include "common/log.h"

const char * const config_mig_strategy_names[] = {
        [MIG_STRATEGY_NONE] = "none",
        [MIG_STRATEGY_SINGLE] = "single",
        [MIG_STRATEGY_MIXED] = "mixed",
        NULL
};

const char * const config_device_id_strategy_names[] = {
        [DEVICE_ID_STRATEGY_UUID] = "uuid",
        [DEVICE_ID_STRATEGY_INDEX] = "index",
        NULL
};

const char * const config_replica_policy_names[] = {
        [REPLICA_POLICY_DISTRIBUTED] = "distributed",
        [REPLICA_POLICY_PACKED] = "packed",
        NULL
};

const char * const config_device_list_strategy_names[] = {
        "envvar", "volume-mounts", "cdi-annotations", "cdi-cri", NULL
};

const char * const config_mps_launcher_names[] = {
        [MPS_LAUNCHER_AUTO] = "auto",
        [MPS_LAUNCHER_SYSTEMD] = "systemd",
        [MPS_LAUNCHER_DIRECT] = "direct",
        NULL
};

const char * const config_device_discovery_strategy_names[] = { "auto", "nvml", "tegra", NULL };

const char * const config_allocation_policy_names[] = {
        [ALLOCATION_POLICY_NONE] = "none",
        [ALLOCATION_POLICY_BALANCED] = "balanced",
        [ALLOCATION_POLICY_PACKED] = "packed",
};

const char * const config_by_path_names[] = {
        [BY_PATH_SINGLE] = "single",
        [BY_PATH_ALL] = "all",
        [BY_PATH_NONE] = "none",
};

const char *config_by_path_to_string(ConfigByPath b) {
        if ((size_t) b >= ELEMENTSOF(config_by_path_names))
                return NULL;
        return config_by_path_names[b];
}

const char *config_allocation_policy_to_string(ConfigAllocationPolicy p) {
        if ((size_t) p >= ELEMENTSOF(config_allocation_policy_names))
                return NULL;
        return config_allocation_policy_names[p];
}

const char *config_mig_strategy_to_string(ConfigMigStrategy m) {
        if ((size_t) m >= ELEMENTSOF(config_mig_strategy_names) - 1)
                return NULL;
        return config_mig_strategy_names[m];
}

const char *config_device_id_strategy_to_string(ConfigDeviceIdStrategy d) {
        if ((size_t) d >= ELEMENTSOF(config_device_id_strategy_names) - 1)
                return NULL;
        return config_device_id_strategy_names[d];
}

const char *config_replica_policy_to_string(ConfigReplicaPolicy p) {
        if ((size_t) p >= ELEMENTSOF(config_replica_policy_names) - 1)
                return NULL;
        return config_replica_policy_names[p];
}

const char *config_device_list_strategy_to_string(uint32_t set, char *buf, size_t size) {
        size_t n = 0;

        if (!buf || size == 0)
                return NULL;
        buf[0] = 0;
        for (size_t i = 0; config_device_list_strategy_names[i]; i++) {
                int k;

                if (!(set & (1U << i)))
                        continue;
                k = snprintf(buf + n, size - n, "%s%s", n > 0 ? "," : "", config_device_list_strategy_names[i]);
                if (k < 0 || (size_t) k >= size - n)
                        return NULL;
                n += (size_t) k;
        }
        return buf;
}

char *config_shared_resource_name(const ConfigSharing *s, const ConfigSharedResource *r) {
        char *n = NULL;

        if (!s || !r || !r->name)
                return NULL;
        if (r->rename)
                return strdup(r->rename);
        if (s->rename_by_default)
                return asprintf(&n, "%s.shared", r->name) < 0 ? NULL : n;
        return strdup(r->name);
}

bool config_is_printable(const char *s) {
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                        return false;
        return true;
}

bool config_names_contain(const char * const *names, const char *s) {
        for (size_t i = 0; names[i]; i++)
                if (streq(names[i], s))
                        return true;
        return false;
}

int config_device_list_strategy_from_string(const char *s, uint32_t *ret) {
        for (size_t i = 0; config_device_list_strategy_names[i]; i++)
                if (streq(s, config_device_list_strategy_names[i])) {
                        *ret = 1U << i;
                        return 0;
                }
        return -EINVAL;
}

typedef int (*OptionSetter)(void *p, const ConfigOption *o, const char *value, const char **ret_why);

static int set_string(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        return free_and_strdup((char **) p, isempty(value) ? NULL : value) < 0 ? -ENOMEM : 0;
}

static int set_path(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        if (!isempty(value) && value[0] != '/') {
                *ret_why = "expected an absolute path";
                return -EINVAL;
        }
        /* A path with a default cannot be unset, the daemon would run without it;
         * except the generated files, where empty means "do not write", and the
         * broker's peer socket, where it means "the system bus only". */
        if (isempty(value) && o->def &&
            !streq(o->key, "labels.featureFile") && !streq(o->key, "cdi.specDirectory") &&
            !streq(o->key, "broker.socket")) {
                *ret_why = "expected an absolute path, not an empty value";
                return -EINVAL;
        }
        return set_string(p, o, value, ret_why);
}

/* The value as it is, once check accepted it. */
static int set_checked_string(void *p, bool ok, const char *why, const char *value, const char **ret_why) {
        if (!ok) {
                *ret_why = why;
                return -EINVAL;
        }
        return free_and_strdup((char **) p, value) < 0 ? -ENOMEM : 0;
}

static int set_log_level(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        return set_checked_string(p, log_level_from_string(value) >= 0,
                                  "expected one of debug, info, notice, warning, err", value, ret_why);
}

static int set_version(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        if (isempty(value))
                value = "v1";   /* upstream: an empty version is v1 */
        return set_checked_string(p, streq(value, "v1"),
                                  "expected v1 (the only version of the NVIDIA device plugin's config file)",
                                  value, ret_why);
}

static int set_annotation_prefix(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        bool ok = !isempty(value) && strlen(value) <= 253 &&
                  strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._/") == strlen(value);

        return set_checked_string(p, ok, "expected an annotation key prefix (letters, digits, '-', '.', '_', '/')",
                                  value, ret_why);
}

static int set_bool(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        int r = parse_boolean(value);

        if (r < 0) {
                *ret_why = "expected a boolean (true or false)";
                return -EINVAL;
        }
        *(bool *) p = r;
        return 0;
}

static int set_uint32(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        uint32_t v;

        if (safe_atou32(value, &v) < 0) {
                *ret_why = "expected an unsigned integer";
                return -EINVAL;
        }
        if (v < o->min || v > o->max) {
                *ret_why = "value out of range";
                return -ERANGE;
        }
        *(uint32_t *) p = v;
        return 0;
}

/* Index of value in names (n entries, or up to NULL when n is 0), -EINVAL if absent. */
static int name_index(const char * const *names, size_t n, const char *value) {
        for (size_t i = 0; n > 0 ? i < n : names[i] != NULL; i++)
                if (streq(value, names[i]))
                        return (int) i;
        return -EINVAL;
}

static int set_allocation_policy(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        int i = name_index(config_allocation_policy_names, ELEMENTSOF(config_allocation_policy_names), value);

        if (i < 0) {
                *ret_why = "expected none, balanced or packed";
                return -EINVAL;
        }
        *(ConfigAllocationPolicy *) p = (ConfigAllocationPolicy) i;
        return 0;
}

static int set_by_path(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        int i = name_index(config_by_path_names, ELEMENTSOF(config_by_path_names), value);

        if (i < 0) {
                *ret_why = "expected single, all or none";
                return -EINVAL;
        }
        *(ConfigByPath *) p = (ConfigByPath) i;
        return 0;
}

static int set_enum(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        int i = name_index(o->names, 0, value);

        if (i < 0) {
                *ret_why = o->names == config_mig_strategy_names ? "expected none, single or mixed" :
                           o->names == config_device_id_strategy_names ? "expected uuid or index" :
                           o->names == config_mps_launcher_names ? "expected auto, systemd or direct" :
                           o->names == config_intel_monitoring_mode_names ? "expected single or split" :
                           "expected distributed or packed";
                return -EINVAL;
        }
        *(int *) p = i;
        return 0;
}

static int set_device_list_strategy(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        static const char why[] = "expected envvar, volume-mounts, cdi-annotations or cdi-cri";
        _cleanup_free_ char *copy = strdup(value);
        char *save = NULL;
        uint32_t set = 0;

        if (!copy)
                return -ENOMEM;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                uint32_t bit;

                while (*t == ' ')
                        t++;
                if (config_device_list_strategy_from_string(t, &bit) < 0)
                        return set_checked_string(p, false, why, value, ret_why);
                set |= bit;
        }
        if (set == 0)
                return set_checked_string(p, false, why, value, ret_why);
        *(uint32_t *) p = set;
        return 0;
}

static int set_ignored(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        if (o->names && !config_names_contain(o->names, value)) {
                *ret_why = "not supported by kgpu";
                return -EOPNOTSUPP;
        }
        return 0;
}

/* A boolean upstream acts on and kgpu cannot: false is nothing to do, true is accepted
 * with a warning (upstream accepts it). */
static int set_no_effect_bool(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        int r = parse_boolean(value);

        if (r < 0) {
                *ret_why = "expected a boolean (true or false)";
                return -EINVAL;
        }
        if (r > 0) {
                *ret_why = o->help;
                return CONFIG_NO_EFFECT;
        }
        return 0;
}

/* imex.channelIDs as one value: only from the file, where parse_list() reads the list. */
static int set_imex_channel_ids(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        *ret_why = "expected a list of channel IDs, [] or [0]";
        return -EINVAL;
}

/* auto and nvml: kgpu finds GPUs with nvidia-smi either way; tegra asks for GPUs kgpu
 * does not serve; anything else upstream refuses at start. */
static int set_discovery_strategy(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        if (!config_names_contain(config_device_discovery_strategy_names, value)) {
                *ret_why = "expected auto, nvml or tegra";
                return -EINVAL;
        }
        if (streq(value, "tegra")) {
                *ret_why = "Tegra (integrated) GPUs are not served, GPUs are found with nvidia-smi";
                return CONFIG_NO_EFFECT;
        }
        return 0;
}

static int set_file_only(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        *ret_why = "expected a list of mappings";       /* file only: parse_value() reads them */
        return -EINVAL;
}

static int set_strv(void *p, const ConfigOption *o, const char *value, const char **ret_why) {
        _cleanup_strv_free_ char **l = NULL;
        _cleanup_free_ char *copy = strdup(value);
        char *save = NULL;

        if (!copy)
                return -ENOMEM;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                while (*t == ' ')
                        t++;
                if (*t && strv_extend(&l, t) < 0)
                        return -ENOMEM;
        }
        strv_free(*(char ***) p);
        *(char ***) p = TAKE_PTR(l);
        return 0;
}

static const OptionSetter setters[] = {
        [OPTION_STRING] = set_string,
        [OPTION_PATH] = set_path,
        [OPTION_BOOL] = set_bool,
        [OPTION_UINT32] = set_uint32,
        [OPTION_STRV] = set_strv,
        [OPTION_ALLOCATION_POLICY] = set_allocation_policy,
        [OPTION_BY_PATH] = set_by_path,
        [OPTION_LOG_LEVEL] = set_log_level,
        [OPTION_VERSION] = set_version,
        [OPTION_ENUM] = set_enum,
        [OPTION_DEVICE_LIST_STRATEGY] = set_device_list_strategy,
        [OPTION_ANNOTATION_PREFIX] = set_annotation_prefix,
        [OPTION_IGNORED] = set_ignored,
        [OPTION_NO_EFFECT_BOOL] = set_no_effect_bool,
        [OPTION_IMEX_CHANNEL_IDS] = set_imex_channel_ids,
        [OPTION_DISCOVERY_STRATEGY] = set_discovery_strategy,
        [OPTION_SHARED_RESOURCES] = set_file_only,
        [OPTION_RESOURCE_PATTERNS] = set_file_only,
        [OPTION_PCI_IDS] = config_set_pci_ids,
};

int config_option_set(Config *c, const ConfigOption *o, const char *value, const char **ret_why) {
        if (strlen(value) > CONFIG_SCALAR_MAX) {
                *ret_why = "value too long";
                return -EINVAL;
        }
        if (!config_is_printable(value)) {
                *ret_why = "value contains control characters";
                return -EINVAL;
        }
        if ((size_t) o->type >= ELEMENTSOF(setters) || !setters[o->type])
                return -EINVAL;
        return setters[o->type]((uint8_t *) c + o->offset, o, value, ret_why);
}
