"""The base every API model shares: camelCase on the wire, strict types, unknown fields refused."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Base of every DisaggDeployment model.

    Strict mode keeps `disagg validate` in step with the API server: a string "4" where an integer belongs is an
    error in both places, instead of being coerced by one and refused by the other. Only the camelCase spelling
    is accepted from users, so `tensor_parallel` is reported as an unknown field rather than silently working.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
        extra="forbid",
        strict=True,
        frozen=True,
        use_attribute_docstrings=False,
    )
