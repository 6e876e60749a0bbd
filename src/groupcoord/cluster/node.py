"""One node of a cluster: the glue between the lease machine (cluster/leases.py), the store's
lease and node-registry operations (cluster/pg_leases.py) and the shards this process serves
(runtime ShardSet: load_shard / unload_shard / loaded).

    node = ClusterNode(pool, shard_set, node_id=1, host="127.0.0.1", port=9101,
                       lease_ms=10_000, shard_count=50)
    shard_set = ShardSet(..., on_fenced=node.fenced)     # an append refused: the lease is gone
    await node.start()       # register, first heartbeat + read, background tasks
    node.brokers(); node.owner(shard); node.controller_id()    # the server's cluster view
    await node.close()       # leave, hand every shard off (unload, release), stop

Two background tasks:
- refresh, every renew period (lease/3): heartbeat the node row, read the live nodes and every
  shard's owner, and set the machine's target to this node's part of balance.target. Every
  node computes the same target from the same rows, so nobody hands targets out.
- the loop: tick the machine at its next_wakeup (or when an answer, a target or a fence
  arrives) and run the actions it returns. Store calls (Acquire / Renew / Release) and
  ShardSet calls (Load / Unload) each run as a task of their own and report their outcome
  back, so a slow or hung store never delays a deadline: the machine unloads a shard it could
  not renew on the local clock, before the store's lease can run out.

Load and Unload of one shard run in the order the machine asked for them (a lock per shard), so
an Unload never overtakes the Load it undoes. A Load that fails (LeaseLostError: another node
took the shard meanwhile; or the store failed while replaying) is reported as fenced: the
machine drops that epoch and asks again later.

Store failures are failed calls to the machine (it retries renewals after retry_ms and gives
up on a lease at its deadline); the refresh backs off exponentially up to the renew period.
They are logged once per STORE_LOG_EVERY_MS (with the number of calls that failed), and once
when the store answers again; the node never stops because of them.

One process per node id (the id is also the shards' owner in the store, so two processes with
one id would share leases). At start the node takes its id's row for its incarnation
(PgLeases.register). A row of another incarnation seen within the lease is a node that died
less than a lease ago or a live node with the same id: the node watches it for up to two
leases; once it is older than the lease the id is taken, and if it is heartbeated meanwhile
(last_seen moves) start raises NodeIdInUseError (serve: exit status 2). A running node whose
heartbeat finds its row taken by another incarnation cannot tell which of the two is wrong: it
logs an ERROR, stops heartbeating and hands its shards off (unload, release; the epochs fence
any write of either), and serves nothing until it is restarted.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, List, Optional, Set, Tuple

from groupcoord.cluster.balance import shards_of, target
from groupcoord.cluster.leases import (Acquire, LeaseConfig, LeaseMachine, Load, Release, Renew,
                                       State, Unload)
from groupcoord.cluster.pg_leases import IdHolder, PgLeases, ShardRow

__all__ = ["ClusterNode", "NodeIdInUseError", "STORE_LOG_EVERY_MS"]

log = logging.getLogger("groupcoord.cluster")

STORE_LOG_EVERY_MS = 10_000     # at most one line about store failures per this interval



def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def _holder(h: IdHolder) -> str:
    when = h.last_seen.isoformat(timespec="milliseconds") if h.last_seen is not None else "?"
    return "%s:%d, last seen %d ms ago (%s by the store's clock)" % (h.host, h.port,
                                                                     h.seen_ms_ago, when)


class NodeIdInUseError(RuntimeError):
    """Another live process holds this node id in the store."""

    def __init__(self, node_id: int, holder: IdHolder):
        super().__init__(
            "node id %d is in use by another running node at %s: give every node its own "
            "--node-id (a node that died frees its id once it has not been seen for the "
            "lease)" % (node_id, _holder(holder)))
        self.node_id = node_id
        self.holder = holder


class _StoreHealth:
    """Failed store calls, logged once per interval; the first answer after them, once."""

    def __init__(self, node_id: int, clock: Callable[[], int]):
        self.node_id = node_id
        self.clock = clock
        self.failed = 0             # calls failed since the last line
        self.down = False
        self.next_log: Optional[int] = None

    def failure(self, what: str, exc: BaseException) -> None:
        self.failed += 1
        self.down = True
        now = self.clock()
        if self.next_log is None or now >= self.next_log:
            why = (str(exc).strip().splitlines() or [""])[0] or type(exc).__name__
            log.warning("node %d: store call failed (%s: %s); retrying with backoff "
                        "(%d failed call(s) since the last message)",
                        self.node_id, what, why, self.failed)
            self.failed = 0
            self.next_log = now + STORE_LOG_EVERY_MS

    def success(self) -> None:
        if self.down:
            log.info("node %d: the store answers again (%d failed call(s) since the last "
                     "message)", self.node_id, self.failed)
            self.down = False
            self.failed = 0
            self.next_log = None


_FAILED = object()      # a store call that raised or timed out


class ClusterNode:
    def __init__(self, pool, shards, *, node_id: int, host: str, port: int, lease_ms: int,
                 endpoints: Optional[dict] = None,
                 shard_count: int, clock: Callable[[], int] = _monotonic_ms):
        self.node_id = node_id
        self.host = host
        self.port = port
        self.shard_count = shard_count
        self.shards = shards
        self.leases = PgLeases(pool, node_id, lease_ms, host=host, port=port,
                               endpoints=endpoints)
        # {node id: {listener: (host, port)}} of the live nodes with several listeners.
        self._endpoints: dict = {node_id: dict(endpoints)} if endpoints else {}
        self.machine = LeaseMachine(shard_count, LeaseConfig(lease_ms=lease_ms))
        self.config = self.machine.config
        self._clock = clock
        self._health = _StoreHealth(node_id, clock)
        # An answer later than a lease cannot extend anything (the machine drops it).
        self._call_timeout = lease_ms / 1000.0
        self._brokers: List[Tuple[int, str, int]] = [(node_id, host, port)]
        self._rows: List[Optional[ShardRow]] = [None] * shard_count
        self._locks = [asyncio.Lock() for _ in range(shard_count)]
        self._tasks: Set[asyncio.Task] = set()
        self._refresh_task: Optional[asyncio.Task] = None
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._running = False
        self._closing = False
        self._warned_rows = False
        self.displaced: Optional[IdHolder] = None   # another incarnation took the node id

    # ------------------------------------------------------------------ the server's view
    def brokers(self, listener: Optional[str] = None) -> List[Tuple[int, str, int]]:
        """(node_id, host, port) of the live nodes as last read, by node id, this one
        included; with ``listener``, each node's address on that listener (a node that
        registered no such listener: its main address)."""
        if listener is None or not self._endpoints:
            return list(self._brokers)
        out = []
        for i, h, p in self._brokers:
            h, p = self._endpoints.get(i, {}).get(listener, (h, p))
            out.append((i, h, p))
        return out

    def controller_id(self) -> int:
        return self._brokers[0][0]

    def serving(self, shard: int) -> bool:
        """May this node answer a request of the shard now (its lease machine's view at
        this instant)? Checked per request: a node that was paused past its deadline reads
        the requests queued in its socket before the tick that unloads the shard, and must
        not answer them from its stale state (simulation, mutation serve-after-lease-expiry)."""
        return self.machine.serving(shard, self._clock())

    def owner(self, shard: int) -> Optional[int]:
        """The node serving the shard as far as this node knows; None while it moves (no
        owner, an expired lease, an owner not live, or this node not serving it yet)."""
        if self.machine.serving(shard, self._clock()):
            return self.node_id
        row = self._rows[shard]
        if row is None or row.owner is None or (row.owner == self.node_id
                                                and self.displaced is None):
            return None
        if row.lease_left_ms is None or row.lease_left_ms <= 0:
            return None
        return row.owner if any(b[0] == row.owner for b in self._brokers) else None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Register the node (raises if the store cannot be reached; NodeIdInUseError if
        another live process holds the node id), read the cluster once and start the
        background tasks."""
        if self._running:
            raise RuntimeError("node %d already started" % self.node_id)
        await self._take_id()
        self._running = True
        await self._refresh()
        self._spawn(self._run())
        self._refresh_task = self._spawn(self._refresher())
        log.info("node %d: joined the cluster at %s:%d (lease %d ms, %d shards, live nodes %s)",
                 self.node_id, self.host, self.port, self.config.lease_ms, self.shard_count,
                 [b[0] for b in self._brokers])

    async def _take_id(self) -> None:
        """Take the node id's row. Held by another incarnation seen within the lease: poll
        until the row is older than the lease (its process died: take it) or is heartbeated
        (a live process with the same id: NodeIdInUseError); two leases at most, since a
        live node heartbeats every lease/3."""
        first: Optional[IdHolder] = None
        deadline = 0
        lease = self.config.lease_ms
        while True:
            holder = await asyncio.wait_for(self.leases.register(), self._call_timeout)
            if holder is None:
                if first is not None:
                    log.info("node %d: the node id's previous holder was not seen for the "
                             "lease: taking the id", self.node_id)
                return
            if first is None:
                first, deadline = holder, self._clock() + 2 * lease
                log.warning("node %d: the store's row of node id %d belongs to another "
                            "process (%s); waiting until it is older than the lease (a node "
                            "that died) or is heartbeated (a live node with the same id)",
                            self.node_id, self.node_id, _holder(holder))
            elif (holder.incarnation != first.incarnation or holder.last_seen != first.last_seen
                    or self._clock() >= deadline):
                raise NodeIdInUseError(self.node_id, holder)
            await asyncio.sleep(max(50, lease // 10) / 1000.0)

    async def close(self) -> None:
        """Leave the cluster: stop heartbeating, drop out of the live nodes, hand every shard
        off (unload, then release), stop. Bounded: a lease the store cannot confirm runs out
        on the local clock within lease_ms."""
        if not self._running or self._closing:
            return
        self._closing = True
        # No heartbeat may re-create the row deleted next (a slower hand-off otherwise).
        self._refresh_task.cancel()
        await asyncio.gather(self._refresh_task, return_exceptions=True)
        # Out of the others' live sets at once instead of a lease later, so they target its
        # shards while it hands them off (they take each one when it is released).
        await self._store("leave", self.leases.leave())
        self.machine.set_target(())
        self._wake.set()
        bound = 2 * self.config.lease_ms / 1000.0 + 5.0
        try:
            await asyncio.wait_for(self._idle.wait(), bound)
        except asyncio.TimeoutError:
            log.warning("node %d: shards %s not handed off within %.1f s of closing",
                        self.node_id, [i for i in range(self.shard_count)
                                       if self.machine.state(i) is not State.NOT_OWNED], bound)
        await self._stop_tasks()
        self._running = False
        log.info("node %d: left the cluster", self.node_id)

    async def _stop_tasks(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def fenced(self, index: int, epoch: int) -> None:
        """ShardSet's on_fenced: an append of the shard at epoch was refused by the store."""
        if not self._running:
            return
        owned = self.machine.state(index) in (State.OWNED, State.RELEASING) \
            and self.machine.epoch(index) == epoch
        actions = self.machine.fenced(index, epoch, self._clock())
        if owned:
            log.info("node %d: shard %d fenced at epoch %d (another node holds its lease): "
                     "unloading", self.node_id, index, epoch)
        self._dispatch(actions)

    # ------------------------------------------------------------------ background tasks
    def _spawn(self, coro) -> asyncio.Task:
        t = asyncio.get_running_loop().create_task(self._guard(coro))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    async def _guard(self, coro) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception:       # a bug: say so, and keep the node running
            log.exception("node %d: internal error in the lease glue", self.node_id)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            self._dispatch(self.machine.tick(self._clock()))
            if self._closing and self.machine.idle():
                self._idle.set()
            now = self._clock()
            delay = max(1, self.machine.next_wakeup(now) - now) / 1000.0
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except asyncio.TimeoutError:
                pass

    async def _refresher(self) -> None:
        failures = 0
        while True:
            if await self._refresh():
                failures = 0
                delay = self.config.renew_every_ms
            else:
                failures += 1
                delay = min(self.config.retry_ms * 2 ** min(failures - 1, 16),
                            self.config.renew_every_ms)
            await asyncio.sleep(delay / 1000.0)

    async def _refresh(self) -> bool:
        """Heartbeat, read the live nodes and the owners, set the target; False: a call
        failed (the previous view and target stay)."""
        if self.displaced is None:
            mine = await self._store("heartbeat", self.leases.heartbeat())
            if mine is _FAILED:
                return False
            if not mine:
                holder = await self._store("read the node row", self.leases.holder())
                self._displace(holder if isinstance(holder, IdHolder) else None)
        rows = await self._store("read nodes", self.leases.live_rows())
        if rows is _FAILED:
            return False
        live = [(r.node_id, r.host, r.port) for r in rows]
        ends = {r.node_id: r.listeners() for r in rows if r.endpoints}
        if self.leases.endpoints and self.node_id not in ends:
            ends[self.node_id] = self._endpoints.get(self.node_id, {})
        self._endpoints = ends
        rows = await self._store("read shards", self.leases.shards())
        if rows is _FAILED or self._closing:
            return False
        if self.displaced is None and all(b[0] != self.node_id for b in live):
            live.append((self.node_id, self.host, self.port))   # it has just heartbeated
        self._brokers = sorted(live)
        by_shard: List[Optional[ShardRow]] = [None] * self.shard_count
        for r in rows:
            if 0 <= r.shard < self.shard_count:
                by_shard[r.shard] = r
        if len(rows) != self.shard_count and not self._warned_rows:
            self._warned_rows = True
            log.warning("node %d: the store has %d shard rows, this node runs %d shards",
                        self.node_id, len(rows), self.shard_count)
        self._rows = by_shard
        if self.displaced is not None:
            return True             # the view stays current; the target stays empty
        owners = target(self.shard_count, [b[0] for b in self._brokers],
                        [None if r is None else r.owner for r in by_shard])
        self.machine.set_target(shards_of(self.node_id, owners))
        self._wake.set()
        return True

    def _displace(self, holder: Optional[IdHolder]) -> None:
        """Another incarnation took the node id's row: either it or this process was started
        with the wrong id, which neither can tell. Stop: no heartbeat, every shard handed off
        (the epochs fence whatever either of the two still writes)."""
        self.displaced = holder or IdHolder("?", 0, None, None, None, -1)
        log.error("node %d: another process took node id %d in the store (%s): two nodes run "
                  "with --node-id %d; this node stops heartbeating and hands off its shards "
                  "%s, and serves none until restarted with its own id",
                  self.node_id, self.node_id,
                  _holder(holder) if holder is not None else "its row is gone or unreadable",
                  self.node_id, [i for i in range(self.shard_count)
                                 if self.machine.state(i) is not State.NOT_OWNED])
        self.machine.set_target(())
        self._wake.set()

    async def _store(self, what: str, call):
        """The store call's result, or _FAILED (logged once per interval)."""
        try:
            result = await asyncio.wait_for(call, self._call_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:        # asyncpg, OS and timeout errors: a failed call
            self._health.failure(what, exc)
            return _FAILED
        self._health.success()
        return result

    # ------------------------------------------------------------------ actions
    def _dispatch(self, actions) -> None:
        for a in actions:
            if isinstance(a, Acquire):
                self._spawn(self._acquire(a))
            elif isinstance(a, Renew):
                self._spawn(self._renew(a))
            elif isinstance(a, Release):
                self._spawn(self._release(a))
            elif isinstance(a, Load):
                self._spawn(self._load(a))
            elif isinstance(a, Unload):
                if a.reason in ("lost", "expired"):
                    log.info("node %d: shard %d lost at epoch %d (%s): unloading",
                             self.node_id, a.shard, a.epoch,
                             "its lease ran out before a renewal was confirmed"
                             if a.reason == "expired" else "the store has another tenure")
                self._spawn(self._unload(a))
        if actions:
            self._wake.set()

    async def _acquire(self, a: Acquire) -> None:
        epoch = await self._store("acquire shard %d" % a.shard, self.leases.acquire(a.shard))
        self._dispatch(self.machine.acquired(a.shard, a.attempt,
                                             None if epoch is _FAILED else epoch,
                                             self._clock()))

    async def _renew(self, a: Renew) -> None:
        renewed = await self._store("renew %d lease(s)" % len(a.epochs),
                                    self.leases.renew(a.epochs))
        self._dispatch(self.machine.renewed(a.attempt, None if renewed is _FAILED else renewed,
                                            self._clock()))

    async def _release(self, a: Release) -> None:
        done = await self._store("release shard %d" % a.shard,
                                 self.leases.release(a.shard, a.epoch))
        if done is _FAILED:
            self._dispatch(self.machine.released(a.shard, a.epoch, self._clock(), error=True))
            return
        if done:
            log.info("node %d: shard %d released at epoch %d", self.node_id, a.shard, a.epoch)
        else:
            log.info("node %d: shard %d lost at epoch %d (no longer ours when released)",
                     self.node_id, a.shard, a.epoch)
        self._dispatch(self.machine.released(a.shard, a.epoch, self._clock()))

    async def _load(self, a: Load) -> None:
        async with self._locks[a.shard]:
            m = self.machine
            if m.state(a.shard) is not State.OWNED or m.epoch(a.shard) != a.epoch:
                return          # lost before it could load; its Unload follows
            t0 = self._clock()
            try:
                await self.shards.load_shard(a.shard, a.epoch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("node %d: loading shard %d at epoch %d failed (%s): giving the "
                            "epoch up", self.node_id, a.shard, a.epoch,
                            str(exc).strip() or type(exc).__name__)
                self._dispatch(m.fenced(a.shard, a.epoch, self._clock()))
                return
            log.info("node %d: shard %d acquired at epoch %d (loaded in %d ms)",
                     self.node_id, a.shard, a.epoch, self._clock() - t0)

    async def _unload(self, a: Unload) -> None:
        async with self._locks[a.shard]:
            try:
                await self.shards.unload_shard(a.shard)
            except asyncio.CancelledError:
                raise
            except Exception:   # it stopped serving all the same; the next load starts over
                log.exception("node %d: unloading shard %d failed", self.node_id, a.shard)
            self._dispatch(self.machine.unloaded(a.shard, self._clock()))
