"""Flow decisions (pure): which legs, in which order, with which `kv_transfer_params`, headers and bodies.

The field names and matching rules are vLLM 0.32/0.33's (`vllm/distributed/kv_transfer/kv_connector/v1/nixl/`,
`.../moriio/`, `vllm/entrypoints/scale_out/`); docs/frontend.md explains each flow. Nothing here does I/O: the
shell gives a parsed client request, the chosen pair and a random nonce, and executes the legs it gets back.

Flows:
- `pull` (NixlConnector): prefill with `max_tokens=1` and `do_remote_decode`, then decode with the whole
  `kv_transfer_params` prefill returned (decode reads prefill's blocks).
- `push` (NixlPushConnector): both legs at once. Decode gets prefill's coordinates (engine id, side-channel
  host/port, TP/PP sizes) up front; prefill matches decode's registration by request id, so both legs carry the
  same `X-Request-Id`. Without a known prefill engine id it degrades to the sequential order (pull's).
- `bidirectional` (NixlConnector with `bidirectional_kv_xfer`): pull, plus per-conversation state: decode runs
  non-streaming so its final `kv_transfer_params` (its blocks) can be kept, and the next turn's prefill gets them
  with `do_remote_decode: true` to read the earlier turns back from that decode engine.
- `mooncake` (MooncakeConnector): both legs at once, paired by a shared `transfer_id`; decode gets prefill's
  engine id and bootstrap address (`http://<pod IP>:<bootstrap port>`, where it looks prefill's workers up), and
  prefill returns no params (its workers write into decode's blocks when decode's pull request arrives).
- `moriio-read` / `moriio-write` (MoRIIOConnector): both peers' ZMQ addresses embedded in the request id and a
  shared `transfer_id`; read runs prefill first and forwards its returned params, write dispatches both at once.
The API adapters (`completions`, `chat`, and `generate` for `--tokens-only` engines behind the render tier) decide
paths and body shapes; the flow decides the KV fields and the order.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .contract import FLOWS, Engine, FlowName
from .selection import Pair

__all__ = ["FLOWS", "FlowName"]
ApiKind = Literal["completions", "chat", "generate"]

API_PATHS: dict[ApiKind, str] = {
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
    "generate": "/inference/v1/generate",
}
RENDER_PATHS: dict[ApiKind, str] = {"completions": "/v1/completions/render", "chat": "/v1/chat/completions/render"}
DERENDER_PATHS: dict[ApiKind, str] = {
    "completions": "/v1/completions/derender",
    "chat": "/v1/chat/completions/derender",
}
CONVERSATION_FIELD = "conversation_id"
CONVERSATION_HEADER = "X-Conversation-Id"
SESSION_HEADER = "X-Session-Id"
REQUEST_ID_HEADER = "X-Request-Id"
DP_RANK_HEADER = "X-data-parallel-rank"
MORIIO_TRANSFER_PREFIX = "tx"
"""`MoRIIOConstants.TRANSFER_PREFIX`."""
MOONCAKE_TRANSFER_PREFIX = "xfer"
"""What vLLM's Mooncake proxy (`mooncake_connector_proxy.py`) puts before a transfer id."""

_BLANK_PREFILL_PARAMS: dict[str, Any] = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}
"""What vLLM's toy proxy and vllm-router send a NIXL prefill leg."""
_PREFILL_DROPPED = ("stream_options", "min_tokens", "min_completion_tokens")


class ClientError(ValueError):
    """A request the frontend refuses before any engine sees it; `status` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ClientRequest:
    """A parsed client request: the body without the frontend's own fields."""

    api: ApiKind
    body: dict[str, Any]
    stream: bool
    include_usage: bool
    conversation_id: str | None
    session_key: str | None
    client_request_id: str | None


@dataclass(frozen=True)
class Leg:
    role: Literal["prefill", "decode"]
    engine: Engine
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    stream: bool

    @property
    def url(self) -> str:
        return self.engine.url + self.path


@dataclass(frozen=True)
class FlowPlan:
    """What to send first. For sequential plans the shell builds the decode leg from prefill's response with
    `decode_leg`; for concurrent plans `decode` is already set and both legs go out together."""

    flow: FlowName
    pair: Pair
    request_id: str
    prefill: Leg
    decode: Leg | None
    concurrent: bool
    decode_streams: bool
    capture_decode_params: bool
    conversation_id: str | None
    readback: bool = False
    """True when this turn's prefill reads earlier turns back from decode (bidirectional turn >= 2)."""
    transfer_id: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def parse_client_request(api: ApiKind, body: Any, headers: Mapping[str, str]) -> ClientRequest:
    """Validate the parts of a client request the flows depend on and strip the frontend's own fields."""
    if not isinstance(body, dict):
        raise ClientError("the request body must be a JSON object")
    body = dict(body)
    conversation = body.pop(CONVERSATION_FIELD, None)
    if conversation is None:
        conversation = _header(headers, CONVERSATION_HEADER)
    if conversation is not None and (not isinstance(conversation, str) or not 0 < len(conversation) <= 256):
        raise ClientError(f"{CONVERSATION_FIELD} must be a string of 1 to 256 characters")
    if "kv_transfer_params" in body:
        # The frontend owns the KV hand-off; a client value would pair engines behind its back.
        body.pop("kv_transfer_params")
    n = body.get("n", 1)
    if n not in (1, None) or body.get("best_of") not in (None, 1):
        raise ClientError("n and best_of must be 1: one prefill hands its KV to exactly one decode sequence")
    if api == "completions":
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) and len(prompt) != 1:
            raise ClientError("prompt must be one string or one token list: each prompt needs its own prefill")
        if prompt is None:
            raise ClientError("prompt is required")
    if api == "chat" and not isinstance(body.get("messages"), list):
        raise ClientError("messages must be a list")
    stream = bool(body.get("stream", False))
    options = body.get("stream_options")
    include_usage = bool(stream and isinstance(options, dict) and options.get("include_usage"))
    session = _header(headers, SESSION_HEADER)
    return ClientRequest(
        api=api,
        body=body,
        stream=stream,
        include_usage=include_usage,
        conversation_id=conversation,
        session_key=conversation or session or (body.get("user") if isinstance(body.get("user"), str) else None),
        client_request_id=_header(headers, REQUEST_ID_HEADER),
    )


def _header(headers: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


# ---- API adapters: bodies per endpoint ------------------------------------------------------------------------


def prefill_body(api: ApiKind, body: Mapping[str, Any], kv: Mapping[str, Any]) -> dict[str, Any]:
    """The prefill leg's body: one output token, no streaming, no minimum length (it would outlive max_tokens)."""
    out = dict(body)  # shallow: nested values are never mutated, and a deep copy per leg costs CPU
    for name in _PREFILL_DROPPED:
        out.pop(name, None)
    out["stream"] = False
    if api == "generate":
        sampling = dict(out.get("sampling_params") or {})
        sampling["max_tokens"] = 1
        sampling.pop("min_tokens", None)
        out["sampling_params"] = sampling
    else:
        out["max_tokens"] = 1
        if "max_completion_tokens" in out:
            out["max_completion_tokens"] = 1
    out["kv_transfer_params"] = dict(kv)
    return out


def decode_body(api: ApiKind, body: Mapping[str, Any], kv: Mapping[str, Any] | None, stream: bool) -> dict[str, Any]:
    out = dict(body)  # shallow: nested values are never mutated, and a deep copy per leg costs CPU
    out["stream"] = stream
    if not stream:
        out.pop("stream_options", None)
    if kv is not None:
        out["kv_transfer_params"] = dict(kv)
    else:
        out.pop("kv_transfer_params", None)
    return out


def returned_kv_params(response: Any) -> dict[str, Any] | None:
    """`kv_transfer_params` of a non-streaming completion, chat or generate response (top level in all three)."""
    if isinstance(response, dict) and isinstance(response.get("kv_transfer_params"), dict):
        return dict(response["kv_transfer_params"])
    return None


# ---- the flows --------------------------------------------------------------------------------------------------


def moriio_request_id(pair: Pair, nonce: str) -> str:
    """`___prefill_addr_{zmq}___decode_addr_{zmq}_{32 hex}`: MoRI-IO parses each peer's address out of it."""
    return f"___prefill_addr_{pair.prefill.moriio_zmq_address}___decode_addr_{pair.decode.moriio_zmq_address}_{nonce}"


def _headers(request_id: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    headers = {REQUEST_ID_HEADER: request_id, "Content-Type": "application/json"}
    if extra:
        headers.update(extra)
    return headers


def dp_rank(engine: Engine, nonce: str) -> int | None:
    """The data-parallel rank a concurrent flow pins a multi-rank prefill engine to (None with one rank): decode
    must be told which rank holds the KV before prefill has run, so the frontend chooses it."""
    return int(nonce[:8], 16) % engine.dp_size if engine.dp_size > 1 else None


def rank_engine_id(engine_id: str, rank: int | None) -> str:
    """vLLM gives each data-parallel rank its own engine id: `<engine_id>_dp<rank>` (`v1/engine/core.py`)."""
    return engine_id if rank is None else f"{engine_id}_dp{rank}"


def _rank_headers(rank: int | None) -> dict[str, str]:
    return {} if rank is None else {DP_RANK_HEADER: str(rank)}


def push_coordinates(prefill: Engine, rank: int | None = None) -> dict[str, Any] | None:
    """The prefill coordinates a push decode registers with, or None when the engine id is unknown.

    `remote_request_id` must be present (decode's `add_new_req_to_recv` reads it without a default; a KeyError kills
    the engine core) and is None on purpose (D200): vLLM 0.32's decode starts lease heartbeats toward prefill only
    when it is set, and its first heartbeat opens a *full* handshake with prefill (descriptors for every prefill
    block, which push never reads; the heartbeat asks for a notif-only one only with PP > 1), racing the notif-only
    handshake the PUSH_REG needs and delaying it on a loaded CPU node. The heartbeats could not help anyway: prefill's
    real id has a random suffix no one knows before it runs and they match exactly, so prefill's
    `kv_lease_duration` alone covers the push.
    With data-parallel ranks, `rank` names the one prefill runs on: it listens on the side-channel base port plus
    its rank."""
    if not prefill.engine_id:
        return None
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": rank_engine_id(prefill.engine_id, rank),
        "remote_request_id": None,
        "remote_host": prefill.host,
        "remote_port": prefill.side_channel_port + (rank or 0),
        "tp_size": prefill.tp_size,
        "pp_size": prefill.pp_size,
        "remote_block_ids": None,
    }


def mooncake_bootstrap_address(prefill: Engine) -> str:
    host = f"[{prefill.host}]" if ":" in prefill.host else prefill.host
    return f"http://{host}:{prefill.bootstrap_port}"


def plan(
    flow: FlowName,
    request: ClientRequest,
    pair: Pair,
    nonce: str,
    *,
    body: Mapping[str, Any] | None = None,
    api: ApiKind | None = None,
    readback: Mapping[str, Any] | None = None,
) -> FlowPlan:
    """The first legs of one request. `body`/`api` override the client's (render tier: the rendered generate
    request); `readback` is the conversation's stored decode params (bidirectional, turn >= 2)."""
    if len(nonce) != 32 or any(c not in "0123456789abcdef" for c in nonce):
        raise ValueError("nonce must be 32 lowercase hex digits")
    api = api or request.api
    body = body if body is not None else request.body
    path = API_PATHS[api]
    client_stream = request.stream
    if flow in ("moriio-read", "moriio-write"):
        return _plan_moriio(flow, request, pair, nonce, api, body, path, client_stream)
    if flow == "mooncake":
        return _plan_mooncake(request, pair, nonce, api, body, path, client_stream)
    request_id = nonce
    kv = dict(_BLANK_PREFILL_PARAMS)
    conversation = request.conversation_id if flow == "bidirectional" else None
    if flow == "bidirectional" and readback:
        kv = dict(readback)
        kv["do_remote_decode"] = True
        kv["do_remote_prefill"] = False
    rank = dp_rank(pair.prefill, nonce) if flow == "push" and pair.prefill.engine_id else None
    if flow == "push":
        kv["transfer_id"] = nonce  # read by vLLM > 0.33 only; 0.32/0.33 pair by X-Request-Id
    prefill = Leg(
        "prefill", pair.prefill, path, _headers(request_id, _rank_headers(rank)), prefill_body(api, body, kv), False
    )
    capture = conversation is not None
    decode_streams = client_stream and not capture
    if flow == "push":
        coordinates = push_coordinates(pair.prefill, rank)
        if coordinates is not None:
            coordinates["transfer_id"] = nonce
            decode = Leg(
                "decode",
                pair.decode,
                path,
                _headers(request_id),
                decode_body(api, body, coordinates, decode_streams),
                decode_streams,
            )
            return FlowPlan(
                flow, pair, request_id, prefill, decode, True, decode_streams, False, None, transfer_id=nonce
            )
        return FlowPlan(
            flow,
            pair,
            request_id,
            prefill,
            None,
            False,
            decode_streams,
            False,
            None,
            transfer_id=nonce,
            notes=("prefill engine id unknown: push runs prefill first and forwards its coordinates",),
        )
    return FlowPlan(
        flow, pair, request_id, prefill, None, False, decode_streams, capture, conversation, readback=bool(readback)
    )


def _plan_mooncake(
    request: ClientRequest,
    pair: Pair,
    nonce: str,
    api: ApiKind,
    body: Mapping[str, Any],
    path: str,
    client_stream: bool,
) -> FlowPlan:
    """MooncakeConnector (vLLM 0.32/0.33 `mooncake_connector.py`): decode's scheduler needs `remote_engine_id`,
    `remote_bootstrap_addr` and `transfer_id` (else "Got invalid KVTransferParams" and it recomputes); prefill
    keeps its blocks for decode only with `do_remote_decode` and a `transfer_id`. Prefill returns no params, so
    decode cannot wait for them: both legs go out at once, as vLLM's Mooncake proxy sends them."""
    if not pair.prefill.engine_id:
        raise ClientError(
            f"prefill engine {pair.prefill.name} has no known engine id, which Mooncake decode needs", 503
        )
    transfer_id = f"{MOONCAKE_TRANSFER_PREFIX}-{nonce}"
    rank = dp_rank(pair.prefill, nonce)
    prefill_kv = {"do_remote_decode": True, "do_remote_prefill": False, "transfer_id": transfer_id}
    decode_kv = {
        "do_remote_decode": False,
        "do_remote_prefill": True,
        "remote_bootstrap_addr": mooncake_bootstrap_address(pair.prefill),
        "remote_engine_id": rank_engine_id(pair.prefill.engine_id, rank),
        "transfer_id": transfer_id,
    }
    prefill = Leg(
        "prefill",
        pair.prefill,
        path,
        _headers(nonce, _rank_headers(rank)),
        prefill_body(api, body, prefill_kv),
        False,
    )
    decode = Leg(
        "decode", pair.decode, path, _headers(nonce), decode_body(api, body, decode_kv, client_stream), client_stream
    )
    return FlowPlan("mooncake", pair, nonce, prefill, decode, True, client_stream, False, None, transfer_id=transfer_id)


def _plan_moriio(
    flow: FlowName,
    request: ClientRequest,
    pair: Pair,
    nonce: str,
    api: ApiKind,
    body: Mapping[str, Any],
    path: str,
    client_stream: bool,
) -> FlowPlan:
    request_id = moriio_request_id(pair, nonce)
    transfer_id = f"{MORIIO_TRANSFER_PREFIX}-{nonce}"
    prefill_extra: dict[str, str] = {}
    decode_kv: dict[str, Any] = {
        "do_remote_decode": False,
        "do_remote_prefill": True,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "transfer_id": transfer_id,
        "remote_dp_size": pair.prefill.dp_size,
        "remote_tp_size": pair.prefill.tp_size,
    }
    if pair.prefill.dp_size > 1:
        # Router-authoritative rank: the prefill leg is pinned to it and decode is told which rank holds the KV.
        rank = int(nonce[:8], 16) % pair.prefill.dp_size
        prefill_extra[DP_RANK_HEADER] = str(rank)
        decode_kv["remote_dp_rank"] = rank
    prefill_kv = {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_dp_size": pair.decode.dp_size,
        "remote_tp_size": pair.decode.tp_size,
        "transfer_id": transfer_id,
    }
    prefill = Leg(
        "prefill", pair.prefill, path, _headers(request_id, prefill_extra), prefill_body(api, body, prefill_kv), False
    )
    if flow == "moriio-write":
        decode = Leg(
            "decode",
            pair.decode,
            path,
            _headers(request_id),
            decode_body(api, body, decode_kv, client_stream),
            client_stream,
        )
        return FlowPlan(
            flow, pair, request_id, prefill, decode, True, client_stream, False, None, transfer_id=transfer_id
        )
    return FlowPlan(flow, pair, request_id, prefill, None, False, client_stream, False, None, transfer_id=transfer_id)


def decode_leg(
    flow_plan: FlowPlan,
    request: ClientRequest,
    prefill_response: Any,
    *,
    body: Mapping[str, Any] | None = None,
    api: ApiKind | None = None,
) -> tuple[Leg, bool]:
    """The decode leg of a sequential plan from prefill's response; the flag says whether KV params were handed
    over (False: prefill returned none, decode computes the prompt itself, as vllm-router also does)."""
    api = api or request.api
    body = body if body is not None else request.body
    returned = returned_kv_params(prefill_response)
    kv: dict[str, Any] | None
    if flow_plan.flow == "moriio-read":
        kv = {
            "do_remote_decode": False,
            "do_remote_prefill": True,
            "transfer_id": flow_plan.transfer_id,
            "remote_dp_size": flow_plan.pair.prefill.dp_size,
            "remote_tp_size": flow_plan.pair.prefill.tp_size,
        }
        if returned is not None:
            kv.update(returned)
            kv["do_remote_decode"] = False
            kv["do_remote_prefill"] = True
            kv.setdefault("transfer_id", flow_plan.transfer_id)
        else:
            kv = None
    else:
        kv = returned
        if kv is not None and flow_plan.flow == "push" and flow_plan.transfer_id:
            kv["transfer_id"] = flow_plan.transfer_id
    leg = Leg(
        "decode",
        flow_plan.pair.decode,
        API_PATHS[api],
        _headers(flow_plan.request_id),
        decode_body(api, body, kv, flow_plan.decode_streams),
        flow_plan.decode_streams,
    )
    return leg, kv is not None


def kv_handed_off(prefill_response: Any) -> int:
    """How many KV blocks prefill offered decode (0: none), from its returned `remote_block_ids`."""
    params = returned_kv_params(prefill_response) or {}
    blocks = params.get("remote_block_ids") or []
    if blocks and isinstance(blocks[0], list | tuple):
        return sum(len(group) for group in blocks)
    return len(blocks)


def prefill_cached_tokens(prefill_response: Any) -> int | None:
    """Tokens prefill did not compute (its prefix-cache hits plus KV read back from decode): vLLM puts the count in
    the returned params as `remote_prefill_cached_tokens`."""
    params = returned_kv_params(prefill_response) or {}
    value = params.get("remote_prefill_cached_tokens")
    return value if isinstance(value, int) else None


def prompt_tokens(response: Any) -> int | None:
    if isinstance(response, dict) and isinstance(response.get("usage"), dict):
        value = response["usage"].get("prompt_tokens")
        return value if isinstance(value, int) else None
    return None


# ---- streaming a non-streamed decode (bidirectional) ----------------------------------------------------------


def sse(payload: Mapping[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def synthesize_stream(api: ApiKind, response: Mapping[str, Any], include_usage: bool) -> list[bytes]:
    """SSE events equivalent to a complete completion or chat response: the text in one chunk, then the finish,
    the usage when asked for, and `[DONE]`. Used when decode ran non-streaming to return its KV params."""
    base = {k: response.get(k) for k in ("id", "created", "model") if k in response}
    events: list[bytes] = []
    choices = response.get("choices") or []
    if api == "chat":
        base["object"] = "chat.completion.chunk"
        for choice in choices:
            message = choice.get("message") or {}
            delta: dict[str, Any] = {"role": message.get("role", "assistant"), "content": message.get("content") or ""}
            if message.get("tool_calls"):
                delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(message["tool_calls"])]
            if message.get("reasoning_content") or message.get("reasoning"):
                delta["reasoning_content"] = message.get("reasoning_content") or message.get("reasoning")
            index = choice.get("index", 0)
            events.append(sse({**base, "choices": [{"index": index, "delta": delta, "finish_reason": None}]}))
            events.append(
                sse({**base, "choices": [{"index": index, "delta": {}, "finish_reason": choice.get("finish_reason")}]})
            )
    else:
        base["object"] = "text_completion"
        for choice in choices:
            index = choice.get("index", 0)
            events.append(
                sse(
                    {
                        **base,
                        "choices": [
                            {
                                "index": index,
                                "text": choice.get("text", ""),
                                "logprobs": choice.get("logprobs"),
                                "finish_reason": choice.get("finish_reason"),
                            }
                        ],
                    }
                )
            )
    if include_usage and response.get("usage") is not None:
        events.append(sse({**base, "choices": [], "usage": response["usage"]}))
    events.append(sse("[DONE]"))
    return events


# ---- render tier -----------------------------------------------------------------------------------------------


def render_body(api: ApiKind, request: ClientRequest) -> dict[str, Any]:
    """The client's body for the render server (it tokenizes and applies the chat template)."""
    if api not in RENDER_PATHS:
        raise ClientError(f"the render tier serves completions and chat, not {api}")
    return copy.deepcopy(request.body)


def rendered_generate_request(api: ApiKind, rendered: Any) -> dict[str, Any]:
    """The one generate request a render call returned (completions render returns a list of them)."""
    if api == "completions":
        if not isinstance(rendered, list) or len(rendered) != 1 or not isinstance(rendered[0], dict):
            raise ClientError("the render tier returned no single generate request for this prompt", 502)
        rendered = rendered[0]
    if not isinstance(rendered, dict) or not isinstance(rendered.get("token_ids"), list):
        raise ClientError("the render tier returned no generate request", 502)
    return dict(rendered)


def derender_body(
    api: ApiKind,
    request: ClientRequest,
    generate_request: Mapping[str, Any],
    generate_response: Mapping[str, Any],
) -> dict[str, Any]:
    token_ids = list(generate_request.get("token_ids") or [])
    model = request.body.get("model")
    if api == "chat":
        return {
            "model": model,
            "generate_response": dict(generate_response),
            "prompt_tokens": len(token_ids),
            "prompt_token_ids": token_ids,
            "chat_request": request.body,
        }
    return {
        "model": model,
        "generate_responses": [dict(generate_response)],
        "prompt_tokens": [len(token_ids)],
        "prompt_token_ids": [token_ids],
        "completion_request": request.body,
    }


def derender_stream_body(
    api: ApiKind,
    request: ClientRequest,
    generate_request: Mapping[str, Any],
    chunk: Mapping[str, Any],
    state: Any,
) -> dict[str, Any]:
    """One per-chunk streaming derender call: the chunk plus the state the previous call returned."""
    token_ids = list(generate_request.get("token_ids") or [])
    out: dict[str, Any] = {
        "stream": True,
        "model": request.body.get("model"),
        "generate_chunk": dict(chunk),
        "stream_state": state,
        "prompt_tokens": len(token_ids),
        "prompt_token_ids": token_ids,
    }
    out["chat_request" if api == "chat" else "completion_request"] = request.body
    return out


def generate_stream_body(rendered: Mapping[str, Any], stream: bool) -> dict[str, Any]:
    """The rendered generate request as the engines get it: token output, streaming as the client asked."""
    out = dict(rendered)
    out["output_mode"] = "tokens"
    out["stream"] = stream
    if stream:
        options = dict(out.get("stream_options") or {})
        options["include_usage"] = True
        out["stream_options"] = options
    return out
