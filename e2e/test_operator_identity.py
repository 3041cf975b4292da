"""The operator as its own ServiceAccount, with exactly the RBAC derived from its calls (reconcile/access.py, as
installed from e2e/rbac): the API server says the account holds those rules and nothing more, and the steps the
rules must cover beyond creating things, pruning and adopting, run without a refusal."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest
import yaml

from disagg.reconcile.access import cluster_wide_rules
from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.operator_support import REPO, OperatorProcess, children, wait_phase, with_test_images

pytestmark = pytest.mark.e2e
OPERATOR_IDENTITY = "system:serviceaccount:disagg-e2e-operator:disagg-operator"
"""The conftest's `operator` runs as this account, bound to e2e/rbac/operator-clusterwide.yaml's ClusterRole."""
REFUSAL = re.compile(r"\bforbidden\b|Not enough permissions", re.IGNORECASE)


def held(kube: KubeCluster, identity: str, namespace: str) -> set[tuple[str, str, str]]:
    """(API group, resource, verb) the identity may use in the namespace, as the API server itself reports it."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    }
    answer = json.loads(
        kube.kubectl(
            "create", "--validate=false", f"--as={identity}", "-o", "json", "-f", "-", stdin=json.dumps(review)
        )
    )
    return expand(answer["status"]["resourceRules"])


def expand(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def refusals(operator: OperatorProcess, since: int) -> list[str]:
    text = operator.log_path.read_bytes()[since:].decode(errors="replace")
    return [line for line in text.splitlines() if REFUSAL.search(line)]


def log_size(operator: OperatorProcess) -> int:
    return operator.log_path.stat().st_size if operator.log_path.exists() else 0


def example(stem: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((REPO / "examples" / f"{stem}.yaml").read_text())
    return with_test_images(document)


def apply(kube: KubeCluster, namespace: str, document: dict[str, Any]) -> None:
    kube.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(document))


def test_the_service_account_holds_exactly_the_derived_rules(
    kube_cluster: KubeCluster, namespace: str, operator: OperatorProcess
) -> None:
    everyone = held(kube_cluster, f"system:serviceaccount:{namespace}:default", namespace)  # no bindings of its own
    ours = held(kube_cluster, OPERATOR_IDENTITY, namespace) - everyone
    derived = expand(cluster_wide_rules())
    assert ours - derived == set(), "granted but never used by the operator"
    assert derived - ours == set(), "used by the operator but not granted"
    assert refusals(operator, 0) == []  # kopf's observers started without a refusal


def test_children_the_spec_no_longer_wants_are_pruned_and_lookalikes_are_not(
    kube_cluster: KubeCluster, namespace: str, operator: OperatorProcess
) -> None:
    since = log_size(operator)
    document = example("01-minimal")
    document["spec"]["frontend"] = {"render": {"enabled": True}}
    apply(kube_cluster, namespace, document)
    wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
    assert {("Deployment", "qwen3-32b-render"), ("Service", "qwen3-32b-render")} <= set(
        children(kube_cluster, namespace, "qwen3-32b")
    )
    labels = {"disagg.dev/deployment": "qwen3-32b", "app.kubernetes.io/managed-by": "disagg-operator"}
    lookalike = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "qwen3-32b-mine", "labels": labels}}
    apply(kube_cluster, namespace, lookalike)  # our labels, but not our owner reference: never ours to delete

    document["spec"]["frontend"] = {"render": {"enabled": False}}
    apply(kube_cluster, namespace, document)
    wait_for(
        "the render tier to be pruned",
        lambda: (
            not {("Deployment", "qwen3-32b-render"), ("Service", "qwen3-32b-render")}
            & set(children(kube_cluster, namespace, "qwen3-32b"))
        ),
        timeout=60,
    )
    wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
    assert kube_cluster.run("get", "configmap", "qwen3-32b-mine", "-n", namespace).returncode == 0
    events = kube_cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.name=qwen3-32b")
    pruned = [e["message"] for e in events["items"] if e["reason"] == "Pruned"]  # one event per pass (D124)
    assert {item for message in pruned for item in message.removeprefix("deleted ").split(", ")} == {
        "Deployment qwen3-32b-render",
        "Service qwen3-32b-render",
    }
    assert refusals(operator, since) == []


def test_children_orphaned_by_a_deleted_deployment_are_adopted_by_its_namesake(
    kube_cluster: KubeCluster, namespace: str, operator: OperatorProcess
) -> None:
    since = log_size(operator)
    document = example("01-minimal")
    apply(kube_cluster, namespace, document)
    wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
    before = {key: obj["metadata"]["uid"] for key, obj in children(kube_cluster, namespace, "qwen3-32b").items()}
    kube_cluster.kubectl("delete", "dd", "qwen3-32b", "-n", namespace, "--cascade=orphan")

    def orphaned() -> bool:
        found = children(kube_cluster, namespace, "qwen3-32b")
        return set(found) == set(before) and all(not o["metadata"].get("ownerReferences") for o in found.values())

    # Orphaning is the kube-controller-manager's garbage collector's job, not the operator's. Its workers pause while
    # it re-syncs its informers after the API's kinds change, which the Helm tests' CRD installs and uninstalls do
    # just before this module; a warm make test once saw it take more than 60 s, and the first run after a cold build
    # on a slower machine more than 180 s (this module alone there: 3 passed in 77 s).
    wait_for("the garbage collector to orphan the children", orphaned, timeout=360)
    document["metadata"]["annotations"] = {"e2e/attempt": uuid.uuid4().hex[:6]}
    apply(kube_cluster, namespace, document)
    owner = kube_cluster.get("dd", "qwen3-32b", "-n", namespace)["metadata"]["uid"]

    def adopted() -> bool:
        found = children(kube_cluster, namespace, "qwen3-32b")
        return all([ref["uid"] for ref in o["metadata"].get("ownerReferences", [])] == [owner] for o in found.values())

    wait_for("the new DisaggDeployment to adopt the children", adopted, timeout=60)
    wait_phase(kube_cluster, namespace, "qwen3-32b", "Ready")
    after = {key: obj["metadata"]["uid"] for key, obj in children(kube_cluster, namespace, "qwen3-32b").items()}
    assert after == before  # the same objects, adopted, not replaced
    assert refusals(operator, since) == []
