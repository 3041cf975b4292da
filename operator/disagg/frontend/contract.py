"""What the operator renders on engine pods for the frontend to find and pair them (pure; the planner imports it).

The frontend discovers engines by watching pods. Everything it needs is on the pod itself, so a restarted frontend
rebuilds its view from the API server alone:

| Where | Name | Value |
| --- | --- | --- |
| label | `disagg.dev/deployment` | the DisaggDeployment's name (selector) |
| label | `disagg.dev/role` | `prefill`, `decode` or `render` (selector) |
| label | `disagg.dev/pairing-revision` | hash of what both pools must agree on; never pair across values |
| annotation | `disagg.dev/pairing-generation` | integer, larger for a newer pairing revision |
| annotation | `disagg.dev/http-port` | the engine's API port (default: the frontend's `--engine-port`) |
| annotation | `disagg.dev/kv-engine-id` | the engine's `kv_transfer_config.engine_id`; default: the pod name |
| annotation | `disagg.dev/kv-side-channel-port` | NIXL side-channel base port (`VLLM_NIXL_SIDE_CHANNEL_PORT`) |
| annotation | `disagg.dev/kv-tp-size`, `disagg.dev/kv-pp-size`, `disagg.dev/kv-dp-size` | parallel sizes |
| annotation | `disagg.dev/moriio-handshake-port`, `disagg.dev/moriio-notify-port` | MoRI-IO base ports |
| annotation | `vllm.ai/bootstrap-port` | Mooncake bootstrap port of a prefill engine (vllm-router reads the same) |

The NIXL side-channel host is the pod IP (the operator sets `VLLM_NIXL_SIDE_CHANNEL_HOST` from `status.podIP`).
A pod is an engine when it is Running, Ready, not terminating and has an IP. Engines without the revision label
pair only with engines without it (revision `""`), so a deployment rendered before this contract still serves.

A pod with the `disagg.dev/serving` readiness gate whose containers are all ready but whose gate the operator has
not set yet is a *candidate*: the frontend never routes requests through it, but it can be probed (the operator
admits it once a pair through it serves; docs/decisions.md D102).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from disagg.names import BOOTSTRAP_PORT_ANNOTATION, LABEL_DEPLOYMENT, LABEL_ROLE, SERVING_GATE

EngineRole = Literal["prefill", "decode", "render"]
ENGINE_ROLES: tuple[EngineRole, ...] = ("prefill", "decode", "render")

FlowName = Literal["pull", "push", "bidirectional", "mooncake", "moriio-read", "moriio-write"]
FLOWS: tuple[FlowName, ...] = ("pull", "push", "bidirectional", "mooncake", "moriio-read", "moriio-write")
"""The flows `disagg frontend --flow` drives; the planner picks one per connector."""
CONCURRENT_FLOWS: frozenset[FlowName] = frozenset({"push", "mooncake", "moriio-write"})
"""Flows that dispatch both legs at once (decode learns prefill's coordinates from the pod, not its reply)."""
HTTP_PORT = 8000
"""The frontend's OpenAI API port (`--port`)."""
ADMIN_PORT = 8001
"""The frontend's admin port (`--admin-port`): probes, drains, pairs. Never on the user-facing Service."""

LABEL_PAIRING_REVISION = "disagg.dev/pairing-revision"
ANNOTATION_PAIRING_GENERATION = "disagg.dev/pairing-generation"
ANNOTATION_HTTP_PORT = "disagg.dev/http-port"
ANNOTATION_KV_ENGINE_ID = "disagg.dev/kv-engine-id"
ANNOTATION_SIDE_CHANNEL_PORT = "disagg.dev/kv-side-channel-port"
ANNOTATION_TP_SIZE = "disagg.dev/kv-tp-size"
ANNOTATION_PP_SIZE = "disagg.dev/kv-pp-size"
ANNOTATION_DP_SIZE = "disagg.dev/kv-dp-size"
ANNOTATION_MORIIO_HANDSHAKE_PORT = "disagg.dev/moriio-handshake-port"
ANNOTATION_MORIIO_NOTIFY_PORT = "disagg.dev/moriio-notify-port"
ANNOTATION_BOOTSTRAP_PORT = BOOTSTRAP_PORT_ANNOTATION
CONTRACT_ANNOTATIONS: frozenset[str] = frozenset(
    {
        ANNOTATION_PAIRING_GENERATION,
        ANNOTATION_HTTP_PORT,
        ANNOTATION_KV_ENGINE_ID,
        ANNOTATION_SIDE_CHANNEL_PORT,
        ANNOTATION_TP_SIZE,
        ANNOTATION_PP_SIZE,
        ANNOTATION_DP_SIZE,
        ANNOTATION_MORIIO_HANDSHAKE_PORT,
        ANNOTATION_MORIIO_NOTIFY_PORT,
        ANNOTATION_BOOTSTRAP_PORT,
    }
)
"""The annotations of the contract, which the operator sets on engine pods: a pod annotation of the same key would
be replaced (api/object_rules.py refuses it)."""

DEFAULT_SIDE_CHANNEL_PORT = 5600
"""vLLM's default VLLM_NIXL_SIDE_CHANNEL_PORT."""
DEFAULT_MORIIO_HANDSHAKE_PORT = 6301
DEFAULT_MORIIO_NOTIFY_PORT = 61005
DEFAULT_BOOTSTRAP_PORT = 8998
"""vLLM's default VLLM_MOONCAKE_BOOTSTRAP_PORT."""


@dataclass(frozen=True)
class Engine:
    """One engine endpoint the frontend may send legs to. `key` is unique per engine incarnation."""

    key: str
    role: EngineRole
    url: str
    host: str
    name: str = ""
    revision: str = ""
    generation: int = 0
    engine_id: str | None = None
    side_channel_port: int = DEFAULT_SIDE_CHANNEL_PORT
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    moriio_handshake_port: int = DEFAULT_MORIIO_HANDSHAKE_PORT
    moriio_notify_port: int = DEFAULT_MORIIO_NOTIFY_PORT
    bootstrap_port: int = DEFAULT_BOOTSTRAP_PORT
    extra: Mapping[str, str] = field(default_factory=dict)
    candidate: bool = False
    """Up but waiting for the operator's admission: probed, never routed."""

    @property
    def moriio_zmq_address(self) -> str:
        """The peer address MoRI-IO parses out of request ids: `host:IP,handshake:PORT,notify:PORT`."""
        return f"host:{self.host},handshake:{self.moriio_handshake_port},notify:{self.moriio_notify_port}"


class ContractError(ValueError):
    """A pod carries a contract value the frontend cannot use; the message names the field."""


def engine_selector(deployment: str, role: EngineRole) -> dict[str, str]:
    """The label selector of one role's engine pods (the same stable labels the planner puts on them)."""
    return {LABEL_DEPLOYMENT: deployment, LABEL_ROLE: role}


def pairing_labels(revision: str) -> dict[str, str]:
    return {LABEL_PAIRING_REVISION: revision} if revision else {}


def engine_annotations(
    *,
    generation: int,
    http_port: int | None = None,
    engine_id: str | None = None,
    side_channel_port: int | None = None,
    tp_size: int = 1,
    pp_size: int = 1,
    dp_size: int = 1,
    moriio_ports: tuple[int, int] | None = None,
    bootstrap_port: int | None = None,
) -> dict[str, str]:
    """The annotations an engine pod carries; the planner renders these, `engine_from_pod` reads them back."""
    out = {
        ANNOTATION_PAIRING_GENERATION: str(generation),
        ANNOTATION_TP_SIZE: str(tp_size),
        ANNOTATION_PP_SIZE: str(pp_size),
        ANNOTATION_DP_SIZE: str(dp_size),
    }
    if http_port is not None:
        out[ANNOTATION_HTTP_PORT] = str(http_port)
    if engine_id is not None:
        out[ANNOTATION_KV_ENGINE_ID] = engine_id
    if side_channel_port is not None:
        out[ANNOTATION_SIDE_CHANNEL_PORT] = str(side_channel_port)
    if moriio_ports is not None:
        out[ANNOTATION_MORIIO_HANDSHAKE_PORT] = str(moriio_ports[0])
        out[ANNOTATION_MORIIO_NOTIFY_PORT] = str(moriio_ports[1])
    if bootstrap_port is not None:
        out[ANNOTATION_BOOTSTRAP_PORT] = str(bootstrap_port)
    return out


def _int(annotations: Mapping[str, str], name: str, default: int, low: int = 0, high: int = 65535) -> int:
    raw = annotations.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ContractError(f"annotation {name}={raw!r} is not an integer") from None
    if not low <= value <= high:
        raise ContractError(f"annotation {name}={value} is outside {low}..{high}")
    return value


def is_serving(pod: Mapping[str, Any]) -> bool:
    """Running, Ready, not being deleted, with an IP: the same rule vllm-router applies, plus termination."""
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if metadata.get("deletionTimestamp") or status.get("phase") != "Running" or not status.get("podIP"):
        return False
    conditions = status.get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def is_candidate(pod: Mapping[str, Any]) -> bool:
    """Running with every container ready and an IP, but not Ready only because the serving gate is not set yet."""
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if metadata.get("deletionTimestamp") or status.get("phase") != "Running" or not status.get("podIP"):
        return False
    gates = [g.get("conditionType") for g in (pod.get("spec") or {}).get("readinessGates") or []]
    if gates != [SERVING_GATE]:
        return False  # another gate (someone else's) may be what holds the pod back
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    containers = status.get("containerStatuses") or []
    return (
        conditions.get("ContainersReady") == "True"
        and bool(containers)
        and all(c.get("ready") for c in containers)
        and conditions.get(SERVING_GATE) != "True"
    )


def engine_from_pod(pod: Mapping[str, Any], default_port: int, role: EngineRole | None = None) -> Engine | None:
    """The engine a pod offers, or None when it is not (yet) a serving engine or candidate. Raises ContractError
    on bad values. `role` is the role whose selector matched the pod; without it the role label decides."""
    candidate = not is_serving(pod) and is_candidate(pod)
    if not is_serving(pod) and not candidate:
        return None
    metadata = pod.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    role = role or labels.get(LABEL_ROLE)  # type: ignore[assignment]
    if role not in ENGINE_ROLES:
        return None
    name = str(metadata.get("name", ""))
    host = str((pod.get("status") or {})["podIP"])
    port = _int(annotations, ANNOTATION_HTTP_PORT, default_port, 1)
    restarts = sum(int(c.get("restartCount", 0)) for c in (pod.get("status") or {}).get("containerStatuses") or [])
    # A restarted container keeps its pod, IP and name but not its NIXL state: it is a new engine for pairing.
    key = f"{metadata.get('uid') or name}/{restarts}"
    url_host = f"[{host}]" if ":" in host else host
    return Engine(
        key=key,
        role=role,
        url=f"http://{url_host}:{port}",
        host=host,
        name=name,
        revision=labels.get(LABEL_PAIRING_REVISION, ""),
        generation=_int(annotations, ANNOTATION_PAIRING_GENERATION, 0, 0, 2**62),
        engine_id=annotations.get(ANNOTATION_KV_ENGINE_ID) or name or None,
        side_channel_port=_int(annotations, ANNOTATION_SIDE_CHANNEL_PORT, DEFAULT_SIDE_CHANNEL_PORT, 1),
        tp_size=_int(annotations, ANNOTATION_TP_SIZE, 1, 1, 4096),
        pp_size=_int(annotations, ANNOTATION_PP_SIZE, 1, 1, 4096),
        dp_size=_int(annotations, ANNOTATION_DP_SIZE, 1, 1, 4096),
        moriio_handshake_port=_int(annotations, ANNOTATION_MORIIO_HANDSHAKE_PORT, DEFAULT_MORIIO_HANDSHAKE_PORT, 1),
        moriio_notify_port=_int(annotations, ANNOTATION_MORIIO_NOTIFY_PORT, DEFAULT_MORIIO_NOTIFY_PORT, 1),
        candidate=candidate,
        bootstrap_port=_int(annotations, ANNOTATION_BOOTSTRAP_PORT, DEFAULT_BOOTSTRAP_PORT, 1),
    )


STATIC_KEYS = {
    "engine-id",
    "revision",
    "generation",
    "side-channel-port",
    "tp",
    "pp",
    "dp",
    "handshake-port",
    "notify-port",
    "bootstrap-port",
    "name",
}


def engine_from_spec(role: EngineRole, spec: str, index: int) -> Engine:
    """A static engine from `URL[,key=value...]` (keys: see STATIC_KEYS), for tests and benchmarks."""
    url, *pairs = spec.split(",")
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ContractError(f"--{role} {spec!r}: the URL must start with http:// or https://")
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in STATIC_KEYS:
            raise ContractError(f"--{role} {spec!r}: {pair!r} is not one of {', '.join(sorted(STATIC_KEYS))}=VALUE")
        options[key] = value
    authority = url.split("://", 1)[1].split("/", 1)[0]
    host = authority[1:].split("]", 1)[0] if authority.startswith("[") else authority.split(":", 1)[0]
    mapped = {
        "side-channel-port": ANNOTATION_SIDE_CHANNEL_PORT,
        "tp": ANNOTATION_TP_SIZE,
        "pp": ANNOTATION_PP_SIZE,
        "dp": ANNOTATION_DP_SIZE,
        "handshake-port": ANNOTATION_MORIIO_HANDSHAKE_PORT,
        "notify-port": ANNOTATION_MORIIO_NOTIFY_PORT,
        "bootstrap-port": ANNOTATION_BOOTSTRAP_PORT,
        "generation": ANNOTATION_PAIRING_GENERATION,
    }
    annotations = {mapped[k]: v for k, v in options.items() if k in mapped}
    name = options.get("name") or f"{role}-{index}"
    return Engine(
        key=f"static/{role}/{index}",
        role=role,
        url=url,
        host=host,
        name=name,
        revision=options.get("revision", ""),
        generation=_int(annotations, ANNOTATION_PAIRING_GENERATION, 0, 0, 2**62),
        engine_id=options.get("engine-id"),
        side_channel_port=_int(annotations, ANNOTATION_SIDE_CHANNEL_PORT, DEFAULT_SIDE_CHANNEL_PORT, 1),
        tp_size=_int(annotations, ANNOTATION_TP_SIZE, 1, 1, 4096),
        pp_size=_int(annotations, ANNOTATION_PP_SIZE, 1, 1, 4096),
        dp_size=_int(annotations, ANNOTATION_DP_SIZE, 1, 1, 4096),
        moriio_handshake_port=_int(annotations, ANNOTATION_MORIIO_HANDSHAKE_PORT, DEFAULT_MORIIO_HANDSHAKE_PORT, 1),
        moriio_notify_port=_int(annotations, ANNOTATION_MORIIO_NOTIFY_PORT, DEFAULT_MORIIO_NOTIFY_PORT, 1),
        bootstrap_port=_int(annotations, ANNOTATION_BOOTSTRAP_PORT, DEFAULT_BOOTSTRAP_PORT, 1),
    )
