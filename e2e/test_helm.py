"""The Helm chart with the real helm binary: lint, render, schema, manifests; then install, run, upgrade, uninstall.

The offline tests (lint, template, schema, manifests) need only the pinned helm from the e2e cache; the tests in
TestOnCluster install the chart on the real API server (`kube_cluster`) into a namespace that enforces the
"restricted" Pod Security Standard, and run the operator as the chart's ServiceAccount.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from disagg.cli.run import run as run_command
from disagg.reconcile.access import leader_election_rules
from e2e.localcluster import cluster
from e2e.localcluster.config import BinDir
from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.operator_support import (
    REPO,
    OperatorProcess,
    children,
    condition,
    metric_value,
    status_of,
    token_kubeconfig,
    wait_phase,
    with_test_images,
)
from e2e.prerequisites import unavailable

pytestmark = pytest.mark.e2e

CHART = REPO / "charts" / "disagg-operator"
DOCUMENTED_RBAC = REPO / "e2e" / "rbac" / "operator-clusterwide.yaml"
EXAMPLE = REPO / "examples" / "02-nixl-1p1d-two-gpus.yaml"
K8S_VERSION = "1.37.0"
CLUSTER_SCOPE_RESOURCES = {"customresourcedefinitions", "namespaces"}


@dataclass(frozen=True)
class Helm:
    binary: Path
    home: Path

    def run(self, *args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        extra = [f"--kubeconfig={kubeconfig}"] if kubeconfig else []
        return subprocess.run(
            [str(self.binary), *args, *extra], capture_output=True, text=True, env=env, timeout=600, check=False
        )

    def ok(self, *args: str, kubeconfig: Path | None = None) -> str:
        proc = self.run(*args, kubeconfig=kubeconfig)
        assert proc.returncode == 0, f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
        return proc.stdout

    def template(self, *values: str, namespace: str = "disagg-system") -> list[dict[str, Any]]:
        text = self.ok("template", "rel", str(CHART), "--namespace", namespace, *values)
        return [doc for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The pinned helm (v4.3.2) from the e2e binary cache; on an external cluster, helm on PATH will do."""
    bins = BinDir.default()
    if not bins.is_complete():
        if os.environ.get("CI"):
            cluster.ensure_binaries(bins, lambda msg: print(msg, file=sys.stderr))
        elif os.environ.get("DISAGG_E2E_KUBECONFIG") and shutil.which("helm"):
            return Helm(Path(str(shutil.which("helm"))), tmp_path_factory.mktemp("helm-home"))
        else:
            unavailable("helm not built: run `make cluster-build` (it builds the pinned helm with the cluster)")
    return Helm(bins.binary("helm"), tmp_path_factory.mktemp("helm-home"))


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = by_kind(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def documented_rules() -> list[dict[str, Any]]:
    for doc in yaml.safe_load_all(DOCUMENTED_RBAC.read_text()):
        if doc["kind"] == "ClusterRole":
            return list(doc["rules"])
    raise AssertionError("no ClusterRole in e2e/rbac/operator-clusterwide.yaml")


def split_rules() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(cluster-scope rules, namespaced rules) of the documented RBAC, order kept."""
    rules = documented_rules()
    cluster_scope = [rule for rule in rules if set(rule["resources"]) <= CLUSTER_SCOPE_RESOURCES]
    return cluster_scope, [rule for rule in rules if rule not in cluster_scope]


# -- offline: lint, render, schema -------------------------------------------------------------------------------

DIGEST = "sha256:" + "ab" * 32
# case -> (helm flags, namespaces the operator is told to watch)
MATRIX: dict[str, tuple[list[str], list[str]]] = {
    "defaults": ([], []),
    "cluster-wide": (["--set-json", "watchNamespaces=[]", "--set", "operator.workers=8"], []),
    "namespace-list": (["--set-json", 'watchNamespaces=["team-a","team-b"]'], ["team-a", "team-b"]),
    "service-monitor": (
        ["--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.labels.release=kps"],
        [],
    ),
    "custom-image": (
        [
            "--set", "image.repository=registry.example.com/platform/disagg-operator",
            "--set", "image.tag=0.1.0-rc1",
            "--set", "image.pullPolicy=Always",
            "--set-json", 'imagePullSecrets=[{"name":"regcred"}]',
        ],
        [],
    ),
    "image-digest": (["--set", f"image.digest={DIGEST}"], []),
    "dashboard": (["--set", "dashboard.enabled=true", "--set", "dashboard.namespace=monitoring"], []),
    "pod-monitor": (
        ["--set", "engineMonitoring.podMonitor.enabled=true", "--set-json", 'watchNamespaces=["team-a"]'],
        ["team-a"],
    ),
    "existing-service-account": (
        ["--set", "serviceAccount.create=false", "--set", "serviceAccount.name=ops", "--set", "rbac.create=false"],
        [],
    ),
    "debug-everything-on": (
        [
            "--set", "operator.logLevel=debug",
            "--set", "operator.resyncSeconds=60",
            "--set-json", 'watchNamespaces=["team-a"]',
            "--set", "metrics.serviceMonitor.enabled=true",
            "--set", "engineMonitoring.podMonitor.enabled=true",
            "--set", "dashboard.enabled=true",
            "--set-json", 'operator.extraEnv=[{"name":"TZ","value":"UTC"}]',
            "--set-json", 'tolerations=[{"key":"dedicated","operator":"Exists"}]',
            "--set", "nodeSelector.kubernetes\\.io/os=linux",
            "--set", "priorityClassName=system-cluster-critical",
        ],
        ["team-a"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MATRIX))
def test_lint_and_template_pass_for_the_values_matrix(helm: Helm, case: str) -> None:
    values, namespaces = MATRIX[case]
    helm.ok("lint", "--strict", str(CHART), *values)
    docs = helm.template(*values)
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # Prometheus Operator kinds: no schema in kubernetes-validate
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    container = operator_container(docs)
    command, *options = container["args"]
    assert command == "run"
    params = run_command.make_context("run", list(options)).params  # `disagg run` accepts exactly these flags
    assert list(params["namespaces"]) == namespaces
    assert params["all_namespaces"] is (not namespaces)
    assert params["verbose"] is (case == "debug-everything-on")
    expected_image = {
        "custom-image": "registry.example.com/platform/disagg-operator:0.1.0-rc1",
        "image-digest": f"ghcr.io/disagg-dev/disagg-operator@{DIGEST}",
    }.get(case, "ghcr.io/disagg-dev/disagg-operator:0.1.0")
    assert container["image"] == expected_image


def test_the_chart_packages_with_crd_schema_and_dashboard(helm: Helm, tmp_path: Path) -> None:
    helm.ok("package", str(CHART), "--destination", str(tmp_path))
    listing = subprocess.run(
        ["tar", "-tzf", str(tmp_path / "disagg-operator-0.1.0.tgz")], capture_output=True, text=True, check=True
    ).stdout.split()
    for member in (
        "disagg-operator/crds/disagg.dev_disaggdeployments.yaml",
        "disagg-operator/values.schema.json",
        "disagg-operator/dashboards/disagg-deployment.json",
    ):
        assert member in listing


def test_cluster_wide_rbac_is_exactly_the_documented_rbac(helm: Helm) -> None:
    docs = helm.template()
    (role,) = by_kind(docs, "ClusterRole")
    assert role["rules"] == documented_rules()
    # The only Role is leader election's, in the release namespace.
    (election,) = by_kind(docs, "Role")
    assert election["rules"] == leader_election_rules()
    assert election["metadata"] == {**election["metadata"], "name": "rel-disagg-operator-leader-election"}
    assert election["metadata"]["namespace"] == "disagg-system"
    (election_binding,) = by_kind(docs, "RoleBinding")
    assert election_binding["roleRef"]["name"] == election["metadata"]["name"]
    (binding,) = by_kind(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-disagg-operator", "namespace": "disagg-system"}
    ]


def test_namespace_list_rbac_is_a_role_per_namespace_plus_cluster_reads(helm: Helm) -> None:
    cluster_scope, namespaced = split_rules()
    docs = helm.template("--set-json", 'watchNamespaces=["team-a","team-b"]')
    (cluster_role,) = by_kind(docs, "ClusterRole")
    # Namespace mode adds the namespace listing kopf does when given a list of namespaces.
    assert cluster_role["rules"] == [
        *cluster_scope,
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
    ]
    roles = {doc["metadata"]["namespace"]: doc for doc in by_kind(docs, "Role")}
    assert set(roles) == {"team-a", "team-b", "disagg-system"}
    assert roles.pop("disagg-system")["rules"] == leader_election_rules()  # the Lease lives with the operator
    assert all(role["rules"] == namespaced for role in roles.values())
    bindings = by_kind(docs, "RoleBinding")
    assert {binding["metadata"]["namespace"] for binding in bindings} == {"team-a", "team-b", "disagg-system"}
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "rel-disagg-operator", "namespace": "disagg-system"}
        ]


def test_service_monitor_pod_monitor_and_dashboard_render_only_when_enabled(helm: Helm) -> None:
    optional = {"ServiceMonitor", "PodMonitor", "ConfigMap"}
    assert not [doc for doc in helm.template() if doc["kind"] in optional]
    docs = helm.template("--set", "metrics.serviceMonitor.enabled=true")
    assert [doc["kind"] for doc in docs if doc["kind"] in optional] == ["ServiceMonitor"]
    (monitor,) = by_kind(docs, "ServiceMonitor")
    (service,) = by_kind(docs, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"] == "metrics"

    docs = helm.template("--set", "engineMonitoring.podMonitor.enabled=true")
    (pod_monitor,) = by_kind(docs, "PodMonitor")
    assert pod_monitor["spec"]["namespaceSelector"] == {"any": True}
    target_labels = {
        relabel["targetLabel"]
        for endpoint in pod_monitor["spec"]["podMetricsEndpoints"]
        for relabel in endpoint["relabelings"]
        if relabel["action"] == "replace"
    }
    assert target_labels == {"disagg_deployment", "disagg_role"}

    docs = helm.template("--set", "dashboard.enabled=true", "--set", "dashboard.namespace=monitoring")
    (config_map,) = by_kind(docs, "ConfigMap")
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "disagg-deployment.json").read_text())
    assert json.loads(config_map["data"]["disagg-deployment.json"]) == shipped


BAD_VALUES = [
    ("operator.workers=300", "at '/operator/workers': maximum: got 300, want 256"),
    ("operator.resyncSeconds=1", "at '/operator/resyncSeconds': minimum: got 1, want 5"),
    ("operator.logLevel=trace", "at '/operator/logLevel': value must be one of 'info', 'debug'"),
    ("watchNamespaces={Team_A}", "at '/watchNamespaces/0': 'Team_A' does not match pattern"),
    ("image.pullPolicy=Sometimes", "at '/image/pullPolicy': value must be one of 'IfNotPresent', 'Always', 'Never'"),
    ("image.digest=sha256:abc", "at '/image/digest': 'sha256:abc' does not match pattern"),
    ("terminationGracePeriodSeconds=5", "at '/terminationGracePeriodSeconds': minimum: got 5, want 30"),
    ("metrics.serviceMonitor.interval=30", "at '/metrics/serviceMonitor/interval': got number, want string"),
    ("replicas=2", "additional properties 'replicas' not allowed"),
]


@pytest.mark.parametrize(("setting", "message"), BAD_VALUES, ids=[setting for setting, _ in BAD_VALUES])
def test_the_schema_rejects_wrong_values_with_clear_messages(helm: Helm, setting: str, message: str) -> None:
    proc = helm.run("template", "rel", str(CHART), "--set", setting)
    assert proc.returncode != 0, f"{setting} was accepted"
    assert "values don't meet the specifications of the schema" in proc.stderr
    assert message in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "serviceAccount.create=false"], "serviceAccount.name must name an existing ServiceAccount"),
        (
            ["--set", "leaderElection.enabled=false"],
            "replicaCount must be 1 when leaderElection.enabled is false",
        ),
        (
            ["--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.service.enabled=false"],
            "metrics.serviceMonitor.enabled needs metrics.service.enabled",
        ),
    ],
)
def test_inconsistent_values_fail_with_a_clear_message(helm: Helm, values: list[str], message: str) -> None:
    proc = helm.run("template", "rel", str(CHART), *values)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def test_manifests_install_yaml_is_the_chart_rendered_with_defaults(helm: Helm) -> None:
    proc = subprocess.run(
        ["bash", str(REPO / "charts" / "render-manifests.sh")],
        capture_output=True,
        text=True,
        env={**os.environ, "HELM": str(helm.binary), "HELM_CONFIG_HOME": str(helm.home / "config")},
        check=True,
    )
    assert proc.stdout == (REPO / "manifests" / "install.yaml").read_text(), "stale: run `make manifests`"


# -- on the cluster ------------------------------------------------------------------------------------------------


@dataclass
class Release:
    name: str
    namespace: str
    watched: list[str]
    unwatched: str
    values: list[str]
    service_account: str
    fullname: str


def _namespace(kube: KubeCluster, name: str, labels: dict[str, str] | None = None) -> None:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}})
    wait_for(f"serviceaccount default in {name}", lambda: kube.run("get", "sa/default", "-n", name).returncode == 0)


def _image_values() -> list[str]:
    """On kind, e2e/kind/run.sh builds and loads the image and names it here; kwok never pulls images."""
    image = os.environ.get("DISAGG_E2E_OPERATOR_IMAGE")
    if not image:
        return []
    repository, _, tag = image.rpartition(":")
    return ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}"]


def _install(kube: KubeCluster, helm: Helm) -> Release:
    """A fresh release of the chart, watching two namespaces of its own, in a namespace enforcing "restricted"."""
    suffix = uuid.uuid4().hex[:6]
    name = f"dd-helm-{suffix}"
    rel = Release(
        name=name,
        namespace=f"disagg-system-{suffix}",
        watched=[f"team-a-{suffix}", f"team-b-{suffix}"],
        unwatched=f"team-c-{suffix}",
        values=[
            "--set-json",
            f"watchNamespaces={json.dumps([f'team-a-{suffix}', f'team-b-{suffix}'])}",
            *_image_values(),
        ],
        service_account=f"{name}-disagg-operator",
        fullname=f"{name}-disagg-operator",
    )
    _namespace(
        kube,
        rel.namespace,
        {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"},
    )
    for namespace in [*rel.watched, rel.unwatched]:
        _namespace(kube, namespace)
    helm.ok(
        "install", rel.name, str(CHART), "--namespace", rel.namespace, *rel.values, "--wait", "--timeout", "3m",
        kubeconfig=kube.kubeconfig,
    )  # fmt: skip
    return rel


def _remove(kube: KubeCluster, helm: Helm, rel: Release) -> None:
    helm.run("uninstall", rel.name, "--namespace", rel.namespace, "--wait", kubeconfig=kube.kubeconfig)
    for namespace in [rel.namespace, *rel.watched, rel.unwatched]:
        kube.run("delete", "namespace", namespace, "--wait=false")
    for namespace in [rel.namespace, *rel.watched, rel.unwatched]:
        kube.run("wait", "--for=delete", f"namespace/{namespace}", "--timeout=120s")


@pytest.fixture(scope="module")
def release(kube_cluster: KubeCluster, helm: Helm) -> Iterator[Release]:
    rel = _install(kube_cluster, helm)
    try:
        yield rel
    finally:
        _remove(kube_cluster, helm, rel)


@pytest.fixture(scope="module")
def operator(
    kube_cluster: KubeCluster, release: Release, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """`disagg run -n <watched>...` out of cluster, authenticated only as the chart's ServiceAccount."""
    token = kube_cluster.kubectl(
        "create", "token", release.service_account, "-n", release.namespace, "--duration=2h"
    ).strip()
    directory = tmp_path_factory.mktemp("helm-operator")
    namespaces = [arg for namespace in release.watched for arg in ("-n", namespace)]
    process = OperatorProcess(
        token_kubeconfig(kube_cluster, token, directory / "kubeconfig"), directory / "operator.log", *namespaces
    )
    process.start()
    yield process
    process.stop()
    print(f"operator log tail:\n{process.log_tail()}")


def _apply_example(kube: KubeCluster, namespace: str) -> str:
    document = with_test_images(yaml.safe_load(EXAMPLE.read_text()))
    kube.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(document))
    return str(document["metadata"]["name"])


def _ready_example(kube: KubeCluster, namespace: str) -> str:
    """The example in `namespace` (applied again when it is there already), with a spec change the operator must
    have reconciled: Ready at the new generation, so a status left over from before cannot pass for it."""
    document = with_test_images(yaml.safe_load(EXAMPLE.read_text()))
    document["spec"]["prefill"]["podAnnotations"] = {"e2e/generation-poke": uuid.uuid4().hex[:8]}
    kube.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(document))
    name = str(document["metadata"]["name"])

    def current() -> dict[str, Any] | None:
        found = kube.get("dd", name, "-n", namespace)
        status = found.get("status") or {}
        at_generation = status.get("observedGeneration") == found["metadata"]["generation"]
        return status if at_generation and status.get("phase") == "Ready" else None

    wait_for(f"{namespace}/{name} Ready at its new generation", current, timeout=120)
    return name


FORBIDDEN = re.compile(r"\bforbidden\b|\b403 Forbidden\b", re.IGNORECASE)
"""A refusal in the operator's log (timestamps carry milliseconds, so a bare "403" proves nothing)."""


def _log_since(operator: OperatorProcess, offset: int) -> str:
    return operator.log_path.read_bytes()[offset:].decode(errors="replace")


def _log_size(operator: OperatorProcess) -> int:
    return operator.log_path.stat().st_size if operator.log_path.exists() else 0


def _restorable(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as it can be created again: without the fields the server sets."""
    metadata = {
        key: value
        for key, value in obj["metadata"].items()
        if key not in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")
    }
    return {**obj, "metadata": metadata}


class TestOnCluster:
    """Each test stands on its own on the module's release, in any order or alone: the example is brought to
    Ready by whichever test needs it, a test that breaks the RBAC puts it back, and the uninstall test removes a
    release of its own."""

    def test_install_is_admitted_under_restricted_pod_security(
        self, kube_cluster: KubeCluster, release: Release
    ) -> None:
        deployment = kube_cluster.get("deployment", release.fullname, "-n", release.namespace)
        assert deployment["status"].get("readyReplicas") == 2  # a leader and a standby
        pods = kube_cluster.get("pods", "-n", release.namespace, "-l", f"app.kubernetes.io/instance={release.name}")
        assert len(pods["items"]) == 2
        assert kube_cluster.get("pdb", release.fullname, "-n", release.namespace)["spec"]["maxUnavailable"] == 1
        assert kube_cluster.get("crd", "disaggdeployments.disagg.dev")["metadata"]["name"]

        # PodSecurity really checks this namespace: the chart's pod passes, a weakened copy is refused.
        template = deployment["spec"]["template"]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "psa-check", "namespace": release.namespace}}
        pod["spec"] = template["spec"]
        accepted = kube_cluster.run("create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod))
        assert accepted.returncode == 0, accepted.stderr
        pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
        refused = kube_cluster.run("create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod))
        assert refused.returncode != 0
        assert 'violates PodSecurity "restricted:latest"' in refused.stderr
        assert "allowPrivilegeEscalation != false" in refused.stderr

    def test_the_operator_reconciles_a_watched_namespace_with_the_charts_rbac(
        self, kube_cluster: KubeCluster, release: Release, operator: OperatorProcess
    ) -> None:
        watched = release.watched[0]
        offset = _log_size(operator)
        name = _ready_example(kube_cluster, watched)
        status = status_of(kube_cluster, watched, name)
        assert status["prefillReady"] == "1/1" and status["decodeReady"] == "1/1"
        assert ("Deployment", f"{name}-router") in children(kube_cluster, watched, name)
        log = _log_since(operator, offset)
        assert "Not enough permissions" not in log, log  # kopf found everything it looks for at cluster scope
        refusals = [line for line in log.splitlines() if FORBIDDEN.search(line)]
        assert not refusals, refusals

    def test_an_unwatched_namespace_is_left_alone_and_out_of_reach(
        self, kube_cluster: KubeCluster, release: Release, operator: OperatorProcess
    ) -> None:
        name = _apply_example(kube_cluster, release.unwatched)
        second = release.watched[1]
        _ready_example(kube_cluster, second)  # the operator is busy meanwhile
        assert status_of(kube_cluster, release.unwatched, name) == {}
        assert children(kube_cluster, release.unwatched, name) == {}
        identity = f"system:serviceaccount:{release.namespace}:{release.service_account}"
        reach = kube_cluster.run("auth", "can-i", "patch", "deployments", "-n", release.unwatched, f"--as={identity}")
        assert reach.stdout.strip() == "no"
        inside = kube_cluster.run("auth", "can-i", "patch", "deployments", "-n", second, f"--as={identity}")
        assert inside.stdout.strip() == "yes"

    def test_missing_rbac_shows_a_403_naming_the_resource(
        self, kube_cluster: KubeCluster, release: Release, operator: OperatorProcess
    ) -> None:
        watched = release.watched[0]
        name = _ready_example(kube_cluster, watched)
        role = kube_cluster.get("role", release.fullname, "-n", watched)
        try:
            index = next(i for i, rule in enumerate(role["rules"]) if "services" in rule["resources"])
            verbs = [verb for verb in role["rules"][index]["verbs"] if verb != "patch"]
            patch = [{"op": "replace", "path": f"/rules/{index}/verbs", "value": verbs}]
            kube_cluster.kubectl(
                "patch", "role", release.fullname, "-n", watched, "--type=json", "-p", json.dumps(patch)
            )
            # A pass sends only what changed (D121): a hand edit of the Service makes it apply that Service again.
            kube_cluster.kubectl("annotate", "service", name, "-n", watched, "--overwrite", "e2e/poke=1")

            # Without `patch` on services the apply fails, and the status says so, naming the object and the verb.
            status = wait_phase(kube_cluster, watched, name, "Degraded", timeout=60)
            degraded = condition(status, "Degraded")
            assert degraded["reason"] == "ApplyFailed", degraded
            assert f"Service/{name}" in degraded["message"] and "403 Forbidden" in degraded["message"], degraded
            assert 'cannot patch resource "services"' in degraded["message"], degraded

            # Without the Role the operator can write neither the children nor the status (it reads both from its
            # watch cache): a spec change makes it try, the log says so, and the metric counts.
            errors_before = metric_value(operator.metrics(), "disagg_reconcile_errors_total", reason="transient")
            offset = _log_size(operator)
            kube_cluster.kubectl("delete", "role", release.fullname, "-n", watched)
            poke = {"spec": {"prefill": {"podAnnotations": {"e2e/generation-poke": uuid.uuid4().hex[:8]}}}}
            kube_cluster.kubectl("patch", "dd", name, "-n", watched, "--type=merge", "-p", json.dumps(poke))
            expected = f'disaggdeployments.disagg.dev "{name}" is forbidden'

            def logged() -> str | None:
                lines = [line for line in _log_since(operator, offset).splitlines() if expected in line]
                return lines[0] if lines else None

            line = wait_for("a 403 for the DisaggDeployment in the operator log", logged, timeout=60)
            identity = f"system:serviceaccount:{release.namespace}:{release.service_account}"
            assert "403 Forbidden" in line and identity in line, line
            # The first call to fail may be the read or the status write, depending on where the pass was.
            assert re.search(r'cannot (get|patch) resource "disaggdeployments(/status)?"', line), line
            after = metric_value(operator.metrics(), "disagg_reconcile_errors_total", reason="transient")
            assert after > errors_before
        finally:
            kube_cluster.run("delete", "role", release.fullname, "-n", watched, "--ignore-not-found")
            kube_cluster.kubectl("create", "-f", "-", stdin=json.dumps(_restorable(role)))
        _ready_example(kube_cluster, watched)  # the Role is back: so is the DisaggDeployment

    def test_upgrade_changes_a_value_and_restores_the_rbac(
        self, kube_cluster: KubeCluster, helm: Helm, release: Release, operator: OperatorProcess
    ) -> None:
        watched = release.watched[0]
        name = _ready_example(kube_cluster, watched)
        history = json.loads(
            helm.ok("history", release.name, "-n", release.namespace, "-o", "json", kubeconfig=kube_cluster.kubeconfig)
        )
        kube_cluster.kubectl("delete", "role", release.fullname, "-n", watched)  # for the upgrade to put back
        helm.ok(
            "upgrade", release.name, str(CHART), "--namespace", release.namespace, *release.values,
            "--set", "operator.workers=2", "--wait", "--timeout", "3m",
            kubeconfig=kube_cluster.kubeconfig,
        )  # fmt: skip
        deployment = kube_cluster.get("deployment", release.fullname, "-n", release.namespace)
        assert "--workers=2" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        after = json.loads(
            helm.ok("history", release.name, "-n", release.namespace, "-o", "json", kubeconfig=kube_cluster.kubeconfig)
        )
        assert after[-1]["revision"] == history[-1]["revision"] + 1
        assert after[-1]["status"] == "deployed"
        _, namespaced = split_rules()
        for namespace in release.watched:
            assert kube_cluster.get("role", release.fullname, "-n", namespace)["rules"] == namespaced

        _ready_example(kube_cluster, watched)  # the operator can act on the DisaggDeployment again
        assert condition(status_of(kube_cluster, watched, name), "Degraded").get("status") != "True"

    def test_uninstall_leaves_only_the_crd(self, kube_cluster: KubeCluster, helm: Helm) -> None:
        own = _install(kube_cluster, helm)  # the module's release stays for the other tests
        try:
            kept = _apply_example(kube_cluster, own.watched[0])
            helm.ok("uninstall", own.name, "--namespace", own.namespace, "--wait", kubeconfig=kube_cluster.kubeconfig)
            selector = f"app.kubernetes.io/instance={own.name}"
            namespaced = "deployments,replicasets,pods,services,serviceaccounts,configmaps,secrets,roles,rolebindings"
            for namespace in [own.namespace, *own.watched]:
                left = kube_cluster.get(namespaced, "-n", namespace, "-l", selector)["items"]
                assert left == [], [(item["kind"], item["metadata"]["name"]) for item in left]
            left = kube_cluster.get("clusterroles,clusterrolebindings", "-l", selector)["items"]
            assert left == [], [(item["kind"], item["metadata"]["name"]) for item in left]
            releases = kube_cluster.get("secrets", "-n", own.namespace, "-l", f"owner=helm,name={own.name}")
            assert releases["items"] == []
            wait_for(
                "the operator pod to go",
                lambda: kube_cluster.get("pods", "-n", own.namespace)["items"] == [],
                timeout=60,
            )
            # Helm keeps crds/ by design, so the DisaggDeployments (and what they own) survive an uninstall.
            assert kube_cluster.get("crd", "disaggdeployments.disagg.dev")["metadata"]["name"]
            assert [item["metadata"]["name"] for item in kube_cluster.get("dd", "-n", own.watched[0])["items"]] == [
                kept
            ]
        finally:
            _remove(kube_cluster, helm, own)


def test_plain_manifests_install_and_remove(kube_cluster: KubeCluster) -> None:
    """`kubectl apply --server-side -f manifests/` as documented: namespace, CRD, RBAC and a running operator pod."""
    if kube_cluster.run("get", "namespace", "disagg-system").returncode == 0:
        unavailable("namespace disagg-system already exists in this cluster; not touching it")
    kube_cluster.kubectl("apply", "--server-side", "-f", str(REPO / "manifests"))
    try:
        kube_cluster.kubectl(
            "wait", "--for=condition=Available", "deployment/disagg-operator", "-n", "disagg-system", "--timeout=90s"
        )
        namespace = kube_cluster.get("namespace", "disagg-system")
        assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        pods = kube_cluster.get("pods", "-n", "disagg-system", "-l", "app.kubernetes.io/name=disagg-operator")
        # every replica (two by default, one leading: D120) admitted under the restricted profile
        assert len(pods["items"]) == 2
        assert all(pod["spec"]["serviceAccountName"] == "disagg-operator" for pod in pods["items"])
        assert kube_cluster.get("clusterrole", "disagg-operator")["rules"] == documented_rules()
        kube_cluster.kubectl("wait", "--for=condition=Established", "crd/disaggdeployments.disagg.dev", "--timeout=30s")
    finally:
        # Everything but the CRD, which other tests and any DisaggDeployments still need.
        kube_cluster.run("delete", "clusterrolebinding,clusterrole", "disagg-operator")
        kube_cluster.run("delete", "namespace", "disagg-system", "--timeout=120s")
