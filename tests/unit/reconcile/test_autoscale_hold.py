"""While a rollout of the pairing revision runs, scale-downs wait; scale-ups do not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from disagg.plan import build_plan
from disagg.reconcile.autoscale import Autoscaler, ScaleReport
from disagg.reconcile.conditions import ConditionUpdate
from disagg.reconcile.kube import Kube
from tests.support.fake_kube import FakeApiServer
from tests.support.reconciling import MINIMAL, NAMESPACE, NOW
from tests.support.rendering import deployment_from_yaml


@dataclass
class Choice:
    replicas: int
    reason: str = "the policy says so"


@dataclass
class Decided:
    prefill: Choice
    decode: Choice

    def pool(self, name: str) -> Choice:
        return self.prefill if name == "prefill" else self.decode


def live_workloads(server: FakeApiServer, plan: Any) -> dict[tuple[str, str], dict[str, Any]]:
    live = {}
    for workload in plan.workloads:
        obj = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": workload.name, "namespace": NAMESPACE, "labels": workload.labels},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": workload.selector},
                "template": {"metadata": {"labels": workload.selector}, "spec": {"containers": [{"name": "c"}]}},
            },
        }
        live[("Deployment", workload.name)] = server.create(obj)
    return live


async def test_scale_downs_wait_for_the_rollout_and_scale_ups_go_ahead() -> None:
    server = FakeApiServer(namespaces=(NAMESPACE,))
    plan = build_plan(deployment_from_yaml(MINIMAL), NAMESPACE)
    live = live_workloads(server, plan)
    autoscaler = Autoscaler(Kube(server))
    report = ScaleReport(condition=ConditionUpdate("ScalingActive", "True", "Scaled", "fresh metrics"))
    decision = Decided(prefill=Choice(1), decode=Choice(3))
    await autoscaler._actuate(
        ("ns", "m"),
        plan,
        live,
        decision,
        NOW,
        report,
        "a rollout of the pairing revision is RollingOut",  # type: ignore[arg-type]
    )
    assert server.get("Deployment", NAMESPACE, "m-prefill")["spec"]["replicas"] == 2
    assert server.get("Deployment", NAMESPACE, "m-decode")["spec"]["replicas"] == 3
    assert report.condition is not None
    assert "prefill 2 -> 1 waits: a rollout of the pairing revision is RollingOut" in report.condition.message
    await autoscaler._actuate(("ns", "m"), plan, live, decision, NOW, report, None)  # type: ignore[arg-type]
    assert server.get("Deployment", NAMESPACE, "m-prefill")["spec"]["replicas"] == 1
    await autoscaler.close()
