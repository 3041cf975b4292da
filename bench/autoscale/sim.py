"""One replay in Dynamo's offline simulator (ai-dynamo-runtime's Rust mocker), with a scaling policy in the loop.

The simulator calls `policy.on_tick(snapshot)` at times the policy chooses and applies absolute replica targets,
with a start-up delay for new workers and draining for removed ones. A 1-second telemetry stream (scheduler
queue, running requests, KV usage and traffic averages per worker) is what a Prometheus scrape would see; the
policies read only that and the tick snapshot, never the future or per-request data.

Timing: the H200 / Llama-3.1-8B-FP8 TP1 pre-deployment profile shipped in the ai-dynamo wheel with every prefill and
decode time multiplied by `SLOWDOWN` (and every throughput divided by it), for the simulated engines and for
the Dynamo Planner's performance model alike. It stands for a much heavier model on one GPU (every step eight times
slower, an idle decode step of about 50 ms): the same replica counts then carry eight times fewer requests, and the
simulator's cost is per request (0.3-1 ms each on this shared machine), so 2-hour traces stay affordable.
Relative comparisons are the output, not absolute figures for any named model.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

os.environ.setdefault("DYN_LOG", "warn")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread per replay: BLAS threads on a shared 2-core box only thrash
logging.disable(logging.WARNING)

import dynamo._core as core  # noqa: E402 - DYN_LOG must be set first

SLOWDOWN = 8.0
STARTUP_S = 60.0
TTFT_SLO_MS = 2500.0
ITL_SLO_MS = 100.0
"""Both SLO thresholds are bucket bounds of vLLM's histograms (time_to_first_token_seconds has 2.5,
inter_token_latency_seconds has 0.1): a window's p90 read with histogram_quantile from those histograms is within
the target exactly when at least 90% of its observations are, so the evaluation's verdict is the one an operator's
alert on vLLM's own metrics would give."""
ROUTER_MODE = "kv_router"
"""How the simulated frontend picks a worker: Dynamo's KV router, as deployments run it. It breaks ties between
equally loaded workers with an unseeded random draw (`rand::rng()` in the selector), so two replays of the same
policy on the same trace differ a little, and a policy's feedback loop turns that into a window or so of
attainment and a few percent of GPU-hours. "round_robin" is bit-for-bit reproducible (checked: the same
per-request latencies and the same decisions in two replays) but balances no load, so its figures are not the
benchmark's; `run.py --router round_robin` uses it to compare two variants of a policy on the same replay, where
any difference is the variant's own."""
MAX_REPLICAS = 8
MAX_GPUS = 16
MAX_MODEL_LEN = 16384


def shipped_profile_dir() -> Path:
    import dynamo.planner

    return Path(dynamo.planner.__file__).parent / "tests/data/profiling_results/H200_TP1P_TP1D"


def profile_dir(cache: Path) -> Path:
    """The shipped profile with times x SLOWDOWN and throughputs / SLOWDOWN: the Planner's performance model."""
    import numpy as np

    out = cache / f"profile-x{SLOWDOWN:g}"
    if (out / ".complete").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(shipped_profile_dir(), out)
    scale = {"prefill_ttft": SLOWDOWN, "prefill_thpt_per_gpu": 1 / SLOWDOWN, "z_itl": SLOWDOWN}
    scale["z_thpt_per_gpu"] = 1 / SLOWDOWN
    for npz in out.rglob("raw_data.npz"):
        data = dict(np.load(npz))
        np.savez(npz, **{k: v * scale.get(k, 1.0) for k, v in data.items()})
    (out / ".complete").touch()
    return out


def profile_npz(cache: Path) -> Path:
    """The same profile converted to the mocker's format: the simulated engines' timing."""
    from dynamo.mocker.utils.planner_profiler_perf_data_converter import convert_profile_results_to_npz

    out = cache / f"profile-x{SLOWDOWN:g}.npz"
    if not out.exists():
        convert_profile_results_to_npz(profile_dir(cache), out)
    return out


def engine_args(kind: str, npz: Path, startup_s: float = STARTUP_S) -> Any:
    return core._normalize_mocker_config(
        json.dumps(
            {
                "startup_time": startup_s,
                "engine": {
                    "worker_type": kind,
                    "block_size": 64,
                    "max_model_len": MAX_MODEL_LEN,
                    "timing_model": {"type": "external", "provider": "dynamo_profile", "config": {"path": str(npz)}},
                },
            }
        )
    )


class Policy(Protocol):
    def initial_tick_ms(self) -> float: ...

    def on_tick(self, snapshot: dict[str, Any]) -> dict[str, Any]: ...

    def on_telemetry(self, sample: dict[str, Any]) -> None: ...


@dataclass
class Replay:
    per_request: list[dict[str, Any]]
    summary: dict[str, Any]
    samples: list[dict[str, Any]] = field(default_factory=list)
    """The 1-second telemetry, slimmed: replica counts over time come from here for every policy alike."""
    decisions: list[tuple[float, int | None, int | None, str]] = field(default_factory=list)


def _common(npz: Path, prefill: int, decode: int, startup_s: float, router_mode: str) -> dict[str, Any]:
    return {
        "prefill_engine_args": engine_args("prefill", npz, startup_s),
        "decode_engine_args": engine_args("decode", npz, startup_s),
        "num_prefill_workers": prefill,
        "num_decode_workers": decode,
        "router_mode": router_mode,
        "trace_block_size": 512,
        "sla_ttft_ms": TTFT_SLO_MS,
        "sla_itl_ms": ITL_SLO_MS,
        "capture_per_request": True,
    }


def replay(
    trace: Path,
    npz: Path,
    prefill: int,
    decode: int,
    policy: Policy | None = None,
    planner_config: dict[str, Any] | None = None,
    startup_s: float = STARTUP_S,
    router_mode: str = ROUTER_MODE,
) -> Replay:
    samples: list[dict[str, Any]] = []

    def on_sample(sample: dict[str, Any]) -> None:
        samples.append(_slim(sample))
        if policy is not None:
            policy.on_telemetry(sample)

    common = _common(npz, prefill, decode, startup_s, router_mode)
    if planner_config is not None:
        from dynamo.replay import run_trace_replay
        from dynamo.replay.api import TelemetryOptions

        report = run_trace_replay(
            [str(trace)],
            planner_config=planner_config,
            telemetry_options=TelemetryOptions(sample_interval_ms=1000.0, callback=on_sample),
            **common,
        )
        return Replay(list(report.per_request or []), dict(report.summary), samples)
    result = core.run_mocker_trace_replay(
        [str(trace)],
        replay_mode="offline",
        scaling_policy=policy,
        telemetry_sample_interval_ms=1000.0,
        telemetry_callback=on_sample,
        **common,
    )
    decisions = list(getattr(policy, "decisions", []))
    return Replay(list(result.per_request), dict(result.summary), samples, decisions)


def _slim(sample: dict[str, Any]) -> dict[str, Any]:
    """Keep what the evaluation needs from a telemetry sample (the full samples are large)."""
    pools = {}
    for pool in ("prefill", "decode"):
        pools[pool] = {
            "active": len(sample.get(f"active_{pool}_ids", [])),
            "starting": len(sample.get(f"starting_{pool}_ids", [])),
            "draining": len(sample.get(f"draining_{pool}_ids", [])),
        }
    return {"t": sample["sampled_at_ms"] / 1000.0, **pools}
