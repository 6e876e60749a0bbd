"""A raw uvloop echo server speaking Kafka framing: the ceiling for `groupcoord serve`.

    PYTHONPATH=src python benchmarks/echo_server.py --port 0
    -> prints "echo: listening on HOST:PORT" once bound; SIGTERM/SIGINT exit.

An asyncio.Protocol that splits what it reads into frames (the project's native
FrameSplitter, as the server does) and writes every complete frame back unchanged, all the
frames of one read in ONE transport.write. No decoding, no dispatch, no coordinator: the same
load generator (benchmarks/loadgen.py --echo) sends it the same heartbeat frames it sends to
the real server, so the ratio server/echo says how much of the loopback + event loop + client
budget the coordinator uses.
"""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from groupcoord.protocol import FrameSplitter

_SIZE = 4


class Echo(asyncio.Protocol):
    __slots__ = ("transport", "splitter")

    def connection_made(self, transport):
        self.transport = transport
        self.splitter = FrameSplitter()

    def data_received(self, data):
        frames = self.splitter.feed(data)
        if frames:
            out = []
            for f in frames:
                out.append(len(f).to_bytes(_SIZE, "big"))
                out.append(f)
            self.transport.write(b"".join(out))


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(Echo, host, port, backlog=1024)
    h, p = srv.sockets[0].getsockname()[:2]
    print("echo: listening on %s:%d" % (h, p), flush=True)
    stop = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    await stop
    srv.close()
    await srv.wait_closed()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="echo_server", description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    a = ap.parse_args(argv)
    try:
        import uvloop
        loop = uvloop.new_event_loop()
    except ImportError:          # pragma: no cover
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(serve(a.host, a.port))
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
