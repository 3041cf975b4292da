"""A pass whose inputs changed only in status runs the observe and status steps, not the claim, apply and prune
steps (D249): in a burst's aftermath the workload controllers report on every new Deployment and ReplicaSet, and
each report asks for a pass. Whatever else changed in a child (its spec, its labels) still gets the full pass."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from disagg.names import LABEL_DEPLOYMENT
from disagg.reconcile import metrics
from disagg.reconcile.cache import Cache
from disagg.reconcile.rendered import Core
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import MINIMAL, NAMESPACE, Harness, deployment_document, harness
from tests.unit.reconcile.test_pass_settled import settled


def applies(server: FakeApiServer) -> list[Any]:
    return [r for r in server.requests if r.method == "PATCH" and r.query.get("fieldManager") == "disagg-operator"]


def apply_skipped() -> float:
    return metrics.REGISTRY.get_sample_value("disagg_reconcile_apply_skipped_total") or 0.0


async def ready(h: Harness) -> None:
    await h.reconcile()
    h.settle()
    await settled(h)


async def test_a_child_s_status_report_updates_status_without_decoding_or_applying_the_children(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = harness(deployment_document(MINIMAL))
    await ready(h)
    assert h.status["phase"] == "Ready"
    sent, skipped = len(applies(h.server)), apply_skipped()
    decoded: list[Core] = []
    desired = Core.desired
    monkeypatch.setattr(Core, "desired", lambda core: decoded.append(core) or desired(core))
    h.settle(**{"m-decode": 0})  # the Deployment controller reports the decode pods gone
    assert await h.reconcile() == "ok"
    assert decoded == []
    assert apply_skipped() == skipped + 1
    assert len(applies(h.server)) == sent
    assert h.status["phase"] != "Ready"
    assert h.condition("Ready")["status"] == "False"


async def test_a_status_only_pass_leaves_the_next_identical_pass_unchanged() -> None:
    h = harness(deployment_document(MINIMAL))
    await ready(h)
    h.settle(**{"m-prefill": 1})
    skipped = apply_skipped()
    await settled(h)  # the status-only pass wrote the DisaggDeployment's status: one more pass reads it
    assert apply_skipped() >= skipped + 1
    assert await h.reconcile() == "unchanged"


async def test_a_spec_edit_after_status_only_passes_is_repaired() -> None:
    h = harness(deployment_document(MINIMAL))
    await ready(h)
    h.settle(**{"m-prefill": 1})
    assert await h.reconcile() == "ok"
    h.server.update("Deployment", NAMESPACE, "m-prefill", lambda d: d["spec"].update(replicas=7), manager="kubectl")
    skipped = apply_skipped()
    assert await h.reconcile() == "ok"
    assert apply_skipped() == skipped
    assert h.server.get("Deployment", NAMESPACE, "m-prefill")["spec"]["replicas"] == 2  # type: ignore[index]


async def test_a_label_removed_from_a_child_is_put_back() -> None:
    h = harness(deployment_document(MINIMAL))
    await ready(h)
    h.settle(**{"m-prefill": 1})
    assert await h.reconcile() == "ok"

    def unlabel(service: dict[str, Any]) -> None:
        del service["metadata"]["labels"]["app.kubernetes.io/component"]

    h.server.update("Service", NAMESPACE, "m-router", unlabel, manager="kubectl")
    assert await h.reconcile() == "ok"
    service = h.server.get("Service", NAMESPACE, "m-router")
    assert service is not None and "app.kubernetes.io/component" in service["metadata"]["labels"]


async def test_a_due_re_apply_is_not_skipped_by_a_status_only_change() -> None:
    h = harness(deployment_document(MINIMAL))
    await ready(h)
    h.reconciler.applied.reapply_seconds = 0.0
    for records in h.reconciler.applied._records.values():
        for child, record in list(records.items()):
            records[child] = dataclasses.replace(record, until=0.0)
    h.settle(**{"m-prefill": 1})
    sent = len(applies(h.server))
    assert await h.reconcile() == "ok"
    assert len(applies(h.server)) > sent


def deployment(version: str, replicas: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns", "resourceVersion": version, "labels": {LABEL_DEPLOYMENT: "m"}},
        "spec": {"replicas": replicas},
    }
    if status is not None:
        obj["status"] = status
    return obj


def test_an_object_s_shape_ignores_its_status_and_version_and_nothing_else() -> None:
    cache = Cache()
    cache.put("Deployment", deployment("1", 2))
    shape = cache.shape("Deployment", "ns", "d")
    assert shape is not None
    assert cache.put("Deployment", deployment("2", 2, {"readyReplicas": 1}))
    assert cache.shape("Deployment", "ns", "d") == shape
    assert cache.shapes("Deployment", "ns", "m") == (("d", shape),)
    assert cache.put("Deployment", deployment("3", 3, {"readyReplicas": 1}))
    assert cache.shape("Deployment", "ns", "d") != shape
    relabelled = deployment("4", 3, {"readyReplicas": 1})
    relabelled["metadata"]["labels"]["extra"] = "x"
    before = cache.shape("Deployment", "ns", "d")
    assert cache.put("Deployment", relabelled)
    assert cache.shape("Deployment", "ns", "d") != before
    before_reorder = cache.shape("Deployment", "ns", "d")
    reordered = {key: relabelled[key] for key in reversed(list(relabelled))}
    reordered["metadata"] = {key: relabelled["metadata"][key] for key in reversed(list(relabelled["metadata"]))}
    reordered["metadata"]["resourceVersion"] = "5"
    assert cache.put("Deployment", reordered)
    assert cache.shape("Deployment", "ns", "d") == before_reorder
    assert cache.shape("Deployment", "ns", "missing") is None
    assert cache.shapes("Deployment", "ns", "other") == ()


def test_an_object_comes_back_whole_with_its_status_and_version() -> None:
    cache = Cache()
    stored = deployment("7", 2, {"readyReplicas": 1, "conditions": [{"type": "Available"}]})
    cache.put("Deployment", stored)
    assert cache.get("Deployment", "ns", "d") == stored
    assert cache.owned("Deployment", "ns", "m") == [stored]
    bare = deployment("8", 2)
    cache.put("Deployment", bare)
    assert cache.get("Deployment", "ns", "d") == bare
    assert cache.size_bytes() > 0
