/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * config-internal.h — what the files of the configuration share: the option table's
 * types, the value parser of every type (config-value.c), the YAML reader's context
 * and its errors (config.c), and the NVIDIA v1 sections read by config-nvidia.c.
 *
 * Contract: not for users of config.h. Functions return 0 or a negative errno; a
 * refused value is -EINVAL (-ERANGE out of bounds, -EOPNOTSUPP not implemented by
 * kgpu) with a static message in *ret_why, a refused file -EINVAL with the message
 * "FILE:LINE: KEY: what" in ParseContext.error.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <yaml.h>

#include "common/config.h"
#include "common/util.h"

#define CONFIG_FILE_MAX (1024U * 1024U)
#define CONFIG_DEPTH_MAX 16
#define CONFIG_SCALAR_MAX 4096

typedef enum OptionType {
        OPTION_STRING,
        OPTION_PATH,            /* absolute path */
        OPTION_BOOL,
        OPTION_UINT32,
        OPTION_STRV,            /* YAML sequence of scalars, or comma separated */
        OPTION_ALLOCATION_POLICY,
        OPTION_BY_PATH,
        OPTION_LOG_LEVEL,
        OPTION_VERSION,         /* the NVIDIA file's "version": only v1 */
        OPTION_ENUM,            /* one of names[], stored as the enum's int */
        OPTION_DEVICE_LIST_STRATEGY, /* DEVICE_LIST_STRATEGY_* set: one value, a list or comma separated */
        OPTION_ANNOTATION_PREFIX, /* non-empty annotation key prefix */
        OPTION_IGNORED,         /* accepted (names[]: these values only), logged at notice, not stored */
        OPTION_NO_EFFECT_BOOL,  /* a boolean kgpu does not implement: true is accepted with a warning */
        OPTION_IMEX_CHANNEL_IDS, /* imex.channelIDs: [] or [0] as upstream; [0] accepted with a warning */
        OPTION_DISCOVERY_STRATEGY, /* flags.deviceDiscoveryStrategy: auto, nvml (notice), tegra (warning) */
        OPTION_SHARED_RESOURCES, /* sharing.*.resources: a list of mappings into the ConfigSharing at offset */
        OPTION_RESOURCE_PATTERNS, /* resources.gpus/mig: {pattern, name} mappings; only the default names */
        OPTION_PCI_IDS,         /* strv of PCI device ids "0x56c0": YAML sequence or comma separated (config-intel.c) */
} OptionType;

typedef struct ConfigOption {
        const char *key;        /* dotted YAML key */
        const char *env[3];     /* environment variables, first found wins */
        const char *flag;       /* long option name */
        OptionType type;
        size_t offset;
        const char *def;        /* default as text, NULL: none */
        uint32_t min, max;      /* OPTION_UINT32 bounds */
        const char *help;       /* OPTION_IGNORED, OPTION_NO_EFFECT_BOOL: why */
        const char * const *names; /* OPTION_ENUM values in enum order; OPTION_IGNORED accepted values (NULL: any) */
        bool alias;             /* another key for a field an earlier entry owns (not freed, no default) */
} ConfigOption;

#define OFF(f) offsetof(Config, f)

/* Names of the enumerations, in enum order, NULL-terminated where an OPTION_ENUM reads them. */
extern const char * const config_mig_strategy_names[];
extern const char * const config_device_id_strategy_names[];
extern const char * const config_replica_policy_names[];
/* Bit i of a DEVICE_LIST_STRATEGY_* set is config_device_list_strategy_names[i]. */
extern const char * const config_device_list_strategy_names[];
extern const char * const config_mps_launcher_names[];
extern const char * const config_device_discovery_strategy_names[];
extern const char * const config_intel_monitoring_mode_names[];

/* config-value.c */
/* config_option_set() returns this (> 0) for a value accepted that kgpu cannot act on,
 * with the reason in *ret_why; the caller logs it at warning. */
#define CONFIG_NO_EFFECT 1
bool config_is_printable(const char *s);
bool config_names_contain(const char * const *names, const char *s);
int config_device_list_strategy_from_string(const char *s, uint32_t *ret);
/* Sets one option from text. On failure returns -EINVAL and a message in *ret_why;
 * CONFIG_NO_EFFECT: accepted, *ret_why says what kgpu does not do. */
int config_option_set(Config *c, const ConfigOption *o, const char *value, const char **ret_why);

/* config-intel.c */
/* "0x" and four lowercase hex digits, the Intel plugin's form of a PCI device id. */
bool config_pci_id_valid(const char *s);
/* One item of an id list (item[0..len)), spaces around it dropped, into *ret (new). */
int config_pci_id_item(const char *item, size_t len, char **ret, const char **ret_why);
/* The OPTION_PCI_IDS setter. */
int config_set_pci_ids(void *p, const ConfigOption *o, const char *value, const char **ret_why);
/* Rules between Intel options, once every source is applied: -EINVAL and *ret_error (new). */
int config_intel_check(const Config *c, char **ret_error);

/* config.c */
/* Which top-level keys one file contributes. A named NVIDIA config (config-overlay.c)
 * replaces kgpu.yaml's NVIDIA settings: kgpu.yaml is then read without them, the named
 * file with nothing else. */
typedef enum ConfigParseMode {
        CONFIG_PARSE_ALL,
        CONFIG_PARSE_SKIP_NVIDIA,       /* kgpu.yaml under a named config */
        CONFIG_PARSE_NVIDIA_ONLY,       /* the named config: a kgpu key there is an error */
} ConfigParseMode;

typedef struct ParseContext {
        Config *config;
        yaml_document_t *doc;
        const char *name;
        char *error;
        /* Lines (1-based, 0: absent) of the sharing sections and their resources lists. */
        size_t time_slicing_line, time_slicing_resources_line;
        size_t mps_line, mps_resources_line;
        bool time_slicing_empty;        /* sharing.timeSlicing: {} (what nos writes beside MPS) */
        bool nvidia_file;               /* the root has a key of the NVIDIA v1 format */
        ConfigParseMode mode;           /* which top-level keys are read (config-overlay.c) */
} ParseContext;

/* Whether key belongs to the NVIDIA device plugin's v1 format (version, flags, resources,
 * sharing, imex, health; any top-level key of a file that has one of these): unknown keys
 * there are logged at warning and ignored, as upstream ignores them. kgpu's own sections
 * (kubelet, broker, grpc, intel, nvidia, labels, cdi) stay strict. */
bool config_key_is_nvidia(const ParseContext *ctx, const char *key);
/* YAML null: an empty plain value, ~, null, Null, NULL, or the !!null tag. */
bool config_node_is_null(const yaml_node_t *node);

int config_parse_error(ParseContext *ctx, const yaml_node_t *node, const char *key, const char *fmt, ...) _printf_(4, 5);
int config_parse_error_line(ParseContext *ctx, size_t line, const char *key, const char *fmt, ...) _printf_(4, 5);

/* The whole loader (config_load() is this without an overlay): kgpu.yaml at config_path
 * as config_load() finds it, then, when overlay_text is not NULL, the NVIDIA settings of
 * that text (named overlay_name in messages) in place of kgpu.yaml's, then the
 * environment and the overrides. */
int config_load_with_overlay(const char *config_path,
                             const ConfigOverride *overrides, size_t n_overrides,
                             const char *overlay_text, size_t overlay_len, const char *overlay_name,
                             Config **ret, char **ret_error);
/* Whether top-level key is one of the NVIDIA v1 format's settings (a named config's). */
bool config_top_key_is_nvidia_setting(const ParseContext *ctx, const char *key);

/* config-nvidia.c */
void config_shared_resources_free(ConfigSharedResource *r, size_t n);
int config_parse_shared_resources(ParseContext *ctx, const ConfigOption *o, const char *key, yaml_node_t *node);
int config_parse_resource_patterns(ParseContext *ctx, const ConfigOption *o, const char *key, yaml_node_t *node);
int config_check_sharing_sections(ParseContext *ctx);
