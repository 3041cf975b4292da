"""The fuzz tier (D78): generated DisaggDeployments an adversarial user could write, over the whole API.

For every generated document:
- validation returns a model or problems (each with a path, a message and a fix), never an exception;
- the CRD (its structural schema and its CEL rules, evaluated offline) refuses nothing Python accepts: what both
  decide, they decide alike (Python refuses more, D6);
- an accepted spec renders without an exception, twice to the same objects, and every object passes the Kubernetes
  1.37 OpenAPI schemas in strict mode and the API server's rules (tests/support/apiserver_rules.py).

`DISAGG_FUZZ_EXAMPLES` sets the number of examples (default 250, about 25 s on two shared cores; a larger run has no
timeout). No counterexample has been found yet; any found is to be kept here as an `@example`, so each run checks
it first.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, event, given, settings

from disagg.api.validate import validate_deployment
from disagg.render import render_deployment
from tests.support import kube_schemas
from tests.support.apiserver_rules import object_violations
from tests.support.crdschema import CrdVerdicts
from tests.support.rendering import pod_templates
from tests.support.spec_strategies import BASES, OPERATORS_FRONTEND, documents

EXAMPLES = int(os.environ.get("DISAGG_FUZZ_EXAMPLES", "250"))


def _strict_schema(obj: dict[str, Any]) -> None:
    if obj["kind"] != "LeaderWorkerSet":
        kube_schemas.validate(obj)
        return
    for template in pod_templates(obj):  # a CRD: its pod templates are core/v1
        document = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
        kube_schemas.validate(document)


@pytest.fixture(scope="module")
def crd_verdicts(resource_schema: dict[str, Any]) -> CrdVerdicts:
    return CrdVerdicts(resource_schema)


def check(document: dict[str, Any], crd: CrdVerdicts) -> str:
    """Every property for one document; returns what happened to it, for the statistics."""
    result = validate_deployment(copy.deepcopy(document))
    for problem in result.problems:
        assert problem.path and problem.message and problem.fix, problem
    if result.deployment is None:
        return f"refused: {result.problems[0].path.split('[')[0]}"  # the CRD may accept it: Python refuses more (D6)
    refusals = crd.refusals(document)
    assert not refusals, f"the CRD refuses a spec the operator accepts: {refusals}"
    objects = render_deployment(result.deployment, "ns")
    again = validate_deployment(copy.deepcopy(document)).deployment
    assert again is not None
    assert render_deployment(again, "ns") == objects, "rendering is not deterministic"
    violations = [violation for obj in objects for violation in object_violations(obj)]
    assert not violations, f"the API server would refuse: {violations}"
    for obj in objects:
        _strict_schema(obj)
    return "accepted"


@pytest.mark.timeout(0 if EXAMPLES > 250 else 900)  # 250 take ~5 CPU-s; minutes of wall time under others' load
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(document=documents())
def test_generated_specs(document: dict[str, Any], crd_verdicts: CrdVerdicts) -> None:
    event(check(document, crd_verdicts))


def test_the_examples_pass_every_check(crd_verdicts: CrdVerdicts) -> None:
    assert {check(base, crd_verdicts) for base in BASES} == {"accepted"}


def test_a_renderer_producing_a_refused_object_is_caught() -> None:
    """The checks can fail: a Deployment with a port named twice and a request above its limit."""
    broken = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "i",
                            "ports": [{"name": "http", "containerPort": 1}, {"name": "http", "containerPort": 2}],
                            "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}},
                        }
                    ]
                },
            },
        },
    }
    assert len(list(object_violations(broken))) == 2
    containers = broken["spec"]["template"]["spec"]["containers"]
    on_host = {
        **broken,
        "kind": "DaemonSet",
        "spec": {
            "selector": broken["spec"]["selector"],
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0}},
            "template": {
                **broken["spec"]["template"],
                "spec": {
                    "hostNetwork": True,
                    "containers": [
                        {**containers[0], "ports": [{"containerPort": 1, "hostPort": 2}]},
                        {**containers[0], "name": "d", "ports": [{"containerPort": 2}]},
                    ],
                },
            },
        },
    }
    assert sorted(violation.split(": ")[1] for violation in object_violations(on_host)) == [
        "above the limit",
        "above the limit",
        "host port 2/TCP twice in the pod",
        "hostPort 2 is not its containerPort on the host network",
        "maxSurge and maxUnavailable both 0",
    ]
    with pytest.raises(jsonschema.ValidationError):
        _strict_schema({**broken, "spec": {**broken["spec"], "paused": "yes"}})


@pytest.mark.parametrize("pool", [{}, {"engine": {"shutdownTimeoutSeconds": 0}, "terminationGracePeriodSeconds": 0}])
@pytest.mark.parametrize("base", range(len(BASES)))
def test_pools_behind_the_serving_gate_render_what_the_api_server_accepts(
    base: int, pool: dict[str, Any], crd_verdicts: CrdVerdicts
) -> None:
    """Every example behind the operator's frontend: the readiness gate, the pre-stop sleep, the drain timeout,
    the grace period and the gated rollout limits pass the same checks as the generated specs."""
    document = copy.deepcopy(BASES[base])
    document["spec"].setdefault("frontend", {}).setdefault("router", {})["customContainer"] = OPERATORS_FRONTEND
    for role in ("prefill", "decode"):
        document["spec"].setdefault(role, {}).update(copy.deepcopy(pool))
    result = validate_deployment(copy.deepcopy(document))
    assert result.deployment is not None, result.problems
    assert check(document, crd_verdicts) == "accepted"
    gated = [
        obj
        for obj in render_deployment(result.deployment, "ns")
        if obj["kind"] == "Deployment" and obj["metadata"]["name"].endswith(("-prefill", "-decode"))
    ]
    for obj in gated:
        assert obj["spec"]["template"]["spec"]["readinessGates"] == [{"conditionType": "disagg.dev/serving"}]
