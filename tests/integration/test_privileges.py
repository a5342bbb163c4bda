#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_privileges.py — grpcd and brokerd drop root; the bus policy guards mutations.
#
# Asserts (root only; started as root, the daemons must drop by themselves): brokerd
# runs with every uid/gid = kgpu-broker, grpcd = kgpu, no supplementary groups, no
# capabilities at all (permitted, effective, ambient, inheritable, bounding); the probe
# is still uid 0; the state database is owned by kgpu-broker. On the bus, user nobody
# may call Broker1.ListResources (read) but Broker1.Allocate and Broker1.PreStartContainer
# and Probe1.Rescan are denied (AccessDenied); user kgpu may call Broker1.Allocate.

import os
import pwd

import harness
from harness import check, RES_I915, GPU_I915


def denied(node, user, *call):
    r = node.busctl('call', *call, user=user, check=False, json_out=False)
    err = r.stderr.decode(errors='replace')
    check(r.returncode != 0, '%s: %s was allowed' % (user, ' '.join(call)))
    check('Access denied' in err or 'AccessDenied' in err or 'denied' in err.lower(),
          '%s: %s failed but not as a denial: %r' % (user, ' '.join(call), err))


def run(node):
    node.check_dropped('broker', harness.BROKER_USER)
    node.check_dropped('grpc', harness.GRPC_USER)
    st = harness.proc_status(node.daemons['probe'].pid)
    check(st['Uid'][1] == 0, 'probe is not root: %r' % st['Uid'])

    bu = pwd.getpwnam(harness.BROKER_USER)
    db = os.path.join(node.state_dir, 'kgpu.db')
    check(os.path.exists(db), '%s missing' % db)
    check(os.stat(db).st_uid == bu.pw_uid, '%s owned by uid %d' % (db, os.stat(db).st_uid))

    B = (harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS)
    r = node.busctl('call', *B, 'ListResources', user='nobody')
    check(len(r['data'][0]) == 2, 'nobody: ListResources %r' % r)
    denied(node, 'nobody', *B, 'Allocate', 'saas', RES_I915, '1', '1', GPU_I915)
    denied(node, 'nobody', *B, 'PreStartContainer', 'sas', RES_I915, '1', GPU_I915)
    denied(node, 'nobody', harness.PROBE_BUS, '/io/kgpu/Probe1', harness.PROBE_BUS, 'Rescan')
    # the broker's user may not call the broker's mutations either
    denied(node, harness.BROKER_USER, *B, 'Allocate', 'saas', RES_I915, '1', '1', GPU_I915)

    r = node.busctl('call', *B, 'Allocate', 'saas', RES_I915, '1', '1', GPU_I915, user=harness.GRPC_USER)
    check(len(r['data'][0]) == 1, 'kgpu: Allocate %r' % r)


if __name__ == '__main__':
    harness.run_test(run, need_root=True)
