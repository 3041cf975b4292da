"""Engine selection: policies, pairing revisions (never mixed), drains."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from disagg.frontend.contract import Engine, EngineRole
from disagg.frontend.selection import NoPair, Pair, Selector


def eng(role: EngineRole, i: int, revision: str = "", generation: int = 0) -> Engine:
    return Engine(
        f"{role}-{i}-{revision}",
        role,
        f"http://{role}{i}",
        f"10.0.{i}.1",
        name=f"{role[0]}{i}{revision}",
        revision=revision,
        generation=generation,
    )


def chosen(selector: Selector, now: float = 0.0, key: str | None = None, pin: Engine | None = None) -> Pair:
    result = selector.choose(now, key, pin)
    assert isinstance(result, Pair), result
    return result


def test_round_robin_rotates_both_roles() -> None:
    s = Selector()
    s.update([eng("prefill", 0), eng("prefill", 1), eng("decode", 0), eng("decode", 1)])
    pairs = [chosen(s).label for _ in range(4)]
    assert pairs == ["p0->d0", "p1->d1", "p0->d0", "p1->d1"]


def test_least_loaded_prefers_idle_engines() -> None:
    s = Selector("least_loaded", "least_loaded")
    s.update([eng("prefill", 0), eng("prefill", 1), eng("decode", 0), eng("decode", 1)])
    first = chosen(s)
    s.acquire(first.prefill, first.decode)
    second = chosen(s)
    assert second.prefill != first.prefill and second.decode != first.decode
    s.release(first.prefill, first.decode)
    assert s.inflight(first.prefill) == 0


def test_consistent_hash_keeps_a_key_on_one_decode_and_moves_few_keys_when_one_goes() -> None:
    s = Selector("round_robin", "consistent_hash")
    decodes = [eng("decode", i) for i in range(4)]
    s.update([eng("prefill", 0), *decodes])
    keys = [f"conv-{i}" for i in range(200)]
    before = {k: chosen(s, key=k).decode.key for k in keys}
    assert all(chosen(s, key=k).decode.key == before[k] for k in keys[:20])
    s.update([eng("prefill", 0), *decodes[:3]])
    after = {k: chosen(s, key=k).decode.key for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert all(before[k] == decodes[3].key for k in moved)  # only the vanished engine's keys move
    assert len(Counter(before.values())) == 4


def test_never_pairs_across_revisions() -> None:
    s = Selector()
    s.update([eng("prefill", 0, "a", 1), eng("decode", 0, "b", 2), eng("prefill", 1, "b", 2), eng("decode", 1, "a", 1)])
    for _ in range(20):
        pair = chosen(s)
        assert pair.prefill.revision == pair.decode.revision


def test_an_incomplete_revision_serves_nothing() -> None:
    s = Selector()
    s.update([eng("prefill", 0, "old", 1), eng("decode", 0, "new", 2)])
    result = s.choose(0.0)
    assert isinstance(result, NoPair) and "revision" in result.reason


def test_newest_policy_prefers_the_newest_complete_revision() -> None:
    s = Selector(revision_policy="newest")
    s.update(
        [
            eng("prefill", 0, "old", 1),
            eng("decode", 0, "old", 1),
            eng("prefill", 1, "new", 2),
            eng("decode", 1, "new", 2),
            eng("prefill", 2, "newer", 3),
        ]
    )
    assert {chosen(s).revision for _ in range(10)} == {"new"}


def test_capacity_policy_splits_by_pair_capacity_while_both_revisions_live() -> None:
    s = Selector()
    old = [eng("prefill", i, "old", 1) for i in range(3)] + [eng("decode", i, "old", 1) for i in range(3)]
    new = [eng("prefill", 9, "new", 2), eng("decode", 9, "new", 2)]
    s.update(old + new)
    counts = Counter(chosen(s).revision for _ in range(400))
    assert counts == {"old": 300, "new": 100}


def test_a_key_keeps_its_revision_during_a_rollout() -> None:
    s = Selector()
    s.update(
        [
            eng("prefill", 0, "old", 1),
            eng("decode", 0, "old", 1),
            eng("prefill", 1, "new", 2),
            eng("decode", 1, "new", 2),
        ]
    )
    revisions = {chosen(s, key="user-7").revision for _ in range(10)}
    assert len(revisions) == 1


def test_drained_pairs_are_skipped_until_they_expire() -> None:
    s = Selector()
    p0, d0, d1 = eng("prefill", 0), eng("decode", 0), eng("decode", 1)
    s.update([p0, d0, d1])
    s.drain(p0.key, d0.key, until=10.0, reason="probe failed")
    assert {chosen(s, now=5.0).decode.key for _ in range(6)} == {d1.key}
    assert {chosen(s, now=11.0).decode.key for _ in range(6)} == {d0.key, d1.key}


def test_all_pairs_drained_is_no_pair() -> None:
    s = Selector()
    p0, d0 = eng("prefill", 0), eng("decode", 0)
    s.update([p0, d0])
    s.drain(p0.key, d0.key, None)
    assert isinstance(s.choose(0.0), NoPair)
    assert s.undrain(p0.key, d0.key)
    assert isinstance(s.choose(0.0), Pair)


def test_pinned_decode_wins_and_falls_back_when_drained() -> None:
    s = Selector()
    p0, d0, d1 = eng("prefill", 0), eng("decode", 0), eng("decode", 1)
    s.update([p0, d0, d1])
    assert all(chosen(s, pin=d1).decode == d1 for _ in range(5))
    s.drain(p0.key, d1.key, None)
    assert chosen(s, pin=d1).decode == d0


def test_vanished_engines_lose_their_drains_and_load() -> None:
    s = Selector()
    p0, d0 = eng("prefill", 0), eng("decode", 0)
    s.update([p0, d0])
    s.acquire(p0)
    s.drain(p0.key, d0.key, None)
    s.update([eng("prefill", 1), d0])
    assert s.inflight(p0) == 0 and not s.pairs(0.0)[0].drained


@given(
    st.lists(st.tuples(st.sampled_from(["prefill", "decode"]), st.sampled_from(["a", "b", "c"])), max_size=12),
    st.sampled_from(["capacity", "newest"]),
    st.lists(st.one_of(st.none(), st.text(max_size=4)), max_size=10),
)
def test_property_no_mixed_revision_pair_ever(
    engines: list[tuple[EngineRole, str]], policy: str, keys: list[str | None]
) -> None:
    s = Selector("consistent_hash", "least_loaded", policy)  # type: ignore[arg-type]
    s.update([eng(role, i, rev, ord(rev)) for i, (role, rev) in enumerate(engines)])
    for key in keys:
        result = s.choose(0.0, key)
        if isinstance(result, Pair):
            assert result.prefill.revision == result.decode.revision
        else:
            complete = {r for role, r in engines if role == "prefill"} & {r for role, r in engines if role == "decode"}
            assert not complete


def test_candidates_are_never_chosen_but_listed_as_probe_pairs() -> None:
    from dataclasses import replace

    s = Selector()
    waiting = replace(eng("decode", 1), candidate=True)
    s.update([eng("prefill", 0), eng("decode", 0), waiting, replace(eng("prefill", 1, "new"), candidate=True)])
    assert {chosen(s).label for _ in range(6)} == {"p0->d0"}
    assert [p.label for p in s.candidate_pairs()] == ["p0->d1"]  # same revision only; p1new has no partner
    assert s.revisions(0.0) == {"": 1}
    assert [e.name for e in s.candidates("decode")] == ["d1"]
