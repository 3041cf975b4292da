"""Reusable field types: quantities, durations, names, environment variables, tolerations."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator

from .base import ApiModel
from .cel import CelRule, exactly_one_of, with_cel
from .errors import rule_error
from .kube_syntax import (
    ANNOTATIONS_TOTAL_BYTES,
    annotations_size,
    config_key_error,
    label_value_error,
    qualified_name_error,
)
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

LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
CONFIG_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"


def _check_key(kind: str) -> Any:
    def check(key: str) -> str:
        problem = qualified_name_error(key)
        if problem is not None:
            raise rule_error(
                f"{kind} {key!r} {problem}",
                "use an optional DNS prefix and '/', then up to 63 letters, digits, '-', '_' or '.', e.g. "
                "example.com/team",
            )
        return key

    return check


def _check_label_value(value: str) -> str:
    problem = label_value_error(value)
    if problem is not None:
        fix = "shorten it to at most 63 characters" if len(value) > 63 else "use letters, digits, '-', '_' and '.' only"
        raise rule_error(f"label value {value!r} {problem}", fix)
    return value


def _check_config_key(key: str) -> str:
    problem = config_key_error(key)
    if problem is not None:
        raise rule_error(f"key {key!r} {problem}", "name the key as it appears in the Secret or ConfigMap")
    return key


def _check_annotations(annotations: dict[str, str]) -> dict[str, str]:
    size = annotations_size(annotations)
    if size > ANNOTATIONS_TOTAL_BYTES:
        raise rule_error(
            f"annotations take {size} bytes, above the API server's limit of {ANNOTATIONS_TOTAL_BYTES} for one object",
            "move large values elsewhere (a ConfigMap) and keep annotations short",
        )
    return annotations


ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
ResourceName = Annotated[str, Field(min_length=1, max_length=253, pattern=RESOURCE_NAME_PATTERN)]
LabelKey = Annotated[
    str, Field(min_length=1, max_length=317, pattern=RESOURCE_NAME_PATTERN), AfterValidator(_check_key("key"))
]
"""A label, taint or topology key (a qualified name)."""
Image = Annotated[str, Field(min_length=1, max_length=512, pattern=r"^\S+$")]
Port = Annotated[int, Field(ge=1, le=65535)]
ShortText = Annotated[str, Field(max_length=256)]
LabelValue = Annotated[
    str,
    AfterValidator(_check_label_value),
    WithJsonSchema({"type": "string", "maxLength": 63, "pattern": LABEL_VALUE_PATTERN}),
]
Labels = Annotated[dict[Annotated[str, AfterValidator(_check_key("label key"))], LabelValue], Field(max_length=64)]
Annotations = Annotated[
    dict[Annotated[str, AfterValidator(_check_key("annotation key"))], str], AfterValidator(_check_annotations)
]
"""Only the API server's own limits (D74): qualified keys, and 256 KiB of keys and values together. A per-value
cap made the `kubectl.kubernetes.io/last-applied-configuration` annotation of any larger spec invalid."""
ConfigKey = Annotated[
    str,
    AfterValidator(_check_config_key),
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 253, "pattern": CONFIG_KEY_PATTERN}),
]
ResourceList = Annotated[dict[ResourceName, Quantity], Field(max_length=32)]
FreeForm = dict[str, Any]
"""Arbitrary JSON, passed through as written (connector options, Kubernetes affinity)."""


class SecretKeyRef(ApiModel):
    name: ObjectName = Field(description="Name of a Secret in the DisaggDeployment's namespace.")
    key: ConfigKey = Field(description="Key inside the Secret whose value is used.")


class ConfigMapKeyRef(ApiModel):
    name: ObjectName = Field(description="Name of a ConfigMap in the DisaggDeployment's namespace.")
    key: ConfigKey = Field(description="Key inside the ConfigMap whose value is used.")


FIELD_PATHS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
)
"""The pod fields the downward API exposes as environment variables, besides one label or annotation."""
_SUBSCRIPTED_FIELD = re.compile(r"metadata\.(labels|annotations)\['([^']*)'\]")
FIELD_PATH_PATTERN = (
    r"^(" + "|".join(re.escape(path) for path in FIELD_PATHS) + r"|metadata\.(labels|annotations)\['[^']+'\])$"
)


def _check_field_path(path: str) -> str:
    subscripted = _SUBSCRIPTED_FIELD.fullmatch(path)
    if path in FIELD_PATHS or (subscripted and qualified_name_error(subscripted.group(2)) is None):
        return path
    raise rule_error(
        f"{path!r} is not a pod field the downward API exposes",
        f"use one of {', '.join(FIELD_PATHS)}, metadata.labels['<key>'] or metadata.annotations['<key>']",
    )


class FieldRef(ApiModel):
    field_path: Annotated[
        str,
        AfterValidator(_check_field_path),
        WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 256, "pattern": FIELD_PATH_PATTERN}),
    ] = Field(description="Pod field to expose, for example status.podIP or metadata.name (the downward API).")


class EnvVarSource(ApiModel):
    """Exactly one source, as in a Kubernetes pod spec."""

    model_config = with_cel(
        CelRule(
            rule=exactly_one_of("secretKeyRef", "configMapKeyRef", "fieldRef"),
            message="env valueFrom: set exactly one of secretKeyRef, configMapKeyRef or fieldRef",
        )
    )

    secret_key_ref: SecretKeyRef | None = Field(default=None, description="Take the value from a Secret key.")
    config_map_key_ref: ConfigMapKeyRef | None = Field(default=None, description="Take the value from a ConfigMap key.")
    field_ref: FieldRef | None = Field(default=None, description="Take the value from a field of the pod.")

    @model_validator(mode="after")
    def _one_source(self) -> EnvVarSource:
        given = sum(source is not None for source in (self.secret_key_ref, self.config_map_key_ref, self.field_ref))
        if given != 1:
            raise rule_error(
                f"valueFrom names {given} sources",
                "set exactly one of secretKeyRef, configMapKeyRef or fieldRef",
            )
        return self


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


def _names_once(env: list[EnvVar]) -> list[EnvVar]:
    seen: set[str] = set()
    for var in env:
        if var.name in seen:
            raise rule_error(
                f"{var.name} is listed twice (containers key env by name, so the API server refuses the object)",
                "keep one entry per name",
            )
        seen.add(var.name)
    return env


EnvList = Annotated[list[EnvVar], Field(max_length=128), AfterValidator(_names_once)]
ArgList = Annotated[list[Annotated[str, Field(max_length=8192)]], Field(max_length=256)]


def _check_optional_key(key: str) -> str:
    return _check_key("taint key")(key) if key else key


class Toleration(ApiModel):
    """A toleration, as in a Kubernetes pod spec."""

    model_config = with_cel(
        CelRule(
            rule="!(self.operator == 'Exists' && has(self.value) && self.value != '')",
            message="a toleration with operator Exists matches any value: remove value, or use operator Equal",
        ),
        CelRule(
            rule="(has(self.key) && self.key != '') || self.operator == 'Exists'",
            message="a toleration without a key matches every taint and needs operator Exists: set key or "
            "operator Exists",
        ),
        CelRule(
            rule="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            message="tolerationSeconds applies to NoExecute taints only: set effect NoExecute or remove "
            "tolerationSeconds",
        ),
    )

    key: Annotated[str, Field(max_length=316), AfterValidator(_check_optional_key)] | None = Field(
        default=None, description="Taint key the toleration applies to; empty with operator Exists matches all."
    )
    operator: Literal["Exists", "Equal"] = Field(default="Equal", description="Exists or Equal.")
    value: LabelValue | None = Field(default=None, description="Taint value to match when the operator is Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; empty matches all effects."
    )
    toleration_seconds: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="For NoExecute: how long the pod stays bound after the taint appears."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise rule_error("operator Exists matches any value, so value must be empty", "remove value, or use Equal")
        if not self.key and self.operator != "Exists":
            raise rule_error(
                "a toleration without a key matches every taint, which needs operator Exists",
                "set key, or set operator Exists",
            )
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise rule_error(
                "tolerationSeconds applies to NoExecute taints only",
                "set effect NoExecute, or remove tolerationSeconds",
            )
        return self
