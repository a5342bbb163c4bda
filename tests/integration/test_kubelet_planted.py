#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_kubelet_planted.py — what another user plants at kubelet.sock is refused.
#
# The node starts without a kubelet; its device-plugins directory is made as the kubelet
# makes it (0750 root). Four things are planted in turn at kubelet.sock, each owned by
# the kgpu user (the attacker this guards against): a symlink to a real, listening
# socket elsewhere; a listening socket; a regular file; a FIFO. Asserts for each: the
# probe refuses it (io.kgpu.Kubelet1.KubeletState says "refused: ..." naming what it is
# and its owner), grpcd logs why at warning (path, what is there, its user), nothing
# connects to the planted socket, nothing registers, and ConnectKubelet called as kgpu
# is refused with io.kgpu.Error.Refused. Then the real kubelet comes and both resources
# register. kgpuctl status shows the refusal while it lasts.

import os
import pwd
import socket
import subprocess
import time

import harness
import kubelet_sim
from harness import check, TWO_GPUS, GRPC_USER, PROBE_BUS

KUBELET_IFACE = 'io.kgpu.Kubelet1'


def kubelet_state(node):
    r = node.busctl('get-property', PROBE_BUS, '/io/kgpu/Probe1', KUBELET_IFACE, 'KubeletState')
    return r['data']


def listening_socket(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(8)
    s.settimeout(0.05)
    return s


def run(node):
    kgpu = pwd.getpwnam(GRPC_USER)
    kubelet_sim.make_kubelet_dir(node.plugin_dir)
    path = os.path.join(node.plugin_dir, 'kubelet.sock')
    grpc = node.daemons['grpc']
    elsewhere = os.path.join(node.tmp, 'elsewhere.sock')
    real = listening_socket(elsewhere)

    # Each thing is made with its owner in a staging directory on the same file system
    # and renamed into place, so it appears at kubelet.sock whole, as kgpu's.
    staging = os.path.join(node.tmp, 'staging')
    os.mkdir(staging)
    tmp = os.path.join(staging, 'kubelet.sock')

    def plant_symlink():
        os.symlink(elsewhere, tmp)
        os.lchown(tmp, kgpu.pw_uid, kgpu.pw_gid)
        return 'a symbolic link owned by uid %d (%s)' % (kgpu.pw_uid, GRPC_USER), None

    def plant_socket():
        s = listening_socket(tmp)
        os.chown(tmp, kgpu.pw_uid, kgpu.pw_gid)
        return 'a socket owned by uid %d (%s)' % (kgpu.pw_uid, GRPC_USER), s

    def plant_file():
        with open(tmp, 'w') as f:
            f.write('not a socket\n')
        os.chown(tmp, kgpu.pw_uid, kgpu.pw_gid)
        return 'a regular file owned by uid %d (%s)' % (kgpu.pw_uid, GRPC_USER), None

    def plant_fifo():
        os.mkfifo(tmp)
        os.chown(tmp, kgpu.pw_uid, kgpu.pw_gid)
        return 'a FIFO owned by uid %d (%s)' % (kgpu.pw_uid, GRPC_USER), None

    for plant in (plant_symlink, plant_socket, plant_file, plant_fifo):
        what, server = plant()
        os.rename(tmp, path)
        node.wait_for(lambda: check(kubelet_state(node) == 'refused: ' + what +
                                    (', not by uid 0 (root)' if 'socket owned' in what else ', not a socket'),
                                    'KubeletState %r' % kubelet_state(node)), 5, grpc, 'the refusal of ' + what)
        # grpcd says why, at warning, with the path and its own user.
        node.wait_for(lambda: check(any('warning' in l and path in l and what in l and 'uid %d (%s)' % (
            kgpu.pw_uid, GRPC_USER) in l for l in grpc.log_text().splitlines()),
            'grpcd log lacks the refusal of %s' % what), 5, grpc, 'grpcd logging the refusal')
        # The front end's own call is refused too.
        r = node.busctl('call', PROBE_BUS, '/io/kgpu/Probe1', KUBELET_IFACE, 'ConnectKubelet',
                        user=GRPC_USER, check=False, json_out=False)
        check(r.returncode != 0 and b'Refusing ' + path.encode() in r.stderr and what.encode() in r.stderr,
              'ConnectKubelet as kgpu: rc %d %r' % (r.returncode, r.stderr))
        # kgpuctl status shows the refusal.
        p = subprocess.run([node.bin('tools', 'kgpuctl'), 'status'], capture_output=True, text=True,
                           env=node._env({}), timeout=20)
        check('Kubelet socket: refused: ' + what in p.stdout, 'kgpuctl status: %r' % p.stdout)
        # Nothing reached a planted or symlinked socket, nothing registered.
        time.sleep(0.3)
        for s in (real, server):
            if s is None:
                continue
            try:
                c, _ = s.accept()
                c.close()
                raise AssertionError('something connected to a planted socket (%s)' % what)
            except socket.timeout:
                pass
        if server is not None:
            server.close()
        os.unlink(path)

    # Nothing was registered with anybody; now the real kubelet comes.
    node.kubelet = kubelet_sim.KubeletSim(node.plugin_dir, node.pod_resources_socket, t0=node.t0).start()
    node.kubelet.wait_connected(sorted(TWO_GPUS), timeout=15)
    node.wait_for(lambda: check(kubelet_state(node) == 'present', 'KubeletState %r' % kubelet_state(node)),
                  5, grpc, 'the kubelet socket present')
    real.close()


if __name__ == '__main__':
    harness.run_test(run, need_root=True, kubelet=False)
