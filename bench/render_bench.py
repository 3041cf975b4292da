"""Median time to validate + plan + render one DisaggDeployment, for the largest example (and all of them).

    .venv/bin/python bench/render_bench.py [--repeat 200]

Prints a markdown table; docs/performance.md records the figures measured on the reference machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from disagg.api.documents import dump_documents, load_documents
from disagg.api.validate import validate_deployment
from disagg.render import render_deployment

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.yaml"))


def measure(path: Path, repeat: int) -> tuple[float, float, int]:
    document = load_documents(path.read_text())[0].content
    render_only, end_to_end = [], []
    deployment = validate_deployment(document).deployment
    assert deployment is not None
    for _ in range(repeat):
        start = time.perf_counter()
        render_deployment(deployment, "default")
        render_only.append(time.perf_counter() - start)
        start = time.perf_counter()
        result = validate_deployment(document)
        assert result.deployment is not None
        dump_documents(render_deployment(result.deployment, "default"))
        end_to_end.append(time.perf_counter() - start)
    size = len(dump_documents(render_deployment(deployment, "default")))
    return statistics.median(render_only) * 1000, statistics.median(end_to_end) * 1000, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    for path in EXAMPLES[:1]:
        measure(path, 20)  # warm caches (template compilation) before measuring
    rows = [(path.stem, *measure(path, args.repeat)) for path in EXAMPLES]
    print("| example | output bytes | plan+render median (ms) | validate+plan+render+YAML median (ms) |")
    print("| --- | ---: | ---: | ---: |")
    for stem, render_ms, total_ms, size in sorted(rows, key=lambda row: -row[3]):
        print(f"| {stem} | {size} | {render_ms:.2f} | {total_ms:.2f} |")


if __name__ == "__main__":
    main()
