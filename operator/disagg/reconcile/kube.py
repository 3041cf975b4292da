"""The operator's API calls: server-side apply, list, get, delete, status patches, events, watches and the lease.

`Kube` builds REST paths from the table of kinds the operator touches (`disagg.names.KINDS`) instead of running
API discovery, speaks server-side apply directly, and turns error answers into `KubeError`. It sends requests
through a `Transport`: in production the official client's configuration and authentication over aiohttp, the
stack kopf uses (`ApiClientTransport`), behind the client-side rate limits (`ratelimit.Throttled`); in the
in-process tests a fake API server.

Every write first asks the write gate (`may_write`, the leader elector's, D123) and raises `NotLeader` without
sending anything when the replica does not hold the lease.
"""

from __future__ import annotations

import builtins
import json
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from kubernetes.aio import client as k8s
from kubernetes.aio import config as k8s_config

from disagg.names import DISAGG_DEPLOYMENT, EVENT, KINDS, POD

from . import codec
from .children import FIELD_MANAGER

REQUEST_TIMEOUT_S = 60
WATCH_READ_TIMEOUT_S = 150
"""A watch that sends nothing for this long is dead: the API server sends a bookmark about every minute."""


class NotLeader(Exception):
    """This replica may not write: it does not hold the lease. Not a KubeError:
    nothing about it belongs in a DisaggDeployment's status, and no pass should count it as a failure."""


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
    """HTTP exchanges with the API server. Error statuses are answers, not exceptions; an unreachable server
    raises KubeError with status 0."""

    async def request(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, content_type: str
    ) -> Response: ...

    def watch(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch request (`watch=1` is in the query), parsed, until the server ends the stream.
        An error answer to the request itself raises KubeError."""
        ...

    async def close(self) -> None: ...


class ApiClientTransport:
    """The official client's configuration and authentication (kubeconfig or service account, token refresh, TLS)
    on an aiohttp session of our own: requests go out as JSON we serialize once, and watch streams are read
    line by line. `connections` bounds the pool (the rate limiter bounds requests in flight below it)."""

    def __init__(self, api_client: k8s.ApiClient, connections: int = 100) -> None:
        self._api = api_client
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            rest = self._api.rest_client
            connector = aiohttp.TCPConnector(limit=self._connections, ssl=rest.ssl_context)
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False)
        return self._session

    async def _prepare(
        self, method: str, path: str, query: list[tuple[str, str]], content_type: str
    ) -> tuple[str, dict[str, str]]:
        _, url, headers, _, _ = await self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query,
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        return url, headers

    def _options(self) -> dict[str, Any]:
        configuration = self._api.configuration
        options: dict[str, Any] = {}
        if configuration.proxy:
            options["proxy"] = configuration.proxy
        if configuration.tls_server_name:
            options["server_hostname"] = configuration.tls_server_name
        return options

    async def request(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, content_type: str
    ) -> Response:
        url, headers = await self._prepare(method, path, query, content_type)
        data = codec.dumps(body) if body is not None else None
        try:
            async with self._client().request(
                method,
                url,
                headers=headers,
                data=data,
                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
                **self._options(),
            ) as response:
                return Response(response.status, str(response.reason), await response.read())
        except (TimeoutError, OSError, aiohttp.ClientError) as exc:  # worth retrying
            raise KubeError(0, "ConnectionError", str(exc) or type(exc).__name__) from None

    async def watch(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[dict[str, Any]]:
        url, headers = await self._prepare("GET", path, query, "application/json")
        # No total timeout: the server ends the stream (timeoutSeconds); a silent connection is caught by the
        # read timeout, well above the server's bookmark interval.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=REQUEST_TIMEOUT_S, sock_read=WATCH_READ_TIMEOUT_S)
        try:
            async with self._client().get(url, headers=headers, timeout=timeout, **self._options()) as response:
                if response.status >= 400:
                    raise KubeError.from_response(
                        Response(response.status, str(response.reason), await response.read())
                    )
                pending = b""
                async for chunk in response.content.iter_any():
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield codec.loads(line)
        except (TimeoutError, OSError, aiohttp.ClientError) as exc:
            raise KubeError(0, "ConnectionError", str(exc) or type(exc).__name__) from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
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


async def configuration(kubeconfig: str | None = None) -> k8s.Configuration:
    """The pod's service account, else `kubeconfig` or $KUBECONFIG (read now, not at import)."""
    config = k8s.Configuration()
    kubeconfig = kubeconfig or os.environ.get("KUBECONFIG")
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
        k8s_config.load_incluster_config(client_configuration=config)
    else:
        await k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=config)
    return config


class Kube:
    """The operator's API calls. One instance per connection pool; safe to share between reconcile workers."""

    def __init__(self, transport: Transport, may_write: Callable[[], bool] | None = None) -> None:
        self._transport = transport
        self.may_write = may_write
        """The write gate: None lets every write through (no leader election)."""

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, connections: int = 100) -> Kube:
        """The pod's service account, else `kubeconfig` or $KUBECONFIG."""
        config = await configuration(kubeconfig)
        return cls(ApiClientTransport(k8s.ApiClient(config), connections))

    @property
    def transport(self) -> Transport:
        return self._transport

    async def close(self) -> None:
        await self._transport.close()

    def check_may_write(self, what: str) -> None:
        """Raise NotLeader unless the write gate lets this replica write (also for writes that do not go to the API
        server, such as the serving check's drains at the frontend)."""
        if self.may_write is not None and not self.may_write():
            raise NotLeader(f"{what}: this replica does not hold the lease")

    async def _request(
        self,
        method: str,
        location: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        if method != "GET":
            self.check_may_write(f"{method} {location}")
        response = await self._transport.request(method, location, query or [], body, content_type)
        if response.status >= 400:
            raise KubeError.from_response(response)
        return codec.loads(response.body) if response.body else None

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
        items, _, _ = await self.list_page(kind, namespace, label_selector)
        return items

    async def list_page(
        self, kind: str, namespace: str | None, label_selector: str, limit: int = 0, after: str = ""
    ) -> tuple[builtins.list[dict[str, Any]], str | None, str]:
        """One page of a list (every namespace when `namespace` is None): the items (with kind and apiVersion,
        which list items omit), the list's resource version and the token of the next page ("" after the last)."""
        query = [("labelSelector", label_selector)]
        if limit:
            query.append(("limit", str(limit)))
        if after:
            query.append(("continue", after))
        result = await self._request("GET", path(kind, namespace), query=query)
        items: list[dict[str, Any]] = result.get("items", [])
        for item in items:  # children are handled as whole objects
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", KINDS[kind].api_version)
        metadata = result.get("metadata") or {}
        return items, metadata.get("resourceVersion"), str(metadata.get("continue") or "")

    def watch(
        self, kind: str, namespace: str | None, label_selector: str, since: str | None, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        """Events of `kind` after resource version `since`, with bookmarks, until the server ends the stream."""
        query = [
            ("watch", "1"),
            ("allowWatchBookmarks", "true"),
            ("labelSelector", label_selector),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if since:
            query.append(("resourceVersion", since))
        return self._transport.watch(path(kind, namespace), query)

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        metadata = obj["metadata"]
        result: dict[str, Any] = await self._request("POST", path(obj["kind"], metadata.get("namespace")), body=obj)
        return result

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT: an update that fails with 409 unless metadata.resourceVersion is still the stored one."""
        metadata = obj["metadata"]
        result: dict[str, Any] = await self._request(
            "PUT", path(obj["kind"], metadata.get("namespace"), metadata["name"]), body=obj
        )
        return result

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

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch the status; returns the DisaggDeployment as stored afterwards."""
        result: dict[str, Any] = await self._request(
            "PATCH",
            path(DISAGG_DEPLOYMENT.name, namespace, name) + "/status",
            body={"status": status},
            content_type="application/merge-patch+json",
        )
        return result

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
