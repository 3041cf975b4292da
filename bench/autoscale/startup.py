"""What a faster start-up buys: ours replayed with replicas that start in 15, 30, 60 (the table's) and 120 s, beside
the start-up-aware oracle at the same start-up, on the 8 workloads x 3 seeds. The policy is the same at every
start-up (it sees replicas starting, not how long they take); only the simulated engines' start-up changes, as
locally cached weights or a warm image would change it on a real cluster.

    python bench/autoscale/startup.py [--startups 15,30,60,120] [--jobs 2]

Uses run.py's cache: the static sweeps (for the oracle) come from `make -C bench/autoscale` when it has run, and are
replayed here otherwise. Writes bench/autoscale/results/startup.md and startup.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import baselines  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402
import sim  # noqa: E402
import workloads  # noqa: E402


def label_at(startup_s: float) -> str:
    """No label at the default start-up (the table's own replays); a variant of ours of its own at any other."""
    return "" if startup_s == sim.STARTUP_S else f"startup{startup_s:g}"


def ours_at(workload: str, seed: int, startup_s: float) -> run.Job:
    params = {"startup_s": startup_s} if label_at(startup_s) else {}
    return run.ours_job(workload, seed, label_at(startup_s), params)


def study(startups: list[float], seeds: tuple[int, ...], parallel: int) -> dict[str, Any]:
    names = workloads.names("all")
    jobs = [ours_at(w, s, t) for w in names for s in seeds for t in startups]
    records = run.run_all(jobs, parallel, autoscalers=True)
    out: dict[str, Any] = {"startups_s": startups, "seeds": list(seeds), "workloads": {}}
    for name in names:
        found = run.sweeps(name, seeds, parallel)
        sweeps = [asdict(f) for f in found]
        rows = []
        for startup in startups:
            policy = ours_at(name, seeds[0], startup).policy
            mine = [r for r in records if (r["job"]["workload"], r["job"]["policy"]) == (name, policy)]
            summary = report.summarise(mine)
            entry = {"sweeps": sweeps, "oracle": [baselines.oracle_costs(f, startup_s=startup) for f in found]}
            at = report.oracle(entry, summary["attainment"]["mean"])
            rows.append({"startup_s": startup, "ours": summary, "oracle_at_ours": at, "oracle": report.oracle(entry)})
        out["workloads"][name] = {"split": workloads.FAMILIES[name][0], "rows": rows}
    return out


def markdown(result: dict[str, Any]) -> str:
    startups = ", ".join(f"{t:g} s" for t in result["startups_s"])
    seeds = ", ".join(map(str, result["seeds"]))
    lines = [
        "# What a faster start-up buys",
        "",
        f"Ours (HEAD's defaults) replayed with engines that start in {startups} (the main table's is"
        f" {sim.STARTUP_S:g} s), beside the start-up-aware oracle at the same start-up; means over seeds {seeds}"
        " (ranges in brackets). The policy is the same at every start-up.",
        "",
        "| workload | split | start-up | ours: window attainment | GPU-hours | reversals/h | oracle at ours' att. |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, entry in result["workloads"].items():
        for row in entry["rows"]:
            ours, at = row["ours"], row["oracle_at_ours"]
            a, g = ours["attainment"], ours["gpu_hours"]
            ratio = "" if not at else f"{at['gpu_hours']:.2f} ({g['mean'] / at['gpu_hours']:.2f}x)"
            spread = f"{a['mean']:.1%} ({a['min']:.1%}-{a['max']:.1%})"
            lines.append(
                f"| {name} | {entry['split']} | {row['startup_s']:g} s | {spread} | {g['mean']:.2f}"
                f" | {ours['reversals_per_hour']['mean']:.1f} | {ratio} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--startups", default="15,30,60,120", help="comma-separated start-up times, seconds")
    parser.add_argument("--seeds", default=",".join(map(str, workloads.SEEDS)))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=run.RESULTS)
    args = parser.parse_args()
    sim.profile_npz(run.CACHE)
    result = study(
        [float(t) for t in args.startups.split(",")], tuple(int(s) for s in args.seeds.split(",")), args.jobs
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "startup.json").write_text(json.dumps(result, indent=1))
    (args.out / "startup.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
