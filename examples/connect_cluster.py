"""A 3-worker Kafka Connect cluster on the connect group protocol, against `groupcoord serve`.

    groupcoord serve --port 9092 --data-dir /tmp/gc \
        --group-config group.connect.heartbeat.interval.ms=500 \
        --group-config group.connect.session.timeout.ms=3000
    PYTHONPATH=src python examples/connect_cluster.py 127.0.0.1:9092

Starts workers w1, w2, w3 (asyncio tasks in this process), adds connector "orders" with 6
tasks, kills w2 (no leave: a crash), and prints who runs what every --every seconds. Watch w2's
work stay unassigned for the session timeout plus --delay-ms, then move to w1 and w3.
"""
import argparse
import asyncio
import sys
import time

from groupcoord.client import ConnectWorker


class Printer:
    """A WorkerRebalanceListener that prints each start / stop."""

    def __init__(self, name, t0):
        self.name, self.t0 = name, t0

    def _say(self, verb, connectors, tasks):
        what = connectors + ["%s-%d" % (t.connector, t.task) for t in tasks]
        print("%6.2fs  %s %s %s" % (time.monotonic() - self.t0, self.name, verb, ", ".join(what)),
              flush=True)

    def on_assigned(self, connectors, tasks):
        self._say("starts", connectors, tasks)

    def on_revoked(self, connectors, tasks):
        self._say("stops ", connectors, tasks)


def table(workers, t0, dead=()):
    cells = []
    for name, w in workers.items():
        if name in dead:
            cells.append("%s: (killed)" % name)
            continue
        conns, tasks = w.owned
        run = conns + ["%s-%d" % (t.connector, t.task) for t in tasks]
        cells.append("%s(e%d): %s" % (name, w.member_epoch, " ".join(run) or "-"))
    return "%6.2fs  " % (time.monotonic() - t0) + " | ".join(cells)


async def main(args):
    t0 = time.monotonic()
    workers = {n: ConnectWorker(args.bootstrap, args.group, listener=Printer(n, t0), member_id=n,
                                worker_url="http://%s:8083" % n,
                                scheduled_rebalance_max_delay_ms=args.delay_ms)
               for n in ("w1", "w2", "w3")}
    for w in workers.values():
        await w.start()
    print("%6.2fs  3 workers joined; adding connector orders with 6 tasks" % (time.monotonic() - t0))
    await workers["w1"].update_config({"orders": 6})

    dead = set()

    async def watch(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            print(table(workers, t0, dead), flush=True)
            await asyncio.sleep(args.every)

    await watch(args.settle)
    print("%6.2fs  killing w2 (no leave)" % (time.monotonic() - t0), flush=True)
    await workers["w2"].kill()
    dead.add("w2")
    alive = {n: w for n, w in workers.items() if n != "w2"}
    await watch(args.after)
    print(table(alive, t0))
    for w in alive.values():
        await w.stop()
    print("%6.2fs  done" % (time.monotonic() - t0))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("bootstrap", help="the groupcoord serve address, HOST:PORT")
    ap.add_argument("--group", default="connect-cluster", help="connect group id")
    ap.add_argument("--delay-ms", type=int, default=3000,
                    help="scheduled.rebalance.max.delay.ms (how long a departed worker's work "
                         "is held for it); default 3000")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds before the kill")
    ap.add_argument("--after", type=float, default=12.0, help="seconds watched after the kill")
    ap.add_argument("--every", type=float, default=1.0, help="print interval, seconds")
    try:
        asyncio.run(main(ap.parse_args()))
    except KeyboardInterrupt:
        sys.exit(130)
