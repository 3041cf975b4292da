"""RBAC that lacks a child kind's list and watch, on the real API server (D151): the operator, as its own
ServiceAccount, reports the refusal on the DisaggDeployment that needs the kind (Degraded/AccessDenied with the
API server's answer and the rule to grant, a Warning event, the log at error level, `disagg_informer_refused`),
reconciles the one that does not, and recovers on its own once the rule is granted."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from disagg.reconcile.access import CLUSTER, NAMESPACE_MODE, NAMESPACED, rules
from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.operator_support import (
    OperatorProcess,
    children,
    condition,
    install_crd,
    metric_value,
    status_of,
    token_kubeconfig,
)

pytestmark = pytest.mark.e2e
HOME = "disagg-e2e-refused"
ROLE = "disagg-e2e-refused"
RULE = "{apiGroups: [apps], resources: [daemonsets], verbs: [list, watch]}"
PEGAFLOW = {
    "apiVersion": "disagg.dev/v1alpha1",
    "kind": "DisaggDeployment",
    "metadata": {"name": "pega"},
    "spec": {
        "model": {"name": "Qwen/Qwen3-8B"},
        "engine": {"pythonHashSeed": 42},
        "kvCache": {
            "store": {
                "type": "pegaflow",
                "pegaflow": {"server": {"image": "registry.example.com/pegaflow:0.25.1", "poolSize": "1Gi"}},
            }
        },
        "prefill": {"replicas": 0},
        "decode": {"replicas": 0},
        "frontend": {"router": {"replicas": 0}},
    },
}
MINIMAL = {
    "apiVersion": "disagg.dev/v1alpha1",
    "kind": "DisaggDeployment",
    "metadata": {"name": "plain"},
    "spec": {
        "model": {"name": "org/model"},
        "prefill": {"replicas": 0},
        "decode": {"replicas": 0},
        "frontend": {"router": {"replicas": 0}},
    },
}


def cluster_role(with_daemonsets: bool) -> dict[str, Any]:
    """The documented rules of a namespace-mode operator, without list and watch on DaemonSets unless asked."""
    grants = (*CLUSTER, *NAMESPACE_MODE, *NAMESPACED)
    if not with_daemonsets:
        trimmed = (
            replace(grant, verbs=tuple(v for v in grant.verbs if v not in ("list", "watch")))
            if grant.resource == "daemonsets"
            else grant
            for grant in grants
        )
        grants = tuple(grant for grant in trimmed if grant.verbs)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": ROLE},
        "rules": rules(grants),
    }


@pytest.fixture
def refused_operator(kube_cluster: KubeCluster, tmp_path: Path) -> Iterator[tuple[OperatorProcess, str]]:
    install_crd(kube_cluster)
    watched = f"dd-{uuid.uuid4().hex[:8]}"
    kube_cluster.run("wait", "--for=delete", f"namespace/{HOME}", "--timeout=300s")
    for namespace in (HOME, watched):
        kube_cluster.kubectl("create", "namespace", namespace)
    kube_cluster.kubectl("create", "serviceaccount", "disagg-operator", "-n", HOME)
    kube_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(cluster_role(with_daemonsets=False)))
    kube_cluster.kubectl(
        "create", "clusterrolebinding", ROLE, f"--clusterrole={ROLE}", f"--serviceaccount={HOME}:disagg-operator"
    )
    token = kube_cluster.kubectl("create", "token", "disagg-operator", "-n", HOME, "--duration=1h").strip()
    process = OperatorProcess(
        token_kubeconfig(kube_cluster, token, tmp_path / "kubeconfig"),
        tmp_path / "operator.log",
        "--namespace",
        watched,
    )
    try:
        process.start()
        yield process, watched
    finally:
        process.stop()
        print(f"operator log tail:\n{process.log_tail()}")
        kube_cluster.run("delete", "clusterrolebinding,clusterrole", ROLE, "--ignore-not-found")
        kube_cluster.run("delete", "namespace", watched, HOME, "--wait=true", "--timeout=300s")


def test_a_refused_kind_is_reported_where_it_is_needed_and_granting_it_recovers(
    kube_cluster: KubeCluster, refused_operator: tuple[OperatorProcess, str]
) -> None:
    operator, watched = refused_operator
    for document in (PEGAFLOW, MINIMAL):
        kube_cluster.kubectl("apply", "-n", watched, "-f", "-", stdin=json.dumps(document))

    def refused() -> dict[str, Any] | None:
        degraded = condition(status_of(kube_cluster, watched, "pega"), "Degraded")
        return degraded if degraded.get("reason") == "AccessDenied" else None

    degraded = wait_for("pega to report AccessDenied", refused, timeout=90)
    message = degraded["message"]
    assert f"may not list daemonsets.apps in namespace {watched}" in message
    assert 'cannot list resource "daemonsets" in API group "apps"' in message  # the real API server's answer
    assert RULE in message
    wait_for(
        "plain to be reconciled",
        lambda: status_of(kube_cluster, watched, "plain").get("observedGeneration") == 1,
        timeout=90,
    )
    assert children(kube_cluster, watched, "pega") == {}  # nothing of pega was written
    events = json.loads(
        kube_cluster.kubectl(
            "get",
            "events",
            "-n",
            watched,
            "--field-selector",
            "involvedObject.name=pega,reason=AccessDenied",
            "-o",
            "json",
        )
    )["items"]
    assert [event["type"] for event in events] == ["Warning"]
    assert metric_value(operator.metrics(), "disagg_informer_refused", kind="DaemonSet", scope=watched) == 1
    log = operator.log_path.read_text(errors="replace")
    assert any(" ERROR " in line and RULE in line for line in log.splitlines()), operator.log_tail()

    kube_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(cluster_role(with_daemonsets=True)))
    wait_for(
        "pega to be reconciled once the rule is granted",
        lambda: status_of(kube_cluster, watched, "pega").get("observedGeneration") == 1,
        timeout=90,
    )
    assert ("DaemonSet", "pega-kv-node") in children(kube_cluster, watched, "pega")
    assert condition(status_of(kube_cluster, watched, "pega"), "Degraded").get("reason") != "AccessDenied"
    assert metric_value(operator.metrics(), "disagg_informer_refused", kind="DaemonSet", scope=watched) == 0
