#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# apisim_http.py — the API server simulator's transports on asyncio: HTTP/1.1 parsed by
# hand (keep-alive, chunked responses) and HTTP/2 through python3-h2 (flow control, stream
# resets). A connection hands each request to sim._handle(req, resp); a Responder writes
# the answer (start/write/end, abort = close the connection, reset = RST_STREAM).

import asyncio
import ssl
import time
import urllib.parse

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from apisim_wire import MAX_REQUEST_BODY, MAX_REQUEST_HEADER, WRITE_TIMEOUT


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
        self.legacy_watch = False


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

    def watch_peer(self):
        """From now on, notice when the client goes away (a watch waits for events)."""

    async def stop_watch_peer(self):
        pass

    def gone(self):
        """The client closed the connection or reset the stream."""
        return self.conn.closed


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
        try:
            me = asyncio.current_task()
        except RuntimeError:
            me = None
        for t in list(self.tasks):
            if t is not me:
                t.cancel()

    def goaway(self):
        """A server going down: HTTP/2 sends GOAWAY; HTTP/1.1 has nothing to say."""

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
        return (cn, groups, sslobj.getpeercert(binary_form=True))


class H1Responder(Responder):
    def __init__(self, conn, head_only=False):
        self.conn = conn
        self.started = False
        self.ended = False
        self.peer_closed = False

    def watch_peer(self):
        # As Go's server does for a handler still running: read on in the background and
        # cancel the request when the client closes.
        async def read_until_eof():
            try:
                while True:
                    d = await self.conn.reader.read(4096)
                    if not d:
                        break
            except (ConnectionError, OSError, ssl.SSLError):
                pass
            self.peer_closed = True
        t = asyncio.ensure_future(read_until_eof())
        self.conn.tasks.add(t)
        t.add_done_callback(self.conn.tasks.discard)
        self.peer_task = t

    async def stop_watch_peer(self):
        t = getattr(self, 'peer_task', None)
        if t is not None and not t.done():
            t.cancel()
            await asyncio.wait([t], timeout=1)      # the reader is free for the next request

    def gone(self):
        return self.conn.closed or self.peer_closed

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
        # Stop the background reader before the last chunk: the client may send its next
        # request as soon as it has that chunk.
        await self.stop_watch_peer()
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
                self.writer.write(b'HTTP/1.1 413 Request Entity Too Large\r\n'
                                  b'Content-Length: 0\r\nConnection: close\r\n\r\n')
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
            n = min(window, len(data))
            if n <= 0:
                ev = c.window_event
                ev.clear()
                await asyncio.wait_for(ev.wait(), WRITE_TIMEOUT)
                continue
            step = c.h2.max_outbound_frame_size
            for i in range(0, n, step):
                c.h2.send_data(self.sid, data[i:min(i + step, n)])
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

    def gone(self):
        return self.conn.closed or self.sid in self.conn.reset_streams

    async def reset(self):
        try:
            self.conn.h2.reset_stream(self.sid, h2.errors.ErrorCodes.INTERNAL_ERROR)
            await self.conn.flush()
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            pass


class H2Conn(Conn):
    proto = 'h2'

    def goaway(self):
        if self.closed or not hasattr(self, 'h2'):
            return
        try:
            self.h2.close_connection(h2.errors.ErrorCodes.NO_ERROR)
            self.writer.write(self.h2.data_to_send())
        except (h2.exceptions.ProtocolError, ConnectionError, OSError):
            pass

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
