"""MoRI-IO engine registration (pure): the heartbeat payload vLLM's MoRIIOConnector sends to the router.

vLLM 0.32/0.33 (`moriio_connector.py` `_start_heartbeat`, `moriio_heartbeat.py`): rank 0 of each engine started
with `proxy_ip`/`proxy_ping_port` sends, every 3 s over a ZMQ DEALER socket, one msgpack map
`{type: "P"|"D", http_address: "IP:PORT", zmq_address: "host:IP,handshake:PORT,notify:PORT", dp_size, tp_size,
transfer_mode: "READ"|"WRITE"}`. The frontend binds the matching ROUTER socket and turns each payload into an
engine; an engine not heard from for `REGISTRATION_TTL` seconds is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .contract import ContractError, Engine, EngineRole

PING_INTERVAL = 3.0
"""`MoRIIOConstants.PING_INTERVAL`."""
REGISTRATION_TTL = 10 * PING_INTERVAL
_REQUIRED = ("type", "http_address", "zmq_address", "dp_size", "tp_size", "transfer_mode")


def parse_zmq_address(address: str) -> tuple[str, int, int]:
    """`host:IP,handshake:PORT,notify:PORT` -> (host, handshake port, notify port), as `parse_moriio_zmq_address`."""
    parts: dict[str, str] = {}
    for segment in address.split(","):
        key, _, value = segment.partition(":")
        parts[key.strip()] = value.strip()
    try:
        return parts["host"], int(parts["handshake"]), int(parts["notify"])
    except (KeyError, ValueError):
        raise ContractError(f"zmq_address {address!r} is not 'host:IP,handshake:PORT,notify:PORT'") from None


def engine_from_registration(payload: Any) -> tuple[Engine, str]:
    """The engine a registration announces and its transfer mode (READ or WRITE)."""
    if not isinstance(payload, Mapping):
        raise ContractError("a MoRI-IO registration is a map")
    missing = [key for key in _REQUIRED if key not in payload]
    if missing:
        raise ContractError(f"a MoRI-IO registration lacks {', '.join(missing)}")
    kind = payload["type"]
    if kind not in ("P", "D"):
        raise ContractError(f"registration type {kind!r} is neither P nor D")
    http = str(payload["http_address"])
    host, handshake, notify = parse_zmq_address(str(payload["zmq_address"]))
    mode = str(payload["transfer_mode"]).upper()
    if mode not in ("READ", "WRITE"):
        raise ContractError(f"transfer_mode {mode!r} is neither READ nor WRITE")
    role: EngineRole = "prefill" if kind == "P" else "decode"
    engine = Engine(
        key=f"moriio/{role}/{http}",
        role=role,
        url=f"http://{http}",
        host=host,
        name=http,
        tp_size=int(payload["tp_size"]),
        dp_size=int(payload["dp_size"]),
        moriio_handshake_port=handshake,
        moriio_notify_port=notify,
    )
    return engine, mode
