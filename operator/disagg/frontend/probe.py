"""Pair probes (pure): the tiny request a probe sends and how its outcome is judged.

A probe runs the deployment's own flow through one chosen pair, so it exercises prefill -> KV hand-off -> decode
exactly as user traffic does. Each probe's prompt starts with a fresh nonce so no prefix cache can answer it and
prefill must hand KV over. It is counted in the probe metrics only, never in the request metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .flows import ApiKind, ClientRequest


def probe_request(nonce: str, prompt: str, max_tokens: int, model: str | None) -> ClientRequest:
    body: dict[str, Any] = {
        # A distinct first block per probe: prefix caches on either side cannot answer it.
        "prompt": f"{nonce} {prompt} {nonce}",
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": False,
    }
    if model:
        body["model"] = model
    api: ApiKind = "completions"
    return ClientRequest(api, body, False, False, None, None, None)


@dataclass(frozen=True)
class ProbeResult:
    prefill: str
    decode: str
    revision: str
    ok: bool
    latency_seconds: float
    kv_blocks_handed_off: int
    kv_transferred: bool | None
    error: str | None = None
    status: int | None = None
    candidate: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "prefill": self.prefill,
            "decode": self.decode,
            "revision": self.revision,
            "ok": self.ok,
            "latency_seconds": round(self.latency_seconds, 6),
            "kv_blocks_handed_off": self.kv_blocks_handed_off,
            "kv_transferred": self.kv_transferred,
            "error": self.error,
            "status": self.status,
        }


def kv_transferred(
    handed_off_blocks: int,
    concurrent: bool,
    decode_before: Mapping[str, float] | None,
    decode_after: Mapping[str, float] | None,
) -> bool | None:
    """Whether decode really took the prompt's KV from the transfer.

    From decode's own counters when both scrapes exist: `vllm:prompt_tokens_by_source_total{source=
    "external_kv_transfer"}` must have grown and `vllm:nixl_num_failed_transfers_total` must not have. Without the
    scrapes, a sequential flow's evidence is prefill having handed blocks over (decode answering then means it
    loaded them, or it recomputed under kv_load_failure_policy=recompute: unknown), so the answer is None.
    """
    if decode_before is None or decode_after is None:
        return None if handed_off_blocks or concurrent else False
    grew = decode_after.get("external", 0.0) - decode_before.get("external", 0.0)
    failed = decode_after.get("failed", 0.0) - decode_before.get("failed", 0.0)
    return grew > 0 and failed <= 0


def decode_transfer_counters(families: Mapping[str, Mapping[tuple[tuple[str, str], ...], float]]) -> dict[str, float]:
    """The two decode counters `kv_transferred` compares, summed over engines/labels, from parsed /metrics."""
    external = sum(
        value
        for labels, value in families.get("vllm:prompt_tokens_by_source", {}).items()
        if dict(labels).get("source") == "external_kv_transfer"
    )
    failed = sum(families.get("vllm:nixl_num_failed_transfers", {}).values())
    return {"external": external, "failed": failed}


def parse_metrics(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Counter samples by family name (without `_total`), from Prometheus text; unknown lines are skipped."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # Keyed by the sample name: the parser does not always group `x_total` under a `# TYPE x counter`.
            if sample.name.endswith("_total"):
                out.setdefault(sample.name[: -len("_total")], {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out
