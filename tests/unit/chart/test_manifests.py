"""manifests/install.yaml (the chart rendered with defaults): complete, valid, restricted, least privilege.

Whether it is *current* (equal to a fresh `helm template`) needs the helm binary and is checked in
e2e/test_helm.py; these checks need nothing but Python.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from disagg.cli.run import run
from disagg.reconcile.access import leader_election_rules
from tests.conftest import REPO

INSTALL = REPO / "manifests" / "install.yaml"
CLUSTERWIDE_RBAC = REPO / "e2e" / "rbac" / "operator-clusterwide.yaml"
K8S_VERSION = "1.37.0"


def documents() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(INSTALL.read_text()) if doc]


def one(kind: str) -> dict[str, Any]:
    found = [doc for doc in documents() if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def test_it_holds_the_namespace_the_crd_and_the_operator() -> None:
    kinds = [doc["kind"] for doc in documents()]
    assert kinds == [
        "Namespace",
        "CustomResourceDefinition",
        "PodDisruptionBudget",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
    ]
    namespace = one("Namespace")
    assert namespace["metadata"]["name"] == "disagg-system"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for doc in documents():
        if doc["kind"] in ("ServiceAccount", "Service", "Deployment", "Role", "RoleBinding", "PodDisruptionBudget"):
            assert doc["metadata"]["namespace"] == "disagg-system", doc["kind"]


def test_the_crd_is_the_generated_one() -> None:
    generated = yaml.safe_load((REPO / "crds" / "disagg.dev_disaggdeployments.yaml").read_text())
    assert one("CustomResourceDefinition") == generated, "stale: run `make manifests`"


@pytest.mark.parametrize(
    "kind", ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service", "Deployment"]
)
def test_objects_validate_strictly_against_kubernetes_1_37(kind: str) -> None:
    kubernetes_validate.validate(one(kind), K8S_VERSION, strict=True)


def test_cluster_rbac_is_exactly_the_documented_rbac() -> None:
    documented = {doc["kind"]: doc for doc in yaml.safe_load_all(CLUSTERWIDE_RBAC.read_text())}
    assert one("ClusterRole")["rules"] == documented["ClusterRole"]["rules"]
    binding = one("ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": one("ClusterRole")["metadata"]["name"],
    }
    account = one("ServiceAccount")["metadata"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]
    for rule in one("ClusterRole")["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        assert "secrets" not in rule["resources"]


def test_the_leader_election_role_is_the_derived_one_in_the_operators_namespace() -> None:
    documented = {doc["kind"]: doc for doc in yaml.safe_load_all(CLUSTERWIDE_RBAC.read_text())}
    role, binding = one("Role"), one("RoleBinding")
    assert role["rules"] == documented["Role"]["rules"] == leader_election_rules()
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "disagg-system"
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    account = one("ServiceAccount")["metadata"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]


def test_two_replicas_elect_a_leader_spread_over_nodes_and_keep_one_through_a_drain() -> None:
    deployment = one("Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    context = run.make_context("run", list(container["args"][1:]))
    assert context.params["leader_elect"] is True
    assert context.params["leader_election_id"] == "disagg-operator"
    env = {item["name"]: item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for item in container["env"]}
    assert env["POD_NAME"] == "metadata.name" and env["POD_NAMESPACE"] == "metadata.namespace"
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert term["podAffinityTerm"] == {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": selector},
    }
    budget = one("PodDisruptionBudget")
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}


def test_the_pod_meets_the_restricted_pod_security_standard() -> None:
    deployment = one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["terminationGracePeriodSeconds"] >= 30
    assert pod["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"} in container["env"]
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert pod["volumes"][0]["name"] == "tmp" and "emptyDir" in pod["volumes"][0]
    assert container["image"] == "ghcr.io/disagg-dev/disagg-operator:0.1.0"
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]


def test_liveness_probe_only_on_the_operators_healthz_port() -> None:
    (container,) = one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert "readinessProbe" not in container
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    args = container["args"]
    assert f"--liveness-port={ports['healthz']}" in args
    assert f"--metrics-port={ports['metrics']}" in args
    service = one("Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_the_args_are_accepted_by_disagg_run() -> None:
    (container,) = one("Deployment")["spec"]["template"]["spec"]["containers"]
    command, *options = container["args"]
    assert command == "run"  # the image's ENTRYPOINT is `disagg`
    assert "--all-namespaces" in options
    context = run.make_context("run", list(options))
    assert context.params["workers"] == 32  # D253
    assert context.params["resync_seconds"] == 300
    assert context.params["all_namespaces"] is True
    assert CliRunner().invoke(run, ["--bogus"]).exit_code == 2  # make_context really parses
