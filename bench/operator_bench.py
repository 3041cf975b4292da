"""Operator latency and memory on the real local control plane.

    .venv/bin/python bench/operator_bench.py [--samples 10] [--scale 1,50,200]

1. Time from creating a DisaggDeployment to every child existing (examples/01-minimal.yaml, `samples` times).
2. The operator's resident memory (VmRSS) once it has settled with 1, 50 and 200 DisaggDeployments (pools and
   router at 0 replicas, so the fake cluster's GPU capacity is not the limit; every child object still exists).

Brings up its own cluster in a temporary state directory and tears it down afterwards. Prints markdown tables;
docs/performance.md records the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from e2e.localcluster import cluster  # noqa: E402
from e2e.localcluster.config import BinDir  # noqa: E402
from e2e.localcluster.testing import KubeCluster, wait_for  # noqa: E402
from e2e.operator_support import OperatorProcess, children, install_crd, status_of  # noqa: E402

EXPECTED_CHILDREN = 10  # 01-minimal: SA, Role, RoleBinding, 4 Services, 3 Deployments


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def create(kube: KubeCluster, namespace: str, document: dict[str, Any]) -> None:
    kube.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(document))


def latency(kube: KubeCluster, samples: int) -> list[float]:
    base = yaml.safe_load((REPO / "examples" / "01-minimal.yaml").read_text())
    kube.kubectl("create", "namespace", "bench-latency")
    timings = []
    for index in range(samples):
        document = {**base, "metadata": {"name": f"lat-{index}"}}
        start = time.monotonic()
        create(kube, "bench-latency", document)
        wait_for(
            "children",
            lambda name=f"lat-{index}": len(children(kube, "bench-latency", name)) == EXPECTED_CHILDREN,
            timeout=120,
            every=0.05,
        )
        timings.append(time.monotonic() - start)
        kube.kubectl("delete", "dd", f"lat-{index}", "-n", "bench-latency", "--wait=false")
        time.sleep(1)
    return timings


def memory(kube: KubeCluster, operator: OperatorProcess, scales: list[int]) -> list[tuple[int, float, float]]:
    assert operator.process is not None
    base = yaml.safe_load((REPO / "examples" / "01-minimal.yaml").read_text())
    base["spec"]["prefill"]["replicas"] = 0
    base["spec"]["decode"]["replicas"] = 0
    base["spec"]["frontend"] = {"router": {"replicas": 0}}
    kube.kubectl("create", "namespace", "bench-scale")
    created = 0
    rows = []
    for target in scales:
        start = time.monotonic()
        while created < target:
            create(kube, "bench-scale", {**base, "metadata": {"name": f"dd-{created:04d}"}})
            created += 1

        def settled(target: int = target) -> bool:
            listing = kube.get("dd", "-n", "bench-scale")["items"]
            return len(listing) == target and all(
                (item.get("status") or {}).get("observedGeneration") == 1 for item in listing
            )

        wait_for(f"{target} DisaggDeployments to be reconciled", settled, timeout=1800, every=2)
        elapsed = time.monotonic() - start
        time.sleep(5)
        rows.append((target, rss_mib(operator.process.pid), elapsed))
        say(f"{target} deployments: {rows[-1][1]:.0f} MiB, settled in {elapsed:.1f}s")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--scale", default="1,50,200")
    args = parser.parse_args()
    bins = BinDir.default()
    cluster.ensure_binaries(bins, say)
    with tempfile.TemporaryDirectory(prefix="disagg-bench-") as directory:
        root = Path(directory) / "state"
        state = cluster.up(root, bins, say, with_lws=True)
        kube = KubeCluster(state.layout.kubeconfig, bins.path, local=True)
        operator = OperatorProcess(state.layout.kubeconfig, Path(directory) / "operator.log")
        try:
            install_crd(kube)
            operator.start()
            idle = rss_mib(operator.process.pid) if operator.process else 0.0
            timings = latency(kube, args.samples)
            rows = memory(kube, operator, [int(value) for value in args.scale.split(",")])
            ready = status_of(kube, "bench-scale", "dd-0000").get("phase")
        finally:
            operator.stop()
            cluster.down(root, bins, say)
    print("| apply -> all 10 children exist | median | p90 | max |")
    print("| --- | ---: | ---: | ---: |")
    ordered = sorted(timings)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    print(f"| {len(timings)} samples | {statistics.median(timings):.2f} s | {p90:.2f} s | {max(timings):.2f} s |")
    print()
    print(f"Operator RSS right after start: {idle:.0f} MiB. Phase of a 0-replica deployment: {ready}.")
    print()
    print("| DisaggDeployments | operator RSS (MiB) | time to reconcile the new ones (s) |")
    print("| ---: | ---: | ---: |")
    for count, rss, elapsed in rows:
        print(f"| {count} | {rss:.0f} | {elapsed:.1f} |")


if __name__ == "__main__":
    main()
