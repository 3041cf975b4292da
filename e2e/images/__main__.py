"""CLI: python -m e2e.images build|load|dockerd|smoke (run from the repository root).

  build [--only NAME...]                       build or reuse the images; prints `name ref` lines
  load --ctr-address SOCK [--only NAME...] [--prune]
                                               build or reuse, then import into containerd (namespace k8s.io);
                                               --prune removes older builds of those images from it
  preload [--only NAME...]                     build or reuse, importing each into the real node's image store as
                                               soon as it is built (through the node's containerd if a cluster
                                               runs, else a private one on the same store)
  dockerd up|down|status                       the private Docker Engine the builds run in
  smoke [--pd] [--image REF]                   serve the engine image: completion + chat, or a NIXL P/D pair

`ref` is the input-keyed tag (e.g. ghcr.io/disagg-dev/vllm-cpu:0.32.0-in-3f2a9c01d4e5b6a7), which names exactly
the inputs that were built; the release tag (…:0.32.0) points at the same image. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import api, smoke, specs
from .build import BuildError, BuiltImage
from .dockerd import Dockerd, DockerdError
from .export import K8S_NAMESPACE, prune_older_builds
from .pipes import PipeError
from .preload import PreloadError, preload


def _say(msg: str) -> None:
    print(f"[images] {msg}", file=sys.stderr, flush=True)


def _build(docker: Dockerd, names: list[str] | None) -> list[BuiltImage]:
    return list(api.build(names, docker=docker, say=_say).values())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.images", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    names = [spec.name for spec in specs.all_images()]
    build = sub.add_parser("build", help="build or reuse images; prints `name ref` lines")
    build.add_argument("--only", nargs="+", choices=names, metavar="NAME", help=f"any of: {', '.join(names)}")
    load = sub.add_parser("load", help="build or reuse, then import into containerd")
    load.add_argument("--ctr-address", required=True, help="containerd's socket, e.g. <state>/containerd.sock")
    load.add_argument("--namespace", default=K8S_NAMESPACE, help=f"containerd namespace (default {K8S_NAMESPACE})")
    load.add_argument("--ctr", default="ctr", help="the ctr binary (default: ctr on PATH)")
    load.add_argument("--only", nargs="+", choices=names, metavar="NAME", help=f"any of: {', '.join(names)}")
    load.add_argument(
        "--prune",
        action="store_true",
        help="then remove older builds of the same images from containerd (only when no other checkout uses them)",
    )
    preload = sub.add_parser("preload", help="build or reuse, then import into the real node's image store")
    preload.add_argument("--only", nargs="+", choices=names, metavar="NAME", help=f"any of: {', '.join(names)}")
    daemon = sub.add_parser("dockerd", help="the private Docker Engine")
    daemon.add_argument("action", choices=("up", "down", "status"))
    smoke = sub.add_parser("smoke", help="run the vLLM CPU engine image for real (heavy: one or two engines)")
    smoke.add_argument("--pd", action="store_true", help="a NIXL prefill/decode pair and one request through both")
    smoke.add_argument("--image", help="engine image (default: build or reuse vllm-cpu)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    docker = Dockerd()
    try:
        if args.command == "dockerd":
            status = {"up": docker.up, "down": docker.down, "status": docker.status}[args.action]()
            print(status.detail)
            return 0 if status.running or args.action == "down" else 1
        docker.up()
        if args.command == "smoke":
            image = args.image or _build(docker, ["vllm-cpu"])[0].ref
            report = (smoke.prefill_decode if args.pd else smoke.serve)(docker, image)
            print(json.dumps({"image": image, **report}, indent=2))
            return 0
        if args.command == "build":
            built = _build(docker, args.only)
        elif args.command == "preload":
            built = preload(docker, specs.select(args.only), _say)
        else:
            loaded = api.build_and_load(
                args.ctr_address, args.only, namespace=args.namespace, ctr=args.ctr, docker=docker, say=_say
            )
            built = list(loaded.values())
            if args.prune:
                for ref in prune_older_builds(built, args.ctr_address, args.namespace, args.ctr):
                    _say(f"removed {ref}")
        for image in built:
            print(f"{image.name} {image.ref}", flush=True)
    except (BuildError, DockerdError, PipeError, PreloadError, smoke.SmokeError, ValueError) as exc:
        _say(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
