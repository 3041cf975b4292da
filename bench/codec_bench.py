"""The reconciler's JSON codec (D250) against the standard library it replaced, on a rendered deployment's children.

    .venv/bin/python bench/codec_bench.py [--repeat 2000] [--example 02-nixl-1p1d-two-gpus]

Per pass the reconciler decodes every child from the cache and the rendered objects, and encodes the apply
bodies; the watches encode every event into the cache. Prints the median time to encode and to decode all the
children once, and the resident memory that 10,000 kept texts of them add (each run in a fresh process, so the
heap of one does not hide the other's). docs/performance.md records the figures of the reference machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from disagg.api.documents import load_documents
from disagg.api.validate import validate_deployment
from disagg.reconcile import codec
from disagg.render import render_deployment

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def children(example: str) -> list[dict[str, Any]]:
    document = load_documents((EXAMPLES / f"{example}.yaml").read_text())[0].content
    deployment = validate_deployment(document).deployment
    assert deployment is not None, example
    return render_deployment(deployment, "default")


def stdlib_dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


CODECS: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]] = {
    "json (standard library)": (stdlib_dumps, json.loads),
    "codec (orjson)": (codec.dumps, codec.loads),
}


def median_us(action: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def kept_rss_mib(name: str, example: str) -> float:
    """Run in a child: the growth of the peak RSS while 10,000 encoded copies of the children are kept."""
    dumps = CODECS[name][0]
    objects = children(example)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kept = [dumps(obj) for _ in range(10_000 // len(objects) + 1) for obj in objects][:10_000]
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert len(kept) == 10_000
    return (after - before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--example", default="02-nixl-1p1d-two-gpus")
    parser.add_argument("--rss-of", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_of:
        print(kept_rss_mib(args.rss_of, args.example))
        return
    objects = children(args.example)
    size = sum(len(stdlib_dumps(obj)) for obj in objects)
    print(f"{args.example}: {len(objects)} children, {size} bytes of compact JSON\n")
    print("| codec | encode all (µs, median) | decode all (µs, median) | RSS of 10,000 kept texts (MiB) |")
    print("| --- | ---: | ---: | ---: |")
    for name, (dumps, loads) in CODECS.items():
        texts = [dumps(obj) for obj in objects]
        assert [loads(text) for text in texts] == objects
        encode = median_us(lambda dumps=dumps: [dumps(obj) for obj in objects], args.repeat)
        decode = median_us(lambda loads=loads, texts=texts: [loads(text) for text in texts], args.repeat)
        command = [sys.executable, __file__, "--example", args.example, "--rss-of", name]
        rss = float(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        print(f"| {name} | {encode:.1f} | {decode:.1f} | {rss:.1f} |")


if __name__ == "__main__":
    main()
