"""A minimal HTTPS client for the handful of API calls bring-up needs.

Bring-up must not depend on kubectl output formats or on a Kubernetes client
library, so it speaks plain HTTP+JSON with the admin client certificate.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

from .pki import Pki

TIMEOUT_SECONDS = 5.0


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


class Api:
    def __init__(self, server: str, pki: Pki, client: str = "admin") -> None:
        self.server = server.rstrip("/")
        ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
        ctx.load_cert_chain(str(pki.client_cert(client)), str(pki.client_key(client)))
        self._ctx = ctx

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=TIMEOUT_SECONDS) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise ApiError(err.code, err.read().decode(errors="replace")) from err
        return json.loads(raw) if raw.startswith((b"{", b"[")) else raw.decode()

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def json_patch(self, path: str, operations: list[dict[str, Any]]) -> Any:
        return self.request("PATCH", path, operations, "application/json-patch+json")

    def create(self, path: str, obj: dict[str, Any]) -> bool:
        """POST `obj`; False if it already exists (so callers stay idempotent)."""
        try:
            self.request("POST", path, obj)
        except ApiError as err:
            if err.status == 409:
                return False
            raise
        return True


def fetch(url: str, ctx: ssl.SSLContext | None = None) -> bytes | None:
    """Body of a 200 answer from `url`, or None on any error or other status."""
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=TIMEOUT_SECONDS) as resp:
            body: bytes = resp.read()
            return body if resp.status == 200 else None
    except (OSError, urllib.error.URLError):
        return None


def insecure_context() -> ssl.SSLContext:
    """For /healthz of the controller-manager and scheduler only.

    They serve with a self-signed certificate generated at start-up, and their
    health paths are anonymous; the probe only decides when to proceed.
    """
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
