#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_hostile_config.py — the three daemons refuse to start on a hostile kgpu.yaml.
#
# Asserts, for each bad file below and each of kgpu-probed, kgpu-brokerd and kgpu-grpcd
# started from the build tree with KGPU_CONFIG pointing at it (no bus needed: the config
# is read before anything else): the daemon exits 1 within 10 s (no hang, no crash, no
# signal) and logs one error naming the file, the line and the key where there is one.
# Also: the broker refuses an intel.allowIDs list of 5000 ids (bounded where it is used)
# and a non-hex id (refused with the file, as the Intel plugin refuses it), and an empty stateDirectory is refused up front
# (exit 1) rather than leaving the broker without a store.

import os
import subprocess
import tempfile

import harness
from harness import check

DAEMONS = [('probe', 'kgpu-probed'), ('broker', 'kgpu-brokerd'), ('grpc', 'kgpu-grpcd')]

# name -> (file bytes, text every daemon's error must contain; {f} is the file path)
BAD = {
    'type': (b'intel:\n  sharedDevNum: many\n', '{f}:2: intel.sharedDevNum: expected an unsigned integer'),
    'range': (b'intel:\n  sharedDevNum: 99999999999999999999\n', '{f}:2: intel.sharedDevNum'),
    'unknown-key': (b'logLevel: info\nbogus:\n  key: 1\n', "{f}:3: unknown key 'bogus.key'"),
    'nul': (b'logLevel: de\0bug\n', '{f}:1: YAML syntax error'),
    'utf8': (b'logLevel: \xff\xfe\n', '{f}:1: YAML syntax error'),
    'deep': (b''.join(b'  ' * i + b'k%d:\n' % i for i in range(40)), 'nesting too deep'),
    'long-value': (b'logLevel: ' + b'a' * 5000 + b'\n', '{f}:1: logLevel: value too long'),
    'relative-path': (b'stateDirectory: var/lib\n', '{f}:1: stateDirectory: expected an absolute path'),
    'huge-file': (b'#' * (1024 * 1024 + 1), '{f}: file too large'),
}


def start(node_bin, name, config, extra_env=None):
    env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'LANG': 'C.UTF-8',
           'KGPU_CONFIG': config, 'KGPU_LOG_TARGET': 'stderr',
           'DBUS_SYSTEM_BUS_ADDRESS': 'unix:path=/nonexistent/kgpu-test-bus'}
    for k in ('ASAN_OPTIONS', 'UBSAN_OPTIONS', 'LSAN_OPTIONS'):
        if k in os.environ:
            env[k] = os.environ[k]
    env.update(extra_env or {})
    argv = [node_bin]
    if harness.VALGRIND:
        argv = ['valgrind', '--quiet', '--error-exitcode=99', '--leak-check=full',
                '--errors-for-leak-kinds=definite'] + argv
    r = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=30)
    return r.returncode, r.stdout.decode(errors='replace')


def main():
    build = harness.find_build_root()
    bins = {}
    for d, b in DAEMONS:
        p = os.path.join(build, 'daemons', d, b)
        if not os.access(p, os.X_OK):
            raise harness.Skip('%s is not built' % p)
        bins[b] = p
    with tempfile.TemporaryDirectory(prefix='kgpu-cfg-') as tmp:
        os.chmod(tmp, 0o755)
        for name, (data, want) in BAD.items():
            f = os.path.join(tmp, name + '.yaml')
            with open(f, 'wb') as fp:
                fp.write(data)
            os.chmod(f, 0o644)
            for b, path in bins.items():
                rc, out = start(path, b, f)
                check(rc == 1, '%s on %s: exit %d, expected 1:\n%s' % (b, name, rc, out[-2000:]))
                check(want.format(f=f) in out, '%s on %s: log lacks %r:\n%s' % (b, name, want.format(f=f), out[-2000:]))
            print('%-14s all three daemons exit 1: %s' % (name, [l for l in out.splitlines() if 'rror' in l][-1][:150]))

        # A directory as the config file.
        for b, path in bins.items():
            rc, out = start(path, b, tmp)
            check(rc == 1 and (tmp + ': not a regular file') in out, '%s on a directory: %d %s' % (b, rc, out[-1000:]))
        print('%-14s all three daemons exit 1' % 'directory')

        # Bounded and validated where used: the broker's PCI id filters.
        # 5000 well-formed ids: bounded where they are used. A non-hex id: refused when
        # the file is read, as the Intel plugin refuses it, naming the key and the line.
        for name, ids, want in (
                ('5000-ids', ','.join('0x%04x' % i for i in range(5000)), 'Invalid intel.allowIDs or intel.denyIDs'),
                ('non-hex', 'zz', 'intel.allowIDs: expected PCI device ids of 0x and four lowercase hex digits')):
            f = os.path.join(tmp, name + '.yaml')
            with open(f, 'w') as fp:
                fp.write('intel:\n  allowIDs: [%s]\n' % ids)
            os.chmod(f, 0o644)
            rc, out = start(bins['kgpu-brokerd'], 'kgpu-brokerd', f)
            check(rc == 1 and want in out, 'broker with allowIDs %s: exit %d:\n%s' % (name, rc, out[-1000:]))
            print('%-14s broker exits 1: %s' % (name, want))

        # An empty stateDirectory would leave the broker without a store: refused up front.
        f = os.path.join(tmp, 'empty-state.yaml')
        with open(f, 'w') as fp:
            fp.write('stateDirectory: ""\n')
        os.chmod(f, 0o644)
        rc, out = start(bins['kgpu-brokerd'], 'kgpu-brokerd', f)
        check(rc == 1 and "%s:1: stateDirectory: expected an absolute path, not an empty value, got ''" % f in out,
              'broker with an empty stateDirectory: exit %d:\n%s' % (rc, out[-2000:]))
        print('%-14s broker exits 1: stateDirectory: expected an absolute path, not an empty value' % 'empty-state')


if __name__ == '__main__':
    harness.exit_on_sigterm()
    try:
        main()
    except harness.Skip as e:
        print('SKIP: %s' % e)
        raise SystemExit(77)
    print('PASS test_hostile_config.py')
