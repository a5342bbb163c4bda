#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# h2raw.py — hand-made HTTP/2 for the hostile-input tests: frames built byte by byte,
# request headers as HPACK literals without Huffman coding or indexing.
#
# Contract: H2Conn(path) connects to a unix socket and sends the client preface and a
# SETTINGS frame (empty unless settings are given); request() sends one HEADERS (+ optional DATA) frame on a new stream;
# read_result() reads frames until the stream ends, the peer resets it, sends GOAWAY or
# closes, and returns what happened (:status, grpc-status, grpc-message, GOAWAY, closed).
# Response header blocks are decoded with python3-hpack (Debian), a decoder of its own,
# because the server is free to use Huffman coding and the dynamic table.

import socket
import struct
import time

PREFACE = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20


SETTINGS_INITIAL_WINDOW_SIZE = 0x4


def window_update(stream, increment):
    return frame(WINDOW_UPDATE, 0, stream, struct.pack('>I', increment & 0x7fffffff))


def grpc_messages(data):
    """Splits a DATA payload stream into gRPC messages; returns (messages, rest)."""
    out = []
    while len(data) >= 5:
        n = struct.unpack('>I', data[1:5])[0]
        if len(data) < 5 + n:
            break
        out.append(data[5:5 + n])
        data = data[5 + n:]
    return out, data


def frame(ftype, flags, stream, payload=b''):
    n = len(payload)
    return struct.pack('>BHBBI', n >> 16, n & 0xffff, ftype, flags, stream & 0x7fffffff) + payload


def hpack_int(value, prefix_bits, first_byte_flags=0):
    """RFC 7541 5.1 integer with an N-bit prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte_flags | value])
    out = [first_byte_flags | limit]
    value -= limit
    while value >= 128:
        out.append((value & 0x7f) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_string(s):
    b = s.encode() if isinstance(s, str) else s
    return hpack_int(len(b), 7, 0x00) + b  # H bit 0: no Huffman


def hpack_literal(name, value):
    """Literal Header Field without Indexing, new name (RFC 7541 6.2.2, 0000 0000)."""
    return b'\x00' + hpack_string(name) + hpack_string(value)


def grpc_headers(path, content_type='application/grpc', authority='localhost'):
    return [(':method', 'POST'), (':scheme', 'http'), (':path', path),
            (':authority', authority), ('content-type', content_type), ('te', 'trailers')]


def grpc_message(payload, compressed=False, declared_len=None):
    n = len(payload) if declared_len is None else declared_len
    return struct.pack('>BI', 1 if compressed else 0, n) + payload


class Result:
    def __init__(self):
        self.headers = []       # every decoded (name, value) of the stream, in order
        self.status = None      # :status
        self.grpc_status = None
        self.grpc_message = None
        self.data = b''
        self.rst = None         # RST_STREAM error code
        self.goaway = None      # GOAWAY error code
        self.closed = False     # the peer closed the connection
        self.ended = False      # END_STREAM seen

    def __repr__(self):
        return ('Result(status=%s grpc_status=%s grpc_message=%r rst=%s goaway=%s closed=%s ended=%s)' % (
            self.status, self.grpc_status, self.grpc_message, self.rst, self.goaway, self.closed, self.ended))


class H2Conn:
    def __init__(self, path, timeout=5, preface=True, settings=()):
        import hpack  # python3-hpack
        self.decoder = hpack.Decoder()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b''
        self.next_stream = 1
        if preface:
            payload = b''.join(struct.pack('>HI', k, v) for k, v in settings)
            self.send(PREFACE + frame(SETTINGS, 0, 0, payload))

    def send(self, b):
        self.sock.sendall(b)

    def close(self):
        self.sock.close()

    def request(self, path, body=None, end_stream=True, content_type='application/grpc', headers=None):
        """Sends HEADERS (+ DATA when body is not None); returns the stream id."""
        sid = self.next_stream
        self.next_stream += 2
        block = b''.join(hpack_literal(n, v) for n, v in
                         (headers or grpc_headers(path, content_type)))
        if body is None:
            self.send(frame(HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), sid, block))
        else:
            self.send(frame(HEADERS, END_HEADERS, sid, block) +
                      frame(DATA, END_STREAM if end_stream else 0, sid, body))
        return sid

    def _recv_exact(self, n, deadline):
        while len(self.buf) < n:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b''
            if not chunk:
                raise EOFError
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_frame(self, deadline):
        h = self._recv_exact(9, deadline)
        n = (h[0] << 16) | (h[1] << 8) | h[2]
        ftype, flags = h[3], h[4]
        sid = struct.unpack('>I', h[5:9])[0] & 0x7fffffff
        payload = self._recv_exact(n, deadline) if n else b''
        return ftype, flags, sid, payload

    def read_result(self, sid, timeout=5):
        """Reads until stream sid ends (or reset/GOAWAY/close/timeout)."""
        res = Result()
        deadline = time.monotonic() + timeout
        block = b''
        hflags = 0
        while time.monotonic() < deadline:
            try:
                ftype, flags, fsid, payload = self.read_frame(deadline)
            except EOFError:
                res.closed = True
                return res
            except socket.timeout:
                return res
            if ftype == SETTINGS and not flags & ACK:
                self.send(frame(SETTINGS, ACK, 0))
            elif ftype == PING and not flags & ACK:
                self.send(frame(PING, ACK, 0, payload))
            elif ftype == GOAWAY:
                res.goaway = struct.unpack('>I', payload[4:8])[0] if len(payload) >= 8 else -1
                # keep reading: the stream may still have been answered before it
            elif ftype in (HEADERS, CONTINUATION):
                if ftype == HEADERS:
                    p = payload
                    pad = 0
                    if flags & PADDED:
                        pad = p[0]
                        p = p[1:]
                    if flags & PRIORITY_FLAG:
                        p = p[5:]
                    block = p[:len(p) - pad] if pad else p
                    hflags = flags
                else:
                    block += payload
                if flags & END_HEADERS:
                    hdrs = [(n.decode() if isinstance(n, bytes) else n,
                             v.decode() if isinstance(v, bytes) else v)
                            for n, v in self.decoder.decode(block)]
                    block = b''
                    if fsid == sid:
                        res.headers += hdrs
                        for n, v in hdrs:
                            if n == ':status':
                                res.status = int(v)
                            elif n == 'grpc-status':
                                res.grpc_status = int(v)
                            elif n == 'grpc-message':
                                res.grpc_message = v
                        if hflags & END_STREAM:
                            res.ended = True
                            return res
            elif ftype == DATA and fsid == sid:
                res.data += payload
                if flags & END_STREAM:
                    res.ended = True
                    return res
            elif ftype == RST_STREAM and fsid == sid:
                res.rst = struct.unpack('>I', payload[:4])[0]
                return res
        return res

    def read_data(self, sid, duration):
        """Reads for `duration` seconds; returns the DATA bytes received on sid
        (answering SETTINGS and PING, ignoring everything else, headers undecoded: use
        no read_result() on this connection afterwards)."""
        data = b''
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            try:
                ftype, flags, fsid, payload = self.read_frame(deadline)
            except (socket.timeout, EOFError):
                break
            if ftype == SETTINGS and not flags & ACK:
                self.send(frame(SETTINGS, ACK, 0))
            elif ftype == PING and not flags & ACK:
                self.send(frame(PING, ACK, 0, payload))
            elif ftype == DATA and fsid == sid:
                data += payload
        return data

    def wait_closed(self, timeout=3):
        """True if the peer closes the connection within timeout (frames are skipped;
        a GOAWAY is noted in self.goaway)."""
        self.goaway = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ftype, flags, sid, payload = self.read_frame(deadline)
            except EOFError:
                return True
            except socket.timeout:
                return False
            except ValueError:
                continue
            if ftype == GOAWAY and len(payload) >= 8:
                self.goaway = struct.unpack('>I', payload[4:8])[0]
        return False
