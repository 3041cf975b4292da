"""Every flow through the real frontend shell against the protocol simulator (e2e/pdsim.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import replace

import aiohttp
import pytest
from e2e.pdsim import SimError, serve_engines

from tests.unit.frontend.harness import Stack, config, engines_for, free_port, sim_engines, stack

PROMPT = " ".join(f"w{i}" for i in range(100))


def by_source(engine: object, source: str) -> float:
    return engine.counters.get(f'vllm:prompt_tokens_by_source{{source="{source}"', 0.0)  # type: ignore[attr-defined]


async def test_pull_moves_the_prompt_to_decode() -> None:
    prefills, decodes = sim_engines("nixl")
    async with stack(config(flow="pull"), prefills, decodes) as s:
        status, data, headers = await s.post("/v1/completions", {"model": "sim", "prompt": PROMPT, "max_tokens": 5})
    assert status == 200, data
    assert data["usage"]["completion_tokens"] == 5
    assert by_source(decodes[0], "external_kv_transfer") == 100
    assert by_source(decodes[0], "local_compute") == 0
    assert by_source(prefills[0], "local_compute") == 100
    assert headers["X-Disagg-Prefill"] == "prefill-0" and headers["X-Disagg-Decode"] == "decode-0"
    p_req, d_req = prefills[0].log[0], decodes[0].log[0]
    assert p_req["kv_transfer_params"]["do_remote_decode"] is True
    assert d_req["kv_transfer_params"]["remote_engine_id"] == "prefill-0"


async def test_pull_streams_the_decode_answer_through() -> None:
    prefills, decodes = sim_engines("nixl")
    async with stack(config(flow="pull"), prefills, decodes) as s:
        status, body, headers = await s.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 4, "stream": True})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = [line for line in body.decode().splitlines() if line.startswith("data: ")]
    assert len(events) == 5 and events[-1] == "data: [DONE]"
    assert decodes[0].log[0]["stream"] is True and prefills[0].log[0]["stream"] is False


async def test_push_both_legs_concurrently_and_decode_gets_the_kv() -> None:
    prefills, decodes = sim_engines("nixl-push", prefill_base_seconds=0.05)
    async with stack(config(flow="push"), prefills, decodes) as s:
        status, data, _ = await s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}]})
        metrics = (await s.session.get(s.url + "/metrics")).text
        text = await metrics()
    assert status == 200, data
    n = data["usage"]["prompt_tokens"]
    assert by_source(decodes[0], "external_kv_transfer") == n and by_source(decodes[0], "local_compute") == 0
    # Decode registered while prefill was still computing: the legs really overlapped.
    assert 'disagg_frontend_kv_handoffs_total{flow="push",outcome="concurrent"} 1.0' in text


async def test_push_with_mismatched_request_ids_never_completes() -> None:
    """The simulator's matching is vLLM's: a decode leg with another X-Request-Id is never pushed to."""
    prefills, decodes = sim_engines("nixl-push", push_timeout=0.5)
    async for urls in serve_engines([*prefills, *decodes]):
        async with aiohttp.ClientSession() as session:
            kv = {
                "do_remote_prefill": True,
                "remote_engine_id": "prefill-0",
                "remote_host": "127.0.0.1",
                "remote_port": prefills[0].side_channel_port,
                "tp_size": 1,
                "remote_block_ids": None,
                "remote_request_id": "cmpl-" + "a" * 32 + "-0",
            }
            decode = session.post(
                urls[1] + "/v1/completions",
                json={"prompt": PROMPT, "kv_transfer_params": kv},
                headers={"X-Request-Id": "a" * 32},
            )
            prefill = session.post(
                urls[0] + "/v1/completions",
                json={"prompt": PROMPT, "kv_transfer_params": {"do_remote_decode": True}},
                headers={"X-Request-Id": "b" * 32},
            )
            d, p = await asyncio.gather(decode, prefill)
            assert p.status == 200 and d.status == 500
            assert "timed out without a push completion" in await d.text()
        break


async def test_push_prefill_failure_ends_the_decode_leg() -> None:
    prefills, decodes = sim_engines("nixl-push", push_timeout=30, prefill_base_seconds=0.2)
    async with stack(config(flow="push"), prefills, decodes) as s:
        original = prefills[0]._run

        async def failing(*args: object) -> dict[str, object]:
            await original(*args)  # type: ignore[arg-type]
            raise SimError(503, "prefill engine died")

        prefills[0]._run = failing  # type: ignore[method-assign]
        started = asyncio.get_running_loop().time()
        status, data, _ = await asyncio.wait_for(s.post("/v1/completions", {"prompt": PROMPT}), 10)
        elapsed = asyncio.get_running_loop().time() - started
    # Decode would wait for a push until its registration timeout (30 s here); the frontend ends it at once.
    assert status == 503 and "prefill engine died" in json.dumps(data) and elapsed < 5


async def _give_up(s: Stack, body: dict[str, object], after: float) -> None:
    """Send `body` and close the connection after `after` seconds, as a client whose timeout fired."""
    timeout = aiohttp.ClientTimeout(total=after)
    with pytest.raises(asyncio.TimeoutError):
        async with s.session.post(s.url + "/v1/completions", json=body, timeout=timeout) as r:
            await r.read()


async def _until(condition: Callable[[], bool], what: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"the engines never saw the client leave: {what()}"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_that_leaves_aborts_both_push_legs(stream: bool) -> None:
    # Prefill computes for 3 s and decode waits for its push: both legs are in flight when the client leaves.
    prefills, decodes = sim_engines("nixl-push", push_timeout=30, prefill_base_seconds=3.0)
    async with stack(config(flow="push"), prefills, decodes) as s:
        await _give_up(s, {"prompt": PROMPT, "max_tokens": 4, "stream": stream}, after=0.5)
        aborted = lambda: (prefills[0].aborted, decodes[0].aborted)  # noqa: E731
        await _until(lambda: aborted() == (1, 1), aborted)
    assert prefills[0].served == 1 and decodes[0].served == 1


async def test_a_client_that_leaves_during_prefill_aborts_it_and_sends_no_decode_leg() -> None:
    prefills, decodes = sim_engines("nixl", prefill_base_seconds=3.0)
    async with stack(config(flow="pull"), prefills, decodes) as s:
        await _give_up(s, {"prompt": PROMPT, "max_tokens": 4}, after=0.5)
        await _until(lambda: prefills[0].aborted == 1, lambda: prefills[0].aborted)
        await asyncio.sleep(0.2)
    assert decodes[0].served == 0


async def test_bidirectional_second_turn_reads_the_history_back_from_decode() -> None:
    prefills, decodes = sim_engines("nixl", bidirectional=True)
    prefills[0].prefix_caching = False  # whatever prefill does not compute on turn 2 came back from decode
    async with stack(config(flow="bidirectional", decode_policy="consistent_hash"), prefills, decodes) as s:
        first = await s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 4, "conversation_id": "c1"})
        assert first[0] == 200 and len(s.frontend.store) == 1
        computed_before = by_source(prefills[0], "local_compute")
        history = PROMPT + "".join(first[1]["choices"][0]["text"])
        second = await s.post(
            "/v1/completions", {"prompt": history + " n1 n2", "max_tokens": 4, "conversation_id": "c1"}
        )
        assert second[0] == 200
    turn2 = prefills[0].log[1]["kv_transfer_params"]
    assert turn2["remote_engine_id"] == "decode-0" and turn2["do_remote_decode"] is True
    assert by_source(prefills[0], "external_kv_transfer") >= 100
    assert by_source(prefills[0], "local_compute") - computed_before <= 2 + 16
    # Decode ran non-streaming both turns (only those responses carry its params).
    assert all(entry["stream"] is False for entry in decodes[0].log)


async def test_bidirectional_streams_to_the_client_from_a_non_streamed_decode() -> None:
    prefills, decodes = sim_engines("nixl", bidirectional=True)
    async with stack(config(flow="bidirectional"), prefills, decodes) as s:
        body = {
            "prompt": PROMPT,
            "max_tokens": 3,
            "stream": True,
            "conversation_id": "c2",
            "stream_options": {"include_usage": True},
        }
        status, raw, _ = await s.stream("/v1/completions", body)
        assert status == 200 and len(s.frontend.store) == 1
    text = raw.decode()
    assert '"text":" t0 t1 t2"' in text and '"usage"' in text and text.endswith("data: [DONE]\n\n")


async def test_bidirectional_turn_after_expiry_is_a_plain_pull() -> None:
    now = [0.0]
    prefills, decodes = sim_engines("nixl", bidirectional=True)
    async with stack(config(flow="bidirectional", conversation_ttl=10), prefills, decodes, clock=lambda: now[0]) as s:
        await s.post("/v1/completions", {"prompt": PROMPT, "conversation_id": "c"})
        now[0] = 11.0
        await s.post("/v1/completions", {"prompt": PROMPT + " more", "conversation_id": "c"})
    assert prefills[0].log[1]["kv_transfer_params"]["remote_engine_id"] is None


async def test_mooncake_decode_finds_prefill_through_its_bootstrap_server_and_gets_the_kv() -> None:
    prefills, decodes = sim_engines("mooncake", prefill_base_seconds=0.05)
    async with stack(config(flow="mooncake"), prefills, decodes) as s:
        status, data, _ = await s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 4, "stream": False})
        streamed, body, _ = await s.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": 4, "stream": True})
    assert status == 200, data
    assert streamed == 200 and body.decode().rstrip().endswith("data: [DONE]")
    assert by_source(decodes[0], "external_kv_transfer") == 200 and by_source(decodes[0], "local_compute") == 0
    assert prefills[0].mooncake_sent == {}, "every transfer prefill kept was read"


async def test_mooncake_with_a_wrong_engine_id_fails_the_load() -> None:
    prefills, decodes = sim_engines("mooncake")
    async with stack(config(flow="mooncake"), prefills, decodes) as s:
        engines = engines_for(prefills, decodes)
        s.frontend.set_engines([replace(e, engine_id="other") if e.role == "prefill" else e for e in engines])
        status, data, _ = await s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 4})
    assert status == 500 and "not found from bootstrap server" in data["error"]["message"]


@pytest.mark.parametrize("mode", ["WRITE", "READ"])
async def test_moriio_flows_against_the_connector_protocol(mode: str) -> None:
    prefills, decodes = sim_engines("moriio", moriio_mode=mode)
    flow = "moriio-write" if mode == "WRITE" else "moriio-read"
    async with stack(config(flow=flow), prefills, decodes) as s:
        status, data, _ = await s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 3})
        for _ in range(100):  # read mode's release notification travels after decode has answered
            if any("notify" in entry for entry in prefills[0].log):
                break
            await asyncio.sleep(0.01)
    assert status == 200, data
    expected = 100 if mode == "WRITE" else 99  # READ mode recomputes the last prompt token on decode
    assert by_source(decodes[0], "external_kv_transfer") == expected
    notices = [entry["notify"]["type"] for entry in prefills[0].log if "notify" in entry]
    assert notices == (["remote_blocks"] if mode == "WRITE" else ["release"])


async def test_moriio_engines_register_over_zmq() -> None:
    from disagg.frontend.registry import MoriioRegistry

    endpoint = f"tcp://127.0.0.1:{free_port()}"
    prefills, decodes = sim_engines("moriio", registration=endpoint)
    seen: list[list[str]] = []
    registry = MoriioRegistry(endpoint, lambda engines: seen.append(sorted(e.role for e in engines)), "WRITE")
    await registry.start()
    try:
        async for _ in serve_engines([*prefills, *decodes]):
            for _ in range(50):
                if seen and seen[-1] == ["decode", "prefill"]:
                    break
                await asyncio.sleep(0.05)
            break
    finally:
        await registry.close()
    assert seen[-1] == ["decode", "prefill"]
    urls = sorted(e.url for e in registry.engines())
    assert urls == sorted(f"http://127.0.0.1:{e.http_port}" for e in [*prefills, *decodes])


async def test_mismatched_revisions_are_never_paired_and_headers_say_which_pair() -> None:
    prefills, decodes = sim_engines("nixl", prefills=2, decodes=2)
    revisions = {"prefill-0": "a", "decode-0": "b", "prefill-1": "b", "decode-1": "a"}
    async with stack(config(flow="pull"), prefills, decodes, revisions=revisions) as s:
        pairs = set()
        for _ in range(8):
            status, _, headers = await s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 1})
            assert status == 200
            pairs.add((headers["X-Disagg-Prefill"], headers["X-Disagg-Decode"], headers["X-Disagg-Pairing-Revision"]))
    assert pairs == {("prefill-0", "decode-1", "a"), ("prefill-1", "decode-0", "b")}


async def test_no_pair_is_503() -> None:
    prefills, decodes = sim_engines("nixl")
    async with stack(config(flow="pull"), prefills, decodes, engines=[]) as s:
        status, data, _ = await s.post("/v1/completions", {"prompt": "x"})
        ready = await s.session.get(s.url + "/ready")
    assert status == 503 and "decode" in data["error"]["message"] and ready.status == 503


async def test_probe_reports_each_pair_and_is_not_user_traffic() -> None:
    prefills, decodes = sim_engines("nixl", decodes=2)
    async with stack(config(flow="pull"), prefills, decodes) as s:
        status, report, _ = await s.post("/disagg/v1/probe", {"pairs": "all", "deadline_seconds": 5})
        text = await (await s.session.get(s.url + "/metrics")).text()
    assert status == 200 and report["ok"] is True
    assert {(r["prefill"], r["decode"]) for r in report["results"]} == {
        ("prefill-0", "decode-0"),
        ("prefill-0", "decode-1"),
    }
    assert all(r["kv_transferred"] is True and r["kv_blocks_handed_off"] > 0 for r in report["results"])
    assert "disagg_frontend_requests_total{" not in text
    assert 'disagg_frontend_probes_total{result="ok"} 2.0' in text


async def test_probe_finds_a_broken_pair_and_drain_takes_it_out() -> None:
    prefills, decodes = sim_engines("nixl", decodes=2)
    async with stack(config(flow="pull"), prefills, decodes) as s:
        # decode-1 forgets its peers (a restarted role): its reads fail, so it recomputes and counts a failure.
        decodes[1].fabric = type(decodes[1].fabric)()
        _, report, _ = await s.post("/disagg/v1/probe", {"pairs": "all"})
        verdict = {r["decode"]: r["kv_transferred"] for r in report["results"]}
        assert verdict == {"decode-0": True, "decode-1": False}
        status, _, _ = await s.post(
            "/disagg/v1/drain", {"prefill": "prefill-0", "decode": "decode-1", "reason": "probe"}
        )
        assert status == 200
        served = {
            (await s.post("/v1/completions", {"prompt": "x", "max_tokens": 1}))[2]["X-Disagg-Decode"] for _ in range(4)
        }
        pairs = await s.session.get(s.url + "/disagg/v1/pairs")
        listing = await pairs.json()
    assert served == {"decode-0"}
    assert [p["drained"] for p in listing["pairs"]] == [False, True]


async def test_a_candidate_is_probed_on_request_and_listed_but_never_serves_users() -> None:
    from dataclasses import replace as with_

    prefills, decodes = sim_engines("nixl", decodes=2)
    async with stack(config(flow="pull"), prefills, decodes) as s:
        engines = engines_for(prefills, decodes)  # the sims' ports are known once they serve
        s.frontend.set_engines([with_(e, candidate=True) if e.name == "decode-1" else e for e in engines])
        served = {
            (await s.post("/v1/completions", {"prompt": "x", "max_tokens": 1}))[2]["X-Disagg-Decode"] for _ in range(4)
        }
        listed = await (await s.session.get(s.url + "/disagg/v1/pairs?candidates=true")).json()
        plain = await (await s.session.get(s.url + "/disagg/v1/pairs")).json()
        _, report, _ = await s.post(
            "/disagg/v1/probe", {"pairs": [{"prefill": "prefill-0", "decode": "decode-1"}], "deadline_seconds": 5}
        )
        _, everything, _ = await s.post("/disagg/v1/probe", {"pairs": "all", "include_candidates": True})
    assert served == {"decode-0"}
    assert [(p["decode"], p.get("candidate", False)) for p in listed["pairs"]] == [
        ("decode-0", False),
        ("decode-1", True),
    ]
    assert [p["decode"] for p in plain["pairs"]] == ["decode-0"]
    (result,) = report["results"]
    assert (result["ok"], result["candidate"], result["kv_transferred"]) == (True, True, True), result["error"]
    assert sorted((r["decode"], r["candidate"]) for r in everything["results"]) == [
        ("decode-0", False),
        ("decode-1", True),
    ]


async def test_the_simulator_reproduces_stale_peers_as_measured_on_vllm() -> None:
    """D105: a restarted prefill under the same engine id wedges its decode; a restarted decode heals itself."""
    prefills, decodes = sim_engines("nixl")
    async with stack(config(flow="pull"), prefills, decodes) as s:

        async def probe() -> dict[str, object]:
            _, report, _ = await s.post("/disagg/v1/probe", {"pairs": "all", "deadline_seconds": 5})
            (result,) = report["results"]
            return dict(result)

        assert (await probe())["ok"] is True
        decodes[0].restart()
        assert (await probe())["ok"] is True
        prefills[0].restart()
        broken = await probe()
        assert broken["ok"] is False and "NIXL_ERR_REMOTE_DISCONNECT" in str(broken["error"])
        assert (await probe())["ok"] is False  # it stays broken: nothing re-handshakes
        decodes[0].restart()  # only a fresh decode (or a new prefill engine id) clears it
        assert (await probe())["ok"] is True


async def test_disagg_frontend_serves_moriio_engines_that_registered_over_zmq() -> None:
    """`disagg frontend --discovery moriio-registration` as a process: engines announce themselves, then serve."""
    import subprocess
    import sys

    registration = f"tcp://127.0.0.1:{free_port()}"
    prefills, decodes = sim_engines("moriio", registration=registration)
    port = free_port()
    frontend = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "disagg",
            "frontend",
            "--discovery",
            "moriio-registration",
            "--flow",
            "moriio-write",
            "--moriio-registration",
            registration,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--admin-port",
            "0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async for _ in serve_engines([*prefills, *decodes]):
            async with aiohttp.ClientSession() as session:
                for _ in range(200):
                    with contextlib.suppress(aiohttp.ClientError):
                        async with session.get(f"http://127.0.0.1:{port}/ready") as r:
                            if r.status == 200:
                                break
                    await asyncio.sleep(0.1)
                body = {"prompt": PROMPT, "max_tokens": 2}
                async with session.post(f"http://127.0.0.1:{port}/v1/completions", json=body) as r:
                    assert r.status == 200, await r.text()
            break
    finally:
        frontend.terminate()
        frontend.wait(10)
    assert by_source(decodes[0], "external_kv_transfer") == 100


async def test_engine_bodies_carry_the_clients_values_exactly() -> None:
    prefills, decodes = sim_engines("nixl")
    body = {
        "model": "sim",
        "prompt": "héllo ✓ " + PROMPT,
        "max_tokens": 3,
        "seed": 2**70 + 1,  # past 64 bits: orjson reads it as a float and refuses to write it
        "temperature": 0.1,
        "logit_bias": {"50256": -100},
    }
    async with stack(config(flow="pull"), prefills, decodes) as s:
        status, data, _ = await s.post("/v1/completions", body)
    assert status == 200, data
    for leg in (prefills[0].log[0]["body"], decodes[0].log[0]["body"]):
        assert leg["prompt"] == body["prompt"]
        assert leg["seed"] == 2**70 + 1 and isinstance(leg["seed"], int)
        assert leg["temperature"] == 0.1 and leg["logit_bias"] == {"50256": -100}


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
async def test_a_body_with_a_non_json_constant_is_refused_before_any_engine(constant: str) -> None:
    prefills, decodes = sim_engines("nixl")
    raw = f'{{"model": "sim", "prompt": "hi", "max_tokens": 2, "temperature": {constant}}}'.encode()
    async with (
        stack(config(flow="pull"), prefills, decodes) as s,
        s.session.post(s.url + "/v1/completions", data=raw, headers={"Content-Type": "application/json"}) as r,
    ):
        status, text = r.status, await r.text()
    assert status == 400 and "not valid JSON" in text
    assert prefills[0].log == [] and decodes[0].log == []
