"""HTTP client to the engines (shell): a small HTTP/1.1 keep-alive client on asyncio streams, with deadlines.

Every client request costs the frontend two engine legs, so their CPU decides its throughput. aiohttp's client
spends about 0.24 ms of CPU per request here (cookie, redirect, tracing and header machinery the legs never use);
this one about a third of that. It speaks exactly what the legs need: POST/GET with a body, responses framed by
Content-Length or chunked transfer coding, streamed or read whole, and connections kept per engine for reuse.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from . import codec
from .flows import Leg

_MAX_HEADER = 64 * 1024


class LegError(Exception):
    """A leg that produced no usable response: `reason` is timeout, connect or aborted."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass
class JsonReply:
    status: int
    data: Any
    raw: bytes
    content_type: str


def dumps(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def _split(url: str) -> tuple[str, int, str]:
    if not url.startswith("http://"):
        raise LegError("connect", f"{url}: only http:// engines are supported")
    rest = url[len("http://") :]
    authority, slash, path = rest.partition("/")
    if authority.startswith("["):
        host, _, port = authority[1:].partition("]:")
    else:
        host, _, port = authority.rpartition(":") if ":" in authority else (authority, "", "80")
    return host, int(port or 80), "/" + path if slash else "/"


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.used = False
        self.expired = False
        self._timer: asyncio.TimerHandle | None = None

    def arm(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """One timer for the whole leg (head, then every body read): at the deadline it aborts the connection, which
        ends whichever read is pending. Cheaper than an `asyncio.timeout_at` context per read (D246)."""
        self._timer = loop.call_at(deadline, self._expire)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        self.expired = True
        self.writer.transport.abort()

    def close(self) -> None:
        self.disarm()
        with contextlib.suppress(Exception):
            self.writer.close()


def _late() -> LegError:
    return LegError("timeout", "the engine's answer did not finish before the deadline")


class StreamReply:
    """A response whose body is read by the caller (whole or in chunks), then released or closed."""

    def __init__(self, client: EngineClient, key: tuple[str, int], conn: _Connection, status: int,
                 headers: dict[str, str]) -> None:  # fmt: skip
        self._client = client
        self._key = key
        self._conn: _Connection | None = conn
        self.status = status
        self.headers = headers
        self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        length = headers.get("content-length")
        self._remaining = int(length) if length is not None and not self._chunked else None
        self._keep = headers.get("connection", "").lower() != "close" and (self._chunked or self._remaining is not None)
        self._done = self._remaining == 0

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "application/json")

    async def _within(self, awaitable: Any) -> Any:
        """A read of the body, before the leg's deadline (the connection's timer aborts it when it passes)."""
        conn = self._conn
        try:
            return await awaitable
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, ValueError) as e:
            self.close()
            if conn is not None and conn.expired:
                raise _late() from None
            raise LegError("aborted", f"the engine's answer broke off: {e!r}") from e
        except BaseException:  # cancelled (the client left): nobody reads the rest of this answer
            self.close()
            raise

    async def iter_any(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            return
        reader = conn.reader
        while not self._done:
            if self._chunked:
                line = await self._within(reader.readuntil(b"\r\n"))
                size = int(line.split(b";", 1)[0], 16)
                if size == 0:
                    while (await self._within(reader.readuntil(b"\r\n"))) != b"\r\n":
                        pass  # trailers
                    self._done = True
                    break
                data = await self._within(reader.readexactly(size + 2))
                yield data[:-2]
            elif self._remaining is not None:
                data = await self._within(reader.read(min(self._remaining, 65536)))
                if not data:
                    self.close()
                    if conn.expired:
                        raise _late()
                    raise LegError("aborted", "the engine closed the connection mid-answer")
                self._remaining -= len(data)
                self._done = self._remaining == 0
                yield data
            else:
                data = await self._within(reader.read(65536))
                if not data:
                    if conn.expired:  # the timer's abort, not the engine's end of the body
                        self.close()
                        raise _late()
                    self._done = True
                    break
                yield data
        self.release()

    async def read(self) -> bytes:
        conn = self._conn
        if conn is not None and self._remaining:
            # A body framed by Content-Length, the engines' usual answer: one read, no chunk loop.
            data: bytes = await self._within(conn.reader.readexactly(self._remaining))
            self._remaining = 0
            self._done = True
            self.release()
            return data
        parts = [chunk async for chunk in self.iter_any()]
        return b"".join(parts)

    def release(self) -> None:
        """Back to the pool when the body was read to its end and the engine keeps the connection; else closed."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        conn.disarm()
        if self._done and self._keep and not conn.expired:
            self._client._put(self._key, conn)
        else:
            conn.close()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class EngineClient:
    def __init__(self, connect_timeout: float, max_connections_per_engine: int) -> None:
        self._connect_timeout = connect_timeout
        self._max_idle = max_connections_per_engine
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        # The loop `start` ran on. Python 3.11's get_running_loop makes a getpid system call on every call.
        return self._loop or asyncio.get_running_loop()

    async def close(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()

    def _put(self, key: tuple[str, int], conn: _Connection) -> None:
        idle = self._idle.setdefault(key, [])
        if len(idle) < self._max_idle and not conn.reader.at_eof():
            conn.used = True
            idle.append(conn)
        else:
            conn.close()

    async def _connection(self, key: tuple[str, int], deadline: float) -> _Connection:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.reader.at_eof() and not conn.writer.is_closing():
                return conn
            conn.close()
        loop = self._running_loop()
        budget = max(min(self._connect_timeout, deadline - loop.time()), 0.001)
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(key[0], key[1], limit=_MAX_HEADER), budget)
        except TimeoutError as e:
            raise LegError("connect", f"{key[0]}:{key[1]}: no connection within {budget:.1f} s") from e
        except OSError as e:
            raise LegError("connect", f"{key[0]}:{key[1]}: {e}") from e
        return _Connection(reader, writer)

    async def request(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str], seconds: float
    ) -> StreamReply:
        loop = self._running_loop()
        deadline = loop.time() + max(seconds, 0.001)
        host, port, path = _split(url)
        key = (host, port)
        head = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None:
            head.append(f"Content-Length: {len(body)}")
        payload = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b"")
        for attempt in (0, 1):
            conn = await self._connection(key, deadline)
            reused = conn.used
            conn.arm(loop, deadline)
            try:
                conn.writer.write(payload)
                head_bytes = await conn.reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as e:
                conn.close()
                if conn.expired:
                    raise LegError("timeout", f"{method} {url} gave no answer within {seconds:.1f} s") from None
                # An idle connection the engine had closed: nothing reached it, so one retry on a fresh one is safe.
                if reused and attempt == 0 and isinstance(e, asyncio.IncompleteReadError) and not e.partial:
                    continue
                if reused and attempt == 0 and isinstance(e, ConnectionResetError):
                    continue
                raise LegError("connect", f"{method} {url}: {e!r}") from e
            except asyncio.LimitOverrunError as e:
                conn.close()
                raise LegError("aborted", f"{method} {url}: response headers too large") from e
            except BaseException:  # cancelled (the client left): the connection is in an unknown state
                conn.close()
                raise
            status_line, _, raw_headers = head_bytes.partition(b"\r\n")
            try:
                status = int(status_line.split(b" ", 2)[1])
            except (IndexError, ValueError):
                conn.close()
                raise LegError("aborted", f"{method} {url}: not an HTTP response: {status_line[:80]!r}") from None
            parsed: dict[str, str] = {}
            for line in raw_headers.split(b"\r\n"):
                name, sep, value = line.partition(b":")
                if sep:
                    parsed[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
            return StreamReply(self, key, conn, status, parsed)
        raise LegError("connect", f"{method} {url}: the engine closed every connection")  # pragma: no cover

    async def post_json(self, leg: Leg, deadline: float, parse: bool = True) -> JsonReply:
        reply = await self.request("POST", leg.url, codec.dumps_body(leg.body), leg.headers, deadline)
        raw = await reply.read()
        data = None
        if parse and raw:
            try:
                data = codec.loads_reply(raw)
            except ValueError:
                data = None
        return JsonReply(reply.status, data, raw, reply.content_type)

    async def open(self, leg: Leg, deadline: float) -> StreamReply:
        """A streaming response whose body the caller reads and then releases."""
        return await self.request("POST", leg.url, codec.dumps_body(leg.body), leg.headers, deadline)

    async def get(self, url: str, deadline: float) -> tuple[int, bytes]:
        reply = await self.request("GET", url, None, {}, deadline)
        return reply.status, await reply.read()
