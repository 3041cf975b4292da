"""Reusable field types: quantities, durations, names, environment variables, tolerations."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, WithJsonSchema

from .base import ApiModel
from .cel import CelRule, with_cel
from .errors import rule_error
from .units import DURATION_PATTERN, UnitError, parse_duration, parse_quantity


def _check_quantity(value: int | str) -> int | str:
    try:
        amount = parse_quantity(value)
    except UnitError as exc:
        raise rule_error(str(exc), "use a number with an optional suffix: Ki, Mi, Gi, Ti (binary) or k, M, G") from exc
    if amount < 0:
        raise rule_error("a quantity cannot be negative", "use zero or a positive amount")
    return value


def _check_duration(value: str) -> str:
    try:
        parse_duration(value)
    except UnitError as exc:
        raise rule_error(str(exc), "write a number followed by ms, s, m or h, e.g. 2s or 1m30s") from exc
    return value


Quantity = Annotated[
    int | str,
    AfterValidator(_check_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}),
]
"""A Kubernetes resource quantity such as `16Gi`, `500m` or `8`."""

Duration = Annotated[
    str,
    AfterValidator(_check_duration),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN, "maxLength": 32}),
]
"""A duration such as `500ms`, `30s`, `5m` or `1h30m`."""

IntOrPercent = Annotated[
    int | str,
    Field(union_mode="left_to_right"),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}),
]
"""A count such as `1` or a percentage such as `25%` (the Kubernetes IntOrString convention)."""

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
RESOURCE_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-zA-Z0-9]([-_.a-zA-Z0-9]*[a-zA-Z0-9])?$"
)

ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
ResourceName = Annotated[str, Field(min_length=1, max_length=253, pattern=RESOURCE_NAME_PATTERN)]
LabelKey = Annotated[str, Field(min_length=1, max_length=317, pattern=RESOURCE_NAME_PATTERN)]
Image = Annotated[str, Field(min_length=1, max_length=512, pattern=r"^\S+$")]
Port = Annotated[int, Field(ge=1, le=65535)]
ShortText = Annotated[str, Field(max_length=256)]
Labels = Annotated[dict[str, Annotated[str, Field(max_length=63)]], Field(max_length=64)]
Annotations = Annotated[dict[str, Annotated[str, Field(max_length=4096)]], Field(max_length=64)]
ResourceList = Annotated[dict[ResourceName, Quantity], Field(max_length=32)]
FreeForm = dict[str, Any]
"""Arbitrary JSON, passed through as written (connector options, Kubernetes affinity)."""


class SecretKeyRef(ApiModel):
    name: ObjectName = Field(description="Name of a Secret in the DisaggDeployment's namespace.")
    key: Annotated[str, Field(min_length=1, max_length=253)] = Field(
        description="Key inside the Secret whose value is used."
    )


class ConfigMapKeyRef(ApiModel):
    name: ObjectName = Field(description="Name of a ConfigMap in the DisaggDeployment's namespace.")
    key: Annotated[str, Field(min_length=1, max_length=253)] = Field(
        description="Key inside the ConfigMap whose value is used."
    )


class FieldRef(ApiModel):
    field_path: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description="Pod field to expose, for example status.podIP or metadata.name (the downward API)."
    )


class EnvVarSource(ApiModel):
    secret_key_ref: SecretKeyRef | None = Field(default=None, description="Take the value from a Secret key.")
    config_map_key_ref: ConfigMapKeyRef | None = Field(default=None, description="Take the value from a ConfigMap key.")
    field_ref: FieldRef | None = Field(default=None, description="Take the value from a field of the pod.")


class EnvVar(ApiModel):
    """An environment variable for a container, as in a Kubernetes pod spec."""

    model_config = with_cel(
        CelRule(
            rule="!(has(self.value) && has(self.valueFrom))",
            message="env: set either value or valueFrom, not both",
        )
    )

    name: Annotated[str, Field(min_length=1, max_length=256, pattern=ENV_NAME_PATTERN)] = Field(
        description="Name of the environment variable."
    )
    value: Annotated[str, Field(max_length=32768)] | None = Field(
        default=None, description="Literal value. Set either value or valueFrom."
    )
    value_from: EnvVarSource | None = Field(
        default=None, description="Source of the value (Secret, ConfigMap or pod field). Set either value or valueFrom."
    )


EnvList = Annotated[list[EnvVar], Field(max_length=128)]
ArgList = Annotated[list[Annotated[str, Field(max_length=8192)]], Field(max_length=256)]


class Toleration(ApiModel):
    """A toleration, as in a Kubernetes pod spec."""

    key: Annotated[str, Field(max_length=316)] | None = Field(
        default=None, description="Taint key the toleration applies to; empty with operator Exists matches all."
    )
    operator: Literal["Exists", "Equal"] = Field(default="Equal", description="Exists or Equal.")
    value: Annotated[str, Field(max_length=63)] | None = Field(
        default=None, description="Taint value to match when the operator is Equal."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; empty matches all effects."
    )
    toleration_seconds: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="For NoExecute: how long the pod stays bound after the taint appears."
    )
