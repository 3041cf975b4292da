"""Specs whose objects the API server would refuse are refused first, naming the field (D72), and settings that
would be silently replaced or escape a rule are refused too. Regression tests: on the commit before these rules,
every spec below was accepted and rendered objects that kube-apiserver refuses (or that quietly did something
else than written); e2e/test_apiserver_rules.py shows the real API server's verdict on each kind of object."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from disagg.api.validate import validate_deployment
from disagg.render import render_deployment
from tests.support.crdschema import apply_defaults, cel_violations
from tests.support.object_rule_cases import BASE, CASES, CEL_BACKED, CUSTOM, Change, case_document, set_at
from tests.support.rendering import find


@pytest.mark.parametrize(("change", "path", "base"), CASES.values(), ids=CASES.keys())
def test_refused_with_the_field_and_a_fix(change: Change, path: str, base: dict[str, Any] | None) -> None:
    result = validate_deployment(case_document(change, base))
    assert not result.ok
    assert path in [problem.path for problem in result.problems], result.problems
    assert all(problem.fix for problem in result.problems)


@pytest.mark.parametrize("name", sorted(CEL_BACKED))
def test_the_crd_refuses_it_too(name: str, resource_schema: dict[str, Any]) -> None:
    change, _, base = CASES[name]
    document = apply_defaults(resource_schema, case_document(change, base))
    assert list(cel_violations(resource_schema, document))


def test_the_bases_are_valid() -> None:
    assert validate_deployment(copy.deepcopy(BASE)).ok and validate_deployment(copy.deepcopy(CUSTOM)).ok


def test_a_large_annotation_value_is_fine() -> None:
    """D74: kubectl's last-applied annotation holds the whole object; a 4096-character cap made that Invalid."""
    document = copy.deepcopy(BASE)
    document["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "x" * 20_000}
    document["spec"]["decode"]["podAnnotations"] = {"note": "y" * 10_000}
    assert validate_deployment(document).ok


def test_router_resources_are_exactly_what_is_written_or_the_defaults() -> None:
    """Regression: a request above the default 1Gi limit rendered a router the API server refused."""
    document = case_document(set_at("spec.frontend.router.resources", {"requests": {"memory": "2Gi"}}), None)
    result = validate_deployment(document)
    assert result.deployment is not None
    router = find(render_deployment(result.deployment, "ns"), "Deployment", "m-router")
    resources = router["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"memory": "2Gi"}, "limits": {}}
    default = find(
        render_deployment(validate_deployment(copy.deepcopy(BASE)).deployment, "ns"), "Deployment", "m-router"
    )  # type: ignore[arg-type]
    assert default["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"memory": "1Gi"}


@pytest.mark.parametrize(
    ("rollout", "serving"),
    [({"maxSurge": 0, "maxUnavailable": 1}, {}), ({"maxSurge": 0}, {"check": {"mode": "Report"}})],
    ids=["with maxUnavailable", "check reporting"],
)
def test_maxsurge_0_behind_the_serving_gate_is_fine_with_room_or_without_the_gate(
    rollout: dict[str, Any], serving: dict[str, Any]
) -> None:
    """The neighbours of the gated-rollout case: a pool that may lose a pod, or one the check does not gate."""
    change, _, _ = CASES["maxSurge 0 on a pool behind the serving gate"]
    document = case_document(change, None)
    document["spec"]["prefill"]["rollout"] = rollout
    document["spec"]["serving"] = serving
    result = validate_deployment(document)
    assert result.deployment is not None, result.problems
    prefill = find(render_deployment(result.deployment, "ns"), "Deployment", "m-prefill")
    assert prefill["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert bool(prefill["spec"]["template"]["spec"].get("readinessGates")) == (not serving)


EQUAL = "make request and limit equal"


@pytest.mark.parametrize(
    ("resource", "requests", "limits", "path", "message", "fix"),
    [
        ("example.com/nic", 1, None, "limits", "example.com/nic cannot be overcommitted, so a request needs a limit",
         "set limits.example.com/nic equal to the request"),
        ("example.com/nic", 1, 2, "requests", "example.com/nic cannot be overcommitted", EQUAL),
        ("example.com/nic", 2, 1, "requests", "example.com/nic cannot be overcommitted", EQUAL),
        ("hugepages-2Mi", "2Mi", "4Mi", "requests", "hugepages-2Mi cannot be overcommitted", EQUAL),
        ("memory", "2Gi", "1Gi", "requests", "the request 2Gi is above the limit 1Gi", "lower it or raise the limit"),
    ],
)  # fmt: skip
def test_a_resource_that_cannot_be_overcommitted_needs_its_request_equal_to_its_limit(
    resource: str, requests: Any, limits: Any, path: str, message: str, fix: str
) -> None:
    """Devices and huge pages are never overcommitted: the API server refuses a request without a limit or
    different from it (above or below); other resources may request less than their limit, never more."""
    resources: dict[str, Any] = {"requests": {resource: requests, "memory": "1Gi"}, "limits": {"memory": "1Gi"}}
    if resource == "memory":
        resources = {"requests": {"memory": requests}, "limits": {"memory": limits}}
    elif limits is not None:
        resources["limits"][resource] = limits
    document = case_document(set_at("spec.frontend.router.resources", resources), None)
    problems = validate_deployment(document).problems
    assert [(p.path, p.message, p.fix) for p in problems] == [
        (f"spec.frontend.router.resources.{path}.{resource}", message, fix)
    ]
    resources["limits"][resource] = resources["requests"][resource]  # the neighbour: request and limit equal
    assert validate_deployment(case_document(set_at("spec.frontend.router.resources", resources), None)).ok


@pytest.mark.parametrize(
    ("name", "message", "fix"),
    [
        (
            "custom engine extra port on its main port",
            "port 5557 is also spec.decode.customContainer.port of the container",
            "choose a port of its own",
        ),
        (
            "hugepages not a multiple of the page size",
            "3Mi is not a positive whole number of 2Mi pages",
            "use a multiple of 2Mi",
        ),
        (
            "PegaFlow huge-page pool not a multiple of the page size",
            "3Mi is not a positive whole number of 2Mi pages",
            "use a multiple of 2Mi",
        ),
    ],
)
def test_the_message_names_what_collides_or_the_page_size(name: str, message: str, fix: str) -> None:
    """A port that is already taken says by which field and of what (the same container, another pod's, a node's); a
    huge-page amount says the page size it must be a multiple of, as the user writes sizes (2Mi, not hugepages-2Mi)."""
    change, path, base = CASES[name]
    [problem] = [p for p in validate_deployment(case_document(change, base)).problems if p.path == path]
    assert (problem.message, problem.fix) == (message, fix)


@pytest.mark.parametrize(
    ("name", "detail", "own_field"),
    [
        ("memory", "'memory' is a standard resource, not an extended one", "spec.prefill.resources.memory"),
        ("cpu", "'cpu' is a standard resource, not an extended one", "spec.prefill.resources.cpu"),
        ("ephemeral-storage", "'ephemeral-storage' is a standard resource, not an extended one", None),
        ("gpu", "'gpu' is not a standard container resource", None),
    ],
)
def test_a_gpu_resource_name_must_be_an_extended_resource(name: str, detail: str, own_field: str | None) -> None:
    """The fix is the device plugin's resource name, not the list of standard resources (whose advice was "use cpu,
    memory, ..." for gpuResourceName: memory); a standard resource the user meant to set has its own field."""
    document = case_document(set_at("spec.prefill.resources.gpuResourceName", name), None)
    [problem] = validate_deployment(document).problems
    assert problem.path == "spec.prefill.resources.gpuResourceName"
    assert problem.message.startswith("gpuResourceName must name the extended resource that grants GPUs to a pod; ")
    assert detail in problem.message
    assert problem.fix.startswith("set gpuResourceName to the extended resource your device plugin advertises for GPUs")
    assert "nvidia.com/gpu" in problem.fix and "amd.com/gpu" in problem.fix
    assert not any(standard in problem.fix for standard in ("use cpu", "ephemeral-storage", "hugepages"))
    if own_field is None:
        assert "is set by" not in problem.fix
    else:
        assert problem.fix.endswith(f"; the pod's {name} is set by {own_field}")


def test_an_rdma_resource_name_must_be_an_extended_resource() -> None:
    document = case_document(set_at("spec.transfer.network.rdma", {"resourceName": "memory"}), None)
    [problem] = validate_deployment(document).problems
    assert (problem.path, problem.message, problem.fix) == (
        "spec.transfer.network.rdma.resourceName",
        "resourceName must name the extended resource that grants RDMA devices to a pod; "
        "'memory' is a standard resource, not an extended one",
        "set resourceName to the extended resource your device plugin advertises for RDMA devices, such as rdma/ib "
        "or vpc.amazonaws.com/efa",
    )
