"""Engine pods as the API server returns them, for the health core's tests."""

from __future__ import annotations

from typing import Any

from disagg.health.pods import EnginePod, engine_pod, gate_message
from disagg.names import SERVING_GATE


def pod(
    name: str,
    role: str,
    *,
    revision: str = "r1",
    generation: int = 1,
    restarts: int = 0,
    up: bool = True,
    gated: bool = True,
    admitted_at: int | None = 0,
    revoked: bool = False,
    created: str = "2026-01-01T00:00:00Z",
    started: str = "2026-01-01T00:00:10Z",
    template: str = "t1",
) -> dict[str, Any]:
    """`admitted_at`: the restart count the serving gate was set True for (None: not set). `revoked`: the gate
    was set False after a restart (with `admitted_at` None)."""
    conditions = [
        {"type": "ContainersReady", "status": "True" if up else "False"},
    ]
    if gated and admitted_at is not None:
        conditions.append({"type": SERVING_GATE, "status": "True", "message": gate_message(admitted_at, "test")})
    elif gated and revoked:
        conditions.append({"type": SERVING_GATE, "status": "False", "message": gate_message(restarts, "restarted")})
    ready = up and (not gated or admitted_at == restarts)
    conditions.append({"type": "Ready", "status": "True" if ready else "False"})
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            "labels": {
                "disagg.dev/role": role,
                "disagg.dev/pairing-revision": revision,
                "pod-template-hash": template,
            },
            "annotations": {"disagg.dev/pairing-generation": str(generation)},
        },
        "spec": {"readinessGates": [{"conditionType": SERVING_GATE}] if gated else []},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "conditions": conditions,
            "containerStatuses": [
                {"ready": up, "restartCount": restarts, "state": {"running": {"startedAt": started}}}
            ],
        },
    }


def engine(name: str, role: str, **options: Any) -> EnginePod:
    found = engine_pod(pod(name, role, **options))
    assert found is not None
    return found
