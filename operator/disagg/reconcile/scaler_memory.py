"""The autoscaler's learned state as text, so it survives a failover or a restart (D126).

The policy's state is a tree of frozen dataclasses holding numbers, tuples and None (scaling/policy). It is written
to the DisaggDeployment's `status.scalerState` with the pass's status patch and read back by whichever replica
reconciles next, which then decides exactly as the previous leader would have: same stabilisation history, same
learned capacities, same time of the next evaluation. The text carries a fingerprint of the state's shape (field
names and types, recursively); a state written by an operator version whose policy remembers different things is
not restored, and the policy starts fresh as it does on its very first evaluation (it waits a whole window before
any scale-down, D23). Pure functions; no I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from typing import Any, TypeVar

from disagg.scaling.policy import PolicyState

FORMAT = 1
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Memory:
    state: PolicyState
    evaluated_at: float
    """Wall-clock time of the evaluation that produced the state; the next one is due an interval later."""


def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _shape(tp: Any) -> str:
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        inner = ",".join(f"{f.name}:{_shape(_hints(tp)[f.name])}" for f in dataclasses.fields(tp))
        return f"{tp.__name__}({inner})"
    args = typing.get_args(tp)
    if args:
        origin = typing.get_origin(tp)
        name = "union" if origin in (typing.Union, types.UnionType) else getattr(origin, "__name__", str(origin))
        return f"{name}[{','.join(_shape(a) for a in args)}]"
    return getattr(tp, "__name__", str(tp))


def fingerprint() -> str:
    return hashlib.sha256(_shape(PolicyState).encode()).hexdigest()[:16]


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


def _build(tp: Any, value: Any) -> Any:
    """`value` (parsed JSON) as type `tp`; ValueError when it does not fit."""
    if value is None:
        if tp is type(None) or type(None) in typing.get_args(tp):
            return None
        raise ValueError(f"null where {tp} is expected")
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for option in (a for a in typing.get_args(tp) if a is not type(None)):
            try:
                return _build(option, value)
            except ValueError:
                continue
        raise ValueError(f"{value!r} fits no type of {tp}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise ValueError(f"{tp.__name__} must be an object")
        hints = _hints(tp)
        return tp(**{f.name: _build(hints[f.name], value[f.name]) for f in dataclasses.fields(tp) if f.name in value})
    if origin is tuple:
        if not isinstance(value, list):
            raise ValueError(f"{tp} must be a list")
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_build(args[0], item) for item in value)
        if len(args) != len(value):
            raise ValueError(f"{tp} needs {len(args)} items")
        return tuple(_build(arg, item) for arg, item in zip(args, value, strict=True))
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp in (str, bool) and isinstance(value, tp):
        return value
    raise ValueError(f"{value!r} is not a {tp}")


def encode(memory: Memory) -> str:
    body = {"format": FORMAT, "shape": fingerprint(), "at": memory.evaluated_at, "state": _plain(memory.state)}
    return json.dumps(body, separators=(",", ":"))


def decode(text: str | None) -> Memory | None:
    """The memory in `text`, or None when there is none or it is not from this policy (then the policy starts
    fresh)."""
    if not text:
        return None
    try:
        body = json.loads(text)
        if body.get("format") != FORMAT or body.get("shape") != fingerprint():
            return None
        return Memory(_build(PolicyState, body["state"]), float(body["at"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
