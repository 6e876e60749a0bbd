"""A small HTTP/1.1 server on the event loop, for the metrics port (``serve --metrics-port``):
/metrics, /healthz, /readyz (server/metrics.py) and whatever else registers a route.

    http = HttpServer("127.0.0.1", 9404)
    http.route("/metrics", handler)                  # this path exactly
    http.route("/groups/", handler, prefix=True)     # this path and everything under it
    host, port = await http.start()
    ...
    await http.close()

A handler takes an HttpRequest and returns an HttpResponse (or a coroutine of one). It runs
on the event loop, like everything else of the node, so it must be quick (reading the shards'
state is safe there: nothing else runs meanwhile).

The wire, as far as this server goes (RFC 9112):

    request   = METHOD SP target SP "HTTP/1." DIGIT CRLF *(name ":" value CRLF) CRLF
    response  = "HTTP/1.1" SP status SP reason CRLF headers CRLF [body]

GET and HEAD only (anything else: 405 with Allow), origin-form targets ("/path?query"; else
400). One request per connection: every response says ``Connection: close`` and the
connection is closed after it, so a request body (which GET does not have) is never read.
Bare LF line endings are accepted as CRLF (RFC 9112 section 2.2).

Limits, so that a client can hold nothing for long: the request line and headers together
at most MAX_HEAD_BYTES (431 beyond) in at most MAX_HEADER_LINES lines, all of it within
HEAD_TIMEOUT_S of the connection opening (slowloris: 408, closed); the response written
within WRITE_TIMEOUT_S (a client that does not read is dropped); at most MAX_CONNECTIONS open
at once (more are closed at once). A handler that raises answers 500 (logged). After refusing
a request (4xx before a handler ran) the server stops writing and drops what the client still
sends for at most LINGER_S / LINGER_BYTES before closing, so the client reads the answer
rather than a reset.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Optional, Union
from urllib.parse import parse_qs, unquote

__all__ = ["HttpServer", "HttpRequest", "HttpResponse", "MAX_HEAD_BYTES", "HEAD_TIMEOUT_S"]

log = logging.getLogger("groupcoord.http")

MAX_HEAD_BYTES = 16 * 1024
MAX_HEADER_LINES = 100
HEAD_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 64
LINGER_S = 2.0                  # a refused request: how long (and how many bytes) of the rest
LINGER_BYTES = 1 << 20          # are read and dropped before closing (_linger)

_REASONS = {200: "OK", 302: "Found", 303: "See Other", 400: "Bad Request", 404: "Not Found",
            405: "Method Not Allowed", 408: "Request Timeout",
            431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable", 505: "HTTP Version Not Supported"}
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


@dataclass
class HttpRequest:
    method: str                     # "GET" or "HEAD"
    path: str                       # percent-decoded, without the query
    query: dict                     # name -> [values] (urllib.parse.parse_qs)
    headers: dict                   # lower-cased name -> value (the last one of a name)
    peer: str = ""

    def arg(self, name: str, default: Optional[str] = None) -> Optional[str]:
        """The first value of a query parameter."""
        v = self.query.get(name)
        return v[0] if v else default


@dataclass
class HttpResponse:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: dict = field(default_factory=dict)     # extra headers

    @classmethod
    def text(cls, status: int, text: str) -> "HttpResponse":
        return cls(status, text.encode())


Handler = Callable[[HttpRequest], Union[HttpResponse, Awaitable[HttpResponse]]]


class _Refused(Exception):
    """The request cannot be served: answer ``status`` and close."""

    def __init__(self, status: int, why: str):
        super().__init__(why)
        self.status = status


class HttpServer:
    def __init__(self, host: str, port: int, *, max_connections: int = MAX_CONNECTIONS,
                 head_timeout_s: float = HEAD_TIMEOUT_S,
                 write_timeout_s: float = WRITE_TIMEOUT_S):
        self.host, self.port = host, port
        self.max_connections = max_connections
        self.head_timeout_s = head_timeout_s
        self.write_timeout_s = write_timeout_s
        self.address: Optional[tuple] = None
        self._exact: dict = {}
        self._prefixes: list = []           # (prefix, handler), longest first
        self._srv: Optional[asyncio.AbstractServer] = None
        self._tasks: dict = {}               # connection task -> its StreamWriter
        self.refused = 0                    # connections closed at once (over the cap)

    # ------------------------------------------------------------------ routes
    def route(self, path: str, handler: Handler, prefix: bool = False) -> None:
        """Serve ``path`` (prefix: every path starting with it) with ``handler``; a later
        registration of the same path replaces the earlier one."""
        if not path.startswith("/"):
            raise ValueError("a route starts with '/': %r" % path)
        if prefix:
            self._prefixes = sorted([p for p in self._prefixes if p[0] != path]
                                    + [(path, handler)], key=lambda p: -len(p[0]))
        else:
            self._exact[path] = handler

    def routes(self) -> list:
        return sorted(list(self._exact) + [p + "*" for p, _ in self._prefixes])

    def _handler(self, path: str) -> Optional[Handler]:
        h = self._exact.get(path)
        if h is not None:
            return h
        for p, h in self._prefixes:
            if path.startswith(p):
                return h
        return None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> tuple:
        """Bind and accept -> the bound (host, port) (port 0 picks a free one)."""
        self._srv = await asyncio.start_server(self._connection, self.host, self.port,
                                               limit=MAX_HEAD_BYTES, reuse_address=True)
        self.address = self._srv.sockets[0].getsockname()[:2]
        return self.address

    async def close(self) -> None:
        """Stop accepting and drop the connections in progress. Idempotent."""
        srv, self._srv = self._srv, None
        if srv is None:
            return
        srv.close()
        # Aborted, each connection's reads end and its task returns; one still running a
        # handler after a second is cancelled.
        tasks = list(self._tasks)
        for w in self._tasks.values():
            w.transport.abort()
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=1.0)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending)
        try:
            await asyncio.wait_for(srv.wait_closed(), 1.0)
        except (asyncio.TimeoutError, Exception):
            pass

    # ------------------------------------------------------------------ one connection
    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        if len(self._tasks) >= self.max_connections or self._srv is None:
            self.refused += 1
            writer.transport.abort()
            return
        task = asyncio.current_task()
        self._tasks[task] = writer
        peer = writer.get_extra_info("peername")
        peer = "%s:%s" % tuple(peer[:2]) if isinstance(peer, tuple) else str(peer)
        head_only = refused = False
        try:
            try:
                req = await asyncio.wait_for(self._read_head(reader, peer),
                                             self.head_timeout_s)
                if req is None:
                    return                  # closed before a whole request: nothing to say
                head_only = req.method == "HEAD"
                resp = await self._dispatch(req)
            except asyncio.TimeoutError:
                resp, refused = HttpResponse.text(408, "request not received within %g s\n"
                                                  % self.head_timeout_s), True
            except _Refused as e:
                resp, refused = HttpResponse.text(e.status, "%s\n" % e), True
                if e.status == 405:
                    resp.headers["Allow"] = "GET, HEAD"
            await asyncio.wait_for(self._write(writer, resp, head_only), self.write_timeout_s)
            if refused:
                await _linger(reader, writer)
        except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass                            # the client went away or does not read
        except asyncio.CancelledError:
            pass                            # close(): the task is ours, it just ends
        finally:
            self._tasks.pop(task, None)
            if writer.transport.get_write_buffer_size():
                writer.transport.abort()        # unsent bytes of a client that does not read
            else:
                writer.close()

    async def _read_head(self, reader: asyncio.StreamReader, peer: str) -> Optional[HttpRequest]:
        total = 0
        lines = []
        while True:
            try:
                line = await reader.readline()
            except (ValueError, asyncio.LimitOverrunError):    # one line over the limit
                raise _Refused(431, "request head over %d bytes" % MAX_HEAD_BYTES) from None
            if not line.endswith(b"\n"):
                return None                 # EOF in the middle
            total += len(line)
            if total > MAX_HEAD_BYTES:
                raise _Refused(431, "request head over %d bytes" % MAX_HEAD_BYTES)
            line = line.rstrip(b"\r\n")
            if not line:
                if not lines:
                    continue                # RFC 9112 2.2: empty lines before the request line
                break
            lines.append(line)
            if len(lines) > MAX_HEADER_LINES + 1:
                raise _Refused(431, "more than %d header lines" % MAX_HEADER_LINES)
        return _parse_head(lines, peer)

    async def _dispatch(self, req: HttpRequest) -> HttpResponse:
        h = self._handler(req.path)
        if h is None:
            return HttpResponse.text(404, "no such page: %s (try %s)\n"
                                     % (req.path, ", ".join(self.routes())))
        try:
            resp = h(req)
            if inspect.isawaitable(resp):
                resp = await resp
            return resp
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("HTTP %s %s failed", req.method, req.path)
            return HttpResponse.text(500, "internal error (logged)\n")

    @staticmethod
    async def _write(writer: asyncio.StreamWriter, resp: HttpResponse, head_only: bool):
        body = resp.body
        head = ["HTTP/1.1 %d %s" % (resp.status, _REASONS.get(resp.status, "Unknown")),
                "Content-Type: %s" % resp.content_type,
                "Content-Length: %d" % len(body),
                "Connection: close", "Cache-Control: no-store"]
        head += ["%s: %s" % kv for kv in resp.headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if not head_only and body:
            writer.write(body)
        await writer.drain()


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """After refusing a request whose bytes were not all read: say we are done writing and
    read (and drop) what the client still sends, for a bounded time and amount, so that
    closing does not reset the connection and lose the answer before the client reads it."""
    try:
        if writer.can_write_eof():
            writer.write_eof()
        left = LINGER_BYTES
        async with asyncio.timeout(LINGER_S):
            while left > 0:
                data = await reader.read(min(left, 65536))
                if not data:
                    break
                left -= len(data)
    except (TimeoutError, ConnectionError, OSError, ValueError):
        pass


def _parse_head(lines: list, peer: str) -> HttpRequest:
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[0] or not set(parts[0]) <= _TOKEN:
        raise _Refused(400, "malformed request line")
    method, target, version = parts
    if not version.startswith(b"HTTP/1.") or len(version) != 8 or not version[7:8].isdigit():
        if version.startswith(b"HTTP/"):
            raise _Refused(505, "HTTP/1.x only")
        raise _Refused(400, "malformed request line")
    if not target.startswith(b"/"):
        raise _Refused(400, "only origin-form targets ('/path') are served")
    try:
        text = target.decode("ascii")
    except UnicodeDecodeError:
        raise _Refused(400, "non-ASCII request target") from None
    path, _, query = text.partition("?")
    headers = {}
    for raw in lines[1:]:
        name, sep, value = raw.partition(b":")
        if not sep or not name or not set(name) <= _TOKEN:
            raise _Refused(400, "malformed header line")
        headers[name.decode("ascii").lower()] = value.strip().decode("latin-1")
    m = method.decode("ascii")
    if m not in ("GET", "HEAD"):
        raise _Refused(405, "method %s not allowed (GET, HEAD)" % m)
    return HttpRequest(m, unquote(path), parse_qs(query, keep_blank_values=True), headers,
                       peer)
