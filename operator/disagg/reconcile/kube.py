"""The operator's API calls: server-side apply, list, get, delete, status patches and events.

`Kube` builds REST paths from the table of kinds the operator touches (`disagg.names.KINDS`) instead of running
API discovery, speaks server-side apply directly, and turns error answers into `KubeError`. It sends requests
through a `Transport`: in production the official client's (`ApiClientTransport`: authentication, TLS and
connection pooling over aiohttp, the stack kopf uses); in the in-process tests a fake API server.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes.aio import client as k8s
from kubernetes.aio import config as k8s_config
from kubernetes.aio.client.exceptions import ApiException

from disagg.names import DISAGG_DEPLOYMENT, EVENT, KINDS, POD

from .children import FIELD_MANAGER

REQUEST_TIMEOUT_S = 60


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    body: bytes


@dataclass
class KubeError(Exception):
    """An API error with what the user needs: the status code, the reason and the server's message."""

    status: int
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.status} {self.reason}: {self.message}"

    @classmethod
    def from_response(cls, response: Response) -> KubeError:
        """The API server answers errors with a Status object; keep its reason and message."""
        text = response.body.decode(errors="replace")
        try:
            body = json.loads(text or "{}")
            return cls(response.status, str(body.get("reason") or response.reason), str(body.get("message") or text))
        except (ValueError, TypeError, AttributeError):
            return cls(response.status, response.reason, text)

    @property
    def transient(self) -> bool:
        return self.status in (0, 409, 429) or self.status >= 500

    @property
    def replaced(self) -> bool:
        """The uid sent with an apply no longer names the object at that name: it was deleted (409), or deleted
        and created again by someone else (422, the uid is immutable)."""
        if self.status == 409:
            return "uid mismatch" in self.message
        return self.status == 422 and "metadata.uid" in self.message and "immutable" in self.message

    @property
    def namespace_terminating(self) -> bool:
        return self.status == 403 and "because it is being terminated" in self.message

    @property
    def api_missing(self) -> bool:
        """The server does not serve the kind: nothing serves its group (a CRD that is not installed, answered by a
        bare "404 page not found"), or the group lacks that version or resource (a Status saying so)."""
        if self.status != 404:
            return False
        return "the server could not find the requested resource" in self.message or (
            self.message.strip() == "404 page not found"
        )


class Transport(Protocol):
    """One HTTP exchange with the API server. Error statuses are answers, not exceptions; an unreachable server
    raises KubeError with status 0."""

    async def request(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, content_type: str
    ) -> Response: ...

    async def close(self) -> None: ...


class ApiClientTransport:
    """The official client's transport: its configuration, authentication and aiohttp connection pool."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self._api = api_client

    async def request(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, content_type: str
    ) -> Response:
        serialized = await self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query,
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = await self._api.call_api(*serialized, _request_timeout=REQUEST_TIMEOUT_S)
            data = await response.read()
        except ApiException as exc:
            text = exc.body if isinstance(exc.body, bytes) else str(exc.body or "").encode()
            return Response(exc.status or 0, str(exc.reason), text)
        except OSError as exc:  # connection refused, reset, DNS: worth retrying
            raise KubeError(0, "ConnectionError", str(exc)) from None
        return Response(response.status, str(response.reason), data)

    async def close(self) -> None:
        await self._api.close()


def _base(api_version: str) -> str:
    return f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"


def path(kind: str, namespace: str | None, name: str | None = None) -> str:
    """The REST path of a kind (KINDS names every kind the operator touches), a namespace and a name."""
    location = _base(KINDS[kind].api_version)
    if namespace:
        location += f"/namespaces/{namespace}"
    location += f"/{KINDS[kind].plural}"
    if name:
        location += f"/{name}"
    return location


class Kube:
    """The operator's API calls. One instance per process; safe to share between reconcile workers."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    @classmethod
    async def connect(cls, kubeconfig: str | None = None) -> Kube:
        """The pod's service account, else `kubeconfig` or $KUBECONFIG (read now, not at import)."""
        configuration = k8s.Configuration()
        kubeconfig = kubeconfig or os.environ.get("KUBECONFIG")
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            await k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        return cls(ApiClientTransport(k8s.ApiClient(configuration)))

    @property
    def transport(self) -> Transport:
        return self._transport

    async def close(self) -> None:
        await self._transport.close()

    async def _request(
        self,
        method: str,
        location: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        response = await self._transport.request(method, location, query or [], body, content_type)
        if response.status >= 400:
            raise KubeError.from_response(response)
        return json.loads(response.body) if response.body else None

    async def apply(self, obj: dict[str, Any], manager: str = FIELD_MANAGER) -> dict[str, Any]:
        """Server-side apply with force: our manager takes back fields someone else changed (drift correction)."""
        metadata = obj["metadata"]
        result: dict[str, Any] = await self._request(
            "PATCH",
            path(obj["kind"], metadata.get("namespace"), metadata["name"]),
            query=[("fieldManager", manager), ("force", "true")],
            body=obj,
            content_type="application/apply-patch+yaml",
        )
        return result

    async def list(self, kind: str, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        result = await self._request("GET", path(kind, namespace), query=[("labelSelector", label_selector)])
        items: list[dict[str, Any]] = result.get("items", [])
        for item in items:  # list items omit these; children are handled as whole objects
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", KINDS[kind].api_version)
        return items

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await self._request("GET", path(kind, namespace, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return result

    async def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        """Delete in the background; gone already (404) or replaced by a same-named object (409 on the UID
        precondition) both mean there is nothing of ours left to delete."""
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}  # never delete a same-named object created after our read
        try:
            await self._request("DELETE", path(kind, namespace, name), body=body)
        except KubeError as exc:
            if exc.status not in (404, 409):
                raise

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        await self._request(
            "PATCH",
            path(DISAGG_DEPLOYMENT.name, namespace, name) + "/status",
            body={"status": status},
            content_type="application/merge-patch+json",
        )

    async def patch_pod_condition(self, namespace: str, name: str, uid: str, condition: dict[str, Any]) -> None:
        """Set one pod condition (the serving readiness gate), merged by type with the kubelet's. The uid guards
        against a same-named pod created after our read: such a patch fails with 409."""
        await self._request(
            "PATCH",
            path(POD.name, namespace, name) + "/status",
            body={"metadata": {"uid": uid}, "status": {"conditions": [condition]}},
            content_type="application/strategic-merge-patch+json",
        )

    async def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        await self._request("POST", path(EVENT.name, namespace), body=event)
