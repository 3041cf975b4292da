"""The informers' cache answers whether a watch event changed anything: only then is the owner reconciled."""

from __future__ import annotations

from typing import Any

from disagg.reconcile.cache import Cache


def pod(name: str, version: str) -> dict[str, Any]:
    labels = {"disagg.dev/deployment": "m", "app.kubernetes.io/managed-by": "disagg-operator"}
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "resourceVersion": version, "labels": labels}}


def test_a_deletion_changes_the_cache_only_when_it_removes_what_is_stored() -> None:
    cache = Cache()
    assert cache.put("Pod", pod("p", "10"))
    assert not cache.delete("Pod", "ns", "missing", "11")  # nothing stored: nothing changed
    assert not cache.delete("Pod", "ns", "p", "9")  # older than what is stored: it was created again since
    assert cache.get("Pod", "ns", "p") is not None
    assert cache.delete("Pod", "ns", "p", "12")
    assert cache.get("Pod", "ns", "p") is None
    assert not cache.delete("Pod", "ns", "p", "12")  # the same deletion again
