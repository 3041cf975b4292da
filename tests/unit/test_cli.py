"""The `disagg` command line as users run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from disagg.cli import cli
from tests.conftest import EXAMPLES, INVALID, REPO


def test_validate_accepts_every_example_in_one_call() -> None:
    args = ["validate"] + [arg for path in EXAMPLES for arg in ("-f", str(path))]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.output.count("is valid") == len(EXAMPLES)


def test_one_bad_file_fails_the_whole_run_but_every_file_is_reported() -> None:
    bad = next(path for path in INVALID if path.stem == "hetero-tp-indivisible")
    result = CliRunner().invoke(cli, ["validate", "-f", str(EXAMPLES[0]), "-f", str(bad)])
    assert result.exit_code == 1
    assert "is valid" in result.output and "is invalid" in result.output


def test_quiet_prints_only_problems() -> None:
    result = CliRunner().invoke(cli, ["validate", "-q", "-f", str(EXAMPLES[0])])
    assert result.exit_code == 0 and result.output == ""


def test_other_kinds_in_a_stream_are_skipped(tmp_path: Path) -> None:
    stream = tmp_path / "stream.yaml"
    stream.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: llm}\n---\n" + EXAMPLES[0].read_text())
    result = CliRunner().invoke(cli, ["validate", "-f", str(stream)])
    assert result.exit_code == 0, result.output
    assert "skipped" in result.output and "Namespace is not a DisaggDeployment" in result.output


def test_a_file_without_any_disaggdeployment_is_an_error(tmp_path: Path) -> None:
    only_namespace = tmp_path / "ns.yaml"
    only_namespace.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: llm}\n")
    result = CliRunner().invoke(cli, ["validate", "-f", str(only_namespace)])
    assert result.exit_code == 1
    assert "no DisaggDeployment found" in result.output


def test_every_document_of_a_stream_is_checked(tmp_path: Path) -> None:
    bad = next(path for path in INVALID if path.stem == "kv-dtype-mismatch")
    stream = tmp_path / "two.yaml"
    stream.write_text(EXAMPLES[0].read_text() + "---\n" + bad.read_text())
    result = CliRunner().invoke(cli, ["validate", "-f", str(stream)])
    assert result.exit_code == 1
    assert "document 1" in result.output and "document 2" in result.output


def test_stdin_is_read_with_dash() -> None:
    result = CliRunner().invoke(cli, ["validate", "-f", "-"], input=EXAMPLES[0].read_text())
    assert result.exit_code == 0, result.output


def test_missing_file_is_a_readable_error() -> None:
    result = CliRunner().invoke(cli, ["validate", "-f", "/nonexistent/dd.yaml"])
    assert result.exit_code == 1
    assert "cannot read" in result.output and "Traceback" not in result.output


def test_crd_command_prints_the_checked_in_crd() -> None:
    result = CliRunner().invoke(cli, ["crd"])
    assert result.exit_code == 0
    assert result.output == (REPO / "crds" / "disagg.dev_disaggdeployments.yaml").read_text()


def test_installed_entry_point_reports_errors_without_a_traceback() -> None:
    bad = next(path for path in INVALID if path.stem == "unknown-field-typo")
    completed = subprocess.run(
        [sys.executable, "-c", "from disagg.cli import main; main()", "validate", "-f", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 1
    assert 'did you mean "tensorParallel"' in completed.stderr
    assert "Traceback" not in completed.stderr + completed.stdout


def test_render_prints_the_objects_and_is_byte_identical() -> None:
    first = CliRunner().invoke(cli, ["render", "-f", str(EXAMPLES[0])])
    second = CliRunner().invoke(cli, ["render", "-f", str(EXAMPLES[0])])
    assert first.exit_code == 0 and first.output == second.output
    assert "kind: Deployment" in first.output and "namespace: default" in first.output


def test_render_json_is_a_list_in_the_asked_namespace() -> None:
    import json

    result = CliRunner().invoke(cli, ["render", "-o", "json", "-n", "llm", "-f", str(EXAMPLES[0])])
    listing = json.loads(result.output)
    assert listing["kind"] == "List" and {item["metadata"]["namespace"] for item in listing["items"]} == {"llm"}


def test_render_refuses_an_invalid_spec_with_its_problems() -> None:
    bad = next(path for path in INVALID if path.stem == "kv-dtype-mismatch")
    result = CliRunner().invoke(cli, ["render", "-f", str(bad)])
    assert result.exit_code == 1
    assert "spec.decode.engine.kvCacheDtype" in result.output and "kind: Deployment" not in result.output


def test_plan_explains_the_commands() -> None:
    result = CliRunner().invoke(cli, ["plan", "-f", str(EXAMPLES[0])])
    assert result.exit_code == 0
    assert (
        "prefill: vllm serve Qwen/Qwen3-32B" in result.output and "router: disagg frontend --flow pull" in result.output
    )
    assert "pairing revision: " in result.output
    # examples/01-minimal.yaml: prefill 2, decode 1
    assert "Deployment qwen3-32b-prefill: 2 replicas\n" in result.output
    assert "Deployment qwen3-32b-decode: 1 replica\n" in result.output


PINNED_PER_RANK = """
apiVersion: disagg.dev/v1alpha1
kind: DisaggDeployment
metadata: {name: m}
spec:
  model: {name: org/model}
  kvCache: {cpu: {size: 8Gi}}
  prefill: {replicas: 1}
  decode: {replicas: 1, dataParallel: 2, resources: {memory: 16Gi, shmSize: 4Gi}}
"""


def test_plan_states_the_memory_of_each_pod(tmp_path: Path) -> None:
    """D75: the CPU tier is pinned per data-parallel rank, on top of the user's memory, and /dev/shm counts
    against the pod's memory; `disagg plan` says so in the figures the pods are rendered with."""
    spec = tmp_path / "dd.yaml"
    spec.write_text(PINNED_PER_RANK)
    result = CliRunner().invoke(cli, ["plan", "-f", str(spec)])
    assert result.exit_code == 0, result.output
    assert (
        "decode pod memory: request 32Gi, limit 32Gi = 16Gi spec.decode.resources.memory + 16Gi pinned for KV tiers "
        "(2 engines x 8Gi); /dev/shm up to 4Gi (memory-backed: it counts against the pod's memory)"
    ) in result.output
    assert "prefill pod memory: request 8Gi, no limit = 8Gi pinned for KV tiers (1 engine x 8Gi)" in result.output
    rendered = CliRunner().invoke(cli, ["render", "-n", "ns", "-f", str(spec)])
    assert "memory: 32Gi" in rendered.output
