"""Build the images in the private dockerd, reusing any whose inputs are unchanged."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from e2e.localcluster import procs

from . import base
from .cachekey import FileInput, cache_key, file_input, is_keyed_tag_of
from .dockerd import Dockerd
from .dockerfile import DockerIgnore, base_images, context_inputs, copy_sources, has_glob
from .specs import REPO_ROOT, ImageSpec

NICE = ("nice", "-n", "10")  # the cores are shared; a multi-minute build must not starve the rest
INPUTS_LABEL = "dev.disagg.inputs"


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Inputs:
    dockerfile: bytes
    dockerignore: bytes
    files: tuple[FileInput, ...]
    base_refs: tuple[str, ...]


@dataclass(frozen=True)
class BuiltImage:
    name: str
    ref: str  # the input-keyed tag: names exactly this build
    stable_ref: str  # the release tag users and the operator's defaults name
    image_id: str
    key: str
    reused: bool
    seconds: float


def read_inputs(spec: ImageSpec, repo: Path = REPO_ROOT) -> Inputs:
    """Everything the build reads from the repository; fails if a COPY source is missing or ignored."""
    dockerfile_path = repo / spec.dockerfile
    context = repo / spec.context
    dockerfile = dockerfile_path.read_bytes()
    ignore_path = context / ".dockerignore"
    dockerignore = ignore_path.read_bytes() if ignore_path.is_file() else b""
    text = dockerfile.decode()
    try:
        sources = copy_sources(text)
        refs = base_images(text, dict(spec.build_args))
        chosen = context_inputs(sources, _candidates(context, sources), DockerIgnore(dockerignore.decode()))
    except ValueError as exc:
        raise BuildError(f"{spec.dockerfile}: {exc}") from exc
    files = []
    for relative in chosen:
        path = context / relative
        files.append(file_input(relative, path.read_bytes(), path.stat().st_mode))
    return Inputs(dockerfile, dockerignore, tuple(files), tuple(refs))


def _candidates(context: Path, sources: Sequence[str]) -> list[str]:
    """The files under each source, without walking the rest of the context (a repository root holds a venv)."""
    found: list[str] = []
    for source in sources:
        roots = sorted(context.glob(source)) if has_glob(source) else [context / source]
        for root in roots:
            if root.is_file():
                found.append(root.relative_to(context).as_posix())
            elif root.is_dir():
                for directory, _, names in os.walk(root):
                    found += [(Path(directory) / n).relative_to(context).as_posix() for n in names]
    return found


def build_argv(docker: str, spec: ImageSpec, key: str, repo: Path = REPO_ROOT) -> list[str]:
    """`docker build` for one image: host network (there is no bridge; PyPI is reached directly), never pull."""
    argv = [*NICE, docker, "build", "--network", "host", "--force-rm", "--pull=false"]
    argv += ["-f", str(repo / spec.dockerfile), "-t", spec.keyed_ref(key), "-t", spec.ref]
    argv += ["--label", f"{INPUTS_LABEL}={key}"]
    for name, value in spec.build_args:
        argv += ["--build-arg", f"{name}={value}"]
    return [*argv, str(repo / spec.context)]


def check_bases(spec: ImageSpec, refs: Sequence[str]) -> None:
    for ref in refs:
        if ref != base.BASE_REF:
            raise BuildError(
                f"{spec.dockerfile}: FROM {ref} cannot be pulled here and the harness provides only "
                f"{base.BASE_REF} (made from Debian's packages); use that base"
            )


def build_images(
    docker: Dockerd,
    specs: Sequence[ImageSpec],
    *,
    log_dir: Path,
    say: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True),
    on_built: Callable[[BuiltImage], None] = lambda image: None,
) -> list[BuiltImage]:
    """Build (or reuse) each image in order; the first failure raises, naming the image and its log.

    `on_built` is called with each image as soon as it exists, before the next one builds (e.g. to export it
    meanwhile). One build at a time per daemon: a second caller waits, then finds the images the first one built.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _build_all(docker, specs, log_dir, say, on_built)
        finally:
            prune(docker)  # also after a failed build, whose half-built layers are dangling


def _build_all(
    docker: Dockerd,
    specs: Sequence[ImageSpec],
    log_dir: Path,
    say: Callable[[str], None],
    on_built: Callable[[BuiltImage], None],
) -> list[BuiltImage]:
    base_id = base.ensure_base(docker, log=log_dir / "base.log", say=say)
    built: list[BuiltImage] = []
    for spec in specs:
        started = time.monotonic()
        inputs = read_inputs(spec)
        check_bases(spec, inputs.base_refs)
        key = cache_key(
            dockerfile=inputs.dockerfile,
            dockerignore=inputs.dockerignore,
            files=inputs.files,
            build_args=dict(spec.build_args),
            base_ids=[base_id for _ in inputs.base_refs],
        )
        keyed = spec.keyed_ref(key)
        existing = base.image_id(docker, keyed)
        if existing is not None:
            docker.run(["tag", keyed, spec.ref])
            built.append(BuiltImage(spec.name, keyed, spec.ref, existing, key, True, time.monotonic() - started))
            say(f"{spec.name}: {keyed} is up to date")
            on_built(built[-1])
            continue
        log = log_dir / f"{spec.name}.log"
        say(f"{spec.name}: building {keyed} (log: {log})")
        _run_logged(build_argv(docker.docker, spec, key), docker.env, log, spec)
        image = base.image_id(docker, keyed)
        if image is None:
            raise BuildError(f"{spec.name}: docker build succeeded but {keyed} does not exist; see {log}")
        _drop_stale_tags(docker, spec, keyed)
        seconds = time.monotonic() - started
        built.append(BuiltImage(spec.name, keyed, spec.ref, image, key, False, seconds))
        say(f"{spec.name}: built {keyed} in {seconds:.0f} s")
        on_built(built[-1])
    return built


def _run_logged(argv: list[str], env: dict[str, str], log: Path, spec: ImageSpec) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        rc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise BuildError(
            f"{spec.name}: docker build of {spec.dockerfile} failed (exit {rc}); see {log}:\n{procs.log_tail(log, 40)}"
        )


def _drop_stale_tags(docker: Dockerd, spec: ImageSpec, keep: str) -> None:
    """Untag builds of older inputs of the same image, so `prune` can free their layers."""
    listed = docker.run(["images", spec.repository, "--format", "{{.Tag}}"]).stdout.split()
    stale = [f"{spec.repository}:{tag}" for tag in listed if is_keyed_tag_of(spec.tag, tag)]
    stale = [ref for ref in stale if ref != keep]
    if stale:
        docker.run(["rmi", *stale], check=False)


def prune(docker: Dockerd) -> None:
    """Dangling images (replaced builds, failed builds' leftovers) and stopped containers; tagged images stay."""
    docker.run(["container", "prune", "--force"], check=False)
    docker.run(["image", "prune", "--force"], check=False, timeout=900)
