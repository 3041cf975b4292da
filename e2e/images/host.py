"""Debian packages the image builds need on the host, installed when missing (CI machines start fresh)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping

# program -> the Debian package that provides it
PROGRAMS = {"dockerd": "docker.io", "docker": "docker.io", "mmdebstrap": "mmdebstrap"}


class HostError(RuntimeError):
    pass


def missing_packages(programs: Mapping[str, str] = PROGRAMS) -> list[str]:
    return sorted({package for program, package in programs.items() if shutil.which(program) is None})


def ensure_packages(programs: Mapping[str, str] = PROGRAMS) -> None:
    """apt-get install what is missing; fails loudly (never skips) when that is not possible."""
    packages = missing_packages(programs)
    if not packages:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise HostError(f"missing {', '.join(packages)}; install them (apt-get install {' '.join(packages)})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise HostError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    still = missing_packages(programs)
    if still:
        raise HostError(f"installed {', '.join(packages)} but {', '.join(still)} still missing")
