#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_kubelet_real.py — kgpu on a kubelet that presents itself as a real one does.
#
# The simulator runs as root with umask 0022 and makes the kubelet's root, device-plugins/
# and pod-resources/ 0750 root:root, its sockets by a plain listen (srwxr-xr-x root:root):
# the kgpu user can neither traverse to them nor connect to them, which this test shows
# first. Asserts then: both Intel resources register, stream and allocate; grpcd (uid
# kgpu) still cannot open the directory, and its plugin sockets were made by the root
# probe (root:root 0600); as kgpu, nothing in device-plugins/, pod-resources/ or the
# kubelet's root can be created, renamed or removed (each try EACCES, every entry as
# before); PodResources List is called through the probe (grpcd reconciles at start); a
# kubelet restart (every socket removed, kubelet.sock made again)
# is followed by re-registration and allocation on the new sockets; `kgpuctl status`
# shows the kubelet socket present and both sockets serving; nothing of the kubelet's
# directories changed mode or owner.

import os
import pwd
import stat
import subprocess

import harness
import kubelet_sim
from harness import check, TWO_GPUS, GRPC_USER


def as_user_connect(node, path, user=GRPC_USER):
    """Tries to connect to a unix socket as `user`; returns the errno name or 'ok'."""
    code = ('import errno, socket, sys\n'
            's = socket.socket(socket.AF_UNIX)\n'
            'try:\n'
            '    s.connect(sys.argv[1]); print("ok")\n'
            'except OSError as e:\n'
            '    print(errno.errorcode.get(e.errno, str(e.errno)))\n')
    r = subprocess.run(['setpriv', '--reuid=' + user, '--regid=' + harness._group_of(user), '--clear-groups',
                        '/usr/bin/python3', '-c', code, path], capture_output=True, text=True, timeout=20)
    return r.stdout.strip() or r.stderr.strip()


def as_user_fs(node, op, *paths, user=GRPC_USER):
    """One file system operation as `user` (create: a new file; mkdir; rename: a to b;
    unlink); returns the errno name or 'ok'."""
    code = ('import errno, os, sys\n'
            'op, p = sys.argv[1], sys.argv[2:]\n'
            'try:\n'
            '    if op == "create": os.close(os.open(p[0], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))\n'
            '    elif op == "mkdir": os.mkdir(p[0])\n'
            '    elif op == "rename": os.rename(p[0], p[1])\n'
            '    elif op == "unlink": os.unlink(p[0])\n'
            '    print("ok")\n'
            'except OSError as e:\n'
            '    print(errno.errorcode.get(e.errno, str(e.errno)))\n')
    r = subprocess.run(['setpriv', '--reuid=' + user, '--regid=' + harness._group_of(user), '--clear-groups',
                        '/usr/bin/python3', '-c', code, op] + list(paths), capture_output=True, text=True, timeout=20)
    return r.stdout.strip() or r.stderr.strip()


def tree(dirs):
    """Every entry of the directories: name -> (inode, mode, owner, group)."""
    out = {}
    for d in dirs:
        out[d] = (os.lstat(d).st_ino, os.lstat(d).st_mode, os.lstat(d).st_uid, os.lstat(d).st_gid)
        for n in os.listdir(d):
            st = os.lstat(os.path.join(d, n))
            out[os.path.join(d, n)] = (st.st_ino, st.st_mode, st.st_uid, st.st_gid)
    return out


def mode_owner(path):
    st = os.lstat(path)
    return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid


def run(node):
    k = node.kubelet
    root_dirs = [node.kubelet_root, node.plugin_dir, os.path.dirname(node.pod_resources_socket)]
    before = {d: mode_owner(d) for d in root_dirs}
    for d in root_dirs:
        check(before[d] == (0o750, 0, 0), '%s is %o uid %d gid %d, not 0750 root:root as the kubelet makes it'
              % ((d,) + before[d]))
    for sock in (k.kubelet_socket, node.pod_resources_socket):
        m, uid, _ = mode_owner(sock)
        check(m == 0o755 and uid == 0, '%s: mode %o uid %d, expected 0755 root (umask 0022)' % (sock, m, uid))
    # The real node's problem, shown: the kgpu user reaches neither socket by itself.
    for sock in (k.kubelet_socket, node.pod_resources_socket):
        got = as_user_connect(node, sock)
        check(got == 'EACCES', 'connect as %s to %s: %s, expected EACCES' % (GRPC_USER, sock, got))

    # Both resources registered (start() waited), stream and allocate.
    clients = k.wait_connected(sorted(TWO_GPUS), timeout=10)
    for res, (gpu, card, render) in TWO_GPUS.items():
        check([d['id'] for d in clients[res].devices()] == [gpu], '%s devices %r' % (res, clients[res].devices()))
        c = clients[res].allocate([gpu])
        check(sorted(d['host_path'] for d in c['devices']) == sorted([card, render]),
              '%s: Allocate answered %r' % (res, c))
        sock = os.path.join(node.plugin_dir, 'kgpu-%s.sock' % res.replace('/', '-'))
        m, uid, gid = mode_owner(sock)
        check(m == 0o600 and uid == 0 and gid == 0, '%s: mode %o %d:%d, expected 0600 root:root' % (sock, m, uid, gid))

    # grpcd itself has no access to the directory.
    gpid = node.daemons['grpc'].pid
    st = harness.proc_status(gpid)
    check(st['Uid'][1] == pwd.getpwnam(GRPC_USER).pw_uid, 'grpcd euid %r' % st['Uid'])
    r = subprocess.run(['setpriv', '--reuid=' + GRPC_USER, '--regid=' + harness._group_of(GRPC_USER),
                        '--clear-groups', 'ls', node.plugin_dir], capture_output=True, text=True)
    check(r.returncode != 0 and 'Permission denied' in r.stderr, 'kgpu could list %s: %r' % (node.plugin_dir, r))

    # As kgpu, nothing in the kubelet's directories can be created, renamed or removed.
    pr_dir = os.path.dirname(node.pod_resources_socket)
    plugin_sock = os.path.join(node.plugin_dir, kubelet_sim.socket_name_for(harness.RES_I915))
    before_tree = tree(root_dirs)
    check(plugin_sock in before_tree and k.kubelet_socket in before_tree, 'sockets missing: %r' % sorted(before_tree))
    for what, op, paths in (
            ('a file in the kubelet\'s root', 'create', [os.path.join(node.kubelet_root, 'kgpu-evil')]),
            ('a file in device-plugins/', 'create', [os.path.join(node.plugin_dir, 'kgpu-evil.sock')]),
            ('a file in pod-resources/', 'create', [os.path.join(pr_dir, 'kgpu-evil')]),
            ('a directory in device-plugins/', 'mkdir', [os.path.join(node.plugin_dir, 'kgpu-evil')]),
            ('renaming kubelet.sock', 'rename', [k.kubelet_socket, k.kubelet_socket + '.old']),
            ('renaming a plugin socket over kubelet.sock', 'rename', [plugin_sock, k.kubelet_socket]),
            ('renaming the PodResources socket', 'rename', [node.pod_resources_socket, node.pod_resources_socket + '.old']),
            ('removing a plugin socket', 'unlink', [plugin_sock]),
            ('removing kubelet.sock', 'unlink', [k.kubelet_socket]),
            ('removing the PodResources socket', 'unlink', [node.pod_resources_socket])):
        got = as_user_fs(node, op, *paths)
        check(got == 'EACCES', 'as %s, %s: %s, expected EACCES' % (GRPC_USER, what, got))
    check(tree(root_dirs) == before_tree, 'the kubelet directories changed: %r -> %r' % (before_tree, tree(root_dirs)))

    # PodResources is reached through the probe: grpcd reconciles at start.
    node.wait_for(lambda: check(k.list_calls >= 1, 'no PodResources List yet'), 10, node.daemons['grpc'],
                  'a PodResources List')

    # A kubelet restart: every socket removed, kubelet.sock made again.
    for i in range(3):
        got = k.restart(resources=sorted(TWO_GPUS), timeout=10)
        check(set(got) == set(TWO_GPUS), 'restart %d: registrations %r' % (i, got))
    clients = k.wait_connected(sorted(TWO_GPUS), timeout=10)
    for res, (gpu, card, render) in TWO_GPUS.items():
        c = clients[res].allocate([gpu])
        check(len(c['devices']) == 2, '%s: Allocate after the restart %r' % (res, c))
    # List works after the restart too (a reload of grpcd asks at once).
    n = k.list_calls
    node.daemons['grpc'].send_signal(1)
    node.wait_for(lambda: check(k.list_calls > n, 'no PodResources List after the restart'), 10,
                  node.daemons['grpc'], 'a PodResources List after the restart')

    # kgpuctl status sees what the probe sees.
    e = node._env({})
    p = subprocess.run([node.bin('tools', 'kgpuctl'), 'status'], capture_output=True, text=True, env=e, timeout=20)
    check(p.returncode == 0, 'kgpuctl status: %r %r' % (p.stdout, p.stderr))
    check('Kubelet socket: present' in p.stdout, 'kgpuctl status: %r' % p.stdout)
    for res in TWO_GPUS:
        line = [l for l in p.stdout.splitlines() if l.strip().startswith(res + ' ')]
        check(line and line[0].split()[-1] == 'serving', 'kgpuctl status %s: %r' % (res, p.stdout))

    after = {d: mode_owner(d) for d in root_dirs}
    check(after == before, 'the kubelet directories changed: %r -> %r' % (before, after))
    for d in root_dirs:
        r = subprocess.run(['getfacl', '--omit-header', '--absolute-names', d], capture_output=True, text=True)
        check(r.returncode != 0 or 'kgpu' not in r.stdout, '%s has a kgpu ACL entry: %r' % (d, r.stdout))


if __name__ == '__main__':
    harness.run_test(run, need_root=True)
