"""The P/D frontend discovering engine pods through the real API server (kr8s watch), serving through simulated
engines bound at the pods' own (loopback) IPs, never pairing across pairing revisions."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.unit.frontend.harness import free_port

from e2e.localcluster.testing import KubeCluster, wait_for
from e2e.pdsim import Fabric, SimEngine, serve_engines

pytestmark = pytest.mark.e2e


@pytest.fixture
def engine_namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    name = f"fe-{uuid.uuid4().hex[:8]}"
    kube_cluster.kubectl("create", "namespace", name)
    yield name
    kube_cluster.run("delete", "namespace", name, "--wait=false")


def engine_pod(name: str, role: str, revision: str) -> str:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"disagg.dev/deployment": "dd", "disagg.dev/role": role, "disagg.dev/pairing-revision": revision},
            "annotations": {"disagg.dev/pairing-generation": "1", "disagg.dev/kv-side-channel-port": "5600"},
        },
        "spec": {
            "tolerations": [{"operator": "Exists"}],
            # kwok's fake nodes only: the engines are simulated at the pod IPs, never started by a real kubelet.
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "disagg.dev/e2e-node", "operator": "DoesNotExist"}]}
                        ]
                    }
                }
            },
            "containers": [{"name": "engine", "image": "vllm-sim"}],
        },
    }
    return json.dumps(pod)


def pod_ip(kube: KubeCluster, namespace: str, name: str) -> str | None:
    out = kube.run("get", "pod", name, "-n", namespace, "-o", "jsonpath={.status.podIP}")
    return out.stdout.strip() or None


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def complete(url: str) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(
        url + "/v1/completions",
        json.dumps({"prompt": "a b c d", "max_tokens": 2}).encode(),
        {"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers)


async def test_frontend_discovers_pods_and_never_pairs_across_revisions(
    kube_cluster: KubeCluster, engine_namespace: str
) -> None:
    ns = engine_namespace
    for name, role in (("dd-prefill-0", "prefill"), ("dd-decode-0", "decode")):
        kube_cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=engine_pod(name, role, "r1"))
    ips = {n: wait_for(f"{n} IP", lambda n=n: pod_ip(kube_cluster, ns, n)) for n in ("dd-prefill-0", "dd-decode-0")}
    fabric = Fabric()
    # Engine ids are the pod names: the contract's default, which push needs to dispatch both legs at once.
    prefill = SimEngine(
        fabric,
        "prefill",
        "nixl-push",
        engine_id="dd-prefill-0",
        host=ips["dd-prefill-0"],
        side_channel_port=5600,
        http_port=8000,
    )
    decode = SimEngine(
        fabric,
        "decode",
        "nixl-push",
        engine_id="dd-decode-0",
        host=ips["dd-decode-0"],
        side_channel_port=5600,
        http_port=8000,
    )
    port, admin = free_port(), free_port()
    frontend = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "disagg",
            "frontend",
            "--discovery",
            "kubernetes",
            "--namespace",
            ns,
            "--deployment",
            "dd",
            "--flow",
            "push",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--admin-port",
            str(admin),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async for _ in serve_engines([prefill, decode]):
            loop = asyncio.get_running_loop()

            async def until(what: str, probe: Any, timeout: float = 60) -> None:
                deadline = time.monotonic() + timeout
                while not await asyncio.get_running_loop().run_in_executor(None, probe):
                    if time.monotonic() > deadline:
                        raise TimeoutError(what)
                    await asyncio.sleep(0.5)

            await until("ready", lambda: get(url + "/ready")[0] == 200 if _up(url) else False)
            status, headers = await loop.run_in_executor(None, complete, url)
            assert status == 200
            assert (headers["X-Disagg-Prefill"], headers["X-Disagg-Decode"]) == ("dd-prefill-0", "dd-decode-0")
            assert decode.counters['vllm:prompt_tokens_by_source{source="external_kv_transfer"'] == 4

            # The decode pod moves to another pairing revision: the pair is gone, nothing is served across.
            kube_cluster.kubectl(
                "label", "pod", "-n", ns, "dd-decode-0", "disagg.dev/pairing-revision=r2", "--overwrite"
            )
            await until("not ready", lambda: get(url + "/ready")[0] == 503)
            status, _ = await loop.run_in_executor(None, complete, url)
            assert status == 503
            # A prefill of the new revision completes the pair again.
            kube_cluster.kubectl(
                "label", "pod", "-n", ns, "dd-prefill-0", "disagg.dev/pairing-revision=r2", "--overwrite"
            )
            await until("ready again", lambda: get(url + "/ready")[0] == 200)
            # Deleting the decode pod removes it from rotation.
            kube_cluster.kubectl("delete", "pod", "-n", ns, "dd-decode-0", "--wait=false")
            await until("decode gone", lambda: get(url + "/ready")[1]["engines"]["decode"] == 0)
            break
    finally:
        frontend.terminate()
        frontend.wait(10)


def _up(url: str) -> bool:
    try:
        urllib.request.urlopen(url + "/health", timeout=2).close()
    except OSError:
        return False
    return True
