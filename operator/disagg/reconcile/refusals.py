"""Kinds the API server refuses to let the informers list or watch, and what to tell users about them (D151).

An informer whose kind's list RBAC refuses for longer than a grace period records a `Refusal` here (a refused
watch is only logged: the informer keeps its cache current by listing). A pass whose
DisaggDeployment renders a child of a refused kind does not run (it cannot tell what exists) and says in status
which kind, which verb, and which rule to grant; the informer keeps asking and clears the record once it may list
again. Pure apart from the table itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from disagg.names import Kind

INFORMER_VERBS = ("list", "watch")
"""What an informer needs of its kind (access.py grants both)."""


@dataclass(frozen=True)
class Refusal:
    kind: Kind
    namespace: str | None
    """Where the informer watches: a namespace, or None for every namespace."""
    verb: str
    """The verb the API server refused: "list" or "watch"."""
    answer: str
    """The API server's message."""

    @property
    def where(self) -> str:
        return f"in namespace {self.namespace}" if self.namespace else "in all namespaces"

    def rule(self) -> str:
        """The PolicyRule that permits what the informer needs, as YAML flow text a user can paste."""
        group = f'"{self.kind.group}"' if not self.kind.group else self.kind.group
        return f"{{apiGroups: [{group}], resources: [{self.kind.plural}], verbs: [{', '.join(INFORMER_VERBS)}]}}"

    def explain(self) -> str:
        role = "ClusterRole" if self.namespace is None else f"ClusterRole or the Role in {self.namespace}"
        if self.verb == "list":
            effect = (
                f"so it cannot tell which {self.kind.name} children exist and does not reconcile DisaggDeployments "
                "that have them"
            )
        else:
            effect = "so it lists them again at every retry instead and notices their changes late"
        return (
            f"the operator may not {self.verb} {self.kind.resource} {self.where} (the API server answered: "
            f"{self.answer}), {effect}; grant its ServiceAccount the rule {self.rule()} in its {role} "
            "(the chart and manifests/ include it) and it resumes on its own"
        )


class Refusals:
    """The refusals in force, by (kind, watched namespace)."""

    def __init__(self) -> None:
        self._by_scope: dict[tuple[str, str | None], Refusal] = {}
        self.version = 0
        """Counts the changes to the table: a pass that read it at an older version may decide otherwise now."""

    def record(self, refusal: Refusal) -> None:
        if self._by_scope.get((refusal.kind.name, refusal.namespace)) != refusal:
            self.version += 1
        self._by_scope[(refusal.kind.name, refusal.namespace)] = refusal

    def clear(self, kind: Kind, namespace: str | None) -> None:
        if self._by_scope.pop((kind.name, namespace), None) is not None:
            self.version += 1

    def blocking(self, kinds: Iterable[str], namespace: str) -> list[Refusal]:
        """The refusals that hide children of `kinds` in `namespace`, in the order of `kinds`."""
        found: list[Refusal] = []
        for kind in dict.fromkeys(kinds):
            for scope in (namespace, None):
                refusal = self._by_scope.get((kind, scope))
                if refusal is not None:
                    found.append(refusal)
                    break
        return found

    def __len__(self) -> int:
        return len(self._by_scope)
