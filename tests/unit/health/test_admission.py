"""Admissions pace a rollout: the new pairing revision comes up in both pools together and serving capacity never
drops below what the pools ask for, whatever order engines come up in and however the pools are scaled."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from disagg.health.admission import decide_admissions, serving_capacity
from disagg.health.pods import EnginePod
from disagg.names import POOLS, PoolName
from tests.unit.health.podfactory import engine

_clock = itertools.count()


def _new(role: str, revision: str, generation: int, admitted: bool, up: bool = True) -> EnginePod:
    n = next(_clock)
    return engine(
        f"{role}-{revision}-{n}",
        role,
        revision=revision,
        generation=generation,
        admitted_at=0 if admitted else None,
        up=up,
        created=f"2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}Z",
    )


def _counts(pods: list[EnginePod]) -> dict[PoolName, dict[str, int]]:
    counts: dict[PoolName, dict[str, int]] = {pool: {} for pool in POOLS}
    for pod in pods:
        if pod.routable:
            counts[pod.role][pod.revision] = counts[pod.role].get(pod.revision, 0) + 1
    return counts


def test_a_fresh_deployment_admits_the_pairs_that_passed() -> None:
    pods = [_new("prefill", "a", 1, False), _new("decode", "a", 1, False)]
    decision = decide_admissions(pods, frozenset(p.name for p in pods), {"prefill": 1, "decode": 1}, "a")
    assert set(decision.admit) == {p.name for p in pods} and decision.waiting == ""


def test_one_new_engine_of_a_pair_never_becomes_ready_alone() -> None:
    old = [_new("prefill", "a", 1, True), _new("decode", "a", 1, True)]
    new_prefill = _new("prefill", "b", 2, False)
    decision = decide_admissions([*old, new_prefill], frozenset({new_prefill.name}), {"prefill": 1, "decode": 1}, "b")
    assert decision.admit == ()
    assert "held until admitting them keeps both pools' serving capacity" in decision.waiting


def test_a_one_by_one_rollout_switches_both_pools_at_once() -> None:
    old = [_new("prefill", "a", 1, True), _new("decode", "a", 1, True)]
    new = [_new("prefill", "b", 2, False), _new("decode", "b", 2, False)]
    decision = decide_admissions([*old, *new], frozenset(p.name for p in new), {"prefill": 1, "decode": 1}, "b")
    assert set(decision.admit) == {p.name for p in new}


def test_with_one_decode_the_new_revision_waits_for_every_prefill_it_replaces() -> None:
    old = [_new("prefill", "a", 1, True), _new("prefill", "a", 1, True), _new("decode", "a", 1, True)]
    first = [_new("prefill", "b", 2, False), _new("decode", "b", 2, False)]
    desired: dict[PoolName, int] = {"prefill": 2, "decode": 1}
    passing = frozenset(p.name for p in first)
    assert decide_admissions([*old, *first], passing, desired, "b").admit == ()
    second = _new("prefill", "b", 2, False)
    decision = decide_admissions([*old, *first, second], passing | {second.name}, desired, "b")
    assert len(decision.admit) == 3


def test_larger_pools_move_in_lockstep_when_only_part_of_the_new_revision_is_up() -> None:
    old = [_new("prefill", "a", 1, True) for _ in range(4)] + [_new("decode", "a", 1, True) for _ in range(4)]
    new = [_new("prefill", "b", 2, False) for _ in range(2)] + [_new("decode", "b", 2, False) for _ in range(1)]
    decision = decide_admissions([*old, *new], frozenset(p.name for p in new), {"prefill": 4, "decode": 4}, "b")
    admitted = [p for p in new if p.name in decision.admit]
    assert sorted(p.role for p in admitted) == ["decode", "prefill", "prefill"]


def test_a_scale_up_is_admitted_as_soon_as_it_passes_even_mid_rollout() -> None:
    pods = [_new("prefill", "a", 1, True), _new("decode", "a", 1, True)]
    extra = _new("decode", "a", 1, False)
    decision = decide_admissions([*pods, extra], frozenset({extra.name}), {"prefill": 1, "decode": 2}, "b")
    assert decision.admit == (extra.name,)


def test_candidates_that_did_not_pass_wait_with_their_names() -> None:
    pods = [_new("prefill", "a", 1, True), _new("decode", "a", 1, True), _new("decode", "a", 1, False)]
    decision = decide_admissions(pods, frozenset(), {"prefill": 1, "decode": 2}, "a")
    assert decision.admit == () and f"1 engines to pass a pair probe ({pods[2].name})" in decision.waiting


# ---- the property: a simulated rollout with Deployment controllers that remove surplus pods ------------------


@dataclass
class Cluster:
    desired: dict[PoolName, int]
    pods: list[EnginePod] = field(default_factory=list)

    def controller(self) -> None:
        """What maxUnavailable 0 does: every available pod beyond the desired count removes an old one."""
        for pool in POOLS:
            ready = [p for p in self.pods if p.role == pool and p.routable]
            excess = len(ready) - self.desired[pool]
            old = sorted((p for p in ready if p.revision != "b"), key=lambda p: p.generation)
            for pod in old[: max(excess, 0)]:
                self.pods.remove(pod)


def _admit(pods: list[EnginePod], names: set[str]) -> list[EnginePod]:
    out = []
    for pod in pods:
        if pod.name in names:
            pod = engine(pod.name, pod.role, revision=pod.revision, generation=pod.generation, created=pod.created)
        out.append(pod)
    return out


@settings(max_examples=300, deadline=None)
@given(
    prefill=st.integers(1, 5),
    decode=st.integers(1, 5),
    order=st.lists(st.tuples(st.sampled_from(["prefill", "decode", "scale-prefill", "scale-decode"]), st.booleans())),
)
def test_serving_capacity_never_drops_below_what_the_pools_ask_for(
    prefill: int, decode: int, order: list[tuple[str, bool]]
) -> None:
    desired: dict[PoolName, int] = {"prefill": prefill, "decode": decode}
    cluster = Cluster(desired, [_new(r, "a", 1, True) for r in POOLS for _ in range(desired[r])])
    # The spec changes the pairing revision: both Deployments create every new pod at once (maxSurge 100%).
    waiting = [_new(r, "b", 2, False, up=False) for r in POOLS for _ in range(desired[r])]
    cluster.pods += waiting
    # Then everything comes up eventually: as many steps per role as it can have pods (the scale-ups included).
    steps = [*order, *[(role, True) for role in POOLS for _ in range(max(desired.values()) + len(order))]]
    for what, passes in steps:
        if what.startswith("scale-"):
            pool: PoolName = what.removeprefix("scale-")  # type: ignore[assignment]
            cluster.desired[pool] += 1
            cluster.pods.append(_new(pool, "b", 2, False, up=False))
            continue
        starting = next((p for p in cluster.pods if p.role == what and not p.up), None)
        if starting is not None:  # one more engine finished loading its model
            cluster.pods = [
                engine(
                    p.name, p.role, revision=p.revision, generation=p.generation, admitted_at=None, created=p.created
                )
                if p is starting
                else p
                for p in cluster.pods
            ]
        before = serving_capacity(_counts(cluster.pods))
        # A pair probe passes when both engines are up and of one revision (here: when `passes` says so).
        up = {
            p.revision: {
                r for r in POOLS if any(q.up and q.role == r and q.revision == p.revision for q in cluster.pods)
            }
            for p in cluster.pods
        }
        passing = frozenset(p.name for p in cluster.pods if p.candidate and passes and up[p.revision] == set(POOLS))
        decision = decide_admissions(cluster.pods, passing, cluster.desired, "b")
        cluster.pods = _admit(cluster.pods, set(decision.admit))
        cluster.controller()
        after = serving_capacity(_counts(cluster.pods))
        for pool in POOLS:
            assert after[pool] >= min(cluster.desired[pool], before[pool]), (pool, before, after, decision)
    # Once every new engine is up and passes, the rollout completes: only revision b serves, at full size.
    assert {p.revision for p in cluster.pods if p.routable} == {"b"}
    assert serving_capacity(_counts(cluster.pods)) == cluster.desired
