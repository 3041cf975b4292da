"""A P/D engine protocol simulator: vLLM's HTTP API plus the KV connectors' request-level rules, without a model.

It stands in for engines where vLLM CPU cannot run a flow (MoRI-IO needs ROCm and RDMA) and for benchmarks that
need engines faster than a CPU model. What it checks is read from vLLM 0.32/0.33's connector source, so a frontend
that sends what vLLM would not accept fails here too:

- request ids: the engine's internal id is `cmpl-{X-Request-Id}-0-{8 hex}` (completions), `chatcmpl-{id}-{8 hex}`
  (chat), `generate-tokens-{id}-{8 hex}` (generate), as `OpenAIServing._base_request_id` + `assign_request_id`;
- NIXL pull (`pull_scheduler.py`): decode loads only with non-empty `remote_block_ids` and all of
  `remote_engine_id`, `remote_request_id`, `remote_host`, `remote_port`; the peer at remote_host:remote_port must
  be the engine `remote_engine_id` names and still hold `remote_request_id`'s blocks (lease `kv_lease_duration`);
  otherwise decode recomputes the prompt (`local_compute`), as vLLM warns "Got invalid KVTransferParams";
- bidirectional: a finished decode keeps its blocks `decoder_kv_blocks_ttl` and returns
  `do_remote_decode: true` params in non-streaming responses only; prefill reads
  `min(remote_num_tokens, prompt) - cached` tokens back when that reaches `kv_recompute_threshold`;
- NIXL push (`push_scheduler.py`, `push_worker.py`): decode's registration needs `remote_engine_id`,
  `remote_host`, `remote_port`, `tp_size` (a KeyError in vLLM); prefill matches registrations to finished
  requests by request id, exact or with the `-{8 hex}` suffix stripped (`get_base_request_id`), within its lease;
- Mooncake (`mooncake/mooncake_connector.py`, `mooncake_utils.py`): a prefill engine serves its bootstrap server
  (`GET /query` -> `{dp_rank: {engine_id, worker_addr}}`) on its bootstrap port and keeps a finished request's
  blocks for decode only with `do_remote_decode` and a `transfer_id`; decode needs all of `remote_engine_id`,
  `remote_bootstrap_addr` and `transfer_id` (else it recomputes), asks that bootstrap address over HTTP for the
  engine id (not found: the load fails, and `kv_load_failure_policy: fail` fails the request), then waits for
  prefill's request of the same `transfer_id`;
- MoRI-IO (`moriio_common.py`, `moriio_connector.py`): peers' `host:IP,handshake:PORT,notify:PORT` addresses are
  parsed from the request id with vLLM's regular expressions; `transfer_id` must be shared; in write mode decode
  sends prefill a msgpack `{"type": "remote_blocks", ...}` over ZMQ to the notify port, in read mode a
  `{"type": "release", ...}` after reading; engines register with the router exactly as `moriio_heartbeat.py`.
The KV bytes themselves move through an in-process table (the "fabric") keyed by side-channel address: that part
stands for RDMA/UCX, which is why all simulated engines of one test live in one process.

Metrics use vLLM's names: `vllm:prompt_tokens_by_source_total{source=local_compute|external_kv_transfer|
local_cache_hit}`, `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`, `vllm:request_success_total`,
`vllm:nixl_num_failed_transfers_total`.

Stale peers, as measured on vLLM 0.32 CPU (docs/decisions.md D105): an engine remembers the incarnation of every
remote engine id it handshook with; after `restart()` (same engine id, same address, a fresh process) a peer still
holding the old handshake fails its reads of it, with 500 under `kv_load_failure_policy: fail` (the default here)
or by recomputing under `recompute`. A new engine id is a new handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

Connector = Literal["nixl", "nixl-push", "moriio", "mooncake"]
# vLLM's MoRI-IO request id patterns (moriio_common.py), applied to the engine's internal request id.
_PREFILL_ZMQ_RE = re.compile(r"___prefill_addr_(.+?)___decode_addr_")
_DECODE_ZMQ_RE = re.compile(r"___decode_addr_(.+)_[0-9a-f]{32}(?:-.*)?$")
_RANDOM_SUFFIX_RE = re.compile(r"-[0-9a-f]{8}$", re.IGNORECASE)
_ID_PREFIX = {"completions": "cmpl", "chat": "chatcmpl", "generate": "generate-tokens"}


def base_request_id(request_id: str) -> str:
    return _RANDOM_SUFFIX_RE.sub("", request_id)


def parse_zmq(address: str) -> tuple[str, int, int]:
    parts = dict(segment.partition(":")[::2] for segment in address.split(","))
    return parts["host"], int(parts["handshake"]), int(parts["notify"])


@dataclass
class Blocks:
    tokens: int
    expires: float
    engine_id: str


@dataclass
class Fabric:
    """Side-channel address -> engine: what a NIXL handshake or MoRI-IO session would reach."""

    engines: dict[tuple[str, int], SimEngine] = field(default_factory=dict)

    def reach(self, host: Any, port: Any) -> SimEngine | None:
        return self.engines.get((str(host), int(port))) if port is not None else None


class SimError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class SimEngine:
    fabric: Fabric
    role: Literal["prefill", "decode"]
    connector: Connector = "nixl"
    engine_id: str = field(default_factory=lambda: secrets.token_hex(8))
    host: str = "127.0.0.1"
    side_channel_port: int = 5600
    http_port: int = 0
    moriio_mode: Literal["READ", "WRITE"] = "WRITE"
    moriio_handshake_port: int = 6301
    moriio_notify_port: int = 61005
    bootstrap_port: int = 8998
    bidirectional: bool = False
    block_size: int = 16
    lease: float = 30.0
    decoder_blocks_ttl: float = 480.0
    recompute_threshold: int = 64
    prefix_caching: bool = True
    push_timeout: float = 5.0
    prefill_seconds_per_token: float = 0.0
    prefill_base_seconds: float = 0.0
    itl_seconds: float = 0.0
    model: str = "sim"
    tp_size: int = 1
    registration: str | None = None
    load_failure_policy: Literal["fail", "recompute"] = "fail"
    incarnation: int = 0
    handshakes: dict[str, int] = field(default_factory=dict)
    """remote engine id -> its incarnation when this engine handshook with it (what vLLM's agent cache holds)."""
    served: int = 0
    aborted: int = 0
    """Requests whose client closed the connection before the answer (vLLM aborts those: it stops computing them)."""
    counters: dict[str, float] = field(default_factory=dict)
    blocks: dict[str, Blocks] = field(default_factory=dict)
    prefix: set[str] = field(default_factory=set)
    push_registrations: dict[str, dict[str, Any]] = field(default_factory=dict)
    push_finished: dict[str, Blocks] = field(default_factory=dict)
    push_waiters: dict[str, asyncio.Future[int]] = field(default_factory=dict)
    moriio_waiters: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    mooncake_sent: dict[str, Blocks] = field(default_factory=dict)
    mooncake_waiters: dict[str, asyncio.Future[Blocks]] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.connector == "moriio":
            self.fabric.engines[(self.host, self.moriio_handshake_port)] = self
        else:
            self.fabric.engines[(self.host, self.side_channel_port)] = self
        self._tasks: list[asyncio.Task[None]] = []

    def count(self, name: str, value: float = 1.0) -> None:
        """`name` is a family, optionally with labels: 'vllm:x{source="y"' (the closing brace is added)."""
        name = name.removesuffix("}")
        self.counters[name] = self.counters.get(name, 0.0) + value

    # ---- HTTP -------------------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/inference/v1/generate", self._generate)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def start(self) -> None:
        if self.connector == "mooncake" and self.role == "prefill":
            bootstrap = web.Application()
            bootstrap.router.add_get("/query", self._bootstrap_query)
            self._bootstrap = web.AppRunner(bootstrap, access_log=None)
            await self._bootstrap.setup()
            await web.TCPSite(self._bootstrap, self.host, self.bootstrap_port).start()
        if self.connector == "moriio":
            import zmq
            import zmq.asyncio

            self._zmq = zmq.asyncio.Context()
            self._notify = self._zmq.socket(zmq.ROUTER)
            self._notify.bind(f"tcp://{self.host}:{self.moriio_notify_port}")
            self._tasks.append(asyncio.create_task(self._moriio_notifications()))
            if self.registration:
                self._tasks.append(asyncio.create_task(self._register()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.connector == "mooncake" and self.role == "prefill":
            await self._bootstrap.cleanup()
        if self.connector == "moriio":
            self._notify.close(0)
            self._zmq.term()

    async def _bootstrap_query(self, request: web.Request) -> web.Response:
        worker = f"{self.host}:{self.side_channel_port}"
        return web.json_response({"0": {"engine_id": self.engine_id, "worker_addr": {"0": {"0": worker}}}})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _metrics(self, request: web.Request) -> web.Response:
        lines = []
        families = sorted({name.partition("{")[0] for name in self.counters})
        for family in families:
            lines.append(f"# TYPE {family} counter")
            for name, value in sorted(self.counters.items()):
                if name.partition("{")[0] == family:
                    labels = name.partition("{")[2]
                    lines.append(f"{family}_total{{{labels}}} {value}" if labels else f"{family}_total {value}")
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "completions")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "chat")

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "generate")

    async def _serve(self, request: web.Request, api: str) -> web.StreamResponse:
        body = await request.json()
        external = request.headers.get("X-Request-Id") or body.get("request_id") or secrets.token_hex(16)
        internal = f"{_ID_PREFIX[api]}-{external}" + ("-0" if api == "completions" else "")
        internal += f"-{secrets.token_hex(4)}"
        prompt = _prompt_tokens(api, body)
        sampling = body.get("sampling_params") or {} if api == "generate" else body
        max_tokens = int(sampling.get("max_completion_tokens") or sampling.get("max_tokens") or 16)
        stream = bool(body.get("stream"))
        params = body.get("kv_transfer_params")
        self.served += 1
        self.log.append(
            {"api": api, "request_id": internal, "kv_transfer_params": params, "stream": stream, "body": body}
        )
        try:
            outcome = await self._run(internal, prompt, max_tokens, params)
            return await self._answer(request, api, internal, prompt, outcome, stream, body)
        except SimError as e:
            return web.json_response({"error": {"message": str(e), "code": e.status}}, status=e.status)
        except asyncio.CancelledError:
            self.aborted += 1
            raise

    async def _answer(
        self,
        request: web.Request,
        api: str,
        rid: str,
        prompt: list[str],
        outcome: dict[str, Any],
        stream: bool,
        body: dict[str, Any],
    ) -> web.StreamResponse:
        tokens = outcome["tokens"]
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(tokens),
            "total_tokens": len(prompt) + len(tokens),
        }
        if not stream:
            await asyncio.sleep(self.itl_seconds * len(tokens))
            text = "".join(tokens)
            if api == "chat":
                choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}}
            elif api == "generate":
                choice = {"index": 0, "token_ids": list(range(len(tokens)))}
            else:
                choice = {"index": 0, "text": text}
            choice["finish_reason"] = "length"
            data = {"id": rid, "object": "sim", "model": self.model, "choices": [choice], "usage": usage}
            data["kv_transfer_params"] = outcome.get("kv_transfer_params")
            return web.json_response(data)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i, token in enumerate(tokens):
            if self.itl_seconds:
                await asyncio.sleep(self.itl_seconds)
            finish = "length" if i == len(tokens) - 1 else None
            if api == "chat":
                chunk = {"id": rid, "choices": [{"index": 0, "delta": {"content": token}, "finish_reason": finish}]}
            elif api == "generate":
                chunk = {"request_id": rid, "choices": [{"index": 0, "token_ids": [i], "finish_reason": finish}]}
            else:
                chunk = {"id": rid, "choices": [{"index": 0, "text": token, "finish_reason": finish}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        if (body.get("stream_options") or {}).get("include_usage"):
            await response.write(f"data: {json.dumps({'id': rid, 'choices': [], 'usage': usage})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    # ---- the connector's side of a request --------------------------------------------------------------------
    async def _run(self, rid: str, prompt: list[str], max_tokens: int, params: Any) -> dict[str, Any]:
        n = len(prompt)
        cached = self._prefix_hit(prompt)
        external = 0
        result: dict[str, Any] = {}
        params = dict(params) if isinstance(params, dict) else None
        is_p = bool(params and params.get("do_remote_decode"))
        is_d = bool(params and params.get("do_remote_prefill"))
        if self.connector == "moriio":
            external, result = await self._moriio(rid, n, params, is_p, is_d)
        elif is_d and self.connector == "mooncake":
            external = await self._mooncake_receive(n, params)
        elif is_d and self.connector == "nixl-push":
            external = await self._push_receive(rid, n, params)
        elif is_d:
            external = self._pull(n, params)
        elif is_p and self.bidirectional and self.role == "prefill":
            external = self._readback(n, cached, params)
        computed = max(n - cached - external, 0)
        await asyncio.sleep(self.prefill_base_seconds + self.prefill_seconds_per_token * computed)
        self.count('vllm:prompt_tokens_by_source{source="local_compute"', computed)
        self.count('vllm:prompt_tokens_by_source{source="external_kv_transfer"', external)
        self.count('vllm:prompt_tokens_by_source{source="local_cache_hit"', min(cached, n))
        self.count("vllm:prompt_tokens", n)
        self._remember(prompt)
        tokens = [f" t{i}" for i in range(1 if is_p else max_tokens)]
        self.count("vllm:generation_tokens", len(tokens))
        self.count('vllm:request_success{finished_reason="length"')
        if self.connector == "moriio":
            return {"tokens": tokens, **result}
        if self.connector == "mooncake":
            if is_p and params and params.get("transfer_id"):
                self._mooncake_finished(str(params["transfer_id"]), n)
            return {"tokens": tokens, "kv_transfer_params": None}  # request_finished returns no params
        if is_p:
            result["kv_transfer_params"] = self._finish_prefill(rid, n, cached + external)
        elif self.bidirectional and self.role == "decode" and params is not None:
            total = n + len(tokens)
            self.blocks[rid] = Blocks(total, time.monotonic() + self.decoder_blocks_ttl, self.engine_id)
            result["kv_transfer_params"] = {
                "do_remote_prefill": False,
                "do_remote_decode": True,
                "remote_block_ids": [list(range(_blocks(total, self.block_size)))],
                "remote_engine_id": self.engine_id,
                "remote_request_id": rid,
                "remote_host": self.host,
                "remote_port": self.side_channel_port,
                "tp_size": self.tp_size,
                "dcp_size": 1,
                "pp_size": 1,
                "remote_num_tokens": total,
                "remote_blocks_expiry_time": time.perf_counter() + self.decoder_blocks_ttl,
                "transfer_mode": "pull",
            }
        return {"tokens": tokens, **result}

    def _prefix_hit(self, prompt: list[str]) -> int:
        if not self.prefix_caching:
            return 0
        hit = 0
        for end in range(self.block_size, len(prompt) + 1, self.block_size):
            if " ".join(prompt[:end]) in self.prefix:
                hit = end
        return hit

    def _remember(self, prompt: list[str]) -> None:
        for end in range(self.block_size, len(prompt) + 1, self.block_size):
            self.prefix.add(" ".join(prompt[:end]))

    def _finish_prefill(self, rid: str, n: int, cached: int) -> dict[str, Any]:
        blocks = Blocks(n, time.monotonic() + self.lease, self.engine_id)
        self.blocks[rid] = blocks
        if self.connector == "nixl-push":
            self.push_finished[rid] = blocks
            self._match_push()
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": [list(range(_blocks(n, self.block_size)))],
            "remote_engine_id": self.engine_id,
            "remote_request_id": rid,
            "remote_host": self.host,
            "remote_port": self.side_channel_port,
            "tp_size": self.tp_size,
            "dcp_size": 1,
            "pp_size": 1,
            "remote_num_tokens": n,
            "remote_blocks_expiry_time": None,
            "transfer_mode": "push" if self.connector == "nixl-push" else "pull",
            "remote_prefill_cached_tokens": cached,
        }

    def restart(self) -> None:
        """The engine's process restarts under the same engine id and address: its own handshakes and blocks are
        gone, and peers that handshook with the previous incarnation hold stale state about it."""
        self.incarnation += 1
        self.handshakes.clear()
        self.blocks.clear()

    def _read(self, params: dict[str, Any]) -> Blocks | None:
        """A NIXL READ of remote_request_id's blocks at remote_host:remote_port (freed once read)."""
        peer = self.fabric.reach(params.get("remote_host"), params.get("remote_port"))
        if peer is None or peer.engine_id != params.get("remote_engine_id"):
            self.count("vllm:nixl_num_failed_transfers")
            return None
        if self.handshakes.setdefault(peer.engine_id, peer.incarnation) != peer.incarnation:
            self.count("vllm:nixl_num_failed_transfers")
            if self.load_failure_policy == "fail":
                raise SimError(500, f"NIXL_ERR_REMOTE_DISCONNECT: stale agent for remote engine {peer.engine_id}")
            return None
        blocks = peer.blocks.pop(str(params.get("remote_request_id")), None)
        if blocks is None or blocks.expires < time.monotonic():
            self.count("vllm:nixl_num_failed_transfers")
            return None
        return blocks

    def _pull(self, n: int, params: dict[str, Any]) -> int:
        required = ("remote_engine_id", "remote_request_id", "remote_host", "remote_port")
        if not params.get("remote_block_ids") or not all(p in params for p in required):
            return 0  # vLLM: "Got invalid KVTransferParams ... will not utilize KVTransfer"
        blocks = self._read(params)
        return min(blocks.tokens, n) if blocks else 0

    def _readback(self, n: int, cached: int, params: dict[str, Any]) -> int:
        required = ("remote_engine_id", "remote_request_id", "remote_host", "remote_port")
        if not params.get("remote_block_ids") or not all(p in params for p in required):
            return 0
        count = min(int(params.get("remote_num_tokens") or 0), n) - cached
        if count <= 0 or (self.recompute_threshold > 0 and count < self.recompute_threshold):
            return 0
        blocks = self._read(params)
        return count if blocks else 0

    async def _push_receive(self, rid: str, n: int, params: dict[str, Any]) -> int:
        # push_scheduler reads the first four without .get; metadata.add_new_req_to_recv the rest.
        for name in (
            "remote_engine_id",
            "remote_host",
            "remote_port",
            "tp_size",
            "remote_block_ids",
            "remote_request_id",
        ):
            if name not in params:
                raise SimError(500, f"KeyError: {name!r} (push registration; EngineCore dies in vLLM)")
        peer = self.fabric.reach(params["remote_host"], params["remote_port"])
        if peer is None or peer.engine_id != params["remote_engine_id"]:
            self.count("vllm:nixl_num_failed_notifications")
            raise SimError(500, "push registration handshake failed")
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.push_waiters[rid] = waiter
        peer.push_registrations[rid] = {"request_id": rid, "decode_engine_id": self.engine_id, "decoder": self}
        peer._match_push()
        try:
            return min(await asyncio.wait_for(waiter, self.push_timeout), n)
        except TimeoutError:
            raise SimError(500, f"registration for request {rid} timed out without a push completion") from None
        finally:
            self.push_waiters.pop(rid, None)

    def _match_push(self) -> None:
        now = time.monotonic()
        for fin_id, blocks in list(self.push_finished.items()):
            if blocks.expires < now:
                del self.push_finished[fin_id]  # "Releasing expired KV blocks ... retrieved by 0 remote worker(s)"
                self.count("vllm:nixl_num_kv_expired_reqs")
                continue
            match = next((r for r in self.push_registrations if base_request_id(r) == base_request_id(fin_id)), None)
            if match is None:
                continue
            registration = self.push_registrations.pop(match)
            del self.push_finished[fin_id]
            self.blocks.pop(fin_id, None)
            waiter = registration["decoder"].push_waiters.get(match)
            if waiter is not None and not waiter.done():
                waiter.set_result(blocks.tokens)

    # ---- Mooncake ---------------------------------------------------------------------------------------------
    def _mooncake_finished(self, transfer_id: str, n: int) -> None:
        blocks = Blocks(n, time.monotonic() + self.lease, self.engine_id)
        waiter = self.mooncake_waiters.pop(transfer_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(blocks)
        else:
            self.mooncake_sent[transfer_id] = blocks

    async def _mooncake_receive(self, n: int, params: dict[str, Any]) -> int:
        if not all(p in params for p in ("remote_engine_id", "remote_bootstrap_addr", "transfer_id")):
            return 0  # "Got invalid KVTransferParams ... will not utilize KVTransfer"
        import aiohttp

        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(str(params["remote_bootstrap_addr"]) + "/query") as r,
            ):
                ranks = await r.json()
        except (aiohttp.ClientError, ValueError) as e:
            raise SimError(500, f"Failed to connect to bootstrap server {params['remote_bootstrap_addr']}: {e}") from e
        entry = next((e for e in ranks.values() if e["engine_id"] == params["remote_engine_id"]), None)
        if entry is None:
            self.count("vllm:mooncake_num_failed_transfers")
            raise SimError(500, f"remote engine_id {params['remote_engine_id']} not found from bootstrap server")
        host, _, port = entry["worker_addr"]["0"]["0"].rpartition(":")
        prefill = self.fabric.reach(host, port)
        if prefill is None:
            raise SimError(500, "Mooncake transfer to the prefill worker failed")
        transfer_id = str(params["transfer_id"])
        blocks = prefill.mooncake_sent.pop(transfer_id, None)
        if blocks is None:
            waiter: asyncio.Future[Blocks] = asyncio.get_running_loop().create_future()
            prefill.mooncake_waiters[transfer_id] = waiter
            try:
                blocks = await asyncio.wait_for(waiter, self.push_timeout)
            except TimeoutError:
                prefill.mooncake_waiters.pop(transfer_id, None)
                raise SimError(500, f"no prefill request with transfer_id {transfer_id} finished") from None
        return min(blocks.tokens, n)

    # ---- MoRI-IO --------------------------------------------------------------------------------------------
    async def _moriio(
        self, rid: str, n: int, params: dict[str, Any] | None, is_p: bool, is_d: bool
    ) -> tuple[int, dict[str, Any]]:
        if params is None or not (is_p or is_d):
            return 0, {}
        transfer_id = params.get("transfer_id") or f"sidecar-{rid}"
        if is_p:
            for name in ("transfer_id", "remote_engine_id", "remote_block_ids"):
                if name not in params:
                    raise SimError(500, f"KeyError: {name!r} (MoRIIO add_new_req)")
            peer = _DECODE_ZMQ_RE.search(rid)
            if self.moriio_mode == "WRITE":
                if peer is None:
                    raise SimError(500, f"request_id {rid!r} does not embed a peer zmq_address")
                waiter = self._moriio_waiter(transfer_id)
                try:
                    notice = await asyncio.wait_for(waiter, self.push_timeout)
                except TimeoutError:
                    raise SimError(500, f"no remote_blocks notification for {transfer_id}") from None
                host, handshake, _ = parse_zmq(peer.group(1))
                decoder = self.fabric.reach(host, handshake)
                if decoder is None:
                    raise SimError(500, "MoRI-IO session to decode failed")
                written = decoder.moriio_waiters.get(f"write:{transfer_id}")
                if written is not None and not written.done():
                    written.set_result({"tokens": n, "blocks": notice.get("block_notify_list")})
                return 0, {"kv_transfer_params": None}
            self.blocks[transfer_id] = Blocks(n, time.monotonic() + self.lease, self.engine_id)
            return 0, {
                "kv_transfer_params": {
                    "do_remote_prefill": True,
                    "do_remote_decode": False,
                    "remote_block_ids": [list(range(_blocks(n, self.block_size)))],
                    "remote_engine_id": self.engine_id,
                    "remote_host": self.host,
                    "remote_handshake_port": self.moriio_handshake_port,
                    "remote_notify_port": self.moriio_notify_port,
                    "remote_dp_rank": 0,
                    "remote_dp_rank_override": True,
                    "remote_dp_size": 1,
                    "remote_dp_size_local": 1,
                    "tp_size": self.tp_size,
                    "transfer_id": transfer_id,
                }
            }
        peer = _PREFILL_ZMQ_RE.search(rid)
        if peer is not None:
            host, handshake, notify = parse_zmq(peer.group(1))
        else:
            host, handshake, notify = (
                params.get("remote_host"),
                params.get("remote_handshake_port"),
                params.get("remote_notify_port"),
            )
            if not host or not notify:
                raise SimError(500, "request_id has no embedded peer zmq_address and kv_transfer_params lacks it")
        if self.moriio_mode == "WRITE":
            written = self._moriio_waiter(f"write:{transfer_id}")
            notice = {
                "req_id": rid,
                "transfer_id": transfer_id,
                "block_notify_list": list(range(_blocks(n, self.block_size))),
                "decode_rank": 0,
                "type": "remote_blocks",
            }
            await self._send_notify(str(host), int(notify), notice)
            try:
                done = await asyncio.wait_for(written, self.push_timeout)
            except TimeoutError:
                raise SimError(500, f"WAITING_FOR_REMOTE_KVS: no write for {transfer_id}") from None
            return min(int(done["tokens"]), n), {}
        if not params.get("remote_block_ids") or "remote_engine_id" not in params:
            return 0, {}
        prefill = self.fabric.reach(host, handshake)
        blocks = prefill.blocks.pop(str(transfer_id), None) if prefill else None
        if prefill is None or blocks is None or prefill.engine_id != params["remote_engine_id"]:
            self.count("vllm:moriio_num_failed_transfers")
            return 0, {}
        await self._send_notify(
            str(host), int(notify), {"type": "release", "transfer_id": transfer_id, "consumer_tp_size": 1}
        )
        return max(min(blocks.tokens, n) - 1, 0), {}  # READ mode recomputes the last token on decode

    def _moriio_waiter(self, key: str) -> asyncio.Future[dict[str, Any]]:
        waiter = self.moriio_waiters.get(key)
        if waiter is None or waiter.done():
            waiter = self.moriio_waiters[key] = asyncio.get_running_loop().create_future()
        return waiter

    async def _send_notify(self, host: str, port: int, message: dict[str, Any]) -> None:
        import msgpack
        import zmq

        socket = self._zmq.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 1000)
        socket.connect(f"tcp://{host}:{port}")
        await socket.send(msgpack.dumps(message))
        socket.close(1000)

    async def _moriio_notifications(self) -> None:
        import msgpack

        while True:
            frames = await self._notify.recv_multipart()
            message = msgpack.loads(frames[-1])
            self.log.append({"notify": message})
            if message.get("type") == "remote_blocks":
                waiter = self._moriio_waiter(str(message["transfer_id"]))
                if not waiter.done():
                    waiter.set_result(message)

    async def _register(self) -> None:
        import msgpack
        import zmq

        assert self.registration is not None
        payload = msgpack.dumps(
            {
                "type": "P" if self.role == "prefill" else "D",
                "http_address": f"{self.host}:{self.http_port}",
                "zmq_address": (
                    f"host:{self.host},handshake:{self.moriio_handshake_port},notify:{self.moriio_notify_port}"
                ),
                "dp_size": 1,
                "tp_size": self.tp_size,
                "transfer_mode": self.moriio_mode,
            }
        )
        socket = self._zmq.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(self.registration)
        try:
            while True:
                await socket.send(payload)
                await asyncio.sleep(0.2)
        finally:
            socket.close(0)


def _blocks(tokens: int, block_size: int) -> int:
    return max((tokens + block_size - 1) // block_size, 1)


def _prompt_tokens(api: str, body: dict[str, Any]) -> list[str]:
    if api == "generate":
        return [str(t) for t in body.get("token_ids") or []]
    if api == "chat":
        words: list[str] = []
        for message in body.get("messages") or []:
            content = message.get("content")
            words += ["<|im_start|>", str(message.get("role"))]
            words += str(content).split() if isinstance(content, str) else []
            words.append("<|im_end|>")
        return [*words, "<|im_start|>", "assistant"]
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        prompt = prompt[0] if prompt and not isinstance(prompt[0], int) else " ".join(map(str, prompt))
    return str(prompt).split()


async def serve_engines(engines: list[SimEngine]) -> AsyncIterator[list[str]]:
    """Start every engine's HTTP server on an ephemeral port (127.0.0.1); yields their URLs."""
    runners = []
    urls = []
    try:
        for engine in engines:
            # A client that goes away cancels its handler, as vLLM's server aborts a request whose client left.
            runner = web.AppRunner(engine.app(), access_log=None, handler_cancellation=True)
            await runner.setup()
            site = web.TCPSite(runner, engine.host, engine.http_port or 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            engine.http_port = port
            await engine.start()
            runners.append(runner)
            urls.append(f"http://{engine.host}:{port}")
        yield urls
    finally:
        for engine in engines:
            await engine.stop()
        for runner in runners:
            await runner.cleanup()
