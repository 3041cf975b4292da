"""CLI: python -m e2e.localcluster up|down|status|env (run from the repo root)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import cluster
from .config import BinDir, default_state_dir, real_node_wanted


def _say(msg: str) -> None:
    print(f"[localcluster] {msg}", flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m e2e.localcluster", description=__doc__)
    parser.add_argument(
        "command",
        choices=("up", "down", "status", "env"),
        help="up: start (idempotent); down: stop and wipe state; status: health; env: shell exports",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        help="default: $DISAGG_E2E_STATE or <repo>/e2e/.state",
    )
    parser.add_argument(
        "--without-lws",
        action="store_true",
        help="up: do not run the LeaderWorkerSet controller (to test behaviour without the LWS API)",
    )
    parser.add_argument(
        "--without-real-node",
        action="store_true",
        default=not real_node_wanted(),
        help="up: only kwok's fake nodes, no real kubelet node (default when DISAGG_E2E_REAL_NODE=0)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    bins = BinDir.default()
    root: Path = args.state_dir
    try:
        if args.command == "up":
            t0 = time.monotonic()
            cluster.up(root, bins, _say, with_lws=not args.without_lws, with_real_node=not args.without_real_node)
            _say(f'total {time.monotonic() - t0:.1f}s; use: eval "$(python -m e2e.localcluster env)"')
        elif args.command == "down":
            cluster.down(root, bins, _say)
        elif args.command == "status":
            report = cluster.status(root)
            print("\n".join(report.lines))
            return 0 if report.running else 1
        else:
            print("\n".join(cluster.env_lines(root, bins)))
    except cluster.ClusterError as err:
        _say(f"error: {err}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
