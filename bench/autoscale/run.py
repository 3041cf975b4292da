"""Benchmark: our scaling policy against static splits, an HPA/KEDA-style baseline, the Dynamo Planner's grid and a
start-up-aware oracle, in Dynamo's offline replay, on 8 two-hour workloads x 3 seeds.

Run through `make -C bench/autoscale` (builds the pinned venv first), or with that venv's python:
    python bench/autoscale/run.py [--split tuning|held_out|all] [--only ours] [--jobs 2]
Every replay is cached under ${DISAGG_CACHE_DIR:-~/.cache/disagg-operator}/bench-autoscale/runs, keyed by what
it depends on (the simulator and workload code, the policy code for ours and the HPA, the Planner's config), so a
rerun after changing only the policy replays only ours. Writes bench/autoscale/results/.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import inspect
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread per replay: BLAS threads on a shared 2-core box only thrash

import baselines  # noqa: E402
import evaluate  # noqa: E402
import policies  # noqa: E402
import sim  # noqa: E402
import workloads  # noqa: E402

REPO = HERE.parents[1]
ATTAINMENT_TARGET = 0.95
RESULTS = HERE / "results"
CACHE = Path(os.environ.get("DISAGG_CACHE_DIR", Path.home() / ".cache/disagg-operator")) / "bench-autoscale"
HPA_TUNING_SEEDS = (1,)
"""The HPA's targets are chosen on the tuning workloads at these seeds, then run everywhere."""


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


@functools.cache
def code_keys() -> dict[str, str]:
    common = [HERE / "sim.py"]
    tree = policies.POLICY_TREE
    ours = [
        *sorted((tree / "disagg/scaling").rglob("*.py")),
        tree / "disagg/metrics_sources/promtext.py",
        tree / "disagg/metrics_sources/window.py",
        HERE / "policies.py",
    ]
    # The HPA's replays depend on its own code and the adapter's, not on the rest of policies.py (ours' glue).
    hpa_code = "".join(
        inspect.getsource(obj)
        for obj in (policies.Hpa, policies._Ticking, policies.Window, policies.bucketed, policies._mean_usage,
                    policies._weighted_p90)
    )  # fmt: skip
    return {
        "replay": _digest(common),
        "ours": _digest(common + ours),
        "hpa": hashlib.sha256((_digest(common) + hpa_code).encode()).hexdigest()[:12],
        "planner": hashlib.sha256((_digest(common) + inspect.getsource(baselines.planner_config)).encode()).hexdigest()[
            :12
        ],
        "score": _digest([HERE / "evaluate.py"]),
    }


@functools.cache
def trace_digest(workload: str, seed: int) -> str:
    return hashlib.sha256(trace_path(workload, seed).read_bytes()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------------------------
# Jobs: one replay each, cached; scores cached apart, so a change of the evaluation only rescores


@dataclass(frozen=True)
class Job:
    workload: str
    seed: int
    policy: str
    """'ours[-label]', 'hpa-...', 'planner-...', 'static-PxD'."""
    params: str = "{}"
    """JSON of what the policy id alone does not say (tuning overrides, planner config)."""
    router: str = field(default_factory=lambda: ROUTER)
    """The simulated frontend's worker choice (sim.ROUTER_MODE; --router)."""

    @property
    def key(self) -> str:
        """What the replay depends on: the trace itself, the simulator code, the policy's code and parameters."""
        keys = code_keys()
        kind = next((k for k in ("ours", "hpa", "planner") if self.policy.startswith(k)), "replay")
        if self.policy.startswith("planner"):
            warmup = trace_digest(self.workload, self.seed + workloads.WARMUP_SEED_OFFSET)
        else:
            warmup = ""
        parts: list[str] = [self.policy, self.params, trace_digest(self.workload, self.seed), warmup, keys[kind]]
        if self.router != sim.ROUTER_MODE:
            parts.append(self.router)
        raw = json.dumps(parts)
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    @property
    def path(self) -> Path:
        return CACHE / "runs" / f"{self.workload}-{self.seed}" / f"{self.policy}.{self.key}.npz"

    @property
    def score_path(self) -> Path:
        return self.path.with_suffix(f".score-{code_keys()['score']}.json")


def trace_path(workload: str, seed: int) -> Path:
    """The workload's trace, generated once per version of the generators (their source is in the name)."""
    path = CACHE / "traces" / f"{workload}-{seed}-{_digest([HERE / 'workloads.py'])}.jsonl"
    if not path.exists():
        workloads.make(workload, seed).write(path)
    return path


REQUEST_FIELDS = ("arrival_time_ms", "first_token_ms", "last_token_ms", "ttft_ms", "itl_ms", "output_length")


def _save_replay(job: Job, result: sim.Replay, wall_s: float) -> None:
    import numpy as np

    per = result.per_request
    columns = {k: np.array([r.get(k) if r.get(k) is not None else np.nan for r in per], dtype=float)
               for k in REQUEST_FIELDS}  # fmt: skip
    columns["decode_worker_idx"] = np.array(
        [r["decode_worker_idx"] if r.get("decode_worker_idx") is not None else -1 for r in per], dtype=np.int32
    )
    columns["completed"] = np.array([r.get("terminal_status") == "completed" for r in per], dtype=bool)
    samples = result.samples
    columns["samples"] = np.array(
        [[s["t"], *(s[p][k] for p in ("prefill", "decode") for k in ("active", "starting", "draining"))]
         for s in samples], dtype=float
    )  # fmt: skip
    meta = {"job": asdict(job), "decisions": result.decisions, "wall_s": round(wall_s, 1)}
    job.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = job.path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, meta=np.array(json.dumps(meta)), **columns)
    tmp.replace(job.path)


def _load_replay(job: Job) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    import numpy as np

    with np.load(job.path) as data:
        meta = json.loads(str(data["meta"]))
        n = len(data["completed"])
        cols = {k: data[k] for k in (*REQUEST_FIELDS, "decode_worker_idx", "completed")}
        samples_array = data["samples"]
    per = []
    for i in range(n):
        r: dict[str, Any] = {k: (None if np.isnan(cols[k][i]) else float(cols[k][i])) for k in REQUEST_FIELDS}
        r["output_length"] = int(r["output_length"] or 0)
        worker = int(cols["decode_worker_idx"][i])
        r["decode_worker_idx"] = worker if worker >= 0 else None
        r["terminal_status"] = "completed" if cols["completed"][i] else "other"
        per.append(r)
    names = [(p, k) for p in ("prefill", "decode") for k in ("active", "starting", "draining")]
    samples = []
    for row in samples_array:
        sample: dict[str, Any] = {"t": float(row[0]), "prefill": {}, "decode": {}}
        for (p, k), v in zip(names, row[1:], strict=True):
            sample[p][k] = int(v)
        samples.append(sample)
    return per, samples, meta


def replay_job(job: Job) -> float:
    """Run the job's replay into the cache (unless there); returns its wall time."""
    if job.path.exists():
        return 0.0
    started = time.time()
    trace = trace_path(job.workload, job.seed)
    npz = sim.profile_npz(CACHE)
    params = json.loads(job.params)
    if job.policy.startswith("static-"):
        p, d = (int(x) for x in job.policy.removeprefix("static-").split("x"))
        result = sim.replay(trace, npz, p, d, router_mode=job.router)
    elif job.policy.startswith("hpa"):
        result = sim.replay(trace, npz, *policies.INITIAL, policy=policies.Hpa(**params), router_mode=job.router)
    elif job.policy.startswith("planner"):
        warmup = str(trace_path(job.workload, job.seed + workloads.WARMUP_SEED_OFFSET))
        config = baselines.planner_config(**params, profile_dir=str(sim.profile_dir(CACHE)), warmup_trace=warmup)
        result = sim.replay(trace, npz, *policies.INITIAL, planner_config=config, router_mode=job.router)
    else:
        ours = policies.Ours(policies.tuned(**params.get("tuning", {})), **params.get("scaling", {}))
        startup = float(params.get("startup_s", sim.STARTUP_S))
        result = sim.replay(trace, npz, *policies.INITIAL, policy=ours, startup_s=startup, router_mode=job.router)
    wall = time.time() - started
    _save_replay(job, result, wall)
    return wall


def execute(job: Job) -> dict[str, Any]:
    """The job's record: its score and replica series (replaying and scoring only what is not cached)."""
    if job.score_path.exists():
        return json.loads(job.score_path.read_text())
    replay_job(job)
    per, samples, meta = _load_replay(job)
    expected = sum(1 for _ in trace_path(job.workload, job.seed).open())
    score = evaluate.score(per, samples, expected)
    record = {
        "job": asdict(job),
        "score": asdict(score),
        "replicas": evaluate.replicas_every(samples),
        "decisions": meta["decisions"],
        "wall_s": meta["wall_s"],
    }
    tmp = job.score_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(job.score_path)
    return record


def _execute_logged(job: Job) -> dict[str, Any]:
    cached = job.score_path.exists()
    record = execute(job)
    if not cached:
        s = record["score"]
        print(
            f"  {job.workload}-{job.seed} {job.policy}: {s['attainment']:.1%} at {s['gpu_hours']:.2f} GPU-h "
            f"({record['wall_s']:.0f} s)",
            flush=True,
        )
    return record


ROUTERS = (sim.ROUTER_MODE, "round_robin")
"""What --router accepts: the benchmark's router, or round robin for replays that reproduce exactly."""
ROUTER = sim.ROUTER_MODE
"""--router: the simulated frontend's worker choice for every job of this run."""

CACHED_ONLY = False
"""--cached-only: report the autoscalers' replays already in the cache and run none of theirs (static sweeps still
run), for a report on a partial grid."""


def run_all(jobs: list[Job], parallel: int, autoscalers: bool = False) -> list[dict[str, Any]]:
    if autoscalers and CACHED_ONLY:
        jobs = [j for j in jobs if j.score_path.exists()]
    todo = [j for j in jobs if not j.score_path.exists()]
    if todo:
        print(f"{len(todo)} replays to run ({len(jobs) - len(todo)} cached)", flush=True)
    if parallel <= 1 or len(todo) <= 1:
        return [_execute_logged(j) for j in jobs]
    with ProcessPoolExecutor(parallel) as pool:
        list(pool.map(_execute_logged, todo))
    return [execute(j) for j in jobs]


# ---------------------------------------------------------------------------------------------------------------
# Static sweeps and searches


def sweeps(workload: str, seeds: tuple[int, ...], parallel: int) -> list[baselines.Sweep]:
    """Per-pool sweeps per seed, growing each pool until every window passes (or the maximum)."""
    ttft: dict[int, dict[int, dict[float, int]]] = {s: {} for s in seeds}
    itl: dict[int, dict[int, dict[float, int]]] = {s: {} for s in seeds}
    open_p = dict.fromkeys(seeds, 1)
    open_d = dict.fromkeys(seeds, 1)
    while any(n is not None for n in (*open_p.values(), *open_d.values())):
        batch: list[tuple[str, int, int, Job]] = []
        for s in seeds:
            if open_p[s] is not None:
                batch.append(("p", s, open_p[s], Job(workload, s, f"static-{open_p[s]}x{baselines.GENEROUS}")))
            if open_d[s] is not None:
                batch.append(("d", s, open_d[s], Job(workload, s, f"static-{baselines.GENEROUS}x{open_d[s]}")))
        records = run_all([job for *_, job in batch], parallel)
        for (which, s, n, _), record in zip(batch, records, strict=True):
            score = record["score"]
            starts = score["window_start_s"]
            if which == "p":
                ttft[s][n] = dict(zip(starts, score["ttft_pass"], strict=True))
                done = all(score["ttft_pass"]) or n >= baselines.GENEROUS
                open_p[s] = None if done else n + 1
            else:
                itl[s][n] = dict(zip(starts, score["itl_pass"], strict=True))
                done = all(score["itl_pass"]) or n >= baselines.GENEROUS
                open_d[s] = None if done else n + 1
    return [baselines.Sweep(ttft[s], itl[s]) for s in seeds]


def static_at(
    workload: str, seeds: tuple[int, ...], found: list[baselines.Sweep], level: float, parallel: int
) -> dict[str, Any] | None:
    """The cheapest fixed split whose mean window attainment over the seeds reaches `level`, verified by joint
    replays (the sweeps only propose candidates)."""
    for p, d in baselines.static_candidates(found, level)[:12]:
        records = run_all([Job(workload, s, f"static-{p}x{d}") for s in seeds], parallel)
        mean = sum(r["score"]["attainment"] for r in records) / len(records)
        if mean >= level - 1e-9:
            return {"config": f"{p}P{d}D", "records": records}
    return None


# ---------------------------------------------------------------------------------------------------------------
# Driver


def ours_job(workload: str, seed: int, label: str, params: dict[str, Any]) -> Job:
    return Job(workload, seed, "ours" if not label else f"ours-{label}", json.dumps(params, sort_keys=True))


def planner_jobs(workload: str, seed: int) -> list[Job]:
    out = []
    for predictor, interval, margin, load in baselines.PLANNER_GRID:
        params = {"predictor": predictor, "interval_s": interval, "margin": margin, "load_loop": load}
        out.append(Job(workload, seed, baselines.planner_id(predictor, interval, margin, load), json.dumps(params)))
    return out


def hpa_job(workload: str, seed: int, queue_target: float, kv_target: float) -> Job:
    params = json.dumps({"queue_target": queue_target, "kv_target": kv_target})
    return Job(workload, seed, baselines.hpa_id(queue_target, kv_target), params)


def choose_hpa(parallel: int) -> tuple[float, float]:
    """The HPA targets with the most tuning workloads at >= 95% of windows, then the highest mean attainment, then
    the fewest GPU-hours."""
    tuning = workloads.names("tuning")
    best: tuple[Any, ...] | None = None
    for q, kv in baselines.HPA_GRID:
        records = run_all([hpa_job(w, s, q, kv) for w in tuning for s in HPA_TUNING_SEEDS], parallel)
        att = [r["score"]["attainment"] for r in records]
        gpu = sum(r["score"]["gpu_hours"] for r in records)
        rank = (sum(a >= ATTAINMENT_TARGET for a in att), sum(att), -gpu)
        if best is None or rank > best[0]:
            best = (rank, (q, kv))
    assert best is not None
    return best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="all", choices=["tuning", "held_out", "all"])
    parser.add_argument("--workloads", default="", help="comma-separated subset of the split's workloads")
    parser.add_argument("--seeds", default=",".join(map(str, workloads.SEEDS)))
    parser.add_argument("--only", default="", help="comma-separated: ours, hpa, planner, static (default: all)")
    parser.add_argument("--label", default="", help="name of an experimental variant of ours (with --tuning)")
    parser.add_argument(
        "--tuning", default="{}", help='JSON overrides of Tuning for ours, e.g. {"burst_hold_windows": 1}'
    )
    parser.add_argument("--jobs", type=int, default=2, help="replays in parallel (one process each)")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--cached-only", action="store_true", help="run no autoscaler replay; report the cached ones")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--router",
        default=sim.ROUTER_MODE,
        choices=ROUTERS,
        help="round_robin: reproducible replays for comparing variants (not the benchmark's figures; no report)",
    )
    args = parser.parse_args()
    global CACHED_ONLY, ROUTER
    CACHED_ONLY = args.cached_only
    ROUTER = args.router
    names = [n for n in args.workloads.split(",") if n] or workloads.names(args.split)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    only = set(filter(None, args.only.split(","))) or {"ours", "hpa", "planner", "static"}
    params = {"tuning": json.loads(args.tuning)} if args.tuning != "{}" else {}
    sim.profile_npz(CACHE)
    started = time.time()
    results: dict[str, Any] = {"workloads": {}, "hpa_targets": None}
    if "hpa" in only:
        results["hpa_targets"] = choose_hpa(args.jobs)
        print(f"HPA targets chosen on the tuning set: {results['hpa_targets']}", flush=True)
    jobs: list[Job] = []
    for name in names:
        for seed in seeds:
            if "ours" in only:
                jobs.append(ours_job(name, seed, args.label, params))
            if "hpa" in only:
                jobs.append(hpa_job(name, seed, *results["hpa_targets"]))
            if "planner" in only:
                jobs.extend(planner_jobs(name, seed))
    records = run_all(jobs, args.jobs, autoscalers=True)
    by_cell: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_cell.setdefault(record["job"]["workload"], []).append(record)
    for name in names:
        entry: dict[str, Any] = {"split": workloads.FAMILIES[name][0], "runs": by_cell.get(name, [])}
        if "static" in only:
            found = sweeps(name, seeds, args.jobs)
            entry["sweeps"] = [asdict(s) for s in found]
            entry["oracle"] = [baselines.oracle_costs(s) for s in found]
            entry["static_best"] = static_at(name, seeds, found, ATTAINMENT_TARGET, args.jobs)
            ours = [r for r in entry["runs"] if r["job"]["policy"] == (f"ours-{args.label}" if args.label else "ours")]
            if ours:
                level = sum(r["score"]["attainment"] for r in ours) / len(ours)
                entry["static_at_ours"] = static_at(name, seeds, found, min(level, ATTAINMENT_TARGET), args.jobs)
        results["workloads"][name] = entry
    print(f"done in {time.time() - started:.0f} s", flush=True)
    router = "" if ROUTER == sim.ROUTER_MODE else f"-{ROUTER}"
    summary = CACHE / "summary" / f"{args.split}-{args.label or 'ours'}{router}.json"
    summary.parent.mkdir(parents=True, exist_ok=True)
    summary.write_text(json.dumps(results))
    if not args.no_report and not router:
        import report

        report.write(args.out, results, label=args.label)


if __name__ == "__main__":
    main()
