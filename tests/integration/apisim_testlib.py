#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# apisim_testlib.py — what the API server simulator's self-tests share: a test PKI in a
# temp directory, clients of their own (HTTP/1.1 over a raw TLS socket with the chunk
# framing visible, HTTP/2 on python3-h2's client side, python's ssl for ALPN and TLS
# versions), Status and event helpers, the seed state and the runner (one simulator, the
# checks in order, a failure names its check, a 170 s timer bounds the file).

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402

# Everything imported here is re-exported to the test files (from apisim_testlib import *).
from apiserver_sim import (ApiServerSim, SimClient, make_pki, make_client_cert, write_kubeconfig,  # noqa: E402
                           write_serviceaccount, rbac_from_manifests, DEFAULT_RBAC, SERVICEACCOUNT_USER)

TMP = tempfile.mkdtemp(prefix='kgpu-apisim-')
PKI = make_pki(os.path.join(TMP, 'pki'))
USER = PKI['users']['kgpu-cluster']
INTRUDER = PKI['users']['intruder']
GPU = 'gpu.intel.com/i915'


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


# ------------------------------------------------------------------ clients


def tls_context(cert=None, key=None, alpn=('h2', 'http/1.1'), ca=None, max_version=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca or PKI['ca'])
    if max_version is not None:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', DeprecationWarning)
            ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
            ctx.maximum_version = max_version
    if cert:
        ctx.load_cert_chain(cert, key)
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def connect(sim, cert=USER['cert'], key=USER['key'], alpn=('h2', 'http/1.1'), host='localhost'):
    raw = socket.create_connection(('127.0.0.1', sim.port), 5)
    s = tls_context(cert, key, alpn).wrap_socket(raw, server_hostname=host)
    s.settimeout(10)
    return s


class H1:
    """HTTP/1.1 over one TLS socket; keeps the chunk framing visible."""

    def __init__(self, sim, **kw):
        self.s = connect(sim, alpn=('http/1.1',), **kw)
        check(self.s.selected_alpn_protocol() == 'http/1.1', 'ALPN: %r' % self.s.selected_alpn_protocol())
        self.buf = b''

    def _fill(self):
        d = self.s.recv(65536)
        if not d:
            raise EOFError('connection closed')
        self.buf += d

    def _line(self):
        while b'\r\n' not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b'\r\n', 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            self._fill()
        d, self.buf = self.buf[:n], self.buf[n:]
        return d

    def request(self, path, headers=None):
        hs = {'Host': 'localhost', 'Accept': 'application/json', 'User-Agent': 'apisim-test/1'}
        hs.update(headers or {})
        self.s.sendall(('GET %s HTTP/1.1\r\n' % path + ''.join('%s: %s\r\n' % kv for kv in hs.items())
                        + '\r\n').encode())
        status = int(self._line().split(b' ')[1])
        headers = {}
        while True:
            line = self._line()
            if not line:
                break
            k, v = line.decode().split(':', 1)
            headers[k.strip().lower()] = v.strip()
        return status, headers

    def body(self, headers):
        """Content-Length or chunked (net/http chunks whatever outgrows its 2 KiB buffer)."""
        if 'content-length' in headers:
            check('transfer-encoding' not in headers, 'both Content-Length and Transfer-Encoding')
            return self._exact(int(headers['content-length']))
        check(headers.get('transfer-encoding') == 'chunked', 'neither Content-Length nor chunked: %r' % headers)
        out = b''
        while True:
            c = self.chunk()
            if not c:
                return out
            out += c

    def chunk(self):
        """One chunk's bytes (b'' = the last chunk); EOFError when the stream was cut."""
        size = int(self._line(), 16)
        data = self._exact(size)
        check(self._exact(2) == b'\r\n', 'chunk not followed by CRLF')
        return data

    def get_json(self, path, headers=None):
        st, hs = self.request(path, headers)
        return st, hs, json.loads(self.body(hs))

    def close(self):
        self.s.close()


class H2:
    """A small HTTP/2 client on python3-h2's client side."""

    def __init__(self, sim, alpn=('h2', 'http/1.1'), **kw):
        self.s = connect(sim, alpn=alpn, **kw)
        check(self.s.selected_alpn_protocol() == 'h2', 'ALPN chose %r' % self.s.selected_alpn_protocol())
        self.c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding='utf-8'))
        self.c.initiate_connection()
        self.s.sendall(self.c.data_to_send())
        self.streams = {}

    def start(self, path, headers=()):
        sid = self.c.get_next_available_stream_id()
        self.c.send_headers(sid, [(':method', 'GET'), (':path', path), (':scheme', 'https'),
                                  (':authority', 'localhost'), ('accept', 'application/json')] + list(headers),
                            end_stream=True)
        self.s.sendall(self.c.data_to_send())
        self.streams[sid] = {'headers': None, 'data': b'', 'ended': False, 'reset': None, 'closed': False}
        return sid

    def pump(self, timeout=5.0):
        """Reads once (up to timeout); returns False on EOF."""
        self.s.settimeout(timeout)
        try:
            d = self.s.recv(65536)
        except socket.timeout:
            return True
        if not d:
            for st in self.streams.values():
                st['closed'] = True
            return False
        for ev in self.c.receive_data(d):
            st = self.streams.get(getattr(ev, 'stream_id', None))
            if isinstance(ev, h2.events.ResponseReceived):
                st['headers'] = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                st['data'] += ev.data
                self.c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                st['ended'] = True
            elif isinstance(ev, h2.events.StreamReset):
                st['reset'] = ev.error_code
        out = self.c.data_to_send()
        if out:
            self.s.sendall(out)
        return True

    def wait(self, sid, cond, timeout=10.0):
        end = time.time() + timeout
        st = self.streams[sid]
        while time.time() < end:
            if cond(st):
                return st
            if not self.pump(min(0.5, max(0.01, end - time.time()))):
                break
        check(cond(st), 'stream %d: condition not met in %.1fs: %r' % (sid, timeout, st))
        return st

    def get(self, path, timeout=10.0):
        sid = self.start(path)
        st = self.wait(sid, lambda s: s['ended'] or s['reset'] is not None or s['closed'], timeout)
        return int(st['headers'][':status']), st['headers'], st['data']

    def close(self):
        self.s.close()


def events_of(data):
    return [json.loads(x) for x in data.split(b'\n') if x.strip()]


def status_body(code, reason, message, details=None):
    s = {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure', 'message': message,
         'reason': reason}
    if details is not None:
        s['details'] = details
    s['code'] = code
    return s


def watch_lines_h1(cl, want, timeout=10.0):
    """Reads chunks until `want` newline-terminated events arrived; checks each chunk holds
    whole lines (the JSON serializer writes one event per write)."""
    out = []
    end = time.time() + timeout
    while len(out) < want and time.time() < end:
        c = cl.chunk()
        check(c, 'the watch ended early')
        check(c.endswith(b'\n'), 'an event chunk does not end with a newline: %r' % c[:80])
        out += events_of(c)
    return out


# ------------------------------------------------------------------ checks


RBAC_YAML = '''
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: one-node}
rules:
  - apiGroups: [""]
    resources: ["nodes"]
    resourceNames: ["node-a"]
    verbs: ["get", "list", "watch"]
  - apiGroups: ["apps"]
    resources: ["pods"]
    verbs: ["list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: one-node}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: one-node}
subjects:
  - {kind: User, name: intruder}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: team-pods, namespace: team}
rules:
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: team-pods, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: team-pods}
subjects:
  - {kind: Group, name: intruders}
'''


GAS = {'gas-ts': '1700000000', 'gas-container-cards': 'card0', 'gas-container-tiles': 'card0:gt0'}


def seed(sim):
    sim.add_node('node-a', {'nvidia.com/device-plugin.config': 'ts4'})
    sim.add_node('node-b')
    sim.add_pod('default', 'p-gas', 'node-a', GAS, [{'name': 'c0', 'limits': {GPU: '1'}}])
    sim.add_pod('default', 'p-plain', 'node-a', phase='Running')
    sim.add_pod('team', 'p-other', 'node-b')


def run(checks):
    only = sys.argv[1:]
    failed = []
    sim = ApiServerSim(PKI).start()
    seed(sim)
    done = threading.Event()
    threading.Timer(170, lambda: (None if done.is_set() else (print('apisim self-test: global timeout'),
                                                              os._exit(1)))).start()
    try:
        for fn in checks:
            if only and fn.__name__ not in only:
                continue
            t0 = time.time()
            try:
                fn(sim)
                print('ok   %-36s %.2fs' % (fn.__name__, time.time() - t0), flush=True)
            except Exception:
                failed.append(fn.__name__)
                print('FAIL %s' % fn.__name__, flush=True)
                traceback.print_exc()
                sim.clear_faults()
    finally:
        sim.stop()
        done.set()
        if os.environ.get('KGPU_TEST_KEEP_TMP') != '1':
            shutil.rmtree(TMP, ignore_errors=True)
    if failed:
        print('failed: ' + ', '.join(failed))
        return 1
    return 0
