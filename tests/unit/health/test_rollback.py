"""Rollback: the revision that serves, and its pod template as its ReplicaSet kept it."""

from __future__ import annotations

from typing import Any

from disagg.health.rollback import rollback_revision, template_of
from tests.unit.health.podfactory import engine


def replica_set(revision: str, number: int, image: str) -> dict[str, Any]:
    return {
        "metadata": {"annotations": {"deployment.kubernetes.io/revision": str(number)}},
        "spec": {
            "template": {
                "metadata": {"labels": {"disagg.dev/pairing-revision": revision, "pod-template-hash": f"h{number}"}},
                "spec": {"containers": [{"image": image}]},
            }
        },
    }


def test_the_revision_to_go_back_to_is_the_one_serving_in_both_pools() -> None:
    pods = [
        engine("p-old", "prefill", revision="old"),
        engine("d-old", "decode", revision="old"),
        engine("p-new", "prefill", revision="new", admitted_at=None),
        engine("d-lone", "decode", revision="other"),
    ]
    assert rollback_revision(pods, "new") == "old"
    assert rollback_revision(pods[2:], "new") is None


def test_the_template_is_the_newest_replica_set_of_that_revision_without_its_hash() -> None:
    sets = [replica_set("old", 1, "v1"), replica_set("old", 3, "v1-patched"), replica_set("new", 4, "v2")]
    template = template_of(sets, "old")
    assert template is not None
    assert template["spec"]["containers"][0]["image"] == "v1-patched"
    assert template["metadata"]["labels"] == {"disagg.dev/pairing-revision": "old"}
    assert template_of(sets, "gone") is None
