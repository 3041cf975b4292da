"""The engine client: framing, keep-alive reuse, a stale connection, deadlines (against a real aiohttp server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from disagg.frontend.client import EngineClient, LegError
from disagg.frontend.contract import Engine
from disagg.frontend.flows import Leg
from tests.unit.frontend.harness import free_port


async def _stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for i in range(3):
        await response.write(f"data: {i}\n\n".encode())
    await response.write_eof()
    return response


async def _slow(request: web.Request) -> web.Response:
    await asyncio.sleep(2)
    return web.json_response({})


async def _json(request: web.Request) -> web.Response:
    body = await request.json()
    return web.json_response({"echo": body, "rid": request.headers.get("X-Request-Id")})


async def _serve(keepalive_seconds: float) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/json", _json)
    app.router.add_post("/stream", _stream)
    app.router.add_post("/slow", _slow)
    app.router.add_post("/stall", _stall_after_one_chunk)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=keepalive_seconds)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async for url in _serve(0.3):
        yield url


@pytest.fixture
async def patient_server() -> AsyncIterator[str]:
    """Keeps idle connections for a minute."""
    async for url in _serve(60):
        yield url


def leg(url: str, body: dict[str, object] | None = None) -> Leg:
    engine = Engine("e", "decode", url, "127.0.0.1")
    return Leg(
        "decode", engine, "", {"X-Request-Id": "r1", "Content-Type": "application/json"}, body or {"a": 1}, False
    )


async def test_json_and_chunked_streams_over_one_kept_connection(server: str) -> None:
    client = EngineClient(1.0, 8)
    await client.start()
    reply = await client.post_json(leg(server + "/json", {"x": [1, 2]}), 5)
    assert reply.status == 200 and reply.data == {"echo": {"x": [1, 2]}, "rid": "r1"}
    stream = await client.open(leg(server + "/stream"), 5)
    chunks = [chunk async for chunk in stream.iter_any()]
    assert b"".join(chunks) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert sum(len(v) for v in client._idle.values()) == 1  # both answers came over the same connection
    await client.close()


async def test_a_connection_the_engine_closed_while_idle_is_retried_once(server: str) -> None:
    client = EngineClient(1.0, 8)
    await client.start()
    await client.post_json(leg(server + "/json"), 5)
    await asyncio.sleep(0.6)  # past the server's keep-alive: it closes the idle connection
    reply = await client.post_json(leg(server + "/json"), 5)
    assert reply.status == 200
    await client.close()


async def test_deadline_and_refused_connections_are_leg_errors(server: str) -> None:
    client = EngineClient(1.0, 8)
    await client.start()
    with pytest.raises(LegError) as timeout:
        await client.post_json(leg(server + "/slow"), 0.2)
    assert timeout.value.reason == "timeout"
    with pytest.raises(LegError) as refused:
        await client.post_json(leg(f"http://127.0.0.1:{free_port()}/json"), 1)
    assert refused.value.reason == "connect"
    await client.close()


async def _stall_after_one_chunk(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b"data: 0\n\n")
    await asyncio.sleep(2)
    await response.write_eof()
    return response


@pytest.fixture
async def raw_close_delimited() -> AsyncIterator[str]:
    """An engine whose body ends when it closes the connection (no length, not chunked), and that stalls."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\npartial")
        await writer.drain()
        await asyncio.sleep(2)
        writer.close()

    port = free_port()
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    yield f"http://127.0.0.1:{port}"
    server.close()


async def test_a_deadline_passing_mid_stream_is_a_timeout_not_a_short_answer(
    server: str, raw_close_delimited: str
) -> None:
    client = EngineClient(1.0, 8)
    await client.start()
    app_stream = await client.open(leg(server + "/stall"), 0.4)
    got: list[bytes] = []
    with pytest.raises(LegError) as chunked:
        async for chunk in app_stream.iter_any():
            got.append(chunk)
    assert chunked.value.reason == "timeout" and got == [b"data: 0\n\n"]
    delimited = await client.open(leg(raw_close_delimited + "/x"), 0.4)
    with pytest.raises(LegError) as ended_by_close:
        await delimited.read()
    assert ended_by_close.value.reason == "timeout"
    assert not any(client._idle.values()), "a connection cut by its deadline went back to the pool"
    await client.close()


async def test_a_leg_done_before_its_deadline_leaves_its_connection_usable_after_the_deadline(
    patient_server: str,
) -> None:
    server = patient_server
    client = EngineClient(1.0, 8)
    await client.start()
    await client.post_json(leg(server + "/json"), 0.2)
    (conn,) = [c for conns in client._idle.values() for c in conns]
    await asyncio.sleep(0.3)  # past the first leg's deadline, inside the server's keep-alive
    assert not conn.writer.is_closing() and not conn.expired
    reply = await client.post_json(leg(server + "/json", {"again": True}), 5)
    assert reply.data["echo"] == {"again": True}
    assert [c for conns in client._idle.values() for c in conns] == [conn]
    await client.close()


async def test_a_leg_cancelled_mid_answer_closes_its_connection(server: str) -> None:
    client = EngineClient(1.0, 8)
    await client.start()
    task = asyncio.ensure_future(client.post_json(leg(server + "/slow"), 5))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not any(client._idle.values())
    await client.close()
