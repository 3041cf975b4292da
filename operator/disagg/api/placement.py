"""Kubernetes affinity and topology spread constraints, typed (D72).

They were free-form, so anything reached the pod template and the API server refused it there (after the
DisaggDeployment had been accepted). The shapes are core/v1's; the checks are the ones kube-apiserver applies.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from .base import ApiModel
from .errors import rule_error
from .types import DnsLabel, LabelKey, Labels, LabelValue

Weight = Annotated[int, Field(ge=1, le=100)]
KeyList = Annotated[list[LabelKey], Field(max_length=32)]


def _check_values(operator: str, values: list[str], single_for: tuple[str, ...] = ()) -> None:
    if operator in ("In", "NotIn") and not values:
        raise rule_error(f"operator {operator} needs values", "list at least one value")
    if operator in ("Exists", "DoesNotExist") and values:
        raise rule_error(f"operator {operator} takes no values", "remove values, or use In or NotIn")
    if operator in single_for and len(values) != 1:
        raise rule_error(f"operator {operator} takes exactly one value", "give one value")


class NodeSelectorRequirement(ApiModel):
    """A node label requirement."""

    key: LabelKey = Field(description="Node label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(description="How to match.")
    values: Annotated[list[LabelValue], Field(max_length=64)] = Field(
        default_factory=list, description="Values for In/NotIn; one value for Gt/Lt; none for Exists/DoesNotExist."
    )

    @model_validator(mode="after")
    def _values_fit_the_operator(self) -> NodeSelectorRequirement:
        _check_values(self.operator, self.values, single_for=("Gt", "Lt"))
        return self


class NodeFieldRequirement(ApiModel):
    """A requirement on a node field: only metadata.name, with one value."""

    key: Literal["metadata.name"] = Field(description="metadata.name, the only node field selectable.")
    operator: Literal["In", "NotIn"] = Field(description="In or NotIn.")
    values: Annotated[list[Annotated[str, Field(min_length=1, max_length=253)]], Field(min_length=1, max_length=1)] = (
        Field(description="Exactly one node name.")
    )


class NodeSelectorTerm(ApiModel):
    """Requirements that must all hold (terms of a list are ORed)."""

    match_expressions: Annotated[list[NodeSelectorRequirement], Field(max_length=32)] = Field(
        default_factory=list, description="Requirements on node labels."
    )
    match_fields: Annotated[list[NodeFieldRequirement], Field(max_length=8)] = Field(
        default_factory=list, description="Requirements on node fields."
    )


class NodeSelector(ApiModel):
    node_selector_terms: Annotated[list[NodeSelectorTerm], Field(min_length=1, max_length=32)] = Field(
        description="At least one term; a node matching any term qualifies."
    )


class PreferredSchedulingTerm(ApiModel):
    weight: Weight = Field(description="1-100: how much a matching node is preferred.")
    preference: NodeSelectorTerm = Field(description="The node requirements.")


class NodeAffinity(ApiModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        default=None, description="Nodes the pods must run on."
    )
    preferred_during_scheduling_ignored_during_execution: Annotated[
        list[PreferredSchedulingTerm], Field(max_length=32)
    ] = Field(default_factory=list, description="Nodes the pods prefer.")


class LabelSelectorRequirement(ApiModel):
    key: LabelKey = Field(description="Label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(description="How to match.")
    values: Annotated[list[LabelValue], Field(max_length=64)] = Field(
        default_factory=list, description="Values for In/NotIn; none for Exists/DoesNotExist."
    )

    @model_validator(mode="after")
    def _values_fit_the_operator(self) -> LabelSelectorRequirement:
        _check_values(self.operator, self.values)
        return self


class LabelSelector(ApiModel):
    """Selects pods by label; an empty selector selects every pod."""

    match_labels: Labels = Field(default_factory=dict, description="Labels the pods must have.")
    match_expressions: Annotated[list[LabelSelectorRequirement], Field(max_length=32)] = Field(
        default_factory=list, description="Requirements on the pods' labels."
    )


class PodAffinityTerm(ApiModel):
    """Pods (selected by labelSelector, in namespaces) that must or should share a topology domain."""

    label_selector: LabelSelector | None = Field(default=None, description="The pods this term is about.")
    namespace_selector: LabelSelector | None = Field(default=None, description="Namespaces to look in, by label.")
    namespaces: Annotated[list[DnsLabel], Field(max_length=32)] = Field(
        default_factory=list, description="Namespaces to look in. Default: the pod's own."
    )
    topology_key: LabelKey = Field(description="Node label whose value defines a domain, e.g. kubernetes.io/hostname.")
    match_label_keys: KeyList = Field(
        default_factory=list, description="Pod label keys whose values the selected pods must share with this pod."
    )
    mismatch_label_keys: KeyList = Field(
        default_factory=list, description="Pod label keys whose values the selected pods must not share."
    )

    @model_validator(mode="after")
    def _label_keys(self) -> PodAffinityTerm:
        if (self.match_label_keys or self.mismatch_label_keys) and self.label_selector is None:
            raise rule_error("matchLabelKeys and mismatchLabelKeys need a labelSelector", "add labelSelector")
        both = sorted(set(self.match_label_keys) & set(self.mismatch_label_keys))
        if both:
            raise rule_error(f"{both[0]} is in both matchLabelKeys and mismatchLabelKeys", "keep it in one of them")
        return self


class WeightedPodAffinityTerm(ApiModel):
    weight: Weight = Field(description="1-100: how much matching is preferred.")
    pod_affinity_term: PodAffinityTerm = Field(description="The term.")


class PodAffinity(ApiModel):
    required_during_scheduling_ignored_during_execution: Annotated[list[PodAffinityTerm], Field(max_length=32)] = Field(
        default_factory=list, description="Terms that must hold."
    )
    preferred_during_scheduling_ignored_during_execution: Annotated[
        list[WeightedPodAffinityTerm], Field(max_length=32)
    ] = Field(default_factory=list, description="Terms that should hold.")


class Affinity(ApiModel):
    """Kubernetes affinity, as in a pod spec."""

    node_affinity: NodeAffinity | None = Field(default=None, description="Which nodes the pods run on.")
    pod_affinity: PodAffinity | None = Field(default=None, description="Pods to run near.")
    pod_anti_affinity: PodAffinity | None = Field(default=None, description="Pods to run away from.")


class TopologySpreadConstraint(ApiModel):
    """How the pool's pods spread over a topology, as in a pod spec."""

    max_skew: Annotated[int, Field(ge=1, le=2_147_483_647)] = Field(
        description="Most the number of matching pods may differ between domains."
    )
    topology_key: LabelKey = Field(description="Node label whose value defines a domain.")
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = Field(
        description="DoNotSchedule or ScheduleAnyway."
    )
    label_selector: LabelSelector | None = Field(
        default=None,
        description="The pods counted; may use the pool's labels (disagg.dev/deployment, disagg.dev/role).",
    )
    min_domains: Annotated[int, Field(ge=1, le=2_147_483_647)] | None = Field(
        default=None, description="Least number of eligible domains (DoNotSchedule only)."
    )
    node_affinity_policy: Literal["Honor", "Ignore"] | None = Field(
        default=None, description="Whether node affinity limits the domains counted."
    )
    node_taints_policy: Literal["Honor", "Ignore"] | None = Field(
        default=None, description="Whether node taints limit the domains counted."
    )
    match_label_keys: KeyList = Field(
        default_factory=list, description="Pod label keys whose values select the pods counted with this one."
    )

    @model_validator(mode="after")
    def _consistent(self) -> TopologySpreadConstraint:
        if self.min_domains is not None and self.when_unsatisfiable != "DoNotSchedule":
            raise rule_error("minDomains applies only with whenUnsatisfiable DoNotSchedule", "remove minDomains")
        if self.match_label_keys and self.label_selector is None:
            raise rule_error("matchLabelKeys needs a labelSelector", "add labelSelector")
        return self
