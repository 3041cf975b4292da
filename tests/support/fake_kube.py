"""An in-process fake of the Kubernetes API server, for the REST calls `disagg.reconcile.kube.Kube` makes.

It plugs in as Kube's Transport, so the reconciler runs with its real client code against it in milliseconds.
It is faithful where the reconciler depends on the API server's semantics (each point is checked against a real
kube-apiserver by e2e/test_fake_kube_contract.py, from the same scenarios as tests/unit/reconcile/test_fake_kube.py):

- server-side apply (PATCH, application/apply-patch+yaml, fieldManager, force): creates or updates; every manager
  owns exactly the fields it sent last (metadata.managedFields, FieldsV1); a field a manager stops sending is
  removed unless another manager owns it too, and then server defaults apply again (a Deployment without
  spec.replicas has 1); equal values are co-owned; a different value owned by another manager is a 409 conflict
  unless forced, and forcing takes the field over; an apply that changes nothing writes nothing;
- lists are atomic, except the lists the API keys by a field (ownerReferences by uid; containers, env, volumes,
  resource claims by name; volume mounts by path; ports by number and protocol), which merge item by item;
- an apply carrying metadata.uid is a precondition: 409 when no object exists, 422 (uid immutable) when the object
  at that name has another uid;
- server-set metadata: uid, one resourceVersion counter for every write, generation (bumped by changes outside
  metadata and status, for the kinds that have one), creationTimestamp; status is written only through /status;
- update by another client (`update`), e.g. `kubectl edit`, an HPA or a controller: it takes the fields it
  changes (operation Update), without conflicts, as the real server does;
- GET, list with label selectors (=, ==, !=, existence), in one namespace or all of them; merge patches of
  /status, and strategic merge patches of a pod's /status (conditions merged by type, a metadata.uid precondition:
  409 on mismatch); Events with generateName; PUT with a resourceVersion precondition (409 when it is stale), as
  Leases use;
- watches (`watch`, the Transport's streaming call) from a resource version: every change after it in order, as
  ADDED/MODIFIED/DELETED with the object as stored then; a change that makes an object match the label selector
  is ADDED and one that makes it stop matching is DELETED, as kube-apiserver's watch cache does; a BOOKMARK with
  the current version whenever the stream has caught up; the stream ends after `timeoutSeconds`; a version older
  than the last `compact` gets a 410 ERROR event (the real server's "too old resource version");
- DELETE with a UID precondition (409 on mismatch), finalizers (deletionTimestamp), and garbage collection of
  dependents whose owners are all gone (at once, where the real collector takes a moment);
- errors as Status objects: 404 for missing objects and namespaces and for an unknown resource or version of a
  served group ("the server could not find the requested resource"), but a bare text "404 page not found" for a
  group nothing serves (a CRD that is not installed, e.g. LeaderWorkerSet); 409 conflicts; 422 for what validation
  refuses (names, label syntax, more than one controller reference, a Deployment selector that misses its template
  or changes, a Service clusterIP that changes); 403 for new objects in a terminating namespace;
- fault injection (`fail`) for answers the fake has no reason to give by itself (500s, 429s, 403s);
- RBAC refusing verbs on a kind (`refuse`, `allow`): the 403 Forbidden answer kube-apiserver gives, to requests
  and to watches alike.

Not modelled: admission webhooks and policies, the rest of RBAC (who may do what is all or nothing), pagination
(a list's `limit` is ignored: one page), defaults beyond the replica count and a Service's cluster IP.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from disagg.api.defaults import stored_status
from disagg.names import DISAGG_DEPLOYMENT, KINDS, Kind
from disagg.reconcile.kube import KubeError, Response

Path = tuple[str, ...]
"""A field path in FieldsV1 spelling: "f:spec", "f:replicas", 'k:{"name":"vllm"}'."""

NOW = "2026-01-01T00:00:00Z"
_GENERATION_KINDS = {"Deployment", "LeaderWorkerSet", "DisaggDeployment"}
_SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "deletionTimestamp")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LIST_KEYS: dict[str, tuple[str, ...]] = {
    "ownerReferences": ("uid",),
    "containers": ("name",),
    "initContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "resourceClaims": ("name",),
    "claims": ("name",),
}


def _list_keys(name: str | None, items: list[Any]) -> tuple[str, ...] | None:
    """The key fields of an associative list, or None for an atomic one."""
    if name == "ports":
        keys: tuple[str, ...] | None = (
            ("containerPort", "protocol")
            if any("containerPort" in i for i in items)
            else (
                "port",
                "protocol",
            )
        )
    else:
        keys = _LIST_KEYS.get(name or "")
    if keys is None or not items or not all(isinstance(item, dict) and keys[0] in item for item in items):
        return None
    return keys


def _item_key(item: dict[str, Any], keys: tuple[str, ...]) -> str:
    values = {key: item.get(key, "TCP" if key == "protocol" else None) for key in keys}
    return "k:" + json.dumps(values, separators=(",", ":"), sort_keys=True)


def _walk(value: dict[str, Any], prefix: Path = ()) -> Iterator[tuple[Path, bool]]:
    """Every node of a configuration, with whether it is a leaf (a scalar, an atomic list, an empty map)."""
    for key, child in value.items():
        path = (*prefix, f"f:{key}")
        if isinstance(child, dict) and child:
            yield path, False
            yield from _walk(child, path)
        elif isinstance(child, list) and (keys := _list_keys(key, child)) is not None:
            yield path, False
            for item in child:
                item_path = (*path, _item_key(item, keys))
                yield item_path, False
                yield from _walk(item, item_path)
        else:
            yield path, True


_MISSING = object()


def _get(obj: Any, path: Path) -> Any:
    node = obj
    for step in path:
        if step.startswith("f:"):
            if not isinstance(node, dict) or step[2:] not in node:
                return _MISSING
            node = node[step[2:]]
        else:
            wanted = json.loads(step[2:])
            if not isinstance(node, list):
                return _MISSING
            matches = [i for i in node if isinstance(i, dict) and _item_key(i, tuple(sorted(wanted))) == step]
            if not matches:
                return _MISSING
            node = matches[0]
    return node


def _remove(obj: Any, path: Path) -> None:
    parent = _get(obj, path[:-1]) if len(path) > 1 else obj
    last = path[-1]
    if parent is _MISSING:
        return
    if last.startswith("f:") and isinstance(parent, dict):
        parent.pop(last[2:], None)
    elif isinstance(parent, list):
        keys = tuple(sorted(json.loads(last[2:])))
        parent[:] = [i for i in parent if not (isinstance(i, dict) and _item_key(i, keys) == last)]


def _merge(live: Any, config: Any, name: str | None = None) -> Any:
    """`config` laid over `live`: maps merge by key, keyed lists by item, anything else is replaced."""
    if isinstance(live, dict) and isinstance(config, dict):
        merged = dict(live)
        for key, value in config.items():
            merged[key] = _merge(live[key], value, key) if key in live else copy.deepcopy(value)
        return merged
    if isinstance(live, list) and isinstance(config, list):
        keys = _list_keys(name, config)
        if keys is not None and _list_keys(name, live) == keys:
            by_key = {_item_key(item, keys): item for item in live}
            result = [_merge(by_key.get(_item_key(item, keys), {}), item) for item in config]
            sent = {_item_key(item, keys) for item in config}
            return result + [copy.deepcopy(item) for item in live if _item_key(item, keys) not in sent]
    return copy.deepcopy(config)


def _changed_leaves(before: dict[str, Any], after: dict[str, Any], prefix: Path = ()) -> set[Path]:
    """Paths whose value differs (added, changed or removed) between two versions of a map, as deep as the
    structure goes (keyed lists item by item)."""
    changed: set[Path] = set()
    for key in set(before) | set(after):
        path = (*prefix, f"f:{key}")
        old, new = before.get(key, _MISSING), after.get(key, _MISSING)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict) and old and new:
            changed |= _changed_leaves(old, new, path)
            continue
        keys = _list_keys(key, new) if isinstance(new, list) else None
        if keys is not None and isinstance(old, list) and _list_keys(key, old) == keys:
            olds = {_item_key(item, keys): item for item in old}
            news = {_item_key(item, keys): item for item in new}
            for item_key in set(olds) | set(news):
                item_path = (*path, item_key)
                if item_key in olds and item_key in news:
                    changed |= _changed_leaves(olds[item_key], news[item_key], item_path)
                elif item_key in news:
                    changed |= {item_path, *(p for p, _ in _walk(news[item_key], item_path))}
                else:
                    changed.add(item_path)
            continue
        changed.add(path)
        if isinstance(new, dict):
            changed |= {p for p, _ in _walk(new, path)}
    return changed


def _fields_v1(paths: set[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for step in path:
            node = node.setdefault(step, {})
    for path in paths:  # a node owned with children is marked "." as in FieldsV1
        node = tree
        for step in path:
            node = node[step]
        if node and len(path) > 1:
            node.setdefault(".", {})
    return tree


def status_error(code: int, reason: str, message: str) -> Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason}
    return Response(code, reason, json.dumps({**body, "code": code}).encode())


class ApiError(KubeError):
    """An error answer of the fake server; the test controls (create, update, ...) raise it too."""

    @property
    def response(self) -> Response:
        return status_error(self.status, self.reason, self.message)


class PageNotFound(Exception):
    """A path no API group serves: the real server answers with a bare text 404, not a Status object."""


@dataclass
class _Entry:
    obj: dict[str, Any]
    managers: dict[tuple[str, str], set[Path]] = field(default_factory=dict)
    """(manager, operation) -> the field paths it owns."""


@dataclass
class _Fault:
    method: str | None
    kind: str | None
    name: str | None
    response: Response
    times: int | None


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]


@dataclass(frozen=True)
class _Change:
    version: int
    kind: str
    namespace: str
    type: str
    obj: dict[str, Any]
    labels_before: dict[str, str] | None
    """The object's labels before a modification (None for ADDED and DELETED)."""


class FakeApiServer:
    """State of one fake cluster; also the Transport that `Kube(FakeApiServer())` sends its requests through."""

    def __init__(self, namespaces: tuple[str, ...] = ("default",)) -> None:
        self._entries: dict[tuple[str, str, str], _Entry] = {}
        self._namespaces: dict[str, str] = dict.fromkeys(namespaces, "Active")
        self._served: dict[str, Kind] = dict(KINDS)
        self._faults: list[_Fault] = []
        self._refused: dict[str, set[str]] = {}
        """kind -> the verbs RBAC refuses the client (`refuse`)."""
        self._version = 0
        self._uids = 0
        self._ips = 0
        self._changes: list[_Change] = []
        self._compacted = 0
        self._wakeup = asyncio.Event()
        self.requests: list[Request] = []

    # -- Transport ----------------------------------------------------------------------------------------------

    async def request(
        self, method: str, path: str, query: list[tuple[str, str]], body: Any, content_type: str
    ) -> Response:
        params = dict(query)
        self.requests.append(Request(method, path, params))
        body = json.loads(json.dumps(body)) if body is not None else None  # what goes over the wire is a copy
        try:
            kind, namespace, name, subresource = self._route(path)
            self._authorize(_verb(method, name), kind, namespace)
            fault = self._fault(method, kind.name, name)
            if fault is not None:
                return fault
            result = self._handle(method, kind, namespace, name, subresource, params, body, content_type)
        except ApiError as exc:
            return exc.response
        except PageNotFound:
            return Response(404, "Not Found", b"404 page not found\n")
        return Response(200, "OK", json.dumps(result).encode())

    async def watch(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[dict[str, Any]]:
        params = dict(query)
        self.requests.append(Request("GET", path, params))
        try:
            kind, namespace, name, _ = self._route(path)
            if name is not None or params.get("watch") not in ("1", "true"):
                raise ApiError(400, "BadRequest", "the fake watches collections only")
            self._authorize("watch", kind, namespace)
        except ApiError as exc:
            raise KubeError(exc.status, exc.reason, exc.message) from None
        except PageNotFound:
            raise KubeError(404, "Not Found", "404 page not found") from None
        since = int(params.get("resourceVersion") or self._version)
        matches = _selector(params.get("labelSelector", ""))
        bookmarks = params.get("allowWatchBookmarks") == "true"
        deadline = asyncio.get_running_loop().time() + float(params.get("timeoutSeconds") or 1800)
        if since < self._compacted:
            message = f"too old resource version: {since} ({self._compacted})"
            yield {
                "type": "ERROR",
                "object": {"kind": "Status", "status": "Failure", "code": 410, "reason": "Expired", "message": message},
            }
            return
        while True:
            for change in [c for c in self._changes if c.version > since]:
                since = change.version
                if change.kind != kind.name or (namespace is not None and change.namespace != namespace):
                    continue
                event = _seen_through(change, matches)
                if event is not None:
                    yield {"type": event, "object": copy.deepcopy(change.obj)}
            since = max(since, self._version)
            if bookmarks:
                yield {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": kind.name,
                        "apiVersion": kind.api_version,
                        "metadata": {"resourceVersion": str(since)},
                    },
                }
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            wakeup = self._wakeup
            try:
                async with asyncio.timeout(remaining):
                    await wakeup.wait()
            except TimeoutError:
                return

    async def close(self) -> None:
        return None

    # -- test controls ------------------------------------------------------------------------------------------

    def create_namespace(self, name: str) -> None:
        self._namespaces.setdefault(name, "Active")

    def terminate_namespace(self, name: str) -> None:
        self._namespaces[name] = "Terminating"

    def unserve(self, kind: str) -> None:
        """The API server stops serving a kind, as when a CRD (e.g. LeaderWorkerSet) is not installed."""
        self._served.pop(kind, None)

    def fail(
        self,
        status: int,
        message: str,
        *,
        method: str | None = None,
        kind: str | None = None,
        name: str | None = None,
        reason: str = "InternalError",
        times: int | None = 1,
    ) -> None:
        """Answer matching requests with this error, `times` times (None: until cleared)."""
        self._faults.append(_Fault(method, kind, name, status_error(status, reason, message), times))

    def refuse(self, kind: str, *verbs: str) -> None:
        """RBAC refuses the client these verbs on `kind` (get, list, watch, create, patch, update, delete), with
        the API server's 403 answer, until `allow`."""
        self._refused.setdefault(kind, set()).update(verbs)

    def allow(self, kind: str) -> None:
        self._refused.pop(kind, None)

    def _authorize(self, verb: str, kind: Kind, namespace: str | None) -> None:
        if verb not in self._refused.get(kind.name, ()):
            return
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        raise ApiError(
            403,
            "Forbidden",
            f'{kind.resource} is forbidden: User "system:serviceaccount:ops:disagg-operator" cannot {verb} resource '
            f'"{kind.plural}" in API group "{kind.group}" {where}',
        )

    def clear_faults(self) -> None:
        self._faults.clear()

    def create(self, obj: dict[str, Any], manager: str = "kubectl-create") -> dict[str, Any]:
        """Create like POST: the creator owns every field it set (operation Update)."""
        kind = self._served[obj["kind"]]
        namespace = obj["metadata"].get("namespace", "default")
        name = obj["metadata"]["name"]
        if (kind.name, namespace, name) in self._entries:
            raise ApiError(409, "AlreadyExists", f'{kind.resource} "{name}" already exists')
        self._check_namespace(kind, namespace, name)
        status = copy.deepcopy(obj.get("status"))
        body = self._without_server_fields(obj)
        self._validate(kind, body, None)
        stored = self._new_object(kind, namespace, body)
        if status is not None:
            stored["status"] = status
        entry = _Entry(stored, {(manager, "Update"): {p for p, _ in _walk(self._owned_part(body))}})
        self._commit(kind, namespace, name, entry, None)
        return copy.deepcopy(entry.obj)

    def update(
        self, kind: str, namespace: str, name: str, change: Callable[[dict[str, Any]], None], manager: str
    ) -> None:
        """Change an object like a client's PUT (kubectl edit, an HPA): `manager` takes every field it changes."""
        entry = self._entry(self._served[kind], namespace, name)
        before = copy.deepcopy(entry.obj)
        after = copy.deepcopy(entry.obj)
        change(after)
        after["status"] = before.get("status")
        if after["status"] is None:
            after.pop("status")
        changed = _changed_leaves(self._owned_part(before), self._owned_part(after))
        managers = {key: paths - changed for key, paths in entry.managers.items()}
        mine = managers.setdefault((manager, "Update"), set())
        mine |= {p for p in changed if _get(self._owned_part(after), p) is not _MISSING}
        self._validate(self._served[kind], after, before)
        self._commit(self._served[kind], namespace, name, _Entry(after, managers), before)

    def set_status(self, kind: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        """What a controller writes to /status (e.g. the Deployment controller's replica counts)."""
        entry = self._entry(self._served[kind], namespace, name)
        before = copy.deepcopy(entry.obj)
        entry.obj["status"] = copy.deepcopy(status)
        if kind == DISAGG_DEPLOYMENT.name:
            entry.obj["status"] = stored_status(entry.obj["status"])
        self._commit(self._served[kind], namespace, name, entry, before)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        entry = self._entries.get((kind, namespace, name))
        return copy.deepcopy(entry.obj) if entry is not None else None

    def objects(self, kind: str | None = None, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(entry.obj)
            for (k, ns, _), entry in sorted(self._entries.items())
            if (kind is None or k == kind) and (namespace is None or ns == namespace)
        ]

    def remove(self, kind: str, namespace: str, name: str) -> None:
        """Delete as a user would (no preconditions)."""
        self._delete(self._served[kind], namespace, name, {})

    def owners(self, kind: str, namespace: str, name: str) -> dict[str, set[Path]]:
        """Manager (operation) -> the fields it owns, for assertions."""
        entry = self._entry(self._served[kind], namespace, name)
        return {f"{manager}/{operation}": set(paths) for (manager, operation), paths in entry.managers.items()}

    @property
    def writes(self) -> int:
        """Every successful write bumps the one resourceVersion counter."""
        return self._version

    def compact(self) -> None:
        """Forget the history: a watch from any version before now is answered with 410, as after etcd's
        compaction."""
        self._compacted = self._version
        self._changes.clear()

    # -- routing ------------------------------------------------------------------------------------------------

    def _route(self, path: str) -> tuple[Kind, str | None, str | None, str | None]:
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 2:
            api_version, rest = parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            api_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if api_version.rpartition("/")[0] not in {kind.group for kind in self._served.values()}:
            raise PageNotFound()  # nothing serves the group: the request never reaches an API handler
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        plural, name, subresource = rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
        for kind in self._served.values():
            if kind.plural == plural and kind.api_version == api_version:
                return kind, namespace, name, subresource
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _fault(self, method: str, kind: str, name: str | None) -> Response | None:
        for fault in self._faults:
            if (fault.method or method) == method and (fault.kind or kind) == kind and (fault.name or name) == name:
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times == 0:
                        self._faults.remove(fault)
                return fault.response
        return None

    def _handle(
        self,
        method: str,
        kind: Kind,
        namespace: str | None,
        name: str | None,
        subresource: str | None,
        params: dict[str, str],
        body: Any,
        content_type: str,
    ) -> Any:
        if method == "GET" and name is None:
            return self._list(kind, namespace, params.get("labelSelector", ""))
        if namespace is None:
            raise ApiError(405, "MethodNotAllowed", "the fake serves namespaced resources only")
        if name is None:
            if method == "POST":
                return self._post(kind, namespace, body, params.get("fieldManager", "unknown"))
            raise ApiError(405, "MethodNotAllowed", f"{method} on a collection")
        if method == "GET":
            return copy.deepcopy(self._entry(kind, namespace, name).obj)
        if method == "PUT" and subresource is None:
            return self._put(kind, namespace, name, body, params.get("fieldManager", "unknown"))
        if method == "PATCH" and subresource == "status":
            return self._patch_status(kind, namespace, name, body, content_type)
        if method == "PATCH" and content_type == "application/apply-patch+yaml":
            if "fieldManager" not in params:
                raise ApiError(400, "BadRequest", "PATCH is not supported for apply without a fieldManager")
            return self._apply(kind, namespace, name, body, params["fieldManager"], params.get("force") == "true")
        if method == "DELETE":
            return self._delete(kind, namespace, name, body or {})
        raise ApiError(405, "MethodNotAllowed", f"the fake does not implement {method} {content_type}")

    # -- the operations -----------------------------------------------------------------------------------------

    def _list(self, kind: Kind, namespace: str | None, selector: str) -> dict[str, Any]:
        matches = _selector(selector)
        items = []
        for (k, ns, _), entry in sorted(self._entries.items()):
            if k == kind.name and namespace in (None, ns) and matches(entry.obj["metadata"].get("labels") or {}):
                item = copy.deepcopy(entry.obj)
                item.pop("kind", None)  # list items come without kind and apiVersion, as from the real server
                item.pop("apiVersion", None)
                items.append(item)
        return {
            "kind": f"{kind.name}List",
            "apiVersion": kind.api_version,
            "metadata": {"resourceVersion": str(self._version)},
            "items": items,
        }

    def _apply(
        self, kind: Kind, namespace: str, name: str, body: dict[str, Any], manager: str, force: bool
    ) -> dict[str, Any]:
        self._check_body(kind, namespace, name, body)
        body.pop("status", None)  # status is written through /status only
        key = (kind.name, namespace, name)
        existing = self._entries.get(key)
        wanted = body["metadata"].get("resourceVersion")
        if existing is not None and wanted is not None and wanted != existing.obj["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", _modified(kind, name))
        uid = body["metadata"].get("uid")
        if uid is not None and existing is None:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {kind.plural} "{name}": uid mismatch: the provided object '
                f"specified uid {uid}, and no existing object was found",
            )
        if uid is not None and existing is not None and uid != existing.obj["metadata"]["uid"]:
            message = f'{kind.name} "{name}" is invalid: metadata.uid: Invalid value: "{uid}": field is immutable'
            raise ApiError(422, "Invalid", message)
        config = self._owned_part(body)
        nodes = dict(_walk(config))
        applied = set(nodes)
        if existing is None:
            self._check_namespace(kind, namespace, name)
            before = None
            obj = self._new_object(kind, namespace, self._without_server_fields(body))
            managers: dict[tuple[str, str], set[Path]] = {}
        else:
            before = copy.deepcopy(existing.obj)
            managers = {k: set(v) for k, v in existing.managers.items()}
            live = self._owned_part(existing.obj)
            conflicts = [
                (other, path)
                for other, owned in managers.items()
                if other != (manager, "Apply")
                for path in owned
                if nodes.get(path) and _get(live, path) != _get(config, path)
            ]
            if conflicts and not force:
                fields = ", ".join(sorted(".".join(s[2:] for s in path) for _, path in conflicts))
                raise ApiError(409, "Conflict", f"Apply failed with {len(conflicts)} conflicts: {fields}")
            for other, path in conflicts:
                managers[other].discard(path)
            obj = _merge(existing.obj, self._without_server_fields(body))
            obj["metadata"] = {**obj["metadata"], **{k: existing.obj["metadata"][k] for k in _kept(existing.obj)}}
            previous = managers.get((manager, "Apply"), set())
            kept_by_others = {
                path[:i]
                for other, owned in managers.items()
                if other != (manager, "Apply")
                for path in owned
                for i in range(1, len(path) + 1)
            }
            for path in sorted(previous - applied, key=len, reverse=True):
                if path not in kept_by_others:
                    _remove(obj, path)
        managers[(manager, "Apply")] = applied
        self._default(kind, obj, before)
        self._validate(kind, obj, before)
        entry = _Entry(obj, managers)
        self._commit(kind, namespace, name, entry, before)
        return copy.deepcopy(self._entries[key].obj)

    def _put(self, kind: Kind, namespace: str, name: str, body: dict[str, Any], manager: str) -> dict[str, Any]:
        """A client's replace: the new object, whose changes `manager` takes over (operation Update)."""
        self._check_body(kind, namespace, name, body)
        current = self._entry(kind, namespace, name).obj
        wanted = body["metadata"].get("resourceVersion")
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", _modified(kind, name))
        replacement = self._without_server_fields(body)

        def replace(obj: dict[str, Any]) -> None:
            kept = {key: obj["metadata"][key] for key in _kept(obj)}
            obj.clear()
            obj.update(copy.deepcopy(replacement))
            obj["metadata"] = {**obj["metadata"], "namespace": namespace, **kept}

        self.update(kind.name, namespace, name, replace, manager)
        return copy.deepcopy(self._entries[(kind.name, namespace, name)].obj)

    def _post(self, kind: Kind, namespace: str, body: dict[str, Any], manager: str) -> dict[str, Any]:
        metadata = body.setdefault("metadata", {})
        if "name" not in metadata:
            if "generateName" not in metadata:
                raise ApiError(422, "Invalid", f"{kind.name} is invalid: metadata.name: Required value")
            self._uids += 1
            metadata["name"] = f"{metadata['generateName']}{self._uids:05x}"
        metadata.setdefault("namespace", namespace)
        if metadata["namespace"] != namespace:
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the request's")
        body.setdefault("apiVersion", kind.api_version)
        body.setdefault("kind", kind.name)
        return self.create(body, manager=manager)

    def _patch_status(
        self, kind: Kind, namespace: str, name: str, body: dict[str, Any], content_type: str
    ) -> dict[str, Any]:
        strategic = content_type == "application/strategic-merge-patch+json"
        if content_type != "application/merge-patch+json" and not strategic:
            raise ApiError(
                415, "UnsupportedMediaType", f"the fake patches status with merge patches, not {content_type}"
            )
        entry = self._entry(kind, namespace, name)
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != entry.obj["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", _modified(kind, name))
        uid = (body.get("metadata") or {}).get("uid")
        if uid is not None and uid != entry.obj["metadata"]["uid"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {kind.plural} "{name}": Precondition failed: UID in precondition: '
                f"{uid}, UID in object meta: {entry.obj['metadata']['uid']}",
            )
        before = copy.deepcopy(entry.obj)
        if "status" in body and strategic:
            entry.obj["status"] = _strategic_status(entry.obj.get("status") or {}, body["status"])
        elif "status" in body:
            entry.obj["status"] = _merge_patch(entry.obj.get("status"), body["status"])
            if entry.obj["status"] is None:
                entry.obj.pop("status")
        if kind.name == DISAGG_DEPLOYMENT.name and "status" in entry.obj:
            entry.obj["status"] = stored_status(entry.obj["status"])  # the CRD's defaults, as kube-apiserver fills
        self._commit(kind, namespace, name, entry, before)
        return copy.deepcopy(entry.obj)

    def _delete(
        self, kind: Kind, namespace: str, name: str, options: dict[str, Any], collecting: bool = False
    ) -> dict[str, Any]:
        entry = self._entry(kind, namespace, name)
        uid = (options.get("preconditions") or {}).get("uid")
        if uid is not None and uid != entry.obj["metadata"]["uid"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {kind.plural} "{name}": Precondition failed: UID in '
                f"precondition: {uid}, UID in object meta: {entry.obj['metadata']['uid']}",
            )
        if entry.obj["metadata"].get("finalizers"):
            if "deletionTimestamp" not in entry.obj["metadata"]:
                before = copy.deepcopy(entry.obj)
                entry.obj["metadata"]["deletionTimestamp"] = NOW
                self._commit(kind, namespace, name, entry, before)
            return copy.deepcopy(entry.obj)
        gone = self._entries.pop((kind.name, namespace, name)).obj
        self._version += 1
        gone["metadata"]["resourceVersion"] = str(self._version)
        self._record(_Change(self._version, kind.name, namespace, "DELETED", gone, None))
        if not collecting:
            self._collect_garbage()
        return {"kind": "Status", "apiVersion": "v1", "status": "Success"}

    # -- helpers ------------------------------------------------------------------------------------------------

    def _entry(self, kind: Kind, namespace: str, name: str) -> _Entry:
        entry = self._entries.get((kind.name, namespace, name))
        if entry is None:
            raise ApiError(404, "NotFound", f'{kind.resource} "{name}" not found')
        return entry

    def _check_namespace(self, kind: Kind, namespace: str, name: str) -> None:
        phase = self._namespaces.get(namespace)
        if phase is None:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
        if phase == "Terminating":
            raise ApiError(
                403,
                "Forbidden",
                f'{kind.resource} "{name}" is forbidden: unable to create new content in namespace {namespace} '
                "because it is being terminated",
            )

    def _check_body(self, kind: Kind, namespace: str, name: str, body: Any) -> None:
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            raise ApiError(400, "BadRequest", "the body is not an object with metadata")
        if body.get("apiVersion") != kind.api_version or body.get("kind") != kind.name:
            raise ApiError(
                400,
                "BadRequest",
                f"the API version and kind in the data ({body.get('apiVersion')}, "
                f"{body.get('kind')}) do not match the request ({kind.api_version}, {kind.name})",
            )
        if body["metadata"].get("name") != name:
            raise ApiError(400, "BadRequest", f"the name of the object does not match the name on the URL ({name})")
        if body["metadata"].get("namespace", namespace) != namespace:
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the request's")

    def _new_object(self, kind: Kind, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        obj.setdefault("apiVersion", kind.api_version)
        obj.setdefault("kind", kind.name)
        self._uids += 1
        obj["metadata"] = {
            **obj["metadata"],
            "namespace": namespace,
            "uid": f"uid-{self._uids:04d}",
            "creationTimestamp": NOW,
        }
        if kind.name in _GENERATION_KINDS:
            obj["metadata"]["generation"] = 1
        return obj

    @staticmethod
    def _without_server_fields(obj: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(obj)
        body.pop("status", None)
        for key in _SERVER_METADATA:
            body["metadata"].pop(key, None)
        return body

    @staticmethod
    def _owned_part(obj: dict[str, Any]) -> dict[str, Any]:
        """What field ownership covers: everything but apiVersion, kind, status and the object's identity."""
        part = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "status")}
        metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("name", "namespace")}
        for key in _SERVER_METADATA:
            metadata.pop(key, None)
        if metadata:
            part["metadata"] = metadata
        else:
            part.pop("metadata", None)
        return part

    def _default(self, kind: Kind, obj: dict[str, Any], before: dict[str, Any] | None) -> None:
        spec = obj.setdefault("spec", {}) if kind.name in ("Deployment", "LeaderWorkerSet", "Service") else None
        if spec is None:
            return
        if kind.name in ("Deployment", "LeaderWorkerSet"):
            spec.setdefault("replicas", 1)
        elif kind.name == "Service":
            spec.setdefault("type", "ClusterIP")
            if "clusterIP" not in spec:
                old = ((before or {}).get("spec") or {}).get("clusterIP")
                if old is None:
                    self._ips += 1
                    old = f"10.0.0.{self._ips}"
                spec["clusterIP"] = old

    def _validate(self, kind: Kind, obj: dict[str, Any], before: dict[str, Any] | None) -> None:
        metadata, name = obj["metadata"], obj["metadata"]["name"]
        causes = []
        pattern, limit = (_DNS_LABEL, 63) if kind.name == "Service" else (_DNS_SUBDOMAIN, 253)
        if len(name) > limit or not pattern.match(name):
            causes.append(f"metadata.name: Invalid value: {name!r}")
        for key, value in (metadata.get("labels") or {}).items():
            if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
                causes.append(f"metadata.labels: Invalid value: {value!r}")
            if len(key.rpartition("/")[2]) > 63:
                causes.append(f"metadata.labels: Invalid value: {key!r}")
        if sum(bool(ref.get("controller")) for ref in metadata.get("ownerReferences") or []) > 1:
            causes.append("metadata.ownerReferences: Invalid value: only one reference can have Controller set to true")
        spec = obj.get("spec") or {}
        old_spec = (before or {}).get("spec") or {}
        if kind.name == "Deployment":
            selector = (spec.get("selector") or {}).get("matchLabels") or {}
            labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
            if any(labels.get(k) != v for k, v in selector.items()):
                causes.append("spec.template.metadata.labels: Invalid value: `selector` does not match template labels")
            if before is not None and old_spec.get("selector") != spec.get("selector"):
                causes.append("spec.selector: Invalid value: field is immutable")
        if kind.name == "Service" and before is not None and old_spec.get("clusterIP") != spec.get("clusterIP"):
            causes.append("spec.clusterIP: Invalid value: field is immutable")
        if causes:
            raise ApiError(422, "Invalid", f'{kind.name} "{name}" is invalid: ' + "; ".join(causes))

    def _commit(self, kind: Kind, namespace: str, name: str, entry: _Entry, before: dict[str, Any] | None) -> None:
        entry.managers = {key: paths for key, paths in entry.managers.items() if paths}
        entry.obj["metadata"]["managedFields"] = [
            {
                "manager": manager,
                "operation": operation,
                "apiVersion": kind.api_version,
                "time": NOW,
                "fieldsType": "FieldsV1",
                "fieldsV1": _fields_v1(paths),
            }
            for (manager, operation), paths in entry.managers.items()
        ]
        if before is not None:
            entry.obj["metadata"]["resourceVersion"] = before["metadata"]["resourceVersion"]
            if kind.name in _GENERATION_KINDS:
                entry.obj["metadata"]["generation"] = before["metadata"]["generation"]
            if entry.obj == before:
                self._entries[(kind.name, namespace, name)] = entry
                return  # nothing changed: no write, the resourceVersion stays
            spec_of = lambda o: {k: v for k, v in o.items() if k not in ("metadata", "status")}  # noqa: E731
            if kind.name in _GENERATION_KINDS and spec_of(entry.obj) != spec_of(before):
                entry.obj["metadata"]["generation"] = before["metadata"]["generation"] + 1
        self._version += 1
        entry.obj["metadata"]["resourceVersion"] = str(self._version)
        self._entries[(kind.name, namespace, name)] = entry
        before_labels = None if before is None else dict(before["metadata"].get("labels") or {})
        change = "ADDED" if before is None else "MODIFIED"
        self._record(_Change(self._version, kind.name, namespace, change, copy.deepcopy(entry.obj), before_labels))

    def _record(self, change: _Change) -> None:
        self._changes.append(change)
        self._wakeup.set()
        self._wakeup = asyncio.Event()

    def _collect_garbage(self) -> None:
        while True:
            uids = {entry.obj["metadata"]["uid"] for entry in self._entries.values()}
            orphans = [
                key
                for key, entry in self._entries.items()
                if (refs := entry.obj["metadata"].get("ownerReferences"))
                and not any(ref.get("uid") in uids for ref in refs)
                and "deletionTimestamp" not in entry.obj["metadata"]
            ]
            if not orphans:
                return
            for kind_name, namespace, name in orphans:
                self._delete(self._served.get(kind_name) or KINDS[kind_name], namespace, name, {}, collecting=True)


def _verb(method: str, name: str | None) -> str:
    """The RBAC verb of a request (a server-side apply is authorized as patch, or create when the object is new;
    the fake asks for patch)."""
    if method == "GET":
        return "list" if name is None else "get"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())


def _seen_through(change: _Change, matches: Callable[[dict[str, str]], bool]) -> str | None:
    """The event a watch with a label selector sends for a change, if any."""
    now = matches(change.obj["metadata"].get("labels") or {})
    if change.type != "MODIFIED":
        return change.type if now else None
    before = matches(change.labels_before or {})
    if now and before:
        return "MODIFIED"
    if now:
        return "ADDED"
    return "DELETED" if before else None


def _kept(obj: dict[str, Any]) -> list[str]:
    return [key for key in _SERVER_METADATA if key in obj["metadata"] and key != "managedFields"]


def _modified(kind: Kind, name: str) -> str:
    return (
        f'Operation cannot be fulfilled on {kind.resource} "{name}": the object has been modified; please apply '
        "your changes to the latest version and try again"
    )


def _strategic_status(status: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A strategic merge patch of a pod's status as far as the operator sends one: `conditions` merge by `type`
    (the list's patchMergeKey), every other field as a merge patch."""
    merged = copy.deepcopy(status)
    for key, value in patch.items():
        if key == "conditions" and isinstance(value, list):
            by_type = {c.get("type"): c for c in merged.get("conditions") or []}
            for condition in value:
                by_type[condition.get("type")] = {**by_type.get(condition.get("type"), {}), **condition}
            merged["conditions"] = list(by_type.values())
        else:
            merged[key] = _merge_patch(merged.get(key), value)
    return merged


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _selector(text: str) -> Callable[[dict[str, str]], bool]:
    """Equality-based label selectors: k=v, k==v, k!=v, k (exists), !k (does not exist)."""
    tests: list[Callable[[dict[str, str]], bool]] = []
    for term in filter(None, (part.strip() for part in text.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            tests.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            tests.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif term.startswith("!"):
            tests.append(lambda labels, k=term[1:]: k not in labels)
        else:
            tests.append(lambda labels, k=term: k in labels)
    return lambda labels: all(test(labels) for test in tests)
