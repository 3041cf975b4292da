"""Request ids: unique per request and across frontends, and spread over DP ranks (their first 32 bits pick one)."""

from __future__ import annotations

from collections import Counter

from disagg.frontend.server import _nonces


def test_request_ids_are_128_bit_hex_and_never_repeat_within_or_across_frontends() -> None:
    one, other = _nonces(), _nonces()
    ids = [one() for _ in range(5000)] + [other() for _ in range(5000)]
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert len(set(ids)) == len(ids)


def test_the_bits_that_pick_a_dp_rank_spread_requests_over_every_rank() -> None:
    nonce = _nonces()
    ranks = Counter(int(nonce()[:8], 16) % 4 for _ in range(4000))
    assert set(ranks) == {0, 1, 2, 3}
    assert min(ranks.values()) > 800  # about 1000 each
