"""Every flow through the real frontend shell against the protocol simulator (e2e/pdsim.py)."""

from __future__ import annotations

import json

from tests.unit.frontend.harness import config, sim_engines, stack

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
