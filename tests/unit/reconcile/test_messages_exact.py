"""Messages and reasons the reconcile shell gives users, asserted word for word: what a pod's waiting reason, a
stuck rollout, an external autoscaler, a refused informer, an unreachable Prometheus, a bug in rendering or a bad
client limit say. Each is the text a user acts on, so a change of wording is a change of behaviour."""

from __future__ import annotations

from typing import Any

import pytest

from disagg.names import DEPLOYMENT
from disagg.reconcile.autoscale import Autoscaler
from disagg.reconcile.children import pod_problems, workload_progress
from disagg.reconcile.kube import Kube
from disagg.reconcile.metrics_access import not_allowed_message
from disagg.reconcile.ratelimit import Slots, TokenBucket
from disagg.reconcile.refusals import Refusal
from tests.support.fake_kube import FakeApiServer
from tests.unit.reconcile.test_metrics_access import _spec_and_plan


def waiting_pod(reason: str, message: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": "m-decode-0", "labels": {"disagg.dev/role": "decode"}},
        "status": {"containerStatuses": [{"state": {"waiting": {"reason": reason, "message": message}}}]},
    }


@pytest.mark.parametrize(
    "reason",
    [
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "CreateContainerConfigError",
        "InvalidImageName",
        "CreateContainerError",
    ],
)
def test_a_container_stuck_waiting_is_named_with_its_reason_and_message(reason: str) -> None:
    assert pod_problems([waiting_pod(reason, "back-off 5m0s")]) == {
        "decode": [f"pod m-decode-0 {reason}: back-off 5m0s"]
    }
    assert pod_problems([waiting_pod(reason)]) == {"decode": [f"pod m-decode-0 {reason}"]}


@pytest.mark.parametrize("reason", ["ContainerCreating", "PodInitializing", ""])
def test_a_container_that_is_only_starting_is_no_problem(reason: str) -> None:
    assert pod_problems([waiting_pod(reason)]) == {}


def test_a_rollout_past_its_deadline_without_a_message_gets_one() -> None:
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "m-decode", "generation": 2},
        "spec": {"replicas": 1},
        "status": {
            "observedGeneration": 2,
            "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}],
        },
    }
    assert workload_progress(deployment).stuck_reason == "rollout exceeded its progress deadline"
    deployment["status"]["conditions"][0]["message"] = 'ReplicaSet "m-decode-abc" has timed out progressing.'
    assert workload_progress(deployment).stuck_reason == 'ReplicaSet "m-decode-abc" has timed out progressing.'


async def test_a_pool_an_external_autoscaler_owns_is_named_in_scaling_active() -> None:
    spec, plan = _spec_and_plan("http://prometheus.monitoring:9090")
    spec = spec.model_copy(
        update={
            "decode": spec.decode.model_copy(
                update={"autoscaling": spec.decode.autoscaling.model_copy(update={"controller": "external"})}
            )
        }
    )
    autoscaler = Autoscaler(Kube(FakeApiServer(namespaces=("ns",))), wall_clock=lambda: 1000.0)
    try:
        report = await autoscaler.step(("ns", "m"), spec, plan, {}, [], "2026-01-01T00:00:00Z")
    finally:
        await autoscaler.close()
    assert report.condition is not None
    assert (report.condition.type, report.condition.status, report.condition.reason, report.condition.message) == (
        "ScalingActive",
        "True",
        "ExternalController",
        "an external autoscaler (HPA/KEDA) owns the replicas of: decode",
    )


def test_a_prometheus_the_install_does_not_allow_is_explained_with_the_fixes() -> None:
    message = not_allowed_message("http://evil:80", ("http://Prometheus.monitoring:9090/", "http://b:9090"))
    assert message == (
        "spec.scaling.metrics.prometheus.url http://evil:80 is not a Prometheus this operator was installed to "
        "query (allowed: http://b:9090, http://prometheus.monitoring:9090), so it is not contacted: use one of "
        "those, use source direct, or ask the cluster admin to add it (disagg run --prometheus-url; Helm value "
        "operator.prometheusUrls)"
    )


def test_a_refused_watch_says_what_it_costs_and_which_rule_to_grant() -> None:
    refusal = Refusal(DEPLOYMENT, "ns", "watch", "deployments.apps is forbidden")
    assert refusal.explain() == (
        "the operator may not watch deployments.apps in namespace ns (the API server answered: deployments.apps is "
        "forbidden), so it lists them again at every retry instead and notices their changes late; grant its "
        "ServiceAccount the rule {apiGroups: [apps], resources: [deployments], verbs: [list, watch]} in its "
        "ClusterRole or the Role in ns (the chart and manifests/ include it) and it resumes on its own"
    )


def test_a_refused_list_says_which_deployments_it_stops_reconciling() -> None:
    refusal = Refusal(DEPLOYMENT, None, "list", "deployments.apps is forbidden")
    assert refusal.explain() == (
        "the operator may not list deployments.apps in all namespaces (the API server answered: deployments.apps "
        "is forbidden), so it cannot tell which Deployment children exist and does not reconcile DisaggDeployments "
        "that have them; grant its ServiceAccount the rule {apiGroups: [apps], resources: [deployments], verbs: "
        "[list, watch]} in its ClusterRole (the chart and manifests/ include it) and it resumes on its own"
    )


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 5), (10, 0)])
def test_a_client_limit_that_cannot_work_is_refused_with_what_it_needs(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match=r"^qps must be positive and burst at least 1$"):
        TokenBucket(qps, burst)


def test_an_in_flight_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^size must be at least 1$"):
        Slots(0)
    assert Slots(1) is not None
