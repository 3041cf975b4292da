"""What the operator last applied to each child, so a pass skips the applies that would change nothing (D121).

A child is applied again when the desired object differs from what was applied last, when the live object is not
the version the apply returned (someone changed it: drift to repair), and in any case once `reapply_seconds` has
passed since (a missed watch event cannot hide drift for longer). For a workload (Deployment, LeaderWorkerSet) a
new version that changed only its status, or labels and annotations the operator does not send (same generation,
same values at the label and annotation keys it sends, same owner references), is not a change: controllers write
their status all the time, and the Deployment controller adds `deployment.kubernetes.io/revision` right after a
Deployment is created. A server-side apply would not touch another manager's keys anyway (D251).

The memory is the process's, and it also leaves a trace in the DisaggDeployment's status (D192): `fingerprint`,
a digest of what was applied to each child and the version each apply returned, goes into `status.appliedDigest`
with the pass's status patch. A replica without a memory of its own (after a takeover, a restart) `restore`s the
records when the children it would apply are exactly at those versions and it would send exactly the same: that
proves the apply would change nothing, whoever made it. Otherwise its first pass applies everything, as before.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from disagg.names import DEPLOYMENT, LEADER_WORKER_SET

from .cache import OwnerKey
from .ownership import replicas_action

STATUS_WRITTEN_BY_CONTROLLERS = frozenset({DEPLOYMENT.name, LEADER_WORKER_SET.name})


def digest(obj: Any) -> str:
    return hashlib.blake2b(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode(), digest_size=16).hexdigest()


def sent_digest(obj: dict[str, Any], elsewhere: bool, live: dict[str, Any] | None) -> str:
    """The digest of what applying `obj` sends, the memo's key. Who holds the replicas decides what is sent
    (ownership.py), so it is part of it; the preconditions are left out: the object they name is the live version
    the memo compares."""
    holds = replicas_action(elsewhere, int(obj.get("spec", {}).get("replicas", 1)), live)
    return digest([obj, elsewhere, holds.include_in_main_apply, holds.hand_over is not None])


@dataclass(frozen=True)
class SentKeys:
    """The label and annotation keys the operator sends for a child: the only ones a re-apply could repair."""

    labels: frozenset[str]
    annotations: frozenset[str]

    @classmethod
    def of(cls, desired: dict[str, Any]) -> SentKeys:
        metadata = desired.get("metadata") or {}
        return cls(frozenset(metadata.get("labels") or ()), frozenset(metadata.get("annotations") or ()))


def _metadata_digest(obj: dict[str, Any], keys: SentKeys) -> str:
    """The digest of the live metadata a re-apply would repair: our keys' values (a missing one included) and the
    owner references."""
    metadata = obj.get("metadata") or {}
    labels, annotations = metadata.get("labels") or {}, metadata.get("annotations") or {}
    return digest(
        [
            {key: labels.get(key) for key in sorted(keys.labels)},
            {key: annotations.get(key) for key in sorted(keys.annotations)},
            metadata.get("ownerReferences"),
        ]
    )


def _token(kind: str, version: str | None, generation: int | None, metadata: str) -> list[object]:
    """What identifies the applied version: the resource version, or for a workload (whose controller writes its
    status) the generation and metadata, as `unchanged` compares them."""
    if kind in STATUS_WRITTEN_BY_CONTROLLERS:
        return ["generation", generation, metadata]
    return ["version", version]


@dataclass(frozen=True)
class _Record:
    sent: str
    version: str | None
    generation: int | None
    metadata: str
    keys: SentKeys
    until: float


class AppliedMemo:
    def __init__(self, reapply_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.reapply_seconds = reapply_seconds
        self.clock = clock
        self._records: dict[OwnerKey, dict[tuple[str, str], _Record]] = {}

    def unchanged(self, owner: OwnerKey, kind: str, name: str, sent: str, live: dict[str, Any] | None) -> bool:
        """Whether applying `sent` (a digest) again would change nothing we know of."""
        record = self._records.get(owner, {}).get((kind, name))
        if record is None or live is None or record.sent != sent or self.clock() >= record.until:
            return False
        metadata = live.get("metadata") or {}
        if metadata.get("resourceVersion") == record.version:
            return True
        return (
            kind in STATUS_WRITTEN_BY_CONTROLLERS
            and metadata.get("generation") == record.generation
            and _metadata_digest(live, record.keys) == record.metadata
        )

    def record(self, owner: OwnerKey, kind: str, name: str, sent: str, applied: dict[str, Any], keys: SentKeys) -> None:
        """`keys`: the label and annotation keys of the object sent."""
        metadata = applied.get("metadata") or {}
        # Spread re-applies out, so the children of DisaggDeployments created together do not all fall due at once.
        until = self.clock() + self.reapply_seconds * random.uniform(0.9, 1.1)
        self._records.setdefault(owner, {})[(kind, name)] = _Record(
            sent,
            metadata.get("resourceVersion"),
            metadata.get("generation"),
            _metadata_digest(applied, keys),
            keys,
            until,
        )

    def fingerprint(self, owner: OwnerKey) -> str | None:
        """A digest of the records for the DisaggDeployment's children (None without any)."""
        records = self._records.get(owner)
        if not records:
            return None
        return digest(
            sorted(
                [kind, name, record.sent, *_token(kind, record.version, record.generation, record.metadata)]
                for (kind, name), record in records.items()
            )
        )

    def knows(self, owner: OwnerKey) -> bool:
        return bool(self._records.get(owner))

    def restore(
        self, owner: OwnerKey, fingerprint: str, children: list[tuple[str, str, str, dict[str, Any], SentKeys]]
    ) -> bool:
        """Records for `children` ((kind, name, digest of what would be sent, live object, the label and annotation
        keys it would send)), taken as applied when `fingerprint` (another replica's, from status) is exactly what
        they give: each is at the version that replica's apply returned, and would be sent the same. False, and
        nothing recorded, otherwise."""
        if self.knows(owner) or not children:
            return False
        candidate = digest(
            sorted(
                [
                    kind,
                    name,
                    sent,
                    *_token(
                        kind,
                        (live.get("metadata") or {}).get("resourceVersion"),
                        (live.get("metadata") or {}).get("generation"),
                        _metadata_digest(live, keys),
                    ),
                ]
                for kind, name, sent, live, keys in children
            )
        )
        if candidate != fingerprint:
            return False
        for kind, name, sent, live, keys in children:
            self.record(owner, kind, name, sent, live, keys)
        return True

    def due(self, owner: OwnerKey) -> bool:
        """Whether a child of the DisaggDeployment is due to be applied again anyway (`reapply_seconds`)."""
        now = self.clock()
        return any(now >= record.until for record in self._records.get(owner, {}).values())

    def drop(self, owner: OwnerKey, kind: str | None = None, name: str | None = None) -> None:
        if kind is None or name is None:
            self._records.pop(owner, None)
        else:
            self._records.get(owner, {}).pop((kind, name), None)

    def clear(self) -> None:
        self._records.clear()
