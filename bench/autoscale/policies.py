"""Policies in the simulator's loop: ours (the repository's disagg.scaling.policy, imported from operator/) and an
HPA/KEDA-style baseline. Both see the same thing: 1-second telemetry and per-tick iteration records (what scraping
vLLM's /metrics would give) reduced to a per-pool snapshot every evaluation interval.

The snapshot is built the way the operator's direct source builds it from real pages:
- TTFT p90 and ITL p90 are read with histogram_quantile from vLLM's own bucket bounds; the ITL mean is the exact
  sum / count. ITL is token-level: every decode iteration sampled at a tick stands for the tokens its batch made
  in that second.
- prefill's computed prompt tokens (vLLM's `local_compute` source) are the uncached ones; prefill reports no ITL.
"""

from __future__ import annotations

import bisect
import math
import os
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
POLICY_TREE = Path(os.environ.get("BENCH_POLICY_TREE", REPO / "operator"))
"""Where `disagg` is imported from: this checkout, or (BENCH_POLICY_TREE) another one's operator/ directory, to
replay an earlier version of the policy through the same adapter."""
sys.path.insert(0, str(POLICY_TREE))

from sim import ITL_SLO_MS, MAX_GPUS, MAX_REPLICAS, TTFT_SLO_MS  # noqa: E402

from disagg.api.deployment import DisaggDeploymentSpec  # noqa: E402 - the repository's own code, not a copy
from disagg.metrics_sources.promtext import ITL_BUCKETS_S, TTFT_BUCKETS_S  # noqa: E402
from disagg.metrics_sources.window import histogram_quantile  # noqa: E402
from disagg.scaling.policy import PolicyState, Tuning, config_from_spec, decide  # noqa: E402
from disagg.scaling.snapshot import Observation, PoolSnapshot  # noqa: E402

INTERVAL_S = 15.0
INITIAL = (2, 2)
"""Where every autoscaler starts (spec.replicas): a plausible first guess, not the answer."""


def spec(interval_s: float = INTERVAL_S, **scaling: Any) -> DisaggDeploymentSpec:
    """The DisaggDeployment spec the operator would read: SLOs, limits, budget. 1-GPU replicas as in the profile."""
    auto = {"enabled": True, "minReplicas": 1, "maxReplicas": MAX_REPLICAS}
    return DisaggDeploymentSpec.model_validate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct-FP8"},
            "prefill": {"replicas": INITIAL[0], "autoscaling": auto},
            "decode": {"replicas": INITIAL[1], "autoscaling": auto},
            "scaling": {
                "interval": f"{interval_s:g}s",
                "slo": {"ttftP90": f"{TTFT_SLO_MS:g}ms", "itlP90": f"{ITL_SLO_MS:g}ms"},
                "maxGpus": MAX_GPUS,
                **scaling,
            },
        }
    )


def bucketed(bounds: Iterable[float], observations: Iterable[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """(value, weight) observations put into the given bucket bounds, cumulative, as vLLM's histograms hold them."""
    edges = sorted(bounds)
    counts = [0.0] * (len(edges) + 1)
    for value, weight in observations:
        counts[bisect.bisect_left(edges, value)] += weight
    cumulative, running = [], 0.0
    for bound, count in zip([*edges, math.inf], counts, strict=True):
        running += count
        cumulative.append((bound, running))
    return tuple(cumulative)


class Window:
    """Telemetry and iteration records since the last evaluation, reduced to the typed snapshot the policy takes."""

    def __init__(self) -> None:
        self.samples: list[dict[str, Any]] = []
        self.prefill_iterations: list[tuple[float, float]] = []
        """(tokens computed, wall time) of prefill iterations: throughput while busy."""
        self.decode_iterations: list[tuple[float, float]] = []
        """(ITL, tokens) per decode worker and tick: the iteration running then, standing for the second."""

    def add(self, sample: dict[str, Any]) -> None:
        self.samples.append(sample)

    def add_tick(self, tick: dict[str, Any]) -> None:
        for fpm in tick.get("prefill_fpm_snapshots", []):
            if fpm.get("num_prefill_requests", 0) > 0 and fpm.get("wall_time", 0.0) > 0:
                self.prefill_iterations.append((float(fpm["sum_prefill_tokens"]), float(fpm["wall_time"])))
        for fpm in tick.get("decode_fpm_snapshots", []):
            batch, wall = fpm.get("num_decode_requests", 0), fpm.get("wall_time", 0.0)
            if batch > 0 and wall > 0:
                self.decode_iterations.append((float(wall), batch / float(wall)))

    def snapshot(self, pool: str, now_s: float, tick: dict[str, Any]) -> PoolSnapshot:
        samples = self.samples
        window = float(len(samples))
        ready = int(tick[f"active_{pool}_count"])
        starting = int(tick[f"starting_{pool}_count"])
        if not samples:
            return PoolSnapshot(pool, now_s, 0.0, ready, starting)  # type: ignore[arg-type]
        traffic = [s["traffic"] for s in samples]
        workers = [s[f"{pool}_scheduler_metrics"] for s in samples]
        arriving = sum(t["arriving_requests"] for t in traffic)
        prompt = sum(t["arriving_requests"] * t["avg_isl"] for t in traffic)
        # The mocker leaves the per-pool cache counters at zero; the router's per-request KV hit rate is the same
        # quantity vLLM's prefix_cache_hits / prefix_cache_queries gives.
        hit = sum((t.get("avg_router_kv_hit_rate") or 0.0) * t.get("router_kv_hit_rate_count", 0) for t in traffic)
        looked = sum(t.get("router_kv_hit_rate_count", 0) for t in traffic)
        hit_rate = hit / looked if looked else 0.0
        pending = sum(s[f"router_pending_{pool}_requests"] for s in samples) / window
        tokens, busy = sum(c[0] for c in self.prefill_iterations), sum(c[1] for c in self.prefill_iterations)
        prefill = pool == "prefill"
        itl = self.decode_iterations
        # The 1-second telemetry has each second's mean TTFT: those means, weighted by their counts, fill the
        # histogram (all the telemetry shows; a real histogram has every request).
        ttft = bucketed(
            TTFT_BUCKETS_S, ((t["avg_ttft_ms"] / 1000.0, t["ttft_count"]) for t in traffic if t["ttft_count"])
        )
        itl_hist = bucketed(ITL_BUCKETS_S, itl) if itl and not prefill else None
        return PoolSnapshot(
            pool=pool,  # type: ignore[arg-type]
            taken_at=now_s,
            window_s=window,
            ready_replicas=ready,
            starting_replicas=starting,
            request_rate=arriving / window,
            prompt_token_rate=prompt / window,
            computed_prompt_token_rate=prompt * (1.0 - hit_rate) / window if prefill else None,
            generation_token_rate=sum(t["accept_length_forward_count"] for t in traffic) / window,
            prefix_hit_rate=hit_rate,
            waiting_requests=sum(sum(w["waiting_requests"] for w in ws) for ws in workers) / window + pending,
            running_requests=sum(sum(w["running_requests"] for w in ws) for ws in workers) / window,
            kv_cache_usage=_mean_usage(workers),
            ttft_p90_s=histogram_quantile(0.9, list(ttft)) if prefill else None,
            ttft_histogram=ttft if prefill and ttft[-1][1] > 0 else None,
            itl_p90_s=None if itl_hist is None else histogram_quantile(0.9, list(itl_hist)),
            itl_mean_s=None if itl_hist is None else sum(v * w for v, w in itl) / sum(w for _, w in itl),
            itl_histogram=itl_hist,
            prompt_tokens_p90=_weighted_p90([(t["avg_isl"], t["arriving_requests"]) for t in traffic]),
            prefill_tokens_per_busy_s=tokens / busy if busy > 0 and prefill else None,
        )

    def reset(self) -> None:
        self.samples, self.prefill_iterations, self.decode_iterations = [], [], []


def _weighted_p90(values: list[tuple[float, float]]) -> float | None:
    values = sorted((v, w) for v, w in values if w > 0)
    if not values:
        return None
    total = sum(w for _, w in values)
    seen = 0.0
    for value, weight in values:
        seen += weight
        if seen >= 0.9 * total:
            return value
    return values[-1][0]


def _mean_usage(workers: list[list[dict[str, Any]]]) -> float | None:
    values = [w["active_cache_usage"] for ws in workers for w in ws]
    return sum(values) / len(values) if values else None


class _Ticking:
    """Ticks every second to collect iteration records; evaluates every `interval_s`."""

    interval_s = INTERVAL_S

    def __init__(self) -> None:
        self.window = Window()
        self.next_eval_s = self.interval_s
        self.decisions: list[tuple[float, int | None, int | None, str]] = []

    def initial_tick_ms(self) -> float:
        return 1000.0

    def on_telemetry(self, sample: dict[str, Any]) -> None:
        self.window.add(sample)

    def on_tick(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        now = snapshot["now_ms"] / 1000.0
        self.window.add_tick(snapshot)
        target_p = target_d = None
        if now + 1e-6 >= self.next_eval_s:
            target_p, target_d = self.evaluate(now, snapshot)
            self.window.reset()
            self.next_eval_s = now + self.interval_s
        return {"target_prefill": target_p, "target_decode": target_d, "next_tick_ms": (now + 1.0) * 1000.0}

    def evaluate(self, now: float, snapshot: dict[str, Any]) -> tuple[int | None, int | None]:
        raise NotImplementedError


class Ours(_Ticking):
    """disagg.scaling.policy.decide, called exactly as the operator's autoscaler calls it."""

    def __init__(self, tuning: Tuning | None = None, **scaling: Any) -> None:
        super().__init__()
        self.config = config_from_spec(spec(self.interval_s, **scaling))
        self.tuning = tuning or Tuning()
        self.state: PolicyState | None = None

    def evaluate(self, now: float, snapshot: dict[str, Any]) -> tuple[int | None, int | None]:
        observation = Observation(
            prefill=self.window.snapshot("prefill", now, snapshot),
            decode=self.window.snapshot("decode", now, snapshot),
        )
        decision = decide(self.config, observation, self.state, now, self.tuning)
        self.state = decision.state
        p = decision.prefill.replicas if decision.prefill else None
        d = decision.decode.replicas if decision.decode else None
        if decision.changed:
            reasons = [x.reason for x in (decision.prefill, decision.decode) if x is not None and x.changed]
            self.decisions.append((now, p, d, " | ".join(reasons)))
        return p, d


def tuned(**changes: Any) -> Tuning:
    return replace(Tuning(), **changes)


class Hpa(_Ticking):
    """Kubernetes HPA semantics per pool (KEDA drives the same HPA): desired = ceil(N * metric / target), 10%
    tolerance, scale-up at once (at most max(4, 100%) per sync), scale-down to the highest recommendation of the last
    300 s. Prefill on waiting requests per replica, decode on KV cache usage, the signals of Dynamo's and vLLM
    production-stack's autoscaling recipes; the targets are tuned on the tuning set (run.py)."""

    window_s = 300.0

    def __init__(self, queue_target: float = 5.0, kv_target: float = 0.7) -> None:
        super().__init__()
        self.targets = {"prefill": queue_target, "decode": kv_target}
        self.current: dict[str, int] = {}
        self.history: dict[str, list[tuple[float, int]]] = {"prefill": [], "decode": []}

    def evaluate(self, now: float, snapshot: dict[str, Any]) -> tuple[int | None, int | None]:
        out = []
        for pool in ("prefill", "decode"):
            snap = self.window.snapshot(pool, now, snapshot)
            n = self.current.get(pool, snap.ready_replicas + snap.starting_replicas)
            ready = max(snap.ready_replicas, 1)
            metric = (snap.waiting_requests or 0.0) / ready if pool == "prefill" else snap.kv_cache_usage or 0.0
            ratio = metric / self.targets[pool]
            desired = n if abs(ratio - 1.0) <= 0.1 else math.ceil(ready * ratio)
            desired = min(max(desired, 1), MAX_REPLICAS)
            history = [(t, r) for t, r in self.history[pool] if t > now - self.window_s] + [(now, desired)]
            self.history[pool] = history
            n = min(desired, n + max(4, n)) if desired > n else min(n, max(r for _, r in history))
            self.current[pool] = n
            out.append(n)
        return out[0], out[1]
