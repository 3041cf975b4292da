"""A pass never fails on what the pure core does with a spec (D73): an exception there is reported like an invalid
spec, with its message, and the pass ends. Regression: the exception escaped the pass, so the DisaggDeployment got
no status at all and was retried with backoff forever."""

from __future__ import annotations

import logging

import pytest
import yaml

from disagg.reconcile import rendered
from tests.support.reconciling import MINIMAL, deployment_document, harness


async def test_an_exception_in_the_pure_core_becomes_an_invalid_status(
    monkeypatch: object, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*_: object, **__: object) -> object:
        raise ZeroDivisionError("division by zero in the plan")

    h = harness(deployment_document(MINIMAL))
    monkeypatch.setattr(rendered, "build_plan", broken)  # type: ignore[attr-defined]
    with caplog.at_level(logging.ERROR, logger="disagg.reconcile"):
        assert await h.reconcile() == "invalid"
    # The log names the DisaggDeployment and keeps the traceback, for the bug report the status asks for.
    [record] = [r for r in caplog.records if r.name == "disagg.reconcile" and r.levelno == logging.ERROR]
    assert record.getMessage() == "rendering ns/m failed" and record.exc_info is not None
    spec_valid = h.condition("SpecValid")
    assert spec_valid["status"] == "False"
    assert spec_valid["message"] == (
        "spec: the operator could not render this spec (ZeroDivisionError: division by zero in the plan). Fix: this "
        "is a bug in disagg-operator; please report it with the spec. Until it is fixed, change the setting the "
        "message points at."
    )
    assert h.status["phase"] == "Invalid"
    assert [e["reason"] for e in h.events()] == ["InvalidSpec"]
    assert h.children() == {}


async def test_the_spec_that_used_to_crash_the_pass_is_reconciled() -> None:
    document = deployment_document(MINIMAL)
    document["spec"]["engine"] = {"env": [{"name": "GREETING", "value": "hello \U0001f600"}]}
    h = harness(yaml.safe_load(yaml.safe_dump(document)))
    assert await h.reconcile() == "ok"
    container = h.children()[("Deployment", "m-decode")]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "GREETING", "value": "hello \U0001f600"} in container["env"]
