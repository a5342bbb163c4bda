#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_nvidia_mps.py — MPS slices of different sizes on one GPU, end to end with the fake
# nvidia-smi and nvidia-cuda-mps-control (scenario l40s, 46068 MiB). Config in the nos
# fork's format: sharing.mps.resources[] with two 2 GB slices (renamed
# nvidia.com/gpu-2gb) and one 4 GB slice (nvidia.com/gpu-4gb) on the GPU.
#
# Asserts: the fake tools were told compute mode EXCLUSIVE_PROCESS for GPU 0 and started
# one MPS control daemon (pipe directory .../mps/<uuid>/pipe, CUDA_VISIBLE_DEVICES=<uuid>)
# whose default limits are the largest slice's (4096M on device 0, floor(100 * 4096 /
# 46068) = 8 %: a client's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE only narrows the daemon's,
# so the 2 GB slice's 4 % there would cap the 4 GB slice); the slices are "<uuid>::0",
# "::1" (2 GB) and "::2" (4 GB), Healthy once MPS runs; each Allocate answer carries its
# own slice's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=2048M" / "0=4096M") and
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (4 / 8, each <= the daemon's), the pipe
# directory (CUDA_MPS_PIPE_DIRECTORY; mounted there read-only: exactly the Gpu1
# MpsPipeDirectory the probe exports) and /dev/shm;
# after a probe restart the same daemon process serves on, adopted with the limits the
# probe knows it sent (no second -d, no limits sent again); after a reload
# with no MPS in the config the daemon got "quit", the compute mode is the one before MPS
# (Default) again and
# the GPU is a plain nvidia.com/gpu device and the slice resources are withdrawn; the
# probe reloaded without MPS too refuses the broker reloaded first with MPS back in
# (io.kgpu.Error.Refused), and after the probe's reload the broker's retry starts MPS. On an
# H100 with MIG on, the same config starts no MPS (no command to the fake tools) and the
# broker logs why. Under migStrategy mixed (and single) a GPU with MIG off is sliced the
# same way: the same slices and answers. On GPU 3 of the 8x H100 (devices: ["3"]) the
# compute mode goes to that GPU only (`nvidia-smi -i 3`), its daemon sees only its UUID,
# so the limit is for device 0 there and in the container (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
# "0=..."), with 81559 MiB: 2048M / 2 % and 4096M / 5 %, the daemon 4096M / 5 %; the
# other GPUs stay plain.

import os
import signal

from harness import check, RES_I915, RES_XE, PROBE_BUS
from kubelet_sim import socket_name_for
from nvidia_sim import L40S, H100X8, RES_GPU, yaml_config, wait_devices, run_cases

INTEL = [RES_I915, RES_XE]
RES_2GB = 'nvidia.com/gpu-2gb'
RES_4GB = 'nvidia.com/gpu-4gb'
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


def mps_daemons(node):
    return node.nvidia_state().get('mps', {})


def daemon(node):
    return mps_daemons(node).get(pipe_dir(node), {})


def pipe_dir(node, gpu=L40S):
    return os.path.join(node.tmp, 'run', 'probe', 'mps', gpu, 'pipe')


def probe_pipe_directory(node, gpu):
    path = '/io/kgpu/Probe1/gpu/' + ''.join(c if c.isalnum() else '_%02x' % ord(c) for c in gpu)
    return node.busctl('get-property', PROBE_BUS, path, 'io.kgpu.Gpu1', 'MpsPipeDirectory')['data']


def limit_commands(node):
    return [c for c in node.nvidia_commands() if c.startswith('nvidia-cuda-mps-control < set_default')]


def check_daemon_limits(d, mib, pct):
    # The largest slice's limits: every slice's own percentage and memory only narrow them.
    check(d.get('pinned_mem_limit') == {'0': '%dM' % mib},
          'pinned memory limit %r, expected the largest slice\'s 0=%dM' % (d, mib))
    check(float(d.get('active_thread_percentage', 0)) == pct,
          'active thread percentage %r, expected the largest slice\'s %d' % (d, pct))


def check_slice(node, resource, slice_id, mib, pct, gpu=L40S, daemon_limits=None):
    a = node.kubelet.plugin(resource).allocate([slice_id])
    envs = a['envs']
    check(envs.get('NVIDIA_VISIBLE_DEVICES') == gpu, '%s: NVIDIA_VISIBLE_DEVICES %r' % (slice_id, envs))
    check(envs.get('CUDA_MPS_PINNED_DEVICE_MEM_LIMIT') == '0=%dM' % mib,
          '%s: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT %r, expected 0=%dM' % (slice_id, envs, mib))
    check(envs.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE') == str(pct),
          '%s: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE %r, expected %d' % (slice_id, envs, pct))
    container_pipe = envs.get('CUDA_MPS_PIPE_DIRECTORY')
    check(container_pipe and container_pipe.startswith('/'), '%s: CUDA_MPS_PIPE_DIRECTORY %r' % (slice_id, envs))
    mounts = {m['container_path']: (m['host_path'], m['read_only']) for m in a['mounts']}
    # Exactly the directory the probe exports, read-only: a pod only connects to the
    # daemon's sockets there and can put nothing in it.
    exported = probe_pipe_directory(node, gpu)
    check(exported == pipe_dir(node, gpu), '%s: Gpu1.MpsPipeDirectory %r' % (slice_id, exported))
    check(mounts.get(container_pipe) == (exported, True),
          '%s: pipe directory mount %r, expected %s -> %s ro' % (slice_id, mounts, exported, container_pipe))
    check(mounts.get('/dev/shm') == ('/dev/shm', False), '%s: /dev/shm mount %r' % (slice_id, mounts))
    check(set(envs) == {'NVIDIA_VISIBLE_DEVICES', 'CUDA_MPS_PIPE_DIRECTORY', 'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT',
                        'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE'}, '%s: envs %r' % (slice_id, envs))
    if daemon_limits is not None:
        # The client's own limits narrow the daemon's defaults, never exceed them.
        d_mib = int(daemon_limits['pinned_mem_limit']['0'].rstrip('M'))
        d_pct = float(daemon_limits['active_thread_percentage'])
        check(mib <= d_mib and pct <= d_pct,
              '%s: own limits %dM / %d %% above the daemon\'s %r' % (slice_id, mib, pct, daemon_limits))


def mps(node):
    wait_devices(node, RES_2GB, [L40S + '::0', L40S + '::1'], timeout=15)
    wait_devices(node, RES_4GB, [L40S + '::2'], timeout=15)

    st = node.nvidia_state()
    check(st.get('compute_mode', {}).get('0') == 'Exclusive_Process', 'compute mode: %r' % st)
    cmds = node.nvidia_commands()
    check(any(c.startswith('nvidia-smi') and 'EXCLUSIVE_PROCESS' in c and '-i 0' in c for c in cmds),
          'no "nvidia-smi -i 0 -c EXCLUSIVE_PROCESS" in %r' % cmds)
    daemons = mps_daemons(node)
    check(list(daemons) == [pipe_dir(node)], 'MPS daemons %r, expected one at %s' % (list(daemons), pipe_dir(node)))
    d = daemons[pipe_dir(node)]
    check(d['running'] and d['visible'] == L40S, 'daemon %r' % d)
    check_daemon_limits(d, 4096, 8)

    check_slice(node, RES_2GB, L40S + '::0', 2048, 4, daemon_limits=d)
    check_slice(node, RES_2GB, L40S + '::1', 2048, 4, daemon_limits=d)
    check_slice(node, RES_4GB, L40S + '::2', 4096, 8, daemon_limits=d)

    # A restarted probe adopts the running daemon (same process, no second -d) with the
    # limits it knows it sent; the broker's SetMps for the same limits runs nothing.
    pid = daemon(node).get('pid')
    before = len(node.nvidia_commands())
    answered = lambda: node.daemons['broker'].log_text().count('MPS on GPU %s: running' % L40S)
    n_answered = answered()
    node.daemons['probe'].stop()
    node.start_probe()
    node.wait_bus_name(PROBE_BUS, 10, node.daemons['probe'])
    # The broker asked the new probe again, and got its answer.
    node.wait_for(lambda: check(answered() > n_answered, 'no SetMps answered after the probe restart'), 15,
                  what='SetMps after a probe restart')
    wait_devices(node, RES_2GB, [L40S + '::0', L40S + '::1'], timeout=15)
    check(daemon(node).get('running') and daemon(node).get('pid') == pid and os.path.exists('/proc/%d' % pid),
          'the daemon after a probe restart: %r (was pid %d)' % (daemon(node), pid))
    cmds = node.nvidia_commands()[before:]
    check(not any(c.startswith('nvidia-cuda-mps-control -d') or c.startswith('nvidia-cuda-mps-control < set_default')
                  for c in cmds), 'a probe restart started a daemon or sent limits again: %r' % cmds)
    check(daemon(node).get('pinned_mem_limit') == {'0': '4096M'} and
          float(daemon(node).get('active_thread_percentage', 0)) == 8, 'daemon %r' % mps_daemons(node))
    check_slice(node, RES_4GB, L40S + '::2', 4096, 8, daemon_limits=daemon(node))

    # MPS removed from the config: the daemon quits, the compute mode is restored.
    node.write_config_extra(yaml_config('none'))
    node.daemons['broker'].send_signal(signal.SIGHUP)
    node.wait_for(lambda: check(daemon(node).get('running') is False, 'daemon still running: %r'
                                % mps_daemons(node)), 15, what='MPS daemon stopped')
    check(any(c == 'nvidia-cuda-mps-control < quit' for c in node.nvidia_commands()), 'no quit sent')
    node.wait_for(lambda: check(node.nvidia_state().get('compute_mode', {}).get('0') == 'Default',
                                'compute mode %r' % node.nvidia_state()), 15, what='compute mode Default')
    wait_devices(node, RES_GPU, [L40S], timeout=15)
    # The slice resources are withdrawn: no devices, or their sockets closed (grpcd's
    # grace period for a resource the broker no longer advertises).
    for r in (RES_2GB, RES_4GB):
        sock = os.path.join(node.plugin_dir, socket_name_for(r))
        node.wait_for(lambda: check(not os.path.exists(sock) or not node.kubelet.plugin(r).devices(),
                                    '%s still advertised: %r' % (r, node.kubelet.plugin(r).devices())),
                      15, what='%s withdrawn' % r)

    # The probe holds SetMps to its own kgpu.yaml. Reloaded without MPS too, it refuses the
    # broker that reloads first with MPS back in (systemctl reload kgpu.target reloads
    # both at once); the broker asks again a little later, and once the probe has read
    # the same file MPS runs.
    probe_log = lambda: node.daemons['probe'].log_text()
    n = probe_log().count('Reloaded the configuration')
    node.daemons['probe'].send_signal(signal.SIGHUP)
    node.wait_for(lambda: check(probe_log().count('Reloaded the configuration') > n, 'probe not reloaded'), 10,
                  what='the probe reloaded without MPS')
    refused = lambda: node.daemons['broker'].log_text().count('io.kgpu.Error.Refused')
    node.write_config_extra(MPS)
    node.daemons['broker'].send_signal(signal.SIGHUP)
    node.wait_for(lambda: check(refused() >= 1, 'the probe did not refuse a GPU outside its configuration'), 15,
                  what='the probe refusing SetMps')
    check(not daemon(node).get('running'), 'MPS started by a probe whose config has none: %r' % mps_daemons(node))
    n = probe_log().count('Reloaded the configuration')
    node.daemons['probe'].send_signal(signal.SIGHUP)
    node.wait_for(lambda: check(probe_log().count('Reloaded the configuration') > n, 'probe not reloaded'), 10,
                  what='the probe reloaded with MPS')
    node.wait_for(lambda: check(daemon(node).get('running'), 'no MPS daemon after both reloads: %r'
                                % mps_daemons(node)), 40, what='MPS running after both reloads')
    check('Asking the probe again in' in node.daemons['broker'].log_text(), 'the broker did not say it asks again')
    wait_devices(node, RES_2GB, [L40S + '::0', L40S + '::1'], timeout=15)
    check_slice(node, RES_4GB, L40S + '::2', 4096, 8, daemon_limits=daemon(node))


def mig_gpu(node):
    # The H100 has MIG on: MPS cannot run there. The broker says why and never asks.
    node.wait_for(lambda: check(any('not advertised as configured' in line and 'MIG' in line
                                    for line in node.daemons['broker'].log_text().splitlines()),
                                'no log line saying why'), 10, what='the broker naming the problem')
    cmds = node.nvidia_commands()
    check(not any('EXCLUSIVE_PROCESS' in c or c.startswith('nvidia-cuda-mps-control') for c in cmds),
          'MPS attempted on a MIG GPU: %r' % [c for c in cmds if 'mps' in c or '-c ' in c])
    check('mps' not in node.nvidia_state(), 'fake MPS state %r' % node.nvidia_state())


def mps_mixed(node):
    # migStrategy mixed: the L40S (MIG off) is a whole GPU, so MPS slices it as under none.
    wait_devices(node, RES_2GB, [L40S + '::0', L40S + '::1'], timeout=15)
    wait_devices(node, RES_4GB, [L40S + '::2'], timeout=15)
    d = daemon(node)
    check(d.get('running'), 'daemon %r' % mps_daemons(node))
    check_daemon_limits(d, 4096, 8)
    check_slice(node, RES_2GB, L40S + '::1', 2048, 4, daemon_limits=d)
    check_slice(node, RES_4GB, L40S + '::2', 4096, 8, daemon_limits=d)


def mps_gpu3(node):
    g = H100X8[3]
    wait_devices(node, RES_2GB, [g + '::0', g + '::1'], timeout=15)
    wait_devices(node, RES_4GB, [g + '::2'], timeout=15)
    wait_devices(node, RES_GPU, [x for i, x in enumerate(H100X8) if i != 3], timeout=15)
    st = node.nvidia_state()
    check(st.get('compute_mode') == {'3': 'Exclusive_Process'}, 'compute modes %r, expected GPU 3 only' % st)
    cmds = node.nvidia_commands()
    check('nvidia-smi -i 3 -c EXCLUSIVE_PROCESS' in cmds, 'no "nvidia-smi -i 3 -c EXCLUSIVE_PROCESS" in %r' % cmds)
    daemons = mps_daemons(node)
    check(list(daemons) == [pipe_dir(node, g)], 'MPS daemons %r, expected one at %s' % (list(daemons), pipe_dir(node, g)))
    d = daemons[pipe_dir(node, g)]
    check(d['running'] and d['visible'] == g, 'daemon %r' % d)
    check_daemon_limits(d, 4096, 5)
    check_slice(node, RES_2GB, g + '::1', 2048, 2, gpu=g, daemon_limits=d)
    check_slice(node, RES_4GB, g + '::2', 4096, 5, gpu=g, daemon_limits=d)


CASES = [
    ('l40s, 2x 2 GB + 1x 4 GB', dict(nvidia_scenario='l40s', resources=INTEL + [RES_2GB, RES_4GB],
                                     config_extra=MPS), mps),
    ('l40s, migStrategy mixed, 2x 2 GB + 1x 4 GB',
     dict(nvidia_scenario='l40s', resources=INTEL + [RES_2GB, RES_4GB],
          config_extra=MPS.replace('migStrategy: none', 'migStrategy: mixed')), mps_mixed),
    ('8xh100, slices on GPU 3 only', dict(nvidia_scenario='8xh100-nvlink', resources=INTEL + [RES_2GB, RES_4GB],
                                          config_extra=MPS.replace('replicas:', 'devices: ["3"]\n      replicas:')),
     mps_gpu3),
    ('h100 with MIG on: no MPS', dict(nvidia_scenario='h100-mig', resources=INTEL, config_extra=MPS), mig_gpu),
]

if __name__ == '__main__':
    run_cases(CASES)
