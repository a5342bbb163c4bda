#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# gen-seeds.py — writes the hand-made seeds of fuzz-config, fuzz-sysfs, fuzz-probe-props
# and fuzz-convert into corpus/<target>/seed-*. The recipes for the D-Bus targets follow
# fuzz-bus.h: strings are a length byte and bytes (0xfd+index: a word of the target's
# list), arrays a count byte, variants an index into fuzz-bus.c's variant_types.
#
#   ./tests/fuzz/gen-seeds.py tests/fuzz/corpus
import os
import struct
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), 'corpus')


def write(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, 'seed-' + name), 'wb') as f:
        f.write(data)


def s(text):
    b = text.encode()
    assert len(b) < 0xfd
    return bytes([len(b)]) + b


def word(i):
    return bytes([0xfd, i])


# --- fuzz-config --------------------------------------------------------------------
configs = {
    'empty': '',
    'full': '''logLevel: debug
stateDirectory: /var/lib/kgpu
runtimeDirectory: /run/kgpu
kubelet:
  devicePluginPath: /var/lib/kubelet/device-plugins
  socket: /var/lib/kubelet/device-plugins/kubelet.sock
  podResourcesSocket: /var/lib/kubelet/pod-resources/kubelet.sock
  registerTimeoutMs: 5000
grpc:
  user: kgpu
  maxConnections: 64
  maxStreamsPerConnection: 32
  maxMessageSize: 4194304
  brokerTimeoutMs: 2000
broker:
  user: kgpu-broker
intel:
  enabled: true
  sharedDevNum: 2
  allocationPolicy: balanced
  allowIDs: [0x56a0, "56a1"]
  denyIDs:
    - 0x4680
  enableMonitoring: false
  byPath: single
''',
    'flow': '{intel: {sharedDevNum: 4, allocationPolicy: packed}, logLevel: info}\n',
    'anchors': 'a: &x {sharedDevNum: 2}\nintel: *x\n',
    'bad-type': 'intel:\n  sharedDevNum: many\n',
    'bad-range': 'intel:\n  sharedDevNum: 0\n',
    'unknown': 'intel:\n  sharedDevNumber: 2\n',
    'deep': 'a:\n' + ''.join('  ' * i + ' b:\n' for i in range(1, 20)),
    'list-root': '- 1\n- 2\n',
    'dup': 'logLevel: debug\nlogLevel: info\n',
    'tabs': 'intel:\n\tsharedDevNum: 2\n',
    'bom': '\ufeffintel: {enabled: no}\n',
    'relpath': 'stateDirectory: relative\n',
    'ids-comma': 'intel:\n  allowIDs: "0x56a0,0x56a1"\n',
    'nvidia-v1': 'version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n',
}
for k, v in configs.items():
    write('fuzz-config', k, v)

# --- fuzz-sysfs ---------------------------------------------------------------------
for i, v in enumerate(['0x8086', '0x56a0', '56a0', '0X56A0', '0x', '0x12345', '-1', '0', '4095', '4096',
                       '-2', '17179869184', '1125899906842624', '1125899906842625', '0x400000000',
                       '18446744073709551616', '0000:03:00.0', '0000:03:00.8', 'ffff:ff:1f.7',
                       'card0', 'card0-DP-1', 'renderD128', 'renderD12345678901', 'i915', 'xe',
                       ' 12', '12\n', '+5', '1e3', '\x00\x01', 'a' * 80]):
    write('fuzz-sysfs', '%02d' % i, v)
write('fuzz-sysfs', 'total', struct.pack('<QI', 1 << 40, 64))

# --- fuzz-probe-props (words: fuzz-probe-props.c; variant index: fuzz-bus.c) ---------
V_S, V_I, V_U, V_Q, V_T = 0, 1, 2, 3, 4
V_AS = 12


def prop(name_word, vtype, value):
    return b'' + word(name_word) + bytes([vtype]) + value


good = (bytes([0]) + bytes([7]) +
        prop(0, V_S, word(19)) + prop(1, V_S, word(15)) + prop(2, V_S, word(17)) +
        prop(3, V_S, word(20)) + prop(4, V_S, word(21)) + prop(5, V_S, word(13)) +
        prop(7, V_I, struct.pack('>i', 1)))
write('fuzz-probe-props', 'good', good)
write('fuzz-probe-props', 'health', bytes([0, 2]) + prop(5, V_S, word(14)) + prop(6, V_S, s('driver gone')))
write('fuzz-probe-props', 'wrong-type', bytes([0, 1]) + prop(7, V_S, s('one')))
write('fuzz-probe-props', 'bad-node', bytes([0, 2]) + prop(3, V_S, word(22)) + prop(4, V_S, word(24)))
write('fuzz-probe-props', 'device-id', bytes([0, 2]) + prop(8, V_Q, b'\x56\xa0') + prop(7, V_I, b'\xff\xff\xff\xff'))
write('fuzz-probe-props', 'long-id', bytes([0, 1]) + word(0) + bytes([V_S, 0xff, 2, ord('x')]))
write('fuzz-probe-props', 'nodes', bytes([0, 1]) + word(9) + bytes([V_AS, 2]) + word(20) + word(21))
write('fuzz-probe-props', 'not-dict', bytes([9]) + s('hello'))
# NVIDIA mode (byte 0 >= 0xf0, see fuzz-probe-props.c): count, then name, type index into
# nvidia_types, value. Words 28..: the NVIDIA names and values of fuzz-probe-props.c.
N_S, N_I, N_T, N_AS, N_MIG, N_LINKS, N_LINKS_WRONG = 0, 1, 2, 5, 6, 7, 8


def nprop(name_word, ntype, value):
    return word(name_word) + bytes([ntype]) + value


def mig(index, uuid, profile, gi, nodes, mem):
    return (struct.pack('>I', index) + uuid + profile + struct.pack('>II', gi, 0) +
            bytes([len(nodes)]) + b''.join(nodes) + struct.pack('>Q', mem))


nv_migs = bytes([2]) + mig(0, word(41), word(48), 2, [word(63)], 40 << 30) + mig(1, s('MIG-b'), word(47), 9, [], 10 << 30)
nv_links = bytes([2]) + word(40) + word(50) + bytes([18]) + s('GPU-2') + word(55) + bytes([0])
nv_good = (bytes([0xf0, 13]) + nprop(0, N_S, word(40)) + nprop(1, N_S, word(16)) + nprop(28, N_I, struct.pack('>i', 0)) +
           nprop(29, N_S, word(40)) + nprop(30, N_S, word(42)) + nprop(12, N_T, struct.pack('>Q', 80 << 30)) +
           nprop(31, N_S, word(43)) + nprop(32, N_S, word(45)) + nprop(33, N_MIG, nv_migs) +
           nprop(34, N_S, word(49)) + nprop(37, N_LINKS, nv_links) + nprop(38, N_S, word(57)) +
           nprop(39, N_S, word(59)))
write('fuzz-probe-props', 'nvidia-good', nv_good)
write('fuzz-probe-props', 'nvidia-bad-pipe', bytes([0xf0, 1]) + nprop(39, N_S, word(60)))
write('fuzz-probe-props', 'nvidia-bad-link', bytes([0xf0, 1]) + nprop(37, N_LINKS, bytes([1]) + word(40) + word(56) + bytes([0])))
write('fuzz-probe-props', 'nvidia-mig-dup', bytes([0xf0, 1]) + nprop(33, N_MIG, bytes([2]) + mig(0, word(41), word(47), 1, [], 1) +
                                                                    mig(0, word(41), word(47), 2, [], 1)))
write('fuzz-probe-props', 'nvidia-wrong-type', bytes([0xf0, 2]) + nprop(33, N_LINKS, nv_links) + nprop(37, N_LINKS_WRONG, bytes([0])))
write('fuzz-probe-props', 'nvidia-many-mig', bytes([0xf0, 1]) + nprop(33, N_MIG, bytes([0xff, 4]) + mig(0, word(41), word(47), 1, [], 1)))
write('fuzz-probe-props', 'nvidia-index', bytes([0xf0, 2]) + nprop(28, N_I, struct.pack('>i', 4096)) + nprop(12, N_T, b'\xff' * 8))

# --- fuzz-convert ---------------------------------------------------------------------
# Requests (protobuf as the kubelet sends it).


def pb_str(field, b):
    if isinstance(b, str):
        b = b.encode()
    return bytes([(field << 3) | 2, len(b)]) + b


def creq(ids):
    return b''.join(pb_str(1, i) for i in ids)


alloc = pb_str(1, creq(['0000:03:00.0'])) + pb_str(1, creq(['0000:04:00.0', '0000:03:00.0-1']))
write('fuzz-convert', 'allocate', bytes([0]) + alloc)
pref = pb_str(1, pb_str(1, '0000:03:00.0') + pb_str(1, '0000:04:00.0') + pb_str(2, '0000:03:00.0') + bytes([3 << 3, 1]))
write('fuzz-convert', 'preferred', bytes([1]) + pref)
write('fuzz-convert', 'prestart', bytes([2]) + pb_str(1, '0000:03:00.0'))
write('fuzz-convert', 'allocate-empty-id', bytes([0]) + pb_str(1, creq([''])))
# GetDevices reply a(ssai): sig 0, 2 devices.
dev = word(0) + word(5) + bytes([1]) + struct.pack('>i', 0)
write('fuzz-convert', 'devices', bytes([3, 0, 2]) + dev + word(1) + s('Unhealthy') + bytes([0]))
write('fuzz-convert', 'devices-many', bytes([3, 0, 0xff, 210]) + dev)
# Allocate reply for 1 container: a(a{ss}a(ssb)a(sss)a{ss}as).
one = (bytes([1]) + word(9) + s('0') +
       bytes([1]) + word(3) + word(3) + b'\x01' +
       bytes([1]) + word(3) + word(3) + word(5) +
       bytes([1]) + word(10) + word(11) +
       bytes([1]) + word(11))
write('fuzz-convert', 'allocate-reply', bytes([4, 1, 0, 1]) + one)
write('fuzz-convert', 'allocate-reply-count', bytes([4, 2, 0, 1]) + one)
write('fuzz-convert', 'preferred-reply', bytes([5, 1, 0, 1, 2]) + word(0) + word(1))
write('fuzz-convert', 'names', bytes([6]) + b'gpu.intel.com/i915')
write('fuzz-convert', 'error-name', bytes([6]) + b'io.kgpu.Broker1.Error.UnknownDevice')

# The gate (case 7, first byte 0xf3..0xf7): an inventory, a property update, a request
# and an answer; word indexes into fuzz-convert.c's gate_words, types into gate_types.
W_ID, W_VENDOR, W_DRIVER, W_UUID, W_INDEX, W_CARD, W_RENDER, W_NODES, W_BYPATH, W_MIGS, W_MPS = range(11)


def g_s(name, val):
    return word(name) + bytes([0]) + val


def g_as(name, vals):
    return word(name) + bytes([2, len(vals)]) + b''.join(vals)


def g_i(name, v):
    return word(name) + bytes([4]) + struct.pack('>i', v)


def g_migs(migs):
    out = word(W_MIGS) + bytes([5, len(migs)])
    for index, uuid, nodes in migs:
        out += struct.pack('>I', index) + uuid + s('1g.10gb') + struct.pack('>II', 1, 0)
        out += bytes([len(nodes)]) + b''.join(nodes) + struct.pack('>II', 0, 10 << 20)
    return out


def g_object(path, props):
    return bytes([path, 1, len(props)]) + b''.join(props)


intel_gpu = g_object(0, [g_s(W_ID, word(12)), g_s(W_VENDOR, word(21)), g_s(W_DRIVER, word(23)),
                         g_s(W_CARD, word(25)), g_s(W_RENDER, word(26)), g_as(W_NODES, [word(25), word(26)]),
                         g_as(W_BYPATH, [word(30)])])
nvidia_gpu = g_object(1, [g_s(W_ID, word(14)), g_s(W_VENDOR, word(22)), g_s(W_DRIVER, word(22)),
                          g_s(W_UUID, word(14)), g_i(W_INDEX, 0), g_as(W_NODES, [word(27), word(28)]),
                          g_migs([(1, word(16), [word(29)])]), g_s(W_MPS, word(32))])
node = bytes([2]) + intel_gpu + nvidia_gpu
no_update = bytes([0])


def g_request(resource, containers):
    out = bytes([resource, len(containers) - 1])
    for ids in containers:
        out += bytes([len(ids)]) + b''.join(ids)
    return out


def g_answer(containers):
    out = bytes([0, len(containers)])
    for envs, mounts, devices, annotations, cdi in containers:
        out += bytes([len(envs)]) + b''.join(k + v for k, v in envs)
        out += bytes([len(mounts)]) + b''.join(c + h + bytes([ro]) for c, h, ro in mounts)
        out += bytes([len(devices)]) + b''.join(c + h + p for c, h, p in devices)
        out += bytes([len(annotations)]) + b''.join(k + v for k, v in annotations)
        out += bytes([len(cdi)]) + b''.join(cdi)
    return out


def gate(name, inventory, update, request, answer):
    write('fuzz-convert', 'gate-' + name, bytes([0xf7]) + inventory + update + request + answer)


intel_nodes = [(word(25), word(25), word(45)), (word(26), word(26), word(45))]
gate('intel-ok', node, no_update, g_request(0, [[word(12)]]),
     g_answer([([], [(word(30), word(30), 1)], intel_nodes, [], [word(59)])]))
gate('intel-host-mount', node, no_update, g_request(0, [[word(13)]]),
     g_answer([([], [(word(39), word(38), 0)], intel_nodes, [], [])]))
gate('intel-sda', node, no_update, g_request(0, [[word(12)]]),
     g_answer([([(word(52), s('/tmp/x.so'))], [], [(word(40), word(40), word(46))], [], [])]))
gate('monitoring', node, no_update, g_request(1, [[word(18)]]), g_answer([([], [], intel_nodes, [], [])]))
gate('nvidia-mps-ok', node, no_update, g_request(2, [[word(15)]]),
     g_answer([([(word(48), word(14)), (word(49), word(33)), (word(50), word(53)), (word(51), word(54))],
                [(word(33), word(32), 0), (word(34), word(34), 0)],
                [(word(27), word(27), word(45)), (word(28), word(28), word(45))],
                [(word(56), word(57))], [word(57)])]))
gate('nvidia-all', node, no_update, g_request(2, [[word(14)]]), g_answer([([(word(48), s('all'))], [], [], [], [])]))
gate('mig', node, bytes([1]) + g_s(W_MPS, word(61)), g_request(3, [[word(16)], [word(17)]]),
     g_answer([([(word(48), word(20))], [], [(word(29), word(29), word(47))], [], [word(58)]),
               ([], [(word(36), word(35), 0)], [], [], [word(60)])]))
gate('hostile-inventory',
     bytes([5]) + g_object(0, [g_s(W_ID, word(12)), g_as(W_NODES, [word(41)])])
     + g_object(2, [g_s(W_ID, word(12)), g_as(W_BYPATH, [word(43)])])
     + g_object(5, [g_s(W_ID, word(14))])
     + g_object(1, [g_i(W_ID, 7), g_s(W_CARD, word(44))])
     + g_object(3, [g_s(W_ID, word(13)), g_i(W_INDEX, 5000), g_s(W_MPS, word(38))]),
     bytes([1]) + g_s(W_CARD, word(42)), g_request(0, [[word(12)]]),
     g_answer([([], [], [(word(41), word(41), word(45))], [], [])]))
gate('empty-inventory', bytes([0]), no_update, g_request(0, [[word(12)]]), g_answer([([], [], intel_nodes, [], [])]))
