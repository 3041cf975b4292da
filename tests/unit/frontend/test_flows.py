"""Flow decisions against vLLM 0.32/0.33's exact field names (nixl/pull_scheduler.py, push_scheduler.py,
push_worker.py, moriio_common.py, moriio_connector.py, scale_out/token_in_token_out/protocol.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from disagg.frontend import flows
from disagg.frontend.contract import Engine
from disagg.frontend.flows import ClientError, parse_client_request, plan
from disagg.frontend.selection import Pair

NONCE = "0123456789abcdef0123456789abcdef"
P = Engine(
    "p",
    "prefill",
    "http://10.0.0.1:8000",
    "10.0.0.1",
    name="p",
    engine_id="prefill-engine",
    side_channel_port=5600,
    tp_size=2,
    pp_size=1,
    moriio_handshake_port=6301,
    moriio_notify_port=61005,
)
D = Engine(
    "d",
    "decode",
    "http://10.0.0.2:8000",
    "10.0.0.2",
    name="d",
    engine_id="decode-engine",
    side_channel_port=5601,
    tp_size=4,
    moriio_handshake_port=6302,
    moriio_notify_port=61006,
)
PAIR = Pair(P, D)
# vLLM's own patterns (moriio_common.py, nixl/utils.py), applied to ids the way the engines see them.
PREFILL_ZMQ_RE = re.compile(r"___prefill_addr_(.+?)___decode_addr_")
DECODE_ZMQ_RE = re.compile(r"___decode_addr_(.+)_[0-9a-f]{32}(?:-.*)?$")
RANDOM_SUFFIX_RE = re.compile(r"-[0-9a-f]{8}$", re.IGNORECASE)


def request(api: flows.ApiKind = "completions", **body: Any) -> flows.ClientRequest:
    base: dict[str, Any] = {"model": "m", "max_tokens": 20}
    if api == "completions":
        base["prompt"] = "hello"
    elif api == "chat":
        base["messages"] = [{"role": "user", "content": "hi"}]
    base.update(body)
    return parse_client_request(api, base, {})


PREFILL_RESPONSE = {
    "choices": [{"text": "x"}],
    "usage": {"prompt_tokens": 100},
    "kv_transfer_params": {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": [[1, 2, 3, 4, 5, 6, 7]],
        "remote_engine_id": "prefill-engine",
        "remote_request_id": f"cmpl-{NONCE}-0-1a2b3c4d",
        "remote_host": "10.0.0.1",
        "remote_port": 5600,
        "tp_size": 2,
        "dcp_size": 1,
        "pp_size": 1,
        "remote_num_tokens": 100,
        "remote_blocks_expiry_time": None,
        "transfer_mode": "pull",
        "remote_prefill_cached_tokens": 32,
    },
}


# ---- pull -------------------------------------------------------------------------------------------------------


def test_pull_prefill_leg_is_the_toy_proxy_one() -> None:
    req = request(stream=True, stream_options={"include_usage": True}, min_tokens=5, max_tokens=50)
    p = plan("pull", req, PAIR, NONCE)
    assert not p.concurrent and p.decode is None
    body = p.prefill.body
    assert body["kv_transfer_params"] == {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }
    assert body["max_tokens"] == 1 and body["stream"] is False
    assert "stream_options" not in body and "min_tokens" not in body
    assert p.prefill.headers["X-Request-Id"] == NONCE
    assert p.prefill.url == "http://10.0.0.1:8000/v1/completions"


def test_pull_prefill_caps_max_completion_tokens_too() -> None:
    body = plan("pull", request("chat", max_completion_tokens=40), PAIR, NONCE).prefill.body
    assert body["max_tokens"] == 1 and body["max_completion_tokens"] == 1


def test_pull_decode_gets_prefills_whole_params_and_the_same_request_id() -> None:
    req = request(stream=True)
    p = plan("pull", req, PAIR, NONCE)
    leg, handed = flows.decode_leg(p, req, PREFILL_RESPONSE)
    assert handed
    assert leg.body["kv_transfer_params"] == PREFILL_RESPONSE["kv_transfer_params"]
    assert leg.body["max_tokens"] == 20 and leg.body["stream"] is True and leg.stream
    assert leg.headers["X-Request-Id"] == NONCE
    assert leg.url == "http://10.0.0.2:8000/v1/completions"
    # The fields decode's on_new_request needs before it tracks the request (base_scheduler.py).
    for name in ("remote_engine_id", "remote_request_id", "remote_host", "remote_port", "tp_size"):
        assert name in leg.body["kv_transfer_params"]


def test_pull_without_returned_params_decodes_locally() -> None:
    req = request()
    leg, handed = flows.decode_leg(plan("pull", req, PAIR, NONCE), req, {"choices": []})
    assert not handed and "kv_transfer_params" not in leg.body


def test_client_kv_params_and_conversation_field_never_reach_the_engines() -> None:
    req = request(kv_transfer_params={"do_remote_prefill": True}, conversation_id="c")
    p = plan("pull", req, PAIR, NONCE)
    assert "conversation_id" not in p.prefill.body
    assert p.prefill.body["kv_transfer_params"]["do_remote_decode"] is True
    assert req.conversation_id == "c"


def test_conversation_id_from_header() -> None:
    req = parse_client_request("completions", {"prompt": "x"}, {"x-conversation-id": "abc"})
    assert req.conversation_id == "abc" and req.session_key == "abc"


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": "x", "n": 2},
        {"prompt": "x", "best_of": 3},
        {"prompt": ["a", "b"]},
        {"max_tokens": 3},
        {"prompt": "x", "conversation_id": 5},
    ],
)
def test_requests_one_prefill_cannot_serve_are_refused(body: dict[str, Any]) -> None:
    with pytest.raises(ClientError):
        parse_client_request("completions", body, {})


def test_a_token_id_prompt_is_one_prompt() -> None:
    assert parse_client_request("completions", {"prompt": [1, 2, 3]}, {}).body["prompt"] == [1, 2, 3]


# ---- push -------------------------------------------------------------------------------------------------------


def test_push_dispatches_both_legs_with_prefill_coordinates() -> None:
    req = request(stream=True)
    p = plan("push", req, PAIR, NONCE)
    assert p.concurrent and p.decode is not None
    kv = p.decode.body["kv_transfer_params"]
    # push_scheduler.update_state_after_alloc reads these four without .get: a missing one is a KeyError.
    assert kv["remote_engine_id"] == "prefill-engine"
    assert kv["remote_host"] == "10.0.0.1"
    assert kv["remote_port"] == 5600
    assert kv["tp_size"] == 2
    assert kv["pp_size"] == 1
    # metadata.add_new_req_to_recv reads these without a default too (a KeyError kills decode's engine core).
    assert "remote_request_id" in kv and kv["remote_block_ids"] is None
    assert kv["do_remote_prefill"] is True and kv["do_remote_decode"] is False
    assert p.prefill.body["kv_transfer_params"]["do_remote_decode"] is True
    assert p.prefill.headers["X-Request-Id"] == p.decode.headers["X-Request-Id"] == NONCE
    assert kv["transfer_id"] == p.prefill.body["kv_transfer_params"]["transfer_id"] == NONCE


def test_push_decode_starts_no_heartbeat_handshake_toward_prefill() -> None:
    """D200: vLLM 0.32's decode (nixl/base_scheduler.py `on_new_request`) tracks lease heartbeats only when all of
    these are set, and its first heartbeat opens a full handshake with prefill (every prefill block's descriptors)
    that push never uses and that delayed the PUSH_REG past prefill's lease in pods. The key must stay present."""
    heartbeat_needs = ("remote_engine_id", "remote_request_id", "remote_host", "remote_port", "tp_size")
    for api in ("completions", "chat"):
        p = plan("push", request(api=api), PAIR, NONCE)
        assert p.decode is not None
        kv = p.decode.body["kv_transfer_params"]
        assert all(name in kv for name in heartbeat_needs)
        assert [name for name in heartbeat_needs if kv[name] is None] == ["remote_request_id"]


def test_push_request_ids_match_as_the_push_worker_matches_them() -> None:
    p = plan("push", request(), PAIR, NONCE)
    assert p.decode is not None
    # The engines derive cmpl-{X-Request-Id}-0-{8 hex}; push_worker strips the suffix and compares.
    prefill_id = f"cmpl-{p.prefill.headers['X-Request-Id']}-0-aaaaaaaa"
    decode_id = f"cmpl-{p.decode.headers['X-Request-Id']}-0-bbbbbbbb"
    assert RANDOM_SUFFIX_RE.sub("", prefill_id) == RANDOM_SUFFIX_RE.sub("", decode_id)


def test_push_without_a_prefill_engine_id_runs_sequentially() -> None:
    anonymous = Pair(Engine("p", "prefill", "http://h:1", "h"), D)
    req = request()
    p = plan("push", req, anonymous, NONCE)
    assert not p.concurrent and p.decode is None and p.notes
    leg, _ = flows.decode_leg(p, req, PREFILL_RESPONSE)
    assert leg.body["kv_transfer_params"]["remote_request_id"] == f"cmpl-{NONCE}-0-1a2b3c4d"


def test_push_to_a_data_parallel_prefill_names_the_rank_it_pins() -> None:
    wide = Pair(
        Engine("p", "prefill", "http://h:1", "10.0.0.1", engine_id="pod-a", side_channel_port=5600, dp_size=4), D
    )
    p = plan("push", request(), wide, NONCE)
    assert p.decode is not None
    rank = int(p.prefill.headers["X-data-parallel-rank"])
    kv = p.decode.body["kv_transfer_params"]
    # vLLM suffixes each rank's engine id (v1/engine/core.py) and binds its side channel at base + rank.
    assert kv["remote_engine_id"] == f"pod-a_dp{rank}" and kv["remote_port"] == 5600 + rank


# ---- mooncake ---------------------------------------------------------------------------------------------------


def test_mooncake_dispatches_both_legs_paired_by_transfer_id() -> None:
    booted = Pair(Engine("p", "prefill", "http://10.0.0.1:8000", "10.0.0.1", engine_id="pod-p", bootstrap_port=8998), D)
    p = plan("mooncake", request(stream=True), booted, NONCE)
    assert p.concurrent and p.decode is not None and p.decode.stream
    prefill_kv = p.prefill.body["kv_transfer_params"]
    decode_kv = p.decode.body["kv_transfer_params"]
    # The scheduler keeps prefill's blocks only with do_remote_decode and a transfer_id ...
    assert prefill_kv == {"do_remote_decode": True, "do_remote_prefill": False, "transfer_id": f"xfer-{NONCE}"}
    # ... and decode loads only with all three of remote_engine_id, remote_bootstrap_addr and transfer_id.
    assert decode_kv == {
        "do_remote_decode": False,
        "do_remote_prefill": True,
        "remote_bootstrap_addr": "http://10.0.0.1:8998",
        "remote_engine_id": "pod-p",
        "transfer_id": f"xfer-{NONCE}",
    }
    assert p.prefill.body["max_tokens"] == 1 and p.decode.body["max_tokens"] == 20
    assert "X-data-parallel-rank" not in p.prefill.headers


def test_mooncake_pins_a_data_parallel_prefill_rank() -> None:
    wide = Pair(Engine("p", "prefill", "http://h:1", "10.0.0.1", engine_id="pod-p", dp_size=2), D)
    p = plan("mooncake", request(), wide, NONCE)
    assert p.decode is not None
    rank = int(p.prefill.headers["X-data-parallel-rank"])
    assert p.decode.body["kv_transfer_params"]["remote_engine_id"] == f"pod-p_dp{rank}"


def test_mooncake_without_a_prefill_engine_id_is_refused() -> None:
    anonymous = Pair(Engine("p", "prefill", "http://h:1", "h"), D)
    with pytest.raises(ClientError) as raised:
        plan("mooncake", request(), anonymous, NONCE)
    assert raised.value.status == 503


# ---- bidirectional ----------------------------------------------------------------------------------------------

DECODE_PARAMS = {
    "do_remote_prefill": False,
    "do_remote_decode": True,
    "remote_block_ids": [[9, 10, 11]],
    "remote_engine_id": "decode-engine",
    "remote_request_id": "cmpl-old-0-12345678",
    "remote_host": "10.0.0.2",
    "remote_port": 5601,
    "tp_size": 4,
    "dcp_size": 1,
    "pp_size": 1,
    "remote_num_tokens": 48,
    "remote_blocks_expiry_time": 123.0,
    "transfer_mode": "pull",
}


def test_bidirectional_first_turn_runs_decode_non_streaming_to_capture_its_params() -> None:
    req = request(stream=True, conversation_id="c1")
    p = plan("bidirectional", req, PAIR, NONCE)
    assert p.capture_decode_params and p.conversation_id == "c1" and not p.decode_streams
    leg, _ = flows.decode_leg(p, req, PREFILL_RESPONSE)
    assert leg.body["stream"] is False and not leg.stream and "stream_options" not in leg.body


def test_bidirectional_next_turn_hands_prefill_decodes_whole_params() -> None:
    req = request(conversation_id="c1")
    p = plan("bidirectional", req, PAIR, NONCE, readback=DECODE_PARAMS)
    kv = p.prefill.body["kv_transfer_params"]
    # pull_scheduler.get_num_new_matched_tokens: do_remote_decode, non-empty remote_block_ids and these four.
    assert kv["do_remote_decode"] is True and kv["do_remote_prefill"] is False
    for name in ("remote_block_ids", "remote_engine_id", "remote_request_id", "remote_host", "remote_port"):
        assert kv[name] == DECODE_PARAMS[name]
    assert kv["remote_num_tokens"] == 48 and kv["tp_size"] == 4
    assert p.readback


def test_bidirectional_without_a_conversation_streams_like_pull() -> None:
    p = plan("bidirectional", request(stream=True), PAIR, NONCE)
    assert not p.capture_decode_params and p.decode_streams


# ---- MoRI-IO ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flow", ["moriio-read", "moriio-write"])
def test_moriio_request_id_embeds_both_peers_as_the_connector_parses_them(flow: flows.FlowName) -> None:
    p = plan(flow, request(), PAIR, NONCE)
    engine_side = f"cmpl-{p.request_id}-0-deadbeef"  # what the engines' request ids look like
    assert PREFILL_ZMQ_RE.search(engine_side).group(1) == "host:10.0.0.1,handshake:6301,notify:61005"  # type: ignore[union-attr]
    assert DECODE_ZMQ_RE.search(engine_side).group(1) == "host:10.0.0.2,handshake:6302,notify:61006"  # type: ignore[union-attr]
    kv = p.prefill.body["kv_transfer_params"]
    # moriio add_new_req reads transfer_id, remote_engine_id and remote_block_ids without .get.
    assert {"transfer_id", "remote_engine_id", "remote_block_ids"} <= set(kv)
    assert kv["transfer_id"] == f"tx-{NONCE}"
    assert kv["remote_tp_size"] == 4 and kv["remote_dp_size"] == 1 and kv["do_remote_decode"] is True


def test_moriio_write_dispatches_decode_with_the_shared_transfer_id() -> None:
    p = plan("moriio-write", request(stream=True), PAIR, NONCE)
    assert p.concurrent and p.decode is not None
    kv = p.decode.body["kv_transfer_params"]
    assert kv["do_remote_prefill"] is True and kv["transfer_id"] == f"tx-{NONCE}"
    assert kv["remote_tp_size"] == 2 and p.decode.headers["X-Request-Id"] == p.request_id


def test_moriio_read_forwards_prefills_returned_params() -> None:
    req = request()
    p = plan("moriio-read", req, PAIR, NONCE)
    assert not p.concurrent
    returned = {
        "kv_transfer_params": {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": [[1, 2]],
            "remote_engine_id": "e",
            "transfer_id": f"tx-{NONCE}",
            "remote_dp_rank": 0,
            "remote_dp_rank_override": True,
        }
    }
    leg, handed = flows.decode_leg(p, req, returned)
    kv = leg.body["kv_transfer_params"]
    assert handed and kv["remote_block_ids"] == [[1, 2]] and kv["remote_engine_id"] == "e"
    assert kv["do_remote_prefill"] is True and kv["transfer_id"] == f"tx-{NONCE}"


def test_moriio_pins_the_prefill_dp_rank_when_prefill_has_several() -> None:
    wide = Pair(Engine("p", "prefill", "http://h:1", "10.0.0.1", dp_size=4), D)
    p = plan("moriio-write", request(), wide, NONCE)
    assert p.decode is not None
    rank = int(p.prefill.headers["X-data-parallel-rank"])
    assert p.decode.body["kv_transfer_params"]["remote_dp_rank"] == rank and 0 <= rank < 4


# ---- render tier (tokens-only engines) --------------------------------------------------------------------------

RENDERED = {
    "request_id": "chatcmpl-r",
    "token_ids": [1, 2, 3],
    "sampling_params": {"max_tokens": 30, "min_tokens": 4, "temperature": 0.0},
    "stream": False,
    "model": "m",
}


def test_render_tier_prefill_caps_the_sampling_params() -> None:
    req = request("chat")
    body = flows.generate_stream_body(flows.rendered_generate_request("chat", RENDERED), False)
    p = plan("pull", req, PAIR, NONCE, body=body, api="generate")
    assert p.prefill.path == "/inference/v1/generate"
    assert p.prefill.body["sampling_params"]["max_tokens"] == 1
    assert "min_tokens" not in p.prefill.body["sampling_params"]
    assert p.prefill.body["kv_transfer_params"]["do_remote_decode"] is True
    assert p.prefill.body["output_mode"] == "tokens"
    leg, _ = flows.decode_leg(p, req, PREFILL_RESPONSE, body=body, api="generate")
    assert leg.body["sampling_params"]["max_tokens"] == 30 and leg.path == "/inference/v1/generate"


def test_render_tier_derender_bodies() -> None:
    req = request("chat")
    body = flows.derender_body("chat", req, RENDERED, {"choices": [{"token_ids": [5]}]})
    assert body["prompt_tokens"] == 3 and body["prompt_token_ids"] == [1, 2, 3]
    assert body["chat_request"] == req.body and body["generate_response"] == {"choices": [{"token_ids": [5]}]}
    completion = flows.derender_body("completions", request(), RENDERED, {"choices": []})
    assert completion["generate_responses"] == [{"choices": []}] and completion["prompt_tokens"] == [3]
    stream = flows.derender_stream_body("chat", req, RENDERED, {"choices": []}, {"prev_tokens": []})
    assert stream["stream"] is True and stream["stream_state"] == {"prev_tokens": []} and stream["chat_request"]


def test_completions_render_must_return_one_request() -> None:
    assert flows.rendered_generate_request("completions", [RENDERED])["token_ids"] == [1, 2, 3]
    with pytest.raises(ClientError):
        flows.rendered_generate_request("completions", [RENDERED, RENDERED])


# ---- helpers ----------------------------------------------------------------------------------------------------


def test_hand_off_figures() -> None:
    assert flows.kv_handed_off(PREFILL_RESPONSE) == 7
    assert flows.prefill_cached_tokens(PREFILL_RESPONSE) == 32
    assert flows.kv_handed_off({"choices": []}) == 0


def test_synthesized_stream_carries_the_whole_answer() -> None:
    events = flows.synthesize_stream(
        "chat",
        {
            "id": "x",
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hey"}, "finish_reason": "stop"}],
            "usage": {"total_tokens": 3},
        },
        include_usage=True,
    )
    text = b"".join(events).decode()
    assert '"content":"hey"' in text and '"finish_reason":"stop"' in text and '"usage"' in text
    assert text.endswith("data: [DONE]\n\n")


def test_nonce_must_be_32_hex() -> None:
    with pytest.raises(ValueError):
        plan("pull", request(), PAIR, "abc")
