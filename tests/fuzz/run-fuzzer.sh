#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# run-fuzzer.sh TARGET CORPUS WORKDIR — runs one libFuzzer target for a fixed time
# (KGPU_FUZZ_SECONDS, default 20) starting from its seed corpus. New inputs go to
# WORKDIR/new (never into the source tree), a crashing input to WORKDIR/artifacts/.
# Exit status: libFuzzer's (0 when the time ran out without a finding).
set -eu
exe=$1
corpus=$2
work=$3
rm -rf "$work"
mkdir -p "$work/new" "$work/artifacts"
# -error_exitcode: libFuzzer's default (77) would read as "skipped" to meson.
exec "$exe" -max_total_time="${KGPU_FUZZ_SECONDS:-20}" -timeout=10 -rss_limit_mb=2560 -error_exitcode=1 \
        -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/new" "$corpus"
