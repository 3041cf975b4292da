"""The CustomResourceDefinition, generated from the pydantic models.

pydantic emits JSON Schema 2020-12; the API server wants a *structural* OpenAPI v3 schema: no $ref, a type on
every node, boolean exclusive bounds, int-or-string and preserve-unknown-fields markers instead of unions and
free-form objects, and defaults that nest (a parent object defaults to {} so its children's defaults apply).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import core_schema

from disagg.names import CHILD_NAME_SUFFIXES, GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION

from .deployment import RESERVED_SUFFIX_PATTERN, DisaggDeploymentSpec
from .status import DisaggDeploymentStatus

# JSONSchemaProps keys the API server understands; anything else pydantic emits (title, $defs, examples...) goes.
_ALLOWED_KEYS = {
    "type",
    "format",
    "description",
    "default",
    "enum",
    "maximum",
    "minimum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "maxProperties",
    "minProperties",
    "required",
    "items",
    "properties",
    "additionalProperties",
    "nullable",
    "anyOf",
    "allOf",
    "oneOf",
    "not",
    "example",
}
_EXTENSION_PREFIX = "x-kubernetes-"


class _CrdSchemaGenerator(GenerateJsonSchema):
    """JSON Schema generator that also records defaults produced by default_factory (pydantic omits them)."""

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> dict[str, Any]:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            produced = factory()  # type: ignore[call-arg]
            schema = {key: value for key, value in schema.items() if key != "default_factory"}  # type: ignore[assignment]
            schema["default"] = produced
        return super().default_schema(schema)


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a model."""
    raw = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_CrdSchemaGenerator)
    definitions = raw.get("$defs", {})
    return _convert(raw, definitions, frozenset())


def _convert(node: Mapping[str, Any], definitions: Mapping[str, Any], seen: frozenset[str]) -> dict[str, Any]:
    node = _inline_ref(_collapse_optional(node), definitions, seen)
    result: dict[str, Any] = {}
    if node.get("x-kubernetes-int-or-string"):
        result["x-kubernetes-int-or-string"] = True
        result["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    elif "anyOf" in node or "oneOf" in node:
        raise ValueError(f"cannot express union {node} structurally; use int-or-string or a single type")
    for key, value in node.items():
        if key.startswith(_EXTENSION_PREFIX):
            result[key] = value
        elif key in ("anyOf", "oneOf", "$ref", "$defs", "title", "const", "discriminator", "examples"):
            continue
        elif key == "properties":
            result["properties"] = {name: _convert(child, definitions, seen) for name, child in value.items()}
        elif key == "items":
            result["items"] = _convert(value, definitions, seen)
        elif key == "additionalProperties":
            if isinstance(value, Mapping):
                result["additionalProperties"] = _convert(value, definitions, seen)
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            result[bound] = value
            result[key] = True
        elif key in _ALLOWED_KEYS:
            result[key] = value
    if "const" in node:
        result["enum"] = [node["const"]]
    _settle_type(node, result)
    _settle_default(result)
    return result


def _inline_ref(node: Mapping[str, Any], definitions: Mapping[str, Any], seen: frozenset[str]) -> Mapping[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    name = ref.rsplit("/", 1)[-1]
    if name in seen:
        raise ValueError(f"recursive model {name} cannot be inlined into a structural schema")
    target = dict(definitions[name])
    # A field's own keys (its description, default) override the referenced model's; CEL rules are kept.
    merged = {**target, **{key: value for key, value in node.items() if key != "$ref"}}
    return _inline_ref(merged, definitions, seen | {name})


def _collapse_optional(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """`X | None` arrives as anyOf [X, null]; an absent field already means None, so keep just X.

    Not marking such fields nullable is deliberate: the API server then prunes explicit nulls, so CEL's has()
    and pydantic agree that `field: null` means "unset".
    """
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if not branches:
            continue
        concrete = [branch for branch in branches if branch.get("type") != "null"]
        if len(concrete) == len(branches):
            continue
        rest = {k: v for k, v in node.items() if k != key}
        if len(concrete) == 1:
            return {**concrete[0], **rest}
        return {**rest, key: concrete}
    return node


def _settle_type(node: Mapping[str, Any], result: dict[str, Any]) -> None:
    if result.get("x-kubernetes-int-or-string"):
        result.pop("type", None)
        return
    if "properties" in result:
        result["type"] = "object"
        return
    if result.get("type") == "object" and "additionalProperties" not in result and "properties" not in result:
        # A free-form mapping (dict[str, Any]): keep whatever the user writes.
        result["x-kubernetes-preserve-unknown-fields"] = True
    if "type" not in result and not result.get("x-kubernetes-preserve-unknown-fields"):
        if "enum" in result:
            result["type"] = "string"
        else:
            raise ValueError(f"schema node without a type: {node}")


def _settle_default(result: dict[str, Any]) -> None:
    if "default" not in result:
        return
    default = result["default"]
    if result.get("type") == "object" and "properties" in result and isinstance(default, Mapping):
        # The object's default is spelled out from its properties' own (already settled) defaults: the API server
        # checks a default against the node's CEL rules as written, without defaulting inside it first.
        result["default"] = {
            name: child["default"] for name, child in result["properties"].items() if "default" in child
        }
    elif isinstance(default, Mapping | list) and not default:
        del result["default"]  # an empty map or list is the same as absent
    elif default is None:
        del result["default"]


def resource_schema() -> dict[str, Any]:
    """The schema of the whole resource: spec and status from the models, metadata left to the server."""
    spec = structural_schema(DisaggDeploymentSpec)
    status = structural_schema(DisaggDeploymentStatus)
    status.pop("required", None)
    return {
        "type": "object",
        "description": "A DisaggDeployment serves one model with a prefill pool and a decode pool of vLLM engines, "
        "the KV transfer between them, optional KV cache tiers, and a P/D-aware router in front.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion of this object: disagg.dev/v1alpha1."},
            "kind": {"type": "string", "description": "Kind of this object: DisaggDeployment."},
            # The API server refuses anything but `type` here (metadata is defined by Kubernetes itself).
            "metadata": {"type": "object"},
            "spec": {**spec, "description": "Desired state of the DisaggDeployment."},
            "status": {**status, "description": "Observed state, written by the operator."},
        },
        "x-kubernetes-validations": [
            {
                "rule": "self.metadata.name.size() <= 40",
                "message": "metadata.name must be at most 40 characters (children and their pods are named after "
                "it): choose a shorter name",
                "reason": "FieldValueInvalid",
            },
            {
                "rule": f"!self.metadata.name.matches('{RESERVED_SUFFIX_PATTERN}')",
                "message": "metadata.name must not end with "
                + ", ".join(CHILD_NAME_SUFFIXES)
                + " (the names of another DisaggDeployment's children): choose another name",
                "reason": "FieldValueInvalid",
            },
        ],
    }


PRINTER_COLUMNS = [
    {
        "name": "Prefill",
        "type": "string",
        "jsonPath": ".status.prefillReady",
        "description": "Ready/desired prefill replicas",
    },
    {
        "name": "Decode",
        "type": "string",
        "jsonPath": ".status.decodeReady",
        "description": "Ready/desired decode replicas",
    },
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Summary phase"},
    {
        "name": "Serving",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Serving")].status',
        "description": "Whether requests go prefill -> KV transfer -> decode (the serving check)",
    },
    {
        "name": "Endpoint",
        "type": "string",
        "jsonPath": ".status.endpoint",
        "description": "In-cluster URL of the OpenAI-compatible API",
    },
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name", "priority": 1, "description": "Served model"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def custom_resource_definition() -> dict[str, Any]:
    """The complete apiextensions.k8s.io/v1 CustomResourceDefinition."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "disagg-operator", "app.kubernetes.io/part-of": "disagg-operator"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["all", "disagg"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": resource_schema()},
                }
            ],
        },
    }
