"""A minimal Kafka wire client for the server tests, built on our own codec
(encode_request_frame / decode_response_frame): pipelined sends, responses read in order."""
from __future__ import annotations

import asyncio
import struct

from groupcoord.protocol import decode_response_frame, encode_request_frame


class WireClient:
    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer
        self.corr = 0
        self.pending: dict = {}          # correlation id -> (api_key, version)

    @classmethod
    async def connect(cls, host: str, port: int) -> "WireClient":
        r, w = await asyncio.open_connection(host, port)
        return cls(r, w)

    def send(self, req, version: int, client_id: str = "test") -> int:
        self.corr += 1
        self.pending[self.corr] = (type(req).API_KEY, version)
        self.writer.write(encode_request_frame(req, version, self.corr, client_id))
        return self.corr

    def send_many(self, reqs) -> list:
        """Pipeline [(request, version)] in ONE write; returns their correlation ids."""
        frames, corrs = [], []
        for req, version in reqs:
            self.corr += 1
            self.pending[self.corr] = (type(req).API_KEY, version)
            frames.append(encode_request_frame(req, version, self.corr, "test"))
            corrs.append(self.corr)
        self.writer.write(b"".join(frames))
        return corrs

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def recv(self, timeout: float = 5.0):
        """-> (correlation id, response body) of the next response frame."""
        raw = await self.recv_frame(timeout)
        corr = struct.unpack(">i", raw[:4])[0]
        key, ver = self.pending.pop(corr)
        c, body = decode_response_frame(raw, key, ver)
        return c, body

    async def recv_frame(self, timeout: float = 5.0) -> bytes:
        async def read():
            n = struct.unpack(">i", await self.reader.readexactly(4))[0]
            return await self.reader.readexactly(n)
        return await asyncio.wait_for(read(), timeout)

    async def call(self, req, version: int, timeout: float = 5.0):
        corr = self.send(req, version)
        got, body = await self.recv(timeout)
        assert got == corr, (got, corr)
        return body

    async def closed(self, timeout: float = 5.0) -> bool:
        """True when the server closes the connection (EOF or reset) within timeout."""
        try:
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except asyncio.TimeoutError:
            return False
        if data:
            return await self.closed(timeout)   # drain responses written before the close
        return True

    async def close(self):
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
