/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-failure.h — what nvidia.c takes from nvidia-failure.c: the text of a tool run
 * and the one-line description of a failed one. For the probe's NVIDIA files only.
 *
 * Contract: nvidia_describe_failure() writes printable, valid UTF-8 into buf (at most
 * size bytes, NUL-terminated): "timed out", the runner's error, nvidia-smi's own error
 * line when it is one kgpu knows, else "unrecognised output (exit status N): \"<the first
 * NVIDIA_QUOTE_MAX bytes, control characters, \\ and \" escaped>\"[...]" or "exit status
 * N, no output", followed by "; parser: <parse_error>" when the parser complained.
 */
#pragma once

#include <stddef.h>

#include "daemons/probe/nvidia-runner.h"
#include "daemons/probe/nvidia-smi.h"

#define NVIDIA_QUOTE_MAX 200U
/* Room for any description. */
#define NVIDIA_FAILURE_MAX (NVIDIA_QUOTE_MAX * 4U + NVIDIA_MESSAGE_MAX + 128U)

/* The run's stdout, or its stderr when stdout is empty ("" when neither). */
const char *nvidia_result_text(const NvidiaRunResult *res, size_t *ret_len);

/* One line describing a failed run (run_error: the runner's; parse_r, parse_error: the
 * parser's). */
void nvidia_describe_failure(int run_error, int parse_r, const NvidiaRunResult *res, const char *parse_error,
                             char *buf, size_t size);

/* The text without the lines that name a GPU lost (nvidia-smi prints one in place of each
 * lost GPU and goes on with the others), NUL-terminated; NULL on allocation failure. */
char *nvidia_drop_lost_lines(const char *t, size_t len, size_t *ret_len);
