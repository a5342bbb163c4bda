#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Install what is needed, build kgpu twice (normal and ASan+UBSan) and run every test.
# Ends with one line "N passed, N failed[, N skipped]" counting both builds.
#
#   sudo ./scripts/test.sh            # everything
#   sudo ./scripts/test.sh --quick    # normal build only
#
# Without --quick it also runs the integration suite again with every daemon under
# valgrind (KGPU_VALGRIND=1, normal build) and each libFuzzer target for
# KGPU_FUZZ_SECONDS (default 20) in a clang ASan+UBSan build (build-fuzz); both count
# in the final line. KGPU_SKIP_VALGRIND=1 / KGPU_SKIP_FUZZ=1 leave them out.
set -u
cd "$(dirname "$0")/.."
top=$(pwd)
quick=0
[ "${1:-}" = "--quick" ] && quick=1

if [ -z "${KGPU_SKIP_DEPS:-}" ]; then
        ./scripts/setup-deps.sh >/tmp/kgpu-setup-deps.log 2>&1 || {
                cat /tmp/kgpu-setup-deps.log; echo "setup-deps failed"; echo "0 passed, 1 failed"; exit 1; }
fi

builds=("build-test:")
[ $quick = 0 ] && builds+=("build-asan:-Db_sanitize=address,undefined -Db_lundef=false")

status=0
for spec in "${builds[@]}"; do
        dir=${spec%%:*}
        opts=${spec#*:}
        echo "=== $dir ($opts) ==="
        if [ ! -f "$dir/build.ninja" ]; then
                # shellcheck disable=SC2086
                meson setup "$dir" $opts --buildtype=debugoptimized >"$dir.setup.log" 2>&1 || {
                        cat "$dir.setup.log"; status=1; continue; }
        fi
        ninja -C "$dir" || { status=1; continue; }
        env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:verify_asan_link_order=0 \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
            meson test -C "$dir" --print-errorlogs --num-processes 2 || status=1
done

# Extra runs, each counted from its own test log (dir@logbase in the list below).
extra=()
if [ $quick = 0 ] && [ -z "${KGPU_SKIP_VALGRIND:-}" ] && [ -f build-test/build.ninja ]; then
        echo "=== build-test, integration suite under valgrind ==="
        KGPU_VALGRIND=1 meson test -C build-test --no-rebuild --suite integration \
                --logbase testlog-valgrind --print-errorlogs || status=1
        extra+=("build-test@testlog-valgrind:")
fi
if [ $quick = 0 ] && [ -z "${KGPU_SKIP_FUZZ:-}" ]; then
        echo "=== build-fuzz (clang, libFuzzer, ASan+UBSan; ${KGPU_FUZZ_SECONDS:-20} s per target) ==="
        if [ ! -f build-fuzz/build.ninja ]; then
                CC=clang meson setup build-fuzz -Dfuzzing=true -Dtests=disabled \
                        -Db_sanitize=address,undefined -Db_lundef=false \
                        --buildtype=debugoptimized >build-fuzz.setup.log 2>&1 || {
                        cat build-fuzz.setup.log; status=1; }
        fi
        if ninja -C build-fuzz; then
                env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
                    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
                    meson test -C build-fuzz --no-rebuild --suite fuzz --suite fuzz-run \
                        --print-errorlogs --num-processes 2 || status=1
        else
                status=1
        fi
        extra+=("build-fuzz:")
fi

/usr/bin/python3 - "$top" "${builds[@]}" "${extra[@]}" <<'PY'
import json, os, sys
top = sys.argv[1]
passed = failed = skipped = 0
for spec in sys.argv[2:]:
    d, _, base = spec.split(':', 1)[0].partition('@')
    log = os.path.join(top, d, 'meson-logs', (base or 'testlog') + '.json')
    if not os.path.exists(log):
        failed += 1
        print(f'{d}: no test log (build failed)')
        continue
    for line in open(log):
        r = json.loads(line).get('result')
        if r in ('OK', 'EXPECTEDFAIL'):
            passed += 1
        elif r == 'SKIP':
            skipped += 1
        else:
            failed += 1
line = f'{passed} passed, {failed} failed'
if skipped:
    line += f', {skipped} skipped'
print(line)
sys.exit(1 if failed else 0)
PY
rc=$?
[ $status != 0 ] && [ $rc = 0 ] && rc=1
exit $rc
