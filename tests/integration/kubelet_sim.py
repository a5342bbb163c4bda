#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# kubelet_sim.py — a kubelet simulator on python3-grpcio (an independent gRPC stack).
#
# Contract: KubeletSim serves /v1beta1.Registration on <dir>/kubelet.sock and
# /v1.PodResourcesLister on a socket of its own, records every RegisterRequest with a
# time.monotonic() timestamp, and, like the kubelet, connects to each registered plugin
# (<dir>/<endpoint>), calls GetDevicePluginOptions and keeps a ListAndWatch stream open in
# a thread (every update kept with its receive time). PluginClient offers the unary calls.
# restart() does what the kubelet does on restart: stop serving, delete every socket in
# the directory (and nothing else), recreate kubelet.sock and wait for registrations.
#
# The simulator presents itself as the real kubelet does (facts from the upstream
# source): its directories are made with MkdirAll(dir, 0750) when missing (owner: the
# caller, root on a node), every socket in the device-plugins directory is removed when
# it starts, and its sockets are made by a plain listen under the caller's umask (the
# kubelet runs with systemd's default UMask=0022: srwxr-xr-x, which only root can
# connect to). Nothing here makes them friendlier than that.
# Python modules are generated at run time from daemons/grpc/proto/*.proto with
# grpc_tools.protoc into a cache directory; nothing here shares code with kgpu.
#
# Library use: see harness.py and test_*.py. CLI (for the demo and for poking a node):
#   kubelet_sim.py serve --dir DIR [--pod-resources SOCK] [--events FILE] [--pods FILE]
#                                                            act as the kubelet
#   kubelet_sim.py options|devices --dir DIR --resource R       query a plugin socket
#   kubelet_sim.py preferred --dir DIR --resource R --size N ID...
#   kubelet_sim.py allocate|prestart --dir DIR --resource R ID...

import argparse
import concurrent.futures
import contextlib
import hashlib
import importlib
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time

import grpc

_HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SOURCE_ROOT = os.path.normpath(os.path.join(_HERE, '..', '..'))

_proto_lock = threading.Lock()
_protos = None


class Protos:
    """The generated message and stub modules: dp (deviceplugin), pr (podresources)."""

    def __init__(self, dp, dp_grpc, pr, pr_grpc):
        self.dp = dp
        self.dp_grpc = dp_grpc
        self.pr = pr
        self.pr_grpc = pr_grpc


def _proto_dir():
    src = os.environ.get('KGPU_SOURCE_ROOT', DEFAULT_SOURCE_ROOT)
    return os.environ.get('KGPU_PROTO_DIR', os.path.join(src, 'daemons', 'grpc', 'proto'))


def _cache_root():
    build = os.environ.get('KGPU_BUILD_ROOT')
    if build and os.path.isdir(build) and os.access(build, os.W_OK):
        return os.path.join(build, 'tests', 'integration', 'proto-py')
    return os.path.join(tempfile.gettempdir(), 'kgpu-proto-py-%d' % os.getuid())


def load_protos():
    """Generates (once, cached by content hash) and imports the python modules."""
    global _protos
    with _proto_lock:
        if _protos:
            return _protos
        pdir = _proto_dir()
        files = sorted(f for f in os.listdir(pdir) if f.endswith('.proto'))
        if not files:
            raise RuntimeError('no .proto files in %s' % pdir)
        h = hashlib.sha256()
        for f in files:
            h.update(f.encode() + b'\0')
            with open(os.path.join(pdir, f), 'rb') as fp:
                h.update(fp.read())
        out = os.path.join(_cache_root(), h.hexdigest()[:16])
        if not os.path.isdir(out):
            os.makedirs(os.path.dirname(out), exist_ok=True)
            tmp = tempfile.mkdtemp(prefix='gen-', dir=os.path.dirname(out))
            try:
                from grpc_tools import protoc
                import grpc_tools
                wkt = os.path.join(os.path.dirname(grpc_tools.__file__), '_proto')
                args = ['protoc', '-I' + pdir, '-I' + wkt,
                        '--python_out=' + tmp, '--grpc_python_out=' + tmp] + files
                if protoc.main(args) != 0:
                    raise RuntimeError('grpc_tools.protoc failed on %s' % pdir)
                try:
                    os.rename(tmp, out)
                except OSError:
                    pass  # another process generated the same content first
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        if out not in sys.path:
            sys.path.insert(0, out)
        found = {}
        for f in sorted(os.listdir(out)):
            if not f.endswith('_pb2_grpc.py'):
                continue
            g = importlib.import_module(f[:-3])
            m = importlib.import_module(f[:-len('_grpc.py')])
            if hasattr(g, 'DevicePluginStub'):
                found['dp'] = (m, g)
            if hasattr(g, 'PodResourcesListerStub'):
                found['pr'] = (m, g)
        if 'dp' not in found or 'pr' not in found:
            raise RuntimeError('generated modules in %s lack DevicePlugin or PodResourcesLister' % out)
        _protos = Protos(found['dp'][0], found['dp'][1], found['pr'][0], found['pr'][1])
        return _protos


def socket_name_for(resource):
    """The socket file name kgpu-grpcd uses for a resource."""
    return 'kgpu-' + resource.replace('/', '-') + '.sock'


@contextlib.contextmanager
def _kubelet_umask(mask):
    """The umask the kubelet runs under (systemd's default UMask=0022) while it makes a
    socket; never more permissive than that."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def make_kubelet_dir(path, umask=0o022):
    """os.MkdirAll(path, 0750) as the kubelet does it: missing parents too, each 0750
    under the kubelet's umask; an existing directory is left as it is."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path.rstrip('/'))
    if parent and parent != path:
        make_kubelet_dir(parent, umask)
    with _kubelet_umask(umask):
        try:
            os.mkdir(path, 0o750)
        except FileExistsError:
            pass


class Registration:
    def __init__(self, t, request):
        self.t = t
        self.version = request.version
        self.endpoint = request.endpoint
        self.resource_name = request.resource_name
        self.pre_start_required = request.options.pre_start_required
        self.get_preferred_allocation_available = request.options.get_preferred_allocation_available

    def __repr__(self):
        return ('Registration(%s endpoint=%s version=%s pre_start_required=%s '
                'get_preferred_allocation_available=%s)' % (
                    self.resource_name, self.endpoint, self.version,
                    self.pre_start_required, self.get_preferred_allocation_available))


def _device_to_dict(d):
    return {'id': d.ID, 'health': d.health,
            'numa': [n.ID for n in d.topology.nodes] if d.HasField('topology') else []}


def _container_response_to_dict(c):
    return {
        'envs': dict(c.envs),
        'mounts': [{'container_path': m.container_path, 'host_path': m.host_path,
                    'read_only': m.read_only} for m in c.mounts],
        'devices': [{'container_path': d.container_path, 'host_path': d.host_path,
                     'permissions': d.permissions} for d in c.devices],
        'annotations': dict(c.annotations),
        'cdi_devices': [x.name for x in c.cdi_devices],
    }


class PluginClient:
    """A client of one device plugin socket, as the kubelet's endpoint manager is."""

    def __init__(self, path, resource=None, protos=None):
        self.p = protos or load_protos()
        self.path = path
        self.resource = resource
        self.channel = grpc.insecure_channel('unix:' + path)
        self.stub = self.p.dp_grpc.DevicePluginStub(self.channel)
        self.cond = threading.Condition()
        self.updates = []          # [(monotonic time, [device dict])]
        self.watch_error = None    # grpc.StatusCode when the stream ended with an error
        self.watch_ended = False
        self._watch_call = None
        self._watch_thread = None
        self.options = None
        self.registration = None   # set by KubeletSim for the client it made

    # --- unary calls -------------------------------------------------------------
    def get_options(self, timeout=5):
        o = self.stub.GetDevicePluginOptions(self.p.dp.Empty(), timeout=timeout)
        self.options = {'pre_start_required': o.pre_start_required,
                        'get_preferred_allocation_available': o.get_preferred_allocation_available}
        return self.options

    def get_preferred_allocation(self, available, must_include=(), size=1, timeout=5):
        """One container request; returns the preferred id list."""
        return self.get_preferred_allocation_multi([(available, must_include, size)], timeout)[0]

    def get_preferred_allocation_multi(self, requests, timeout=5):
        req = self.p.dp.PreferredAllocationRequest()
        for avail, must, size in requests:
            c = req.container_requests.add()
            c.available_deviceIDs.extend(avail)
            c.must_include_deviceIDs.extend(must)
            c.allocation_size = size
        resp = self.stub.GetPreferredAllocation(req, timeout=timeout)
        return [list(c.deviceIDs) for c in resp.container_responses]

    def allocate(self, ids, timeout=5):
        """One container with these ids; returns its response as a dict."""
        return self.allocate_multi([ids], timeout)[0]

    def allocate_multi(self, containers, timeout=5):
        req = self.p.dp.AllocateRequest()
        for ids in containers:
            req.container_requests.add().devices_ids.extend(ids)
        resp = self.stub.Allocate(req, timeout=timeout)
        return [_container_response_to_dict(c) for c in resp.container_responses]

    def pre_start_container(self, ids, timeout=5):
        req = self.p.dp.PreStartContainerRequest()
        req.devices_ids.extend(ids)
        self.stub.PreStartContainer(req, timeout=timeout)
        return True

    # --- ListAndWatch --------------------------------------------------------------
    def start_watch(self):
        self._watch_call = self.stub.ListAndWatch(self.p.dp.Empty())
        self._watch_thread = threading.Thread(target=self._watch, daemon=True,
                                              name='law-%s' % (self.resource or self.path))
        self._watch_thread.start()

    def _watch(self):
        try:
            for resp in self._watch_call:
                t = time.monotonic()
                devs = [_device_to_dict(d) for d in resp.devices]
                with self.cond:
                    self.updates.append((t, devs))
                    self.cond.notify_all()
        except grpc.RpcError as e:
            with self.cond:
                self.watch_error = e.code()
        finally:
            with self.cond:
                self.watch_ended = True
                self.cond.notify_all()

    def devices(self):
        with self.cond:
            return self.updates[-1][1] if self.updates else None

    def wait_update(self, predicate=None, after=None, timeout=10):
        """Waits for an update received after monotonic time `after` (any, if None) whose
        device list satisfies predicate; returns (t, devices) or raises TimeoutError."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for t, devs in self.updates:
                    if (after is None or t > after) and (predicate is None or predicate(devs)):
                        return t, devs
                left = deadline - time.monotonic()
                if left <= 0 or self.watch_ended:
                    raise TimeoutError('no matching ListAndWatch update from %s (ended=%s, error=%s, last=%r)' % (
                        self.resource or self.path, self.watch_ended, self.watch_error,
                        self.updates[-1][1] if self.updates else None))
                self.cond.wait(left)

    def close(self):
        if self._watch_call is not None:
            self._watch_call.cancel()
        self.channel.close()
        if self._watch_thread is not None:
            self._watch_thread.join(2)


class KubeletSim:
    def __init__(self, plugin_dir, pod_resources_socket=None, protos=None, verbose=False, t0=None,
                 umask=0o022):
        self.p = protos or load_protos()
        self.umask = umask
        self.t0 = time.monotonic() if t0 is None else t0  # origin of logged times
        self.dir = plugin_dir
        self.kubelet_socket = os.path.join(plugin_dir, 'kubelet.sock')
        self.pod_resources_socket = pod_resources_socket
        self.verbose = verbose
        self.lock = threading.Condition()
        self.registrations = []    # [Registration], in arrival order
        self.plugins = {}          # resource -> PluginClient (the latest registration)
        self.pods = []             # what PodResourcesLister/List returns (message objects)
        self.list_calls = 0
        self.created_at = None     # monotonic time kubelet.sock was last (re)created
        self.generation = 0        # bumped by restart(); stale plugin connections are dropped
        self._reg_seq = 0
        self._reg_server = None
        self._pr_server = None
        self.connect_errors = []
        self.reject_next = 0       # answer the next N Register calls with an error
        self.rejected = []         # [Registration] answered with an error

    def log(self, msg):
        if self.verbose:
            print('[%.6f] kubelet-sim: %s' % (time.monotonic() - self.t0, msg), flush=True)

    # --- servers -------------------------------------------------------------------
    def start(self):
        # What the kubelet does at start: its directories, then every plugin socket
        # removed (CleanupPluginDirectory), then it listens.
        make_kubelet_dir(self.dir, self.umask)
        self.delete_sockets()
        self._start_registration()
        if self.pod_resources_socket:
            self._start_pod_resources()
        return self

    def _start_registration(self):
        sim = self

        class RegistrationServicer(self.p.dp_grpc.RegistrationServicer):
            def Register(self, request, context):
                return sim._on_register(request, context)

        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        self.p.dp_grpc.add_RegistrationServicer_to_server(RegistrationServicer(), server)
        # A plain listen under the kubelet's umask, as its net.Listen does.
        self.created_at = time.monotonic()
        with _kubelet_umask(self.umask):
            if server.add_insecure_port('unix:' + self.kubelet_socket) == 0:
                raise RuntimeError('cannot listen on %s' % self.kubelet_socket)
            server.start()
        self._reg_server = server
        self.log('serving Registration on %s' % self.kubelet_socket)

    def _start_pod_resources(self):
        sim = self

        class Lister(self.p.pr_grpc.PodResourcesListerServicer):
            def List(self, request, context):
                with sim.lock:
                    sim.list_calls += 1
                    pods = list(sim.pods)
                resp = sim.p.pr.ListPodResourcesResponse()
                resp.pod_resources.extend(pods)
                return resp

            def GetAllocatableResources(self, request, context):
                resp = sim.p.pr.AllocatableResourcesResponse()
                for res, cl in sim.plugin_items():
                    for d in cl.devices() or []:
                        cd = resp.devices.add()
                        cd.resource_name = res
                        cd.device_ids.append(d['id'])
                return resp

            def Get(self, request, context):
                with sim.lock:
                    for p in sim.pods:
                        if p.name == request.pod_name and p.namespace == request.pod_namespace:
                            return sim.p.pr.GetPodResourcesResponse(pod_resources=p)
                context.abort(grpc.StatusCode.NOT_FOUND, 'pod not found')

        # The kubelet: unlink, MkdirAll(0750), listen (same umask as its other socket).
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.pod_resources_socket)
        make_kubelet_dir(os.path.dirname(self.pod_resources_socket), self.umask)
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
        self.p.pr_grpc.add_PodResourcesListerServicer_to_server(Lister(), server)
        with _kubelet_umask(self.umask):
            if server.add_insecure_port('unix:' + self.pod_resources_socket) == 0:
                raise RuntimeError('cannot listen on %s' % self.pod_resources_socket)
            server.start()
        self._pr_server = server

    def set_pods(self, pods):
        """pods: [(name, namespace, [(container, [(resource, [ids])])])] or messages."""
        msgs = []
        for p in pods:
            if not isinstance(p, tuple):
                msgs.append(p)
                continue
            name, ns, containers = p
            m = self.p.pr.PodResources(name=name, namespace=ns)
            for cname, devs in containers:
                c = m.containers.add(name=cname)
                for res, ids in devs:
                    c.devices.add(resource_name=res, device_ids=ids)
            msgs.append(m)
        with self.lock:
            self.pods = msgs

    def _on_register(self, request, context):
        reg = Registration(time.monotonic(), request)
        self.log('Register %r' % reg)
        if request.version != 'v1beta1':
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          'unsupported version %r' % request.version)
        with self.lock:
            reject = self.reject_next > 0
            if reject:
                self.reject_next -= 1
                self.rejected.append(reg)
                self.lock.notify_all()
        if reject:
            # what the kubelet answers when, e.g., the plugin's socket check fails
            context.abort(grpc.StatusCode.UNKNOWN, 'simulated registration failure')
        with self.lock:
            self.registrations.append(reg)
            self._reg_seq += 1
            reg.seq = self._reg_seq
            reg.generation = self.generation
            self.lock.notify_all()
        # The kubelet dials the plugin after answering, not from inside Register.
        threading.Thread(target=self._connect_plugin, args=(reg,), daemon=True).start()
        return self.p.dp.Empty()

    def _connect_plugin(self, reg):
        path = os.path.join(self.dir, reg.endpoint)
        cl = PluginClient(path, reg.resource_name, self.p)
        try:
            cl.get_options()
            cl.start_watch()
        except grpc.RpcError as e:
            self.log('connecting to %s failed: %s' % (path, e.code()))
            with self.lock:
                if reg.generation == self.generation:
                    self.connect_errors.append((reg.resource_name, e.code()))
            cl.close()
            return
        cl.registration = reg
        with self.lock:
            old = self.plugins.get(reg.resource_name)
            if reg.generation != self.generation or (old is not None and old.registration.seq > reg.seq):
                # a kubelet restart or a newer registration overtook this one
                old, cl = cl, None
            else:
                self.plugins[reg.resource_name] = cl
                self.lock.notify_all()
        if old is not None:
            old.close()

    def _stop_servers(self):
        for s in (self._reg_server, self._pr_server):
            if s is not None:
                s.stop(0).wait(5)
        self._reg_server = self._pr_server = None

    def stop(self):
        self._stop_servers()
        with self.lock:
            clients = list(self.plugins.values())
            self.plugins = {}
        for c in clients:
            c.close()

    # --- queries -------------------------------------------------------------------
    def plugin_items(self):
        with self.lock:
            return list(self.plugins.items())

    def plugin(self, resource, timeout=10):
        """The client of a registered resource (waits until connected)."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while resource not in self.plugins:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError('resource %s did not register (registrations: %r)' % (
                        resource, self.registrations))
                self.lock.wait(left)
            return self.plugins[resource]

    def registrations_since(self, t):
        with self.lock:
            return [r for r in self.registrations if r.t >= t]

    def wait_registrations(self, resources, since=0.0, timeout=10):
        """Waits until each resource registered at or after `since`; returns
        {resource: first Registration since then}."""
        deadline = time.monotonic() + timeout
        want = set(resources)
        with self.lock:
            while True:
                got = {}
                for r in self.registrations:
                    if r.t >= since and r.resource_name in want and r.resource_name not in got:
                        got[r.resource_name] = r
                if set(got) == want:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError('registrations missing for %s (have %r)' % (
                        sorted(want - set(got)), self.registrations[-6:]))
                self.lock.wait(left)

    def wait_connected(self, resources, timeout=10):
        """Waits until each resource has a connected client that received at least one
        ListAndWatch update; returns {resource: PluginClient}."""
        deadline = time.monotonic() + timeout
        out = {}
        for res in resources:
            cl = self.plugin(res, max(0.01, deadline - time.monotonic()))
            cl.wait_update(timeout=max(0.01, deadline - time.monotonic()))
            out[res] = cl
        return out

    # --- restart -------------------------------------------------------------------
    def delete_sockets(self):
        """Deletes every socket in the plugin directory, nothing else; returns names."""
        gone = []
        for e in os.scandir(self.dir):
            try:
                if stat.S_ISSOCK(os.lstat(e.path).st_mode):
                    os.unlink(e.path)
                    gone.append(e.name)
            except FileNotFoundError:
                pass
        return gone

    def restart(self, resources=None, timeout=10):
        """Simulates a kubelet restart; returns {resource: seconds from kubelet.sock
        recreated to Register received} for the resources that had registered."""
        with self.lock:
            if resources is None:
                resources = sorted({r.resource_name for r in self.registrations})
            clients = list(self.plugins.values())
            self.plugins = {}
            self.generation += 1
        self._stop_servers()
        for c in clients:
            c.close()
        self.delete_sockets()
        self._start_registration()
        if self.pod_resources_socket:
            self._start_pod_resources()
        t0 = self.created_at
        regs = self.wait_registrations(resources, since=t0, timeout=timeout)
        return {r: reg.t - t0 for r, reg in regs.items()}


# --- CLI ---------------------------------------------------------------------------------
def _fmt_devices(devs):
    return ', '.join('%s %s numa=%s' % (d['id'], d['health'], d['numa'] or '-') for d in devs)


def format_container_response(c, indent='    '):
    lines = []
    for d in c['devices']:
        lines.append('%sdevice %s -> %s (%s)' % (indent, d['host_path'], d['container_path'], d['permissions']))
    for m in c['mounts']:
        lines.append('%smount %s -> %s%s' % (indent, m['host_path'], m['container_path'],
                                             ' (ro)' if m['read_only'] else ''))
    for k, v in sorted(c['envs'].items()):
        lines.append('%senv %s=%s' % (indent, k, v))
    for k, v in sorted(c['annotations'].items()):
        lines.append('%sannotation %s=%s' % (indent, k, v))
    for n in c['cdi_devices']:
        lines.append('%scdi %s' % (indent, n))
    return '\n'.join(lines) or indent + '(empty)'


def _cli_serve(args):
    sim = KubeletSim(args.dir, args.pod_resources, verbose=True).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    seen = {}
    n_regs = 0

    def event(**kw):
        # One JSON line per event for whoever watches this simulator from outside
        # (the package test runs it as a systemd unit).
        if args.events:
            kw.update(pid=os.getpid(), time=time.time())
            with open(args.events, 'a') as f:
                f.write(json.dumps(kw) + '\n')

    def load_pods():
        # [[name, namespace, [[container, [[resource, [ids]]]]]]], read again when it changes
        try:
            st = os.stat(args.pods)
        except (TypeError, FileNotFoundError):
            return None
        if load_pods.mtime == st.st_mtime_ns:
            return None
        load_pods.mtime = st.st_mtime_ns
        with open(args.pods) as f:
            return [(n, ns, [(c, [(r, list(ids)) for r, ids in devs]) for c, devs in cs])
                    for n, ns, cs in json.load(f)]
    load_pods.mtime = None

    event(what='started', dir=args.dir)
    lists = 0
    try:
        while not stop.wait(0.1):
            pods = load_pods()
            if pods is not None:
                sim.set_pods(pods)
            with sim.lock:
                n = sim.list_calls
            if n != lists:
                lists = n
                event(what='list', calls=n)
            with sim.lock:
                regs = sim.registrations[n_regs:]
            for r in regs:
                n_regs += 1
                print('kubelet-sim: Register %s endpoint %s' % (r.resource_name, r.endpoint), flush=True)
                event(what='register', resource=r.resource_name, endpoint=r.endpoint)
            for res, cl in sim.plugin_items():
                n = len(cl.updates)
                if seen.get(res) != (id(cl), n) and n:
                    seen[res] = (id(cl), n)
                    print('kubelet-sim: %s devices: %s' % (res, _fmt_devices(cl.devices())), flush=True)
                    event(what='devices', resource=res, devices=cl.devices())
    finally:
        sim.stop()
    return 0


def _cli_client(args):
    path = os.path.join(args.dir, socket_name_for(args.resource))
    cl = PluginClient(path, args.resource)
    try:
        if args.cmd == 'options':
            print(json.dumps(cl.get_options()))
        elif args.cmd == 'devices':
            cl.start_watch()
            _, devs = cl.wait_update(timeout=5)
            print(json.dumps(devs, indent=1) if args.json else _fmt_devices(devs))
        elif args.cmd == 'preferred':
            print(json.dumps(cl.get_preferred_allocation(args.ids, args.must or [], args.size)))
        elif args.cmd == 'allocate':
            c = cl.allocate(args.ids)
            print(json.dumps(c, indent=1) if args.json else format_container_response(c))
        elif args.cmd == 'prestart':
            cl.pre_start_container(args.ids)
            print('ok')
    except grpc.RpcError as e:
        print('error: %s: %s' % (e.code().name, e.details()), file=sys.stderr)
        return 1
    finally:
        cl.close()
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description='kubelet simulator (python3-grpcio)')
    sub = ap.add_subparsers(dest='cmd', required=True)
    s = sub.add_parser('serve', help='serve Registration/PodResources and watch plugins')
    s.add_argument('--dir', required=True, help='device-plugins directory')
    s.add_argument('--pod-resources', help='PodResources socket path')
    s.add_argument('--events', help='append one JSON line per event (started, register, devices, list) here')
    s.add_argument('--pods', help='JSON file of the pods PodResources List reports (read again when changed)')
    for name in ('options', 'devices', 'preferred', 'allocate', 'prestart'):
        c = sub.add_parser(name)
        c.add_argument('--dir', required=True, help='device-plugins directory')
        c.add_argument('--resource', required=True, help='e.g. gpu.intel.com/i915')
        c.add_argument('--json', action='store_true')
        if name in ('preferred', 'allocate', 'prestart'):
            c.add_argument('ids', nargs='*')
        if name == 'preferred':
            c.add_argument('--size', type=int, default=1)
            c.add_argument('--must', action='append')
    args = ap.parse_args(argv)
    if args.cmd == 'serve':
        return _cli_serve(args)
    return _cli_client(args)


if __name__ == '__main__':
    sys.exit(main())
