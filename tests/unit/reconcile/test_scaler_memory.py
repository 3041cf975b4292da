"""The autoscaler's learned state survives as text in status, and text from another policy shape is ignored
(decision D126)."""

from __future__ import annotations

import json

from disagg.reconcile import scaler_memory
from disagg.scaling.policy import ItlFit, PolicyState, PoolMemory, Recommendation


def learned() -> PolicyState:
    history = (Recommendation(at=10.0, up_to=3, down_to=2, need=2.4), Recommendation(at=40.0, up_to=4, down_to=3))
    return PolicyState(
        prefill=PoolMemory(replicas=3, changed_at=40.0, direction=1, history=history, observed_at=10.0, waiting=2.0),
        decode=PoolMemory(replicas=2, burst_at=30.0, bursts=(12.0, 30.0), ready=2, load=850.25),
        prefill_capacity=41000.5,
        queue_factor=None,
        itl_point=(2, 17.5, 0.031),
        itl_aim=0.82,
        itl_fit=ItlFit(moments=tuple(float(i) for i in range(9)), at=40.0),
    )


def test_the_state_comes_back_equal() -> None:
    memory = scaler_memory.Memory(learned(), evaluated_at=1234.5)
    assert scaler_memory.decode(scaler_memory.encode(memory)) == memory


def test_text_that_is_not_this_policys_state_starts_fresh() -> None:
    text = scaler_memory.encode(scaler_memory.Memory(learned(), 1.0))
    other_shape = {**json.loads(text), "shape": "0" * 16}
    broken = {**json.loads(text), "state": {"prefill": {"replicas": "three"}}}
    for bad in (None, "", "{", json.dumps(other_shape), json.dumps(broken), json.dumps({"format": 99})):
        assert scaler_memory.decode(bad) is None, bad


def test_a_state_of_another_shape_has_another_fingerprint() -> None:
    """What a text's fingerprint stands for: a policy that remembers a field under another name, of another type,
    optional or not, or a tuple of other items, writes a shape this one does not restore; the same shape, defined
    again, is the same text (the fingerprint is a digest of it, so every operator version computes it alike)."""
    import dataclasses
    from typing import Optional

    def shape(*fields: tuple[str, object], name: str = "Memory") -> str:
        return scaler_memory._shape(dataclasses.make_dataclass(name, list(fields), frozen=True))

    base = shape(
        ("replicas", int), ("load", float | None), ("history", tuple[float, ...]), ("point", tuple[int, float])
    )
    assert base == shape(
        ("replicas", int), ("load", float | None), ("history", tuple[float, ...]), ("point", tuple[int, float])
    )
    others = [
        shape(("count", int), ("load", float | None), ("history", tuple[float, ...]), ("point", tuple[int, float])),
        shape(
            ("replicas", float), ("load", float | None), ("history", tuple[float, ...]), ("point", tuple[int, float])
        ),
        shape(("replicas", int), ("load", float), ("history", tuple[float, ...]), ("point", tuple[int, float])),
        shape(("replicas", int), ("load", int | None), ("history", tuple[float, ...]), ("point", tuple[int, float])),
        shape(("replicas", int), ("load", float | None), ("history", tuple[int, ...]), ("point", tuple[int, float])),
        shape(
            ("replicas", int), ("load", float | None), ("history", tuple[float, float]), ("point", tuple[int, float])
        ),
        shape(("replicas", int), ("load", float | None), ("history", tuple[float, ...]), ("point", tuple[int, int])),
        shape(("replicas", int), ("load", float | None), ("history", tuple[float, ...])),
        shape(
            ("replicas", int),
            ("load", float | None),
            ("history", tuple[float, ...]),
            ("point", tuple[int, float]),
            name="Other",
        ),
    ]
    assert len({base, *others}) == len(others) + 1
    # The spellings of one union are one shape; a list is not a tuple.
    assert shape(("load", Optional[float])) == shape(("load", float | None))  # noqa: UP045
    assert shape(("history", list[float])) != shape(("history", tuple[float, ...]))


def test_a_nested_state_of_another_shape_has_another_fingerprint() -> None:
    import dataclasses

    inner = dataclasses.make_dataclass("Fit", [("at", float)], frozen=True)
    other = dataclasses.make_dataclass("Fit", [("at", int)], frozen=True)
    outer = [dataclasses.make_dataclass("State", [("fit", fit | None)], frozen=True) for fit in (inner, other)]
    assert scaler_memory._shape(outer[0]) != scaler_memory._shape(outer[1])
    assert scaler_memory._shape(PolicyState) == scaler_memory._shape(PolicyState)
