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
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, List, Optional, Set, Tuple

from groupcoord.cluster.balance import shards_of, target
from groupcoord.cluster.leases import (Acquire, LeaseConfig, LeaseMachine, Load, Release, Renew,
                                       State, Unload)
from groupcoord.cluster.pg_leases import PgLeases, ShardRow

__all__ = ["ClusterNode", "STORE_LOG_EVERY_MS"]

log = logging.getLogger("groupcoord.cluster")

STORE_LOG_EVERY_MS = 10_000     # at most one line about store failures per this interval

# A node that leaves drops out of the others' live sets at once instead of a lease later, so
# they target its shards while it hands them off (they take each one when it is released).
_LEAVE = "DELETE FROM groupcoord_nodes WHERE node_id = $1"


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


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
                 shard_count: int, clock: Callable[[], int] = _monotonic_ms):
        self.node_id = node_id
        self.host = host
        self.port = port
        self.shard_count = shard_count
        self.shards = shards
        self.leases = PgLeases(pool, node_id, lease_ms, host=host, port=port)
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

    # ------------------------------------------------------------------ the server's view
    def brokers(self) -> List[Tuple[int, str, int]]:
        """(node_id, host, port) of the live nodes as last read, by node id, this one
        included."""
        return list(self._brokers)

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
        if row is None or row.owner is None or row.owner == self.node_id:
            return None
        if row.lease_left_ms is None or row.lease_left_ms <= 0:
            return None
        return row.owner if any(b[0] == row.owner for b in self._brokers) else None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Register the node (raises if the store cannot be reached), read the cluster once
        and start the background tasks."""
        if self._running:
            raise RuntimeError("node %d already started" % self.node_id)
        await asyncio.wait_for(self.leases.register(), self._call_timeout)
        self._running = True
        await self._refresh()
        self._spawn(self._run())
        self._refresh_task = self._spawn(self._refresher())
        log.info("node %d: joined the cluster at %s:%d (lease %d ms, %d shards, live nodes %s)",
                 self.node_id, self.host, self.port, self.config.lease_ms, self.shard_count,
                 [b[0] for b in self._brokers])

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
        await self._store("leave", self.leases.db.execute(_LEAVE, self.node_id))
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
        if await self._store("heartbeat", self.leases.heartbeat()) is _FAILED:
            return False
        live = await self._store("read nodes", self.leases.live_nodes())
        if live is _FAILED:
            return False
        rows = await self._store("read shards", self.leases.shards())
        if rows is _FAILED or self._closing:
            return False
        if all(b[0] != self.node_id for b in live):
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
        owners = target(self.shard_count, [b[0] for b in self._brokers],
                        [None if r is None else r.owner for r in by_shard])
        self.machine.set_target(shards_of(self.node_id, owners))
        self._wake.set()
        return True

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
