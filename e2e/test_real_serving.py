"""Never Ready while it cannot serve: the serving check with real vLLM CPU engines on the real node.

One prefill and one decode engine (e2e/specs/tiny-nixl-pull.yaml, NIXL pull over UCX) behind the operator's own
frontend (`disagg frontend`, recognised by its admin port), with the serving check Enforced: engine pods carry the
`disagg.dev/serving` readiness gate, and the operator (a real `disagg run` process with the documented cluster-wide
RBAC, watching only this module's namespace) probes every pair through the frontend's admin API. In order:

- the engines became Ready only through the gate, and Serving is True with the pair probed;
- a role restarts (the engine's container is killed through containerd; the pod keeps its name): Ready turns False
  and back, and the endpoint serves again (decode first, then prefill);
- the KV path breaks while every HTTP port still answers (the prefill pod's network namespace drops everything but
  its HTTP port, so NIXL cannot read from it): Serving turns False within interval + 2 s + two deadlines, Report
  holds the remediation, and Serving is True again after the path is repaired;
- a coordinated rollout of both pools to a new pairing revision under a steady background load: no request fails
  and none is served by a prefill and a decode of different revisions.

The figures (time to Ready False and back, detection, request counts) are printed and recorded in docs/testing.md,
"Serving check on real engines" (D109). The pairing revision is the planner's (plan/pairing.py, D142): the rollout
changes spec.engine.pythonHashSeed, which both pools must agree on, and reads the new revision from status.

The frontend is the one the operator renders by default (`disagg frontend` from the operator's image, with the
ServiceAccount, Role and RoleBinding the operator renders for it): the operator process is given the image built
here as `--frontend-image`, as the Helm chart passes it.
"""

from __future__ import annotations

import copy
import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.operator_support import (
    RBAC_DIR,
    OperatorProcess,
    condition,
    install_crd,
    status_of,
    token_kubeconfig,
)
from e2e.realnode_support import (
    containerd_socket,
    engines_turn,
    ensure_namespace,
    load_images,
    real_pull_document,
    require_real_node,
)

pytestmark = [pytest.mark.e2e, pytest.mark.real_engines, pytest.mark.extended, pytest.mark.timeout(3600)]

READY_TIMEOUT = 900.0
INTERVAL = 5.0
DEADLINE = 20.0
RECHECK = 2.0
DETECTION_BOUND = INTERVAL + RECHECK + 2 * DEADLINE + 10.0
"""D109: False within interval + 2 s + two deadlines; 10 s for the operator's pass and status write."""
REVISION = "disagg.dev/pairing-revision"
PROMPT = "The serving check sends a tiny request through every prefill and decode pair the frontend may choose. "


@dataclass
class Checked:
    namespace: str
    name: str
    endpoint: str
    operator: OperatorProcess
    figures: dict[str, Any] = field(default_factory=dict)


def _document(images: dict[str, str]) -> dict[str, Any]:
    """tiny-nixl-pull.yaml behind the operator's own frontend (the default router) with the check Enforced."""
    document = real_pull_document({"vllm-cpu": images["vllm-cpu"], "router": "unused"})
    spec = document["spec"]
    router = spec["frontend"]["router"]
    router.pop("implementation", None)
    router.pop("image", None)
    spec["serving"] = {
        "check": {"mode": "Enforce", "interval": f"{INTERVAL:.0f}s", "deadline": f"{DEADLINE:.0f}s"},
        "remediation": {"action": "Recreate", "cooldown": "1m"},
    }
    return document


@pytest.fixture(scope="module")
def checked(kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Checked]:
    require_real_node(kube_cluster)
    images = load_images("operator", "vllm-cpu")
    with engines_turn():
        yield from _check(kube_cluster, images, tmp_path_factory)


def _check(kube: KubeCluster, images: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Checked]:
    suffix = uuid.uuid4().hex[:6]
    namespace = f"serving-{suffix}"
    home = f"disagg-serving-{suffix}"
    install_crd(kube)
    rbac = (
        (RBAC_DIR / "operator-clusterwide.yaml").read_text().replace("namespace: disagg-system", f"namespace: {home}")
    )
    rbac = rbac.replace("name: disagg-operator}", f"name: {home}}}")
    # Watching one namespace, kopf also lists and watches namespaces (the chart's namespace mode grants it too).
    rbac = rbac.replace(
        "kind: ClusterRole\nmetadata: {name: " + home + "}\nrules:\n",
        "kind: ClusterRole\nmetadata: {name: " + home + "}\nrules:\n"
        '  - apiGroups: [""]\n    resources: [namespaces]\n    verbs: [list, watch]\n',
    )
    assert "resources: [namespaces]" in rbac
    ensure_namespace(kube, home)
    ensure_namespace(kube, namespace)
    kube.kubectl("apply", "-f", "-", stdin=rbac)
    token = kube.kubectl("create", "token", "disagg-operator", "-n", home, "--duration=6h").strip()
    directory = tmp_path_factory.mktemp("serving-operator")
    operator = OperatorProcess(
        token_kubeconfig(kube, token, directory / "kubeconfig"),
        directory / "operator.log",
        "-n",
        namespace,
        "--frontend-image",
        images["operator"],
        serving_check="Enforce",
    )
    document = _document(images)
    name = document["metadata"]["name"]
    operator.start()
    checked = Checked(namespace, name, "", operator)
    try:
        kube.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(document))
        _wait_serving(kube, namespace, name, READY_TIMEOUT)
        service = kube.get("service", name, "-n", namespace)
        checked.endpoint = f"http://{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}"
        yield checked
    finally:
        print(f"figures: {json.dumps(checked.figures, indent=1)}")
        for pod in kube.get("pods", "-n", namespace)["items"]:
            pod_name = pod["metadata"]["name"]
            print(f"--- logs of {pod_name}:\n{kube.run('logs', '-n', namespace, pod_name, '--tail=30').stdout}")
        print(f"--- operator log:\n{operator.log_tail(80)}")
        operator.stop()
        kube.run("delete", "namespace", namespace, "--wait=true", "--timeout=180s")
        kube.run("delete", "-f", "-", "--wait=false", stdin=rbac)
        kube.run("delete", "namespace", home, "--wait=false")


# ---- helpers -------------------------------------------------------------------------------------------------


def _wait_serving(kube: KubeCluster, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    """Until phase Ready with Ready and Serving True, read from the object each time (a shared cluster's CRD can
    change under a test: the status, not a watch, is what counts)."""

    def probe() -> dict[str, Any] | None:
        status = status_of(kube, namespace, name)
        if condition(status, "SpecValid").get("status") == "False":
            raise AssertionError(f"the spec is invalid here: {condition(status, 'SpecValid').get('message')}")
        ready = condition(status, "Ready").get("status") == "True"
        serving = condition(status, "Serving").get("status") == "True"
        return status if status.get("phase") == "Ready" and ready and serving else None

    try:
        return wait_for(f"{namespace}/{name} to be Ready and Serving", probe, timeout=timeout, every=2)
    except TimeoutError:
        raise TimeoutError(f"{namespace}/{name} not Ready and Serving: {status_of(kube, namespace, name)}") from None


def _pods(kube: KubeCluster, checked: Checked, role: str) -> list[dict[str, Any]]:
    selector = f"disagg.dev/deployment={checked.name},disagg.dev/role={role}"
    items: list[dict[str, Any]] = kube.get("pods", "-n", checked.namespace, "-l", selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _one(kube: KubeCluster, checked: Checked, role: str) -> dict[str, Any]:
    pods = _pods(kube, checked, role)
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def _gate(pod: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == "disagg.dev/serving"), {})


def _status(kube: KubeCluster, checked: Checked) -> dict[str, Any]:
    return status_of(kube, checked.namespace, checked.name)


def _events(kube: KubeCluster, checked: Checked) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.get("events", "-n", checked.namespace)["items"]
    return [e for e in items if e.get("involvedObject", {}).get("kind") == "DisaggDeployment"]


def _reasons(kube: KubeCluster, checked: Checked) -> set[str]:
    return {str(e.get("reason")) for e in _events(kube, checked)}


def _post(url: str, body: dict[str, Any], timeout: float = 120.0) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), bytes(response.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), bytes(err.read())


def _serves(checked: Checked) -> bool:
    try:
        code, _, raw = _post(f"{checked.endpoint}/v1/completions", _body(4), timeout=60)
    except OSError:
        return False
    return code == 200 and bool(json.loads(raw)["choices"][0]["text"])


def _body(max_tokens: int) -> dict[str, Any]:
    return {"model": "tiny", "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}


def _ctr(*args: str) -> str:
    done = subprocess.run(
        ["ctr", "--address", containerd_socket(), "--namespace", "k8s.io", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"ctr {' '.join(args)}: {done.stderr}"
    return done.stdout


def _container_id(pod: dict[str, Any]) -> str:
    (status,) = pod["status"]["containerStatuses"]
    return str(status["containerID"]).removeprefix("containerd://")


def _task_pid(pod: dict[str, Any]) -> int:
    wanted = _container_id(pod)
    for line in _ctr("tasks", "ls").splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == wanted:
            return int(pid)
    raise AssertionError(f"no containerd task for {pod['metadata']['name']} ({wanted})")


class Watch:
    """Samples the DisaggDeployment's Ready and Serving conditions every half second, with their change times."""

    def __init__(self, kube: KubeCluster, checked: Checked) -> None:
        self.kube, self.checked = kube, checked
        self.started = time.monotonic()

    def until(self, what: str, wanted: dict[str, str], timeout: float) -> float:
        """Seconds since this watch started until every condition has the wanted status."""

        def probe() -> float | None:
            status = _status(self.kube, self.checked)
            if all(condition(status, kind).get("status") == value for kind, value in wanted.items()):
                return time.monotonic() - self.started
            return None

        return wait_for(what, probe, timeout=timeout, every=0.5)


def _restart(kube: KubeCluster, checked: Checked, role: str) -> dict[str, Any]:
    """Kill the engine's container (SIGKILL through containerd) and measure Ready False and back."""
    pod = _one(kube, checked, role)
    restarts = pod["status"]["containerStatuses"][0]["restartCount"]
    watch = Watch(kube, checked)
    _ctr("tasks", "kill", "--signal", "SIGKILL", _container_id(pod))
    not_ready = watch.until(f"Ready False after the {role} engine was killed", {"Ready": "False"}, timeout=60)
    back = watch.until(
        f"Ready and Serving True after the {role} restart", {"Ready": "True", "Serving": "True"}, READY_TIMEOUT
    )
    now = _pods(kube, checked, role)
    recreated = [p["metadata"]["name"] for p in now if p["metadata"]["name"] != pod["metadata"]["name"]]
    same = [p for p in now if p["metadata"]["name"] == pod["metadata"]["name"]]
    figures = {
        "ready_false_after_s": round(not_ready, 1),
        "ready_and_serving_true_after_s": round(back, 1),
        "recreated": recreated,
    }
    if same:
        assert same[0]["status"]["containerStatuses"][0]["restartCount"] == restarts + 1
        assert _gate(same[0]).get("message", "").startswith(f"restarts={restarts + 1}; ")
    return figures


# ---- tests ---------------------------------------------------------------------------------------------------


def test_engines_became_ready_through_the_gate_and_every_pair_serves(kube: KubeCluster, checked: Checked) -> None:
    status = _status(kube, checked)
    serving = condition(status, "Serving")
    assert (serving["status"], serving["reason"]) == ("True", "PairsServe"), serving
    assert status["serving"]["method"] == "pairs" and status["serving"]["pairs"] == 1, status["serving"]
    assert status["serving"]["failing"] == 0
    for role in ("prefill", "decode"):
        pod = _one(kube, checked, role)
        assert pod["spec"]["readinessGates"] == [{"conditionType": "disagg.dev/serving"}]
        gate = _gate(pod)
        assert (gate["status"], gate["reason"]) == ("True", "PairsServe"), gate
        assert status[role]["servingReplicas"] == 1
    assert "EnginesAdmitted" in _reasons(kube, checked)
    assert _serves(checked)
    checked.figures["first_probe_seconds"] = status["serving"].get("slowestSeconds")


def test_a_decode_restart_turns_ready_false_and_serving_comes_back(kube: KubeCluster, checked: Checked) -> None:
    figures = _restart(kube, checked, "decode")
    checked.figures["decode_restart"] = figures
    assert "EngineRestarted" in _reasons(kube, checked)
    wait_for("the endpoint to serve after the decode restart", lambda: _serves(checked), timeout=120, every=3)


def test_a_prefill_restart_turns_ready_false_and_serving_comes_back(kube: KubeCluster, checked: Checked) -> None:
    figures = _restart(kube, checked, "prefill")
    # With engine ids that survive a restart, decode keeps stale NIXL state and the restarted prefill is recreated
    # (D105, D106); with fresh ids it heals by itself. Either way it must serve again.
    figures["remediated"] = "RecreatedEngine" in _reasons(kube, checked)
    checked.figures["prefill_restart"] = figures
    wait_for("the endpoint to serve after the prefill restart", lambda: _serves(checked), timeout=120, every=3)


def _set_action(kube: KubeCluster, checked: Checked, action: str) -> None:
    patch = {"spec": {"serving": {"remediation": {"action": action}}}}
    kube.kubectl("patch", "dd", checked.name, "-n", checked.namespace, "--type", "merge", "-p", json.dumps(patch))


def _nsenter_iptables(pid: int, *rule: str) -> None:
    done = subprocess.run(
        ["nsenter", "-t", str(pid), "-n", "iptables", *rule], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, f"iptables {' '.join(rule)} in the pod's network namespace: {done.stderr}"


def test_a_broken_kv_path_is_detected_within_the_bound_and_serving_returns(kube: KubeCluster, checked: Checked) -> None:
    _set_action(kube, checked, "Report")
    wait_for(
        "the Report action to reach the operator",
        lambda: (
            (kube.get("dd", checked.name, "-n", checked.namespace)["spec"]["serving"]["remediation"]["action"])
            == "Report"
        ),
        timeout=30,
    )
    prefill = _one(kube, checked, "prefill")
    pid = _task_pid(prefill)
    # Everything but the HTTP port: the engines' /health keeps answering, NIXL's side channel and UCX do not.
    rule = ("INPUT", "-p", "tcp", "!", "--dport", "8000", "-j", "DROP")
    watch = Watch(kube, checked)
    _nsenter_iptables(pid, "-I", *rule)
    try:
        detected = watch.until("Serving False after the KV path broke", {"Serving": "False"}, DETECTION_BOUND + 60)
        status = _status(kube, checked)
        assert condition(status, "Ready")["status"] == "False"
        assert detected <= DETECTION_BOUND, f"Serving turned False after {detected:.1f} s (bound {DETECTION_BOUND})"
        checked.figures["broken_path"] = {
            "serving_false_after_s": round(detected, 1),
            "bound_s": DETECTION_BOUND,
            "reason": condition(status, "Serving")["reason"],
            "message": condition(status, "Serving")["message"][:300],
        }
        wait_for("RemediationHeld", lambda: "RemediationHeld" in _reasons(kube, checked), timeout=60)
        assert _one(kube, checked, "prefill")["metadata"]["uid"] == prefill["metadata"]["uid"]  # Report deletes nothing
    finally:
        _nsenter_iptables(pid, "-D", *rule)
    repaired = Watch(kube, checked)
    try:
        back = repaired.until(
            "Serving True after the path was repaired", {"Serving": "True"}, timeout=6 * INTERVAL + DEADLINE
        )
        checked.figures["broken_path"]["serving_true_after_repair_s"] = round(back, 1)
        checked.figures["broken_path"]["recovered_by"] = "itself"
    except TimeoutError:
        # The engines kept state about the broken connection: the operator's remediation has to repair it.
        _set_action(kube, checked, "Recreate")
        back = repaired.until("Serving True after Recreate", {"Serving": "True", "Ready": "True"}, READY_TIMEOUT)
        checked.figures["broken_path"]["serving_true_after_repair_s"] = round(back, 1)
        checked.figures["broken_path"]["recovered_by"] = "RecreatedEngine"
        assert "RecreatedEngine" in _reasons(kube, checked)
    _set_action(kube, checked, "Recreate")
    _wait_serving(kube, checked.namespace, checked.name, READY_TIMEOUT)


@dataclass
class Load:
    """A steady background load through the endpoint: two clients, each one request at a time."""

    endpoint: str
    sent: int = 0
    completed: int = 0
    failed: list[str] = field(default_factory=list)
    pairs: list[tuple[str, str, str]] = field(default_factory=list)
    """(prefill pod, decode pod, pairing revision) of every completed request, from the frontend's headers."""
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                self.sent += 1
            try:
                code, headers, raw = _post(f"{self.endpoint}/v1/completions", _body(4), timeout=120)
            except OSError as exc:
                with self.lock:
                    self.failed.append(f"{type(exc).__name__}: {exc}")
                continue
            with self.lock:
                if code == 200 and json.loads(raw)["choices"][0]["text"]:
                    self.completed += 1
                    self.pairs.append(
                        (
                            headers.get("X-Disagg-Prefill", ""),
                            headers.get("X-Disagg-Decode", ""),
                            headers.get("X-Disagg-Pairing-Revision", ""),
                        )
                    )
                else:
                    self.failed.append(f"{code}: {raw[:300]!r}")


def test_a_coordinated_rollout_under_load_fails_no_request_and_never_mixes_revisions(
    kube: KubeCluster, checked: Checked
) -> None:
    revisions: dict[str, str] = {}

    def remember() -> None:
        for role in ("prefill", "decode"):
            for pod in _pods(kube, checked, role):
                revisions[pod["metadata"]["name"]] = pod["metadata"]["labels"].get(REVISION, "")

    remember()
    load = Load(checked.endpoint)
    clients = [threading.Thread(target=load.run, daemon=True) for _ in range(2)]
    for client in clients:
        client.start()
    time.sleep(10)
    started = time.monotonic()
    r1 = str(_status(kube, checked).get("pairingRevision") or "")
    assert r1, "status.pairingRevision is reported"
    # What both pools must agree on changes (the block-hash seed), and the engines' environment in both pools.
    seed = int(
        (kube.get("dd", checked.name, "-n", checked.namespace)["spec"].get("engine") or {}).get("pythonHashSeed", 0)
    )
    patch: dict[str, Any] = {
        "spec": {
            "engine": {"pythonHashSeed": seed + 1},
            **{
                pool: {"engine": {"env": [*_pool_env(kube, checked, pool), _marker()]}}
                for pool in ("prefill", "decode")
            },
        }
    }
    kube.kubectl("patch", "dd", checked.name, "-n", checked.namespace, "--type", "merge", "-p", json.dumps(patch))
    new_revision: list[str] = []

    def revised() -> bool:
        status = _status(kube, checked)
        revision = str(status.get("pairingRevision") or "")
        if revision and revision != r1 and status.get("observedGeneration") == _generation(kube, checked):
            new_revision.append(revision)
            return True
        return False

    wait_for("the new pairing revision in status", revised, timeout=60, every=1)
    r2 = new_revision[0]
    seen_states: set[str] = set()
    waiting: list[str] = []

    def complete() -> bool:
        remember()
        status = _status(kube, checked)
        rollout = status.get("rollout") or {}
        seen_states.add(str(rollout.get("state")))
        if rollout.get("waitingFor"):
            waiting.append(str(rollout["waitingFor"]))
        pods = [p for role in ("prefill", "decode") for p in _pods(kube, checked, role)]
        return (
            rollout.get("revision") == r2
            and rollout.get("state") == "Complete"
            and condition(status, "Ready").get("status") == "True"
            and condition(status, "Serving").get("status") == "True"
            and all(p["metadata"]["labels"].get(REVISION) == r2 for p in pods)
            and len(pods) == 2
        )

    wait_for("the rollout to r2 to complete", complete, timeout=READY_TIMEOUT, every=2)
    rolled = time.monotonic() - started
    time.sleep(10)  # the new revision serves the load for a while
    load.stop.set()
    for client in clients:
        client.join(timeout=180)
    remember()
    mismatched = [p for p in load.pairs if revisions.get(p[0]) != revisions.get(p[1])]
    served_by = sorted({p[2] for p in load.pairs})
    checked.figures["rollout"] = {
        "seconds": round(rolled, 1),
        "sent": load.sent,
        "completed": load.completed,
        "failed": len(load.failed),
        "mismatched": len(mismatched),
        "revisions_served": served_by,
        "states_seen": sorted(seen_states),
        "waiting_for_sample": waiting[:1],
    }
    print(f"rollout: {json.dumps(checked.figures['rollout'])}")
    assert load.failed == [], load.failed[:5]
    assert load.completed == load.sent
    assert mismatched == [], mismatched[:5]
    assert served_by == sorted([r1, r2]), served_by  # both revisions served, one after the other
    assert "RollingOut" in seen_states and waiting
    # The load's last requests went to the new revision only.
    assert all(p[2] == r2 for p in load.pairs[-4:]), load.pairs[-4:]


def _generation(kube: KubeCluster, checked: Checked) -> int:
    return int(kube.get("dd", checked.name, "-n", checked.namespace)["metadata"]["generation"])


def _pool_env(kube: KubeCluster, checked: Checked, pool: str) -> list[dict[str, Any]]:
    spec = kube.get("dd", checked.name, "-n", checked.namespace)["spec"]
    return copy.deepcopy(spec[pool].get("engine", {}).get("env") or [])


def _marker() -> dict[str, str]:
    return {"name": "DISAGG_E2E_ROLLOUT", "value": "r2"}


@pytest.fixture(scope="module")
def kube(kube_cluster: KubeCluster) -> KubeCluster:
    """The session's cluster under a shorter name."""
    return kube_cluster
