"""Registering the kwok-managed fake nodes and waiting for them to be Ready."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from .config import NODES_FILE
from .kubeapi import Api


def load(path: Path = NODES_FILE) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    if not all(d.get("kind") == "Node" for d in docs):
        raise ValueError(f"{path} must contain only Node objects")
    return docs


def register(api: Api, manifests: list[dict[str, Any]]) -> int:
    """Create missing nodes; returns how many were new.

    Status (capacity) is accepted on create for Nodes, which is how the fake
    GPUs get there; kwok's node-initialize stage keeps it.
    """
    return sum(api.create("/api/v1/nodes", m) for m in manifests)


def is_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def not_ready(api: Api, names: set[str]) -> set[str]:
    items = api.get("/api/v1/nodes")["items"]
    ready = {n["metadata"]["name"] for n in items if is_ready(n)}
    return names - ready


def wait_ready(api: Api, names: set[str], timeout_seconds: float) -> None:
    deadline = time.monotonic() + timeout_seconds
    pending = not_ready(api, names)
    while pending:
        if time.monotonic() > deadline:
            raise TimeoutError(f"nodes not Ready after {timeout_seconds:.0f}s: {sorted(pending)}")
        time.sleep(0.5)
        pending = not_ready(api, names)
