"""Which DisaggDeployments the next pass would find exactly as the last one left them (D190).

A pass is a function of what it reads: the DisaggDeployment, its children, pods and ReplicaSets in the watch cache,
the kinds RBAC refuses, and the memory of what was applied (applied.py), plus the clock where the autoscaler or the
serving check runs. The objects' resource versions identify what was read without decoding any of it, so a pass
that starts from the same versions as the last successful one, with no child due to be applied again, can only
come to the same answer. That pass writes nothing (the last one's writes changed versions, so the pass after a
write is a full one, which writes nothing more, and only its inputs are kept) and so it is not run: "unchanged".
Where the clock matters (scaled pools, a serving check that is on) the steps that read it still run, but the
claim, apply and prune steps, which read nothing else, are left out.

A pass whose inputs changed only in status (D249) is the same kind of repeat for the claim, apply and prune steps:
they read the DisaggDeployment's metadata and spec, the children's and ReplicaSets' spec and metadata (whose owner,
whose replicas), the RBAC refusals and the applied memory, never a status, except the rollback hold (the revision
the DisaggDeployment's status holds, compared as it is) and the applied memory's restore from status (only on a
pass without a memory of its own, which has no record here either). So a pass whose cache shapes (cache.py: an
object's hash without its status and resource version) are those the last successful pass started from runs only
the observe and status steps: in a burst's aftermath, where the workload controllers report on every new
Deployment and ReplicaSet, that is most of the event lane's passes.

The versions are the cache's, which follows the watches: the skip changes nothing about what a pass can see, since
a pass reads the same cache. Drift the watches did not report is found by the re-apply `applied.py` schedules,
which ends the skip when it is due.
"""

from __future__ import annotations

from dataclasses import dataclass

from disagg.names import CHILD_KINDS, DISAGG_DEPLOYMENT, POD, REPLICA_SET

from .cache import Cache, OwnerKey

Inputs = tuple[object, ...]
"""The versions a pass reads, in a fixed order."""

READ_KINDS = (*CHILD_KINDS, POD, REPLICA_SET)
APPLY_READ_KINDS = (*CHILD_KINDS, REPLICA_SET)
"""What the claim, apply and prune steps read (the rollback hold reads the ReplicaSets' templates); not the pods."""


def inputs(cache: Cache, key: OwnerKey, refusals_version: int) -> Inputs:
    namespace, name = key
    return (
        cache.version(DISAGG_DEPLOYMENT.name, namespace, name),
        refusals_version,
        *(cache.versions(kind.name, namespace, name) for kind in READ_KINDS),
    )


def shapes(cache: Cache, key: OwnerKey, refusals_version: int) -> Inputs:
    """What the claim, apply and prune steps read, without the statuses (D249)."""
    namespace, name = key
    return (
        cache.shape(DISAGG_DEPLOYMENT.name, namespace, name),
        refusals_version,
        *(cache.shapes(kind.name, namespace, name) for kind in APPLY_READ_KINDS),
    )


@dataclass(frozen=True)
class Settled:
    inputs: Inputs
    """What the last successful pass started from."""
    timed: bool
    """Whether that pass had steps that read the clock (the autoscaler's, the serving check's): those run again."""
    shapes: Inputs | None = None
    """The same inputs without the statuses (`shapes`; None: a pass that did not get to the apply step)."""
    held: str | None = None
    """The rollback hold's revision that pass applied with (from the DisaggDeployment's status)."""


class SettledMemo:
    def __init__(self) -> None:
        self._settled: dict[OwnerKey, Settled] = {}

    def get(self, key: OwnerKey, current: Inputs) -> Settled | None:
        """The last successful pass's record, if it started from `current`."""
        settled = self._settled.get(key)
        return settled if settled is not None and settled.inputs == current else None

    def last(self, key: OwnerKey) -> Settled | None:
        """The last successful pass's record, whatever it started from."""
        return self._settled.get(key)

    def record(self, key: OwnerKey, settled: Settled) -> None:
        self._settled[key] = settled

    def drop(self, key: OwnerKey) -> None:
        self._settled.pop(key, None)

    def clear(self) -> None:
        self._settled.clear()

    def __len__(self) -> int:
        return len(self._settled)
