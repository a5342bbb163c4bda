#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_cdi_consumer.py — kgpu's CDI specs as a real CDI consumer reads them (issue 13):
# the probe (fake nvidia-smi, scenario "l40s", driver 595.80, next to the Intel testbed
# "two-gpus") writes kgpu-nvidia.yaml for a fake driver root — the real driver's file
# names for that version, the ld.so.cache the real `ldconfig -r` wrote for them
# (tests/data/ldcache/), an nvidia-smi script, GSP firmware — and device nodes made with
# mknod (char 1:3, /dev/null's numbers; /dev/null bound over a file where mknod is
# refused) under the device root; then a container is given
# the NVIDIA GPU and an Intel GPU by their CDI names:
# - podman (crun, else runc, a busybox-static image imported from a local tar, the spec directory
#   given with --cdi-spec-dir, or bound over /run/cdi in a private mount namespace):
#   inside, the device nodes, the driver libraries with their .so.1 links (made by
#   kgpu-cdi-hook), libcuda.so, nvidia-smi (run), the firmware, the ld.so.conf.d file and
#   NVIDIA_VISIBLE_DEVICES=void;
# - where podman cannot run a container (tried first, e.g. in a systemd-nspawn CI), the
#   reference CDI library (Debian's container-device-interface Go package, built here
#   offline in GOPATH mode, tests/cdi-validate/) loads the specs and applies the devices
#   to an OCI spec: the same things are checked there (device nodes, mounts, hooks, env),
#   and the hooks it would run are run on a bundle of that OCI spec.
# Twice: driver and device nodes under one root (flags.nvidiaDriverRoot, nvidiaDevRoot
# left to default to it), then driver root and device root apart (flags.nvidiaDevRoot).
# The output says which consumer ran; neither running is a failure, not a skip.
# KGPU_TEST_CDI_CONSUMER=reference skips podman (to check the fallback where podman runs).

import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
import zlib

import harness
from harness import check

VERSION = '595.80'      # the l40s scenario's driver
LIBDIR = '/usr/lib/x86_64-linux-gnu'
NV_LIBS = ['libcuda', 'libnvidia-ml', 'libnvidia-ptxjitcompiler', 'libnvidia-opticalflow']
NV_NODES = ['/dev/nvidia0', '/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools']
BINARIES = ['nvidia-smi', 'nvidia-debugdump', 'nvidia-persistenced', 'nvidia-cuda-mps-control',
            'nvidia-cuda-mps-server']
FIRMWARE = ['gsp_ga10x.bin', 'gsp_tu10x.bin']
CACHE = os.path.join(harness.SOURCE_ROOT, 'tests', 'data', 'ldcache', 'ld.so.cache')
INTEL_KIND = 'gpu.intel.com/gpu'
NV_KIND = 'nvidia.com/gpu'
INTEL_NODES = ['/dev/dri/card0', '/dev/dri/renderD128']
RUNROOTS = set()


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)
    os.chmod(path, mode)


BOUND = []   # device nodes made by binding /dev/null, where mknod is not allowed


def mknod(path):
    """A char device node with /dev/null's numbers; where mknod is refused (a container's
    device cgroup), /dev/null bound over an empty file, which reads the same to stat."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        open(path, 'w').close()
        subprocess.run(['mount', '--bind', '/dev/null', path], check=True)
        BOUND.append(path)


def make_driver_root(root, dev_root):
    """The driver's files as its installer leaves them, ldconfig's links, the cache."""
    os.makedirs(root, mode=0o755, exist_ok=True)
    for lib in NV_LIBS + ['libkgpu-other']:
        real = '%s.so.%s' % (lib, VERSION) if lib != 'libkgpu-other' else 'libkgpu-other.so.2.0.0'
        write(root + LIBDIR + '/' + real, 'fake %s\n' % real)
        os.symlink(real, root + LIBDIR + '/%s.so.%s' % (lib, '2' if lib == 'libkgpu-other' else '1'))
    os.symlink('libcuda.so.1', root + LIBDIR + '/libcuda.so')
    os.makedirs(root + '/etc', exist_ok=True)
    shutil.copyfile(CACHE, root + '/etc/ld.so.cache')
    for b in BINARIES:
        write(root + '/usr/bin/' + b, '#!/bin/sh\necho "%s %s from the driver root"\n' % (b, VERSION), 0o755)
    for fw in FIRMWARE:
        write(root + '/lib/firmware/nvidia/%s/%s' % (VERSION, fw), 'firmware\n')
    for n in NV_NODES:
        mknod(dev_root + n)


def intel_host_nodes():
    """The Intel testbed's nodes, made on the host where it has none (a CI machine has
    no GPU); returns those made, to remove afterwards."""
    made = []
    if not os.path.isdir('/dev/dri'):
        os.mkdir('/dev/dri', 0o755)
        made.append('/dev/dri')
    for n in INTEL_NODES:
        if not os.path.exists(n):
            mknod(n)
            made.append(n)
    return made


def wait_spec(node, what):
    path = os.path.join(node.cdi_dir, 'kgpu-nvidia.yaml')
    end = time.monotonic() + 20
    while time.monotonic() < end:
        try:
            with open(path) as f:
                text = f.read()
            if what in text:
                return text
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise AssertionError('kgpu-nvidia.yaml never named %s' % what)


# --- podman ----------------------------------------------------------------------------

def podman_has_cdi_spec_dir():
    r = subprocess.run(['podman', '--help'], capture_output=True, text=True, timeout=60)
    return '--cdi-spec-dir' in r.stdout


def podman_base(work, cdi_dir, runtime='crun'):
    """podman with private storage. A podman without --cdi-spec-dir (Debian bookworm's
    4.3) reads only /etc/cdi and /var/run/cdi: it runs in a mount namespace of its own
    where the node's spec directory is bound over /run/cdi, so the host's is untouched."""
    # podman takes a runroot of at most 50 characters: a short one beside the work folder.
    runroot = '/tmp/kgpu-pm-%08x' % (zlib.crc32(work.encode()))
    RUNROOTS.add(runroot)
    argv = ['podman', '--root', os.path.join(work, 'storage'), '--runroot', runroot,
            '--storage-driver', 'vfs', '--cgroup-manager', 'cgroupfs', '--events-backend', 'file',
            '--runtime', runtime]
    if podman_has_cdi_spec_dir():
        return argv + ['--cdi-spec-dir', cdi_dir]
    return ['unshare', '--mount', '--propagation', 'private', 'sh', '-c',
            'mkdir -p /run/cdi && mount --bind "$0" /run/cdi && exec "$@"', cdi_dir] + argv


def podman_image(work, cdi_dir):
    """Imports a busybox-static image from a local tar; returns its name or raises."""
    busybox = shutil.which('busybox') or '/bin/busybox'
    os.makedirs(work, exist_ok=True)
    tar = os.path.join(work, 'busybox.tar')
    with tarfile.open(tar, 'w') as t:
        t.add(busybox, arcname='bin/busybox')
        for name in ('sh', 'ls', 'cat', 'readlink', 'test', 'env'):
            info = tarfile.TarInfo('bin/' + name)
            info.type = tarfile.SYMTYPE
            info.linkname = 'busybox'
            t.addfile(info)
    r = subprocess.run(podman_base(work, cdi_dir) + ['import', tar, 'kgpu-test-busybox:latest'],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError('podman import: %s' % (r.stderr.strip() or r.stdout.strip()))
    return 'kgpu-test-busybox:latest'


INSIDE = r'''
for n in %(nodes)s; do [ -c "$n" ] && echo "node $n"; done
for l in %(libs)s; do
  [ -f %(libdir)s/$l.so.%(version)s ] && echo "lib $l.so.%(version)s"
  echo "link $l.so.1 $(readlink %(libdir)s/$l.so.1)"
done
echo "link libcuda.so $(readlink %(libdir)s/libcuda.so)"
echo "smi $(/usr/bin/nvidia-smi)"
for f in /lib/firmware/nvidia/%(version)s/*; do echo "firmware $f"; done
echo "ldconf $(cat /etc/ld.so.conf.d/00-kgpu-nvidia.conf | grep -v '^#')"
echo "env NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"
'''


def run_podman(work, cdi_dir, devices, runtime):
    image = podman_image(work, cdi_dir)
    script = INSIDE % {'nodes': ' '.join(NV_NODES + INTEL_NODES), 'libs': ' '.join(NV_LIBS),
                       'libdir': LIBDIR, 'version': VERSION}
    # Low limits: a sandbox (systemd-nspawn, a container) may forbid raising them, which
    # podman does by default as root, and even setting them to the hard limits it has.
    argv = podman_base(work, cdi_dir, runtime) + ['run', '--rm', '--pull', 'never', '--network', 'none',
                                                  '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024']
    for d in devices:
        argv += ['--device', d]
    argv += [image, '/bin/sh', '-c', script]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        raise RuntimeError('podman run (exit %d): %s' % (r.returncode, (r.stderr or r.stdout).strip()[-2000:]))
    return r.stdout


def check_inside(out):
    lines = set(out.splitlines())
    for n in NV_NODES + INTEL_NODES:
        check('node ' + n in lines, 'no device node %s in the container:\n%s' % (n, out))
    for lib in NV_LIBS:
        check('lib %s.so.%s' % (lib, VERSION) in lines, 'no %s in the container:\n%s' % (lib, out))
        check('link %s.so.1 %s.so.%s' % (lib, lib, VERSION) in lines, 'no %s.so.1 link:\n%s' % (lib, out))
    check('link libcuda.so libcuda.so.1' in lines, 'no libcuda.so link:\n%s' % out)
    check('smi nvidia-smi %s from the driver root' % VERSION in lines, 'nvidia-smi did not run:\n%s' % out)
    for fw in FIRMWARE:
        check('firmware /lib/firmware/nvidia/%s/%s' % (VERSION, fw) in lines, 'no %s:\n%s' % (fw, out))
    check('ldconf ' + LIBDIR in lines, 'no ld.so.conf.d entry:\n%s' % out)
    check('env NVIDIA_VISIBLE_DEVICES=void' in lines, 'env:\n%s' % out)


# --- the reference CDI library -----------------------------------------------------------

def build_validator(work):
    os.makedirs(work, exist_ok=True)
    src = os.path.join(harness.SOURCE_ROOT, 'tests', 'cdi-validate', 'main.go')
    out = os.path.join(work, 'cdi-validate')
    # The Go build cache lives in the build tree: the library compiles once, not per run.
    cache = os.path.join(harness.find_build_root(), 'tests', 'gocache')
    env = dict(os.environ, GO111MODULE='off', GOPATH='/usr/share/gocode', GOCACHE=cache,
               GOFLAGS='', CGO_ENABLED='0', HOME=work)
    r = subprocess.run(['go', 'build', '-o', out, src], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise RuntimeError('go build of the CDI validator: %s' % (r.stderr.strip()[-2000:]))
    return out


def run_reference(work, cdi_dir, devices, hook):
    validator = build_validator(work)
    r = subprocess.run([validator, cdi_dir] + devices, capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, 'the CDI library refused the specs: %s' % r.stderr)
    spec = json.loads(r.stdout)
    # Device nodes with the numbers of the host's nodes.
    devs = {d['path']: d for d in spec.get('linux', {}).get('devices', [])}
    for n in NV_NODES + INTEL_NODES:
        check(n in devs and devs[n]['type'] == 'c' and (devs[n]['major'], devs[n]['minor']) == (1, 3)
              or n in INTEL_NODES and n in devs, 'device %s: %r' % (n, devs.get(n)))
    mounts = {m['destination']: m for m in spec.get('mounts', [])}
    for lib in NV_LIBS:
        dest = '%s/%s.so.%s' % (LIBDIR, lib, VERSION)
        check(dest in mounts and os.path.isfile(mounts[dest]['source']), 'mount %s: %r' % (dest, mounts.get(dest)))
        check(set(mounts[dest]['options']) >= {'ro', 'nosuid', 'nodev', 'bind'}, 'options %r' % mounts[dest])
    for b in BINARIES:
        check('/usr/bin/' + b in mounts, 'no mount of %s' % b)
    for fw in FIRMWARE:
        check('/lib/firmware/nvidia/%s/%s' % (VERSION, fw) in mounts, 'no mount of %s' % fw)
    env = spec.get('process', {}).get('env', [])
    check('NVIDIA_VISIBLE_DEVICES=void' in env, 'env %r' % env)
    hooks = spec.get('hooks', {}).get('createContainer', [])
    check(len(hooks) == 2 and all(h['path'] == hook for h in hooks), 'hooks %r' % hooks)
    # Run the hooks as a runtime would, on a bundle whose root has what the mounts give.
    bundle = os.path.join(work, 'bundle')
    rootfs = os.path.join(bundle, 'rootfs')
    os.makedirs(rootfs)
    with open(os.path.join(bundle, 'config.json'), 'w') as f:
        json.dump(dict(spec, root={'path': 'rootfs'}), f)
    for dest, m in mounts.items():
        os.makedirs(os.path.dirname(rootfs + dest), exist_ok=True)
        if os.path.isfile(m['source']):
            shutil.copyfile(m['source'], rootfs + dest)
    state = json.dumps({'ociVersion': '1.0.2', 'id': 'kgpu-test', 'status': 'creating', 'pid': os.getpid(),
                        'bundle': bundle})
    for h in hooks:
        r = subprocess.run([h['path']] + h['args'][1:], input=state, capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, 'hook %r: %s' % (h['args'], r.stderr))
    for lib in NV_LIBS:
        link = '%s%s/%s.so.1' % (rootfs, LIBDIR, lib)
        check(os.readlink(link) == '%s.so.%s' % (lib, VERSION), 'link %s' % link)
        check(os.path.isfile(link), 'link %s leads nowhere' % link)
    check(os.readlink(rootfs + LIBDIR + '/libcuda.so') == 'libcuda.so.1', 'libcuda.so')
    with open(rootfs + '/etc/ld.so.conf.d/00-kgpu-nvidia.conf') as f:
        check(LIBDIR in f.read().splitlines(), 'ld.so.conf.d')


# --- the test ------------------------------------------------------------------------------

def one_layout(label, driver_root, dev_root, config, work):
    hook = harness.find_build_root() + '/tools/kgpu-cdi-hook'
    node = harness.Node(broker=False, kubelet=False, nvidia_scenario='l40s', resources=[],
                        config_extra=config, extra_env={'KGPU_CDI_HOOK': hook})
    consumer = None
    errors = []
    try:
        node.start()
        text = wait_spec(node, 'libcuda.so.%s' % VERSION)
        check('hostPath: "%s/dev/nvidia0"' % dev_root in text, 'device root not in the spec:\n%s' % text)
        check('hostPath: "%s%s/libcuda.so.%s"' % (driver_root, LIBDIR, VERSION) in text,
              'driver root not in the spec:\n%s' % text)
        with open(os.path.join(node.cdi_dir, 'kgpu-intel-gpu.json')) as f:
            intel = json.load(f)
        intel_name = [d['name'] for d in intel['devices']
                      if INTEL_NODES[0] in [n['path'] for n in d['containerEdits']['deviceNodes']]][0]
        devices = ['%s=0' % NV_KIND, '%s=%s' % (INTEL_KIND, intel_name)]
        # crun first (crun 1.8 refuses a host with hybrid cgroups), then runc.
        runtimes = [r for r in ('crun', 'runc') if shutil.which(r)]
        if not shutil.which('podman') or not runtimes:
            errors.append('podman: podman, crun or runc not installed')
        if os.environ.get('KGPU_TEST_CDI_CONSUMER') == 'reference':
            runtimes = []               # the fallback alone, to check it where podman runs
            errors.append('podman: not tried (KGPU_TEST_CDI_CONSUMER=reference)')
        for runtime in runtimes if shutil.which('podman') else []:
            try:
                out = run_podman(os.path.join(work, 'podman-%s-%s' % (label, runtime)), node.cdi_dir, devices,
                                 runtime)
                check_inside(out)
                consumer = 'podman with %s' % runtime
                break
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                errors.append('podman with %s: %s' % (runtime, e))
        if consumer is None:
            if shutil.which('go'):
                try:
                    run_reference(os.path.join(work, 'ref-' + label), node.cdi_dir, devices, hook)
                    consumer = 'the reference CDI library'
                except RuntimeError as e:
                    errors.append('reference CDI library: %s' % e)
            else:
                errors.append('reference CDI library: go not installed')
        check(consumer is not None, 'no CDI consumer could run:\n' + '\n'.join(errors))
        for e in errors:
            print('%s: tried first: %s' % (label, e))
        print('%s: CDI consumer that ran: %s (devices %s)' % (label, consumer, ' '.join(devices)))
    except BaseException:
        node.dump_logs()
        raise
    finally:
        rcs = node.stop(dump_on_unclean=True)
    check(all(v in (0, None) for v in rcs.values()), 'daemons did not exit cleanly: %r' % rcs)
    return consumer


def main():
    name = os.path.basename(__file__)
    harness.exit_on_sigterm()
    if not harness.is_root():
        print('SKIP %s: needs root (device nodes, podman)' % name)
        return 77
    work = tempfile.mkdtemp(prefix='kgpu-cdi-')
    os.chmod(work, 0o755)
    made = []
    try:
        made = intel_host_nodes()
        # One root for the driver and its device nodes (nvidiaDevRoot defaults to it).
        root = os.path.join(work, 'driver')
        make_driver_root(root, root)
        c1 = one_layout('driver-root', root, root, 'flags:\n  nvidiaDriverRoot: %s\n' % root, work)
        # The driver in one root, the device nodes in another.
        root2 = os.path.join(work, 'driver2')
        dev2 = os.path.join(work, 'devroot')
        os.makedirs(dev2, mode=0o755)
        make_driver_root(root2, dev2)
        c2 = one_layout('dev-root', root2, dev2,
                        'flags:\n  nvidiaDriverRoot: %s\n  nvidiaDevRoot: %s\n' % (root2, dev2), work)
    except BaseException:
        import traceback
        traceback.print_exc()
        print('FAIL %s' % name)
        return 1
    finally:
        for n in reversed(BOUND):
            subprocess.run(['umount', n])
        for n in reversed(made):
            (os.rmdir if os.path.isdir(n) else os.unlink)(n)
        subprocess.run(['rm', '-rf', work])
        for r in RUNROOTS:
            subprocess.run(['rm', '-rf', r])
    print('PASS %s (CDI consumers: %s, %s)' % (name, c1, c2))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
