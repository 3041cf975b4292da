"""The Helm chart's static files: the CRD copy, versions, values.yaml documentation and values.schema.json."""

from __future__ import annotations

import copy
import json
import re
import tomllib
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import REPO

CHART = REPO / "charts" / "disagg-operator"
GENERATED_CRD = REPO / "crds" / "disagg.dev_disaggdeployments.yaml"


def values() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return data


def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return data


def test_the_chart_crd_is_the_generated_crd() -> None:
    copied = CHART / "crds" / GENERATED_CRD.name
    assert copied.read_bytes() == GENERATED_CRD.read_bytes(), (
        "charts/disagg-operator/crds/ is stale: run `make chart-sync` (after `make crds`)"
    )
    assert sorted(path.name for path in (CHART / "crds").iterdir()) == [GENERATED_CRD.name]


def test_app_version_image_and_package_version_agree() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    package = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert chart["appVersion"] == package == "0.1.0"
    assert values()["image"] == {
        "repository": "ghcr.io/disagg-dev/disagg-operator",
        "tag": "",  # the chart's appVersion
        "digest": "",
        "pullPolicy": "IfNotPresent",
    }
    dockerfile = (REPO / "operator" / "Dockerfile").read_text()
    assert f"ARG VERSION={package}\n" in dockerfile


def _key_lines(text: str) -> list[tuple[int, str]]:
    return [
        (number, line)
        for number, line in enumerate(text.splitlines())
        if re.match(r"^\s*[A-Za-z_][\w.-]*:", line) and not line.lstrip().startswith("#")
    ]


def test_every_value_is_documented_by_the_comment_above_it() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented = []
    for number, line in _key_lines("\n".join(lines)):
        previous = lines[number - 1].strip() if number else ""
        if not previous.startswith("#"):
            undocumented.append(f"values.yaml:{number + 1}: {line.strip()}")
    assert not undocumented, "keys without a comment line above them:\n" + "\n".join(undocumented)


def test_the_schema_is_draft_2020_12_and_accepts_the_defaults() -> None:
    document = schema()
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(document)
    jsonschema.Draft202012Validator(document).validate(values())


def _compare(path: str, value: Any, node: dict[str, Any], problems: list[str]) -> None:
    if not isinstance(value, dict) or "properties" not in node:
        return
    declared = set(node["properties"]) - {"global"}
    if node.get("additionalProperties") is False and set(value) != declared:
        problems.append(f"{path or '<root>'}: values {sorted(set(value))} vs schema {sorted(declared)}")
    for key, child in value.items():
        if key in node["properties"]:
            _compare(f"{path}.{key}".lstrip("."), child, node["properties"][key], problems)


def test_the_schema_and_values_yaml_declare_the_same_keys() -> None:
    problems: list[str] = []
    _compare("", values(), schema(), problems)
    assert not problems, "\n".join(problems)


def test_every_schema_property_has_a_description() -> None:
    missing = []

    def walk(path: str, node: dict[str, Any]) -> None:
        for key, child in node.get("properties", {}).items():
            if "description" not in child:
                missing.append(f"{path}.{key}".lstrip("."))
            walk(f"{path}.{key}", child)

    walk("", schema())
    assert not missing, missing


def _with(path: str, value: Any) -> dict[str, Any]:
    result = copy.deepcopy(values())
    node = result
    *parents, last = path.split(".")
    for key in parents:
        node = node[key]
    node[last] = value
    return result


BAD_VALUES = [
    ("operator.workers", 0, "operator/workers"),
    ("operator.workers", 257, "operator/workers"),
    ("operator.kubeApiQps", 0, "operator/kubeApiQps"),
    ("operator.kubeApiInFlight", 0, "operator/kubeApiInFlight"),
    ("replicaCount", 0, "replicaCount"),
    ("leaderElection.leaseDurationSeconds", 1, "leaderElection/leaseDurationSeconds"),
    ("operator.resyncSeconds", 1, "operator/resyncSeconds"),
    ("operator.logLevel", "trace", "operator/logLevel"),
    ("watchNamespaces", ["Team_A"], "watchNamespaces/0"),
    ("watchNamespaces", ["a", "a"], "watchNamespaces"),
    ("image.pullPolicy", "Sometimes", "image/pullPolicy"),
    ("image.digest", "sha256:abc", "image/digest"),
    ("image.repository", "", "image/repository"),
    ("terminationGracePeriodSeconds", 5, "terminationGracePeriodSeconds"),
    ("metrics.serviceMonitor.interval", 30, "metrics/serviceMonitor/interval"),
    ("metrics.service.port", 70000, "metrics/service/port"),
    ("replicas", 2, ""),  # unknown keys are refused, not ignored
    ("operator.threads", 2, "operator"),
]


@pytest.mark.parametrize(("path", "value", "where"), BAD_VALUES, ids=[f"{p}={v!r}" for p, v, _ in BAD_VALUES])
def test_the_schema_rejects_wrong_values(path: str, value: Any, where: str) -> None:
    errors = list(jsonschema.Draft202012Validator(schema()).iter_errors(_with(path, value)))
    assert errors, f"{path}={value!r} was accepted"
    assert {"/".join(str(part) for part in error.absolute_path) for error in errors} == {where}
