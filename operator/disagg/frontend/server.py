"""The frontend's HTTP server (shell): executes the legs the pure flow core decides and streams the answer back.

Client API: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health (liveness), GET /ready
(a complete pair exists), GET /metrics. Admin API (the admin port, or the main one when it is 0):
GET /disagg/v1/pairs, POST /disagg/v1/probe, POST /disagg/v1/drain, POST /disagg/v1/undrain.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from . import codec, flows
from .client import EngineClient, JsonReply, LegError, StreamReply, dumps
from .config import FrontendConfig
from .contract import CONCURRENT_FLOWS, Engine
from .conversations import ConversationStore
from .flows import ApiKind, ClientError, ClientRequest, FlowPlan, Leg
from .metrics import Metrics
from .probe import ProbeResult, decode_transfer_counters, kv_transferred, parse_metrics, probe_request
from .selection import NoPair, Pair, Selector
from .sse import SseParser

log = logging.getLogger("disagg.frontend")
JSON = "application/json"


PROBE_SCRAPE_SECONDS = 5.0
"""Bound of each of a probe's two scrapes of decode's /metrics (before and after the request, which has the
round's deadline): the operator waits deadline + 2 x this + a margin for the answer."""


@dataclass
class Result:
    """An answer ready to be written: a whole body or a stream. `finish` runs once it has been sent (or dropped)."""

    status: int
    content_type: str
    headers: dict[str, str]
    body: bytes | None = None
    stream: AsyncIterator[bytes] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    finish: Callable[[bool], Awaitable[None]] | None = None


def _error(status: int, message: str, kind: str = "invalid_request_error") -> Result:
    body = {"error": {"message": message, "type": kind, "code": status}}
    return Result(status, JSON, {}, dumps(body))


def _reply(reply: JsonReply, headers: dict[str, str]) -> Result:
    return Result(reply.status, reply.content_type, headers, reply.raw)


def _nonces() -> Callable[[], str]:
    """128 random bits per request (its id; the first 32 also pick a DP rank), from a generator seeded once by the
    OS: unique across frontends without a getrandom system call per request (2% of the CPU, D247). Request ids are
    not secrets: the engines' side channels are not reachable by clients, and clients see their own id anyway."""
    bits = random.Random(os.urandom(32)).getrandbits
    return lambda: f"{bits(128):032x}"


class Frontend:
    def __init__(
        self,
        config: FrontendConfig,
        selector: Selector | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        nonce: Callable[[], str] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.config = config
        self.selector = selector or Selector(config.prefill_policy, config.decode_policy, config.revision_policy)
        self.store = ConversationStore(config.conversation_ttl, config.max_conversations, config.decoder_blocks_ttl)
        self.clock = clock
        self.nonce = nonce or _nonces()
        self.metrics = metrics or Metrics()
        self.client = EngineClient(config.connect_timeout, config.max_connections_per_engine)
        self._expired_seen = 0
        self._evicted_seen = 0
        self._background: set[asyncio.Future[Any]] = set()

    # ---- engines ----------------------------------------------------------------------------------------------
    def set_engines(self, engines: list[Engine]) -> None:
        self.selector.update(engines)
        self.metrics.engines.clear()
        counts: dict[tuple[str, str], int] = {}
        for engine in engines:
            if not engine.candidate:  # candidates serve nothing until the operator admits them
                counts[(engine.role, engine.revision)] = counts.get((engine.role, engine.revision), 0) + 1
        for (role, revision), count in counts.items():
            self.metrics.engines.labels(role, revision).set(count)  # not cached: clear() above drops children

    # ---- application ------------------------------------------------------------------------------------------
    def app(self, admin: bool) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/ready", self._ready)
        app.router.add_get("/metrics", self._metrics)
        if admin:
            self.add_admin_routes(app)
        return app

    def runner(self, admin: bool) -> web.AppRunner:
        """The OpenAI endpoint's server. A client that goes away cancels its request's handler, and with it the
        engine legs in flight, so the engines abort them instead of computing answers nobody reads."""
        return web.AppRunner(self.app(admin), access_log=None, handle_signals=False, handler_cancellation=True)

    def admin_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        self.add_admin_routes(app)
        return app

    def add_admin_routes(self, app: web.Application) -> None:
        app.router.add_get("/disagg/v1/pairs", self._pairs)
        app.router.add_post("/disagg/v1/probe", self._probe)
        app.router.add_post("/disagg/v1/drain", self._drain)
        app.router.add_post("/disagg/v1/undrain", self._undrain)

    async def start(self) -> None:
        await self.client.start()

    async def close(self) -> None:
        await self.client.close()

    # ---- client handlers --------------------------------------------------------------------------------------
    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "completions")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "chat")

    async def _handle(self, request: web.Request, api: ApiKind) -> web.StreamResponse:
        started = self.clock()
        flow = self.config.flow
        self.metrics.at(self.metrics.inflight, "client").inc()
        result: Result | None = None
        try:
            try:
                body = codec.loads_request(await request.read())
            except ValueError:
                result = _error(400, "the request body is not valid JSON")
            else:
                try:
                    creq = flows.parse_client_request(api, body, request.headers)
                except ClientError as e:
                    result = _error(e.status, str(e))
                else:
                    result = await self.serve(creq, started)
            return await self._write(request, result, started)
        finally:
            self.metrics.at(self.metrics.inflight, "client").dec()
            if result is not None:
                self.metrics.at(self.metrics.requests, flow, api, str(result.status)).inc()
                self.metrics.at(self.metrics.request_seconds, flow, api).observe(self.clock() - started)

    async def _write(self, request: web.Request, result: Result, started: float) -> web.StreamResponse:
        headers = {"Content-Type": result.content_type, **result.headers}
        completed = False
        try:
            if result.stream is None:
                response = web.Response(status=result.status, body=result.body or b"", headers=headers)
                self._observe_added(result, started)
                completed = True
                return response
            stream_response = web.StreamResponse(status=result.status, headers=headers)
            await stream_response.prepare(request)
            first = True
            async for chunk in result.stream:
                await stream_response.write(chunk)
                if first:
                    first = False
                    self._observe_added(result, started)
            await stream_response.write_eof()
            completed = True
            return stream_response
        finally:
            if result.finish is not None:
                await result.finish(completed)

    def _observe_added(self, result: Result, started: float) -> None:
        """The frontend's own share of the time to the first byte: everything but the engines' answers."""
        timing = result.info.get("timing")
        if result.status != 200 or not isinstance(timing, dict):
            return
        engines = sum(timing.values())
        self.metrics.at(self.metrics.added_seconds, self.config.flow).observe(
            max(self.clock() - started - engines, 0.0)
        )

    async def _models(self, request: web.Request) -> web.Response:
        for role in ("render", "decode", "prefill"):
            for engine in self.selector.engines(role):
                with contextlib.suppress(LegError):
                    status, raw = await self.client.get(engine.url + "/v1/models", 5.0)
                    if status == 200:
                        return web.Response(body=raw, content_type=JSON)
        if self.config.model:
            data = {"object": "list", "data": [{"id": self.config.model, "object": "model", "owned_by": "disagg"}]}
            return web.json_response(data)
        return web.json_response({"error": {"message": "no engine is serving", "code": 503}}, status=503)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", **self._summary()})

    async def _ready(self, request: web.Request) -> web.Response:
        ready = bool(self.selector.revisions(self.clock())) and (
            not self.config.render or bool(self.selector.engines("render"))
        )
        return web.json_response({"ready": ready, **self._summary()}, status=200 if ready else 503)

    def _summary(self) -> dict[str, Any]:
        self._sync_store_metrics()
        return {
            "flow": self.config.flow,
            "render": self.config.render,
            "engines": {role: len(self.selector.engines(role)) for role in ("prefill", "decode", "render")},
            "revisions": self.selector.revisions(self.clock()),
            "conversations": len(self.store),
        }

    async def _metrics(self, request: web.Request) -> web.Response:
        self._sync_store_metrics()
        return web.Response(body=self.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4"})

    def _sync_store_metrics(self) -> None:
        self.store.expire(self.clock())
        self.metrics.conversations.set(len(self.store))
        if self.store.expired > self._expired_seen:
            self.metrics.at(self.metrics.conversation_evictions, "expired").inc(self.store.expired - self._expired_seen)
            self._expired_seen = self.store.expired
        if self.store.evicted > self._evicted_seen:
            self.metrics.at(self.metrics.conversation_evictions, "evicted").inc(self.store.evicted - self._evicted_seen)
            self._evicted_seen = self.store.evicted

    # ---- serving one request ----------------------------------------------------------------------------------
    async def serve(self, creq: ClientRequest, started: float, pair: Pair | None = None, probe: bool = False) -> Result:
        """Run one request through the configured flow. `pair` forces the pair (probes)."""
        deadline = started + self.config.request_timeout
        flow = self.config.flow
        labels = flow if not probe else "probe"
        now = self.clock()
        readback = None
        pin: Engine | None = None
        if flow == "bidirectional" and creq.conversation_id and not probe:
            readback = self.store.take(creq.conversation_id, now)
            if readback is not None:
                pin = self.selector.engine(readback.decode_key)
        if pair is None:
            chosen = self.selector.choose(now, creq.session_key, pin)
            if isinstance(chosen, NoPair):
                self.metrics.no_pair.inc()
                return _error(503, f"no engine pair can serve: {chosen.reason}", "service_unavailable")
            pair = chosen
        readback_params = None
        if readback is not None:
            holder = pin or self.selector.find_decode(engine_id=readback.decode_engine_id, host=readback.decode_host)
            if holder is not None and holder.revision == pair.prefill.revision:
                readback_params = readback.params
                self.metrics.at(self.metrics.readbacks, "hit").inc()
            else:
                self.metrics.at(self.metrics.readbacks, "lost").inc()
        elif flow == "bidirectional" and creq.conversation_id and not probe:
            self.metrics.at(self.metrics.readbacks, "miss").inc()
        self.selector.acquire(pair.prefill, pair.decode)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.selector.release(pair.prefill, pair.decode)

        headers = {
            "X-Request-Id": "",
            "X-Disagg-Prefill": pair.prefill.name,
            "X-Disagg-Decode": pair.decode.name,
            "X-Disagg-Pairing-Revision": pair.revision,
        }
        timing: dict[str, float] = {}
        """Seconds spent waiting on engines before the first byte, per leg (the rest is the frontend's)."""
        try:
            api: ApiKind = creq.api
            body: dict[str, Any] | None = None
            generate_request: dict[str, Any] | None = None
            if self.config.render:
                t_render = self.clock()
                rendered = await self._render(creq, deadline)
                timing["render"] = self.clock() - t_render
                if isinstance(rendered, Result):
                    release()
                    return rendered
                generate_request = rendered
                api, body = "generate", flows.generate_stream_body(rendered, False)
            try:
                plan = flows.plan(flow, creq, pair, self.nonce(), body=body, api=api, readback=readback_params)
            except ClientError as e:
                release()
                return _error(e.status, str(e), "service_unavailable" if e.status == 503 else "invalid_request_error")
            headers["X-Request-Id"] = plan.request_id
            if plan.concurrent:
                result = await self._concurrent(plan, creq, labels, deadline, headers, generate_request, timing)
            else:
                result = await self._sequential(
                    plan, creq, labels, deadline, headers, generate_request, body, api, timing
                )
            result.info["timing"] = timing
        except BaseException:
            release()
            raise
        inner = result.finish

        async def finish(completed: bool) -> None:
            try:
                if inner is not None:
                    await inner(completed)
            finally:
                release()

        result.finish = finish
        return result

    async def _render(self, creq: ClientRequest, deadline: float) -> dict[str, Any] | Result:
        render = self.selector.choose_render(creq.session_key)
        if render is None:
            return _error(503, "no serving render engine", "service_unavailable")
        path = flows.RENDER_PATHS.get(creq.api)
        if path is None:
            return _error(400, f"the render tier does not serve {creq.api}")
        leg = Leg("prefill", render, path, {"Content-Type": JSON}, flows.render_body(creq.api, creq), False)
        t0 = self.clock()
        try:
            reply = await self.client.post_json(leg, deadline - self.clock())
        except LegError as e:
            self.metrics.at(self.metrics.leg_errors, "render", self.config.flow, e.reason).inc()
            return _error(502 if e.reason == "connect" else 504, str(e), "upstream_error")
        self.metrics.at(self.metrics.leg_seconds, "render", self.config.flow).observe(self.clock() - t0)
        if reply.status != 200:
            self.metrics.at(self.metrics.leg_errors, "render", self.config.flow, "status").inc()
            return _reply(reply, {})
        try:
            return flows.rendered_generate_request(creq.api, reply.data)
        except ClientError as e:
            return _error(e.status, str(e), "upstream_error")

    async def _prefill(self, plan: FlowPlan, labels: str, deadline: float) -> JsonReply | Result:
        t0 = self.clock()
        budget = min(deadline - self.clock(), self.config.prefill_timeout)
        try:
            reply = await self.client.post_json(plan.prefill, budget)
        except LegError as e:
            self.metrics.at(self.metrics.leg_errors, "prefill", labels, e.reason).inc()
            return _error(502 if e.reason == "connect" else 504, f"prefill failed: {e}", "upstream_error")
        self.metrics.at(self.metrics.leg_seconds, "prefill", labels).observe(self.clock() - t0)
        if reply.status != 200:
            self.metrics.at(self.metrics.leg_errors, "prefill", labels, "status").inc()
            return _reply(reply, {})
        return reply

    def _account_prefill(self, labels: str, reply: JsonReply) -> None:
        prompt = flows.prompt_tokens(reply.data)
        if prompt:
            self.metrics.at(self.metrics.prompt_tokens, labels).inc(prompt)
        cached = flows.prefill_cached_tokens(reply.data)
        if cached:
            self.metrics.at(self.metrics.prefill_cached_tokens, labels).inc(cached)

    async def _sequential(
        self,
        plan: FlowPlan,
        creq: ClientRequest,
        labels: str,
        deadline: float,
        headers: dict[str, str],
        generate_request: dict[str, Any] | None,
        body: dict[str, Any] | None,
        api: ApiKind,
        timing: dict[str, float],
    ) -> Result:
        t_prefill = self.clock()
        prefill = await self._prefill(plan, labels, deadline)
        timing["prefill"] = self.clock() - t_prefill
        if isinstance(prefill, Result):
            prefill.headers.update(headers)
            return prefill
        self._account_prefill(labels, prefill)
        if generate_request is not None and plan.decode_streams:
            body = flows.generate_stream_body(generate_request, True)
        leg, handed = flows.decode_leg(plan, creq, prefill.data, body=body, api=api)
        self.metrics.at(self.metrics.kv_handoffs, labels, "handed_off" if handed else "missing").inc()
        info = {
            "kv_blocks_handed_off": flows.kv_handed_off(prefill.data),
            "prefill_cached_tokens": flows.prefill_cached_tokens(prefill.data),
            "prompt_tokens": flows.prompt_tokens(prefill.data),
            "concurrent": False,
        }
        result = await self._decode(plan, creq, leg, labels, deadline, headers, generate_request, None, timing)
        result.info.update(info)
        return result

    async def _concurrent(
        self,
        plan: FlowPlan,
        creq: ClientRequest,
        labels: str,
        deadline: float,
        headers: dict[str, str],
        generate_request: dict[str, Any] | None,
        timing: dict[str, float],
    ) -> Result:
        assert plan.decode is not None
        decode_leg = plan.decode
        if generate_request is not None and plan.decode_streams:
            decode_leg = Leg(
                "decode",
                decode_leg.engine,
                decode_leg.path,
                decode_leg.headers,
                {
                    **flows.generate_stream_body(generate_request, True),
                    "kv_transfer_params": decode_leg.body["kv_transfer_params"],
                },
                True,
            )
        self.metrics.at(self.metrics.kv_handoffs, labels, "concurrent").inc()
        prefill_task = asyncio.ensure_future(self._prefill(plan, labels, deadline))
        try:
            return await self._decode(
                plan, creq, decode_leg, labels, deadline, headers, generate_request, prefill_task, timing
            )
        except asyncio.CancelledError:
            # The client left while both legs ran: the decode call was cancelled with the handler, prefill's is not
            # awaited by it and would run on.
            prefill_task.cancel()
            raise

    async def _decode(
        self,
        plan: FlowPlan,
        creq: ClientRequest,
        leg: Leg,
        labels: str,
        deadline: float,
        headers: dict[str, str],
        generate_request: dict[str, Any] | None,
        prefill_task: asyncio.Future[JsonReply | Result] | None,
        timing: dict[str, float],
    ) -> Result:
        t0 = self.clock()

        checked: list[Result | None] = []

        async def prefill_failure() -> Result | None:
            """Prefill's error, or None once it succeeded (accounted once however often it is asked)."""
            if prefill_task is None:
                return None
            if checked:
                return checked[0]
            outcome = await prefill_task
            if checked:
                return checked[0]
            if isinstance(outcome, Result):
                outcome.headers.update(headers)
                checked.append(outcome)
                return outcome
            self._account_prefill(labels, outcome)
            checked.append(None)
            return None

        if not leg.stream:
            # The answer is passed through as bytes unless the frontend must read it (state, derender, SSE).
            parse = plan.capture_decode_params or generate_request is not None or creq.stream
            call = self.client.post_json(leg, deadline - self.clock(), parse)
            decode_call: asyncio.Future[JsonReply] | Awaitable[JsonReply] = call
            if prefill_task is not None:
                decode_call = asyncio.ensure_future(call)
                waiters: list[asyncio.Future[Any]] = [decode_call, prefill_task]
                await _wait_first(waiters, cancel_on_exit=decode_call)
                if prefill_task.done() and (failed := await prefill_failure()) is not None:
                    decode_call.cancel()
                    with contextlib.suppress(BaseException):
                        await decode_call
                    return failed
            try:
                reply = await decode_call
            except LegError as e:
                self.metrics.at(self.metrics.leg_errors, "decode", labels, e.reason).inc()
                if prefill_task is not None and not prefill_task.done():
                    prefill_task.cancel()
                return _error(502 if e.reason == "connect" else 504, f"decode failed: {e}", "upstream_error")
            if prefill_task is not None and (failed := await prefill_failure()) is not None:
                return failed
            timing["decode"] = self.clock() - t0
            self.metrics.at(self.metrics.leg_seconds, "decode", labels).observe(timing["decode"])
            if reply.status != 200:
                self.metrics.at(self.metrics.leg_errors, "decode", labels, "status").inc()
                return _reply(reply, headers)
            if plan.capture_decode_params and plan.conversation_id:
                params = flows.returned_kv_params(reply.data)
                if params and params.get("remote_block_ids"):
                    self.store.put(plan.conversation_id, params, plan.pair.decode.key, self.clock())
            data = reply.data
            if generate_request is not None:
                t_derender = self.clock()
                derendered = await self._derender(creq, generate_request, data, deadline)
                timing["derender"] = self.clock() - t_derender
                if isinstance(derendered, Result):
                    derendered.headers.update(headers)
                    return derendered
                data = derendered
            if creq.stream:
                events = flows.synthesize_stream(creq.api, data, creq.include_usage)
                return Result(200, "text/event-stream", headers, stream=_iterate(events), info={"decode": data})
            return Result(
                200, JSON, headers, dumps(data) if generate_request is not None else reply.raw, info={"decode": data}
            )

        opened = asyncio.ensure_future(self.client.open(leg, deadline - self.clock()))
        if prefill_task is not None:
            pending: list[asyncio.Future[Any]] = [opened, prefill_task]
            await _wait_first(pending, cancel_on_exit=opened)
            if prefill_task.done() and (failed := await prefill_failure()) is not None:
                opened.cancel()
                with contextlib.suppress(BaseException):
                    (await opened).close()
                return failed
        try:
            upstream = await opened
        except LegError as e:
            self.metrics.at(self.metrics.leg_errors, "decode", labels, e.reason).inc()
            if prefill_task is not None and not prefill_task.done():
                prefill_task.cancel()
            return _error(502 if e.reason == "connect" else 504, f"decode failed: {e}", "upstream_error")
        self.metrics.at(self.metrics.leg_seconds, "decode", labels).observe(self.clock() - t0)
        if upstream.status != 200:
            raw = await upstream.read()
            upstream.release()
            self.metrics.at(self.metrics.leg_errors, "decode", labels, "status").inc()
            if prefill_task is not None and (failed := await prefill_failure()) is not None:
                return failed
            return Result(upstream.status, upstream.content_type, headers, raw)
        chunks: AsyncIterator[bytes] = _first_chunk_timed(
            _guarded(upstream, prefill_task, self._prefill_error_event(prefill_failure)), timing, t0, self.clock
        )
        if generate_request is not None:
            chunks = self._derender_stream(creq, generate_request, chunks, deadline)

        async def finish(completed: bool) -> None:
            if not completed:
                self.metrics.at(self.metrics.leg_errors, "decode", labels, "aborted").inc()
            upstream.close()
            if prefill_task is not None and not prefill_task.done():
                if completed:
                    # Decode finished first (push wrote the KV before prefill's reply came back): let prefill's
                    # reply arrive for the accounting instead of aborting a request that already did its job.
                    task = asyncio.ensure_future(prefill_failure())
                    self._background.add(task)
                    task.add_done_callback(self._background.discard)
                else:
                    prefill_task.cancel()

        return Result(
            200, upstream.headers.get("content-type", "text/event-stream"), headers, stream=chunks, finish=finish
        )

    def _prefill_error_event(
        self, prefill_failure: Callable[[], Awaitable[Result | None]]
    ) -> Callable[[], Awaitable[bytes | None]]:
        async def event() -> bytes | None:
            failed = await prefill_failure()
            if failed is None:
                return None
            message = (failed.body or b"").decode(errors="replace")
            return flows.sse({"error": {"message": f"prefill failed: {message}", "code": failed.status}})

        return event

    async def _derender(
        self, creq: ClientRequest, generate_request: dict[str, Any], response: Any, deadline: float
    ) -> dict[str, Any] | Result:
        render = self.selector.choose_render(creq.session_key)
        if render is None:
            return _error(503, "no serving render engine", "service_unavailable")
        body = flows.derender_body(creq.api, creq, generate_request, response)
        leg = Leg("decode", render, flows.DERENDER_PATHS[creq.api], {"Content-Type": JSON}, body, False)
        t0 = self.clock()
        try:
            reply = await self.client.post_json(leg, deadline - self.clock())
        except LegError as e:
            self.metrics.at(self.metrics.leg_errors, "derender", self.config.flow, e.reason).inc()
            return _error(502, str(e), "upstream_error")
        self.metrics.at(self.metrics.leg_seconds, "derender", self.config.flow).observe(self.clock() - t0)
        if reply.status != 200 or not isinstance(reply.data, dict):
            self.metrics.at(self.metrics.leg_errors, "derender", self.config.flow, "status").inc()
            return _reply(reply, {})
        return dict(reply.data)

    async def _derender_stream(
        self, creq: ClientRequest, generate_request: dict[str, Any], chunks: AsyncIterator[bytes], deadline: float
    ) -> AsyncIterator[bytes]:
        render = self.selector.choose_render(creq.session_key)
        parser = SseParser()
        state: Any = None
        async for chunk in chunks:
            for data in parser.feed(chunk):
                if data == "[DONE]":
                    yield flows.sse("[DONE]")
                    return
                try:
                    event = json.loads(data)
                except ValueError:
                    continue
                if "error" in event or render is None:
                    yield flows.sse(event)
                    continue
                body = flows.derender_stream_body(creq.api, creq, generate_request, event, state)
                leg = Leg("decode", render, flows.DERENDER_PATHS[creq.api], {"Content-Type": JSON}, body, False)
                try:
                    reply = await self.client.post_json(leg, deadline - self.clock())
                except LegError as e:
                    yield flows.sse({"error": {"message": f"derender failed: {e}", "code": 502}})
                    return
                if reply.status != 200 or not isinstance(reply.data, dict):
                    yield flows.sse(
                        {"error": {"message": f"derender failed: {reply.raw[:500]!r}", "code": reply.status}}
                    )
                    return
                state = reply.data.get("stream_state")
                out = reply.data.get("chunk")
                if out is not None and (out.get("choices") or out.get("usage") is None or creq.include_usage):
                    if out.get("usage") is not None and not creq.include_usage:
                        out = {k: v for k, v in out.items() if k != "usage"}
                    yield flows.sse(out)
        yield flows.sse("[DONE]")

    # ---- admin: pairs, probes, drains -------------------------------------------------------------------------
    def _find(self, role: str, name: str) -> Engine | None:
        for engine in [*self.selector.engines(role), *self.selector.candidates(role)]:  # type: ignore[arg-type]
            if name in (engine.name, engine.key, engine.url):
                return engine
        return None

    async def _pairs(self, request: web.Request) -> web.Response:
        now = self.clock()
        pairs = [
            {
                "prefill": info.pair.prefill.name,
                "decode": info.pair.decode.name,
                "revision": info.pair.revision,
                "drained": info.drained,
                "drained_for_seconds": None if info.drained_until is None else round(info.drained_until - now, 3),
                "reason": info.drain_reason,
            }
            for info in self.selector.pairs(now)
        ]
        if request.query.get("candidates") in ("1", "true"):
            pairs += [
                {
                    "prefill": pair.prefill.name,
                    "decode": pair.decode.name,
                    "revision": pair.revision,
                    "drained": False,
                    "drained_for_seconds": None,
                    "reason": "",
                    "candidate": True,
                }
                for pair in self.selector.candidate_pairs()
            ]
        return web.json_response({"pairs": pairs, "revisions": self.selector.revisions(now)})

    async def _admin_body(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        if not raw:
            return {}
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("the body must be a JSON object")
        return data

    def _pair_from(self, item: Any) -> Pair:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("prefill"), str)
            or not isinstance(item.get("decode"), str)
        ):
            raise ValueError('each pair is {"prefill": NAME, "decode": NAME}')
        prefill, decode = self._find("prefill", item["prefill"]), self._find("decode", item["decode"])
        if prefill is None or decode is None:
            missing = item["prefill"] if prefill is None else item["decode"]
            raise ValueError(f"no serving engine named {missing!r}")
        return Pair(prefill, decode)

    async def _probe(self, request: web.Request) -> web.Response:
        try:
            data = await self._admin_body(request)
            deadline = float(data.get("deadline_seconds", 10.0))
            if not 0 < deadline <= 600:
                raise ValueError("deadline_seconds must be in (0, 600]")
            items = data.get("pairs", "all")
            now = self.clock()
            if items == "all":
                pairs = [
                    info.pair for info in self.selector.pairs(now) if not info.drained or data.get("include_drained")
                ]
                if data.get("include_candidates"):
                    pairs += self.selector.candidate_pairs()
            elif isinstance(items, list):
                pairs = [self._pair_from(item) for item in items]
            else:
                raise ValueError('pairs is "all" or a list of {"prefill": NAME, "decode": NAME}')
            for pair in pairs:
                if pair.prefill.revision != pair.decode.revision:
                    raise ValueError(f"{pair.label} crosses pairing revisions; the frontend never serves it")
            scrape = bool(data.get("scrape_decode_metrics", True))
        except (ValueError, TypeError) as e:
            return web.json_response({"error": {"message": str(e), "code": 400}}, status=400)
        results = await asyncio.gather(*(self.probe_pair(pair, deadline, scrape) for pair in pairs))
        ok = all(r.ok for r in results)
        return web.json_response({"ok": ok, "results": [r.as_dict() for r in results]})

    async def _scrape(self, engine: Engine, deadline: float) -> dict[str, float] | None:
        try:
            status, raw = await self.client.get(engine.url + "/metrics", deadline)
        except LegError:
            return None
        if status != 200:
            return None
        try:
            return decode_transfer_counters(parse_metrics(raw.decode(errors="replace")))
        except ValueError:
            return None

    async def probe_pair(self, pair: Pair, deadline: float, scrape: bool = True) -> ProbeResult:
        started = self.clock()
        creq = probe_request(self.nonce(), self.config.probe_prompt, self.config.probe_max_tokens, self.config.model)
        # Scrapes are bounded apart from the request, so the operator's wait (deadline + 2 scrapes) holds.
        before = await self._scrape(pair.decode, PROBE_SCRAPE_SECONDS) if scrape else None
        try:
            async with asyncio.timeout(deadline):
                result = await self.serve(creq, started, pair=pair, probe=True)
                body = result.body
                if result.stream is not None:
                    body = b"".join([chunk async for chunk in result.stream])
                if result.finish is not None:
                    await result.finish(True)
        except TimeoutError:
            self.metrics.at(self.metrics.probes, "timeout").inc()
            return ProbeResult(
                pair.prefill.name,
                pair.decode.name,
                pair.revision,
                False,
                self.clock() - started,
                0,
                None,
                f"no answer within {deadline:g} s",
                candidate=pair.prefill.candidate or pair.decode.candidate,
            )
        latency = self.clock() - started
        after = await self._scrape(pair.decode, PROBE_SCRAPE_SECONDS) if scrape and before is not None else None
        ok = result.status == 200
        handed = int(result.info.get("kv_blocks_handed_off", 0) or 0)
        concurrent = self.config.flow in CONCURRENT_FLOWS
        transferred = kv_transferred(handed, concurrent, before, after) if ok else False
        error = None if ok else (body or b"").decode(errors="replace")[:500]
        self.metrics.at(self.metrics.probes, "ok" if ok else "failed").inc()
        self.metrics.probe_seconds.observe(latency)
        return ProbeResult(
            pair.prefill.name,
            pair.decode.name,
            pair.revision,
            ok,
            latency,
            handed,
            transferred,
            error,
            result.status,
            candidate=pair.prefill.candidate or pair.decode.candidate,
        )

    async def _drain(self, request: web.Request) -> web.Response:
        try:
            data = await self._admin_body(request)
            pair = self._pair_from(data)
            seconds = data.get("seconds", self.config.drain_seconds)
            if seconds is not None and (not isinstance(seconds, int | float) or seconds <= 0):
                raise ValueError("seconds must be a positive number or null (until undrained)")
        except (ValueError, TypeError) as e:
            return web.json_response({"error": {"message": str(e), "code": 400}}, status=400)
        until = None if seconds is None else self.clock() + float(seconds)
        self.selector.drain(pair.prefill.key, pair.decode.key, until, str(data.get("reason", "")))
        self.metrics.drained_pairs.set(sum(1 for info in self.selector.pairs(self.clock()) if info.drained))
        log.warning("drained pair %s for %s s: %s", pair.label, seconds, data.get("reason", ""))
        return web.json_response({"drained": pair.label, "seconds": seconds})

    async def _undrain(self, request: web.Request) -> web.Response:
        try:
            pair = self._pair_from(await self._admin_body(request))
        except (ValueError, TypeError) as e:
            return web.json_response({"error": {"message": str(e), "code": 400}}, status=400)
        found = self.selector.undrain(pair.prefill.key, pair.decode.key)
        self.metrics.drained_pairs.set(sum(1 for info in self.selector.pairs(self.clock()) if info.drained))
        return web.json_response({"undrained": pair.label, "was_drained": found})


async def _first_chunk_timed(
    chunks: AsyncIterator[bytes], timing: dict[str, float], sent: float, clock: Callable[[], float]
) -> AsyncIterator[bytes]:
    """Decode's body, noting how long decode took to its first chunk (engine time, not the frontend's)."""
    first = True
    async for chunk in chunks:
        if first:
            first = False
            timing["decode"] = clock() - sent
        yield chunk


async def _iterate(events: list[bytes]) -> AsyncIterator[bytes]:
    for event in events:
        yield event


async def _wait_first(futures: list[asyncio.Future[Any]], cancel_on_exit: asyncio.Future[Any]) -> None:
    """Wait for the first of `futures`; if the wait itself is cancelled (the client left), `cancel_on_exit` is
    cancelled too: asyncio.wait never cancels what it waits for, and that leg would run on for nobody."""
    try:
        await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        cancel_on_exit.cancel()
        raise


async def _guarded(
    upstream: StreamReply,
    prefill_task: asyncio.Future[Any] | None,
    prefill_error: Callable[[], Awaitable[bytes | None]],
) -> AsyncIterator[bytes]:
    """Decode's body, cut short with an error event if a concurrent prefill fails before decode finishes."""
    iterator = upstream.iter_any().__aiter__()
    checked = prefill_task is None
    while True:
        if not checked and prefill_task is not None and not prefill_task.done():
            next_chunk = asyncio.ensure_future(iterator.__anext__())
            await asyncio.wait({next_chunk, prefill_task}, return_when=asyncio.FIRST_COMPLETED)
            if not next_chunk.done():
                checked = True
                event = await prefill_error()
                if event is not None:
                    next_chunk.cancel()
                    upstream.close()
                    yield event
                    return
            try:
                chunk = await next_chunk
            except StopAsyncIteration:
                break
        else:
            if not checked:
                checked = True
                event = await prefill_error()
                if event is not None:
                    upstream.close()
                    yield event
                    return
            try:
                chunk = await iterator.__anext__()
            except StopAsyncIteration:
                break
        yield chunk
