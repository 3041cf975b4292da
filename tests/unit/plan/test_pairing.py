"""Pairing revisions (plan/pairing.py): a change both pools must agree on gives both pools a new revision; a change
one pool may make alone keeps it; the generation orders revisions and never moves while the revision stays."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from disagg.api.documents import load_documents
from disagg.api.status import DisaggDeploymentStatus
from disagg.api.validate import validate_deployment
from disagg.plan import build_plan
from disagg.plan.pairing import pairing_generation
from disagg.render import render_plan

BASE = """apiVersion: disagg.dev/v1alpha1
kind: DisaggDeployment
metadata: {name: t, generation: 4}
spec:
  model: {name: m, revision: r1}
  engine: {image: vllm:1, blockSize: 16, kvCacheDtype: auto}
  transfer: {connector: nixl, nixl: {backends: [UCX]}}
  prefill: {replicas: 1, tensorParallel: 2}
  decode: {replicas: 1, tensorParallel: 2}
"""


def base() -> dict[str, Any]:
    content: dict[str, Any] = load_documents(BASE)[0].content
    return content


def plan_of(content: dict[str, Any]) -> Any:
    result = validate_deployment(content)
    assert result.deployment is not None, result.problems
    return build_plan(result.deployment, "ns")


def labels_of(content: dict[str, Any]) -> dict[str, str]:
    """The revision label on each pool's pod template, as rendered."""
    out = {}
    for obj in render_plan(plan_of(content)):
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] in ("t-prefill", "t-decode"):
            out[obj["metadata"]["name"]] = obj["spec"]["template"]["metadata"]["labels"]["disagg.dev/pairing-revision"]
    return out


def set_path(content: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(content)
    node = changed["spec"]
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return changed


BOTH_POOLS = [
    ("engine.image", "vllm:2"),
    ("decode.engine", {"image": "vllm:2"}),
    ("model.revision", "r2"),
    ("model.name", "other"),
    ("transfer.nixl", {"backends": ["LIBFABRIC"]}),
    ("transfer.bufferDevice", "cpu"),
    ("engine.kvCacheDtype", "fp8"),
    ("engine.blockSize", 32),
    ("engine.speculative", {"method": "ngram", "numSpeculativeTokens": 2}),
    ("engine.pythonHashSeed", 7),
]
ONE_POOL = [
    ("decode.replicas", 3),
    ("prefill.resources", {"memory": "64Gi"}),
    ("decode.engine", {"maxNumSeqs": 64}),
    ("engine.env", [{"name": "X", "value": "1"}]),
    ("frontend.router", {"policy": "least_loaded"}),
    ("transfer.network", {"ucxTls": "all"}),
]


def test_both_pools_carry_one_revision() -> None:
    labels = labels_of(base())
    assert len(set(labels.values())) == 1 and len(labels) == 2


@pytest.mark.parametrize(("path", "value"), BOTH_POOLS)
def test_what_both_pools_must_agree_on_makes_a_new_revision_for_both(path: str, value: Any) -> None:
    before, after = labels_of(base()), labels_of(set_path(base(), path, value))
    assert before["t-prefill"] != after["t-prefill"] and after["t-prefill"] == after["t-decode"]


@pytest.mark.parametrize(("path", "value"), ONE_POOL)
def test_what_one_pool_may_change_alone_keeps_the_revision(path: str, value: Any) -> None:
    assert labels_of(base()) == labels_of(set_path(base(), path, value))


def test_asymmetric_speculative_token_counts_keep_the_revision() -> None:
    """The method must match on both pools; the counts may differ (examples/09), so only the method is hashed."""
    two = set_path(base(), "engine.speculative", {"method": "mtp", "numSpeculativeTokens": 1})
    three = set_path(two, "decode.engine", {"speculative": {"method": "mtp", "numSpeculativeTokens": 3}})
    assert labels_of(two) == labels_of(three)


def test_the_generation_is_the_spec_generation_that_introduced_the_revision() -> None:
    first = plan_of(base()).pairing
    assert first.generation == 4
    recorded = DisaggDeploymentStatus(pairing_revision=first.revision, pairing_generation=4)
    # A later edit that keeps the revision keeps the generation, so the pods do not change.
    later = set_path(base(), "decode.replicas", 3)
    later["metadata"]["generation"] = 9
    later["status"] = recorded.model_dump(by_alias=True, exclude_none=True)
    assert plan_of(later).pairing == first
    # A new revision takes the generation of the spec that introduced it: newer revisions sort later.
    newer = set_path(later, "engine.image", "vllm:2")
    assert plan_of(newer).pairing.generation == 9 and plan_of(newer).pairing.revision != first.revision


def test_a_file_never_applied_is_generation_one() -> None:
    assert pairing_generation("abc", None, None) == 1
