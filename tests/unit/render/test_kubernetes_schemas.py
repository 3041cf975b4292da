"""Every rendered object is valid against the Kubernetes 1.37 OpenAPI schemas (strict: unknown fields fail)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.conftest import EXAMPLES
from tests.support.rendering import pod_templates, rendered

K8S_VERSION = "1.37.0"


def _validate(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_core_objects_validate(path: Path) -> None:
    for obj in rendered(path):
        if obj["kind"] == "LeaderWorkerSet":
            continue  # a CRD: its pod templates are checked below, the whole object by the e2e dry run
        _validate(obj)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_leaderworkerset_pod_templates_validate(path: Path) -> None:
    for obj in rendered(path):
        if obj["kind"] != "LeaderWorkerSet":
            continue
        for template in pod_templates(obj):
            _validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template})


def test_the_validator_rejects_a_broken_object() -> None:
    broken = rendered(EXAMPLES[0])[-1]
    broken = {**broken, "spec": {**broken["spec"], "replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(broken)
