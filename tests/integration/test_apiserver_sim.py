#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_apiserver_sim.py — the API server simulator's wire facts checked from outside with
# clients of its own (apisim_testlib.py): ALPN h2 / http/1.1 (and forced http/1.1), TLS
# 1.2 minimum, client certificates (CN user, O groups, foreign and expired ones refused
# with 401) and bearer tokens, anonymous requests, the exact 401 / 403 / 400 / 404 / 410
# / 422 / 504 Status bodies, RBAC from manifests with resourceNames, list and get
# shapes, hostile objects, field selectors, watch framing (newline-delimited JSON in
# HTTP/1.1 chunks), keep-alive, a client going away, ADDED / MODIFIED / DELETED on
# selector changes, bookmarks (periodic, 2 s before the deadline, initial-events-end,
# Go-encoded), timeoutSeconds, compaction (410 ERROR event, Exact lists, continue
# tokens), too-large resourceVersions, net/http's framing of large bodies, paging, the
# deprecated watch paths, Accept negotiation, watch option validation.

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from apisim_testlib import *  # noqa: E402,F401,F403


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
    sim.set_http1_only(True)
    try:
        s = connect(sim)
        check(s.selected_alpn_protocol() == 'http/1.1', 'set_http1_only: %r' % s.selected_alpn_protocol())
        s.close()
    finally:
        sim.set_http1_only(False)
    s = connect(sim)
    check(s.selected_alpn_protocol() == 'h2', 'h2 not back')
    s.close()
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
                              '"nodes" in API group "" at the cluster scope',
                              {'name': 'node-a', 'kind': 'nodes'}), body)
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
    check(st == 404 and body == status_body(404, 'NotFound', 'nodes "nope" not found',
                                            {'name': 'nope', 'kind': 'nodes'}),
          body)
    st, hs, body = cl.get_json('/api/v1/pods')
    check(body['kind'] == 'PodList' and len(body['items']) == 3, body)
    st, hs, body = cl.get_json('/api/v1/namespaces/team/pods')
    check([i['metadata']['name'] for i in body['items']] == ['p-other'], body)
    cl.close()


def t_hostile_objects(sim):
    # put_object stores what it is given; lists and watches carry it as it is.
    odd = {'metadata': {'name': 'p-odd', 'namespace': 'default', 'labels': ['not', 'a', 'map'],
                        'annotations': {'gas-ts': 12, 'gas-container-cards': None}},
           'spec': {'nodeName': 'node-a', 'containers': 'nope'}, 'status': []}
    cl = H2(sim)
    sid = cl.start('/api/v1/pods?watch=1&resourceVersion=%d&fieldSelector=spec.nodeName%%3Dnode-a&timeoutSeconds=5'
                   % sim.resource_version())
    cl.wait(sid, lambda s: s['headers'] is not None)
    sim.put_object('pods', odd)
    st = cl.wait(sid, lambda s: len(events_of(s['data'])) >= 1)
    e = events_of(st['data'])[0]
    check(e['type'] == 'ADDED' and e['object']['metadata']['labels'] == ['not', 'a', 'map']
          and e['object']['status'] == [] and e['object']['spec']['containers'] == 'nope', e)
    status, _h, data = cl.get('/api/v1/pods?fieldSelector=status.phase%3DPending')
    check(status == 200 and 'p-odd' not in data.decode(), 'a pod without a phase matched status.phase=Pending')
    cl.close()
    sim.delete_pod('default', 'p-odd')
    for bad in ({'metadata': 'x'}, {'metadata': {'name': 3, 'namespace': 'default'}}, [1]):
        try:
            sim.put_object('pods', bad)
            raise AssertionError('put_object took %r' % (bad,))
        except ValueError:
            pass


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
    st, hs = cl.request('/api/v1/nodes?watch=1&resourceVersion=%d&timeoutSeconds=2'
                        '&fieldSelector=metadata.name%%3Dnode-a'
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
    check([(e['type'], e['object']['metadata']['name']) for e in ev]
          == [('ADDED', 'p-plain'), ('MODIFIED', 'p-gas')], ev)
    sim.delete_pod('default', 'p-gas', grace_seconds=30)
    sim.delete_pod('default', 'p-gas')
    st = cl.wait(sid, lambda s: len(events_of(s['data'])) >= n0 + 5)
    e1, e = events_of(st['data'])[-2:]
    check(e1['type'] == 'MODIFIED' and e1['object']['metadata']['deletionGracePeriodSeconds'] == 30
          and e1['object']['metadata']['deletionTimestamp'].endswith('Z'), e1)
    check(e['type'] == 'DELETED' and e['object']['metadata']['name'] == 'p-gas', e)
    # A heartbeat: MODIFIED with the same labels and a new resourceVersion.
    before = sim.get_object('nodes', 'node-a')
    sid2 = cl.start('/api/v1/nodes?watch=1&resourceVersion=%d&timeoutSeconds=5' % sim.resource_version())
    cl.wait(sid2, lambda s: s['headers'] is not None)
    sim.touch_node('node-a')
    st2 = cl.wait(sid2, lambda s: len(events_of(s['data'])) >= 1)
    e = events_of(st2['data'])[0]
    check(e['type'] == 'MODIFIED' and e['object']['metadata']['labels'] == before['metadata']['labels']
          and int(e['object']['metadata']['resourceVersion']) > int(before['metadata']['resourceVersion']), e)
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
    check(st == 410 and body == status_body(410, 'Expired', 'The resourceVersion for the provided list is too old.'),
          body)
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
    st, _h, body = cl.get_json('/api/v1/pods?limit=2&resourceVersion=5&continue=' + p1['metadata']['continue'])
    check(st == 400 and body['message'] == 'specifying resource version is not allowed when using continue', body)
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


CHECKS = [t_alpn_and_tls, t_authn, t_authz, t_rbac_manifests, t_list_get, t_hostile_objects,
          t_field_selectors, t_watch_h1_framing_and_timeout, t_watch_h2_selector, t_bookmarks, t_compaction,
          t_framing_and_paging]


if __name__ == '__main__':
    os._exit(run(CHECKS))
