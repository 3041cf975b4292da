"""Mutation testing of the pure core on a seeded sample of mutants (docs/testing.md, "Mutation testing"). Not in CI.

    nice -n 19 .venv/bin/python bench/mutation.py sample [PACKAGE...] [--seed 18] [--size 80]
    nice -n 19 .venv/bin/python bench/mutation.py sample PACKAGE --survivors   # after adding tests for survivors
    .venv/bin/python bench/mutation.py table            # the per-package table of the last samples, for the docs
    .venv/bin/python bench/mutation.py show MUTANT      # the mutant's diff, to classify a survivor

mutmut 3.8.1 (installed into the venv on first use) generates every mutant of the packages in `SCOPES` into
`.mutation/mutants` (git-ignored): a copy of the package, named `src/disagg` because mutmut derives a mutant's module
from its path and strips only a leading `src.`, where each function dispatches to one of its mutants by the
`MUTANT_UNDER_TEST` environment variable. Testing all of them takes hours on two cores, so `sample` draws `--size`
mutants uniformly from all of a package's mutants with `random.Random(seed)` over their sorted names, and runs each
against the tests that assert that package's behaviour (`TESTS`), as follows:

1. one coverage pass runs those tests with every trampoline recording which functions each test reaches;
2. each sampled mutant runs (in a process forked from one that has imported everything once) against only the tests
   that reach its function, quickest first, stopping at the first failure; a run longer than ten times its tests'
   clean duration (and 30 s) is stopped and counts as a kill by timeout;
3. the golden test (`GOLDEN`), left out of the steps above, runs against each survivor whose function it reaches
   (a coverage pass of its own): a mutant only it kills is counted apart, not as a kill (D88).

The sample's kill rate comes with a 95% Wilson score interval. Results go to `.mutation/sample-PACKAGE.json`. The
Hypothesis property tests are left out (hundreds of specs per test: too slow to repeat per mutant), and so is the
meta-test that watches `Problem(...)` call sites by line number (under mutmut every rule has copies no case reaches).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORK = REPO / ".mutation"
MUTANTS = WORK / "mutants"
MUTMUT = "mutmut==3.8.1"
PYTHON = REPO / ".venv" / "bin" / "python"

# The pure core and the shells that have a unit tier. Left out of `reconcile/`: `operator.py` (kopf and process
# wiring) and `informer.py` (list-then-watch streams), which only the e2e tier against a real API server exercises.
SCOPES: dict[str, tuple[str, ...]] = {
    "api": ("src/disagg/api/*",),
    "plan": ("src/disagg/plan/*",),
    "render": ("src/disagg/render/*",),
    "reconcile": tuple(
        f"src/disagg/reconcile/{path.name}"
        for path in sorted((REPO / "operator" / "disagg" / "reconcile").glob("*.py"))
        if path.name not in {"operator.py", "informer.py"}
    ),
    "scaling": ("src/disagg/scaling/*",),
}
# The tests that assert each package's behaviour.
TESTS: dict[str, tuple[str, ...]] = {
    "api": ("tests/unit/api", "tests/unit/plan/test_resolve.py", "tests/unit/test_cli.py"),
    "plan": ("tests/unit/plan", "tests/unit/render"),
    "render": ("tests/unit/render", "tests/unit/plan"),
    "reconcile": ("tests/unit/reconcile",),
    "scaling": ("tests/unit/scaling", "tests/unit/reconcile", "tests/unit/metrics_sources"),
}
LEFT_OUT = (
    "--ignore=tests/unit/api/test_property.py",
    "--ignore=tests/unit/render/test_golden.py",
    "--deselect=tests/unit/api/test_rules.py::test_every_problem_the_rules_can_report_has_a_bad_spec",
)
GOLDEN = "tests/unit/render/test_golden.py"
LINKED = ("examples", "crds", "charts", "manifests", "e2e")
SEED = 18
SIZE = 80


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(value) for value in values) + "]"


def ensure_mutmut() -> None:
    probe = subprocess.run([PYTHON, "-c", "import mutmut"], capture_output=True, check=False)
    if probe.returncode:
        subprocess.run([REPO / ".venv" / "bin" / "uv", "pip", "install", "--python", PYTHON, MUTMUT], check=True)


def _sources_digest() -> str:
    digest = hashlib.sha256(MUTMUT.encode())
    for path in sorted((REPO / "operator" / "disagg").rglob("*.py")):
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    for scope in SCOPES.values():
        digest.update(json.dumps(scope).encode())
    return digest.hexdigest()


_GENERATE = """
from mutmut.__main__ import copy_also_copy_files, copy_src_dir, create_mutants
from mutmut.mutation.trampoline import set_mutant_under_test
set_mutant_under_test("mutant_generation")
copy_src_dir()
copy_also_copy_files()
stats = create_mutants(1)
print(f"mutmut: {stats.mutated} files mutated, {stats.ignored} copied")
"""


def generate() -> None:
    """Every mutant of every scope, regenerated from scratch when a source changed: mutmut's own reuse trusts file
    times that a copied (unmutated) file breaks."""
    ensure_mutmut()
    stamp = MUTANTS / ".sources"
    digest = _sources_digest()
    if stamp.is_file() and stamp.read_text() == digest:
        # The tests as they are now: mutmut copied them when it generated the mutants.
        shutil.rmtree(MUTANTS / "tests")
        shutil.copytree(REPO / "tests", MUTANTS / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        return
    shutil.rmtree(MUTANTS, ignore_errors=True)
    (WORK / "src").mkdir(parents=True, exist_ok=True)
    links = {WORK / "src" / "disagg": REPO / "operator" / "disagg", WORK / "tests": REPO / "tests"}
    links |= {WORK / name: REPO / name for name in LINKED}
    for link, target in links.items():
        if not link.is_symlink():
            link.symlink_to(target)
    patterns = [pattern for scope in SCOPES.values() for pattern in scope]
    config = (
        "\n[tool.mutmut]\n"
        'source_paths = ["src/disagg"]\n'
        f"only_mutate = {_toml_list(patterns)}\n"
        f"also_copy = {_toml_list(list(LINKED))}\n"
        "use_git_change_detection = false\n"
    )
    (WORK / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text() + config)
    print("generating mutants (a few minutes)", flush=True)
    subprocess.run(["nice", "-n", "19", PYTHON, "-c", _GENERATE], cwd=WORK, check=True, stdout=subprocess.DEVNULL)
    # Tests that read the source as text (which modules own which flags) read the original, not the trampolines.
    (MUTANTS / "operator").symlink_to(REPO / "operator")
    stamp.write_text(digest)


def all_mutants(package: str) -> list[str]:
    names: list[str] = []
    for meta in sorted((MUTANTS / "src" / "disagg" / package).rglob("*.py.meta")):
        names.extend(json.loads(meta.read_text())["exit_code_by_key"])
    return sorted(names)


def function_of(mutant: str) -> str:
    """`disagg.api.rules.x_rule__mutmut_3` -> `disagg.api.rules.x_rule`, the name the coverage pass records."""
    return mutant.partition("__mutmut_")[0]


# Runs in `.mutation/mutants` with the mutated package first on the path. It imports the tests once, then forks a
# child per job, so a mutant costs its tests and not an interpreter start. A job is one JSON line:
# {"mutant": name or "stats", "args": pytest arguments, "select": node ids or null, "timeout": seconds}.
_WORKER = r"""
import json, os, signal, sys, time
import pytest

class Select:
    def __init__(self, wanted):
        self.wanted = wanted
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        if self.wanted is not None:
            by_id = {item.nodeid: item for item in items}
            items[:] = [by_id[nodeid] for nodeid in self.wanted if nodeid in by_id]

class Stats:
    def __init__(self):
        self.reached, self.duration = {}, {}
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        from mutmut.state import state
        state()._stats.clear()
        start = time.monotonic()
        yield
        self.duration[item.nodeid] = time.monotonic() - start
        for function in state()._stats:
            self.reached.setdefault(function, []).append(item.nodeid)

devnull = open(os.devnull, "w")
saved = os.dup(1), os.dup(2)
os.dup2(devnull.fileno(), 1); os.dup2(devnull.fileno(), 2)
pytest.main(["-q", "-p", "no:cacheprovider", "--collect-only", *json.loads(sys.argv[1])])
os.dup2(saved[0], 1); os.dup2(saved[1], 2)
out = os.fdopen(saved[0], "w")
for line in sys.stdin:
    job = json.loads(line)
    report = os.path.join(os.getcwd(), f".stats-{os.getpid()}.json")
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        os.dup2(devnull.fileno(), 1); os.dup2(devnull.fileno(), 2)
        os.environ["MUTANT_UNDER_TEST"] = job["mutant"]
        plugins = [Select(job["select"])]
        if job["mutant"] == "stats":
            plugins.append(Stats())
        options = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
        code = int(pytest.main([*options, *job["args"]], plugins=plugins))
        if job["mutant"] == "stats":
            with open(report, "w") as stats_file:
                json.dump({"reached": plugins[1].reached, "duration": plugins[1].duration}, stats_file)
        os._exit(code)
    deadline = start + job["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            code = "timeout"
            break
        time.sleep(0.02)
    result = {"mutant": job["mutant"], "code": code, "seconds": round(time.monotonic() - start, 2)}
    if job["mutant"] == "stats" and os.path.exists(report):
        with open(report) as stats_file:
            result |= json.load(stats_file)
        os.remove(report)
    print(json.dumps(result), file=out, flush=True)
"""


class Worker:
    def __init__(self, args: list[str]) -> None:
        env = dict(os.environ, PYTHONPATH=str(MUTANTS / "src"), MUTANT_UNDER_TEST="", PY_IGNORE_IMPORTMISMATCH="1")
        self.process = subprocess.Popen(
            ["nice", "-n", "19", str(PYTHON), "-c", _WORKER, json.dumps(args)],
            cwd=MUTANTS,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, mutant: str, args: list[str], select: list[str] | None, timeout: float) -> dict[str, object]:
        assert self.process.stdin is not None and self.process.stdout is not None
        job = {"mutant": mutant, "args": args, "select": select, "timeout": timeout}
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            sys.exit(f"the worker stopped (exit {self.process.wait()})")
        result: dict[str, object] = json.loads(line)
        return result

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


KILLS = {"killed", "timeout"}


def verdict(code: object) -> str:
    """pytest's exit code as a verdict: 1 tests failed, 3 internal error (a mutant breaking a fixture), a signal
    means the run crashed; 0 all passed, 5 nothing ran."""
    if code == "timeout":
        return "timeout"
    if code in (1, 3) or (isinstance(code, int) and code < 0):
        return "killed"
    return "survived" if code == 0 else f"survived (pytest exit {code})"


def wilson(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    if not trials:
        return 0.0, 1.0
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    spread = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - spread), min(1.0, centre + spread)


def sample(package: str, seed: int, size: int, survivors_only: bool) -> None:
    names = all_mutants(package)
    chosen = sorted(random.Random(seed).sample(names, min(size, len(names))))
    results: dict[str, dict[str, object]] = {}
    saved = WORK / f"sample-{package}.json"
    if survivors_only:
        previous = json.loads(saved.read_text())
        if (previous["seed"], previous["size"], sorted(previous["results"])) != (seed, size, chosen):
            sys.exit(f"{saved} holds another sample (sources, seed or size changed): run without --survivors")
        results = {name: result for name, result in previous["results"].items() if result["verdict"] in KILLS}
    args = [*TESTS[package], *LEFT_OUT]
    print(f"{package}: {len(names)} mutants, sampling {len(chosen)} (seed {seed})", flush=True)
    worker = Worker(args)
    try:
        stats = worker.run("stats", args, None, 3600)
        if stats["code"] != 0:
            sys.exit(f"{package}: the tests fail without a mutant (exit {stats['code']}); fix them first")
        reached: dict[str, list[str]] = stats["reached"]  # type: ignore[assignment]
        duration: dict[str, float] = stats["duration"]  # type: ignore[assignment]
        print(f"  coverage pass: {len(duration)} tests in {stats['seconds']} s", flush=True)
        for index, mutant in enumerate(chosen, 1):
            if mutant in results:
                continue
            # The quickest tests first, as mutmut orders them; only their files are collected again.
            tests = sorted(reached.get(function_of(mutant), []), key=duration.__getitem__)
            if not tests:
                results[mutant] = {"verdict": "no test reaches it", "tests": 0}
            else:
                budget = max(30.0, 10 * sum(duration[test] for test in tests))
                files = sorted({test.partition("::")[0] for test in tests})
                outcome = worker.run(mutant, files, tests, budget)
                results[mutant] = {"verdict": verdict(outcome["code"]), "tests": len(tests), **outcome}
            seconds = results[mutant].get("seconds", 0)
            print(f"  [{index}/{len(chosen)}] {mutant}: {results[mutant]['verdict']} ({seconds} s)", flush=True)
    finally:
        worker.close()
    results = dict(sorted(results.items()))
    survivors = [name for name, result in results.items() if result["verdict"] not in KILLS]
    if survivors:
        golden = Worker([GOLDEN])
        try:
            # Only where the golden test reaches the mutated function: elsewhere it cannot kill. The same for every
            # package, so kept until the mutants are generated again.
            cached = MUTANTS / ".golden-reach.json"
            if not cached.is_file():
                cached.write_text(json.dumps(golden.run("stats", [GOLDEN], None, 3600)["reached"]))
            golden_reach: dict[str, list[str]] = json.loads(cached.read_text())
            for mutant in survivors:
                tests = golden_reach.get(function_of(mutant), [])
                killed = bool(tests) and verdict(golden.run(mutant, [GOLDEN], tests, 1200)["code"]) != "survived"
                results[mutant]["golden"] = killed
                print(f"  golden against {mutant}: {'killed' if killed else 'survived'}", flush=True)
        finally:
            golden.close()
    record = {"package": package, "seed": seed, "size": size, "mutants": len(names), "results": results}
    saved.write_text(json.dumps(record, indent=1))
    print_table([record])


def print_table(records: list[dict[str, object]]) -> None:
    print(
        "| package | mutants | sampled | killed by a behavioural test | of them by timeout | killed by golden only "
        "| survived | kill rate (95% interval) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for record in records:
        results: dict[str, dict[str, object]] = record["results"]  # type: ignore[assignment]
        counts = Counter(str(result["verdict"]) for result in results.values())
        golden = sum(1 for result in results.values() if result.get("golden"))
        killed = counts["killed"] + counts["timeout"]
        low, high = wilson(killed, len(results))
        rate = 100 * killed / len(results)
        print(
            f"| {record['package']} | {record['mutants']} | {len(results)} | {killed} | {counts['timeout']} "
            f"| {golden} | {len(results) - killed - golden} | {rate:.1f}% ({100 * low:.1f}-{100 * high:.1f}%) |"
        )
    print()
    for record in records:
        results = record["results"]  # type: ignore[assignment]
        for name, result in results.items():
            if result["verdict"] not in KILLS:
                golden = " (killed by golden)" if result.get("golden") else ""
                print(f"survived: {name} [{result['verdict']}, {result['tests']} tests]{golden}")


def show(mutant: str) -> None:
    ensure_mutmut()
    subprocess.run([REPO / ".venv" / "bin" / "mutmut", "show", mutant], cwd=WORK, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    sample_parser = commands.add_parser("sample")
    sample_parser.add_argument("packages", nargs="*", metavar="PACKAGE", help=f"{', '.join(SCOPES)} (default: all)")
    sample_parser.add_argument("--seed", type=int, default=SEED)
    sample_parser.add_argument("--size", type=int, default=SIZE, help="mutants per package")
    sample_parser.add_argument(
        "--survivors", action="store_true", help="rerun only the last sample's survivors (after adding tests for them)"
    )
    commands.add_parser("table")
    show_parser = commands.add_parser("show")
    show_parser.add_argument("mutant")
    args = parser.parse_args()
    if args.command == "sample":
        unknown = sorted(set(args.packages) - set(SCOPES))
        if unknown:
            parser.error(f"unknown packages {unknown}: use {', '.join(SCOPES)}")
        generate()
        for package in args.packages or list(SCOPES):
            started = time.monotonic()
            sample(package, args.seed, args.size, args.survivors)
            print(f"{package}: {time.monotonic() - started:.0f} s\n", flush=True)
    elif args.command == "table":
        files = [WORK / f"sample-{package}.json" for package in SCOPES]
        print_table([json.loads(path.read_text()) for path in files if path.is_file()])
    else:
        show(args.mutant)


if __name__ == "__main__":
    main()
