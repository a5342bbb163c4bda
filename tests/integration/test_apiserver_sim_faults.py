#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_apiserver_sim_faults.py — the API server simulator's faults and tools checked
# from outside with clients of its own (apisim_testlib.py): injected 429 (plain text and
# Status) / 500 / 401 / 403, oversized, garbage and truncated bodies, watch faults after K
# events (garbage line, oversized event, ERROR event), the live token table, slow headers
# and events, cut streams (close, mid-event, mid-chunk, reset, end) on HTTP/1.1 and
# HTTP/2, gzip over 128 KiB, down / up, graceful down with GOAWAY, the blackhole, process
# mode with its state file and control socket, certificate rotation, the service-account
# and kubeconfig writers.

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from apisim_testlib import *  # noqa: E402,F401,F403


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
    # Blackhole: TCP accepted, no TLS answer; up() serves again.
    sim.blackhole()
    raw = socket.create_connection(('127.0.0.1', sim.port), 2)
    raw.settimeout(1.0)
    try:
        tls_context(USER['cert'], USER['key']).wrap_socket(raw, server_hostname='localhost')
        raise AssertionError('a TLS handshake completed in the blackhole')
    except (socket.timeout, TimeoutError):
        pass
    finally:
        raw.close()
    sim.up()
    check(sim.wait_up(5), 'not up again after the blackhole')
    cl = H1(sim)
    st, _h, body = cl.get_json('/api/v1/nodes')
    check(st == 200 and len(body['items']) == 2, 'state lost over down/up')
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
    p = subprocess.Popen([sys.executable, os.path.join(HERE, 'apiserver_sim.py'), '--port', '0',
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
    check(base64.b64decode(y['clusters'][0]['cluster']['certificate-authority-data'])
          == open(PKI['ca'], 'rb').read(), y)
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


CHECKS = [t_faults, t_cuts, t_gzip, t_down_up, t_process_mode, t_kubeconfig]


if __name__ == '__main__':
    os._exit(run(CHECKS))
