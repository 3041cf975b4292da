"""Edges of the scaling policy that mutation testing found unasserted (docs/testing.md, "Mutation testing"): the
ceiling of a pool without maxReplicas, what counts as a burst, how fast the decode fit forgets, where overload
starts, where the anchored decode sizing applies, the scale-up tolerance, the burst hold's median gap and the
forecast of a climbing need; and seed 21's survivors: decode's first size without load, held pools under the GPU
budget, the forecast's off switch, the rising-need message, a window without TTFT, the backlog while replicas start."""

from __future__ import annotations

import math
from dataclasses import replace

from disagg.scaling.policy import PolicyState, PoolMemory, Tuning, config_from_spec
from disagg.scaling.policy.limits import burst_hold, forecast_need, stabilized
from disagg.scaling.policy.proposal import Proposal
from disagg.scaling.policy.state import MOMENTS, recommendation
from disagg.scaling.snapshot import PoolSnapshot
from tests.unit.scaling.test_policy import INTERVAL, Run, decode_snap, make_spec, prefill_snap, steady_decode_need


def test_without_max_replicas_an_autoscaled_pool_stays_within_its_spec_replicas() -> None:
    config = config_from_spec(make_spec(prefill={"replicas": 1, "autoscaling": {"maxReplicas": None}}))
    assert config.prefill.max_replicas == 1
    run = Run(make_spec(prefill={"replicas": 1, "autoscaling": {"maxReplicas": None}}))
    d = run.step(prefill_snap(0.0, ready=1, rps=60.0), decode_snap(0.0))
    assert d.prefill is not None and d.prefill.replicas == 1


def _burst_after_step(rps: float) -> bool:
    run = Run(make_spec())
    run.steady(25, rps=60.0, ready=4)  # 60 req/s needs 4 replicas
    assert run.state is not None and run.state.prefill.burst_at is None
    d = run.step(prefill_snap(run.now, ready=4, rps=rps), decode_snap(run.now))
    assert d.prefill is not None and d.prefill.replicas > 4
    return run.state.prefill.burst_at is not None


def test_a_scale_up_counts_as_a_burst_only_at_burst_factor_times_the_pool() -> None:
    # From 4 replicas with the SLO met: a need of 6 is ordinary growth, one past 8 (burst_factor 2) a burst.
    assert not _burst_after_step(100.0)
    assert _burst_after_step(150.0)


def test_the_decode_fit_forgets_old_windows_with_its_half_life() -> None:
    run = Run(make_spec())
    run.steady(200)
    assert run.state is not None
    weight = run.state.itl_fit.moments[MOMENTS.index((0, 0))]
    # Windows every 15 s, each weighing half after 600 s: the total weight tends to 1 / (1 - 0.5 ** (15 / 600)).
    limit = 1 / (1 - 0.5 ** (INTERVAL / Tuning().itl_fit_half_life_s))
    assert 0.9 * limit < weight <= limit


def test_kv_usage_at_the_ceiling_is_not_yet_overload_and_still_teaches_the_fit() -> None:
    run = Run(make_spec())
    run.steady(10)
    assert run.state is not None
    before = run.state.itl_fit.moments
    at_ceiling = decode_snap(run.now, kv=Tuning().kv_ceiling)
    run.step(prefill_snap(run.now), at_ceiling)
    assert run.state.itl_fit.moments != before
    before = run.state.itl_fit.moments
    run.step(prefill_snap(run.now), replace(decode_snap(run.now, kv=Tuning().kv_ceiling + 0.01)))
    assert run.state.itl_fit.moments == before


def test_a_pool_running_exactly_the_minimum_anchor_batch_is_sized_along_the_secant() -> None:
    # As in test_decode_sizes_from_where_it_runs_not_from_an_extrapolated_fit: 27 sequences per replica.
    def need_with(tuning: Tuning) -> float:
        return steady_decode_need(tuning, replicas=2, kv_cache_usage=0.063)

    anchored = need_with(Tuning())
    assert need_with(Tuning(itl_anchor_min_batch=27.0)) == anchored
    assert need_with(Tuning(itl_anchor_min_batch=27.5)) != anchored


def test_a_need_within_the_up_tolerance_is_noise_unless_the_slo_is_broken() -> None:
    config, tuning = config_from_spec(make_spec()), Tuning()
    edge = 2 * (1.0 + tuning.up_tolerance)  # 2.2 replicas on 2: within the tolerance, up to its very edge

    def verdict(need: float, breach: bool = False) -> tuple[int, str]:
        return stabilized(config, "prefill", Proposal(need, "", breach=breach), PolicyState(), 2, 0.0, tuning)

    assert verdict(2.1) == (2, "steady")
    assert verdict(edge) == (2, "steady")
    assert verdict(edge + 0.01) == (3, "scale up")
    assert verdict(2.1, breach=True) == (3, "scale up")


def test_the_adaptive_burst_hold_follows_the_longest_recent_gap_between_bursts() -> None:
    config, tuning = config_from_spec(make_spec()), Tuning()
    window = config.down_window_s
    # Gaps 100, 200, 300, 400, 500 s: held for the longest, 500 s (under the cap of 4 windows).
    bursts = (0.0, 100.0, 300.0, 600.0, 1000.0, 1500.0)
    assert burst_hold(config, PoolMemory(bursts=bursts), tuning) == 500.0
    # Without the last burst the longest gap is 400 s: still more than one 300 s window.
    assert burst_hold(config, PoolMemory(bursts=bursts[:5]), tuning) == max(400.0, window)


def test_a_climbing_need_is_forecast_one_horizon_ahead_when_forecasting_is_on() -> None:
    tuning = Tuning(forecast_horizon_s=60.0)
    history = tuple(recommendation(t, 2.0 + 0.01 * t, tuning) for t in range(0, 121, 15))
    forecast = forecast_need(history, 120.0, tuning)
    assert forecast is not None and math.isclose(forecast, 3.2 + 0.01 * 60.0)
    assert forecast_need(history, 120.0, Tuning()) is None  # off by default
    flat = tuple(recommendation(t, 2.0, tuning) for t in range(0, 121, 15))
    assert forecast_need(flat, 120.0, tuning) is None


def _prefill_need(**snap: float | None) -> float:
    run = Run(make_spec())
    d = run.step(replace(prefill_snap(0.0), **snap), decode_snap(0.0))
    assert d.prefill is not None and d.prefill.need is not None, d.prefill
    return d.prefill.need


def test_a_queue_adds_backlog_to_drain_unless_replicas_are_already_starting_for_it() -> None:
    assert _prefill_need(waiting_requests=40.0) > _prefill_need(waiting_requests=0.0)
    # One starting replica is enough to say the queue was already answered.
    starting = {"starting_replicas": 1}
    assert _prefill_need(waiting_requests=40.0, **starting) == _prefill_need(waiting_requests=0.0, **starting)


def test_without_a_request_rate_prefill_is_sized_by_tokens_at_the_highest_utilisation() -> None:
    # No request rate, so no prompt size and no queueing model: one replica's 40k tokens/s at max_utilization.
    need = _prefill_need(request_rate=None, prompt_token_rate=40_000.0)
    assert math.isclose(need, 1 / Tuning().max_utilization)


def test_until_the_pool_reports_its_capacity_the_prior_per_gpu_stands_in() -> None:
    prior = Tuning().prefill_capacity_prior * config_from_spec(make_spec()).prefill.gpus_per_replica
    assert _prefill_need(prefill_tokens_per_busy_s=None) == _prefill_need(prefill_tokens_per_busy_s=prior)


def _reason_after(spec_slo: dict[str, str], **snap: float | None) -> str:
    run = Run(make_spec(slo=spec_slo))
    run.steady(10)
    d = run.step(replace(prefill_snap(run.now), **snap), decode_snap(run.now))
    assert d.prefill is not None
    return d.prefill.reason


def test_the_ttft_feedback_needs_both_a_measured_ttft_and_a_measured_queue() -> None:
    over = "over target"
    assert over in _reason_after({"ttftP90": "1s"}, ttft_p90_s=1.5, waiting_requests=5.0)
    # An unknown TTFT is not a broken one, even against a target under a second.
    assert over not in _reason_after({"ttftP90": "500ms", "itlP90": "25ms"}, ttft_p90_s=None, waiting_requests=5.0)
    # A broken TTFT with no queue reported is not a queue.
    assert over not in _reason_after({"ttftP90": "1s", "itlP90": "25ms"}, ttft_p90_s=1.5, waiting_requests=None)


def test_a_hold_message_names_the_source_s_reason_and_only_when_there_is_one() -> None:
    def reason(health_reason: str | None) -> str:
        run = Run(make_spec())
        run.steady(5)
        stale = PoolSnapshot("prefill", run.now - 600.0, INTERVAL, 2, request_rate=0.0, health_reason=health_reason)
        d = run.step(stale, decode_snap(run.now))
        assert d.prefill is not None and d.prefill.hold == "MetricsStale"
        return d.prefill.reason

    assert reason(None).endswith("prefill metrics are 600s old")
    assert reason("scrape timed out").endswith("prefill metrics are 600s old: scrape timed out")


def test_a_decode_p90_at_its_target_is_not_safe_to_shrink_whatever_the_mean_says() -> None:
    """The fit reads the mean ITL (D180's exact signal), but a p90 already at the target means a smaller pool would
    break it: the mean alone, well below the target here, must not let decode shrink."""
    from disagg.scaling.policy.decode import propose_decode

    config = config_from_spec(make_spec())
    target = config.itl_target_s
    assert target is not None
    state = PolicyState()

    def proposal(p90: float) -> Proposal:
        snap = replace(decode_snap(0.0), itl_mean_s=0.3 * target, itl_p90_s=p90)
        return propose_decode(config, snap, state, state.decode, Tuning())

    calm = proposal(0.9 * target)
    assert calm.safe_to_shrink and calm.shrink_note == ""
    at_target = proposal(target)
    assert not at_target.safe_to_shrink
    assert at_target.shrink_note == (f"ITL {0.3 * target:.4f}s is near the {target:.4f}s target or requests are queued")


def test_the_gpu_budget_cuts_the_pool_whose_replicas_would_carry_the_least_need_each() -> None:
    """Over the budget by one GPU: removing a decode replica leaves 4.0 needed over 5 (0.8 each), removing a prefill
    one leaves 1.0 over 1 (1.0 each), so decode gives one up, although its need is the larger."""
    from disagg.scaling.policy.limits import _gpu_budget

    config = config_from_spec(make_spec(maxGpus=7))
    proposals = {"prefill": Proposal(need=1.0, why=""), "decode": Proposal(need=4.0, why="")}
    notes: dict[str, list[str]] = {"prefill": [], "decode": []}
    out = _gpu_budget(config, proposals, {"prefill": 2, "decode": 6}, notes)  # type: ignore[arg-type]
    assert out == {"prefill": 2, "decode": 5}
    assert notes == {"prefill": [], "decode": ["cut to 5 by the GPU budget of 7"]}


def test_a_pool_held_at_its_minimum_says_minreplicas() -> None:
    run = Run(make_spec(prefill={"autoscaling": {"minReplicas": 2}}))
    for _ in range(60):  # past the stabilisation window: the model's 1 replica is what is wanted
        d = run.step(prefill_snap(run.now, rps=1.0), decode_snap(run.now))
    assert d.prefill is not None and d.prefill.replicas == 2
    assert "held at minReplicas 2 (wanted 1)" in d.prefill.reason


def test_while_decode_is_queued_the_first_tokens_teach_prefill_nothing() -> None:
    """In P/D a first token also waits for a decode slot: slow first tokens while decode queues are not prefill's
    burstiness, and k stays unlearned; the same windows with decode keeping up do teach it. (A queue for slots, D230:
    10 waiting beside 100 running, on a pool whose KV is past half its ceiling.)"""
    from tests.unit.scaling.test_policy import ttft_histogram

    def learned(waiting: float) -> float | None:
        run = Run(make_spec())
        for _ in range(6):
            queued = replace(decode_snap(run.now, kv=0.45), waiting_requests=waiting)
            run.step(replace(prefill_snap(run.now), ttft_histogram=ttft_histogram(0.08)), queued)
        assert run.state is not None
        return run.state.queue_factor

    assert learned(0.0) is not None
    assert learned(10.0) is None


def test_a_measured_capacity_moves_the_learned_one_part_of_the_way() -> None:
    """Capacity is smoothed (Tuning.capacity_smoothing): a new measurement pulls the learned value towards it, never
    past it nor away from it."""
    from disagg.scaling.policy.state import ewma

    assert ewma(None, 5.0, 0.2) == 5.0
    assert ewma(10.0, 20.0, 0.25) == 12.5
    assert ewma(20.0, 10.0, 0.25) == 17.5
    run = Run(make_spec())
    run.steady(4)
    assert run.state is not None and run.state.prefill_capacity == 40_000.0
    faster = replace(prefill_snap(run.now), prefill_tokens_per_busy_s=50_000.0)
    run.step(faster, decode_snap(run.now))
    smoothing = Tuning().capacity_smoothing
    assert run.state.prefill_capacity == 40_000.0 + smoothing * 10_000.0


def test_without_a_target_for_its_slo_a_pool_is_held_and_the_message_names_the_missing_field() -> None:
    run = Run(make_spec(slo={"itlP90": "25ms"}))
    d = run.step(prefill_snap(0.0), decode_snap(0.0))
    assert d.prefill is not None and d.prefill.hold == "NoSloTarget"
    assert d.prefill.reason == "holding prefill at 2: no ttftP90 target to size prefill by"
    run = Run(make_spec(slo={"ttftP90": "1s"}))
    d = run.step(prefill_snap(0.0), decode_snap(0.0))
    assert d.decode is not None and d.decode.hold == "NoSloTarget"
    assert d.decode.reason == "holding decode at 3: no itlP90 target to size decode by"


# Seed 21's `scaling/` survivors (docs/testing.md, "Mutation testing").


def test_a_first_decode_evaluation_without_load_holds_the_ready_and_the_starting_replicas() -> None:
    """Nothing to size decode by yet and no decision remembered: the size the pool is heading for, ready plus
    starting, is held (not the ready ones alone, which would order the starting replicas away)."""
    from disagg.scaling.policy.decode import propose_decode

    config = config_from_spec(make_spec())
    unknown = replace(decode_snap(0.0, ready=2, starting=1), kv_cache_usage=None)
    proposal = propose_decode(config, unknown, PolicyState(), PoolMemory(), Tuning())
    assert proposal.need == 3.0
    assert proposal.why == "decode load unknown; holding the current size"
    remembered = propose_decode(config, unknown, PolicyState(), PoolMemory(replicas=5), Tuning())
    assert remembered.need == 5.0


def test_the_gpu_budget_never_takes_replicas_from_a_held_pool() -> None:
    """A pool held (stale metrics here) keeps its size: over the budget, the cut falls on the pool the policy can
    move, even where the held one's replicas would carry less need each (as in the test above)."""
    from disagg.scaling.policy.limits import _gpu_budget

    config = config_from_spec(make_spec(maxGpus=7))
    held = Proposal(need=4.0, why="", hold="MetricsStale")
    proposals = {"prefill": Proposal(need=1.0, why=""), "decode": held}
    notes: dict[str, list[str]] = {"prefill": [], "decode": []}
    out = _gpu_budget(config, proposals, {"prefill": 2, "decode": 6}, notes)  # type: ignore[arg-type]
    assert out == {"prefill": 1, "decode": 6}
    assert notes == {"prefill": ["cut to 1 by the GPU budget of 7"], "decode": []}


def test_a_forecast_horizon_of_one_second_still_forecasts() -> None:
    """Only a horizon of 0 turns the forecast off: any positive one extrapolates the climb that far."""
    tuning = Tuning(forecast_horizon_s=1.0)
    history = tuple(recommendation(t, 2.0 + 0.01 * t, tuning) for t in range(0, 121, 15))
    forecast = forecast_need(history, 120.0, tuning)
    assert forecast is not None and math.isclose(forecast, 3.2 + 0.01)


def test_a_scale_down_deferred_for_a_rising_need_gives_the_rise_in_replicas_per_minute() -> None:
    """The need climbs from 1 to 2 replicas over the 300 s window, on 6 replicas observed for longer: the scale-down
    waits, and the message gives the slope as kubectl shows it, +0.20 replicas a minute."""
    config, tuning = config_from_spec(make_spec()), Tuning()
    window = config.down_window_s
    assert window == 300.0
    now = 600.0
    history = tuple(recommendation(now - window + t, 1.0 + t / window, tuning) for t in range(0, 300, 15))
    state = PolicyState(prefill=PoolMemory(history=history, observed_at=0.0))
    verdict = stabilized(config, "prefill", Proposal(2.0, ""), state, 6, now, tuning)
    assert verdict == (6, "scale-down deferred: the need is rising (+0.20 replicas/min over the window)")


def test_a_window_without_a_ttft_teaches_the_queueing_factor_nothing() -> None:
    """A source that reports no TTFT (and no TTFT histogram): the windows that would teach k at utilisation 0.75
    (test_observed_latency_corrects_the_prefill_model) leave it unlearned, and the policy keeps deciding."""
    known, unknown = Run(make_spec()), Run(make_spec())
    for _ in range(20):
        known.step(prefill_snap(known.now, ready=1, rps=15.0, ttft=0.4), decode_snap(known.now))
        d = unknown.step(
            replace(prefill_snap(unknown.now, ready=1, rps=15.0), ttft_p90_s=None), decode_snap(unknown.now)
        )
        assert d.prefill is not None
    assert known.state is not None and known.state.queue_factor is not None
    assert unknown.state is not None and unknown.state.queue_factor is None


def test_while_replicas_start_a_queue_adds_no_backlog_at_all() -> None:
    """The queue is what the starting replicas were ordered for: the need is the demand's alone, as with no queue on
    a pool with nothing starting, and the reason says +0 backlog."""
    starting = _prefill_need(waiting_requests=40.0, starting_replicas=1)
    assert starting == _prefill_need(waiting_requests=0.0, starting_replicas=0)
    run = Run(make_spec())
    d = run.step(replace(prefill_snap(0.0), waiting_requests=40.0, starting_replicas=1), decode_snap(0.0))
    assert d.prefill is not None and "(+0 backlog)" in d.prefill.reason
