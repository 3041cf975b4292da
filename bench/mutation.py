"""Mutation testing of the pure core with mutmut 3 (docs/testing.md, "Mutation testing"). Slow; not part of CI.

    .venv/bin/python bench/mutation.py run [SCOPE...]     # mutate and test: api, plan, ... or a file: api/rules.py
    .venv/bin/python bench/mutation.py report [--golden]  # score per scope; --golden: which survivors golden kills

`run` installs the pinned mutmut into the venv when it is missing and runs it at nice 10 with two children in
`.mutation/` (git-ignored), a directory that links the repository's files and names the package `src/disagg`: mutmut
derives a mutant's module from its path and strips only a leading `src.`, so `operator/disagg/...` would name
modules `operator.disagg...` that never run. Results are kept there between runs; a rerun tests only what changed.

Each package's mutants run against the tests that assert its behaviour (TESTS below), and of those only the ones
that reach the mutated function. The golden files are left out, so a mutant they alone kill counts as a survivor;
`report --golden` runs the golden test against each survivor and lists those separately. Also left out: the
Hypothesis property tests (hundreds of specs per test, too slow to repeat per mutant) and the meta-test that watches
`Problem(...)` call sites by line number (under mutmut every rule has copies whose sites no case reaches).

`run SCOPE --mutant NAME` (repeatable; a name or pattern: `'disagg.api.rules.x_gpu_arithmetic*'`) retests only
those; `retest -- TESTS...` runs the given tests (as they are now) against every survivor without mutmut's coverage
pass, which is quicker after adding tests for the survivors, and records the verdicts in mutmut's results.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / ".mutation"
MUTMUT = "mutmut==3.8.1"

# What the brief calls the pure core, per package; `reconcile/` only where it decides without I/O.
SCOPES: dict[str, tuple[str, ...]] = {
    "api": ("src/disagg/api/*",),
    "plan": ("src/disagg/plan/*",),
    "render": ("src/disagg/render/*",),
    "reconcile": (
        "src/disagg/reconcile/workqueue.py",
        "src/disagg/reconcile/status.py",
        "src/disagg/reconcile/conditions.py",
        "src/disagg/reconcile/children.py",
        "src/disagg/reconcile/ownership.py",
    ),
    "scaling": ("src/disagg/scaling/policy.py", "src/disagg/scaling/window.py"),
}
LINKED = ("tests", "examples", "crds", "charts", "manifests", "e2e")
# The tests each package's mutants are run against: the tiers that assert its behaviour. A mutant is then run only
# against those of them that reach the mutated function (mutmut records that in a first pass).
TESTS: dict[str, tuple[str, ...]] = {
    "api": ("tests/unit/api", "tests/unit/plan/test_resolve.py", "tests/unit/test_cli.py"),
    "plan": ("tests/unit/plan", "tests/unit/render"),
    "render": ("tests/unit/render",),
    "reconcile": ("tests/unit/reconcile",),
    "scaling": ("tests/unit/scaling", "tests/unit/reconcile/test_pass_autoscale.py"),
}
LEFT_OUT = (
    # Hypothesis runs hundreds of specs per test through every rule: too slow to repeat for each mutant.
    "--ignore=tests/unit/api/test_property.py",
    "--ignore=tests/unit/render/test_golden.py",
    "--deselect=tests/unit/api/test_rules.py::test_every_problem_the_rules_can_report_has_a_bad_spec",
)
GOLDEN = "tests/unit/render/test_golden.py"
PYTHON = REPO / ".venv" / "bin" / "python"


def _toml_list(values: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(json.dumps(value) for value in values) + "]"


def prepare(scopes: list[str]) -> None:
    WORK.mkdir(exist_ok=True)
    (WORK / "src").mkdir(exist_ok=True)
    (WORK / "mutants").mkdir(exist_ok=True)
    links = {WORK / "src" / "disagg": REPO / "operator" / "disagg"} | {WORK / name: REPO / name for name in LINKED}
    # Tests that read the source as text (which modules own which flags) read the original, not the trampolines.
    links[WORK / "mutants" / "operator"] = REPO / "operator"
    for link, target in links.items():
        if not link.is_symlink():
            link.symlink_to(target)
    patterns = [pattern for scope in scopes for pattern in SCOPES.get(scope, (f"src/disagg/{scope}",))]
    packages = {scope.split("/")[0] for scope in scopes}
    tests = sorted({path for package in packages for path in TESTS[package]})
    config = (
        "\n[tool.mutmut]\n"
        'source_paths = ["src/disagg"]\n'
        f"only_mutate = {_toml_list(patterns)}\n"
        f"also_copy = {_toml_list(list(LINKED[1:]))}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "--timeout=300"]\n'
        f"pytest_add_cli_args_test_selection = {_toml_list([*tests, *LEFT_OUT])}\n"
        "use_git_change_detection = false\n"
    )
    (WORK / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text() + config)


def ensure_mutmut() -> None:
    probe = subprocess.run([PYTHON, "-c", "import mutmut"], capture_output=True, check=False)
    if probe.returncode:
        uv = REPO / ".venv" / "bin" / "uv"
        subprocess.run([uv, "pip", "install", "--python", PYTHON, MUTMUT], check=True)


def run(scopes: list[str], mutants: list[str]) -> int:
    ensure_mutmut()
    prepare(scopes)
    command = ["nice", "-n", "10", str(REPO / ".venv" / "bin" / "mutmut"), "run", "--max-children", "2", *mutants]
    print("cd .mutation &&", " ".join(command[3:]), flush=True)
    return subprocess.run(command, cwd=WORK, check=False).returncode


def results() -> dict[str, int | None]:
    verdicts: dict[str, int | None] = {}
    for meta in sorted((WORK / "mutants" / "src").rglob("*.py.meta")):
        verdicts.update(json.loads(meta.read_text())["exit_code_by_key"])
    return verdicts


def scope_of(mutant: str) -> str:
    """The module, e.g. api.rules."""
    return ".".join(mutant.split(".")[1:3])


KILLED = {1, 3}
TIMEOUT = {36, 24, -24, 152, 255}


def golden_kills(survivors: list[str]) -> set[str]:
    env = dict(os.environ, PYTHONPATH=str(WORK / "mutants" / "src"))
    killed = set()
    for mutant in survivors:
        env["MUTANT_UNDER_TEST"] = mutant
        outcome = subprocess.run(
            [PYTHON, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", GOLDEN],
            cwd=WORK / "mutants",
            env=env,
            capture_output=True,
            check=False,
        )
        if outcome.returncode == 1:
            killed.add(mutant)
    return killed


# Runs inside `.mutation/mutants` with the mutated package first on the path: collects once, then forks a child per
# mutant (as mutmut does), so each mutant costs its tests and not an interpreter start.
_RETEST_WORKER = """
import json, os, sys
import pytest
tests = json.loads(sys.argv[1])
pytest.main(["-q", "-p", "no:cacheprovider", "--collect-only", *tests])
for line in sys.stdin:
    mutant = line.strip()
    pid = os.fork()
    if pid == 0:
        os.environ["MUTANT_UNDER_TEST"] = mutant
        sys.stdout = sys.stderr = open(os.devnull, "w")
        os._exit(int(pytest.main(["-x", "-q", "-p", "no:cacheprovider", *tests])))
    _, status = os.waitpid(pid, 0)
    print(json.dumps([mutant, os.waitstatus_to_exitcode(status)]), file=sys.__stdout__, flush=True)
"""


def retest(tests: list[str]) -> None:
    """Run the given tests against every survivor with the tests as they are now, and record the verdicts as mutmut
    would: quicker than a mutmut rerun (no new coverage pass) after tests were added for the survivors."""
    shutil.copytree(REPO / "tests", WORK / "mutants" / "tests", dirs_exist_ok=True)
    metas = {meta: json.loads(meta.read_text()) for meta in sorted((WORK / "mutants" / "src").rglob("*.py.meta"))}
    owner = {
        mutant: meta
        for meta, data in metas.items()
        for mutant, code in data["exit_code_by_key"].items()
        if code is not None and code not in KILLED | TIMEOUT
    }
    env = dict(os.environ, PYTHONPATH=str(WORK / "mutants" / "src"), MUTANT_UNDER_TEST="")
    worker = subprocess.Popen(
        ["nice", "-n", "10", str(PYTHON), "-c", _RETEST_WORKER, json.dumps(tests)],
        cwd=WORK / "mutants",
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdin is not None and worker.stdout is not None
    worker.stdin.write("".join(f"{mutant}\n" for mutant in owner))
    worker.stdin.close()
    for line in worker.stdout:
        if not line.startswith("["):
            continue  # the collection's own output
        mutant, code = json.loads(line)
        metas[owner[mutant]]["exit_code_by_key"][mutant] = code
        owner[mutant].write_text(json.dumps(metas[owner[mutant]], indent=4))
        print(mutant, "killed" if code in KILLED else f"exit {code}", flush=True)
    worker.wait()


def report(golden: bool) -> None:
    verdicts = results()
    if not verdicts:
        sys.exit("no results: run `bench/mutation.py run` first")
    unchecked = Counter(scope_of(name) for name, code in verdicts.items() if code is None)
    verdicts = {name: code for name, code in verdicts.items() if code is not None}
    survivors = [name for name, code in verdicts.items() if code not in KILLED | TIMEOUT]
    by_golden = golden_kills(survivors) if golden else set()
    print("| module | tested | killed by a behavioural test | timeout | survived | killed by golden only | untested |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    tally: dict[str, Counter[str]] = {}
    for name, code in verdicts.items():
        counts = tally.setdefault(scope_of(name), Counter())
        counts["total"] += 1
        counts["killed" if code in KILLED else "timeout" if code in TIMEOUT else "survived"] += 1
        counts["golden"] += name in by_golden
    for scope, counts in sorted(tally.items()):
        score = 100 * (counts["killed"] + counts["timeout"]) / counts["total"]
        print(
            f"| {scope} | {counts['total']} | {counts['killed']} ({score:.1f}% with timeouts) | {counts['timeout']} "
            f"| {counts['survived']} | {counts['golden'] if golden else '-'} | {unchecked[scope]} |"
        )
    print()
    for name in survivors:
        mark = " (golden)" if name in by_golden else ""
        print(f"survived: {name} [exit {verdicts[name]}]{mark}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run")
    run_parser.add_argument("scopes", nargs="*", metavar="SCOPE", help=f"{', '.join(SCOPES)} or a file: api/rules.py")
    run_parser.add_argument("--mutant", action="append", default=[], help="only this mutant (a name or pattern)")
    retest_parser = commands.add_parser("retest")
    retest_parser.add_argument("tests", nargs="+", help="pytest arguments, e.g. tests/unit/api/test_rules.py")
    report_parser = commands.add_parser("report")
    report_parser.add_argument("--golden", action="store_true")
    args = parser.parse_args()
    if args.command == "run":
        package = REPO / "operator" / "disagg"
        unknown = sorted(scope for scope in args.scopes if scope not in SCOPES and not (package / scope).is_file())
        if unknown:
            parser.error(f"unknown scopes {unknown}: use {', '.join(SCOPES)} or a file under operator/disagg")
        sys.exit(run(args.scopes or list(SCOPES), args.mutant))
    if args.command == "retest":
        retest(args.tests)
        return
    report(args.golden)


if __name__ == "__main__":
    main()
