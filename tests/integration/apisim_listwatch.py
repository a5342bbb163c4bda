#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# apisim_listwatch.py — list and watch as kube-apiserver answers them (a mixin of
# ApiServerSim): resourceVersion / resourceVersionMatch, limit / continue, watch from a
# revision, initial events, bookmarks, 410 as an ERROR event, cuts. Facts: apiserver_sim.py.

import asyncio
import base64
import json
import random
import time

from apisim_http import H1Responder, H2Responder
from apisim_wire import (CONTINUE_EXPIRED, EXPIRED_LIST, CUT, KINDS, MIN_REQUEST_TIMEOUT, Event, HttpError, Watch,
                         _bad_request,
                         _dumps, _invalid, _invalid_list_options, _key, _keystr, _on_loop, status_obj, with_kind)


PEER_POLL = 0.25      # how often a waiting watch looks whether its client is still there


class ListWatch:
    async def _list(self, req, resp, resource, match, fault):
        rvs = req.query.get('resourceVersion', '')
        rvm = req.query.get('resourceVersionMatch', '')
        if rvm and not rvs:
            raise _invalid_list_options('resourceVersionMatch', rvm,
                                        'resourceVersionMatch is forbidden unless resourceVersion is provided')
        if rvm and rvm not in ('Exact', 'NotOlderThan'):
            raise _invalid([('resourceVersionMatch', 'NotSupported',
                             'Unsupported value: "%s": supported values: "Exact", "NotOlderThan", ""' % rvm)])
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
                    raise HttpError(504, status_obj(504, 'Timeout', 'Timeout: Too large resource version: %d, '
                                                    'current: %d' % (n, self.rv),
                                                    {'causes': [{'reason': 'ResourceVersionTooLarge',
                                                                 'message': 'Too large resource version'}],
                                                     'retryAfterSeconds': 1}), [('Retry-After', '1')])
                state = self.objects[resource]
                list_rv = self.rv
            if rvm == 'Exact':
                if n < self.compacted:
                    raise HttpError(410, status_obj(410, 'Expired', EXPIRED_LIST))
                state = self._state_at(resource, n)
                list_rv = n
        keys = sorted(state)
        start_after = None
        cont = req.query.get('continue', '')
        if cont:
            if rvm:
                raise _invalid([('resourceVersionMatch', 'Forbidden',
                                 'resourceVersionMatch is forbidden when continue is provided')])
            if rvs not in ('', '0'):
                raise _bad_request('specifying resource version is not allowed when using continue')
            try:
                tok = json.loads(base64.urlsafe_b64decode(cont + '=' * (-len(cont) % 4)))
                list_rv, start_after = int(tok['rv']), tok['start']
                if tok.get('v') != 'meta.k8s.io/v1':
                    raise ValueError
            except (ValueError, KeyError, TypeError):
                raise HttpError(400, status_obj(400, 'BadRequest', 'continue key is not valid: incorrect encoded '
                                                'start resourceVersion (version meta.k8s.io/v1)'))
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
            timeout = int(q['timeoutSeconds']) if 'timeoutSeconds' in q else 0
        except ValueError:
            raise _bad_request('timeoutSeconds: invalid value %r' % q.get('timeoutSeconds'))
        if timeout == 0:
            # No (or zero) timeoutSeconds: the minimum request timeout times [1, 2).
            timeout = (self.default_watch_timeout if self.default_watch_timeout is not None
                       else MIN_REQUEST_TIMEOUT * (1 + random.random()))
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
            resp.watch_peer()
            deadline = time.monotonic() + timeout
            next_bm = self._next_bookmark(time.monotonic(), deadline)
            kind = fault['kind'] if fault is not None else None
            params = fault['params'] if fault is not None else {}
            after = int(params.get('after', 0))
            garbage = kind == 'garbage'
            error_event = kind == 'error_event'
            pad = self._padding(fault)
            sent = 0
            while True:
                if sent >= after and garbage:
                    await resp.write(params.get('body', b'\x00{"type":"ADDED","object":{garbage') + b'\n')
                    garbage = False
                if sent >= after and error_event:
                    await resp.write((_dumps({'type': 'ERROR', 'object': self._error_event_status(params, n)})
                                      + '\n').encode())
                    await resp.end()
                    return
                if pending:
                    item = pending.pop(0)
                else:
                    now = time.monotonic()
                    if now >= deadline:
                        break
                    if resp.gone():
                        return          # the client went away: the watch ends (no write)
                    wait = min(deadline - now, PEER_POLL)
                    if bookmarks and next_bm is not None:
                        wait = min(wait, max(0.0, next_bm - now))
                    try:
                        item = await asyncio.wait_for(w.queue.get(), wait)
                    except asyncio.TimeoutError:
                        if bookmarks and next_bm is not None and time.monotonic() >= next_bm:
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
                    next_bm = self._next_bookmark(time.monotonic(), deadline)
                else:
                    if pad is not None and sent >= after:
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
                await resp.write(data)
                sent += 1
            await resp.end()
        finally:
            await resp.stop_watch_peer()
            self.watchers.discard(w)

    def _next_bookmark(self, now, deadline):
        """cacheWatcher.nextBookmarkTime: every bookmark interval, and 2 s before the
        watch's deadline; none once that moment has passed."""
        t = min(now + self.bookmark_interval, deadline - 2.0)
        return None if t < now else t

    def _error_event_status(self, params, n):
        code = int(params.get('code', 410))
        if code == 410:
            return status_obj(410, 'Expired', params.get('message', 'too old resource version: %s (%d)'
                                                          % (n if n is not None else 0, self.compacted)))
        if code == 500:
            m = params.get('message', 'simulated failure')
            return status_obj(500, 'InternalError', 'Internal error occurred: ' + m, {'causes': [{'message': m}]})
        return status_obj(code, params.get('reason', 'InternalError'),
                          params.get('message', 'simulated error %d' % code))

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
