"""The real kube-apiserver against the table of bad specs (tests/support/bad_specs.py): every case with a CEL rule
is refused with that rule's field and message (or the schema's, for a duplicate list key), every other one is
accepted (only the operator's rules can see it), and every valid neighbour is accepted. Server-side dry runs:
nothing is stored, no operator is needed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.bad_specs import CASES, BadSpec

from e2e.localcluster.testing import KubeCluster
from e2e.operator_support import install_crd

pytestmark = pytest.mark.e2e
NAMESPACE = "default"


@pytest.fixture(scope="module")
def crd_installed(kube_cluster: KubeCluster) -> KubeCluster:
    install_crd(kube_cluster)
    return kube_cluster


def named(document: dict[str, Any], name: str, keep_name: bool) -> dict[str, Any]:
    """The document in our namespace, under a name that tells the cases apart (unless the name is the case)."""
    metadata = document["metadata"]
    document["metadata"] = {**metadata, "name": metadata["name"] if keep_name else name, "namespace": NAMESPACE}
    return document


def dry_run_create(kube: KubeCluster, documents: list[dict[str, Any]]) -> tuple[set[str], dict[str, str]]:
    """Create every document with a server-side dry run; returns (names accepted, name -> error text)."""
    listing = json.dumps({"apiVersion": "v1", "kind": "List", "items": documents})
    done = kube.run("create", "--dry-run=server", "-o", "name", "-f", "-", stdin=listing)
    accepted = {line.rsplit("/", 1)[-1] for line in done.stdout.split() if line.strip()}
    errors: dict[str, str] = {}
    for line in done.stderr.splitlines():
        found = re.search(r'DisaggDeployment\.disagg\.dev "([^"]+)" is invalid: (.*)$', line)
        if found:
            errors[found.group(1)] = found.group(2)
    return accepted, errors


def cases() -> Iterator[tuple[str, BadSpec]]:
    for index, case in enumerate(CASES):
        yield f"case-{index}", case


def test_the_api_server_refuses_exactly_the_cases_with_a_cel_rule(crd_installed: KubeCluster) -> None:
    documents = {name: named(case.document(), name, case.metadata is not None) for name, case in cases()}
    accepted, errors = dry_run_create(crd_installed, list(documents.values()))
    wrong = []
    for name, case in cases():
        stored = documents[name]["metadata"]["name"]
        if case.schema_refusal is not None:
            path, message = case.schema_refusal
            if f"{path}: {message}" not in (errors.get(stored) or ""):
                wrong.append(f"{case.id}: expected {path}: {message}, got {errors.get(stored)!r}")
            continue
        if case.cel is None:
            if stored not in accepted:
                wrong.append(f"{case.id}: CEL has no rule for it, yet the server said {errors.get(stored)!r}")
            continue
        error = errors.get(stored)
        if error is None:
            wrong.append(f"{case.id}: accepted, but CEL should refuse it at {case.cel!r}")
            continue
        assert case.cel_message is not None
        where = f"{case.cel}: Invalid value" if case.cel else "Invalid value"
        if where not in error or case.cel_message not in error:
            wrong.append(f"{case.id}: expected {where!r} with {case.cel_message!r}, got {error!r}")
    assert not wrong, "\n".join(wrong)


def test_the_api_server_accepts_every_valid_neighbour(crd_installed: KubeCluster) -> None:
    documents = [
        named(case.ok_document(), f"ok-{index}", case.ok_metadata is not None) for index, case in enumerate(CASES)
    ]
    accepted, errors = dry_run_create(crd_installed, documents)
    assert not errors, errors
    assert {document["metadata"]["name"] for document in documents} <= accepted
