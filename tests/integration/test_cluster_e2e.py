#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_cluster_e2e.py — issue 14's acceptance end to end, with the real pieces: the API
# server simulator (HTTPS, test CA, kgpu-clusterd authenticated by a client
# certificate), kgpu-clusterd, the broker, grpcd, the probe with the fake NVIDIA tools
# (scenario l40s: one L40S, GPU-00000000-...) and the kubelet simulator. Nothing is
# told to the broker by the test: what changes, changes in the simulator.
#
# Named NVIDIA configs in nvidiaConfigs.directory: ts4 (time-slicing, replicas 4), ts2
# (replicas 2), mps (the nos fork's MPS slices: 2x 2 GB renamed nvidia.com/gpu-2gb, 1x
# 4 GB renamed nvidia.com/gpu-4gb); nvidiaConfigs.default ts4; the label
# nvidia.com/device-plugin.config of this node (kgpu-node-1) selects.
#
# Case "label selects the config live": the label unset at start → the default: the
# kubelet simulator sees nvidia.com/gpu as <uuid>::0..3; label mps → the MPS slices
# (gpu-2gb ::0, ::1; gpu-4gb ::2; nvidia.com/gpu withdrawn), an Allocate of a slice
# answered with its limit; label removed → the default again (4 replicas, slices
# withdrawn); another node's label changes nothing; an unknown name → the config in
# force stays (devices unchanged), Broker1.NodeConfigRequested is the name,
# NodeConfigError says why, kgpuctl status shows both, clusterd's log names it; back
# to mps; the broker stopped, the label changed to ts2 meanwhile, the broker started:
# clusterd tells the new broker (2 replicas); mps again: the slices become Healthy
# (the probe runs MPS for a named config) and an Allocate of the 4 GB slice carries its
# limit. No daemon is restarted by any switch (same pids), and kgpu-clusterd
# talked to the simulator as user kgpu-cluster (its client certificate's CN) over TLS.
#
# Case "API server faults": label ts2 first (2 replicas); then in turn: the server down
# while the label changes to ts4 (nothing changes while down: 2 replicas, Allocate
# answered; the change arrives once the server is up), slow headers and events (the
# change arrives), 410 (a compaction past clusterd's resourceVersion and the watch cut:
# clusterd lists again and the change arrives), 401 on every nodes request (the config
# stays; the change arrives once the fault is gone), a garbage watch line (the stream
# is dropped, clusterd lists again, the change arrives). Throughout, a sampler of
# Broker1.NodeConfigRequested shows that the broker was never told anything but the
# label's values in turn (never "" nor a fallback), and kgpu-clusterd never exited.
#
# Case "GAS annotations choose the cards" (layout eight-gpus, intel.resourceManager,
# sharedDevNum 2): pods created in the simulator on this node, Pending, with GAS's
# annotations (pod-a gas-container-cards card2; pod-b card5 with gas-container-tiles
# card5:gt1; a pod of another node naming card7 and older, which must not count): the
# kubelet's GetPreferredAllocation + Allocate for pod-a gets a device of card2 (its DRM
# nodes), for pod-b one of card5 with ZE_AFFINITY_MASK=0.1; a pod without annotations is
# refused with FAILED_PRECONDITION and a reason.

import os
import threading
import time

import grpc

import intel_devmgr

from harness import check, RES_I915, RES_XE
from intel_devmgr import gpu_of
from kubelet_sim import socket_name_for
from cluster_sim import run_cluster_cases, NODE_NAME, LABEL
from nvidia_sim import L40S, RES_GPU, yaml_config, wait_devices

INTEL = [RES_I915, RES_XE]
RES_2GB = 'nvidia.com/gpu-2gb'
RES_4GB = 'nvidia.com/gpu-4gb'


def ts(n):
    return yaml_config('none', extra='sharing:\n  timeSlicing:\n    resources:\n'
                                     '    - name: nvidia.com/gpu\n      replicas: %d\n' % n)


MPS = yaml_config('none', extra='''sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      rename: nvidia.com/gpu-2gb
      memoryGB: 2
      replicas: 2
    - name: nvidia.com/gpu
      rename: nvidia.com/gpu-4gb
      memoryGB: 4
      replicas: 1
''')
CONFIGS = {'ts4': ts(4), 'ts2': ts(2), 'mps': MPS}


def replicas(n):
    return ['%s::%d' % (L40S, i) for i in range(n)]


def pids(ctx):
    return {n: d.pid for n, d in ctx.node.daemons.items()}


def wait_withdrawn(node, resource, timeout=15):
    """No devices any more, or the resource's socket closed (grpcd's grace period for a
    resource the broker no longer advertises), as test_nvidia_mps.py checks it."""
    sock = os.path.join(node.plugin_dir, socket_name_for(resource))
    node.wait_for(lambda: check(not os.path.exists(sock) or not node.kubelet.plugin(resource).devices(),
                                '%s still advertised: %r' % (resource, node.kubelet.plugin(resource).devices())),
                  timeout, what='%s withdrawn' % resource)


def check_client_identity(ctx):
    reqs = [r for r in ctx.sim.requests() if r.get('resource') == 'nodes']
    check(reqs, 'kgpu-clusterd sent no request for nodes: %r' % ctx.sim.requests()[-5:])
    users = {r.get('user') for r in reqs}
    check(users == {'kgpu-cluster'}, 'requests made as %r, expected only kgpu-cluster (client certificate)' % users)
    # Only this node's object: a field selector on metadata.name (or the object's path).
    for r in reqs:
        q = r.get('query') or ''
        q = q if isinstance(q, str) else repr(q)
        check(NODE_NAME in q or NODE_NAME in (r.get('path') or ''),
              'a nodes request not limited to %s: %r' % (NODE_NAME, r))


def label_switch(ctx):
    node = ctx.node
    before = pids(ctx)
    # Unset → the default, ts4.
    wait_devices(node, RES_GPU, replicas(4), timeout=20)
    ctx.wait_node_config(lambda c: c['NodeConfigRequested'] == '' and c['NodeConfigError'] == '',
                         what='the label unset')
    check_client_identity(ctx)

    # mps: the slices, live.
    ctx.sim.set_node_label(NODE_NAME, LABEL, 'mps')
    wait_devices(node, RES_2GB, [L40S + '::0', L40S + '::1'], healthy=False, timeout=20)
    wait_devices(node, RES_4GB, [L40S + '::2'], healthy=False, timeout=20)
    wait_withdrawn(node, RES_GPU)
    c = ctx.wait_node_config(lambda c: c['NodeConfig'] == 'mps', what='mps in force')
    check(c['NodeConfigRequested'] == 'mps' and c['NodeConfigError'] == '', 'after mps: %r' % c)

    # Removed → the default again.
    t = time.monotonic()
    ctx.sim.remove_node_label(NODE_NAME, LABEL)
    wait_devices_since(node, RES_GPU, replicas(4), t)
    wait_withdrawn(node, RES_2GB)
    wait_withdrawn(node, RES_4GB)
    ctx.wait_node_config(lambda c: c['NodeConfigRequested'] == '' and c['NodeConfigError'] == '',
                         what='the default after the label went')

    # Another node's label is not ours.
    ctx.sim.set_node_label('other-node', LABEL, 'mps')
    time.sleep(1.5)
    c = ctx.node_config()
    check(c['NodeConfigRequested'] == '', 'another node\'s label reached the broker: %r' % c)

    # An unknown name: the config in force stays, and says so.
    in_force = ctx.node_config()['NodeConfig']
    ctx.sim.set_node_label(NODE_NAME, LABEL, 'no-such-config')
    c = ctx.wait_node_config(lambda c: c['NodeConfigRequested'] == 'no-such-config', what='the unknown name')
    check(c['NodeConfig'] == in_force and c['NodeConfigError'] != '',
          'unknown name: %r (in force before: %r)' % (c, in_force))
    time.sleep(1)
    check(harness_ids(node, RES_GPU) == sorted(replicas(4)), 'devices changed for an unknown name: %r'
          % harness_ids(node, RES_GPU))
    rc, out = ctx.kgpuctl_status()
    check(rc == 0 and 'no-such-config' in out, 'kgpuctl status does not show the requested config: %s' % out)
    ctx.node.wait_for(lambda: check('no-such-config' in ctx.clusterd_log(), 'clusterd log silent'), 10,
                      what='clusterd logging the refusal')

    # Back to mps, then a broker restart: clusterd tells the new one.
    ctx.sim.set_node_label(NODE_NAME, LABEL, 'mps')
    ctx.wait_node_config(lambda c: c['NodeConfig'] == 'mps' and c['NodeConfigError'] == '', what='mps again')
    wait_devices(node, RES_2GB, [L40S + '::0', L40S + '::1'], healthy=False, timeout=20)
    after = pids(ctx)
    check(after == before, 'a daemon was restarted by the switches: %r -> %r' % (before, after))
    # The broker goes away, the label changes meanwhile: the new broker (which restores
    # 'mps', the name in force it kept) is told the label's value by clusterd.
    node.daemons['broker'].stop()
    ctx.sim.set_node_label(NODE_NAME, LABEL, 'ts2')
    time.sleep(1)
    t = time.monotonic()
    node.restart_broker()
    ctx.wait_node_config(lambda c: c['NodeConfig'] == 'ts2' and c['NodeConfigRequested'] == 'ts2',
                         what='the label after a broker restart')
    wait_devices_since(node, RES_GPU, replicas(2), t)
    check(ctx.clusterd.alive(), 'clusterd exited on the broker restart')
    t = time.monotonic()
    ctx.sim.set_node_label(NODE_NAME, LABEL, 'mps')
    # The kubelet simulator still holds the slices' last lists from the first switch:
    # wait for the broker first, then for lists sent after the label changed.
    ctx.wait_node_config(lambda c: c['NodeConfig'] == 'mps' and c['NodeConfigError'] == '', what='mps once more')
    wait_withdrawn(node, RES_GPU)
    wait_devices_since(node, RES_2GB, [L40S + '::0', L40S + '::1'], t, healthy=False)

    # The slices are usable only once the probe runs MPS for them: it must take the named
    # config's MPS section as its own policy (root's file in nvidiaConfigs.directory).
    wait_devices(node, RES_2GB, [L40S + '::0', L40S + '::1'], timeout=20)
    wait_devices(node, RES_4GB, [L40S + '::2'], timeout=20)
    a = node.kubelet.plugin(RES_4GB).allocate([L40S + '::2'])
    check(a['envs'].get('CUDA_MPS_PINNED_DEVICE_MEM_LIMIT') == '0=4096M', 'the 4 GB slice\'s answer: %r' % a)


def wait_devices_since(node, resource, want, since, healthy=True, timeout=20):
    """wait_devices(), but only a ListAndWatch update received after `since` counts
    (the simulator keeps a resource's last list after its socket went, and the client
    of a withdrawn resource until grpcd registers it again)."""
    pred = (lambda d: sorted(x['id'] for x in d) == sorted(want) and
            (not healthy or all(x['health'] == 'Healthy' for x in d)))
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            return node.kubelet.plugin(resource, max(left, 0.1)).wait_update(pred, after=since,
                                                                            timeout=max(min(left, 2), 0.1))
        except TimeoutError:
            if left <= 0:
                raise


def harness_ids(node, resource):
    return sorted(d['id'] for d in (node.kubelet.plugin(resource).devices() or []))


class Sampler:
    """Samples Broker1.NodeConfigRequested until stopped; every distinct value in order."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.values = []
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop_ev.wait(0.15):
            try:
                v = self.ctx.broker_prop('NodeConfigRequested')
            except Exception:
                continue   # the broker is restarted in no case here; a failed busctl is not news
            if not self.values or self.values[-1] != v:
                self.values.append(v)

    def stop(self):
        self.stop_ev.set()
        self.t.join(5)
        return self.values


# kgpu-clusterd backs off as client-go's reflector does (doubling up to about 30 s,
# reset only after a quiet while), and this case cuts its watches several times in a
# row: every wait allows a whole maximal backoff plus jitter.
BACKOFF_WAIT = 60


def expect_ts(ctx, n, what, timeout=BACKOFF_WAIT):
    ctx.wait_node_config(lambda c: c['NodeConfig'] == 'ts%d' % n and c['NodeConfigError'] == '',
                         timeout=timeout, what=what)
    wait_devices(ctx.node, RES_GPU, replicas(n), timeout=20)


def still_serving(ctx, n, what):
    c = ctx.node_config()
    check(c['NodeConfig'] == 'ts%d' % n, '%s: the config in force changed: %r' % (what, c))
    check(harness_ids(ctx.node, RES_GPU) == sorted(replicas(n)), '%s: devices %r' % (
        what, harness_ids(ctx.node, RES_GPU)))
    a = ctx.node.kubelet.plugin(RES_GPU).allocate([L40S + '::1'])
    check(a['envs'].get('NVIDIA_VISIBLE_DEVICES') == L40S, '%s: Allocate %r' % (what, a))
    check(ctx.clusterd.alive(), '%s: kgpu-clusterd exited' % what)


def api_faults(ctx):
    sim = ctx.sim
    sim.set_node_label(NODE_NAME, LABEL, 'ts2')
    expect_ts(ctx, 2, 'ts2 at start', timeout=20)
    ctx.wait_watch('nodes')
    sampler = Sampler(ctx)
    try:
        # Down, and the label changes meanwhile.
        sim.down()
        sim.set_node_label(NODE_NAME, LABEL, 'ts4')
        time.sleep(3)
        still_serving(ctx, 2, 'server down')
        sim.up()
        expect_ts(ctx, 4, 'back after the server came up')

        # Slow headers and events.
        sim.slow(headers=1.5, events=1.5)
        sim.cut_watches('close', resource='nodes')
        sim.set_node_label(NODE_NAME, LABEL, 'ts2')
        expect_ts(ctx, 2, 'the change through a slow server')
        sim.slow(0, 0)

        # 410: compacted past what clusterd has seen, then its watch cut.
        ctx.wait_watch('nodes')
        for i in range(5):
            sim.set_node_label('other-node', 'example.com/n', str(i))
        sim.compact()
        sim.clear_requests()
        sim.cut_watches('close', resource='nodes')
        sim.set_node_label(NODE_NAME, LABEL, 'ts4')
        expect_ts(ctx, 4, 'after 410')
        lists = [r for r in sim.requests() if r.get('resource') == 'nodes' and r.get('verb') in ('list', 'get')]
        check(lists, 'no new list after the compaction: %r' % sim.requests()[-10:])

        # 401 on every nodes request.
        ctx.wait_watch('nodes')
        fid = sim.add_fault('status', resource='nodes', code=401)
        sim.cut_watches('close', resource='nodes')
        sim.set_node_label(NODE_NAME, LABEL, 'ts2')
        check(sim.wait_requests(lambda r: r.get('resource') == 'nodes' and r.get('status') == 401,
                                timeout=BACKOFF_WAIT),
              'clusterd did not come back to the server under 401')
        time.sleep(2)
        still_serving(ctx, 4, '401')
        sim.remove_fault(fid)
        expect_ts(ctx, 2, 'after the 401s stopped')

        # A garbage watch line.
        ctx.wait_watch('nodes')
        sim.add_fault('garbage', resource='nodes', verb='watch', count=1, body=b'{"type":"MODIFIED","object":[}\x00')
        sim.set_node_label(NODE_NAME, LABEL, 'ts4')
        expect_ts(ctx, 4, 'after a garbage watch line')
    finally:
        seen = sampler.stop()
    check('' not in seen, 'the broker was told "" (the label unset) during faults: %r' % seen)
    check(all(v in ('ts2', 'ts4') for v in seen), 'the broker was told %r' % seen)
    check(ctx.clusterd.alive(), 'kgpu-clusterd exited')


# --- Intel resource manager: GAS annotations ---------------------------------------------
# Layout eight-gpus: 8x i915 (Max 1550, 2 tiles each), card<i> is GPU G[i].
G = ['0000:%s:00.0' % b for b in ('18', '28', '38', '48', '98', 'a8', 'b8', 'c8')]
GAS_NODE = dict(layout='eight-gpus', resources=[RES_I915],
                config_extra='intel:\n  resourceManager: true\n  sharedDevNum: 2\n')
ONE_I915 = [{'name': 'main', 'limits': {RES_I915: '1'}}]


def gas_allocate(ctx, dm, pod, want_gpu, timeout=20):
    """The kubelet's admission of `pod` (one container, one i915), retried while the
    broker has not heard of the pod yet (FAILED_PRECONDITION); returns (ids, answer)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        ids = dm.cl.get_preferred_allocation(list(dm.free), [], 1)
        if not ids:
            # No preference before the broker knows a GAS pod for the request: the
            # kubelet would pick ids itself; wait for the pods to arrive instead.
            last = 'no preferred allocation'
            time.sleep(0.3)
            continue
        try:
            answer = dm.cl.allocate(ids)
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, '%s: Allocate failed with %s: %s' % (
                pod, e.code(), e.details()))
            last = e.details()
            time.sleep(0.3)
            continue
        check([gpu_of(i) for i in ids] == [want_gpu], '%s: preferred %r, expected a device of %s' % (pod, ids, want_gpu))
        for i in ids:
            dm.free.remove(i)
        dm.pods[pod] = (ids, answer)
        dm.publish()
        return ids, answer
    raise AssertionError('%s: Allocate refused for %ss (last: %r); clusterd log:\n%s' % (
        pod, timeout, last, ctx.clusterd_log()[-2000:]))


def gas_pods(ctx):
    node, sim = ctx.node, ctx.sim
    dm = intel_devmgr.DeviceManager(node)
    check(len(dm.all_ids) == 16, 'eight GPUs x sharedDevNum 2: %r' % dm.all_ids)
    ctx.wait_watch('pods')
    # Two pods GAS placed on different cards (the second with a tile), one it never saw.
    sim.add_pod('default', 'pod-a', node_name=NODE_NAME, containers=ONE_I915,
                annotations={'gas-ts': '1700000000000000001', 'gas-container-cards': 'card2'})
    sim.add_pod('default', 'pod-b', node_name=NODE_NAME, containers=ONE_I915,
                annotations={'gas-ts': '1700000000000000002', 'gas-container-cards': 'card5',
                             'gas-container-tiles': 'card5:gt1'})
    # Another node's GAS pod is not this node's business.
    sim.add_pod('default', 'elsewhere', node_name='other-node', containers=ONE_I915,
                annotations={'gas-ts': '1600000000000000000', 'gas-container-cards': 'card7'})
    _, a = gas_allocate(ctx, dm, 'pod-a', G[2])
    nodes = sorted(d['host_path'] for d in a['devices'])
    check(nodes == ['/dev/dri/card2', '/dev/dri/renderD130'], 'pod-a: device nodes %r' % nodes)
    check('ZE_AFFINITY_MASK' not in a['envs'], 'pod-a (no tiles): envs %r' % a['envs'])
    _, b = gas_allocate(ctx, dm, 'pod-b', G[5])
    nodes = sorted(d['host_path'] for d in b['devices'])
    check(nodes == ['/dev/dri/card5', '/dev/dri/renderD133'], 'pod-b: device nodes %r' % nodes)
    check(b['envs'].get('ZE_AFFINITY_MASK') == '0.1', 'pod-b (card5:gt1): envs %r' % b['envs'])

    # A pod without GAS annotations: refused, saying why.
    sim.add_pod('default', 'plain', node_name=NODE_NAME, containers=ONE_I915)
    time.sleep(1.5)
    ids = dm.cl.get_preferred_allocation(list(dm.free), [], 1)
    # No preference: the kubelet then takes free ids itself (devicesToAllocate).
    ids = ids or dm.free[:1]
    try:
        ans = dm.cl.allocate(ids)
        raise AssertionError('a pod without GAS annotations got %r' % ans)
    except grpc.RpcError as e:
        msg = e.details() or ''
        check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, 'plain pod: %s %s' % (e.code(), msg))
        check('gas' in msg.lower() or 'annotation' in msg.lower(), 'plain pod: the refusal %r gives no reason' % msg)


NODE = dict(nvidia_scenario='l40s', resources=INTEL)
CASES = [
    ('label selects the NVIDIA config live', NODE, dict(configs=CONFIGS, default='ts4'), label_switch),
    ('API server down, slow, 410, 401, garbage', NODE, dict(configs=CONFIGS, default='ts4'), api_faults),
    ('GAS annotations choose the cards (resource manager)', GAS_NODE, dict(), gas_pods),
]

if __name__ == '__main__':
    run_cluster_cases(CASES)
