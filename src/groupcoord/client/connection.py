"""One pipelined TCP connection to a groupcoord (or Kafka) node, over our codec.

    conn = await Connection.open("127.0.0.1", 9092, client_id="my-tool", timeout_s=10)
    conn = await Connection.open(host, 9093, security=ClientSecurity("SASL_SSL", ...))
    conn.version(ConnectGroupHeartbeatRequest.API_KEY)   # negotiated version (or KeyError)
    resp = await conn.request(ConnectGroupHeartbeatRequest(...))         # that version
    resp = await conn.request(FindCoordinatorRequest(key="g"), version=3, timeout_s=2)
    await conn.close()

    coord = await find_coordinator([("127.0.0.1", 9092)], "my-group", client_id="my-tool")

Life of a connection
--------------------
1. TCP connect, and with `security` of protocol SSL / SASL_SSL the TLS handshake
   (client/security.py's context; the server's name is checked against `host`). Steps 1 to
   3 are bounded by `timeout_s` together.
2. ApiVersions v3. A server that does not know v3 answers with a v0 body carrying
   UNSUPPORTED_VERSION (Kafka's rule: the ApiVersions response header is always v0, so any
   client can read it), and we ask again at v0. For every API key the server advertises, the
   negotiated version is the highest one inside both its range and ours
   (`groupcoord.protocol.supported_versions()`); keys with no overlap are left out.
3. SASL_PLAINTEXT / SASL_SSL: SaslHandshake v1 with the mechanism, then SaslAuthenticate
   requests carrying the mechanism's messages (security/scram_client.py: SCRAM-SHA-256/512,
   which also checks the server's signature, or PLAIN) until the exchange completes. A refusal
   is AuthenticationFailed with the server's code and message (58 when the client refuses
   the server: a wrong SCRAM signature or nonce). The SDK does not re-authenticate (KIP-368):
   a server with connections.max.reauth.ms closes the connection once the session
   (`session_lifetime_ms`) has expired, and the SDK opens a new one as after any loss.
4. Requests: each gets the next correlation id and a future; many may be in flight at once.
   Responses are matched by correlation id (our server answers in order, but nothing here
   relies on it). A request that times out is forgotten; its late response is dropped and the
   connection stays usable. When the connection closes, every pending request fails with
   ConnectionClosed, and so does every later one: a Connection is never reopened — open a
   new one (find_coordinator does that, with a Backoff).

`Backoff` is the retry pacing shared by the SDK: exponential, capped, with seeded jitter.
"""
from __future__ import annotations

import asyncio
import random
import ssl
import time
from typing import Any, Iterable, Optional, Sequence

from groupcoord.protocol import (ApiVersionsRequest, ApiVersionsResponse, FindCoordinatorRequest,
                                 FrameSplitter, ProtocolError, SaslAuthenticateRequest,
                                 SaslHandshakeRequest, decode_response_frame,
                                 encode_request_frame, supported_versions)
from groupcoord.protocol.error_codes import ErrorCode, error_name
from groupcoord.client.errors import (AuthenticationFailed, ConnectionClosed,
                                      CoordinatorNotFound, RequestTimeout, UnsupportedApi)
from groupcoord.client.security import ClientSecurity
from groupcoord.security.scram_client import SaslClientError, sasl_client

__all__ = ["Connection", "find_coordinator", "Backoff", "CoordinatorLink", "negotiate_versions",
           "DEFAULT_CLIENT_ID", "DEFAULT_REQUEST_TIMEOUT_S"]

DEFAULT_CLIENT_ID = "groupcoord-sdk"
DEFAULT_REQUEST_TIMEOUT_S = 30.0
API_VERSIONS_KEY = ApiVersionsRequest.API_KEY
FIND_COORDINATOR_KEY = FindCoordinatorRequest.API_KEY
SASL_HANDSHAKE_KEY = SaslHandshakeRequest.API_KEY
SASL_AUTHENTICATE_KEY = SaslAuthenticateRequest.API_KEY
_API_VERSIONS_FIRST = 3  # the first flexible version; Kafka clients start there too


def negotiate_versions(server: Iterable[Any],
                       ours: Optional[dict[int, tuple[int, int]]] = None) -> dict[int, int]:
    """{api_key: highest version in both ranges} from ApiVersions `api_keys` entries
    (objects with api_key/min_version/max_version). Keys without overlap are left out."""
    ours = supported_versions() if ours is None else ours
    out: dict[int, int] = {}
    for k in server:
        mine = ours.get(k.api_key)
        if mine is None:
            continue
        hi = min(k.max_version, mine[1])
        if hi >= max(k.min_version, mine[0]):
            out[k.api_key] = hi
    return out


class Backoff:
    """Exponential backoff with jitter: delay n (from 0) is
    min(max_s, initial_s * multiplier**n) scaled by a factor drawn uniformly from
    [1 - jitter, 1 + jitter] (then capped at max_s again). `seed` makes the jitter
    reproducible; `reset()` starts again from initial_s."""

    def __init__(self, initial_s: float = 0.05, max_s: float = 2.0, multiplier: float = 2.0,
                 jitter: float = 0.2, seed: Optional[int] = None):
        if initial_s <= 0 or max_s < initial_s or multiplier < 1 or not 0 <= jitter < 1:
            raise ValueError("bad backoff parameters")
        self.initial_s = initial_s
        self.max_s = max_s
        self.multiplier = multiplier
        self.jitter = jitter
        self.seed = seed
        self._rng = random.Random(seed)
        self.attempts = 0

    def next_delay(self) -> float:
        base = min(self.max_s, self.initial_s * self.multiplier ** self.attempts)
        self.attempts += 1
        factor = 1.0 + self.jitter * (2.0 * self._rng.random() - 1.0)
        return min(self.max_s, base * factor)

    async def sleep(self) -> float:
        """Sleep for the next delay; returns it."""
        d = self.next_delay()
        await asyncio.sleep(d)
        return d

    def reset(self) -> None:
        self.attempts = 0


class _Pending:
    __slots__ = ("future", "api_key", "version")

    def __init__(self, future: asyncio.Future, api_key: int, version: int):
        self.future = future
        self.api_key = api_key
        self.version = version


class _WireProtocol(asyncio.Protocol):
    """Bytes in -> frames -> the owning Connection. Kept apart so Connection has no
    transport callbacks in its public surface."""

    def __init__(self, conn: "Connection"):
        self.conn = conn
        self.splitter = FrameSplitter()

    def connection_made(self, transport):
        self.conn._transport = transport

    def data_received(self, data):
        try:
            frames = self.splitter.feed(data)
        except ProtocolError as e:  # an impossible frame size: the stream is unusable
            self.conn._fail_all(ConnectionClosed("bad frame from %s: %s" % (self.conn.address, e)))
            self.conn._transport.abort()
            return
        for frame in frames:
            self.conn._on_frame(frame)

    def connection_lost(self, exc):
        why = "connection to %s closed" % self.conn.address
        if exc is not None:
            why += ": %s" % exc
        self.conn._fail_all(ConnectionClosed(why))


class Connection:
    """A pipelined connection. Build it with `await Connection.open(...)`."""

    def __init__(self, host: str, port: int, client_id: Optional[str] = DEFAULT_CLIENT_ID,
                 request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.versions: dict[int, int] = {}       # negotiated, filled by open()
        self.server_versions: dict[int, tuple[int, int]] = {}
        self.api_versions_version = -1           # the ApiVersions version that worked
        self._transport: Optional[asyncio.Transport] = None
        self._pending: dict[int, _Pending] = {}
        self._next_corr = 0
        self._closed_exc: Optional[ConnectionClosed] = None
        self._closed_event = asyncio.Event()
        self.requests_sent = 0
        self.late_responses_dropped = 0
        self.security: Optional[ClientSecurity] = None    # as opened
        self.session_lifetime_ms = 0             # SaslAuthenticate v1+: 0 = no expiry

    # -- opening -------------------------------------------------------------------------
    @classmethod
    async def open(cls, host: str, port: int, client_id: Optional[str] = DEFAULT_CLIENT_ID,
                   timeout_s: float = 10.0,
                   request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
                   security: Optional[ClientSecurity] = None) -> "Connection":
        """Connect, negotiate versions and (with `security`) do TLS and SASL, all within
        `timeout_s`. Raises ConnectionClosed (refused, reset, unreachable, a failed TLS
        handshake: the reason is in the message), RequestTimeout, AuthenticationFailed (SASL
        refused), or ValueError (`security`'s certificate files cannot be used)."""
        conn = cls(host, port, client_id, request_timeout_s)
        deadline = time.monotonic() + timeout_s
        loop = asyncio.get_running_loop()
        # The plain path passes exactly what it always did.
        tls = {} if security is None or not security.uses_ssl else {
            "ssl": security.ssl_context(), "server_hostname": host}
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: _WireProtocol(conn), host, port, **tls),
                timeout_s)
        except asyncio.TimeoutError:
            raise RequestTimeout("connect to %s:%s timed out after %.1f s"
                                 % (host, port, timeout_s)) from None
        except ssl.SSLError as e:           # also CertificateError: the reason is in e
            raise ConnectionClosed("TLS handshake with %s:%s failed: %s"
                                   % (host, port, e)) from e
        except OSError as e:
            raise ConnectionClosed("cannot connect to %s:%s%s: %s"
                                   % (host, port, " (TLS)" if tls else "",
                                      str(e) or type(e).__name__)) from e
        conn.security = security
        try:
            await conn._negotiate(deadline)
            if security is not None and security.uses_sasl:
                await conn._authenticate(security, deadline)
        except BaseException as e:
            conn._abort()
            if isinstance(e, ConnectionClosed) and conn.api_versions_version < 0:
                # What a listener of another security protocol does: say what we spoke.
                raise ConnectionClosed("%s before answering ApiVersions (this client speaks "
                                       "%s)" % (e, security.protocol if security else
                                                "PLAINTEXT")) from e
            raise
        return conn

    async def _negotiate(self, deadline: float) -> None:
        ours = supported_versions()
        version = min(_API_VERSIONS_FIRST, ours[API_VERSIONS_KEY][1])
        req = ApiVersionsRequest(client_software_name="groupcoord-sdk",
                                 client_software_version="1")
        resp = await self.request(req, version=version,
                                  timeout_s=max(0.001, deadline - time.monotonic()))
        if resp.error_code == ErrorCode.UNSUPPORTED_VERSION and version != 0:
            version = 0
            resp = await self.request(ApiVersionsRequest(), version=0,
                                      timeout_s=max(0.001, deadline - time.monotonic()))
        if resp.error_code:
            raise UnsupportedApi("ApiVersions v%d to %s failed: %s"
                                 % (version, self.address, error_name(resp.error_code)))
        self.api_versions_version = version
        self.server_versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        self.versions = negotiate_versions(resp.api_keys, ours)

    async def _authenticate(self, security: ClientSecurity, deadline: float) -> None:
        mech = security.sasl_mechanism
        if (self.versions.get(SASL_HANDSHAKE_KEY, -1) < 1
                or SASL_AUTHENTICATE_KEY not in self.versions):
            raise UnsupportedApi("%s offers no SaslHandshake v1 + SaslAuthenticate (needed "
                                 "for %s)" % (self.address, security.protocol))
        resp = await self.request(SaslHandshakeRequest(mechanism=mech), version=1,
                                  timeout_s=max(0.001, deadline - time.monotonic()))
        if resp.error_code:
            raise AuthenticationFailed(resp.error_code, "SaslHandshake(%s) refused by %s; it "
                                       "offers %s" % (mech, self.address,
                                                      ", ".join(resp.mechanisms) or "none"),
                                       mech)
        client = sasl_client(mech, security.sasl_username, security.sasl_password)
        out: Optional[bytes] = client.initial()
        while out is not None:
            resp = await self.request(SaslAuthenticateRequest(auth_bytes=out),
                                      timeout_s=max(0.001, deadline - time.monotonic()))
            if resp.error_code:
                raise AuthenticationFailed(resp.error_code, resp.error_message, mech)
            try:
                out = client.step(resp.auth_bytes)
            except SaslClientError as e:
                raise AuthenticationFailed(ErrorCode.SASL_AUTHENTICATION_FAILED,
                                           "%s with %s: %s" % (mech, self.address, e),
                                           mech) from None
        self.session_lifetime_ms = resp.session_lifetime_ms

    # -- public surface --------------------------------------------------------------------
    @property
    def address(self) -> str:
        return "%s:%s" % (self.host, self.port)

    @property
    def closed(self) -> bool:
        return self._closed_exc is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def version(self, api_key: int) -> int:
        """The negotiated version for api_key; UnsupportedApi (a KeyError) if there is none."""
        try:
            return self.versions[api_key]
        except KeyError:
            raise UnsupportedApi("%s does not support api key %d (or no common version)"
                                 % (self.address, api_key)) from None

    def supports(self, api_key: int) -> bool:
        return api_key in self.versions

    async def request(self, req: Any, version: Optional[int] = None,
                      timeout_s: Optional[float] = None) -> Any:
        """Send `req` and await its decoded response. `version` defaults to the negotiated
        one; `timeout_s` to the connection's request timeout (None there means forever).
        Raises ConnectionClosed, RequestTimeout, UnsupportedApi, or the codec's
        ProtocolError if the response cannot be decoded."""
        api_key = type(req).API_KEY
        if version is None:
            version = self.version(api_key)
        if self._closed_exc is not None:
            raise ConnectionClosed(str(self._closed_exc))
        corr = self._next_corr
        self._next_corr = (corr + 1) & 0x7FFFFFFF
        frame = encode_request_frame(req, version, corr, self.client_id)
        fut = asyncio.get_running_loop().create_future()
        self._pending[corr] = _Pending(fut, api_key, version)
        self._transport.write(frame)
        self.requests_sent += 1
        if timeout_s is None:
            timeout_s = self.request_timeout_s
        try:
            if timeout_s is None:
                return await fut
            # shield: on timeout we drop the entry ourselves (wait_for would cancel fut).
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except asyncio.TimeoutError:
            if fut.done() and not fut.cancelled():
                return fut.result()  # arrived in the same loop iteration as the timeout
            raise RequestTimeout("%s v%d to %s: no response within %.3f s"
                                 % (type(req).__name__, version, self.address, timeout_s)) from None
        finally:
            self._pending.pop(corr, None)
            if not fut.done():
                fut.cancel()

    async def close(self) -> None:
        """Close the connection; pending requests fail with ConnectionClosed."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        self._fail_all(ConnectionClosed("connection to %s closed by the client" % self.address))
        if self._transport is not None:
            try:
                await asyncio.wait_for(self._closed_event.wait(), 1.0)
            except asyncio.TimeoutError:
                self._transport.abort()

    async def wait_closed(self) -> None:
        """Returns once the connection is closed (by either side)."""
        await self._closed_event.wait()

    def __repr__(self) -> str:
        return "<Connection %s%s in_flight=%d>" % (self.address, " closed" if self.closed else "",
                                                   len(self._pending))

    # -- internals ---------------------------------------------------------------------------
    def _on_frame(self, frame: bytes) -> None:
        if len(frame) < 4:
            return
        corr = int.from_bytes(frame[:4], "big", signed=True)
        p = self._pending.pop(corr, None)
        if p is None or p.future.done():
            self.late_responses_dropped += 1
            return
        try:
            _, body = decode_response_frame(frame, p.api_key, p.version)
        except ProtocolError as e:
            if p.api_key == API_VERSIONS_KEY and p.version != 0:
                # An old server answers an ApiVersions version it lacks with a v0 body.
                try:
                    _, body = decode_response_frame(frame, API_VERSIONS_KEY, 0)
                except ProtocolError:
                    p.future.set_exception(e)
                    return
            else:
                p.future.set_exception(e)
                return
        p.future.set_result(body)

    def _fail_all(self, exc: ConnectionClosed) -> None:
        if self._closed_exc is None:
            self._closed_exc = exc
        pending, self._pending = self._pending, {}
        for p in pending.values():
            if not p.future.done():
                p.future.set_exception(exc)
                p.future.exception()  # mark retrieved: the awaiting request may be gone
        if self._transport is None or self._transport.is_closing():
            self._closed_event.set()

    def _abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
        self._fail_all(ConnectionClosed("connection to %s aborted" % self.address))
        self._closed_event.set()


def _parse_bootstrap(bootstrap: Any) -> list[tuple[str, int]]:
    """[(host, port)], a "host:port" string, or a comma-separated list of them."""
    if isinstance(bootstrap, str):
        bootstrap = [b for b in bootstrap.split(",") if b.strip()]
    out = []
    for b in bootstrap:
        if isinstance(b, str):
            host, _, port = b.strip().rpartition(":")
            out.append((host, int(port)))
        else:
            out.append((b[0], int(b[1])))
    if not out:
        raise ValueError("empty bootstrap list")
    return out


_RETRY_FIND = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
               ErrorCode.NOT_COORDINATOR)


async def find_coordinator(bootstrap: Any, group_id: str,
                           client_id: Optional[str] = DEFAULT_CLIENT_ID, *,
                           timeout_s: float = 30.0, backoff: Optional[Backoff] = None,
                           request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
                           connect_timeout_s: float = 5.0,
                           security: Optional[ClientSecurity] = None) -> Connection:
    """A Connection to the coordinator of `group_id` (every connection opened with
    `security`: TLS / SASL, see Connection.open).

    Tries the bootstrap addresses in turn. Connection failures and the retriable answers
    (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR: ask again)
    are retried with `backoff` until `timeout_s` has passed, then CoordinatorNotFound.
    Any other error code is raised at once as CoordinatorNotFound (e.g. INVALID_REQUEST),
    and AuthenticationFailed (credentials refused) at once as itself.
    When the coordinator is the bootstrap node itself, that connection is returned."""
    addrs = _parse_bootstrap(bootstrap)
    backoff = backoff or Backoff()
    deadline = time.monotonic() + timeout_s
    last: Optional[BaseException] = None

    async def open_node(host: str, port: int) -> Connection:
        left = deadline - time.monotonic()
        return await Connection.open(host, port, client_id,
                                     timeout_s=max(0.01, min(connect_timeout_s, left)),
                                     request_timeout_s=request_timeout_s, security=security)

    i = 0
    while True:
        host, port = addrs[i % len(addrs)]
        i += 1
        boot: Optional[Connection] = None
        try:
            boot = await open_node(host, port)
            code, msg, chost, cport = await _ask_coordinator(boot, group_id, deadline)
            if code == 0:
                if (chost, cport) == (host, port):
                    backoff.reset()
                    found, boot = boot, None
                    return found  # the coordinator is the node we already talk to
                await boot.close()
                boot = None
                conn = await open_node(chost, cport)
                backoff.reset()
                return conn
            if code not in _RETRY_FIND:
                raise CoordinatorNotFound("FindCoordinator(%r) via %s:%s: %s %s"
                                          % (group_id, host, port, error_name(code), msg or ""))
            last = CoordinatorNotFound("FindCoordinator(%r): %s" % (group_id, error_name(code)))
        except (ConnectionClosed, RequestTimeout, UnsupportedApi) as e:
            last = e
        finally:
            if boot is not None:
                await boot.close()
        if time.monotonic() + backoff.initial_s > deadline:
            raise CoordinatorNotFound("no coordinator for group %r within %.1f s (last: %s)"
                                      % (group_id, timeout_s, last), last)
        delay = backoff.next_delay()
        await asyncio.sleep(max(0.0, min(delay, deadline - time.monotonic())))


async def _ask_coordinator(conn: Connection, group_id: str,
                           deadline: float) -> tuple[int, Optional[str], str, int]:
    v = conn.version(FIND_COORDINATOR_KEY)
    timeout = max(0.01, min(conn.request_timeout_s or 1e9, deadline - time.monotonic()))
    if v >= 4:
        resp = await conn.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group_id]),
                                  version=v, timeout_s=timeout)
        if resp.error_code:
            return resp.error_code, resp.error_message, "", -1
        for c in resp.coordinators:
            if c.key == group_id:
                return c.error_code, c.error_message, c.host, c.port
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "no entry for the key", "", -1
    resp = await conn.request(FindCoordinatorRequest(key=group_id, key_type=0), version=v,
                              timeout_s=timeout)
    return resp.error_code, resp.error_message, resp.host, resp.port


def _seen(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


class CoordinatorLink:
    """The current connection to one group's coordinator, found on demand and found again
    after a failure. Several members of the same group may share one link (and so one
    connection): the load generator and the tests run hundreds of workers over a few.

        link = CoordinatorLink(bootstrap, group_id, client_id="x")   # security=ClientSecurity(...)
        conn = await link.get()          # find_coordinator on first use / after invalidate
        link.invalidate(conn)            # this connection failed or said NOT_COORDINATOR
        await link.close()
    """

    def __init__(self, bootstrap: Any, group_id: str,
                 client_id: Optional[str] = DEFAULT_CLIENT_ID, *,
                 request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
                 find_timeout_s: float = 30.0, backoff: Optional[Backoff] = None,
                 security: Optional[ClientSecurity] = None):
        self.bootstrap = _parse_bootstrap(bootstrap)
        self.security = security
        self.group_id = group_id
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.find_timeout_s = find_timeout_s
        self.backoff = backoff or Backoff()
        self._conn: Optional[Connection] = None
        self._finding: Optional[asyncio.Task] = None
        self.finds = 0

    @property
    def connection(self) -> Optional[Connection]:
        return self._conn if self._conn is not None and not self._conn.closed else None

    async def get(self) -> Connection:
        c = self.connection
        if c is not None:
            return c
        if self._finding is None or self._finding.done():
            self.finds += 1
            self._finding = asyncio.ensure_future(find_coordinator(
                self.bootstrap, self.group_id, self.client_id, timeout_s=self.find_timeout_s,
                backoff=self.backoff, request_timeout_s=self.request_timeout_s,
                security=self.security))
            # Its waiters may all be gone (cancelled, killed): a failure is theirs to see,
            # not asyncio's "exception was never retrieved" at exit.
            self._finding.add_done_callback(_seen)
        # shield: one caller giving up must not cancel the search the others wait for
        self._conn = await asyncio.shield(self._finding)
        return self._conn

    def invalidate(self, conn: Optional[Connection] = None) -> None:
        """Forget `conn` (the current one if None) and close it; the next get() finds the
        coordinator again."""
        c = self._conn if conn is None else conn
        if c is not None and c is self._conn:
            self._conn = None
        if c is not None and not c.closed:
            asyncio.ensure_future(c.close())

    async def close(self) -> None:
        if self._finding is not None and not self._finding.done():
            self._finding.cancel()
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
