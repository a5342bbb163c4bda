#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_cdi_hook.py — kgpu-cdi-hook (tools/kgpu-cdi-hook.c) alone, as a runtime runs it:
# the OCI state on stdin, a bundle whose config.json names the root file system. What it
# must do (soname links, libcuda.so, replacing an image's link, the ld.so.conf.d file,
# the host's ldconfig run on an image that has one) and what it must refuse without
# touching anything outside the container: links whose path climbs out ("..") or is
# relative, a target with control characters, an image whose /usr/lib is a symlink to
# an absolute host directory or climbs out with "..", states without a bundle, bundles
# without a root, garbage and oversized JSON, an image's regular file at the link path.

import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check  # noqa: E402

LIBDIR = '/usr/lib/x86_64-linux-gnu'


def hook_path():
    return os.path.join(harness.find_build_root(), 'tools', 'kgpu-cdi-hook')


def bundle(work, root_path='rootfs'):
    b = tempfile.mkdtemp(dir=work)
    os.makedirs(os.path.join(b, 'rootfs'))
    with open(os.path.join(b, 'config.json'), 'w') as f:
        json.dump({'ociVersion': '1.0.2', 'root': {'path': root_path, 'readonly': False},
                   'process': {'args': ['/bin/sh']}}, f)
    return b, os.path.join(b, 'rootfs')


def run(args, state):
    if not isinstance(state, (str, bytes)):
        state = json.dumps(state)
    r = subprocess.run([hook_path()] + args, input=state.encode() if isinstance(state, str) else state,
                       capture_output=True, timeout=30)
    return r.returncode, r.stderr.decode(errors='replace')


def state_of(b):
    return {'ociVersion': '1.0.2', 'id': 'x', 'status': 'creating', 'pid': 1, 'bundle': b}


def snapshot(d):
    out = set()
    for top, dirs, files in os.walk(d):
        for n in dirs + files:
            out.add(os.path.relpath(os.path.join(top, n), d))
    return out


def main():
    name = os.path.basename(__file__)
    work = tempfile.mkdtemp(prefix='kgpu-hook-')
    outside = tempfile.mkdtemp(prefix='kgpu-hook-outside-')
    try:
        # Links made, libcuda.so, parents created, an image's link replaced.
        b, root = bundle(work)
        os.makedirs(root + LIBDIR)
        os.symlink('libcuda.so.1.old', root + LIBDIR + '/libcuda.so.1')
        rc, err = run(['create-symlinks', '--link', 'libcuda.so.550.54.15::%s/libcuda.so.1' % LIBDIR,
                       '--link', 'libcuda.so.1::%s/libcuda.so' % LIBDIR,
                       '--link', 'libnvidia-ml.so.550.54.15::/opt/new/dir/libnvidia-ml.so.1'], state_of(b))
        check(rc == 0, 'create-symlinks: %s' % err)
        check(os.readlink(root + LIBDIR + '/libcuda.so.1') == 'libcuda.so.550.54.15', 'soname link replaced')
        check(os.readlink(root + LIBDIR + '/libcuda.so') == 'libcuda.so.1', 'libcuda.so')
        check(os.readlink(root + '/opt/new/dir/libnvidia-ml.so.1') == 'libnvidia-ml.so.550.54.15', 'new dirs')
        # Again: the same links are no change and no error.
        rc, err = run(['create-symlinks', '--link', 'libcuda.so.1::%s/libcuda.so' % LIBDIR], state_of(b))
        check(rc == 0, 'idempotent: %s' % err)
        # A root given as an absolute path in config.json.
        b2, root2 = bundle(work)
        with open(os.path.join(b2, 'config.json'), 'w') as f:
            json.dump({'root': {'path': root2}}, f)
        rc, err = run(['create-symlinks', '--link', 'a::/x/a'], state_of(b2))
        check(rc == 0 and os.readlink(root2 + '/x/a') == 'a', 'absolute root.path: %s' % err)

        # An image's regular file at the link path stays.
        with open(root + LIBDIR + '/libfoo.so.1', 'w') as f:
            f.write('image\n')
        rc, err = run(['create-symlinks', '--link', 'libfoo.so.9::%s/libfoo.so.1' % LIBDIR], state_of(b))
        check(rc == 0 and 'left alone' in err, 'regular file: %d %s' % (rc, err))
        with open(root + LIBDIR + '/libfoo.so.1') as f:
            check(f.read() == 'image\n', 'regular file replaced')

        # Symlinks of the image that lead out: absolute to a host directory, and "..".
        before = snapshot(outside)
        b3, root3 = bundle(work)
        os.makedirs(root3 + '/usr')
        os.symlink(outside, root3 + '/usr/lib')
        os.symlink('../../../../../../../../..' + outside, root3 + '/escape')
        # Their targets do not exist inside the root: refused (exit 1), nothing made outside.
        rc, err = run(['create-symlinks', '--link', 'libcuda.so.550.54.15::%s/libcuda.so.1' % LIBDIR,
                       '--link', 'x::/escape/x'], state_of(b3))
        check(rc == 1 and 'in the container' in err, 'escaping image: %d %s' % (rc, err))
        check(snapshot(outside) == before, 'the hook wrote outside the container: %r' % (snapshot(outside) - before))
        # Once they exist inside the root, the links land there: /usr/lib -> <outside> is
        # <root><outside>, and "../../.." stops at the root.
        os.makedirs(root3 + outside + LIBDIR[len('/usr/lib'):])
        rc, err = run(['create-symlinks', '--link', 'libcuda.so.550.54.15::%s/libcuda.so.1' % LIBDIR,
                       '--link', 'x::/escape/x'], state_of(b3))
        check(rc == 0, 'escaping image, targets inside: %s' % err)
        check(snapshot(outside) == before, 'the hook wrote outside the container: %r' % (snapshot(outside) - before))
        check(os.path.islink(root3 + outside + LIBDIR[len('/usr/lib'):] + '/libcuda.so.1'), 'link in the root')
        check(os.path.islink(root3 + outside + '/x'), '.. link in the root')
        rc, err = run(['update-ldcache', '--folder', LIBDIR], state_of(b3))
        check(rc == 0 and snapshot(outside) == before, 'update-ldcache wrote outside: %s' % err)

        # Refused link paths and targets: exit 1, nothing made.
        for spec in ('a::../x', 'a::/usr/../../x', 'a::/usr/./x', 'a::x/y', 'a::/', '::/x', 'a::/x/',
                     'a\nb::/x', 'a::/x::/y', 'noseparator', 'a::/x//y'):
            snap = snapshot(work)
            rc, err = run(['create-symlinks', '--link', spec], state_of(b))
            check(rc == 1 and 'kgpu-cdi-hook:' in err, '%r accepted: %d %s' % (spec, rc, err))
            check(snapshot(work) == snap, '%r made something' % spec)
        for args in (['update-ldcache', '--folder', '../x'], ['update-ldcache', '--folder', 'lib'],
                     ['update-ldcache', '--folder', '/x', '--ldconfig-path', 'ldconfig'],
                     ['create-symlinks', '--folder', '/x'], ['nope'], ['create-symlinks', '--link']):
            rc, err = run(args, state_of(b))
            check(rc == 1 and 'kgpu-cdi-hook:' in err, '%r accepted: %d %s' % (args, rc, err))

        # Bad states and bundles: a clear error, exit 1.
        b4, _ = bundle(work, root_path='')
        with open(os.path.join(work, 'notjson'), 'w') as f:
            f.write('{')
        for state, words in ((b'', 'bundle'), (b'{', 'bundle'), (b'[]', 'bundle'), ({'bundle': 'relative'}, 'bundle'),
                             ({'bundle': 7}, 'bundle'), ({'id': 'x'}, 'bundle'), (b'\xff\xfe', 'bundle'),
                             ({'bundle': '/nonexistent/kgpu'}, 'bundle'), (state_of(b4), 'root.path'),
                             ({'bundle': work}, 'config.json'),
                             (b'{"bundle": "' + b'[' * 100000 + b'"}', 'bundle'),
                             (b'[' * 100000, 'bundle'), (b' ' * (2 * 1024 * 1024), 'stdin')):
            rc, err = run(['create-symlinks', '--link', 'a::/a'], state)
            check(rc == 1 and words in err, 'state %r: %d %s' % (str(state)[:60], rc, err))
        # A deep config.json.
        b5, _ = bundle(work)
        with open(os.path.join(b5, 'config.json'), 'w') as f:
            f.write('{"x":' + '[' * 1000 + ']' * 1000 + ',"root":{"path":"rootfs"}}')
        rc, err = run(['create-symlinks', '--link', 'a::/a'], state_of(b5))
        check(rc == 1 and 'root.path' in err, 'deep config.json: %d %s' % (rc, err))

        # update-ldcache: the folders file; the host's ldconfig only for an image with one.
        rc, err = run(['update-ldcache', '--folder', LIBDIR, '--folder', '/opt/lib'], state_of(b))
        check(rc == 0, 'update-ldcache: %s' % err)
        with open(root + '/etc/ld.so.conf.d/00-kgpu-nvidia.conf') as f:
            lines = f.read().splitlines()
        check(lines[1:] == [LIBDIR, '/opt/lib'], 'conf %r' % lines)
        check(not os.path.exists(root + '/etc/ld.so.cache'), 'ldconfig ran on an image without one')
        ldconfig = shutil.which('ldconfig') or '/sbin/ldconfig'
        b6, root6 = bundle(work)
        os.makedirs(root6 + '/sbin')
        shutil.copyfile(ldconfig, root6 + '/sbin/ldconfig')
        os.makedirs(root6 + '/etc')
        with open(root6 + '/etc/ld.so.conf', 'w') as f:
            f.write('include /etc/ld.so.conf.d/*.conf\n')
        os.makedirs(root6 + LIBDIR)
        rc, err = run(['update-ldcache', '--folder', LIBDIR, '--ldconfig-path', ldconfig], state_of(b6))
        check(rc == 0, 'update-ldcache with ldconfig: %s' % err)
        check(os.path.exists(root6 + '/etc/ld.so.cache'), 'no ld.so.cache written in the image')
    except BaseException:
        import traceback
        traceback.print_exc()
        print('FAIL %s' % name)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(outside, ignore_errors=True)
    print('PASS %s' % name)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
