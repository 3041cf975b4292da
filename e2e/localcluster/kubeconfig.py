"""Kubeconfig files for the local cluster's users."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from .pki import Pki

CLUSTER_NAME = "disagg-e2e"


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write(path: Path, server: str, pki: Pki, client: str) -> Path:
    """Write a kubeconfig for `client` (a pki.CLIENTS key).

    Certificates are embedded rather than referenced so the file keeps working
    when copied elsewhere, e.g. into a container or another tool's config.
    """
    user = f"{CLUSTER_NAME}-{client}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority-data": _b64(pki.ca_cert)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(pki.client_cert(client)),
                    "client-key-data": _b64(pki.client_key(client)),
                },
            }
        ],
        "contexts": [{"name": user, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": user,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
