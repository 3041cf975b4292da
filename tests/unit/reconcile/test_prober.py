"""The serving check's real HTTP client (`HttpProber`) against the operator's real frontend and its admin API, in
front of simulated engines (`e2e/pdsim.py`), in the test's event loop; and against a server that answers something
else than that API (`tests/support/http_apiserver.py`).

The in-process passes (`test_pass_serving.py`) plug a scripted prober into the reconciler; these tests hold the
real one to what the frontend serves: the pair list, a probe through a pair, drains, and one completion.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from disagg.reconcile import prober as prober_module
from disagg.reconcile.prober import HttpProber, PairRef, ProbeError
from tests.support.http_apiserver import HttpApiServer, reply, stall, text
from tests.unit.frontend.harness import Stack, config, sim_engines, stack


@pytest.fixture
async def frontend() -> AsyncIterator[Stack]:
    prefills, decodes = sim_engines("nixl")
    async with stack(config(flow="pull", model="m"), prefills, decodes) as running:
        yield running


@pytest.fixture
async def prober() -> AsyncIterator[HttpProber]:
    client = HttpProber()
    yield client
    await client.close()


@pytest.fixture
async def other() -> AsyncIterator[HttpApiServer]:
    """Something else listening where the frontend's admin API should be."""
    server = HttpApiServer()
    await server.start()
    yield server
    await server.stop()


def port_of(running: Stack) -> int:
    return int(running.url.rsplit(":", 1)[1])


async def test_the_pairs_the_frontend_serves_and_drains(frontend: Stack, prober: HttpProber) -> None:
    port = port_of(frontend)
    [pair] = await prober.pairs("127.0.0.1", port)
    assert (pair.prefill, pair.decode, pair.drained, pair.candidate) == ("prefill-0", "decode-0", False, False)
    await prober.drain("127.0.0.1", port, "prefill-0", "decode-0", 60.0, "probe failed twice")
    assert [p.drained for p in await prober.pairs("127.0.0.1", port)] == [True]
    await prober.undrain("127.0.0.1", port, "prefill-0", "decode-0")
    assert [p.drained for p in await prober.pairs("127.0.0.1", port)] == [False]


async def test_a_probe_goes_through_the_pair_and_reports_the_kv_transfer(frontend: Stack, prober: HttpProber) -> None:
    port = port_of(frontend)
    pairs = await prober.pairs("127.0.0.1", port)
    [outcome] = await prober.probe("127.0.0.1", port, pairs, 5.0)
    assert (outcome.prefill, outcome.decode, outcome.revision) == ("prefill-0", "decode-0", pairs[0].revision)
    assert outcome.ok and outcome.passed and outcome.error == "" and outcome.latency > 0
    assert not outcome.drained and not outcome.candidate
    # The frontend sent one request through prefill, then decode.
    assert [e.served for e in (*frontend.prefills, *frontend.decodes)] == [1, 1]


async def test_a_drained_pair_is_probed_and_reported_drained(frontend: Stack, prober: HttpProber) -> None:
    port = port_of(frontend)
    await prober.drain("127.0.0.1", port, "prefill-0", "decode-0", 60.0, "remediation")
    [outcome] = await prober.probe("127.0.0.1", port, await prober.pairs("127.0.0.1", port), 5.0)
    assert outcome.ok and outcome.drained


async def test_no_pairs_is_no_request(other: HttpApiServer, prober: HttpProber) -> None:
    assert await prober.probe("127.0.0.1", other.port, [], 5.0) == []
    assert other.received == []


async def test_an_unknown_engine_is_refused_by_the_frontend_with_its_message(
    frontend: Stack, prober: HttpProber
) -> None:
    port = port_of(frontend)
    ghost = PairRef("prefill-9", "decode-0", "", False, False)
    with pytest.raises(ProbeError) as raised:
        await prober.probe("127.0.0.1", port, [ghost], 5.0)
    assert f"POST http://127.0.0.1:{port}/disagg/v1/probe answered 400" in str(raised.value)
    assert "no serving engine named 'prefill-9'" in str(raised.value)


async def test_one_completion_through_an_endpoint(frontend: Stack, prober: HttpProber) -> None:
    outcome = await prober.complete("127.0.0.1", port_of(frontend), "m", 5.0)
    assert outcome.ok and outcome.error == "" and outcome.latency > 0
    assert (outcome.prefill, outcome.decode, outcome.revision) == ("", "", "")  # an endpoint check names no pair
    assert [e.served for e in (*frontend.prefills, *frontend.decodes)] == [1, 1]  # served as any request is


async def test_a_completion_that_fails_is_an_outcome_not_an_exception(other: HttpApiServer, prober: HttpProber) -> None:
    other.answer("POST", "/v1/completions", text(503, "no engine"))
    outcome = await prober.complete("127.0.0.1", other.port, "m", 5.0)
    assert not outcome.ok
    assert (outcome.prefill, outcome.decode, outcome.revision) == ("", "", "")  # an endpoint check names no pair
    assert outcome.error == f"POST http://127.0.0.1:{other.port}/v1/completions answered 503: no engine"
    body = other.received[0].json()
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("m", 2, 0)


async def test_the_prompt_differs_per_completion_so_no_cache_answers_it(
    other: HttpApiServer, prober: HttpProber
) -> None:
    other.answer("POST", "/v1/completions", reply(200, {"choices": [{"text": "ok"}]}))
    first = await prober.complete("127.0.0.1", other.port, "m", 5.0)
    second = await prober.complete("127.0.0.1", other.port, "m", 5.0)
    assert first.ok and second.ok
    prompts = [r.json()["prompt"] for r in other.received]
    assert len(set(prompts)) == 2 and all("disagg serving check" in p for p in prompts)


async def test_a_completion_past_its_deadline_fails(other: HttpApiServer, prober: HttpProber) -> None:
    other.answer("POST", "/v1/completions", stall(30))
    outcome = await prober.complete("127.0.0.1", other.port, "m", 0.3)
    assert not outcome.ok and "TimeoutError" in outcome.error
    assert 0.3 <= outcome.latency < 10


async def test_a_frontend_that_does_not_answer_in_time_is_a_probe_error(
    other: HttpApiServer, prober: HttpProber, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prober_module, "EXTRA_SECONDS", 0.2)
    other.answer("POST", "/disagg/v1/probe", stall(30))
    pair = PairRef("p", "d", "r1", False, False)
    with pytest.raises(ProbeError, match="TimeoutError"):
        await prober.probe("127.0.0.1", other.port, [pair], 0.1)
    assert other.received[0].json() == {"pairs": [{"prefill": "p", "decode": "d"}], "deadline_seconds": 0.1}


async def test_an_answer_that_is_not_the_frontends_api_is_a_probe_error(
    other: HttpApiServer, prober: HttpProber
) -> None:
    other.answer("GET", "/disagg/v1/pairs", reply(200, {"pairs": [{"name": "x"}]}))
    with pytest.raises(ProbeError, match="pair list is not what the operator expects"):
        await prober.pairs("127.0.0.1", other.port)
    assert other.received[0].query == [("candidates", "true")]
    other.answer("POST", "/disagg/v1/probe", reply(200, {"results": [{"prefill": "p"}]}))
    with pytest.raises(ProbeError, match="probe answer is not what the operator expects"):
        await prober.probe("127.0.0.1", other.port, [PairRef("p", "d", "", False, False)], 1.0)
    other.answer("GET", "/disagg/v1/pairs", text(200, "<html>not json</html>"))
    with pytest.raises(ProbeError, match="JSONDecodeError"):
        await prober.pairs("127.0.0.1", other.port)


async def test_a_pair_listed_without_a_revision_has_none(other: HttpApiServer, prober: HttpProber) -> None:
    """A frontend that lists a pair without its pairing revision (an engine that reported none): the revision is
    empty, which no revision the planner writes equals, not the text "None"."""
    listed = [{"prefill": "p0", "decode": "d0"}, {"prefill": "p1", "decode": "d1", "revision": "r1", "drained": True}]
    other.answer("GET", "/disagg/v1/pairs", reply(200, {"pairs": listed}))
    assert await prober.pairs("127.0.0.1", other.port) == [
        PairRef("p0", "d0", "", False, False),
        PairRef("p1", "d1", "r1", True, False),
    ]


async def test_the_probe_answer_becomes_outcomes_with_what_the_operator_knew(
    other: HttpApiServer, prober: HttpProber
) -> None:
    """The frontend's fields map onto outcomes; drained and candidate come from the pair list read before."""
    results = [
        {"prefill": "p0", "decode": "d0", "revision": "r", "ok": True, "latency_seconds": 0.25, "kv_transferred": True},
        {"prefill": "p1", "decode": "d1", "ok": False, "error": "decode answered", "status": 500},
        {"prefill": "p2", "decode": "d2", "ok": False, "error": "no answer within 1 s", "candidate": True},
    ]
    other.answer("POST", "/disagg/v1/probe", reply(200, {"ok": False, "results": results}))
    pairs = [PairRef("p0", "d0", "r", True, False), PairRef("p1", "d1", "r", False, True)]
    first, second, third = await prober.probe("127.0.0.1", other.port, pairs, 1.0)
    assert (first.ok, first.latency, first.kv_transferred, first.drained, first.candidate, first.revision) == (
        True,
        0.25,
        True,
        True,
        False,
        "r",
    )
    assert (second.ok, second.error, second.revision, second.candidate) == (
        False,
        "decode answered (status 500)",
        "",
        True,
    )
    assert (third.error, third.candidate, third.drained, third.latency) == ("no answer within 1 s", True, False, 0.0)


async def test_a_drain_sends_the_pair_the_time_and_the_reason_cut_to_500_characters(
    other: HttpApiServer, prober: HttpProber
) -> None:
    other.answer("POST", "/disagg/v1/drain", reply(200, {"drained": True}))
    other.answer("POST", "/disagg/v1/undrain", reply(200, {"undrained": True}))
    await prober.drain("127.0.0.1", other.port, "p", "d", 120.0, "x" * 600)
    await prober.undrain("127.0.0.1", other.port, "p", "d")
    drain, undrain = other.received
    assert drain.json() == {"prefill": "p", "decode": "d", "seconds": 120.0, "reason": "x" * 500}
    assert undrain.json() == {"prefill": "p", "decode": "d"}


async def test_an_ipv6_pod_address_is_bracketed(prober: HttpProber) -> None:
    server = HttpApiServer(host="::1")
    await server.start()
    try:
        server.answer("GET", "/disagg/v1/pairs", reply(200, {"pairs": []}))
        assert await prober.pairs("::1", server.port) == []
    finally:
        await server.stop()
    assert len(server.received) == 1


async def test_a_prober_closed_unused_closes_cleanly() -> None:
    await HttpProber().close()
