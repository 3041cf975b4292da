"""The informers' cache answers whether a watch event changed anything: only then is the owner reconciled."""

from __future__ import annotations

from typing import Any

from disagg.reconcile.cache import Cache
from disagg.reconcile.children import FIELD_MANAGER, REPLICAS_MANAGER
from disagg.reconcile.ownership import manages_replicas


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


def test_a_deletion_of_a_kind_the_cache_never_held_changes_nothing() -> None:
    """A watch can report a deletion before the cache has held any object of that kind."""
    cache = Cache()
    assert not cache.delete("Pod", "ns", "p", "1")
    assert cache.count("Pod") == 0


def test_a_relist_drops_what_it_no_longer_holds_unless_it_was_written_since() -> None:
    """The informer's relist after a lost watch: objects the list lacks are gone, except one written after the list
    was taken (its resourceVersion is newer), wherever it sits among the stored objects."""
    cache = Cache()
    for name, version in (("a", "10"), ("newer", "30"), ("b", "11"), ("c", "12")):
        assert cache.put("Pod", pod(name, version))
    changed = cache.replace("Pod", "ns", [pod("c", "12")], "20")
    assert [name for name in ("a", "newer", "b", "c") if cache.get("Pod", "ns", name) is not None] == ["newer", "c"]
    assert changed == {("ns", "m")}
    assert (cache.count("Pod"), cache.count()) == (2, 2)


def test_a_namespaced_relist_leaves_other_namespaces_alone() -> None:
    cache = Cache()
    other = pod("x", "5")
    other["metadata"]["namespace"] = "other"
    assert cache.put("Pod", other) and cache.put("Pod", pod("a", "6"))
    assert cache.replace("Pod", "ns", [], "20") == {("ns", "m")}
    assert cache.get("Pod", "other", "x") is not None and cache.get("Pod", "ns", "a") is None
    assert cache.replace("Pod", None, [], "20") == {("other", "m")}  # every namespace
    assert cache.count() == 0


def test_a_relist_that_changes_nothing_reports_no_owner() -> None:
    cache = Cache()
    assert cache.put("Pod", pod("a", "6"))
    assert cache.replace("Pod", "ns", [pod("a", "6")], "20") == set()


def test_the_count_is_per_kind_or_over_every_kind() -> None:
    cache = Cache()
    assert (cache.count(), cache.count("Pod")) == (0, 0)
    assert cache.put("Pod", pod("a", "1")) and cache.put("Pod", pod("b", "2"))
    service = {**pod("a", "3"), "kind": "Service"}
    assert cache.put("Service", service)
    assert (cache.count("Pod"), cache.count("Service"), cache.count("Secret"), cache.count()) == (2, 1, 0, 3)
    assert cache.delete("Pod", "ns", "a")
    assert (cache.count("Pod"), cache.count()) == (1, 2)


def test_an_object_relabelled_or_unlabelled_is_no_longer_owned_by_its_old_deployment() -> None:
    cache = Cache()
    assert cache.put("Pod", pod("p", "1"))
    relabelled = pod("p", "2")
    relabelled["metadata"]["labels"]["disagg.dev/deployment"] = "n"
    assert cache.put("Pod", relabelled)
    assert cache.owned("Pod", "ns", "m") == [] and cache.versions("Pod", "ns", "m") == ()
    assert [obj["metadata"]["name"] for obj in cache.owned("Pod", "ns", "n")] == ["p"]
    unlabelled = pod("p", "3")
    del unlabelled["metadata"]["labels"]["disagg.dev/deployment"]
    assert cache.put("Pod", unlabelled)
    assert cache.owned("Pod", "ns", "n") == [] and cache.get("Pod", "ns", "p") is not None


def test_a_cached_object_still_says_which_manager_holds_its_replica_count() -> None:
    """The cache keeps of managedFields only who manages the object and whether each holds spec.replicas: the
    replicas hand-over asks no more, and only the answer to that must survive the trimming."""
    deployment = {**pod("d", "1"), "kind": "Deployment"}
    deployment["metadata"]["managedFields"] = [
        {"manager": REPLICAS_MANAGER, "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
        {"manager": FIELD_MANAGER, "operation": "Apply", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {}}}}},
    ]
    cache = Cache()
    assert cache.put("Deployment", deployment)
    cached = cache.get("Deployment", "ns", "d")
    assert cached is not None
    assert manages_replicas(cached, REPLICAS_MANAGER) and not manages_replicas(cached, FIELD_MANAGER)
    assert [entry["manager"] for entry in cached["metadata"]["managedFields"]] == [REPLICAS_MANAGER, FIELD_MANAGER]


def test_a_relist_reports_the_owners_of_objects_it_added_or_changed() -> None:
    """Objects a relist brings that the cache lacked, or holds at another version, are changes for their owner
    (the informer reconciles it); an object without the owner label belongs to nobody."""
    cache = Cache()
    assert cache.put("Pod", pod("a", "6"))
    stranger = pod("s", "7")
    del stranger["metadata"]["labels"]["disagg.dev/deployment"]
    assert cache.replace("Pod", "ns", [pod("a", "6"), pod("b", "8"), stranger], "20") == {("ns", "m")}
    assert cache.get("Pod", "ns", "b") is not None
    assert cache.replace("Pod", "ns", [pod("a", "9"), pod("b", "8"), stranger], "21") == {("ns", "m")}
    assert cache.replace("Pod", "ns", [pod("a", "9"), pod("b", "8"), stranger], "22") == set()
