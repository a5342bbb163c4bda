#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_apiserver_sim.py — the API server simulator checked from outside, with clients of
# its own: HTTP/1.1 over a raw TLS socket (chunk framing read byte by byte), HTTP/2
# through python3-h2's client side, and python's ssl for ALPN and TLS versions. Each
# check names the wire fact of apiserver_sim.py's header it proves: ALPN h2 / http/1.1
# (and forced http/1.1), TLS 1.2 minimum, client certificates (CN user, O groups) and
# bearer tokens, the exact 401 / 403 / 400 / 404 / 410 / 429 / 500 Status bodies, list
# and get shapes, field selectors, watch framing (newline-delimited JSON in HTTP/1.1
# chunks), ADDED / MODIFIED / DELETED on selector changes, bookmarks, timeoutSeconds,
# compaction (410 ERROR event, Exact lists), down / up, cut streams, oversized and
# garbage bodies, slow headers, process mode with the control socket, and the
# kubeconfig writer.

import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402

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

def t_alpn_and_tls(sim):
    s = connect(sim)
    check(s.selected_alpn_protocol() == 'h2', 'h2 not negotiated by ALPN: %r' % s.selected_alpn_protocol())
    check(s.version() in ('TLSv1.2', 'TLSv1.3'), s.version())
    s.close()
    s = connect(sim, alpn=('http/1.1',))
    check(s.selected_alpn_protocol() == 'http/1.1', 'http/1.1 not chosen')
    s.close()
    s = connect(sim, alpn=None)
    check(s.selected_alpn_protocol() is None, 'ALPN answered without an offer')
    s.close()
    try:
        raw = socket.create_connection(('127.0.0.1', sim.port), 5)
        ctx = tls_context(USER['cert'], USER['key'], max_version=ssl.TLSVersion.TLSv1_1)
        ctx.set_ciphers('ALL:@SECLEVEL=0')
        ctx.wrap_socket(raw, server_hostname='localhost').close()
        raise AssertionError('a TLS 1.1 handshake was accepted')
    except (ssl.SSLError, ConnectionError):
        pass
    for host in ('localhost', '127.0.0.1'):
        connect(sim, host=host).close()     # SANs
    with ApiServerSim(PKI, http1_only=True) as s1:
        s = connect(s1)
        check(s.selected_alpn_protocol() == 'http/1.1', 'http1_only still offered %r' % s.selected_alpn_protocol())
        s.close()


def t_authn(sim):
    cl = H1(sim, cert=None, key=None)
    st, hs, body = cl.get_json('/api/v1/nodes')
    check(st == 401, st)
    check(body == status_body(401, 'Unauthorized', 'Unauthorized'), body)
    check(hs['content-type'] == 'application/json', hs)
    st, hs, body = cl.get_json('/api/v1/nodes', {'Authorization': 'Bearer nope'})
    check(st == 401 and body['reason'] == 'Unauthorized', body)
    token = PKI['token_values']['kgpu-cluster']
    st, hs, body = cl.get_json('/api/v1/nodes', {'Authorization': 'Bearer ' + token})
    check(st == 200 and body['kind'] == 'NodeList', body)
    cl.close()
    r = sim.requests()[-1]
    check(r['user'] == 'kgpu-cluster' and 'system:authenticated' in r['groups'], r)
    cl = H2(sim)
    st, _h, _b = cl.get('/api/v1/nodes')
    check(st == 200, st)
    r = sim.requests()[-1]
    check(r['user'] == 'kgpu-cluster' and 'kgpu:cluster-daemons' in r['groups'] and r['proto'] == 'h2', r)
    cl.close()
    # tls.RequestClientCert: a certificate of another CA, or an expired one, completes the
    # handshake; the x509 authenticator refuses it with 401.
    for cert, key in ((PKI['rogue_cert'], PKI['rogue_key']), (PKI['expired_cert'], PKI['expired_key'])):
        cl = H1(sim, cert=cert, key=key)
        st, _h, body = cl.get_json('/api/v1/nodes')
        check(st == 401 and body == status_body(401, 'Unauthorized', 'Unauthorized'), (cert, body))
        # ... also when a good token comes with it (the union: the token succeeds).
        st, _h, body = cl.get_json('/api/v1/nodes', {'Authorization': 'Bearer ' + token})
        check(st == 200, 'a good token beside a bad certificate: %r' % body)
        cl.close()
    # A good certificate with a bad token: x509 comes first in the union and succeeds.
    cl = H1(sim)
    st, _h, body = cl.get_json('/api/v1/nodes', {'Authorization': 'Bearer nope'})
    check(st == 200, 'good certificate + bad token: %r' % body)
    check(sim.requests()[-1]['user'] == 'kgpu-cluster', sim.requests()[-1])
    cl.close()
    # Anonymous on: no credentials is system:anonymous, refused by RBAC with 403; a bad
    # token is still 401 (union.NewFailOnError).
    sim.set_anonymous(True)
    try:
        cl = H1(sim, cert=None, key=None)
        st, _h, body = cl.get_json('/api/v1/nodes')
        check(st == 403 and 'User "system:anonymous" cannot list resource "nodes"' in body['message'], body)
        st, _h, body = cl.get_json('/api/v1/nodes', {'Authorization': 'Bearer nope'})
        check(st == 401, 'a bad token became anonymous: %r' % body)
        cl.close()
    finally:
        sim.set_anonymous(False)


def t_authz(sim):
    cl = H1(sim, cert=INTRUDER['cert'], key=INTRUDER['key'])
    st, _h, body = cl.get_json('/api/v1/nodes?watch=1&fieldSelector=metadata.name%3Dnode-a')
    check(st == 403, st)
    check(body == status_body(403, 'Forbidden', 'nodes "node-a" is forbidden: User "intruder" cannot watch resource '
                              '"nodes" in API group "" at the cluster scope', {'name': 'node-a', 'kind': 'nodes'}), body)
    st, _h, body = cl.get_json('/api/v1/namespaces/default/pods')
    check(body == status_body(403, 'Forbidden', 'pods is forbidden: User "intruder" cannot list resource "pods" in '
                              'API group "" in the namespace "default"', {'kind': 'pods'}), body)
    st, _h, body = cl.get_json('/api/v1/nodes/node-a')
    check(body['message'] == 'nodes "node-a" is forbidden: User "intruder" cannot get resource "nodes" in API group '
          '"" at the cluster scope', body)
    cl.close()
    sim.set_rbac([{'users': ['intruder'], 'verbs': ['list'], 'resources': ['pods']}])
    try:
        cl = H1(sim, cert=INTRUDER['cert'], key=INTRUDER['key'])
        st, _h, body = cl.get_json('/api/v1/pods')
        check(st == 200 and body['kind'] == 'PodList', body)
        st, _h, body = cl.get_json('/api/v1/pods?watch=true')
        check(st == 403 and 'cannot watch resource "pods"' in body['message'], body)
        cl.close()
    finally:
        sim.set_rbac(DEFAULT_RBAC)


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


def t_rbac_manifests(sim):
    # The default table is deploy/rbac.yaml's: no get of a pod.
    cl = H1(sim)
    st, _h, body = cl.get_json('/api/v1/namespaces/default/pods/p-gas')
    check(st == 403 and body['message'] == 'pods "p-gas" is forbidden: User "kgpu-cluster" cannot get resource "pods" '
          'in API group "" in the namespace "default"', body)
    cl.close()
    sim.set_rbac(rbac_from_manifests(RBAC_YAML))
    try:
        cl = H1(sim, cert=INTRUDER['cert'], key=INTRUDER['key'])
        # resourceNames restrict a watch through its metadata.name field selector.
        st, _h, body = cl.get_json('/api/v1/nodes?watch=1&timeoutSeconds=1&fieldSelector=metadata.name%3Dnode-b')
        check(st == 403 and body['details'] == {'name': 'node-b', 'kind': 'nodes'}, body)
        st, hs = cl.request('/api/v1/nodes?watch=1&timeoutSeconds=1&fieldSelector=metadata.name%3Dnode-a')
        check(st == 200, 'resourceNames did not allow the named watch: %d' % st)
        watch_lines_h1(cl, 1)
        check(cl.chunk() == b'', 'watch end')
        st, _h, body = cl.get_json('/api/v1/nodes')
        check(st == 403, 'resourceNames allowed an unnamed list')
        st, _h, body = cl.get_json('/api/v1/pods')
        check(st == 403, 'a rule of group apps granted core pods')
        st, _h, body = cl.get_json('/api/v1/namespaces/team/pods')
        check(st == 200 and [i['metadata']['name'] for i in body['items']] == ['p-other'], body)
        st, _h, body = cl.get_json('/api/v1/namespaces/default/pods')
        check(st == 403 and body['message'].endswith('in the namespace "default"'), body)
        cl.close()
    finally:
        sim.set_rbac(DEFAULT_RBAC)


def t_list_get(sim):
    cl = H1(sim)
    st, hs, body = cl.get_json('/api/v1/nodes')
    check(st == 200 and hs['cache-control'] == 'no-cache, private' and 'audit-id' in hs, hs)
    check(list(body)[:4] == ['kind', 'apiVersion', 'metadata', 'items'], list(body))
    check(body['kind'] == 'NodeList' and body['apiVersion'] == 'v1', body)
    check(body['metadata'] == {'resourceVersion': str(sim.resource_version())}, body['metadata'])
    names = [i['metadata']['name'] for i in body['items']]
    check(names == ['node-a', 'node-b'], names)
    check(all('kind' not in i and 'apiVersion' not in i for i in body['items']), 'list items carry kind')
    check(body['items'][0]['metadata']['labels']['nvidia.com/device-plugin.config'] == 'ts4', body['items'][0])
    st, hs, body = cl.get_json('/api/v1/nodes/node-a')
    check(st == 200 and body['kind'] == 'Node' and body['apiVersion'] == 'v1'
          and body['metadata']['name'] == 'node-a', body)
    st, hs, body = cl.get_json('/api/v1/nodes/nope')
    check(st == 404 and body == status_body(404, 'NotFound', 'nodes "nope" not found', {'name': 'nope', 'kind': 'nodes'}),
          body)
    st, hs, body = cl.get_json('/api/v1/pods')
    check(body['kind'] == 'PodList' and len(body['items']) == 3, body)
    st, hs, body = cl.get_json('/api/v1/namespaces/team/pods')
    check([i['metadata']['name'] for i in body['items']] == ['p-other'], body)
    cl.close()


def t_field_selectors(sim):
    cl = H1(sim)
    st, _h, body = cl.get_json('/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a')
    got = sorted(i['metadata']['name'] for i in body['items'])
    check(got == ['p-gas', 'p-plain'], got)
    pod = [i for i in body['items'] if i['metadata']['name'] == 'p-gas'][0]
    check(pod['metadata']['annotations']['gas-container-cards'] == 'card0', pod)
    check(pod['spec']['containers'][0]['resources']['limits'] == {GPU: '1'}, pod)
    check(pod['status']['phase'] == 'Pending', pod)
    st, _h, body = cl.get_json('/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a,status.phase!%3DRunning')
    check(sorted(i['metadata']['name'] for i in body['items']) == ['p-gas'], body)
    st, _h, body = cl.get_json('/api/v1/nodes?fieldSelector=metadata.name%3Dnode-b')
    check([i['metadata']['name'] for i in body['items']] == ['node-b'], body)
    for path, label in (('/api/v1/pods?fieldSelector=metadata.labels%3Dx', 'metadata.labels'),
                        ('/api/v1/nodes?fieldSelector=spec.nodeName%3Dx', 'spec.nodeName'),
                        ('/api/v1/pods?watch=1&fieldSelector=spec.nodename%3Dx', 'spec.nodename')):
        st, _h, body = cl.get_json(path)
        check(st == 400 and body == status_body(400, 'BadRequest', 'field label not supported: ' + label), body)
    cl.close()


def t_watch_h1_framing_and_timeout(sim):
    cl = H1(sim)
    rv = sim.resource_version()
    t0 = time.time()
    st, hs = cl.request('/api/v1/nodes?watch=1&resourceVersion=%d&timeoutSeconds=2&fieldSelector=metadata.name%%3Dnode-a'
                        % rv)
    check(st == 200 and hs.get('transfer-encoding') == 'chunked' and 'content-length' not in hs, hs)
    check(hs['content-type'] == 'application/json', hs)
    sim.set_node_label('node-a', 'nvidia.com/device-plugin.config', 'mps')
    ev = watch_lines_h1(cl, 1)
    check(ev[0]['type'] == 'MODIFIED' and ev[0]['object']['kind'] == 'Node', ev)
    check(ev[0]['object']['metadata']['labels']['nvidia.com/device-plugin.config'] == 'mps', ev)
    check(int(ev[0]['object']['metadata']['resourceVersion']) == rv + 1, ev)
    check(cl.chunk() == b'', 'the watch did not end with the last chunk')
    took = time.time() - t0
    check(1.5 < took < 4.0, 'timeoutSeconds=2 ended the stream after %.1fs' % took)
    # Keep-alive: the same connection serves the next request.
    st, _h, body = cl.get_json('/api/v1/nodes/node-a')
    check(st == 200, st)
    cl.close()
    # A client that goes away ends its watch on the server (HTTP/1.1 and an HTTP/2 reset).
    base = len(sim.watches('pods'))
    cl = H1(sim)
    cl.request('/api/v1/pods?watch=1&timeoutSeconds=60')
    check(sim.wait_watches(base + 1, 'pods', 5), 'the watch did not open')
    cl.close()
    end = time.time() + 5
    while time.time() < end and len(sim.watches('pods')) > base:
        time.sleep(0.05)
    check(len(sim.watches('pods')) == base, 'a closed HTTP/1.1 client still counts as a watch')
    c2 = H2(sim)
    sid = c2.start('/api/v1/pods?watch=1&timeoutSeconds=60')
    c2.wait(sid, lambda s: s['headers'] is not None)
    check(sim.wait_watches(base + 1, 'pods', 5), 'the h2 watch did not open')
    c2.c.reset_stream(sid)
    c2.s.sendall(c2.c.data_to_send())
    end = time.time() + 5
    while time.time() < end and len(sim.watches('pods')) > base:
        time.sleep(0.05)
    check(len(sim.watches('pods')) == base, 'a reset HTTP/2 stream still counts as a watch')
    st, _h, _b = c2.get('/api/v1/nodes')
    check(st == 200, 'the h2 connection is unusable after a stream reset')
    c2.close()


def t_watch_h2_selector(sim):
    cl = H2(sim)
    sid = cl.start('/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dnode-a&timeoutSeconds=20')
    st = cl.wait(sid, lambda s: len(events_of(s['data'])) >= 2)
    check(st['headers'][':status'] == '200' and st['headers']['content-type'] == 'application/json', st['headers'])
    ev = events_of(st['data'])
    check([e['type'] for e in ev] == ['ADDED', 'ADDED'], ev)
    check(sorted(e['object']['metadata']['name'] for e in ev) == ['p-gas', 'p-plain'], ev)
    check(all(e['object']['kind'] == 'Pod' and e['object']['apiVersion'] == 'v1' for e in ev), ev)
    n0 = len(ev)
    # Moves off the node: DELETED with the previous content and the new resourceVersion.
    moved = sim.update_pod('default', 'p-plain', node_name='node-b')
    st = cl.wait(sid, lambda s: len(events_of(s['data'])) >= n0 + 1)
    e = events_of(st['data'])[n0]
    check(e['type'] == 'DELETED' and e['object']['metadata']['name'] == 'p-plain', e)
    check(e['object']['spec']['nodeName'] == 'node-a', 'DELETED does not carry the previous object: %r' % e)
    check(e['object']['metadata']['resourceVersion'] == moved['metadata']['resourceVersion'], e)
    # A change of a pod elsewhere: nothing; back onto the node: ADDED.
    sim.update_pod('team', 'p-other', annotations={'x': 'y'})
    sim.update_pod('default', 'p-plain', node_name='node-a')
    sim.update_pod('default', 'p-gas', annotations={'gas-ts': '2'})
    st = cl.wait(sid, lambda s: len(events_of(s['data'])) >= n0 + 3)
    ev = events_of(st['data'])[n0 + 1:]
    check([(e['type'], e['object']['metadata']['name']) for e in ev] == [('ADDED', 'p-plain'), ('MODIFIED', 'p-gas')], ev)
    sim.delete_pod('default', 'p-gas')
    st = cl.wait(sid, lambda s: len(events_of(s['data'])) >= n0 + 4)
    e = events_of(st['data'])[-1]
    check(e['type'] == 'DELETED' and e['object']['metadata']['name'] == 'p-gas', e)
    check(st['data'].endswith(b'\n'), 'events are not newline-terminated')
    cl.close()
    sim.add_pod('default', 'p-gas', 'node-a', GAS, [{'name': 'c0', 'limits': {GPU: '1'}}])


def t_bookmarks(sim):
    sim.set_bookmark_interval(0.3)
    try:
        cl = H2(sim)
        rv = sim.resource_version()
        sid = cl.start('/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion=%d'
                       '&fieldSelector=spec.nodeName%%3Dnode-a&timeoutSeconds=10' % rv)
        sim.update_pod('team', 'p-other', annotations={'seen': 'no'})   # not this watch's
        st = cl.wait(sid, lambda s: any(e['type'] == 'BOOKMARK' for e in events_of(s['data'])))
        ev = events_of(st['data'])
        check(all(e['type'] == 'BOOKMARK' for e in ev), ev)
        bm = ev[0]
        check(bm == {'type': 'BOOKMARK', 'object': {'kind': 'Pod', 'apiVersion': 'v1',
                                                    'metadata': {'resourceVersion': str(rv + 1)}}}, bm)
        # The bookmark 2 s before the deadline, with the interval far away.
        sim.set_bookmark_interval(60)
        sid4 = cl.start('/api/v1/nodes?watch=1&allowWatchBookmarks=true&resourceVersion=%d&timeoutSeconds=3'
                        % sim.resource_version())
        t0 = time.time()
        st4 = cl.wait(sid4, lambda s: len(events_of(s['data'])) >= 1, 5)
        took = time.time() - t0
        check(events_of(st4['data'])[0]['type'] == 'BOOKMARK' and 0.5 < took < 2.5,
              'pre-timeout bookmark after %.1fs: %r' % (took, st4['data']))
        cl.wait(sid4, lambda s: s['ended'], 5)
        check(len(events_of(st4['data'])) == 1, 'more than the one pre-timeout bookmark')
        sim.set_bookmark_interval(0.3)
        # Without allowWatchBookmarks: none.
        sid2 = cl.start('/api/v1/pods?watch=1&resourceVersion=%d&timeoutSeconds=1' % (rv + 1))
        st2 = cl.wait(sid2, lambda s: s['ended'], 5)
        check(events_of(st2['data']) == [], st2['data'])
        # sendInitialEvents: ADDED then the bookmark with the initial-events-end annotation.
        sid3 = cl.start('/api/v1/nodes?watch=1&sendInitialEvents=true&allowWatchBookmarks=true'
                        '&resourceVersionMatch=NotOlderThan&timeoutSeconds=5')
        st3 = cl.wait(sid3, lambda s: len(events_of(s['data'])) >= 3)
        ev = events_of(st3['data'])
        check([e['type'] for e in ev[:3]] == ['ADDED', 'ADDED', 'BOOKMARK'], ev)
        check(ev[2]['object']['metadata']['annotations'] == {'k8s.io/initial-events-end': 'true'}, ev[2])
        cl.close()
    finally:
        sim.set_bookmark_interval(60)


def t_compaction(sim):
    old = sim.resource_version()
    sim.set_node_label('node-b', 'step', '1')
    mid = sim.resource_version()
    sim.set_node_label('node-b', 'step', '2')
    cl = H1(sim)
    # Exact at a kept revision: the state as it was.
    st, _h, body = cl.get_json('/api/v1/nodes?resourceVersion=%d&resourceVersionMatch=Exact' % mid)
    check(st == 200 and body['metadata']['resourceVersion'] == str(mid), body)
    nb = [i for i in body['items'] if i['metadata']['name'] == 'node-b'][0]
    check(nb['metadata']['labels']['step'] == '1', nb)
    sim.compact()
    cur = sim.resource_version()
    st, hs = cl.request('/api/v1/nodes?watch=1&resourceVersion=%d' % old)
    check(st == 200, 'a too-old watch must open with 200, got %d' % st)
    ev = watch_lines_h1(cl, 1)
    check(ev == [{'type': 'ERROR', 'object': status_body(410, 'Expired', 'too old resource version: %d (%d)'
                                                         % (old, cur))}], ev)
    check(cl.chunk() == b'', 'the expired watch did not end')
    st, _h, body = cl.get_json('/api/v1/nodes?resourceVersion=%d&resourceVersionMatch=Exact' % old)
    check(st == 410 and body == status_body(410, 'Expired', 'The resourceVersion for the provided list is too old.'), body)
    st, _h, body = cl.get_json('/api/v1/nodes?resourceVersion=%d&resourceVersionMatch=NotOlderThan' % old)
    check(st == 200 and body['metadata']['resourceVersion'] == str(cur), body)
    st, _h, body = cl.get_json('/api/v1/nodes?resourceVersion=%d' % old)
    check(st == 200, 'legacy resourceVersion=N (not older than) refused: %r' % body)
    st, _h, body = cl.get_json('/api/v1/nodes?resourceVersionMatch=Exact')
    check(st == 422 and body['reason'] == 'Invalid', body)
    t0 = time.time()
    st, hs, body = cl.get_json('/api/v1/nodes?resourceVersion=%d' % (cur + 100))
    check(st == 504 and body == status_body(504, 'Timeout', 'Timeout: Too large resource version: %d, current: %d'
                                            % (cur + 100, cur),
                                            {'causes': [{'reason': 'ResourceVersionTooLarge',
                                                         'message': 'Too large resource version'}],
                                             'retryAfterSeconds': 1}), body)
    check(hs.get('retry-after') == '1', hs)
    check(2.5 < time.time() - t0 < 6, 'the too-large wait was not about 3 s')
    # A watch from the current revision works.
    st, hs = cl.request('/api/v1/nodes?watch=1&resourceVersion=%d&timeoutSeconds=1' % cur)
    check(st == 200 and cl.chunk() == b'', 'a watch from the compaction point failed')
    cl.close()


def t_faults(sim):
    cl = H1(sim)
    # 429 from priority and fairness: net/http's plain-text http.Error.
    sim.add_fault('status', resource='nodes', verb='list', count=1, code=429, retry_after=3)
    st, hs = cl.request('/api/v1/nodes')
    check(st == 429 and hs.get('retry-after') == '3' and hs['content-type'] == 'text/plain; charset=utf-8', (st, hs))
    check(cl.body(hs) == b'Too many requests, please try again later.\n', '429 body')
    sim.add_fault('status', resource='nodes', verb='list', count=1, code=429, retry_after=2, style='status')
    st, hs, body = cl.get_json('/api/v1/nodes')
    check(st == 429 and hs.get('retry-after') == '2', (st, hs))
    check(body == status_body(429, 'TooManyRequests', 'Too many requests, please try again later.',
                              {'retryAfterSeconds': 2}), body)
    st, _h, body = cl.get_json('/api/v1/nodes')
    check(st == 200, 'count=1 fault hit twice')
    sim.add_fault('status', resource='pods', count=1, code=500)
    st, _h, body = cl.get_json('/api/v1/pods')
    check(st == 500 and body['reason'] == 'InternalError' and body['message'].startswith('Internal error occurred: '),
          body)
    sim.add_fault('status', count=1, code=401)
    st, _h, body = cl.get_json('/api/v1/pods')
    check(st == 401 and body == status_body(401, 'Unauthorized', 'Unauthorized'), body)
    sim.add_fault('status', count=1, code=403, verb='watch')
    st, _h, body = cl.get_json('/api/v1/pods?watch=1')
    check(st == 403 and body['reason'] == 'Forbidden', body)
    sim.add_fault('oversized', resource='pods', count=1, size=3 * 1024 * 1024)
    st, hs, raw = (lambda r: (r[0], r[1], cl.body(r[1])))(cl.request('/api/v1/pods'))
    check(st == 200 and len(raw) > 3 * 1024 * 1024, len(raw))
    check(json.loads(raw)['kind'] == 'PodList', 'oversized body is not a valid list')
    sim.add_fault('garbage', resource='nodes', count=1, body='}{ not json')
    st, hs = cl.request('/api/v1/nodes')
    check(st == 200 and cl.body(hs) == b'}{ not json', 'garbage body')
    cl.close()
    cl = H1(sim)
    sim.add_fault('truncated', resource='nodes', count=1)
    st, hs = cl.request('/api/v1/nodes')
    n = int(hs['content-length'])
    try:
        cl.body(hs)
        raise AssertionError('a truncated body arrived whole')
    except EOFError:
        check(len(cl.buf) < n, 'truncated')
    cl.close()
    # Garbage in a watch: one non-JSON line, then the events.
    cl = H1(sim)
    sim.add_fault('garbage', resource='nodes', verb='watch', count=1)
    st, hs = cl.request('/api/v1/nodes?watch=1&timeoutSeconds=2')
    c = cl.chunk()
    check(c.startswith(b'\x00'), 'no garbage line first: %r' % c[:40])
    cl.close()
    # Watch faults after K events: garbage line, oversized event, ERROR event.
    for kind, params, check_fn in (
            ('garbage', {'body': 'not json'}, lambda evs, raw: raw.split(b'\n')[1] == b'not json'),
            ('oversized', {'size': 200000}, lambda evs, raw: len(raw.split(b'\n')[1]) > 200000
             and json.loads(raw.split(b'\n')[1])['type'] == 'ADDED'),
            ('error_event', {}, lambda evs, raw: raw.split(b'\n')[1].startswith(b'{"type":"ERROR"')
             and json.loads(raw.split(b'\n')[1])['object']['code'] == 410)):
        sim.add_fault(kind, resource='nodes', verb='watch', count=1, after=1, **params)
        c2 = H2(sim)
        sid = c2.start('/api/v1/nodes?watch=1&timeoutSeconds=1')
        st = c2.wait(sid, lambda s: s['ended'] or s['closed'], 8)
        check(check_fn(None, st['data']), '%s after 1 event: %r' % (kind, st['data'][:300]))
        c2.close()
    # The token table changes live.
    sim.add_token('rotated-token', 'kgpu-cluster', ['kgpu:cluster-daemons'])
    c2 = H1(sim, cert=None, key=None)
    st, _h, _b = c2.get_json('/api/v1/nodes', {'Authorization': 'Bearer rotated-token'})
    check(st == 200, 'an added token was refused')
    sim.remove_token('rotated-token')
    st, _h, _b = c2.get_json('/api/v1/nodes', {'Authorization': 'Bearer rotated-token'})
    check(st == 401, 'a removed token still works')
    c2.close()
    # Slow headers, measured.
    sim.slow(headers=0.8)
    try:
        cl = H2(sim)
        t0 = time.time()
        st, _h, _b = cl.get('/api/v1/nodes')
        check(st == 200 and time.time() - t0 >= 0.7, 'slow headers not delayed: %.2f' % (time.time() - t0))
        cl.close()
    finally:
        sim.slow(0, 0)
    # Slow events.
    sim.add_fault('slow', resource='nodes', verb='watch', count=1, events=0.5)
    cl = H2(sim)
    t0 = time.time()
    sid = cl.start('/api/v1/nodes?watch=1&timeoutSeconds=5')
    cl.wait(sid, lambda s: len(events_of(s['data'])) >= 2)
    check(time.time() - t0 >= 0.9, 'events not slowed')
    cl.close()


def t_cuts(sim):
    # HTTP/1.1 close at an event boundary: no last chunk, EOF.
    cl = H1(sim)
    st, hs = cl.request('/api/v1/nodes?watch=1&timeoutSeconds=30')
    watch_lines_h1(cl, 2)
    check(sim.wait_watches(1, 'nodes', 5), 'watch not registered')
    check(sim.cut_watches('close', 'nodes') == 1, 'one watch to cut')
    try:
        c = cl.chunk()
        raise AssertionError('got a chunk after the cut: %r' % c)
    except EOFError:
        pass
    # HTTP/1.1 mid-event: half a JSON line in a chunk, then EOF.
    cl = H1(sim)
    st, hs = cl.request('/api/v1/nodes?watch=1&timeoutSeconds=30')
    watch_lines_h1(cl, 2)
    sim.wait_watches(1, 'nodes', 5)
    sim.cut_watches('mid-event')
    sim.set_node_label('node-a', 'cut', 'me')
    c = cl.chunk()
    check(c and not c.endswith(b'\n'), 'mid-event cut sent %r' % c[-20:])
    try:
        json.loads(c)
        raise AssertionError('a half event parsed')
    except ValueError:
        pass
    try:
        cl.chunk()
        raise AssertionError('stream went on after a mid-event cut')
    except EOFError:
        pass
    # mid-chunk: the chunk announced whole, bytes missing.
    cl = H1(sim)
    st, hs = cl.request('/api/v1/nodes?watch=1&timeoutSeconds=30')
    watch_lines_h1(cl, 2)
    sim.wait_watches(1, 'nodes', 5)
    sim.cut_watches('mid-chunk')
    sim.set_node_label('node-a', 'cut', 'again')
    try:
        cl.chunk()
        raise AssertionError('a whole chunk after a mid-chunk cut')
    except EOFError:
        pass
    # HTTP/2 reset: RST_STREAM, the connection stays usable.
    cl = H2(sim)
    sid = cl.start('/api/v1/nodes?watch=1&timeoutSeconds=30')
    cl.wait(sid, lambda s: len(events_of(s['data'])) >= 2)
    sim.wait_watches(1, 'nodes', 5)
    sim.cut_watches('reset')
    st = cl.wait(sid, lambda s: s['reset'] is not None)
    check(st['reset'] == 2, 'RST_STREAM code %r' % st['reset'])     # INTERNAL_ERROR
    status, _h, _b = cl.get('/api/v1/nodes')
    check(status == 200, 'connection unusable after a stream reset')
    # HTTP/2 mid-event: half an event in DATA, then the connection closes.
    c2 = H2(sim)
    sid2 = c2.start('/api/v1/nodes?watch=1&timeoutSeconds=30')
    n0 = len(c2.wait(sid2, lambda s: len(events_of(s['data'])) >= 2)['data'])
    check(sim.wait_watches(1, 'nodes', 5), 'h2 watch not open')
    sim.cut_watches('mid-event')
    sim.set_node_label('node-a', 'cut', 'h2')
    st = c2.wait(sid2, lambda s: s['closed'])
    tail = st['data'][n0:]
    check(tail and not tail.endswith(b'\n') and not st['ended'], 'h2 mid-event cut: %r' % tail[-40:])
    c2.close()
    # HTTP/2 clean end.
    sid = cl.start('/api/v1/nodes?watch=1&timeoutSeconds=30')
    cl.wait(sid, lambda s: len(events_of(s['data'])) >= 2)
    time.sleep(0.1)
    sim.cut_watches('end')
    cl.wait(sid, lambda s: s['ended'])
    cl.close()


def t_down_up(sim):
    cl = H2(sim)
    sid = cl.start('/api/v1/nodes?watch=1&timeoutSeconds=30')
    cl.wait(sid, lambda s: len(events_of(s['data'])) >= 2)
    sim.down()
    cl.wait(sid, lambda s: s['closed'], 5)
    try:
        socket.create_connection(('127.0.0.1', sim.port), 2).close()
        raise AssertionError('still accepting while down')
    except ConnectionRefusedError:
        pass
    sim.up()
    check(sim.wait_up(5), 'not up again')
    # Graceful: the watch ends cleanly (END_STREAM), then GOAWAY and the close.
    cl = H2(sim)
    sid = cl.start('/api/v1/nodes?watch=1&timeoutSeconds=30')
    cl.wait(sid, lambda s: len(events_of(s['data'])) >= 2)
    check(sim.wait_watches(1, 'nodes', 5), 'watch not open')
    goaway = []
    orig = cl.c.receive_data

    def spy(d):
        evs = orig(d)
        goaway.extend(e for e in evs if isinstance(e, h2.events.ConnectionTerminated))
        return evs
    cl.c.receive_data = spy
    sim.down(graceful=True)
    st = cl.wait(sid, lambda s: s['ended'] and s['closed'], 5)
    check(goaway and goaway[0].error_code == 0, 'no GOAWAY NO_ERROR: %r' % goaway)
    sim.up()
    check(sim.wait_up(5), 'not up again after a graceful down')
    cl = H1(sim)
    st, _h, body = cl.get_json('/api/v1/nodes')
    check(st == 200 and len(body['items']) == 2, 'state lost over down/up')
    cl.close()


def t_gzip(sim):
    cl = H1(sim)
    sim.add_fault('oversized', resource='nodes', verb='list', count=2, size=300000)
    st, hs = cl.request('/api/v1/nodes', {'Accept-Encoding': 'gzip'})
    check(hs.get('content-encoding') == 'gzip', hs)
    import gzip
    check(json.loads(gzip.decompress(cl.body(hs)))['kind'] == 'NodeList', 'gzip body')
    st, hs = cl.request('/api/v1/nodes')
    check('content-encoding' not in hs, 'gzip without Accept-Encoding')
    cl.body(hs)
    cl.close()


def t_framing_and_paging(sim):
    cl = H1(sim)
    st, hs = cl.request('/api/v1/nodes/nope')
    check('content-length' in hs and 'transfer-encoding' not in hs, 'a small body is not sized: %r' % hs)
    cl.body(hs)
    st, hs = cl.request('/api/v1/pods')
    body = cl.body(hs)
    check(len(body) > 2048 and hs.get('transfer-encoding') == 'chunked' and 'content-length' not in hs,
          'a %d-byte list over HTTP/1.1 is not chunked: %r' % (len(body), hs))
    check(json.loads(body)['kind'] == 'PodList', 'chunked list body')
    # limit / continue
    st, _h, p1 = cl.get_json('/api/v1/pods?limit=2')
    check(len(p1['items']) == 2 and p1['metadata'].get('remainingItemCount') == 1 and p1['metadata'].get('continue'),
          p1['metadata'])
    sim.update_pod('team', 'p-other', annotations={'page': 'changed'})
    st, _h, p2 = cl.get_json('/api/v1/pods?limit=2&continue=' + p1['metadata']['continue'])
    check(len(p2['items']) == 1 and 'continue' not in p2['metadata'], p2['metadata'])
    check(p2['metadata']['resourceVersion'] == p1['metadata']['resourceVersion'], 'pages of different revisions')
    check('page' not in p2['items'][0]['metadata'].get('annotations', {}), 'the second page is not the snapshot')
    names = [i['metadata']['name'] for i in p1['items'] + p2['items']]
    check(sorted(names) == ['p-gas', 'p-other', 'p-plain'] and len(set(names)) == 3, names)
    sim.compact()
    st, _h, body = cl.get_json('/api/v1/pods?limit=2&continue=' + p1['metadata']['continue'])
    check(st == 410 and body['reason'] == 'Expired' and body['message'].startswith(
        'The provided continue parameter is too old'), body)
    # Non-resource paths: RBAC first.
    st, hs = cl.request('/foo')
    body = json.loads(cl.body(hs))
    check(st == 403 and body == status_body(403, 'Forbidden', 'forbidden: User "kgpu-cluster" cannot get path "/foo"',
                                            {}), body)
    # spec.host is the old name of spec.nodeName.
    st, _h, body = cl.get_json('/api/v1/pods?fieldSelector=spec.host%3Dnode-b')
    check([i['metadata']['name'] for i in body['items']] == ['p-other'], body)
    # Accept: JSON (or anything) answered, others 406.
    st, _h, body = cl.get_json('/api/v1/nodes', {'Accept': 'application/vnd.kubernetes.protobuf'})
    check(st == 406 and body['reason'] == 'NotAcceptable' and body['message'].startswith(
        'only the following media types are accepted: application/json'), body)
    st, _h, body = cl.get_json('/api/v1/nodes', {'Accept': 'application/vnd.kubernetes.protobuf, application/json'})
    check(st == 200, 'a JSON alternative refused')
    # The deprecated watch paths.
    st, hs = cl.request('/api/v1/watch/nodes/node-b?timeoutSeconds=1')
    ev = watch_lines_h1(cl, 1)
    check(st == 200 and [e['object']['metadata']['name'] for e in ev] == ['node-b'], ev)
    check(cl.chunk() == b'', 'legacy watch end')
    check(sim.requests()[-1]['verb'] == 'watch', sim.requests()[-1])
    st, _h, body = cl.get_json('/api/v1/watch/nodes/node-b?fieldSelector=metadata.name%3Dnode-a')
    check(st == 400 and body['message'] == "fieldSelector metadata.name doesn't match requested name", body)
    st, hs = cl.request('/api/v1/watch/namespaces/team/pods?timeoutSeconds=1')
    ev = watch_lines_h1(cl, 1)
    check([e['object']['metadata']['name'] for e in ev] == ['p-other'], ev)
    check(cl.chunk() == b'', 'legacy namespaced watch end')
    # Watch options as validateWatchOptions checks them.
    st, _h, body = cl.get_json('/api/v1/nodes?watch=1&resourceVersionMatch=NotOlderThan')
    check(st == 422 and body['message'] == 'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
          'resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided', body)
    st, _h, body = cl.get_json('/api/v1/nodes?watch=1&sendInitialEvents=true')
    check(st == 422 and body['details']['causes'][0]['field'] == 'resourceVersionMatch', body)
    cl.close()
    cl = H2(sim)
    sim.add_fault('oversized', resource='pods', verb='list', count=1, size=10000)
    st, hs, data = cl.get('/api/v1/pods')
    check(st == 200 and len(data) > 10000 and 'content-length' not in hs, 'a large h2 body is sized: %r' % hs)
    st, hs, data = cl.get('/api/v1/nodes/nope')
    check(hs.get('content-length') == str(len(data)), 'a small h2 body is not sized')
    # sendInitialEvents=false: no initial state, changes only.
    sid = cl.start('/api/v1/nodes?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&timeoutSeconds=5')
    cl.wait(sid, lambda s: s['headers'] is not None)
    sim.wait_watches(1, 'nodes', 5)
    sim.set_node_label('node-b', 'sie', 'false')
    st = cl.wait(sid, lambda s: len(events_of(s['data'])) >= 1)
    ev = events_of(st['data'])
    check([(e['type'], e['object']['metadata']['name']) for e in ev] == [('MODIFIED', 'node-b')], ev)
    # A watch from a future revision gets only what comes after it.
    cur = sim.resource_version()
    sid = cl.start('/api/v1/nodes?watch=1&resourceVersion=%d&timeoutSeconds=5' % (cur + 1))
    cl.wait(sid, lambda s: s['headers'] is not None)
    sim.set_node_label('node-b', 'future', '1')
    sim.set_node_label('node-b', 'future', '2')
    st = cl.wait(sid, lambda s: len(events_of(s['data'])) >= 1)
    time.sleep(0.2)
    cl.pump(0.2)
    ev = events_of(st['data'])
    check([e['object']['metadata']['labels']['future'] for e in ev] == ['2'], ev)
    # Bookmarks as a Go server encodes the zero object.
    sim.set_bookmark_style('go')
    sim.set_bookmark_interval(0.2)
    try:
        sid = cl.start('/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion=%d&timeoutSeconds=3'
                       % sim.resource_version())
        st = cl.wait(sid, lambda s: len(events_of(s['data'])) >= 1)
        bm = events_of(st['data'])[0]
        check(bm == {'type': 'BOOKMARK', 'object': {'kind': 'Pod', 'apiVersion': 'v1', 'metadata': {
            'resourceVersion': str(sim.resource_version()), 'creationTimestamp': None},
            'spec': {'containers': None}, 'status': {}}}, bm)
    finally:
        sim.set_bookmark_style('docs')
        sim.set_bookmark_interval(60)
    cl.close()


def t_process_mode(_sim):
    d = os.path.join(TMP, 'proc')
    os.makedirs(d)
    state = os.path.join(d, 'state.json')
    with open(state, 'w') as f:
        json.dump({'rbac_manifests': ['rbac.yaml'], 'tokens': [{'token': 'proc-token', 'user': 'intruder'}],
                   'nodes': [{'name': 'pn', 'labels': {'a': 'b'}}],
                   'pods': [{'namespace': 'default', 'name': 'pp', 'node_name': 'pn',
                             'annotations': {'gas-ts': '1'}}]}, f)
    with open(os.path.join(d, 'rbac.yaml'), 'w') as f:
        f.write(RBAC_YAML.replace('node-a', 'pn') + '''---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: daemon}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: daemon}
subjects: [{kind: User, name: kgpu-cluster}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: daemon}
rules: [{apiGroups: [""], resources: ["nodes", "pods"], verbs: ["get", "list", "watch"]}]
''')
    sock = os.path.join(d, 'control.sock')
    p = subprocess.Popen([sys.executable, os.path.join(_HERE, 'apiserver_sim.py'), '--port', '0',
                          '--pki', PKI['dir'], '--state', state, '--control', sock],
                         stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        check(line.startswith('READY '), 'process mode printed %r' % line)

        class P:
            port = int(line.split()[1])
        c = SimClient(sock)
        c.set_node_label('pn', 'nvidia.com/device-plugin.config', 'x')
        c.add_pod('default', 'pp2', node_name='pn', containers=[{'name': 'a', 'limits': {GPU: '2'}}])
        cl = H2(P)
        st, _h, data = cl.get('/api/v1/pods?fieldSelector=spec.nodeName%3Dpn')
        body = json.loads(data)
        check(sorted(i['metadata']['name'] for i in body['items']) == ['pp', 'pp2'], body)
        st, _h, data = cl.get('/api/v1/nodes/pn')
        check(json.loads(data)['metadata']['labels']['nvidia.com/device-plugin.config'] == 'x', data)
        cl.close()
        check(c.requests()[-1]['path'] == '/api/v1/nodes/pn', 'requests over the control socket')
        # The state file's manifests and token: intruder may get node pn only.
        c3 = H1(P, cert=None, key=None)
        st, _h, _b = c3.get_json('/api/v1/nodes/pn', {'Authorization': 'Bearer proc-token'})
        check(st == 200, 'manifest rule not loaded')
        st, _h, _b = c3.get_json('/api/v1/nodes', {'Authorization': 'Bearer proc-token'})
        check(st == 403, 'manifest rule too wide')
        c3.close()
        try:
            c.call('no_such_op')
            raise AssertionError('unknown op accepted')
        except RuntimeError:
            pass
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
    check(p.returncode == 0, 'process mode exited %r' % p.returncode)


def t_kubeconfig(sim):
    import yaml
    kc = sim.kubeconfig(os.path.join(TMP, 'kc-embed'))
    y = yaml.safe_load(open(kc))
    check(y['kind'] == 'Config' and y['current-context'] == 'kgpu-test', y)
    import base64
    check(base64.b64decode(y['clusters'][0]['cluster']['certificate-authority-data']) == open(PKI['ca'], 'rb').read(), y)
    check(y['clusters'][0]['cluster']['server'] == sim.url, y)
    check(os.stat(kc).st_mode & 0o777 == 0o600, 'kubeconfig not 0600')
    # A rotated client certificate and the service account files.
    cert, key = make_client_cert(PKI, 'kgpu-cluster-2', 'kgpu-cluster', ['kgpu:cluster-daemons'])
    cl = H1(sim, cert=cert, key=key)
    st, _h, _b = cl.get_json('/api/v1/nodes')
    check(st == 200, 'a new certificate of the CA refused')
    cl.close()
    sa = write_serviceaccount(os.path.join(TMP, 'sa'), PKI)
    check(open(os.path.join(sa, 'namespace')).read() == 'kube-system', 'namespace file')
    cl = H1(sim, cert=None, key=None)
    st, _h, body = cl.get_json('/api/v1/nodes', {'Authorization': 'Bearer ' + open(os.path.join(sa, 'token')).read()})
    check(st == 200 and sim.requests()[-1]['user'] == SERVICEACCOUNT_USER, body)
    cl.close()
    kc = write_kubeconfig(os.path.join(TMP, 'kc-paths'), sim.url, ca=PKI['ca'],
                          token_file=PKI['token_files']['kgpu-cluster'], embed=False)
    y = yaml.safe_load(open(kc))
    check(y['clusters'][0]['cluster']['certificate-authority'] == PKI['ca'], y)
    check(y['users'][0]['user'] == {'tokenFile': PKI['token_files']['kgpu-cluster']}, y)


GAS = {'gas-ts': '1700000000', 'gas-container-cards': 'card0', 'gas-container-tiles': 'card0:gt0'}


def seed(sim):
    sim.add_node('node-a', {'nvidia.com/device-plugin.config': 'ts4'})
    sim.add_node('node-b')
    sim.add_pod('default', 'p-gas', 'node-a', GAS, [{'name': 'c0', 'limits': {GPU: '1'}}])
    sim.add_pod('default', 'p-plain', 'node-a', phase='Running')
    sim.add_pod('team', 'p-other', 'node-b')


CHECKS = [t_alpn_and_tls, t_authn, t_authz, t_rbac_manifests, t_list_get, t_field_selectors, t_watch_h1_framing_and_timeout,
          t_watch_h2_selector, t_bookmarks, t_faults, t_cuts, t_gzip, t_down_up, t_compaction, t_framing_and_paging,
          t_process_mode, t_kubeconfig]


def main():
    only = sys.argv[1:]
    failed = []
    sim = ApiServerSim(PKI).start()
    seed(sim)
    done = threading.Event()
    threading.Timer(170, lambda: (None if done.is_set() else (print('apisim self-test: global timeout'),
                                                              os._exit(1)))).start()
    try:
        for fn in CHECKS:
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
    if failed:
        print('failed: ' + ', '.join(failed))
        return 1
    return 0


if __name__ == '__main__':
    rc = main()
    os._exit(rc)
