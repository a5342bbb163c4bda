#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# apisim_wire.py — the API server simulator's wire vocabulary: Status objects, field and
# label selectors as kube-apiserver parses them, the watch-event conversion of the watch
# cache, and the loop-thread dispatch of the public methods. The facts and where they come
# from are listed in apiserver_sim.py's header.

import asyncio
import copy
import datetime
import json
import threading
import time

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
from apisim_pki import SERVICEACCOUNT_USER  # noqa: E402
# deploy/rbac.yaml's ClusterRole, bound to the node-service user and the service account.
DEFAULT_RBAC = [{'users': ['kgpu-cluster', SERVICEACCOUNT_USER], 'groups': [],
                 'verbs': ['get', 'list', 'watch'], 'resources': ['nodes']},
                {'users': ['kgpu-cluster', SERVICEACCOUNT_USER], 'groups': [],
                 'verbs': ['list', 'watch'], 'resources': ['pods']}]
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


EXPIRED_LIST = 'The resourceVersion for the provided list is too old.'     # etcd3 store expiredMessage
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
