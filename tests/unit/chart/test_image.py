"""The operator image's inputs: the runtime lock matches the tested pins, and the Dockerfile's promises hold."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import REPO

RUNTIME = REPO / "requirements" / "runtime.txt"
DEV = REPO / "requirements" / "dev.txt"
DOCKERFILE = REPO / "operator" / "Dockerfile"


def pins(text: str) -> dict[str, str]:
    found = re.findall(r"^([A-Za-z0-9_.-]+)==([^\s\\;]+)", text, flags=re.MULTILINE)
    return {name.lower().replace("_", "-"): version for name, version in found}


def test_the_runtime_lock_pins_the_versions_the_tests_run_with() -> None:
    runtime, dev = pins(RUNTIME.read_text()), pins(DEV.read_text())
    assert runtime, "requirements/runtime.txt pins nothing"
    differ = {name: (version, dev.get(name)) for name, version in runtime.items() if dev.get(name) != version}
    assert not differ, f"runtime pins differ from requirements/dev.txt (regenerate, see operator/Dockerfile): {differ}"


def test_the_runtime_lock_covers_every_dependency_and_has_hashes() -> None:
    runtime = pins(RUNTIME.read_text())
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower() for requirement in declared}
    assert names <= set(runtime), f"missing from requirements/runtime.txt: {sorted(names - set(runtime))}"
    blocks = re.split(r"\n(?=[A-Za-z0-9])", RUNTIME.read_text().split("\n", 2)[2])
    assert all("--hash=sha256:" in block for block in blocks if "==" in block)
    assert "pytest" not in runtime and "mypy" not in runtime  # test tools stay out of the image


def test_the_dockerfile_installs_from_the_lock_and_runs_as_65532() -> None:
    text = DOCKERFILE.read_text()
    stages = re.split(r"^FROM ", text, flags=re.MULTILINE)[1:]
    assert len(stages) == 2, "multi-stage: build, then the runtime image"
    assert "--require-hashes" in stages[0] and "-r /src/requirements/runtime.txt" in stages[0]
    final = stages[1]
    assert "COPY --from=build /opt/disagg /opt/disagg" in final
    assert "USER 65532:65532" in final
    assert 'ENTRYPOINT ["disagg"]' in final and 'CMD ["run"]' in final
    assert "PYTHONDONTWRITEBYTECODE=1" in final
    for tool in ("gcc", "build-essential", "apt-get install"):
        assert tool not in text


def test_the_build_context_is_what_the_dockerfile_copies() -> None:
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    assert "*" in ignore  # everything not re-included stays out (.venv, e2e state, caches)
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE.read_text(), flags=re.MULTILINE)
    for sources in copied:
        for source in sources.split():
            assert f"!{source}" in ignore, f"{source} is copied but excluded by .dockerignore"
            assert (REPO / source).exists(), source
