#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# apiserver_sim.py — an independent Kubernetes API server simulator for kgpu-clusterd's
# tests: HTTPS (TLS 1.2+, the test PKI of apisim_pki.py), ALPN h2 + http/1.1 (HTTP/2
# through python3-h2, HTTP/1.1 by hand), nodes and pods, list and watch as
# kube-apiserver answers them on the wire. Standard library + python3-h2 only; nothing
# from kgpu. It runs in-process (an asyncio loop in a daemon thread) or as a process.
#
# ---------------------------------------------------------------------------------------
# Python API (stable; later changes only add)
#
#   from apiserver_sim import ApiServerSim, make_pki, write_kubeconfig, SimClient
#   pki = make_pki(tmpdir + '/pki')                      # see apisim_pki.py
#   sim = ApiServerSim(pki, port=0, http1_only=False, rbac=None, anonymous=False,
#                      bookmark_interval=60.0, default_watch_timeout=1800.0)
#   sim.start()          -> returns once listening; sim.port, sim.url ('https://127.0.0.1:P')
#   sim.stop()           closes the listener and every connection, ends the thread
#   with ApiServerSim(pki) as sim: ...                   # start/stop
#
#   State (every mutation takes the next resourceVersion of one global counter, like
#   etcd's revision, and is sent to the matching watches):
#   sim.add_node(name, labels=None, unschedulable=False) -> object
#   sim.set_node_label(name, key, value)   sim.remove_node_label(name, key)
#   sim.set_node_labels(name, labels)      (replaces all labels)
#   sim.delete_node(name)
#   sim.add_pod(namespace, name, node_name='', annotations=None, containers=None,
#               phase='Pending', labels=None) -> object
#       containers: list of {'name': str, 'limits': {res: qty}} (or full container
#       specs with 'resources'); default one container 'main' without limits.
#   sim.update_pod(namespace, name, annotations=None, phase=None, node_name=None,
#                  containers=None, labels=None, remove_annotations=())
#   sim.delete_pod(namespace, name)
#   sim.put_object(resource, obj)   resource 'nodes'|'pods': stores obj as given (hostile
#                                   content allowed), metadata.resourceVersion set
#   sim.get_object(resource, name, namespace=None) -> dict or None
#   sim.resource_version() -> int  (the current revision)
#   sim.compact(rv=None)            compaction point = rv or the current revision
#   sim.set_rbac(rules)             rules: [{'users': [...], 'groups': [...],
#                                   'verbs': [...], 'resources': [...],
#                                   'namespaces': [...] (optional: absent = all)}]
#   sim.set_bookmark_interval(seconds)
#
#   Faults:
#   sim.down()      stop accepting and close every connection; sim.up() listens again on
#                   the same port
#   sim.slow(headers=0.0, events=0.0)   delay before every response's headers / before
#                   every watch event (0, 0 = off)
#   sim.cut_watches(mode='close', resource=None) -> number of streams cut
#       mode 'close': the connection is closed at an event boundary (HTTP/1.1: no last
#       chunk; HTTP/2: TCP closed); 'mid-event': half of the next event's JSON is sent,
#       then the connection closes; 'mid-chunk': (HTTP/1.1) a chunk header announcing the
#       whole event, half its bytes, close; 'reset': HTTP/2 RST_STREAM INTERNAL_ERROR
#       (HTTP/1.1: close); 'end': a clean end (last chunk / END_STREAM), as timeoutSeconds
#   sim.add_fault(kind, resource='*', verb='*', count=None, **params) -> fault id
#       resource: 'nodes'|'pods'|'*'; verb: 'get'|'list'|'watch'|'*'; count: how many
#       requests it hits (None: until removed). Kinds:
#         'status'    code=401|403|429|500|503|..., retry_after=N (429/503: Retry-After
#                     header and details.retryAfterSeconds), message=...
#         'oversized' size=N bytes: a valid answer padded to about N bytes (a list item /
#                     watch event object with an annotation of N bytes)
#         'garbage'   body=bytes: the body (list/get) or one watch line is that
#                     (default: not JSON), Content-Type still application/json
#         'truncated' the list/get body stops half way and the connection closes
#         'slow'      headers=s, events=s for the requests it hits
#         'hang'      headers never come (until stop/down/cut)
#   sim.remove_fault(fid)   sim.clear_faults()
#
#   Observation:
#   sim.requests() -> [{'method','path','query','user','groups','proto','status','verb',
#                       'resource','time'}] (last 1000)
#   sim.clear_requests()
#   sim.watches(resource=None) -> [{'resource','query','user','proto','since'}] open now
#   sim.wait_watches(n, resource=None, timeout=10) -> bool (n or more watches open)
#   sim.wait_requests(pred, timeout=10) -> first matching request dict or None
#
#   Process mode: python3 apiserver_sim.py --port P --pki DIR [--state FILE]
#       [--control SOCK] [--http1-only] [--host H] [--bookmark-interval S]
#   creates the PKI in DIR when missing, loads FILE ({"nodes": [{"name", "labels"}],
#   "pods": [{add_pod keyword args}], "rbac": [...], "anonymous": bool}), prints
#   "READY <port>" on stdout, serves until SIGTERM/SIGINT. The control socket takes one
#   JSON object per line {"op": NAME, "args": [...], "kwargs": {...}} for every method
#   above (bytes given as str) and answers {"ok": true, "result": ...} or
#   {"ok": false, "error": "..."}. SimClient(sock_path) calls the same methods through
#   it: SimClient(p).add_pod('default', 'p1', ...).
#
# ---------------------------------------------------------------------------------------
# Wire facts followed, and where they come from (Kubernetes docs "API Concepts"
# (kubernetes.io/docs/reference/using-api/api-concepts/), "Authenticating",
# "Using RBAC Authorization", and the kube-apiserver source, kubernetes/kubernetes,
# staging/src/k8s.io/apiserver/...):
#  - ALPN: the Go HTTP server with HTTP/2 configured offers NextProtos ["h2",
#    "http/1.1"]; with HTTP/2 disabled only "http/1.1". Minimum TLS version 1.2
#    (--tls-min-version default). Client certificates are requested and verified against
#    --client-ca-file when given (tls.VerifyClientCertIfGiven): a certificate from
#    another CA fails the handshake; none at all falls through to the other
#    authenticators. x509 authenticator: user = subject CN, groups = subject O values.
#    Token file authenticator (--token-auth-file): CSV token,user,uid,"group1,group2";
#    "Authorization: Bearer <token>". Authenticated users also get group
#    system:authenticated. No credentials: 401, unless anonymous auth is on (user
#    system:anonymous, group system:unauthenticated), then authorization decides.
#  - 401 body (endpoints/handlers/responsewriters, apierrors.NewUnauthorized):
#    {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
#     "message":"Unauthorized","reason":"Unauthorized","code":401}
#  - 403 body (responsewriters.forbiddenMessage + apierrors.NewForbidden):
#    message '<resource> "<name>" is forbidden: User "<u>" cannot <verb> resource
#    "<resource>" in API group "" at the cluster scope' ('in the namespace "<ns>"' for a
#    namespaced request; '<resource> is forbidden: ...' without a name), reason
#    Forbidden, details {"name","kind":<resource>}, code 403. A list or watch with
#    fieldSelector metadata.name=X is authorized as that name (RequestInfoFactory).
#  - Verbs: GET collection = list, GET collection with watch=1|true = watch, GET object =
#    get.
#  - Lists: {"kind":"NodeList"|"PodList","apiVersion":"v1","metadata":
#    {"resourceVersion":"N"},"items":[...]}; items carry no kind/apiVersion. A single
#    object and a watch event's object carry kind "Node"/"Pod", apiVersion "v1".
#  - resourceVersion on list: unset = most recent; "0" = any (here: the current state);
#    N with resourceVersionMatch unset or NotOlderThan = at least as new as N (N older
#    than the compaction point is still served, with the current state); N with
#    resourceVersionMatch=Exact = the state at exactly N, 410 Expired "The
#    resourceVersion for the provided list is too old." when N is compacted (etcd3
#    store interpretListError). N newer than the current revision: the cache waits up to
#    3 s, then 504 Timeout "Too large resource version: N, current: C" with
#    details.causes [{"reason":"ResourceVersionTooLarge","message":"Too large resource
#    version"}], retryAfterSeconds 1 (storage.NewTooLargeResourceVersionError).
#    resourceVersionMatch without resourceVersion, or Exact with "0": 422 Invalid
#    (ValidateListOptions).
#  - Watch: HTTP 200, Content-Type application/json, HTTP/1.1 Transfer-Encoding:
#    chunked; each event one JSON object {"type":...,"object":...} followed by "\n"
#    (the JSON serializer's encoder), types ADDED, MODIFIED, DELETED, BOOKMARK, ERROR.
#    resourceVersion unset or "0": synthetic ADDED events for the current objects, then
#    changes; N: every change after N. N older than the watch cache's window: the
#    stream opens with 200 and carries one ERROR event whose object is a Status code
#    410 reason Expired message "too old resource version: N (C)" (cacher watchCache),
#    then ends. allowWatchBookmarks=true: BOOKMARK events whose object is only
#    {"kind","apiVersion","metadata":{"resourceVersion"}} with the newest revision the
#    cache has seen (it may be of an object this watch does not match).
#    sendInitialEvents=true (with allowWatchBookmarks, resourceVersionMatch=NotOlderThan
#    or resourceVersion unset): the ADDED events then a BOOKMARK whose metadata carries
#    the annotation "k8s.io/initial-events-end": "true". timeoutSeconds=T: the server
#    ends the stream cleanly after T seconds (default: a random time between the
#    minimum request timeout and twice it).
#  - Field selectors (fieldSelector=a=b,c!=d, "==" too): nodes support metadata.name
#    and spec.unschedulable; pods metadata.name, metadata.namespace, spec.nodeName,
#    spec.restartPolicy, spec.schedulerName, spec.serviceAccountName, spec.hostNetwork,
#    status.phase, status.podIP, status.nominatedNodeName (pkg/apis/core/v1 field label
#    conversion funcs); anything else: 400 BadRequest "field label not supported: X".
#    Watch filtering as the cacher's cacheWatcher.convertToWatchEvent: an object that
#    starts matching arrives as ADDED, keeps matching MODIFIED, stops matching DELETED
#    (the previous object's content with the new resourceVersion).
#  - Errors as Status objects: 404 NotFound '<resource> "<name>" not found' details
#    {"name","kind"}; 429 TooManyRequests with Retry-After and details
#    .retryAfterSeconds; 500 InternalError "Internal error occurred: ..." with
#    details.causes; headers Cache-Control "no-cache, private", Audit-Id.
#  - Responses of 128 KiB or more are gzip-compressed when the client sends
#    Accept-Encoding: gzip (APIResponseCompression); watch streams are not.
# ---------------------------------------------------------------------------------------

import argparse
import asyncio
import base64
import copy
import datetime
import gzip
import json
import os
import random
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.parse
import uuid

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apisim_pki import make_pki, write_kubeconfig, read_token_file  # noqa: E402,F401  (re-exported)

KINDS = {'nodes': ('Node', 'NodeList', False), 'pods': ('Pod', 'PodList', True)}
NODE_FIELDS = {
    'metadata.name': lambda o: o.get('metadata', {}).get('name', ''),
    'spec.unschedulable': lambda o: 'true' if o.get('spec', {}).get('unschedulable') else 'false',
}
POD_FIELDS = {
    'metadata.name': lambda o: o.get('metadata', {}).get('name', ''),
    'metadata.namespace': lambda o: o.get('metadata', {}).get('namespace', ''),
    'spec.nodeName': lambda o: o.get('spec', {}).get('nodeName', '') or '',
    'spec.restartPolicy': lambda o: o.get('spec', {}).get('restartPolicy', '') or '',
    'spec.schedulerName': lambda o: o.get('spec', {}).get('schedulerName', '') or '',
    'spec.serviceAccountName': lambda o: o.get('spec', {}).get('serviceAccountName', '') or '',
    'spec.hostNetwork': lambda o: 'true' if o.get('spec', {}).get('hostNetwork') else 'false',
    'status.phase': lambda o: o.get('status', {}).get('phase', '') or '',
    'status.podIP': lambda o: o.get('status', {}).get('podIP', '') or '',
    'status.podIPs': lambda o: _second_ip(o),
    'status.nominatedNodeName': lambda o: o.get('status', {}).get('nominatedNodeName', '') or '',
}
FIELDS = {'nodes': NODE_FIELDS, 'pods': POD_FIELDS}
FIELD_ALIASES = {'pods': {'spec.host': 'spec.nodeName'}, 'nodes': {}}


def _second_ip(o):
    ips = o.get('status', {}).get('podIPs') or []
    return (ips[1].get('ip', '') if len(ips) > 1 and isinstance(ips[1], dict) else '')
DEFAULT_RBAC = [{'users': ['kgpu-cluster'], 'groups': ['system:serviceaccounts:kgpu'],
                 'verbs': ['get', 'list', 'watch'], 'resources': ['nodes', 'pods']}]
MIN_REQUEST_TIMEOUT = 1800.0
GZIP_THRESHOLD = 128 * 1024
H1_BUFFER = 2048          # net/http bufferBeforeChunkingSize
H2_BUFFER = 4096          # x/net/http2 handlerChunkWriteSize
MAX_REQUEST_HEADER = 64 * 1024
MAX_REQUEST_BODY = 1024 * 1024
WATCH_QUEUE_MAX = 10000
WRITE_TIMEOUT = 30.0
CALL_TIMEOUT = 15.0
CUT = object()


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


def _dumps(obj):
    return json.dumps(obj, separators=(',', ':'))


def status_obj(code, reason, message, details=None):
    s = {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure',
         'message': message, 'reason': reason}
    if details is not None:
        s['details'] = details
    s['code'] = code
    return s


class HttpError(Exception):
    def __init__(self, code, status, headers=None):
        super().__init__(status.get('message'))
        self.code = code
        self.status = status
        self.headers = headers or []


def _bad_request(msg):
    return HttpError(400, status_obj(400, 'BadRequest', msg))


def _invalid(errs):
    """errs: [(field, 'Forbidden'|'NotSupported', text)] -> 422 as apierrors.NewInvalid."""
    texts = ['%s: %s' % (f, ('Forbidden: ' + t) if k == 'Forbidden' else t) for f, k, t in errs]
    agg = texts[0] if len(texts) == 1 else '[' + ', '.join(texts) + ']'
    causes = [{'reason': 'FieldValueForbidden' if k == 'Forbidden' else 'FieldValueNotSupported',
               'message': ('Forbidden: ' + t) if k == 'Forbidden' else t, 'field': f} for f, k, t in errs]
    return HttpError(422, status_obj(422, 'Invalid', 'ListOptions.meta.k8s.io "" is invalid: ' + agg,
                                     {'group': 'meta.k8s.io', 'kind': 'ListOptions', 'causes': causes}))


def _invalid_list_options(field, value, msg):
    m = 'ListOptions.meta.k8s.io "" is invalid: %s: Forbidden: %s' % (field, msg)
    return HttpError(422, status_obj(422, 'Invalid', m, {'group': 'meta.k8s.io', 'kind': 'ListOptions',
                                                        'causes': [{'reason': 'FieldValueForbidden',
                                                                    'message': 'Forbidden: ' + msg,
                                                                    'field': field}]}))


def parse_field_selector(resource, text):
    """'a=b,c!=d' -> [(field, op, value)]; raises HttpError 400 as the server does."""
    terms = []
    if not text:
        return terms
    parts, cur, i = [], '', 0
    while i < len(text):
        c = text[i]
        if c == '\\' and i + 1 < len(text):
            cur += c + text[i + 1]
            i += 2
            continue
        if c == ',':
            parts.append(cur)
            cur = ''
        else:
            cur += c
        i += 1
    parts.append(cur)
    for p in parts:
        if p == '':
            continue
        for op in ('!=', '==', '='):
            idx = p.find(op)
            if idx > 0:
                field, value = p[:idx], p[idx + len(op):]
                break
        else:
            raise _bad_request("invalid selector: '%s'; can't understand '%s'" % (text, p))
        value = value.replace('\\,', ',').replace('\\=', '=').replace('\\\\', '\\')
        field = FIELD_ALIASES[resource].get(field, field)
        if field not in FIELDS[resource]:
            raise _bad_request('field label not supported: %s' % field)
        terms.append((field, '!=' if op == '!=' else '=', value))
    return terms


def parse_label_selector(text):
    """Equality-based label selectors only: k=v, k==v, k!=v, k, !k."""
    terms = []
    for p in [x.strip() for x in (text or '').split(',') if x.strip()]:
        if '!=' in p:
            k, v = p.split('!=', 1)
            terms.append((k.strip(), '!=', v.strip()))
        elif '==' in p:
            k, v = p.split('==', 1)
            terms.append((k.strip(), '=', v.strip()))
        elif '=' in p:
            k, v = p.split('=', 1)
            terms.append((k.strip(), '=', v.strip()))
        elif p.startswith('!'):
            terms.append((p[1:].strip(), 'absent', None))
        elif ' in ' in p or ' notin ' in p:
            raise _bad_request('unable to parse requirement: set-based selectors are not simulated: %s' % p)
        else:
            terms.append((p, 'exists', None))
    return terms


def make_matcher(resource, namespace, fsel, lsel):
    getters = FIELDS[resource]

    def match(obj):
        if obj is None:
            return False
        md = obj.get('metadata', {}) if isinstance(obj.get('metadata'), dict) else {}
        if namespace and md.get('namespace') != namespace:
            return False
        for f, op, v in fsel:
            try:
                got = getters[f](obj)
            except (AttributeError, TypeError):
                got = ''
            if (got == v) != (op == '='):
                return False
        labels = md.get('labels') if isinstance(md.get('labels'), dict) else {}
        for k, op, v in lsel:
            if op == '=' and labels.get(k) != v:
                return False
            if op == '!=' and labels.get(k) == v:
                return False
            if op == 'exists' and k not in labels:
                return False
            if op == 'absent' and k in labels:
                return False
        return True
    return match


def with_kind(resource, obj):
    kind = KINDS[resource][0]
    out = {'kind': kind, 'apiVersion': 'v1'}
    for k, v in obj.items():
        if k not in ('kind', 'apiVersion'):
            out[k] = v
    return out


CONTINUE_EXPIRED = ('The provided continue parameter is too old to display a consistent list result. You can start '
                    'a new list without the continue parameter, or use the continue token in this response to '
                    'retrieve the remainder of the results. Continuing with the provided token results in an '
                    'inconsistent list - objects that were created, modified, or deleted between the time the first '
                    'chunk was returned and now may show up in the list.')


def _keystr(resource, key):
    return '/'.join(key) if resource == 'pods' else key


def _key(resource, obj):
    md = obj.get('metadata', {})
    if resource == 'pods':
        return (md.get('namespace', ''), md.get('name', ''))
    return md.get('name', '')


class Event:
    __slots__ = ('rv', 'type', 'resource', 'obj', 'prev')

    def __init__(self, rv, type_, resource, obj, prev):
        self.rv, self.type, self.resource, self.obj, self.prev = rv, type_, resource, obj, prev


class Watch:
    def __init__(self, sim, resource, query, user, proto, match):
        self.resource = resource
        self.query = query
        self.user = user
        self.proto = proto
        self.match = match
        self.since = time.time()
        self.queue = asyncio.Queue()
        self.cut_mode = None
        self.overflow = False

    def push(self, item):
        if self.queue.qsize() >= WATCH_QUEUE_MAX:
            self.overflow = True
            return
        self.queue.put_nowait(item)

    def convert(self, ev):
        """cacheWatcher.convertToWatchEvent: ADDED / MODIFIED / DELETED by who matches."""
        cur = ev.type != 'DELETED' and self.match(ev.obj)
        old = ev.prev is not None and self.match(ev.prev)
        if not cur and not old:
            return None
        if cur and not old:
            return ('ADDED', ev.obj)
        if cur and old:
            return ('MODIFIED', ev.obj)
        o = copy.deepcopy(ev.prev)
        o.setdefault('metadata', {})['resourceVersion'] = str(ev.rv)
        return ('DELETED', o)


# ------------------------------------------------------------------------------ transports

class Request:
    def __init__(self, method, target, headers, proto, conn):
        self.method = method
        self.target = target
        u = urllib.parse.urlsplit(target)
        self.path = u.path
        self.query = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
        self.headers = headers          # lower-case name -> value
        self.proto = proto              # 'h2' | 'http/1.1'
        self.conn = conn
        self.user = None
        self.groups = []


class Responder:
    """One response. start() sends the headers, write() a body piece (a chunk / DATA
    frames), end() the clean end, abort() closes the connection, reset() the stream."""
    chunked = False

    async def start(self, code, headers, length=None):
        raise NotImplementedError

    async def write(self, data):
        raise NotImplementedError

    async def end(self):
        raise NotImplementedError

    def abort(self):
        self.conn.abort()

    async def reset(self):
        self.abort()


class Conn:
    """Base of an accepted TLS connection."""

    def __init__(self, sim, reader, writer):
        self.sim = sim
        self.reader = reader
        self.writer = writer
        self.closed = False
        self.tasks = set()

    def abort(self):
        if not self.closed:
            self.closed = True
            try:
                self.writer.transport.abort()
            except Exception:
                pass
        for t in list(self.tasks):
            if t is not asyncio.current_task():
                t.cancel()

    async def drain(self):
        await asyncio.wait_for(self.writer.drain(), WRITE_TIMEOUT)

    def peer_identity(self):
        sslobj = self.writer.get_extra_info('ssl_object')
        cert = sslobj.getpeercert() if sslobj else None
        if not cert:
            return None
        cn, groups = None, []
        for rdn in cert.get('subject', ()):
            for k, v in rdn:
                if k == 'commonName':
                    cn = v
                elif k == 'organizationName':
                    groups.append(v)
        return (cn, groups)


class H1Responder(Responder):
    def __init__(self, conn, head_only=False):
        self.conn = conn
        self.started = False
        self.ended = False

    async def start(self, code, headers, length=None):
        reason = {200: 'OK', 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden',
                  404: 'Not Found', 405: 'Method Not Allowed', 410: 'Gone',
                  422: 'Unprocessable Entity', 429: 'Too Many Requests',
                  500: 'Internal Server Error', 503: 'Service Unavailable',
                  504: 'Gateway Timeout'}.get(code, 'Status')
        lines = ['HTTP/1.1 %d %s' % (code, reason)]
        for k, v in headers:
            lines.append('%s: %s' % (k, v))
        lines.append('Date: ' + time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime()))
        if length is None:
            self.chunked = True
            lines.append('Transfer-Encoding: chunked')
        else:
            lines.append('Content-Length: %d' % length)
        self.conn.writer.write(('\r\n'.join(lines) + '\r\n\r\n').encode('latin-1'))
        self.started = True
        await self.conn.drain()

    async def write(self, data):
        if not data:
            return
        if self.chunked:
            self.conn.writer.write(b'%x\r\n' % len(data) + data + b'\r\n')
        else:
            self.conn.writer.write(data)
        await self.conn.drain()

    async def write_partial_chunk(self, data):
        """A chunk header for all of data, then only half of it (a mid-chunk cut)."""
        self.conn.writer.write(b'%x\r\n' % len(data) + data[:len(data) // 2])
        await self.conn.drain()

    async def end(self):
        if self.chunked and not self.ended:
            self.conn.writer.write(b'0\r\n\r\n')
            await self.conn.drain()
        self.ended = True


class H1Conn(Conn):
    proto = 'http/1.1'

    async def serve(self):
        while not self.closed:
            try:
                head = await asyncio.wait_for(self.reader.readuntil(b'\r\n\r\n'), 120)
            except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError,
                    asyncio.LimitOverrunError, ssl.SSLError, OSError):
                break
            if len(head) > MAX_REQUEST_HEADER:
                break
            try:
                lines = head.decode('latin-1').split('\r\n')
                method, target, version = lines[0].split(' ', 2)
            except ValueError:
                self.writer.write(b'HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n')
                break
            headers = {}
            for line in lines[1:]:
                if ':' in line:
                    k, v = line.split(':', 1)
                    headers[k.strip().lower()] = v.strip()
            n = int(headers.get('content-length', '0') or 0)
            if n > MAX_REQUEST_BODY or 'chunked' in headers.get('transfer-encoding', ''):
                self.writer.write(b'HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n')
                break
            if n:
                try:
                    await asyncio.wait_for(self.reader.readexactly(n), 30)
                except (asyncio.IncompleteReadError, asyncio.TimeoutError, OSError):
                    break
            req = Request(method, target, headers, self.proto, self)
            resp = H1Responder(self)
            try:
                await self.sim._handle(req, resp)
            except (ConnectionError, asyncio.TimeoutError, OSError, ssl.SSLError):
                break
            if headers.get('connection', '').lower() == 'close' or version == 'HTTP/1.0':
                break
            if resp.chunked and not resp.ended:
                break
        self.abort()


class H2Responder(Responder):
    def __init__(self, conn, stream_id):
        self.conn = conn
        self.sid = stream_id
        self.chunked = True
        self.ended = False

    async def start(self, code, headers, length=None):
        hs = [(':status', str(code))]
        for k, v in headers:
            hs.append((k.lower(), str(v)))
        hs.append(('date', time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime())))
        if length is not None:
            hs.append(('content-length', str(length)))
        self.conn.h2.send_headers(self.sid, hs)
        await self.conn.flush()

    async def write(self, data):
        c = self.conn
        while data:
            if c.closed:
                raise ConnectionError('connection closed')
            if self.sid in c.reset_streams:
                raise ConnectionError('stream reset by the client')
            try:
                window = c.h2.local_flow_control_window(self.sid)
            except (h2.exceptions.StreamClosedError, KeyError):
                raise ConnectionError('stream closed')
            n = min(window, c.h2.max_outbound_frame_size, len(data))
            if n <= 0:
                ev = c.window_event
                ev.clear()
                await asyncio.wait_for(ev.wait(), WRITE_TIMEOUT)
                continue
            c.h2.send_data(self.sid, data[:n])
            data = data[n:]
            await c.flush()

    async def end(self):
        if not self.ended and not self.conn.closed and self.sid not in self.conn.reset_streams:
            self.ended = True
            try:
                self.conn.h2.end_stream(self.sid)
            except h2.exceptions.StreamClosedError:
                return
            await self.conn.flush()

    async def reset(self):
        try:
            self.conn.h2.reset_stream(self.sid, h2.errors.ErrorCodes.INTERNAL_ERROR)
            await self.conn.flush()
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            pass


class H2Conn(Conn):
    proto = 'h2'

    async def flush(self):
        data = self.h2.data_to_send()
        if data and not self.closed:
            self.writer.write(data)
            await self.drain()

    async def serve(self):
        cfg = h2.config.H2Configuration(client_side=False, header_encoding='utf-8')
        self.h2 = h2.connection.H2Connection(config=cfg)
        self.h2.local_settings = h2.settings.Settings(
            client=False, initial_values={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 250})
        self.h2.initiate_connection()
        self.window_event = asyncio.Event()
        self.reset_streams = set()
        self.streams = {}
        try:
            await self.flush()
            while not self.closed:
                try:
                    data = await asyncio.wait_for(self.reader.read(65536), 300)
                except asyncio.TimeoutError:
                    if not self.streams:
                        break
                    continue
                if not data:
                    break
                try:
                    events = self.h2.receive_data(data)
                except h2.exceptions.ProtocolError:
                    await self.flush()
                    break
                for ev in events:
                    self._event(ev)
                await self.flush()
        except (ConnectionError, asyncio.TimeoutError, OSError, ssl.SSLError):
            pass
        self.abort()

    def _event(self, ev):
        if isinstance(ev, h2.events.RequestReceived):
            hs = {}
            for k, v in ev.headers:
                hs[k.lower()] = v
            self.streams[ev.stream_id] = hs
        elif isinstance(ev, h2.events.DataReceived):
            self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            hs = self.streams.get(ev.stream_id)
            if hs is None:
                return
            req = Request(hs.get(':method', 'GET'), hs.get(':path', '/'),
                          {k: v for k, v in hs.items() if not k.startswith(':')}, self.proto, self)
            resp = H2Responder(self, ev.stream_id)
            t = asyncio.ensure_future(self._run(req, resp))
            self.tasks.add(t)
            t.add_done_callback(self.tasks.discard)
        elif isinstance(ev, h2.events.StreamReset):
            self.reset_streams.add(ev.stream_id)
            self.window_event.set()
        elif isinstance(ev, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
            self.window_event.set()
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.closed = True

    async def _run(self, req, resp):
        try:
            await self.sim._handle(req, resp)
        except (ConnectionError, asyncio.TimeoutError, OSError, ssl.SSLError,
                h2.exceptions.ProtocolError):
            pass
        finally:
            self.streams.pop(resp.sid, None)
            self.reset_streams.discard(resp.sid)


# ------------------------------------------------------------------------------ simulator

def _on_loop(fn):
    """Runs a public method on the simulator's loop thread (state is owned by it)."""
    def wrapper(self, *args, **kwargs):
        if self._loop is None or threading.get_ident() == self._loop_tid:
            return fn(self, *args, **kwargs)
        fut = asyncio.run_coroutine_threadsafe(_as_coro(fn, self, args, kwargs), self._loop)
        return fut.result(CALL_TIMEOUT)
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    wrapper.public = True
    return wrapper


async def _as_coro(fn, self, args, kwargs):
    return fn(self, *args, **kwargs)


class ApiServerSim:
    def __init__(self, pki, port=0, host='127.0.0.1', http1_only=False, rbac=None,
                 anonymous=False, bookmark_interval=60.0, default_watch_timeout=None,
                 start_rv=1000):
        self.pki = pki
        self.host = host
        self.port = port
        self.http1_only = http1_only
        self.anonymous = anonymous
        self.rbac = copy.deepcopy(DEFAULT_RBAC if rbac is None else rbac)
        self.bookmark_interval = bookmark_interval
        self.default_watch_timeout = default_watch_timeout
        self.tokens = read_token_file(pki['tokens']) if pki.get('tokens') else {}
        self.rv = start_rv
        self.compacted = 0
        self.objects = {'nodes': {}, 'pods': {}}
        self.log = []
        self.watchers = set()
        self.conns = set()
        self.faults = {}
        self._fault_seq = 0
        self._slow = (0.0, 0.0)
        self._requests = []
        self._server = None
        self._loop = None
        self._loop_tid = None
        self._thread = None
        self._ready = threading.Event()
        self._start_error = None
        self._changed = None
        self.content_length_always = False
        self.bookmark_style = 'docs'

    # --------------------------------------------------------------- life cycle
    def _ssl_context(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.pki['server_cert'], self.pki['server_key'])
        ctx.load_verify_locations(self.pki['ca'])
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.set_alpn_protocols(['http/1.1'] if self.http1_only else ['h2', 'http/1.1'])
        return ctx

    @property
    def url(self):
        h = '[%s]' % self.host if ':' in self.host else self.host
        return 'https://%s:%d' % (h, self.port)

    def start(self):
        self._thread = threading.Thread(target=self._thread_main, name='apiserver-sim', daemon=True)
        self._thread.start()
        if not self._ready.wait(CALL_TIMEOUT):
            raise RuntimeError('API server simulator did not start')
        if self._start_error:
            raise self._start_error
        return self

    def _thread_main(self):
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._loop_tid = threading.get_ident()
        asyncio.set_event_loop(loop)
        self._changed = asyncio.Event()
        try:
            loop.run_until_complete(self._listen())
        except Exception as e:   # reported to start()
            self._start_error = e
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._close_all()
            for t in asyncio.all_tasks(loop):
                t.cancel()
            try:
                loop.run_until_complete(asyncio.sleep(0))
            except Exception:
                pass
            loop.close()

    async def _listen(self):
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, ssl=self._ssl_context(),
            reuse_address=True, limit=MAX_REQUEST_HEADER, ssl_handshake_timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self):
        if self._loop is None or self._thread is None:
            return
        loop = self._loop
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:
            pass
        self._thread.join(CALL_TIMEOUT)
        self._thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _close_all(self):
        if self._server is not None:
            self._server.close()
            self._server = None
        for c in list(self.conns):
            c.abort()
        self.conns.clear()

    async def _accept(self, reader, writer):
        sslobj = writer.get_extra_info('ssl_object')
        proto = sslobj.selected_alpn_protocol() if sslobj else None
        conn = (H2Conn if proto == 'h2' else H1Conn)(self, reader, writer)
        self.conns.add(conn)
        try:
            await conn.serve()
        except asyncio.CancelledError:
            pass
        except Exception as e:  # never let one connection take the server down
            print('apiserver_sim: connection error: %r' % e, file=sys.stderr)
        finally:
            conn.abort()
            self.conns.discard(conn)

    # --------------------------------------------------------------- faults, public
    @_on_loop
    def down(self):
        """Stops listening and closes every connection."""
        self._close_all()
        return True

    def up(self):
        """Listens again on the same port (returns once listening)."""
        if threading.get_ident() == self._loop_tid:
            if self._server is None:
                asyncio.ensure_future(self._listen())
            return True
        if self._server is None:
            asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(CALL_TIMEOUT)
        return True
    up.public = True

    def wait_up(self, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            try:
                socket.create_connection((self.host, self.port), 1).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    @_on_loop
    def slow(self, headers=0.0, events=0.0):
        self._slow = (float(headers), float(events))
        return True

    @_on_loop
    def cut_watches(self, mode='close', resource=None):
        if mode not in ('close', 'mid-event', 'mid-chunk', 'reset', 'end'):
            raise ValueError('unknown cut mode %r' % mode)
        n = 0
        for w in list(self.watchers):
            if resource in (None, '*', w.resource):
                w.cut_mode = mode
                w.queue.put_nowait(CUT)
                n += 1
        return n

    @_on_loop
    def add_fault(self, kind, resource='*', verb='*', count=None, **params):
        if kind not in ('status', 'oversized', 'garbage', 'truncated', 'slow', 'hang'):
            raise ValueError('unknown fault kind %r' % kind)
        if kind == 'garbage' and isinstance(params.get('body'), str):
            params['body'] = params['body'].encode()
        self._fault_seq += 1
        self.faults[self._fault_seq] = {'kind': kind, 'resource': resource, 'verb': verb,
                                        'count': count, 'params': params}
        return self._fault_seq

    @_on_loop
    def remove_fault(self, fid):
        return self.faults.pop(fid, None) is not None

    @_on_loop
    def clear_faults(self):
        self.faults.clear()
        self._slow = (0.0, 0.0)
        return True

    def _take_fault(self, resource, verb):
        for fid, f in list(self.faults.items()):
            if f['resource'] not in ('*', resource) or f['verb'] not in ('*', verb):
                continue
            if f['count'] is not None:
                f['count'] -= 1
                if f['count'] <= 0:
                    del self.faults[fid]
            return f
        return None

    # --------------------------------------------------------------- observation
    @_on_loop
    def requests(self):
        return copy.deepcopy(self._requests)

    @_on_loop
    def clear_requests(self):
        self._requests.clear()
        return True

    @_on_loop
    def watches(self, resource=None):
        return [{'resource': w.resource, 'query': dict(w.query), 'user': w.user,
                 'proto': w.proto, 'since': w.since}
                for w in self.watchers if resource in (None, '*', w.resource)]

    def wait_watches(self, n, resource=None, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            if len(self.watches(resource)) >= n:
                return True
            time.sleep(0.05)
        return False

    def wait_requests(self, pred, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            for r in self.requests():
                if pred(r):
                    return r
            time.sleep(0.05)
        return None

    # --------------------------------------------------------------- state
    def _commit(self, resource, type_, obj, prev):
        self.rv += 1
        obj.setdefault('metadata', {})['resourceVersion'] = str(self.rv)
        key = _key(resource, obj)
        if type_ == 'DELETED':
            self.objects[resource].pop(key, None)
        else:
            self.objects[resource][key] = obj
        ev = Event(self.rv, type_, resource, copy.deepcopy(obj), copy.deepcopy(prev) if prev else None)
        self.log.append(ev)
        for w in list(self.watchers):
            if w.resource == resource:
                w.push(ev)
        self._changed.set() if self._changed else None
        return copy.deepcopy(obj)

    @_on_loop
    def resource_version(self):
        return self.rv

    @_on_loop
    def compact(self, rv=None):
        rv = self.rv if rv is None else int(rv)
        self.compacted = max(self.compacted, rv)
        self.log = [e for e in self.log if e.rv > self.compacted]
        return self.compacted

    @_on_loop
    def set_rbac(self, rules):
        self.rbac = copy.deepcopy(rules)
        return True

    @_on_loop
    def set_anonymous(self, enabled):
        self.anonymous = bool(enabled)
        return True

    @_on_loop
    def set_bookmark_interval(self, seconds):
        self.bookmark_interval = float(seconds)
        return True

    @_on_loop
    def add_node(self, name, labels=None, unschedulable=False):
        if name in self.objects['nodes']:
            raise ValueError('node %s exists' % name)
        md = {'name': name, 'uid': str(uuid.uuid4()), 'resourceVersion': '',
              'creationTimestamp': _now()}
        md['labels'] = dict({'kubernetes.io/hostname': name, 'kubernetes.io/os': 'linux'},
                            **(labels or {}))
        spec = {'unschedulable': True} if unschedulable else {}
        obj = {'metadata': md, 'spec': spec,
               'status': {'capacity': {'cpu': '16', 'memory': '65536Mi', 'pods': '110'},
                          'allocatable': {'cpu': '16', 'memory': '65536Mi', 'pods': '110'},
                          'conditions': [{'type': 'Ready', 'status': 'True',
                                          'lastHeartbeatTime': _now(),
                                          'lastTransitionTime': _now(),
                                          'reason': 'KubeletReady',
                                          'message': 'kubelet is posting ready status'}],
                          'nodeInfo': {'kubeletVersion': 'v1.31.0', 'operatingSystem': 'linux',
                                       'architecture': 'amd64'}}}
        return self._commit('nodes', 'ADDED', obj, None)

    def _node(self, name):
        o = self.objects['nodes'].get(name)
        if o is None:
            raise KeyError('no node %s' % name)
        return o

    @_on_loop
    def set_node_label(self, name, key, value):
        prev = self._node(name)
        obj = copy.deepcopy(prev)
        obj['metadata'].setdefault('labels', {})[key] = value
        return self._commit('nodes', 'MODIFIED', obj, prev)

    @_on_loop
    def remove_node_label(self, name, key):
        prev = self._node(name)
        obj = copy.deepcopy(prev)
        obj['metadata'].setdefault('labels', {}).pop(key, None)
        return self._commit('nodes', 'MODIFIED', obj, prev)

    @_on_loop
    def set_node_labels(self, name, labels):
        prev = self._node(name)
        obj = copy.deepcopy(prev)
        obj['metadata']['labels'] = dict(labels)
        return self._commit('nodes', 'MODIFIED', obj, prev)

    @_on_loop
    def delete_node(self, name):
        prev = self._node(name)
        return self._commit('nodes', 'DELETED', copy.deepcopy(prev), prev)

    @staticmethod
    def _containers(containers):
        out = []
        for i, c in enumerate(containers or [{'name': 'main'}]):
            if 'resources' in c or 'image' in c:
                out.append(copy.deepcopy(c))
                continue
            res = {}
            if c.get('limits'):
                res['limits'] = dict(c['limits'])
                res['requests'] = dict(c.get('requests', c['limits']))
            out.append({'name': c.get('name', 'c%d' % i), 'image': c.get('image', 'busybox:1.36'),
                        'resources': res, 'terminationMessagePath': '/dev/termination-log',
                        'terminationMessagePolicy': 'File', 'imagePullPolicy': 'IfNotPresent'})
        return out

    @_on_loop
    def add_pod(self, namespace, name, node_name='', annotations=None, containers=None,
                phase='Pending', labels=None):
        if (namespace, name) in self.objects['pods']:
            raise ValueError('pod %s/%s exists' % (namespace, name))
        md = {'name': name, 'namespace': namespace, 'uid': str(uuid.uuid4()),
              'resourceVersion': '', 'creationTimestamp': _now()}
        if labels:
            md['labels'] = dict(labels)
        if annotations:
            md['annotations'] = dict(annotations)
        spec = {'containers': self._containers(containers), 'restartPolicy': 'Always',
                'terminationGracePeriodSeconds': 30, 'dnsPolicy': 'ClusterFirst',
                'serviceAccountName': 'default', 'serviceAccount': 'default',
                'schedulerName': 'default-scheduler', 'priority': 0,
                'enableServiceLinks': True, 'preemptionPolicy': 'PreemptLowerPriority'}
        if node_name:
            spec['nodeName'] = node_name
        status = {'phase': phase, 'qosClass': 'BestEffort'}
        return self._commit('pods', 'ADDED', {'metadata': md, 'spec': spec, 'status': status}, None)

    def _pod(self, namespace, name):
        o = self.objects['pods'].get((namespace, name))
        if o is None:
            raise KeyError('no pod %s/%s' % (namespace, name))
        return o

    @_on_loop
    def update_pod(self, namespace, name, annotations=None, phase=None, node_name=None,
                   containers=None, labels=None, remove_annotations=()):
        prev = self._pod(namespace, name)
        obj = copy.deepcopy(prev)
        md = obj['metadata']
        if annotations:
            md.setdefault('annotations', {}).update(annotations)
        for k in remove_annotations or ():
            md.get('annotations', {}).pop(k, None)
        if 'annotations' in md and not md['annotations']:
            del md['annotations']
        if labels is not None:
            md['labels'] = dict(labels)
        if phase is not None:
            obj.setdefault('status', {})['phase'] = phase
        if node_name is not None:
            obj['spec']['nodeName'] = node_name
        if containers is not None:
            obj['spec']['containers'] = self._containers(containers)
        return self._commit('pods', 'MODIFIED', obj, prev)

    @_on_loop
    def delete_pod(self, namespace, name):
        prev = self._pod(namespace, name)
        return self._commit('pods', 'DELETED', copy.deepcopy(prev), prev)

    @_on_loop
    def put_object(self, resource, obj):
        obj = copy.deepcopy(obj)
        obj.pop('kind', None)
        obj.pop('apiVersion', None)
        prev = self.objects[resource].get(_key(resource, obj))
        return self._commit(resource, 'MODIFIED' if prev else 'ADDED', obj, prev)

    @_on_loop
    def get_object(self, resource, name, namespace=None):
        key = (namespace, name) if resource == 'pods' else name
        o = self.objects[resource].get(key)
        return copy.deepcopy(o) if o else None

    def _state_at(self, resource, rv):
        """The objects as they were at revision rv (rv >= the compaction point)."""
        state = {k: v for k, v in self.objects[resource].items()}
        for ev in reversed(self.log):
            if ev.rv <= rv:
                break
            if ev.resource != resource:
                continue
            key = _key(resource, ev.obj)
            if ev.prev is None:
                state.pop(key, None)
            else:
                state[key] = ev.prev
        return state

    # --------------------------------------------------------------- HTTP handling
    def _record(self, req, status, verb=None, resource=None):
        self._requests.append({'method': req.method, 'path': req.path, 'query': dict(req.query),
                               'user': req.user, 'groups': list(req.groups), 'proto': req.proto,
                               'status': status, 'verb': verb, 'resource': resource,
                               'time': time.time()})
        del self._requests[:-1000]

    def _headers(self, content_type='application/json'):
        return [('Audit-Id', str(uuid.uuid4())),
                ('Cache-Control', 'no-cache, private'),
                ('Content-Type', content_type),
                ('X-Kubernetes-Pf-Flowschema-Uid', '2c2b7f3e-5e2b-4a8e-9f2c-000000000001'),
                ('X-Kubernetes-Pf-Prioritylevel-Uid', '2c2b7f3e-5e2b-4a8e-9f2c-000000000002')]

    async def _send(self, req, resp, code, body, extra=(), content_type='application/json'):
        if isinstance(body, (dict, list)):
            body = (_dumps(body) + '\n').encode()
        hs = self._headers(content_type) + list(extra)
        if len(body) >= GZIP_THRESHOLD and 'gzip' in req.headers.get('accept-encoding', ''):
            body = gzip.compress(body, 1)
            hs.append(('Content-Encoding', 'gzip'))
        limit = H2_BUFFER if isinstance(resp, H2Responder) else H1_BUFFER
        await resp.start(code, hs, len(body) if len(body) <= limit or self.content_length_always else None)
        await resp.write(body)
        await resp.end()

    async def _error(self, req, resp, err):
        await self._send(req, resp, err.code, err.status, err.headers)

    def _authenticate(self, req):
        auth = req.headers.get('authorization', '')
        if auth:
            parts = auth.split(' ', 1)
            if len(parts) == 2 and parts[0].lower() == 'bearer' and parts[1].strip() in self.tokens:
                user, _uid, groups = self.tokens[parts[1].strip()]
                return user, groups + ['system:authenticated']
            return None        # a bad token is a 401 even with a good certificate (union)
        ident = req.conn.peer_identity()
        if ident and ident[0]:
            return ident[0], ident[1] + ['system:authenticated']
        if self.anonymous:
            return 'system:anonymous', ['system:unauthenticated']
        return None

    def _authorize(self, user, groups, verb, resource, namespace):
        for r in self.rbac:
            if user not in r.get('users', []) and not set(groups) & set(r.get('groups', [])):
                continue
            if verb not in r.get('verbs', []) and '*' not in r.get('verbs', []):
                continue
            if resource not in r.get('resources', []) and '*' not in r.get('resources', []):
                continue
            if 'namespaces' in r and (not namespace or namespace not in r['namespaces']):
                continue
            return True
        return False

    @staticmethod
    def _forbidden(user, verb, resource, name, namespace):
        if namespace:
            why = 'User "%s" cannot %s resource "%s" in API group "" in the namespace "%s"' % (
                user, verb, resource, namespace)
        else:
            why = 'User "%s" cannot %s resource "%s" in API group "" at the cluster scope' % (
                user, verb, resource)
        if name:
            msg = '%s "%s" is forbidden: %s' % (resource, name, why)
            details = {'name': name, 'kind': resource}
        else:
            msg = '%s is forbidden: %s' % (resource, why)
            details = {'kind': resource}
        return HttpError(403, status_obj(403, 'Forbidden', msg, details))

    @staticmethod
    def _route(req):
        """-> (resource, namespace, name) for the resource paths, else None."""
        p = [x for x in req.path.split('/') if x]
        if len(p) < 3 or p[0] != 'api' or p[1] != 'v1':
            return None
        rest = p[2:]
        if rest[0] == 'namespaces' and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
            if rest[0] != 'pods' or len(rest) > 2:
                return ('?', ns, None)
            return ('pods', ns, urllib.parse.unquote(rest[1]) if len(rest) == 2 else None)
        if rest[0] in ('nodes', 'pods'):
            if len(rest) == 1:
                return (rest[0], None, None)
            if len(rest) == 2 and rest[0] == 'nodes':
                return ('nodes', None, urllib.parse.unquote(rest[1]))
        return ('?', None, None)

    async def _handle(self, req, resp):
        status = [0]
        orig_start = resp.start
        route = self._route(req)
        verb = resource = None

        async def start(code, headers, length=None):
            status[0] = code
            self._record(req, code, verb, resource)     # seen before the client reads it
            await orig_start(code, headers, length)
        resp.start = start
        try:
            hdelay, _ = self._slow
            if hdelay:
                await asyncio.sleep(hdelay)
            ident = self._authenticate(req)
            if ident is None:
                raise HttpError(401, status_obj(401, 'Unauthorized', 'Unauthorized'))
            req.user, req.groups = ident
            if req.path in ('/healthz', '/livez', '/readyz'):
                await self._send(req, resp, 200, b'ok', content_type='text/plain; charset=utf-8')
                return
            if req.path == '/version':
                await self._send(req, resp, 200, {'major': '1', 'minor': '31', 'gitVersion': 'v1.31.0-kgpu-sim',
                                                  'platform': 'linux/amd64'})
                return
            if route is None:
                # A non-resource path: RBAC decides (nonResourceURLs), then Go's 404 page.
                if not self._authorize(req.user, req.groups, 'get', 'nonresource:' + req.path, None):
                    raise HttpError(403, status_obj(403, 'Forbidden', 'forbidden: User "%s" cannot get path "%s"'
                                                    % (req.user, req.path), {}))
                await self._send(req, resp, 404, b'404 page not found\n',
                                 [('X-Content-Type-Options', 'nosniff')], content_type='text/plain; charset=utf-8')
                return
            if route[0] == '?':
                raise HttpError(404, status_obj(404, 'NotFound', 'the server could not find the requested resource',
                                                {}))
            resource, namespace, name = route
            watch = req.query.get('watch', '').lower() in ('1', 'true')
            verb = 'get' if name else ('watch' if watch else 'list')
            fsel = parse_field_selector(resource, req.query.get('fieldSelector', ''))
            authz_name = name
            if not name:
                for f, op, v in fsel:
                    if f == 'metadata.name' and op == '=':
                        authz_name = v
            if req.method not in ('GET', 'HEAD'):
                if not self._authorize(req.user, req.groups, req.method.lower(), resource, namespace):
                    raise self._forbidden(req.user, {'POST': 'create', 'PUT': 'update', 'PATCH': 'patch',
                                                     'DELETE': 'delete'}.get(req.method, req.method.lower()),
                                          resource, authz_name, namespace)
                raise HttpError(405, status_obj(405, 'MethodNotAllowed',
                                                'the server does not allow this method on the requested resource',
                                                {}))
            if not self._authorize(req.user, req.groups, verb, resource, namespace):
                raise self._forbidden(req.user, verb, resource, authz_name, namespace)
            fault = self._take_fault(resource, verb)
            if fault is not None:
                if await self._apply_fault(req, resp, fault, resource, verb):
                    return
            match = make_matcher(resource, namespace, fsel,
                                 parse_label_selector(req.query.get('labelSelector', '')))
            if verb == 'get':
                await self._get(req, resp, resource, namespace, name, fault)
            elif verb == 'list':
                await self._list(req, resp, resource, match, fault)
            else:
                await self._watch(req, resp, resource, match, fault)
        except HttpError as e:
            if status[0] == 0:
                await self._error(req, resp, e)
        finally:
            if status[0] == 0:
                self._record(req, 0, verb, resource)

    async def _apply_fault(self, req, resp, fault, resource, verb):
        """True when the fault answered the request."""
        k, p = fault['kind'], fault['params']
        if k == 'status':
            code = int(p.get('code', 500))
            extra = []
            if code == 401:
                st = status_obj(401, 'Unauthorized', 'Unauthorized')
            elif code == 403:
                raise self._forbidden(req.user, verb, resource, None, None)
            elif code == 429 and p.get('style', 'text') == 'text':
                # The priority-and-fairness and max-in-flight filters: net/http's http.Error.
                ra = int(p.get('retry_after', 1))
                await self._send(req, resp, 429, b'Too many requests, please try again later.\n',
                                 [('Retry-After', str(ra)), ('X-Content-Type-Options', 'nosniff')],
                                 content_type='text/plain; charset=utf-8')
                return True
            elif code == 429:
                ra = int(p.get('retry_after', 1))
                st = status_obj(429, 'TooManyRequests', p.get('message', 'Too many requests, please try again later.'),
                                {'retryAfterSeconds': ra})
                extra = [('Retry-After', str(ra))]
            elif code == 500:
                m = p.get('message', 'simulated failure')
                st = status_obj(500, 'InternalError', 'Internal error occurred: ' + m,
                                {'causes': [{'message': m}]})
            elif code == 503:
                ra = int(p.get('retry_after', 1))
                st = status_obj(503, 'ServiceUnavailable', p.get('message', 'the server is currently unable to handle the request'),
                                {'retryAfterSeconds': ra})
                extra = [('Retry-After', str(ra))]
            elif code == 410:
                st = status_obj(410, 'Expired', p.get('message', 'The resourceVersion for the provided list is too old.'))
            else:
                st = status_obj(code, p.get('reason', 'InternalError'), p.get('message', 'simulated error %d' % code))
            raise HttpError(code, st, extra)
        if k == 'slow':
            await asyncio.sleep(float(p.get('headers', 0)))
            return False
        if k == 'hang':
            await asyncio.sleep(float(p.get('seconds', 3600)))
            resp.abort()
            return True
        if k == 'garbage' and verb != 'watch':
            await self._send(req, resp, 200, p.get('body', b'\x00\xffthis is not JSON {"kind":'))
            return True
        return False

    def _padding(self, fault):
        if fault is None or fault['kind'] != 'oversized':
            return None
        return 'x' * int(fault['params'].get('size', 16 * 1024 * 1024))

    def _pad(self, obj, pad):
        obj = copy.deepcopy(obj)
        obj.setdefault('metadata', {}).setdefault('annotations', {})['kgpu.io/sim-padding'] = pad
        return obj

    async def _get(self, req, resp, resource, namespace, name, fault):
        key = (namespace, name) if resource == 'pods' else name
        obj = self.objects[resource].get(key)
        if obj is None:
            raise HttpError(404, status_obj(404, 'NotFound', '%s "%s" not found' % (resource, name),
                                            {'name': name, 'kind': resource}))
        pad = self._padding(fault)
        if pad is not None:
            obj = self._pad(obj, pad)
        body = (_dumps(with_kind(resource, obj)) + '\n').encode()
        await self._send_body(req, resp, body, fault)

    async def _send_body(self, req, resp, body, fault):
        if fault is not None and fault['kind'] == 'truncated':
            await resp.start(200, self._headers(), len(body))
            await resp.write(body[:len(body) // 2])
            resp.abort()
            return
        await self._send(req, resp, 200, body)

    async def _list(self, req, resp, resource, match, fault):
        rvs = req.query.get('resourceVersion', '')
        rvm = req.query.get('resourceVersionMatch', '')
        if rvm and not rvs:
            raise _invalid_list_options('resourceVersionMatch', rvm,
                                        'resourceVersionMatch is forbidden unless resourceVersion is provided')
        if rvm and rvm not in ('Exact', 'NotOlderThan'):
            raise HttpError(422, status_obj(422, 'Invalid', 'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: '
                                            'Unsupported value: "%s": supported values: "Exact", "NotOlderThan"' % rvm))
        if rvm == 'Exact' and rvs == '0':
            raise _invalid_list_options('resourceVersionMatch', rvm,
                                        'resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
        state = self.objects[resource]
        list_rv = self.rv
        if rvs not in ('', '0'):
            try:
                n = int(rvs)
                if n < 0:
                    raise ValueError
            except ValueError:
                raise HttpError(400, status_obj(400, 'BadRequest', 'invalid resource version: %s' % rvs))
            if n > self.rv:
                end = time.time() + 3.0
                while self.rv < n and time.time() < end:
                    self._changed.clear()
                    try:
                        await asyncio.wait_for(self._changed.wait(), max(0.01, end - time.time()))
                    except asyncio.TimeoutError:
                        pass
                if self.rv < n:
                    raise HttpError(504, status_obj(504, 'Timeout', 'Timeout: Too large resource version: %d, current: %d' % (n, self.rv),
                                                    {'causes': [{'reason': 'ResourceVersionTooLarge',
                                                                 'message': 'Too large resource version'}],
                                                     'retryAfterSeconds': 1}), [('Retry-After', '1')])
                state = self.objects[resource]
                list_rv = self.rv
            if rvm == 'Exact':
                if n < self.compacted:
                    raise HttpError(410, status_obj(410, 'Expired', 'The resourceVersion for the provided list is too old.'))
                state = self._state_at(resource, n)
                list_rv = n
        keys = sorted(state)
        start_after = None
        cont = req.query.get('continue', '')
        if cont:
            if rvs:
                raise _invalid([('resourceVersion', 'Forbidden', 'specifying resource version is not allowed when using continue')])
            try:
                tok = json.loads(base64.urlsafe_b64decode(cont + '=' * (-len(cont) % 4)))
                list_rv, start_after = int(tok['rv']), tok['start']
                if tok.get('v') != 'meta.k8s.io/v1':
                    raise ValueError
            except (ValueError, KeyError, TypeError):
                raise HttpError(400, status_obj(400, 'BadRequest', 'continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)'))
            if list_rv < self.compacted:
                raise HttpError(410, status_obj(410, 'Expired', CONTINUE_EXPIRED))
            state = self._state_at(resource, list_rv)
            keys = [k for k in sorted(state) if _keystr(resource, k) > start_after]
        items = [state[k] for k in keys if match(state[k])]
        limit = req.query.get('limit', '')
        meta = {'resourceVersion': str(list_rv)}
        if limit and rvs != '0':
            try:
                lim = int(limit)
            except ValueError:
                raise _bad_request('limit: invalid value %r' % limit)
            if 0 < lim < len(items):
                last = _keystr(resource, _key(resource, items[lim - 1]))
                tok = {'v': 'meta.k8s.io/v1', 'rv': list_rv, 'start': last}
                meta['continue'] = base64.urlsafe_b64encode(_dumps(tok).encode()).decode().rstrip('=')
                meta['remainingItemCount'] = len(items) - lim
                items = items[:lim]
        pad = self._padding(fault)
        if pad is not None:
            items = [self._pad(items[0], pad)] + items[1:] if items else [
                self._pad({'metadata': {'name': 'sim-padding', 'resourceVersion': str(list_rv)}}, pad)]
        body = {'kind': KINDS[resource][1], 'apiVersion': 'v1', 'metadata': meta, 'items': items}
        await self._send_body(req, resp, (_dumps(body) + '\n').encode(), fault)

    async def _watch(self, req, resp, resource, match, fault):
        q = req.query
        rvs = q.get('resourceVersion', '')
        rvm = q.get('resourceVersionMatch', '')
        bookmarks = q.get('allowWatchBookmarks', '').lower() in ('1', 'true')
        sie = q.get('sendInitialEvents')
        initial = sie is not None and sie.lower() in ('1', 'true')
        errs = []
        if sie is not None and rvm != 'NotOlderThan':
            errs.append(('resourceVersionMatch', 'Forbidden',
                         'sendInitialEvents requires setting resourceVersionMatch to NotOlderThan'))
        if rvm:
            if sie is None:
                errs.append(('resourceVersionMatch', 'Forbidden',
                             'resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided'))
            if rvm != 'NotOlderThan':
                errs.append(('resourceVersionMatch', 'NotSupported',
                             'Unsupported value: "%s": supported values: "NotOlderThan"' % rvm))
        if errs:
            raise _invalid(errs)
        try:
            timeout = float(q['timeoutSeconds']) if 'timeoutSeconds' in q else (
                self.default_watch_timeout if self.default_watch_timeout is not None
                else MIN_REQUEST_TIMEOUT * (1 + random.random()))
        except ValueError:
            raise _bad_request('timeoutSeconds: invalid value %r' % q.get('timeoutSeconds'))
        n = None
        if rvs not in ('', '0'):
            try:
                n = int(rvs)
                if n < 0:
                    raise ValueError
            except ValueError:
                raise HttpError(400, status_obj(400, 'BadRequest', 'invalid resource version: %s' % rvs))
        w = Watch(self, resource, q, req.user, req.proto, match)
        # Snapshot and registration happen together on the loop: no change can fall between.
        pending = []
        expired = n is not None and n < self.compacted
        if initial:
            expired = False
        start_rv = n if n is not None else self.rv
        if not expired:
            if initial or (n is None and sie is None):
                for _k, o in sorted(self.objects[resource].items()):
                    if match(o):
                        pending.append(('ADDED', o))
                start_rv = self.rv
                if initial and bookmarks:
                    pending.append(('BOOKMARK-END', None))
            elif n is None:
                pass            # sendInitialEvents=false: from now on, no initial state
            else:
                for ev in self.log:
                    if ev.rv > n and ev.resource == resource:
                        c = w.convert(ev)
                        if c:
                            pending.append(c)
            self.watchers.add(w)
        try:
            await resp.start(200, self._headers())
            if expired:
                st = status_obj(410, 'Expired', 'too old resource version: %d (%d)' % (n, self.compacted))
                await resp.write((_dumps({'type': 'ERROR', 'object': st}) + '\n').encode())
                await resp.end()
                return
            deadline = time.monotonic() + timeout
            next_bm = time.monotonic() + self.bookmark_interval
            garbage = fault if fault is not None and fault['kind'] == 'garbage' else None
            pad = self._padding(fault)
            while True:
                if pending:
                    item = pending.pop(0)
                else:
                    now = time.monotonic()
                    if now >= deadline:
                        break
                    wait = deadline - now
                    if bookmarks:
                        wait = min(wait, max(0.0, next_bm - now))
                    try:
                        item = await asyncio.wait_for(w.queue.get(), wait)
                    except asyncio.TimeoutError:
                        if bookmarks and time.monotonic() >= next_bm:
                            item = ('BOOKMARK', None)
                        else:
                            continue
                if w.overflow:
                    break
                if item is CUT:
                    await self._cut(resp, w.cut_mode)
                    return
                if isinstance(item, Event):
                    if item.rv <= start_rv:
                        continue        # cacheWatcher.process: only events newer than the start
                    item = w.convert(item)
                    if item is None:
                        continue
                typ, obj = item
                if typ == 'BOOKMARK' or typ == 'BOOKMARK-END':
                    md = {'resourceVersion': str(self.rv)}
                    if typ == 'BOOKMARK-END':
                        md['annotations'] = {'k8s.io/initial-events-end': 'true'}
                    line = _dumps({'type': 'BOOKMARK', 'object': self._bookmark_object(resource, md)})
                    next_bm = time.monotonic() + self.bookmark_interval
                else:
                    if pad is not None:
                        obj = self._pad(obj, pad)
                        pad = None
                    line = _dumps({'type': typ, 'object': with_kind(resource, obj)})
                data = (line + '\n').encode()
                edelay = self._slow[1]
                if fault is not None and fault['kind'] == 'slow':
                    edelay = max(edelay, float(fault['params'].get('events', 0)))
                if edelay:
                    await asyncio.sleep(edelay)
                if w.cut_mode is not None:
                    await self._cut(resp, w.cut_mode, data)
                    return
                if garbage is not None:
                    await resp.write(garbage['params'].get('body', b'\x00{"type":"ADDED","object":{garbage') + b'\n')
                    garbage = None
                await resp.write(data)
            await resp.end()
        finally:
            self.watchers.discard(w)

    def _bookmark_object(self, resource, md):
        obj = {'kind': KINDS[resource][0], 'apiVersion': 'v1', 'metadata': md}
        if self.bookmark_style == 'go':
            # The empty object the cacher versions, as encoding/json writes a zero Go struct.
            md['creationTimestamp'] = None
            if resource == 'pods':
                obj['spec'] = {'containers': None}
                obj['status'] = {}
            else:
                obj['spec'] = {}
                obj['status'] = {'daemonEndpoints': {'kubeletEndpoint': {'Port': 0}},
                                 'nodeInfo': {k: '' for k in ('machineID', 'systemUUID', 'bootID', 'kernelVersion',
                                                              'osImage', 'containerRuntimeVersion', 'kubeletVersion',
                                                              'kubeProxyVersion', 'operatingSystem', 'architecture')}}
        return obj

    @_on_loop
    def set_bookmark_style(self, style):
        """'docs': only kind, apiVersion, metadata.resourceVersion (the API Concepts example);
        'go': the zero object as a real server encodes it (creationTimestamp null, empty spec/status)."""
        if style not in ('docs', 'go'):
            raise ValueError(style)
        self.bookmark_style = style
        return True

    async def _cut(self, resp, mode, data=None):
        if mode == 'end':
            await resp.end()
            return
        if mode == 'reset' and isinstance(resp, H2Responder):
            await resp.reset()
            return
        if data is None and mode in ('mid-event', 'mid-chunk'):
            data = b'{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"cut-here"}}}\n'
        if mode == 'mid-event':
            await resp.write(data[:len(data) // 2])
        elif mode == 'mid-chunk' and isinstance(resp, H1Responder):
            await resp.write_partial_chunk(data)
        elif mode == 'mid-chunk':
            await resp.write(data[:len(data) // 2])
        resp.abort()

    # --------------------------------------------------------------- control socket
    def public_methods(self):
        return sorted(n for n in dir(type(self)) if getattr(getattr(type(self), n), 'public', False)
                      or n in ('wait_watches', 'wait_requests', 'wait_up'))

    def serve_control(self, path):
        """Serves the JSON-lines control protocol on a unix socket (process mode)."""
        if os.path.exists(path):
            os.unlink(path)

        async def start():
            return await asyncio.start_unix_server(self._control_client, path, limit=16 * 1024 * 1024)
        fut = asyncio.run_coroutine_threadsafe(start(), self._loop)
        fut.result(CALL_TIMEOUT)
        os.chmod(path, 0o600)

    async def _control_client(self, reader, writer):
        allowed = set(self.public_methods())
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                try:
                    msg = json.loads(line)
                    op = msg.get('op')
                    if op not in allowed:
                        raise ValueError('unknown op %r' % op)
                    args, kwargs = msg.get('args', []), msg.get('kwargs', {})
                    if op in ('wait_watches', 'wait_requests', 'wait_up'):
                        result = await self._loop.run_in_executor(None, lambda: getattr(self, op)(*args, **kwargs))
                    else:
                        result = getattr(self, op)(*args, **kwargs)
                    out = {'ok': True, 'result': result}
                except Exception as e:
                    out = {'ok': False, 'error': '%s: %s' % (type(e).__name__, e)}
                writer.write((json.dumps(out, default=str) + '\n').encode())
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


class SimClient:
    """The simulator's methods through its control socket (process mode)."""

    def __init__(self, path, timeout=CALL_TIMEOUT + 5):
        self.path = path
        self.timeout = timeout

    def call(self, op, *args, **kwargs):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
            s.sendall((json.dumps({'op': op, 'args': list(args), 'kwargs': kwargs}) + '\n').encode())
            buf = b''
            while not buf.endswith(b'\n'):
                d = s.recv(65536)
                if not d:
                    raise ConnectionError('control socket closed')
                buf += d
        finally:
            s.close()
        r = json.loads(buf)
        if not r.get('ok'):
            raise RuntimeError(r.get('error'))
        return r.get('result')

    def wait_requests(self, pred, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            for r in self.call('requests'):
                if pred(r):
                    return r
            time.sleep(0.1)
        return None

    def __getattr__(self, name):
        if name.startswith('_'):
            raise AttributeError(name)
        return lambda *a, **kw: self.call(name, *a, **kw)


def load_state(sim, path):
    with open(path) as f:
        st = json.load(f)
    if 'rbac' in st:
        sim.set_rbac(st['rbac'])
    if 'anonymous' in st:
        sim.set_anonymous(st['anonymous'])
    for n in st.get('nodes', []):
        sim.add_node(n['name'], n.get('labels'), n.get('unschedulable', False))
    for p in st.get('pods', []):
        sim.add_pod(**p)


def main(argv=None):
    ap = argparse.ArgumentParser(description='Kubernetes API server simulator (tests)')
    ap.add_argument('--host', default='127.0.0.1')
    ap.add_argument('--port', type=int, default=6443)
    ap.add_argument('--pki', required=True, help='PKI directory (created when missing)')
    ap.add_argument('--state', help='JSON file: nodes, pods, rbac, anonymous')
    ap.add_argument('--control', help='unix socket for JSON control commands')
    ap.add_argument('--http1-only', action='store_true')
    ap.add_argument('--bookmark-interval', type=float, default=60.0)
    ap.add_argument('--anonymous', action='store_true')
    a = ap.parse_args(argv)
    pki = make_pki(a.pki)
    sim = ApiServerSim(pki, port=a.port, host=a.host, http1_only=a.http1_only,
                       bookmark_interval=a.bookmark_interval, anonymous=a.anonymous)
    sim.start()
    if a.state:
        load_state(sim, a.state)
    if a.control:
        sim.serve_control(a.control)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    print('READY %d' % sim.port, flush=True)
    while not done.wait(1):
        pass
    sim.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
