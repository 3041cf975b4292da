"""What the watches have seen: the DisaggDeployments, their children and their pods, indexed by owner.

The reconcile pass reads the cluster from here instead of listing it (D121). Objects are kept as compact JSON,
which costs a fraction of the memory of parsed dicts and hands every reader a private copy it may change. Two
things are dropped on the way in because nothing reads them and they are the bulk of many objects: managedFields
(reduced to who manages what, and whether each manager holds `spec.replicas`, which is all the replicas hand-over
and the ownership checks ask) and kubectl's last-applied-configuration annotation.

Writers race with the watch: the operator puts the answers of its own writes here at once (so the next pass sees
what it wrote, even before the watch delivers it), and a watch event that is older than what is stored is ignored.
Resource versions are compared as integers, as kube-apiserver's etcd storage issues them; a version that is not an
integer always replaces what is stored.

An object's status is kept apart from the rest, and the rest (without its resource version) has a `shape`: a hash
that stays the same while only the status changes, which is what controllers write all the time. The passes use it
to tell a child whose status moved from one whose spec or metadata did (settled.py, D249).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from disagg.names import LABEL_DEPLOYMENT

from . import codec

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

ObjectKey = tuple[str, str]
"""(namespace, name)."""
OwnerKey = tuple[str, str]
"""(namespace, DisaggDeployment name)."""


def version_number(version: str | None) -> int | None:
    if version is None:
        return None
    try:
        return int(version)
    except ValueError:
        return None


def is_older(incoming: str | None, stored: str | None) -> bool:
    """Whether an object at `incoming` predates the one stored at `stored`."""
    new, old = version_number(incoming), version_number(stored)
    return new is not None and old is not None and new < old


def _managers(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    summary = []
    for entry in entries:
        spec = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        fields: dict[str, Any] = {"f:spec": {"f:replicas": {}}} if "f:replicas" in spec else {}
        summary.append({"manager": entry.get("manager"), "operation": entry.get("operation"), "fieldsV1": fields})
    return summary


def strip(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without what nothing in the operator reads (a shallow copy; `obj` is left as it is)."""
    metadata = dict(obj.get("metadata") or {})
    if "managedFields" in metadata:
        metadata["managedFields"] = _managers(metadata["managedFields"] or [])
    annotations = metadata.get("annotations")
    if annotations and LAST_APPLIED in annotations:
        metadata["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    return {**obj, "metadata": metadata}


@dataclass
class _Entry:
    version: str | None
    owner: str | None
    data: bytes
    """The stripped object without its status and resource version, as JSON."""
    status: bytes | None
    shape: int
    """hash(data): equal while only the status (and the resource version) changed."""


def _encode(version: str | None, owner: str | None, obj: dict[str, Any]) -> _Entry:
    stripped = strip(obj)
    status = stripped.pop("status", None)
    metadata = stripped["metadata"]
    # The top level and metadata in a fixed order: a watch event and a list, or the informer's defaults, put them
    # in different orders, and the shape would differ for the same object (nested maps come in the server's order).
    stripped["metadata"] = {key: metadata[key] for key in sorted(metadata) if key != "resourceVersion"}
    rest = {key: stripped[key] for key in sorted(stripped)}
    data = codec.dumps(rest)
    encoded = None if status is None else codec.dumps(status)
    return _Entry(version, owner, data, encoded, hash(data))


def _decode(entry: _Entry) -> dict[str, Any]:
    obj: dict[str, Any] = codec.loads(entry.data)
    if entry.version is not None:
        obj["metadata"]["resourceVersion"] = entry.version
    if entry.status is not None:
        obj["status"] = codec.loads(entry.status)
    return obj


class Cache:
    """Objects by kind and (namespace, name); children and pods also by the DisaggDeployment their label names."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[ObjectKey, _Entry]] = {}
        self._owned: dict[str, dict[OwnerKey, set[str]]] = {}

    # -- writes -----------------------------------------------------------------------------------------------

    def put(self, kind: str, obj: dict[str, Any]) -> bool:
        """Store a newer version of an object; False when it is older than, or the same as, the stored one."""
        metadata = obj.get("metadata") or {}
        key = (metadata.get("namespace") or "", metadata["name"])
        version = metadata.get("resourceVersion")
        stored = self._objects.setdefault(kind, {}).get(key)
        if stored is not None and (is_older(version, stored.version) or (version and version == stored.version)):
            return False
        owner = (metadata.get("labels") or {}).get(LABEL_DEPLOYMENT)
        if stored is not None and stored.owner != owner:
            self._unindex(kind, key, stored.owner)
        self._objects[kind][key] = _encode(version, owner, obj)
        if owner:
            self._owned.setdefault(kind, {}).setdefault((key[0], owner), set()).add(key[1])
        return True

    def delete(self, kind: str, namespace: str, name: str, version: str | None = None) -> bool:
        """Forget an object; a deletion older than the stored version (it was created again since) is ignored."""
        objects = self._objects.get(kind, {})
        stored = objects.get((namespace, name))
        if stored is None or is_older(version, stored.version):
            return False
        del objects[(namespace, name)]
        self._unindex(kind, (namespace, name), stored.owner)
        return True

    def replace(
        self, kind: str, namespace: str | None, items: Iterable[dict[str, Any]], version: str | None
    ) -> set[OwnerKey]:
        """What a (re)list returned for `kind` in `namespace` (None: every namespace) at resource version `version`:
        objects it no longer holds are dropped, unless they are newer than the list (written since). Returns the
        owners whose objects changed."""
        seen: set[ObjectKey] = set()
        changed: set[OwnerKey] = set()
        for obj in items:
            metadata = obj["metadata"]
            seen.add((metadata.get("namespace") or "", metadata["name"]))
            owner = (metadata.get("labels") or {}).get(LABEL_DEPLOYMENT)
            if self.put(kind, obj) and owner:
                changed.add((metadata.get("namespace") or "", owner))
        for key, entry in list(self._objects.get(kind, {}).items()):
            if key in seen or (namespace is not None and key[0] != namespace):
                continue
            if is_older(version, entry.version):
                continue
            self.delete(kind, *key)
            if entry.owner:
                changed.add((key[0], entry.owner))
        return changed

    def _unindex(self, kind: str, key: ObjectKey, owner: str | None) -> None:
        if not owner:
            return
        names = self._owned.get(kind, {}).get((key[0], owner))
        if names is not None:
            names.discard(key[1])
            if not names:
                del self._owned[kind][(key[0], owner)]

    # -- reads (each returns fresh objects the caller may change) ------------------------------------------------

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        entry = self._objects.get(kind, {}).get((namespace, name))
        if entry is None:
            return None
        return _decode(entry)

    def version(self, kind: str, namespace: str, name: str) -> str | None:
        entry = self._objects.get(kind, {}).get((namespace, name))
        return entry.version if entry is not None else None

    def versions(self, kind: str, namespace: str, deployment: str) -> tuple[tuple[str, str | None], ...]:
        """(name, resourceVersion) of the objects of `kind` labelled as the DisaggDeployment's, sorted by name:
        what `owned` would return, identified without decoding it."""
        names = self._owned.get(kind, {}).get((namespace, deployment))
        if not names:
            return ()
        objects = self._objects[kind]
        return tuple((name, objects[(namespace, name)].version) for name in sorted(names))

    def shape(self, kind: str, namespace: str, name: str) -> int | None:
        """The object's shape (`_Entry.shape`): unchanged by a write of its status alone."""
        entry = self._objects.get(kind, {}).get((namespace, name))
        return entry.shape if entry is not None else None

    def shapes(self, kind: str, namespace: str, deployment: str) -> tuple[tuple[str, int], ...]:
        """(name, shape) of the objects `versions` names: what changed in them apart from their status."""
        names = self._owned.get(kind, {}).get((namespace, deployment))
        if not names:
            return ()
        objects = self._objects[kind]
        return tuple((name, objects[(namespace, name)].shape) for name in sorted(names))

    def owned(self, kind: str, namespace: str, deployment: str) -> list[dict[str, Any]]:
        """Objects of `kind` labelled as belonging to the DisaggDeployment, sorted by name."""
        names = sorted(self._owned.get(kind, {}).get((namespace, deployment), ()))
        objects = self._objects.get(kind, {})
        return [_decode(objects[(namespace, name)]) for name in names]

    def count(self, kind: str | None = None) -> int:
        if kind is not None:
            return len(self._objects.get(kind, {}))
        return sum(len(objects) for objects in self._objects.values())

    def size_bytes(self) -> int:
        entries = (entry for objects in self._objects.values() for entry in objects.values())
        return sum(len(entry.data) + len(entry.status or b"") for entry in entries)
