"""Baselines that are computed rather than run as one policy: static splits, the start-up-aware oracle, and the
configuration grid of the Dynamo Planner.

Static and oracle rest on the per-pool sweeps: prefill at P = 1, 2, ... with decode generous (8), decode at
D = 1, 2, ... with prefill generous. TTFT depends on the prefill count and ITL on the decode count almost
separately, so the sweeps tell, for every minute, the fewest replicas of each pool that met it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sim

GENEROUS = sim.MAX_REPLICAS
"""The other pool's size in a sweep."""


@dataclass(frozen=True)
class Sweep:
    """One seed's per-pool sweep: pass flags per window start, for each replica count tried."""

    ttft: dict[int, dict[float, int]]
    """P -> window start -> TTFT met (decode at GENEROUS)."""
    itl: dict[int, dict[float, int]]
    """D -> window start -> ITL met (prefill at GENEROUS)."""

    def windows(self) -> list[float]:
        keys: set[float] = set()
        for runs in (self.ttft, self.itl):
            for passes in runs.values():
                keys.update(passes)
        return sorted(keys)

    def need(self, which: str, window: float) -> int:
        """Fewest replicas whose sweep replay met the window; GENEROUS + 1 when none did."""
        runs = self.ttft if which == "prefill" else self.itl
        for n in sorted(runs):
            if runs[n].get(window, 1):
                return n
        return GENEROUS + 1


def separable_attainment(sweeps: Sequence[Sweep], p: int, d: int) -> float:
    """Mean over seeds of the share of windows met by P from the prefill sweep and D from the decode sweep."""
    shares = []
    for sweep in sweeps:
        windows = sweep.windows()
        ok = sum(1 for w in windows if sweep.need("prefill", w) <= p and sweep.need("decode", w) <= d)
        shares.append(ok / max(len(windows), 1))
    return sum(shares) / len(shares)


def static_candidates(sweeps: Sequence[Sweep], level: float, slack: float = 0.03) -> list[tuple[int, int]]:
    """Splits in order of GPUs (then of separable attainment) whose separable attainment is within `slack` of the
    level: the ones worth a joint replay."""
    grid = [(p, d) for p in range(1, GENEROUS + 1) for d in range(1, GENEROUS + 1)]
    scored = [(p + d, -separable_attainment(sweeps, p, d), (p, d)) for p, d in grid]
    return [c for _, minus, c in sorted(scored) if -minus >= level - slack]


def oracle_costs(
    sweep: Sequence[Sweep] | Sweep, startup_s: float = sim.STARTUP_S, max_failures: int = 30
) -> list[float]:
    """GPU-hours of the cheapest schedule of (P, D) per minute that knows the future, for 0..max_failures missed
    windows: minute w met iff P >= need_P(w) and D >= need_D(w); every replica added is paid for from when it was
    ordered (start-up) and removing one is free. Index f: the cheapest cost when f windows may be missed (windows no
    size in the sweep met are missed whatever the schedule)."""
    assert isinstance(sweep, Sweep)
    windows = sweep.windows()
    need_p = np.array([sweep.need("prefill", w) for w in windows])
    need_d = np.array([sweep.need("decode", w) for w in windows])
    sizes = np.arange(1, GENEROUS + 1)
    p_of = np.repeat(sizes, GENEROUS)
    d_of = np.tile(sizes, GENEROUS)
    held = (p_of + d_of).astype(float)
    startup = startup_s / 60.0
    added = np.maximum(p_of[None, :] - p_of[:, None], 0) + np.maximum(d_of[None, :] - d_of[:, None], 0)
    move = startup * added  # [from, to]
    inf = math.inf
    value = np.full((max_failures + 1, held.size), inf)
    for w, (np_, nd) in enumerate(zip(need_p, need_d, strict=True)):
        missed = ((p_of < np_) | (d_of < nd)).astype(int)
        if w == 0:
            step = np.full((max_failures + 1, held.size), inf)
            for f in range(max_failures + 1):
                step[f] = np.where(missed <= f, held, inf) if f == 0 else np.where(missed == f, held, inf)
            value = step
            continue
        best = (value[:, :, None] + move[None, :, :]).min(axis=1)  # [f, to]
        step = np.full_like(value, inf)
        step[:, missed == 0] = best[:, missed == 0] + held[missed == 0]
        step[1:, missed == 1] = best[:-1, missed == 1] + held[missed == 1]
        value = step
    cheapest = value.min(axis=1)
    return [float(v) / 60.0 for v in np.minimum.accumulate(cheapest)]


def planner_config(
    predictor: str, interval_s: int, margin: float, load_loop: bool, profile_dir: str, warmup_trace: str | None
) -> dict[str, Any]:
    """Dynamo Planner (its own code, from the ai-dynamo wheel) in its SLA mode: the throughput loop forecasts
    requests, ISL and OSL and sizes both pools from the pre-deployment profile (the simulator's own timing, so its
    performance model is exact here, as a real deployment's would not be), optionally with the reactive load loop on
    top. `margin` scales its SLO targets below the evaluated ones: it aims its performance model at the target
    itself, so headroom has to come from the targets. Same budget and limits as ours; its predictors are warmed on
    the same workload from another seed, as a service's previous day would be."""
    config: dict[str, Any] = {
        "mode": "disagg",
        "backend": "mocker",
        "environment": "virtual",
        "optimization_target": "sla",
        "enable_throughput_scaling": True,
        "enable_load_scaling": load_loop,
        "pre_deployment_sweeping_mode": "thorough",
        "profile_results_dir": profile_dir,
        "load_predictor": predictor,
        "throughput_adjustment_interval": interval_s,
        "ttft": sim.TTFT_SLO_MS * margin,
        "itl": sim.ITL_SLO_MS * margin,
        "max_gpu_budget": sim.MAX_GPUS,
        "min_endpoint": 1,
        "report_interval_hours": None,
        "live_dashboard_port": 0,
    }
    if warmup_trace is not None:
        config["load_predictor_warmup_trace"] = warmup_trace
    return config


PLANNER_GRID: list[tuple[str, int, float, bool]] = [
    *((p, i, m, False) for p, i, m in itertools.product(("kalman", "arima"), (60, 180), (1.0, 0.6))),
    *((p, 60, 0.6, True) for p in ("kalman", "arima")),
]
"""(predictor, throughput interval, SLO margin, load loop): the SLA planner as documented (throughput loop only,
its default) with both predictors, both intervals and two margins, plus the reactive load loop on top at 60 s."""


def planner_id(predictor: str, interval_s: int, margin: float, load_loop: bool) -> str:
    return f"planner-{predictor}-{interval_s}s-m{margin:g}" + ("-load" if load_loop else "")


HPA_GRID: list[tuple[float, float]] = [(q, kv) for q in (2.0, 5.0) for kv in (0.08, 0.12, 0.18)]
"""(waiting requests per prefill replica, decode KV usage) targets tried on the tuning set. On the simulated engines
the ITL target is reached near 20% KV usage, so the recipes' 0.7 would run ITL far past it."""


def hpa_id(queue_target: float, kv_target: float) -> str:
    return f"hpa-q{queue_target:g}-kv{kv_target:g}"
