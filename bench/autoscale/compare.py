"""A paired verdict: a variant of ours against the defaults on the same traces and seeds, with standard errors.

Three-seed means of two variants differ by a window or more from the replay noise alone (docs/autoscaling.md,
"Replay noise"); the difference seed by seed is tighter, and its standard error says how many seeds a verdict
needs. Replays missing from run.py's cache are run first (the same cache and keys as run.py). With that venv's
python:
    python bench/autoscale/compare.py --label NAME --tuning '{"field": value}' [--workloads bursty] [--seeds 1-30]
Prints, per workload, both means and the paired difference (variant minus default) of attainment, GPU-hours and
reversals/h with its standard error (lost requests, if any, beside the means); a difference of at least two
standard errors is marked, the rest is noise.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import report  # noqa: E402
import run  # noqa: E402
import sim  # noqa: E402
import workloads  # noqa: E402

METRICS = (("attainment", 100.0, "points"), ("gpu_hours", 1.0, "GPU-h"), ("reversals_per_hour", 1.0, "rev/h"))
"""Score field, the factor it is shown at, and its unit."""


@dataclass(frozen=True)
class Paired:
    mean: float
    """Variant minus default, averaged over the seeds."""
    stderr: float
    """Standard error of that mean (inf with one seed)."""

    @property
    def material(self) -> bool:
        return self.mean != 0.0 and abs(self.mean) >= 2.0 * self.stderr

    def __str__(self) -> str:
        mark = " *" if self.material else ""
        return f"{self.mean:+.2f} ± {self.stderr:.2f}{mark}"


def paired(default: list[float], variant: list[float]) -> Paired:
    diffs = [v - d for d, v in zip(default, variant, strict=True)]
    if len(diffs) < 2:
        return Paired(statistics.fmean(diffs), math.inf)
    return Paired(statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs)))


def seed_list(text: str) -> tuple[int, ...]:
    """'1,2,3' or '1-30' (or a mix: '1-3,7')."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return tuple(out)


def compare(names: list[str], seeds: tuple[int, ...], label: str, params: dict[str, Any], jobs: int) -> list[str]:
    lines = [
        f"variant `{label}` {json.dumps(params)} against the defaults on {len(seeds)} seeds "
        f"({','.join(map(str, seeds))}), router {run.ROUTER}; paired difference ± standard error, * at two or more",
        "",
        "| workload | default | variant | " + " | ".join(f"Δ {unit}" for _, _, unit in METRICS) + " |",
        "| --- | ---: | ---: | " + " | ".join("---:" for _ in METRICS) + " |",
    ]
    for name in names:
        default_jobs = [run.ours_job(name, s, "", {}) for s in seeds]
        variant_jobs = [run.ours_job(name, s, label, params) for s in seeds]
        records = run.run_all(default_jobs + variant_jobs, jobs)
        default, variant = records[: len(seeds)], records[len(seeds) :]
        cells = [_summary(default), _summary(variant)]
        for key, factor, _ in METRICS:
            before = [r["score"][key] * factor for r in default]
            cells.append(str(paired(before, [r["score"][key] * factor for r in variant])))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _summary(records: list[dict[str, Any]]) -> str:
    s = report.summarise(records)
    attainment, gpu_hours = s["attainment"]["mean"] * 100.0, s["gpu_hours"]["mean"]
    lost = f", {s['lost_requests']} lost" if s["lost_requests"] else ""
    return f"{attainment:.1f} % at {gpu_hours:.2f}, {s['reversals_per_hour']['mean']:.1f}{lost}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="tuning", choices=["tuning", "held_out", "all"])
    parser.add_argument("--workloads", default="", help="comma-separated subset of the split's workloads")
    parser.add_argument("--seeds", default="1-3", help="'1,2,3' or '1-30'")
    parser.add_argument("--label", required=True, help="the variant's name (its replays are cached under it)")
    parser.add_argument("--tuning", required=True, help='JSON overrides of Tuning, e.g. {"burst_hold_windows": 1}')
    parser.add_argument("--jobs", type=int, default=2, help="replays in parallel (one process each)")
    parser.add_argument("--router", default=sim.ROUTER_MODE, choices=run.ROUTERS)
    args = parser.parse_args()
    run.ROUTER = args.router
    names = [n for n in args.workloads.split(",") if n] or workloads.names(args.split)
    sim.profile_npz(run.CACHE)
    for line in compare(names, seed_list(args.seeds), args.label, {"tuning": json.loads(args.tuning)}, args.jobs):
        print(line, flush=True)


if __name__ == "__main__":
    main()
