"""The contract tier: rendered command lines are parsed by the real vLLM 0.33.0 and vllm-router 0.1.17.

The parsers live in their own virtualenv (built once per machine by env.sh, cached outside the repo), and are
called as subprocesses with every item in one batch because importing vLLM takes ~20 s.
"""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent


ENV_TIMEOUT_S = 3600
CHECKER_TIMEOUT_S = 1800


@cache
def contract_python() -> str:
    completed = subprocess.run(
        [str(HERE / "env.sh")], capture_output=True, text=True, timeout=ENV_TIMEOUT_S, check=False
    )
    if completed.returncode != 0:
        pytest.fail(
            f"could not build the contract environment:\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
        )
    return completed.stdout.strip().splitlines()[-1]


def run_checker(script: str, items: list[dict[str, Any]], *args: str) -> dict[str, dict[str, Any]]:
    completed = subprocess.run(
        [contract_python(), str(HERE / script), *args],
        input=json.dumps(items),
        capture_output=True,
        text=True,
        timeout=CHECKER_TIMEOUT_S,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-5000:]
    results = json.loads(completed.stdout)
    return {result["id"]: result for result in results}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.contract)
            # The first item's setup waits for the parser venv and one batch through vLLM's parser; each has its
            # own timeout. Under the suite's 300 s default, a cold run on a slow 2-core machine, with the control
            # plane compiling beside it, timed out in vLLM's import and errored every item of the batch.
            item.add_marker(pytest.mark.timeout(ENV_TIMEOUT_S + CHECKER_TIMEOUT_S))
