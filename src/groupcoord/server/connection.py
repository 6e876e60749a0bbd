"""One client connection's requests: each frame decoded and dispatched, its answer put in its
slot (stream.py, the base class, owns framing, flow control and the ordered, coalesced output).

    frame -> decode_request_frame (native)
        node API (node.py)        answered inline (Fetch may be held for MaxWaitMs)
        Metadata                  bytes from the MetadataCache (a job when it must build)
        group API                 ShardSet.submit_nowait(...): the answer now, or a future
        OffsetCommit frame over   scanned, not decoded: its shard refuses it whole (answer
          message.max.bytes       written from the frame) or it is decoded as any other
        CreateTopics              Server.create_topics(...) in a task of its own
        CreatePartitions,         catalog.create_partitions / delete_topics(...), the same
          DeleteTopics

Security (docs/security.md): on a SASL listener nothing but ApiVersions, SaslHandshake and
SaslAuthenticate is taken before the client has authenticated (anything else closes the
connection, as Kafka does); a failed exchange is answered SASL_AUTHENTICATION_FAILED after
the failed-authentication delay and the connection closes. Once the principal is known, every
request goes through authz.check (Kafka's rules per API) unless the node is ``open`` (no
ACL, everybody allowed), which costs nothing on the heartbeat path.

Bad input (docs/server.md has the table): what can be answered is answered (ApiVersions of an
unknown version, a malformed body whose response has a top-level error code); otherwise the
connection is closed. Either way one WARNING line names the peer and the problem.
"""
from __future__ import annotations

import asyncio
import logging
from functools import partial

from groupcoord._native.commit_scan import (VERSIONS as _SCAN_VERSIONS,
                                            offset_commit_error_frame, scan_offset_commit)
from groupcoord.groups import offsets
from groupcoord.groups.config import ShardConfig
from groupcoord.protocol import (DecodeError, FrameSplitter, ProtocolError,
                                 UnsupportedVersionError, decode_request_frame)
from groupcoord.protocol import api_keys as K
from groupcoord.protocol import messages as m
from groupcoord.protocol.api_keys import OFFSET_COMMIT
from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.security import admin as security_admin
from groupcoord.security.principal import ANONYMOUS, ssl_principal
from groupcoord.security.sasl import SaslSession
from groupcoord.server import node as N
from groupcoord.server.authz import Who, check
from groupcoord.server.catalog import create_partitions, delete_topics
from groupcoord.server.metadata_cache import response_frame
from groupcoord.server.stream import FrameStream, Owner

__all__ = ["ServerConnection"]

log = logging.getLogger("groupcoord.server")

# What a SASL listener takes before the client has authenticated.
_PRE_AUTH = frozenset((K.API_VERSIONS, K.SASL_HANDSHAKE, K.SASL_AUTHENTICATE))
# The largest frame taken before authentication, and the largest SASL token at any time:
# Kafka's sasl.server.max.receive.size (an unauthenticated peer cannot make us hold more).
SASL_MAX_RECEIVE = 524288


def _commit_scan_threshold(shards) -> int:
    """The frame size over which an OffsetCommit is scanned before it is decoded: the shards'
    message.max.bytes (the runtime's RuntimeConfig.shard_config; shards without one, a test
    double, have the default). A smaller frame decodes in a few ms at most."""
    cfg = getattr(getattr(shards, "config", None), "shard_config", None)
    return (cfg if isinstance(cfg, ShardConfig) else ShardConfig()).message_max_bytes


class ServerConnection(FrameStream):
    __slots__ = ("_shards", "_node", "_meta", "_dispatch", "_scan_over", "_listener",
                 "_access", "_sasl", "_authed", "principal", "_who", "_reauth_at",
                 "_raw_sasl")

    def __init__(self, server: Owner, bound=None):
        super().__init__(server)
        self._shards = server.shards
        # bound: the listener this connection came in on (server.py BoundListener); its
        # NodeState advertises that listener's addresses. None: the server's first one.
        self._listener = bound.listener if bound is not None else None
        self._node = bound.node if bound is not None else server.node
        self._meta = bound.metadata_cache if bound is not None else server.metadata_cache
        self._scan_over = _commit_scan_threshold(self._shards)
        self._access = access = server.access
        self.principal = ANONYMOUS
        self._who = Who(ANONYMOUS, "", access.authorizer)
        self._reauth_at = 0.0
        self._raw_sasl = False
        if self._listener is not None and self._listener.sasl:
            self._sasl = SaslSession(access.config.sasl_mechanisms, access.lookup,
                                     reauth_ms=access.config.reauth_ms)
            self._authed = False
            # Until the client authenticates, a size prefix over Kafka's bound closes the
            # connection at once (nothing announced is waited for or buffered).
            self._splitter = FrameSplitter(min(SASL_MAX_RECEIVE, server.config.max_frame_bytes))
        else:
            self._sasl = None
            self._authed = True
        self._dispatch = {
            N.API_VERSIONS: self._api_versions,
            N.METADATA: self._metadata,
            N.FIND_COORDINATOR: self._inline(N.find_coordinator),
            N.LIST_OFFSETS: self._inline(N.list_offsets),
            N.FETCH: self._fetch,
            N.PRODUCE: self._produce,
            N.CREATE_TOPICS: self._create_topics,
            N.DESCRIBE_CLUSTER: self._inline(N.describe_cluster),
            N.CREATE_PARTITIONS: partial(self._catalog_change, create_partitions),
            N.DELETE_TOPICS: partial(self._catalog_change, delete_topics),
            K.SASL_HANDSHAKE: self._sasl_handshake,
            K.SASL_AUTHENTICATE: self._sasl_authenticate,
            K.DESCRIBE_ACLS: partial(self._security_read, security_admin.describe_acls),
            K.DESCRIBE_USER_SCRAM_CREDENTIALS: partial(
                self._security_read, security_admin.describe_user_scram_credentials),
            K.CREATE_ACLS: partial(self._security_change, security_admin.create_acls,
                                   "ACLs created"),
            K.DELETE_ACLS: partial(self._security_change, security_admin.delete_acls,
                                   "ACLs deleted"),
            K.ALTER_USER_SCRAM_CREDENTIALS: partial(
                self._security_change, security_admin.alter_user_scram_credentials,
                "SCRAM credentials altered"),
        }

    def connection_made(self, transport):
        super().connection_made(transport)
        self._who.host = self.host
        if self.closing or self._listener is None or not self._listener.tls:
            return
        # TLS is established before connection_made: the client's certificate (if it sent
        # one, per --ssl-client-auth) names the principal on an SSL listener.
        cert = transport.get_extra_info("peercert")
        if cert and not self._listener.sasl:
            self._set_principal(ssl_principal(cert))

    def _set_principal(self, principal: str) -> None:
        self.principal = principal
        self._who = Who(principal, self.host, self._access.authorizer)

    # ------------------------------------------------------------------ requests
    # (client id, api key) pairs whose trailing request bytes were logged, process-wide;
    # emptied when full, so client ids cannot grow it without bound.
    _trailing_logged: set = set()

    def _on_frame(self, frame: bytes):
        if not self._authed and len(frame) > SASL_MAX_RECEIVE:
            self._bad("a %d-byte request before SASL authentication (at most %d: Kafka's "
                      "sasl.server.max.receive.size); closing" % (len(frame), SASL_MAX_RECEIVE))
            return
        if self._raw_sasl:
            self._key = K.SASL_AUTHENTICATE << 16     # the request metrics' api (stream.py)
            self._sasl_raw_token(frame)
            return
        if (self._authed and self._access.open and len(frame) > self._scan_over and frame[0] == 0 and frame[1] == OFFSET_COMMIT
                and _SCAN_VERSIONS[0] <= (frame[2] << 8 | frame[3]) <= _SCAN_VERSIONS[1]):
            self._key = OFFSET_COMMIT << 16
            self._large_commit(frame)
            return
        try:
            header, req = decode_request_frame(frame)
        except ProtocolError as e:
            h = getattr(e, "header", None)
            k = h.api_key if h is not None else getattr(e, "api_key", None)
            self._key = (k if isinstance(k, int) else -1) << 16
            self._unreadable(e)
            return
        key = header.api_key
        self._key = key << 16               # every slot of this request carries it (metrics)
        if header.trailing_bytes and log.isEnabledFor(logging.DEBUG):
            # Read and ignored, as Kafka does (librdkafka's Metadata "all topics" has 3).
            seen = ServerConnection._trailing_logged
            if (header.client_id, key) not in seen:
                if len(seen) >= 4096:
                    seen.clear()
                seen.add((header.client_id, key))
                self._warn("%s v%d request from client id %r has %d byte(s) after its last "
                           "field; ignored (logged once per client id and api)"
                           % (type(req).__name__[:-len("Request")], header.api_version,
                              header.client_id, header.trailing_bytes), debug=True)
        post = None
        if not self._authed or self._reauth_at:
            if not self._authed and key not in _PRE_AUTH:
                self._bad("%s request before SASL authentication on %s; closing (a client "
                          "must authenticate first)" % (type(req).__name__[:-len("Request")],
                                                        self._listener))
                return
            if self._reauth_at and key not in _PRE_AUTH and self._loop.time() > self._reauth_at:
                self._bad("the SASL session of %s expired without re-authentication "
                          "(connections.max.reauth.ms); closing" % self.principal, logging.INFO)
                return
        if not self._access.open:
            verdict = check(key, header.api_version, req, self._who, self._node)
            if verdict is not None:
                if verdict.response is not None:
                    self._answer(verdict.response, header.api_version, header.correlation_id)
                    return
                req, post = verdict.request, verdict.post
        if post is not None:
            self._run_post(req, header, key, post)
            return
        fn = self._dispatch.get(key)
        if fn is not None:
            fn(req, header)
        elif self._shards.serves(key):
            self._group_request(req, header, key)
        else:
            # Decodable but not implemented (hence not advertised): as an unknown key.
            self._bad("api key %d (%s) is not served by this node; closing"
                      % (key, type(req).__name__[:-len("Request")]))

    def _group_request(self, req, header, key, slot=None, post=None):
        # submit_nowait answers at once what needs no waiting (a steady heartbeat): no task
        # per request on the hot path; otherwise a future completes the slot later.
        # slot: the one the request already holds (a large commit, after its scan).
        # post: authz's merge of what was refused into the answer.
        res = self._submit(req, header)
        if isinstance(res, asyncio.Future):
            if slot is None:
                slot = self._new_slot()
            res.add_done_callback(partial(self._submitted, slot, key, header.api_version,
                                          header.correlation_id, post=post))
            return
        if post is not None:
            res = post(res)
        if slot is None:
            self._answer(res, header.api_version, header.correlation_id)
        else:
            data = self._encode(res, header.api_version, header.correlation_id)
            if data is not None:
                self._fill(slot, data)

    def _submit(self, req, header):
        try:
            return self._shards.submit_nowait(req, header.api_version, header.client_id or "",
                                             self.host)
        except Exception as exc:          # a bug: answered as such, the connection goes on
            fut = self._loop.create_future()
            fut.set_exception(exc)
            return fut

    # ---- OffsetCommit frames over message.max.bytes
    def _large_commit(self, frame: bytes):
        """Scan the frame (native/commit_scan.pyx) instead of decoding it and ask its shard,
        in the queue of its other requests, whether the whole commit is refused
        (offsets.commit_shape_error): if so, the answer is written from the frame, with no
        object per partition; if not (its records may fit in message.max.bytes), it is
        decoded and handled as usual, its answer in the same slot."""
        try:
            scan = scan_offset_commit(frame)
        except ProtocolError as e:
            self._unreadable(e)
            return
        header = scan[0]
        slot = self._new_slot()
        res = self._submit(offsets.commit_shape(*scan[1:]), header)
        if isinstance(res, asyncio.Future):
            res.add_done_callback(partial(self._commit_checked, slot, frame, header))
        else:
            self._commit_refused_or_run(slot, frame, header, offsets.shape_code(res))

    def _commit_checked(self, slot, frame, header, fut):
        if self.closing:
            return
        exc = asyncio.CancelledError() if fut.cancelled() else fut.exception()
        if exc is None:
            code = offsets.shape_code(fut.result())
        else:
            log.error("request from %s (OffsetCommit v%d, scanned) failed", self.peer,
                      header.api_version,
                      exc_info=exc if not isinstance(exc, asyncio.CancelledError) else None)
            code = E.UNKNOWN_SERVER_ERROR
        self._commit_refused_or_run(slot, frame, header, code)

    def _commit_refused_or_run(self, slot, frame, header, code):
        if code:
            data = offset_commit_error_frame(frame, code)
            if self._stats is not None:    # the request metrics' error (stream.py _fill)
                self._enc, self._enc_code = data, int(code)
            self._fill(slot, data)
            return
        try:
            header, req = decode_request_frame(frame)
        except ProtocolError as e:        # the scan read these bytes: a bug on our side
            self._bad("OffsetCommit v%d passed the scan but not the decoder (%s); closing"
                      % (header.api_version, e), level=logging.ERROR)
            return
        self._group_request(req, header, header.api_key, slot)

    def _unreadable(self, e: ProtocolError):
        """A request frame the decoder (or the commit scan) refused: answered where the
        protocol allows, else the connection closes."""
        if isinstance(e, UnsupportedVersionError):
            self._unsupported(e)
        elif isinstance(e, DecodeError):
            self._malformed(e)
        else:
            self._bad("unreadable request (%s); closing" % e)

    def _unsupported(self, e: UnsupportedVersionError):
        corr = getattr(e, "correlation_id", None)
        if e.api_key == N.API_VERSIONS and corr is not None:
            # The one request every client may send at a version we do not know: answer in
            # v0 (header v0, body v0) with UNSUPPORTED_VERSION and our ranges.
            self._warn("ApiVersions v%s is not supported; answered UNSUPPORTED_VERSION with "
                       "our version ranges" % e.api_version, debug=True)
            self._answer(N.api_versions_unsupported(self._node), 0, corr)
            return
        if e.api_key in self._node.api_ranges:
            lo, hi = self._node.api_ranges[e.api_key]
            self._bad("api key %d version %d is not supported (we speak %d-%d, as ApiVersions "
                      "says); closing" % (e.api_key, e.api_version, lo, hi))
        else:
            self._bad("unknown api key %s (version %s); closing" % (e.api_key, e.api_version))

    def _malformed(self, e: DecodeError):
        h = getattr(e, "header", None)
        if h is not None:
            resp = N.top_level_error_response(h.api_key, h.api_version, E.INVALID_REQUEST,
                                              "malformed request: %s" % e)
            if resp is not None:
                self._warn("malformed %s v%d request (%s); answered INVALID_REQUEST"
                           % (type(resp).__name__[:-len("Response")], h.api_version, e))
                self._answer(resp, h.api_version, h.correlation_id)
                if not self._authed:
                    # During SASL authentication a malformed request ends it, as in Kafka.
                    self._bad("malformed request before SASL authentication; closing")
                return
            self._bad("malformed api key %d v%d request (%s); closing"
                      % (h.api_key, h.api_version, e))
            return
        self._bad("malformed request header (%s); closing" % e)

    # ---- node APIs
    def _inline(self, fn):
        node = self._node

        def handle(req, header):
            self._answer(fn(req, header.api_version, node), header.api_version,
                         header.correlation_id)
        return handle

    def _metadata(self, req, header):
        version, corr = header.api_version, header.correlation_id
        try:
            res = self._meta.answer(req, version)
        except Exception as exc:          # a bug: answered as such, the connection goes on
            log.error("Metadata v%d for %s failed", version, self.peer, exc_info=exc)
            res = self._loop.create_future()
            res.set_exception(exc)
        slot = self._new_slot()
        if isinstance(res, asyncio.Future):
            # Built over several loop turns: take no further request until it is answered,
            # so a connection has at most one such answer in the making.
            self._job = True
            res.add_done_callback(partial(self._metadata_done, slot, version, corr))
        else:
            self._fill(slot, response_frame(res, version, corr))

    def _metadata_done(self, slot, version, corr, fut):
        self._job = False
        exc = asyncio.CancelledError() if fut.cancelled() else fut.exception()
        if self.closing:
            return
        if exc is None:
            self._fill(slot, response_frame(fut.result(), version, corr))
        else:
            self._internal_error(slot, N.METADATA, version, corr, exc)
        self._kick()

    def _api_versions(self, req, header):
        self._answer(N.api_versions(req, header.api_version, self._node), header.api_version,
                     header.correlation_id)

    def _produce(self, req, header):
        resp = N.produce(req, header.api_version, self._node)
        if resp is not None:           # acks=0: Kafka sends no response at all
            self._answer(resp, header.api_version, header.correlation_id)

    def _fetch(self, req, header):
        resp, hold = N.fetch(req, header.api_version, self._node)
        wait_ms = min(req.max_wait_ms, self.server.config.fetch_max_wait_cap_ms)
        if not hold or wait_ms <= 0 or self.server.stopping:
            self._answer(resp, header.api_version, header.correlation_id)
            return
        data = self._encode(resp, header.api_version, header.correlation_id)
        if data is not None:
            self._hold(data, wait_ms / 1000.0)


    def _create_topics(self, req, header):
        slot = self._new_slot()
        task = self._loop.create_task(self.server.create_topics(req, header.api_version))
        task.add_done_callback(partial(self._submitted, slot, N.CREATE_TOPICS,
                                       header.api_version, header.correlation_id))

    def _catalog_change(self, fn, req, header):
        # CreatePartitions / DeleteTopics (catalog.py): a task, as CreateTopics.
        slot = self._new_slot()
        task = self._loop.create_task(fn(self.server, req, header.api_version,
                                         self._loop.time()))
        task.add_done_callback(partial(self._submitted, slot, header.api_key,
                                       header.api_version, header.correlation_id))

    # ---- authorized in part (authz.Verdict with a post)
    def _run_post(self, req, header, key, post):
        """Run the authorized part of a request and answer post(response)."""
        version, corr, node = header.api_version, header.correlation_id, self._node
        if key == N.METADATA:              # per principal: not from the shared cache
            self._answer(post(N.metadata(req, version, node)), version, corr)
        elif key in (N.FIND_COORDINATOR, N.LIST_OFFSETS, N.DESCRIBE_CLUSTER):
            fn = {N.FIND_COORDINATOR: N.find_coordinator, N.LIST_OFFSETS: N.list_offsets,
                  N.DESCRIBE_CLUSTER: N.describe_cluster}[key]
            self._answer(post(fn(req, version, node)), version, corr)
        elif key == N.PRODUCE:
            resp = N.produce(req, version, node)
            if resp is not None:
                self._answer(post(resp), version, corr)
        elif key == N.FETCH:               # a refused topic: answered now, not held
            self._answer(post(N.fetch(req, version, node)[0]), version, corr)
        elif key in (N.CREATE_TOPICS, N.CREATE_PARTITIONS, N.DELETE_TOPICS):
            if key == N.CREATE_TOPICS:
                coro = self.server.create_topics(req, version)
            else:
                fn = create_partitions if key == N.CREATE_PARTITIONS else delete_topics
                coro = fn(self.server, req, version, self._loop.time())
            slot = self._new_slot()
            task = self._loop.create_task(coro)
            task.add_done_callback(partial(self._submitted, slot, key, version, corr,
                                           post=post))
        elif self._shards.serves(key):
            self._group_request(req, header, key, post=post)
        else:                               # a bug in authz's table
            self._bad("api key %d has an authorization merge but no handler; closing" % key,
                      level=logging.ERROR)

    # ---- SASL (security/sasl.py has the exchange; this is the wire)
    def _sasl_handshake(self, req, header):
        version, corr = header.api_version, header.correlation_id
        if self._sasl is None:
            # Not a SASL listener (or re-authentication that is not allowed): Kafka's answer.
            self._answer(m.SaslHandshakeResponse(error_code=int(E.ILLEGAL_SASL_STATE),
                                                 mechanisms=[]), version, corr)
            return
        code, enabled = self._sasl.handshake(req.mechanism)
        self._answer(m.SaslHandshakeResponse(error_code=int(code), mechanisms=list(enabled)),
                     version, corr)
        if code == 0 and version == 0:
            # v0: the SASL tokens follow as bare size-prefixed frames, not SaslAuthenticate.
            self._raw_sasl = True
        elif self._sasl.failed:
            # An unknown mechanism, or a handshake in the middle of an exchange: the session
            # is over (a 34 after success leaves it authenticated, as Kafka).
            self._auth_failed(req.mechanism, None, self._sasl.failure_reason or
                              "SaslHandshake refused (error %d)" % code, log_it=False)

    def _sasl_authenticate(self, req, header):
        version, corr = header.api_version, header.correlation_id
        if self._sasl is None:
            self._answer(m.SaslAuthenticateResponse(
                error_code=int(E.ILLEGAL_SASL_STATE),
                error_message="SaslAuthenticate on a listener without SASL (%s)"
                % (self._listener or "PLAINTEXT"), auth_bytes=b""), version, corr)
            return
        if len(req.auth_bytes) > SASL_MAX_RECEIVE:      # a re-authentication's token
            self._bad("a %d-byte SASL token (at most %d); closing"
                      % (len(req.auth_bytes), SASL_MAX_RECEIVE))
            return
        step = self._sasl.authenticate(req.auth_bytes)
        self._answer(m.SaslAuthenticateResponse(
            error_code=int(step.error_code), error_message=step.error_message,
            auth_bytes=step.reply, session_lifetime_ms=step.session_lifetime_ms),
            version, corr)
        self._after_step(step)

    def _sasl_raw_token(self, frame: bytes):
        # The v0 handshake's bare token exchange: a failure closes without an answer.
        step = self._sasl.authenticate(frame)
        if step.error_code == 0:
            slot = self._new_slot()
            self._fill(slot, len(step.reply).to_bytes(4, "big") + step.reply)
        if step.done or step.error_code:
            self._raw_sasl = False
        self._after_step(step)

    def _after_step(self, step):
        if step.error_code:
            self._auth_failed(self._sasl.mechanism,
                              self._sasl.attempted_user,
                              step.error_message or "SASL exchange failed")
            return
        if step.done:
            if not self._authed:
                self._splitter.raise_limit(max(self.server.config.max_frame_bytes,
                                               self._splitter.max_frame_bytes))
            self._authed = True
            if self._sasl.principal != self.principal:
                self._set_principal(self._sasl.principal)
            self._reauth_at = (self._loop.time() + step.session_lifetime_ms / 1000.0
                               if step.session_lifetime_ms > 0 else 0.0)
            log.debug("client %s authenticated as %s (%s)", self.peer, self.principal,
                      self._sasl.mechanism)

    def _auth_failed(self, mechanism, user, why: str, log_it: bool = True):
        """Answered already; stop reading, and close after the failed-authentication delay
        (Kafka's connection.failed.authentication.delay.ms), so a client guessing
        passwords gets one try per connection and per delay."""
        if log_it:
            self._access.failures.note(self.peer, str(self._listener), mechanism, user, why)
        self.stop_reading()
        self._bad_logged = True            # logged above (rate-limited), not again by _bad
        delay = self._access.config.failed_auth_delay_ms / 1000.0
        self._loop.call_later(delay, self._bad, why)

    # ---- security admin (security/admin.py plans; server/access.py stores and applies)
    def _security_read(self, fn, req, header):
        self._answer(fn(req, header.api_version, self._access.state), header.api_version,
                     header.correlation_id)

    def _security_change(self, fn, what, req, header):
        version, corr = header.api_version, header.correlation_id
        slot = self._new_slot()
        task = self._loop.create_task(self._access.change(
            lambda state: fn(req, version, state), _fail_results,
            "%s by %s from %s" % (what, self.principal, self.peer)))
        task.add_done_callback(partial(self._submitted, slot, header.api_key, version, corr))

    # ---- completion of tasks
    def _submitted(self, slot, api_key, version, corr, task, post=None):
        if self.closing:
            if not task.cancelled() and task.exception() is not None:
                log.error("request from %s (api key %d v%d) failed after the connection "
                          "closed", self.peer, api_key, version, exc_info=task.exception())
            return
        if task.cancelled():
            exc = asyncio.CancelledError()
        else:
            exc = task.exception()
        if exc is None:
            resp = task.result()
            data = self._encode(resp if post is None else post(resp), version, corr)
            if data is not None:
                self._fill(slot, data)
            return
        log.error("request from %s (api key %d v%d) failed", self.peer, api_key, version,
                  exc_info=exc if not isinstance(exc, asyncio.CancelledError) else None)
        self._internal_error(slot, api_key, version, corr, exc)

    def _internal_error(self, slot, api_key, version, corr, exc):
        """Answer a request whose handling raised: UNKNOWN_SERVER_ERROR where its response
        has a request-wide error code, else close (an empty answer would read as success)."""
        resp = N.top_level_error_response(api_key, version, E.UNKNOWN_SERVER_ERROR,
                                          "internal error: %s" % type(exc).__name__)
        if resp is None:
            self._bad("cannot answer api key %d v%d after an internal error (%s); closing"
                      % (api_key, version, type(exc).__name__), level=logging.ERROR)
            return
        data = self._encode(resp, version, corr)
        if data is not None:
            self._fill(slot, data)


def _fail_results(resp, code: int, message: str):
    """A security change that could not be stored: every result that said success says
    ``code`` instead (server/access.py NodeAccess.change)."""
    for name in ("results", "filter_results"):
        for r in getattr(resp, name, None) or ():
            if r.error_code == 0:
                r.error_code, r.error_message = code, message
                if hasattr(r, "matching_acls"):
                    r.matching_acls = []
    return resp
