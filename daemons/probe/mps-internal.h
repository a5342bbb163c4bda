/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mps-internal.h — what the MPS controller's files share (mps.c, mps-files.c,
 * mps-steps.c); nothing else includes it.
 *
 * An Entry is one GPU's MPS state: its directories, the limits in force, the operation
 * under way (Op, a small state machine of Steps) and a FIFO of queued operations.
 * mps.c owns the entries and the requests, mps-steps.c runs an operation's steps (one
 * tool run or systemd job each) and mps-files.c keeps the directories and the records
 * kgpu writes in them (compute mode to restore, limits in force).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "daemons/probe/mps-systemd.h"
#include "daemons/probe/mps.h"
#include "daemons/probe/nvidia-runner.h"
#include "daemons/probe/nvidia-smi.h"

#define MPS_ENTRIES_MAX NVIDIA_GPUS_MAX
#define MPS_OUTPUT_MAX  (64U * 1024U)
#define MPS_PID_FILE    "nvidia-cuda-mps-control.pid"   /* the daemon's, in its pipe directory */
#define MPS_LIMITS_FILE "limits"                        /* ours: "<pid> <MiB> <pct>" */
#define MPS_MODE_FILE   "compute-mode"                  /* ours: the mode to restore ("DEFAULT") */
#define MPS_REMOVE_DEPTH_MAX 16U

typedef enum OpKind {
        OP_ENABLE,
        OP_DISABLE,
        OP_CHECK,
        OP_RESTART,
        OP_ADOPT,
} OpKind;

typedef enum Step {
        STEP_COMPUTE_READ,      /* --query-gpu=compute_mode: the mode to restore */
        STEP_COMPUTE_MODE,      /* -c EXCLUSIVE_PROCESS */
        STEP_PROBE,             /* get_server_list: a daemon there already? */
        STEP_START,             /* -d */
        STEP_UNIT_START,        /* RestartUnit kgpu-mps@<uuid>.service */
        STEP_LIMITS,
        STEP_QUIT,
        STEP_UNIT_STOP,         /* StopUnit kgpu-mps@<uuid>.service */
        STEP_COMPUTE_RESTORE,   /* -c <the mode found before MPS> */
        STEP_CHECK,             /* get_server_list: still alive? */
} Step;

typedef struct Op {
        OpKind kind;
        bool enabled;
        uint32_t index;
        uint64_t pinned_mib;
        uint32_t pct;
        Step step;
        bool started;           /* ran -d in this operation */
        NvidiaComputeMode restore; /* STEP_COMPUTE_RESTORE: the mode to set */
        MpsDoneCallback done;
        void *userdata;
        struct Op *next;
} Op;

typedef struct Entry {
        Mps *mps;
        char *uuid;
        char *base_dir, *pipe_dir, *log_dir;
        char *unit;             /* kgpu-mps@<uuid>.service */
        MpsState state;
        uint64_t pinned_mib;    /* limits in force while running */
        uint32_t pct;
        bool restarted;         /* the health check restarted it once already */
        Op *op;
        NvidiaRun *run;
        MpsSystemdJob *job;
        Op *queue;
        unsigned n_queued;
} Entry;

struct Mps {
        sd_event *event;
        char *directory;
        char *smi_path;
        char *control_path;
        char *library_path;     /* LD_LIBRARY_PATH of tools under the driver root, else NULL */
        uint64_t timeout_usec;
        ConfigMpsLauncher launcher; /* as configured, until decided */
        bool launcher_set;      /* decided (mps_set_launcher()) */
        bool systemd;           /* the decision: kgpu-mps@.service units */
        MpsSystemd *bus;        /* NULL with systemd: no systemd on the bus (each start fails) */
        Entry **entries;
        size_t n_entries;
        sd_event_source *kick_source;
        sd_event_source *check_source;
        uint64_t check_usec;
        MpsStateCallback state_cb;
        void *userdata;
};

/* mps.c: entries and operations. */
/* asprintf() that leaves NULL behind on failure (plain asprintf leaves it undefined). */
int mps_asprintf_safe(char **p, const char *fmt, ...) _printf_(2, 3);
const char *mps_strna(const char *s);
/* The tool's answer as one printable line for a D-Bus error message and the log. */
char *mps_tool_message(const char *what, const NvidiaRunResult *res, int error);
/* Sets the state and tells the state callback (when it changed). */
void mps_entry_set_state(Entry *e, MpsState state, const char *message);
/* Ends the operation under way with error (its done callback) and kicks the queue. */
void mps_entry_finish_op(Entry *e, int error, const char *message);
/* Ends it as failed: a check restarts the daemon once, an adoption just ends. */
void mps_entry_fail_op(Entry *e, int error, const char *message);
/* A health check found the daemon gone: restarted once with its limits, then failed. */
void mps_entry_check_failed(Entry *e, int r, const char *msg);

/* mps-files.c: the directories (0755 whatever the umask) and kgpu's records in them. */
int mps_entry_make_dirs(Entry *e);
void mps_entry_remove_dirs(Entry *e);
/* nvidia-smi -c's word for a compute mode. */
const char *mps_compute_mode_argument(NvidiaComputeMode mode);
/* The compute mode to restore (DEFAULT without a record; *ret_found: there was one). */
NvidiaComputeMode mps_entry_load_compute_mode(Entry *e, bool *ret_found);
int mps_entry_save_compute_mode(Entry *e, NvidiaComputeMode mode);
/* The limits in force, recorded with the daemon's pid; loaded only for that daemon. */
void mps_entry_save_limits(Entry *e);
void mps_entry_load_limits(Entry *e);

/* mps-steps.c: an operation's steps. */
/* Starts the operation e->op. */
void mps_entry_op_begin(Entry *e);
/* The defer source's callback: starts the next queued operation of every entry. */
int mps_on_kick(sd_event_source *s, void *userdata);
