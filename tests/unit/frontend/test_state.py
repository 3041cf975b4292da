"""Conversation store, the pod contract, SSE parsing, MoRI-IO registrations and probe verdicts."""

from __future__ import annotations

from typing import Any

import pytest

from disagg.frontend.contract import (
    ANNOTATION_KV_ENGINE_ID,
    ANNOTATION_PAIRING_GENERATION,
    ANNOTATION_SIDE_CHANNEL_PORT,
    LABEL_PAIRING_REVISION,
    ContractError,
    engine_annotations,
    engine_from_pod,
    engine_from_spec,
)
from disagg.frontend.conversations import ConversationStore
from disagg.frontend.moriio import engine_from_registration
from disagg.frontend.probe import decode_transfer_counters, kv_transferred, parse_metrics
from disagg.frontend.sse import SseParser

PARAMS = {"remote_engine_id": "d0", "remote_host": "10.0.0.2", "remote_block_ids": [[1]]}


def test_conversation_entries_are_used_once_and_expire() -> None:
    store = ConversationStore(ttl=10, capacity=10, blocks_ttl=480)
    store.put("c", PARAMS, "d0-key", now=0)
    entry = store.take("c", now=5)
    assert entry is not None and entry.decode_engine_id == "d0" and entry.decode_key == "d0-key"
    assert store.take("c", now=5) is None
    store.put("c", PARAMS, "d0-key", now=0)
    assert store.take("c", now=10) is None and store.expired == 1


def test_conversation_store_is_bounded() -> None:
    store = ConversationStore(ttl=100, capacity=3)
    for i in range(10):
        store.put(f"c{i}", PARAMS, "k", now=i)
    assert len(store) == 3 and store.evicted == 7
    assert store.take("c9", now=10) is not None and store.take("c0", now=10) is None


def test_conversation_ttl_must_stay_below_the_block_ttl() -> None:
    with pytest.raises(ValueError, match="decoder_kv_blocks_ttl"):
        ConversationStore(ttl=480, blocks_ttl=480)


def test_memory_stays_flat_over_many_expiring_conversations() -> None:
    store = ConversationStore(ttl=10, capacity=1_000_000)
    for i in range(100_000):
        store.put(f"c{i}", PARAMS, "k", now=i * 0.01)
        if i % 1000 == 0:
            store.expire(i * 0.01)
    assert len(store) <= 2001  # 10 s of arrivals at 100/s, plus those since the last expiry pass


def pod(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "metadata": {
            "name": "dd-prefill-0",
            "uid": "u1",
            "labels": {"disagg.dev/role": "prefill", LABEL_PAIRING_REVISION: "r1"},
            "annotations": {
                ANNOTATION_PAIRING_GENERATION: "3",
                ANNOTATION_SIDE_CHANNEL_PORT: "5700",
                ANNOTATION_KV_ENGINE_ID: "eng-a",
            },
        },
        "status": {
            "phase": "Running",
            "podIP": "10.1.2.3",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"restartCount": 2}],
        },
    }
    for key, value in overrides.items():
        base[key] = value
    return base


def test_engine_from_pod_reads_the_contract() -> None:
    engine = engine_from_pod(pod(), 8000)
    assert engine is not None
    assert engine.url == "http://10.1.2.3:8000" and engine.host == "10.1.2.3"
    assert engine.revision == "r1" and engine.generation == 3
    assert engine.side_channel_port == 5700 and engine.engine_id == "eng-a"
    assert engine.key == "u1/2"  # a container restart is a new engine for pairing


def test_engine_id_defaults_to_the_pod_name() -> None:
    p = pod()
    del p["metadata"]["annotations"][ANNOTATION_KV_ENGINE_ID]
    assert engine_from_pod(p, 8000).engine_id == "dd-prefill-0"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "status",
    [
        {"phase": "Pending", "podIP": "1.2.3.4", "conditions": [{"type": "Ready", "status": "True"}]},
        {"phase": "Running", "podIP": "1.2.3.4", "conditions": [{"type": "Ready", "status": "False"}]},
        {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    ],
)
def test_pods_that_are_not_serving_are_no_engines(status: dict[str, Any]) -> None:
    assert engine_from_pod(pod(status=status), 8000) is None


def test_bad_annotation_names_the_field() -> None:
    p = pod()
    p["metadata"]["annotations"][ANNOTATION_SIDE_CHANNEL_PORT] = "lots"
    with pytest.raises(ContractError, match=ANNOTATION_SIDE_CHANNEL_PORT):
        engine_from_pod(p, 8000)


def test_annotations_round_trip_through_the_contract() -> None:
    p = pod()
    p["metadata"]["annotations"] = engine_annotations(generation=7, engine_id="x", side_channel_port=5601, tp_size=4)
    engine = engine_from_pod(p, 8000)
    assert engine is not None and (engine.generation, engine.engine_id, engine.side_channel_port, engine.tp_size) == (
        7,
        "x",
        5601,
        4,
    )


def test_static_engine_spec() -> None:
    engine = engine_from_spec("prefill", "http://127.0.0.1:8100,engine-id=p0,side-channel-port=5601,tp=2", 0)
    assert (engine.host, engine.engine_id, engine.side_channel_port, engine.tp_size) == ("127.0.0.1", "p0", 5601, 2)
    with pytest.raises(ContractError, match="colour"):
        engine_from_spec("prefill", "http://h:1,colour=red", 0)
    with pytest.raises(ContractError, match="http://"):
        engine_from_spec("decode", "h:1", 0)


def test_sse_parser_across_chunk_boundaries() -> None:
    parser = SseParser()
    stream = b'data: {"a":1}\n\ndata: {"b":\ndata: 2}\r\n\r\n: comment\n\ndata: [DONE]\n\n'
    events: list[str] = []
    for i in range(0, len(stream), 5):
        events += parser.feed(stream[i : i + 5])
    assert events == ['{"a":1}', '{"b":\n2}', "[DONE]"]


def test_moriio_registration_payload() -> None:
    engine, mode = engine_from_registration(
        {
            "type": "D",
            "http_address": "10.0.0.9:8000",
            "zmq_address": "host:10.0.0.9,handshake:6301,notify:61005",
            "dp_size": 2,
            "tp_size": 8,
            "transfer_mode": "WRITE",
        }
    )
    assert mode == "WRITE" and engine.role == "decode" and engine.url == "http://10.0.0.9:8000"
    assert engine.moriio_zmq_address == "host:10.0.0.9,handshake:6301,notify:61005" and engine.dp_size == 2
    with pytest.raises(ContractError, match="transfer_mode"):
        engine_from_registration(
            {
                "type": "P",
                "http_address": "h:1",
                "zmq_address": "host:h,handshake:1,notify:2",
                "dp_size": 1,
                "tp_size": 1,
            }
        )


def test_probe_verdict_from_decode_counters() -> None:
    text = (
        "# TYPE vllm:prompt_tokens_by_source counter\n"
        'vllm:prompt_tokens_by_source_total{engine="0",source="external_kv_transfer"} 40.0\n'
        'vllm:prompt_tokens_by_source_total{engine="0",source="local_compute"} 3.0\n'
    )
    counters = decode_transfer_counters(parse_metrics(text))
    assert counters == {"external": 40.0, "failed": 0.0}
    assert kv_transferred(3, False, {"external": 10.0, "failed": 0.0}, counters) is True
    assert kv_transferred(3, False, counters, counters) is False
    assert kv_transferred(3, False, None, None) is None
    assert kv_transferred(0, False, None, None) is False
