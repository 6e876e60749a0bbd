"""A node's security state at run time: the credentials and ACLs replayed from the security
store (security/store.py), the Authorizer built from them, and the one path that changes them.

    access = NodeAccess(SecurityConfig(...), store)
    await access.load()                    # replay every record (at start)
    access.lookup(user, mechanism)         # SASL: the stored SCRAM credential or None
    access.authorizer / access.open        # authz.py's decisions; open: nothing to check
    await access.change(plan, fail)        # CreateAcls, DeleteAcls, AlterUserScramCredentials
    await access.poll()                    # cluster mode: other nodes' changes

A change is planned against the current state (security/admin.py: (response, records),
never mutating), appended durably to the store, and only then applied to the state and the
authorizer and answered; changes are serialised by a lock, so two concurrent requests never
plan against the same state. A failed append changes nothing and answers
KAFKA_STORAGE_ERROR (``fail``). Records appended by other nodes reach this one through
``poll`` (server/cluster_mode.py calls it every refresh period).

``open`` is True while there is no ACL and the node allows everybody when no ACL matches
(Kafka's allow.everyone.if.no.acl.found): the connection then skips authorization
entirely, so a node without ACLs pays nothing for it on the heartbeat path.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Optional

from groupcoord.protocol.error_codes import ErrorCode as E
from groupcoord.security.acl import Authorizer
from groupcoord.security.records import SecurityState
from groupcoord.server.listeners import SecurityConfig

__all__ = ["NodeAccess", "AuthFailureLog"]

log = logging.getLogger("groupcoord.security")


class AuthFailureLog:
    """Failed authentications, logged at most ``per_second`` lines a second; the lines
    dropped are counted in the next one. Never a password or a key: the peer, the
    mechanism and the user name the client gave."""

    def __init__(self, per_second: int = 10, clock=time.monotonic):
        self.per_second = per_second
        self._clock = clock
        self._window = -1.0
        self._in_window = 0
        self.suppressed = 0
        self.total = 0

    def note(self, peer: str, listener: str, mechanism: Optional[str],
             user: Optional[str], why: str) -> bool:
        """-> True when the line was written."""
        self.total += 1
        now = self._clock()
        if now - self._window >= 1.0:
            self._window, self._in_window = now, 0
        if self._in_window >= self.per_second:
            self.suppressed += 1
            return False
        self._in_window += 1
        more = ""
        if self.suppressed:
            more = " (%d more failed authentication(s) not logged)" % self.suppressed
            self.suppressed = 0
        log.warning("failed authentication from %s on %s: mechanism %s, user %r: %s%s",
                    peer, listener, mechanism or "-", user, why, more)
        return True


class NodeAccess:
    def __init__(self, config: SecurityConfig, store=None):
        self.config = config
        self.store = store
        self.state = SecurityState()
        self.authorizer = Authorizer(super_users=config.super_users,
                                     allow_if_no_acl=config.allow_if_no_acl)
        self.open = config.allow_if_no_acl
        self.failures = AuthFailureLog()
        self._lock: Optional[asyncio.Lock] = None

    # ------------------------------------------------------------------ state
    def _refresh(self) -> None:
        acls = self.state.acls
        self.authorizer.set_acls(acls)
        self.open = self.config.allow_if_no_acl and not acls

    async def load(self) -> None:
        if self.store is None:
            return
        records = await self.store.load()
        for key, value in records:
            self.state.apply(key, value)
        self._refresh()
        log.info("security: %d user(s), %d ACL(s) loaded%s", len(self.state.users),
                 len(self.state.acls),
                 "" if not self.open else "; no ACL and --allow-if-no-acl true: every "
                 "principal may do everything")

    async def poll(self) -> int:
        """Apply the records other nodes appended since the last load/poll -> how many."""
        if self.store is None:
            return 0
        records = await self.store.poll()
        if records:
            for key, value in records:
                self.state.apply(key, value)
            self._refresh()
            log.info("security: %d change(s) from other nodes applied (%d user(s), %d "
                     "ACL(s))", len(records), len(self.state.users), len(self.state.acls))
        return len(records)

    def lookup(self, user: str, mechanism: int):
        return self.state.credential(user, mechanism)

    # ------------------------------------------------------------------ changes
    async def change(self, plan: Callable, fail: Callable, what: str):
        """plan(state) -> (response, records); fail(response, code, message) -> the response
        answered when the records could not be stored."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.store is not None:
                # Another node's change first, so this one is planned against it.
                try:
                    await self.poll()
                except Exception as e:      # the store is away: the append fails too
                    log.debug("security poll before a change failed: %s", e)
            resp, records = plan(self.state)
            if not records:
                return resp
            if self.store is None:
                return fail(resp, int(E.SECURITY_DISABLED),
                            "this node has no security store")
            try:
                await self.store.append(records)
            except Exception as e:
                log.error("security: cannot store %s: %s", what, e)
                return fail(resp, int(E.KAFKA_STORAGE_ERROR),
                            "cannot persist the change: %s" % type(e).__name__)
            for key, value in records:
                self.state.apply(key, value)
            self._refresh()
            log.info("security: %s (%d record(s)); now %d user(s), %d ACL(s)", what,
                     len(records), len(self.state.users), len(self.state.acls))
            return resp

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()
