#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# apiserver_sim.py — an independent Kubernetes API server simulator for kgpu-clusterd's
# tests: HTTPS (TLS 1.2+, the test PKI of apisim_pki.py), ALPN h2 + http/1.1 (HTTP/2
# through python3-h2, HTTP/1.1 by hand), nodes and pods, list and watch as
# kube-apiserver answers them on the wire. Standard library, Debian's python3-h2 (and
# python3-yaml only to read RBAC manifests) and the openssl command; nothing from kgpu.
# It runs in-process (an asyncio loop in a daemon thread) or as a process.
# Parts: apisim_wire.py (Status objects, selectors, watch-event conversion),
# apisim_http.py (HTTP/1.1 and HTTP/2 transports), apisim_state.py (objects, revisions,
# faults, observation), apisim_listwatch.py (list and watch), apisim_rbac.py
# (authorization table, RBAC manifests), apisim_pki.py (test PKI, kubeconfig, service
# account files). Import everything from this module.
#
# ---------------------------------------------------------------------------------------
# Python API (stable; later changes only add)
#
#   from apiserver_sim import (ApiServerSim, SimClient, make_pki, make_client_cert,
#                              write_kubeconfig, write_serviceaccount)
#   pki = make_pki(tmpdir + '/pki')                      # see apisim_pki.py
#   sim = ApiServerSim(pki, port=0, http1_only=False, rbac=None, anonymous=False,
#                      bookmark_interval=60.0, default_watch_timeout=None)
#       default_watch_timeout: seconds a watch without timeoutSeconds lasts (None: as
#       the server, a random time in [1800, 3600))
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
#   sim.touch_node(name)            a status-only MODIFIED (heartbeat), labels unchanged
#   sim.add_pod(namespace, name, node_name='', annotations=None, containers=None,
#               phase='Pending', labels=None) -> object
#       containers: list of {'name': str, 'limits': {res: qty}} (or full container
#       specs with 'resources'); default one container 'main' without limits.
#   sim.update_pod(namespace, name, annotations=None, phase=None, node_name=None,
#                  containers=None, labels=None, remove_annotations=())
#   sim.delete_pod(namespace, name, grace_seconds=None)   None: DELETED; a number: a
#                                   graceful deletion (MODIFIED with deletionTimestamp and
#                                   deletionGracePeriodSeconds; delete_pod again removes it)
#   sim.put_object(resource, obj)   resource 'nodes'|'pods': stores obj as given (hostile
#                                   content allowed), metadata.resourceVersion set
#   sim.get_object(resource, name, namespace=None) -> dict or None
#   sim.resource_version() -> int  (the current revision)
#   sim.compact(rv=None)            compaction point = rv or the current revision
#   sim.set_rbac(rules)             rules: [{'users': [...], 'groups': [...],
#                                   'verbs': [...], 'resources': [...],
#                                   'resourceNames': [...], 'namespaces': [...] (both
#                                   optional: absent = all)}]; DEFAULT_RBAC is the
#                                   repository's deploy/rbac.yaml (nodes get/list/watch,
#                                   pods list/watch) for user kgpu-cluster and the
#                                   service account SERVICEACCOUNT_USER
#   rbac_from_manifests(paths_or_yaml_texts) -> rules   (apisim_rbac.py: ClusterRole,
#                                   Role, ClusterRoleBinding, RoleBinding documents)
#   sim.set_bookmark_interval(seconds)
#   sim.set_bookmark_style('docs'|'go')   'docs' (default): the bookmark object is only
#                                   kind, apiVersion, metadata.resourceVersion, as the API
#                                   Concepts page shows it; 'go': the zero object a Go server
#                                   encodes (metadata.creationTimestamp null, empty spec/status)
#   sim.set_anonymous(bool)         anonymous authentication on/off (default off: 401)
#   sim.set_http1_only(bool)        ALPN for new connections: http/1.1 only, or h2 too
#   sim.content_length_always = True   size every non-watch body (default: as net/http,
#                                   bodies over 2 KiB (HTTP/1.1) / 4 KiB (HTTP/2) go chunked /
#                                   unsized)
#
#   Faults:
#   sim.down(graceful=False)   stop accepting and close every connection (graceful:
#                   watches end cleanly, HTTP/2 gets GOAWAY NO_ERROR, then the close);
#                   sim.up() listens again on the same port
#   sim.blackhole()  down, and the port accepts TCP connections that never get a TLS
#                   answer (a hung server); sim.up() ends it
#   sim.kubeconfig(path, user='kgpu-cluster', token=False, embed=True) -> path
#                   a kubeconfig for this server and a user of the PKI (client
#                   certificate, or with token=True its token file)
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
#         'status'    code=401|403|410|429|500|503|..., retry_after=N, message=...
#                     (a real server never answers a watch with HTTP 410: an expired
#                     watch is HTTP 200 and an ERROR event, see 'error_event');
#                     429 is by default the plain-text answer of the priority-and-
#                     fairness filter (Retry-After header); style='status' gives a
#                     TooManyRequests Status with details.retryAfterSeconds instead
#         'oversized' size=N bytes: a valid answer padded to about N bytes (a list item /
#                     watch event object with an annotation of N bytes); watch: after=K
#                     events (default 0)
#         'garbage'   body=bytes: the body (list/get) or one watch line is that
#                     (default: not JSON), Content-Type still application/json; watch:
#                     the line comes after=K events (default 0), the stream goes on
#         'error_event'  watch only: after=K events an ERROR event, then the stream
#                     ends; code=410 (Expired "too old resource version: N (C)", default)
#                     | 500 (InternalError) | other with reason=, message=
#         'truncated' the list/get body stops half way and the connection closes
#         'slow'      headers=s, events=s for the requests it hits
#         'hang'      headers never come (seconds=, default 3600; stop/down end it)
#   sim.remove_fault(fid)   sim.clear_faults()
#   sim.add_token(token, user, groups=())   sim.remove_token(token)   (the token table)
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
#   "pods": [{add_pod keyword args}], "rbac": [...], "rbac_manifests": [paths, relative
#   to FILE], "tokens": [{"token", "user", "groups"}], "anonymous": bool}), prints
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
#    (--tls-min-version default). Client certificates (apiserver secure_serving.go): with
#    --client-ca-file the server uses tls.RequestClientCert, so the handshake never
#    rejects a certificate and none at all is fine; the x509
#    authenticator verifies it (chain to the client CA, validity, clientAuth usage) and a
#    failure is 401. Authenticators are a union in the order x509, bearer tokens; the
#    first success wins (a good certificate with a bad token is the certificate's user).
#    x509 authenticator: user = subject CN, groups = subject O values.
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
#    fieldSelector metadata.name=X is authorized as that name (RequestInfoFactory), so
#    RBAC resourceNames restrict such a list or watch.
#  - Verbs: GET collection = list, GET collection with watch=1|true = watch, GET object =
#    get. The deprecated /api/v1/watch/<collection>[/<name>] paths are watches; a name
#    there becomes a metadata.name field selector (a different one: 400 "fieldSelector
#    metadata.name doesn't match requested name").
#  - Accept: application/json, */* and application/* are answered in JSON; anything else
#    gets 406 NotAcceptable "only the following media types are accepted:
#    application/json, application/yaml, application/vnd.kubernetes.protobuf" (the list
#    is the real server's; YAML and protobuf answers are not simulated, so those two are
#    refused here where the real server would answer in them).
#  - Lists: {"kind":"NodeList"|"PodList","apiVersion":"v1","metadata":
#    {"resourceVersion":"N"},"items":[...]}; items carry no kind/apiVersion. A single
#    object and a watch event's object carry kind "Node"/"Pod", apiVersion "v1".
#  - resourceVersion on list: unset = most recent; "0" = any (here: the current state);
#    N with resourceVersionMatch unset or NotOlderThan = at least as new as N (N older
#    than the compaction point is still served, with the current state); N with
#    resourceVersionMatch=Exact = the state at exactly N, 410 Expired "The
#    resourceVersion for the provided list is too old." when N is compacted (etcd3
#    store interpretListError). N newer than the current revision: the cache waits up to
#    3 s, then 504 Timeout "Timeout: Too large resource version: N, current: C" with
#    details.causes [{"reason":"ResourceVersionTooLarge","message":"Too large resource
#    version"}], retryAfterSeconds 1 (storage.NewTooLargeResourceVersionError).
#    resourceVersionMatch without resourceVersion, or Exact with "0": 422 Invalid
#    (ValidateListOptions, 'ListOptions.meta.k8s.io "" is invalid: <field>: Forbidden:
#    ...'). limit=L: L items, metadata.continue (base64 of {"v":"meta.k8s.io/v1","rv",
#    "start"}) and remainingItemCount; the next page is read at the first page's
#    revision; a token whose revision is compacted: 410 Expired "The provided continue
#    parameter is too old ...". resourceVersion=0 ignores limit (served from the cache).
#  - Watch: HTTP 200, Content-Type application/json, HTTP/1.1 Transfer-Encoding:
#    chunked; each event one JSON object {"type":...,"object":...} followed by "\n"
#    (the JSON serializer's encoder), types ADDED, MODIFIED, DELETED, BOOKMARK, ERROR.
#    resourceVersion unset or "0": synthetic ADDED events for the current objects, then
#    changes; N: every change after N. N older than the watch cache's window: the
#    stream opens with 200 and carries one ERROR event whose object is a Status code
#    410 reason Expired message "too old resource version: N (C)" (cacher watchCache),
#    then ends. allowWatchBookmarks=true: BOOKMARK events whose object is only
#    {"kind","apiVersion","metadata":{"resourceVersion"}} with the newest revision the
#    cache has seen (it may be of an object this watch does not match), about every
#    minute (bookmark interval, configurable) and once 2 s before the watch's deadline
#    (cacheWatcher.nextBookmarkTime).
#    Watch options (validateWatchOptions): resourceVersionMatch only with
#    sendInitialEvents and only NotOlderThan, sendInitialEvents only with
#    resourceVersionMatch=NotOlderThan, else 422. sendInitialEvents=true: ADDED events for
#    the current state, then (with allowWatchBookmarks) a BOOKMARK whose metadata carries
#    the annotation "k8s.io/initial-events-end": "true"; sendInitialEvents=false: changes
#    only. Events at or below the start revision are never sent (cacheWatcher.process).
#    The WatchList defaulting of newer servers (a legacy watch turned into
#    sendInitialEvents=true) is not simulated. timeoutSeconds=T: the server
#    ends the stream cleanly after T seconds (default: a random time between the
#    minimum request timeout and twice it).
#  - Field selectors (fieldSelector=a=b,c!=d, "==" too): nodes support metadata.name
#    and spec.unschedulable; pods metadata.name, metadata.namespace, spec.nodeName,
#    spec.restartPolicy, spec.schedulerName, spec.serviceAccountName, spec.hostNetwork,
#    status.phase, status.podIP, status.podIPs, status.nominatedNodeName, and spec.host
#    as the old name of spec.nodeName (pkg/apis/core/v1/conversion.go field label
#    conversion funcs); anything else: 400 BadRequest "field label not supported: X".
#    Watch filtering as the cacher's cacheWatcher.convertToWatchEvent: an object that
#    starts matching arrives as ADDED, keeps matching MODIFIED, stops matching DELETED
#    (the previous object's content with the new resourceVersion).
#  - Errors as Status objects: 404 NotFound '<resource> "<name>" not found' details
#    {"name","kind"}; (style='status') 429 TooManyRequests with Retry-After and
#    details.retryAfterSeconds; 500 InternalError "Internal error occurred: ..." with
#    details.causes; headers Cache-Control "no-cache, private", Audit-Id.
#  - Responses of 128 KiB or more are gzip-compressed when the client sends
#    Accept-Encoding: gzip (APIResponseCompression); watch streams are not.
#  - Framing (Go net/http, x/net/http2): a body that fits the handler's write buffer
#    (2048 bytes HTTP/1.1, 4096 HTTP/2) gets Content-Length; a larger one is sent chunked
#    (HTTP/1.1) or without content-length (HTTP/2). Watches are always chunked / unsized.
#  - 429 from the priority-and-fairness (and max-in-flight) filter is net/http's
#    http.Error: text/plain "Too many requests, please try again later.\n" with
#    Retry-After, not a Status. Status errors carrying details.retryAfterSeconds also get a
#    Retry-After header (responsewriters.ErrorNegotiated).
#  - Non-resource paths are authorized as verb get on the path: 'forbidden: User "u"
#    cannot get path "/p"'; a permitted unknown path is Go's text "404 page not found".
#  - Limits of the simulation: the TLS handshake trusts the test PKI's CA and rogue CA
#    only (a certificate of any other CA fails the handshake instead of getting 401);
#    only nodes and pods of the core group exist; no writes (POST/PUT/PATCH/DELETE are
#    authorized, then 405); no YAML or protobuf; no APF queuing beyond injected 429s.
#  - Watch cache window: the cacher keeps a window per resource; here one global
#    compaction point plays it, and the second number of "too old resource version" is
#    that point.
# ---------------------------------------------------------------------------------------
import argparse
import asyncio
import copy
import gzip
import hashlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apisim_pki import (make_pki, make_client_cert, write_kubeconfig, write_serviceaccount,  # noqa: E402,F401
                        read_token_file, SERVICEACCOUNT_USER)  # (re-exported)
from apisim_wire import (CALL_TIMEOUT, DEFAULT_RBAC, GZIP_THRESHOLD, H1_BUFFER, H2_BUFFER,  # noqa: E402,F401
                         EXPIRED_LIST, MAX_REQUEST_HEADER, HttpError, _bad_request, _dumps, make_matcher,
                         parse_field_selector,
                         parse_label_selector, status_obj, with_kind)
from apisim_http import H1Conn, H2Conn, H2Responder  # noqa: E402

X509_V_FLAG_NO_CHECK_TIME = 0x200000

__all__ = ['ApiServerSim', 'SimClient', 'DEFAULT_RBAC', 'SERVICEACCOUNT_USER', 'make_pki', 'make_client_cert',
           'rbac_from_manifests',
           'write_kubeconfig', 'write_serviceaccount', 'read_token_file', 'load_state', 'main']
from apisim_state import SimState  # noqa: E402
from apisim_rbac import authorize, rbac_from_manifests  # noqa: E402,F401  (re-exported)
from apisim_listwatch import ListWatch  # noqa: E402


class ApiServerSim(SimState, ListWatch):
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
        self._x509_cache = {}
        self._blackhole = None
        self._blackhole_conns = set()
        self.bookmark_style = 'docs'

    # --------------------------------------------------------------- life cycle
    def _ssl_context(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.pki['server_cert'], self.pki['server_key'])
        # kube-apiserver asks for a client certificate (tls.RequestClientCert) and leaves its
        # verification to the x509 authenticator: a foreign or expired certificate completes
        # the handshake and is refused with 401. Python cannot request without verifying, so
        # the handshake trusts the test CAs (ours and the rogue one) and ignores validity
        # times; _x509_verify then checks as the authenticator does.
        ctx.load_verify_locations(self.pki['ca'])
        if self.pki.get('rogue_ca') and os.path.exists(self.pki['rogue_ca']):
            ctx.load_verify_locations(self.pki['rogue_ca'])
        ctx.verify_flags |= X509_V_FLAG_NO_CHECK_TIME
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
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        except RuntimeError:
            pass
        self._thread.join(CALL_TIMEOUT)
        if self._thread.is_alive():     # never hang a test: the thread is a daemon
            try:
                loop.call_soon_threadsafe(loop.stop)
            except RuntimeError:
                pass
        self._thread = None

    async def _shutdown(self):
        """On the loop: close the listener and every connection, end every task, stop."""
        self._close_all()
        me = asyncio.current_task()
        for _ in range(3):          # cancelled tasks may start others (aborts): a few rounds
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            if not tasks:
                break
            for t in tasks:
                t.cancel()
            await asyncio.wait(tasks, timeout=2)
        asyncio.get_running_loop().stop()

    def kubeconfig(self, path, user='kgpu-cluster', token=False, embed=True):
        u = self.pki['users'].get(user, {})
        if token:
            return write_kubeconfig(path, self.url, ca=self.pki['ca'], token_file=self.pki['token_files'][user],
                                    embed=embed, user=user)
        return write_kubeconfig(path, self.url, ca=self.pki['ca'], client_cert=u['cert'], client_key=u['key'],
                                embed=embed, user=user)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _close_all(self):
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._blackhole is not None:
            self._blackhole.close()
            self._blackhole = None
        for w in list(self._blackhole_conns):
            w.transport.abort()
        self._blackhole_conns.clear()
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

    def _x509_verify(self, der):
        """The x509 authenticator: chain to the client CA, validity times, clientAuth."""
        key = hashlib.sha256(der).hexdigest()
        if key not in self._x509_cache:
            pem = ssl.DER_cert_to_PEM_cert(der)
            try:
                r = subprocess.run(['openssl', 'verify', '-CAfile', self.pki['ca'], '-purpose', 'sslclient'],
                                   input=pem, capture_output=True, text=True, timeout=10)
                self._x509_cache[key] = r.returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                self._x509_cache[key] = False
        return self._x509_cache[key]

    def _authenticate(self, req):
        """The union authenticator in kube-apiserver's order: x509, then bearer tokens; the
        first success wins; any failure without a success is 401, also with anonymous on."""
        failed = False
        ident = req.conn.peer_identity()
        if ident:
            cn, groups, der = ident
            if cn and self._x509_verify(der):
                return cn, groups + ['system:authenticated']
            failed = True
        auth = req.headers.get('authorization', '')
        parts = auth.split(' ', 1)
        if len(parts) == 2 and parts[0].lower() == 'bearer':
            tok = parts[1].strip()
            if tok in self.tokens:
                user, _uid, groups = self.tokens[tok]
                return user, groups + ['system:authenticated']
            failed = True
        if failed:
            return None
        if self.anonymous:
            return 'system:anonymous', ['system:unauthenticated']
        return None

    def _authorize(self, user, groups, verb, resource, namespace, name=None):
        return authorize(self.rbac, user, groups, verb, resource, namespace, name)

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
        req.legacy_watch = False
        if rest[0] == 'watch' and len(rest) >= 2:
            # The deprecated /api/v1/watch/... paths: a watch, named or not.
            req.legacy_watch = True
            rest = rest[1:]
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
            watch = req.query.get('watch', '').lower() in ('1', 'true') or req.legacy_watch
            verb = 'get' if name and not req.legacy_watch else ('watch' if watch else 'list')
            fsel = parse_field_selector(resource, req.query.get('fieldSelector', ''))
            if req.legacy_watch and name:
                # ListResource: the path's name becomes a metadata.name field selector.
                named = [v for f, op, v in fsel if f == 'metadata.name' and op == '=']
                if fsel and (not named or named[0] != name):
                    raise _bad_request("fieldSelector metadata.name doesn't match requested name")
                if not fsel:
                    fsel = [('metadata.name', '=', name)]
            authz_name = name
            if not name:
                for f, op, v in fsel:
                    if f == 'metadata.name' and op == '=' and v not in ('.', '..') and '/' not in v and '%' not in v:
                        authz_name = v
            if req.method not in ('GET', 'HEAD'):
                if not self._authorize(req.user, req.groups, req.method.lower(), resource, namespace, authz_name):
                    raise self._forbidden(req.user, {'POST': 'create', 'PUT': 'update', 'PATCH': 'patch',
                                                     'DELETE': 'delete'}.get(req.method, req.method.lower()),
                                          resource, authz_name, namespace)
                raise HttpError(405, status_obj(405, 'MethodNotAllowed',
                                                'the server does not allow this method on the requested resource',
                                                {}))
            if not self._authorize(req.user, req.groups, verb, resource, namespace, authz_name):
                raise self._forbidden(req.user, verb, resource, authz_name, namespace)
            accept = req.headers.get('accept', '')
            if accept and not any(m.split(';')[0].strip() in ('application/json', '*/*', 'application/*')
                                  for m in accept.split(',')):
                raise HttpError(406, status_obj(406, 'NotAcceptable', 'only the following media types are accepted: '
                                                'application/json, application/yaml, '
                                                'application/vnd.kubernetes.protobuf'))
            fault = self._take_fault(resource, verb)
            if fault is not None:
                if await self._apply_fault(req, resp, fault, resource, verb):
                    return
            match = make_matcher(resource, namespace, fsel,
                                 parse_label_selector(req.query.get('labelSelector', '')))
            if req.legacy_watch:
                name = None
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
                st = status_obj(503, 'ServiceUnavailable',
                                p.get('message', 'the server is currently unable to handle the request'),
                                {'retryAfterSeconds': ra})
                extra = [('Retry-After', str(ra))]
            elif code == 410:
                st = status_obj(410, 'Expired', p.get('message', EXPIRED_LIST))
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
    if 'rbac_manifests' in st:
        base = os.path.dirname(os.path.abspath(path))
        sim.set_rbac(rbac_from_manifests([os.path.join(base, m) for m in st['rbac_manifests']]))
    for tok in st.get('tokens', []):
        sim.add_token(tok['token'], tok['user'], tok.get('groups', []))
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
