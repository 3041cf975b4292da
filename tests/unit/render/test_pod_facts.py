"""Pod facts of the engines that only the golden files used to pin (found by mutation testing): the KV disk tier's
volume is the one the engine mounts, for each kind of source, and a pool's CPU request reaches its pods."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.rendering import find, pod_templates
from tests.unit.render.test_wiring_facts import variant

SOURCES = {
    "emptyDir": ("{emptyDir: {sizeLimit: 200Gi}}", {"emptyDir": {"sizeLimit": "200Gi"}}),
    "emptyDir without a limit": ("{emptyDir: {}}", {"emptyDir": {}}),
    "persistentVolumeClaim": (
        "{persistentVolumeClaim: {claimName: kv}}",
        {"persistentVolumeClaim": {"claimName": "kv"}},
    ),
    "hostPath": ("{hostPath: {path: /mnt/kv}}", {"hostPath": {"path": "/mnt/kv", "type": "DirectoryOrCreate"}}),
}


def prefill_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = pod_templates(find(objects, "Deployment", "v-prefill"))[0]["spec"]
    return spec


@pytest.mark.parametrize(("volume", "expected"), SOURCES.values(), ids=SOURCES.keys())
def test_the_disk_tier_volume_is_the_one_the_engine_mounts(volume: str, expected: dict[str, Any]) -> None:
    body = f"  kvCache:\n    cpu: {{size: 8Gi}}\n    disk: {{pools: [prefill], volume: {volume}}}\n"
    pod = prefill_pod(variant(body))
    disk = [v for v in pod["volumes"] if v.get("name") == "kv-disk"]
    assert disk == [{"name": "kv-disk", **expected}]
    mounts = {m["name"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
    assert "kv-disk" in mounts


def test_a_pool_s_cpu_request_reaches_its_engine_containers() -> None:
    pod = prefill_pod(variant("  prefill: {resources: {cpu: '12', memory: 64Gi}}\n"))
    assert pod["containers"][0]["resources"]["requests"]["cpu"] == "12"
