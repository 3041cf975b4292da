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
