#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# apisim_state.py — the API server simulator's state and control methods (a mixin of
# ApiServerSim): nodes and pods under one resourceVersion counter with an event log (for
# watches from a revision, Exact lists and compaction), faults, observation.

import asyncio
import copy
import datetime
import socket
import threading
import time
import uuid

from apisim_wire import CALL_TIMEOUT, CUT, Event, _key, _now, _on_loop

GRACE_SECONDS = 0.5


class SimState:
    # --------------------------------------------------------------- faults, public
    @_on_loop
    def down(self, graceful=False):
        """Stops listening and closes every connection. graceful=True: as a server that
        shuts down, open watches end cleanly, HTTP/2 connections get GOAWAY (NO_ERROR),
        and the connections close a moment later."""
        if not graceful:
            self._close_all()
            return True
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self.watchers):
            w.cut_mode = 'end'
            w.queue.put_nowait(CUT)
        conns = list(self.conns)

        async def close_later():
            end = time.monotonic() + GRACE_SECONDS
            while self.watchers and time.monotonic() < end:
                await asyncio.sleep(0.02)       # the watches write their clean end first
            for c in conns:
                c.goaway()
            await asyncio.sleep(GRACE_SECONDS)
            for c in conns:
                c.abort()
        asyncio.ensure_future(close_later())
        return True

    def up(self):
        """Listens again on the same port (returns once listening)."""
        if threading.get_ident() == self._loop_tid:
            if self._server is None:
                asyncio.ensure_future(self._up())
            return True
        if self._server is None:
            asyncio.run_coroutine_threadsafe(self._up(), self._loop).result(CALL_TIMEOUT)
        return True
    up.public = True

    async def _up(self):
        if self._blackhole is not None:
            self._blackhole.close()
            await self._blackhole.wait_closed()
            self._blackhole = None
        await self._listen()

    def set_http1_only(self, flag):
        """ALPN offers only http/1.1 (True) or h2 and http/1.1 (False) to new connections;
        open connections keep what they negotiated."""
        self.http1_only = bool(flag)

        async def relisten():
            if self._server is not None:
                self._server.close()
                self._server = None
                await self._listen()
        if threading.get_ident() == self._loop_tid:
            asyncio.ensure_future(relisten())
        else:
            asyncio.run_coroutine_threadsafe(relisten(), self._loop).result(CALL_TIMEOUT)
        return True
    set_http1_only.public = True

    def blackhole(self):
        """Down, and the port accepts TCP connections that never get a TLS answer (a
        hung server: the client's connect and handshake timeouts decide). up() ends it."""
        if threading.get_ident() == self._loop_tid:
            self._close_all()
            asyncio.ensure_future(self._start_blackhole())
            return True
        self.down()
        asyncio.run_coroutine_threadsafe(self._start_blackhole(), self._loop).result(CALL_TIMEOUT)
        return True
    blackhole.public = True

    async def _start_blackhole(self):
        held = self._blackhole_conns

        async def hold(reader, writer):
            held.add(writer)
            try:
                while await reader.read(4096):
                    pass                     # read and never answer
            except (ConnectionError, OSError):
                pass
            finally:
                held.discard(writer)
                writer.transport.abort()
        self._blackhole = await asyncio.start_server(hold, self.host, self.port, reuse_address=True)

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
        if kind not in ('status', 'oversized', 'garbage', 'truncated', 'slow', 'hang', 'error_event'):
            raise ValueError('unknown fault kind %r' % kind)
        if kind == 'garbage' and isinstance(params.get('body'), str):
            params['body'] = params['body'].encode()
        self._fault_seq += 1
        self.faults[self._fault_seq] = {'kind': kind, 'resource': resource, 'verb': verb,
                                        'count': count, 'params': params}
        return self._fault_seq

    @_on_loop
    def add_token(self, token, user, groups=()):
        """Adds (or replaces) a bearer token of the token table."""
        self.tokens[token] = (user, 'uid-' + user, list(groups))
        return True

    @_on_loop
    def remove_token(self, token):
        return self.tokens.pop(token, None) is not None

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

    @_on_loop
    def touch_node(self, name):
        """A status-only update (the Ready condition's heartbeat): MODIFIED, labels as they were."""
        prev = self._node(name)
        obj = copy.deepcopy(prev)
        for c in obj.get('status', {}).get('conditions', []):
            if isinstance(c, dict) and c.get('type') == 'Ready':
                c['lastHeartbeatTime'] = _now()
        return self._commit('nodes', 'MODIFIED', obj, prev)

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
    def delete_pod(self, namespace, name, grace_seconds=None):
        """grace_seconds=None: the object goes (DELETED). A number: a graceful deletion as
        the API server starts it for a pod bound to a node: MODIFIED with
        metadata.deletionTimestamp (now + grace) and deletionGracePeriodSeconds; the pod
        stays until delete_pod() again (the kubelet's final delete)."""
        prev = self._pod(namespace, name)
        if grace_seconds is None:
            return self._commit('pods', 'DELETED', copy.deepcopy(prev), prev)
        obj = copy.deepcopy(prev)
        when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=int(grace_seconds))
        obj['metadata']['deletionTimestamp'] = when.strftime('%Y-%m-%dT%H:%M:%SZ')
        obj['metadata']['deletionGracePeriodSeconds'] = int(grace_seconds)
        return self._commit('pods', 'MODIFIED', obj, prev)

    @_on_loop
    def put_object(self, resource, obj):
        """Stores obj as given: anything may be odd except metadata (a dict) and its name
        (and a pod's namespace), which key the object."""
        if resource not in self.objects:
            raise ValueError('unknown resource %r' % resource)
        if not isinstance(obj, dict) or not isinstance(obj.get('metadata'), dict):
            raise ValueError('put_object needs a dict with a metadata dict')
        md = obj['metadata']
        if not isinstance(md.get('name'), str) or (resource == 'pods' and not isinstance(md.get('namespace'), str)):
            raise ValueError('put_object needs metadata.name (and a pod\'s metadata.namespace) as strings')
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
