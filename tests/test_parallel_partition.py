"""The pipeline stage partitioner against brute force, at its edges, and on bad input.

Memory is drawn as whole bytes so that float sums are exact and a cap can bind to
the byte; times are arbitrary floats and compared approximately.
"""

import itertools
import math
import time

import numpy as np
import pytest

from meshrt.parallel.partition import Partition, PartitionError, partition, pipeline_step_time

GiB = 1 << 30


def _splits(n, k):
    for cuts in itertools.combinations(range(1, n), k - 1):
        yield (0, *cuts)


def _cost(starts, t, static, act, caps, flight, boundary):
    """(stage times, stage memory) of one split, summed the slow, obvious way."""
    n, k = len(t), len(starts)
    times, mems = [], []
    for s, (i, j) in enumerate(zip(starts, (*starts[1:], n), strict=True)):
        times.append(sum(t[i:j]) + (boundary[j - 1] if s < k - 1 else 0.0))
        mems.append(sum(static[i:j]) + flight[s] * sum(act[i:j]))
    return times, mems


def _optimum(t, static, act, k, caps, flight, boundary):
    """The smallest bottleneck over every split that fits, or None if none does."""
    best = None
    for starts in _splits(len(t), k):
        times, mems = _cost(starts, t, static, act, caps, flight, boundary)
        if all(m <= c for m, c in zip(mems, caps, strict=True)):
            best = max(times) if best is None else min(best, max(times))
    return best


def _instance(rng, scenario):
    n = int(rng.integers(1, 10))
    k = int(rng.integers(1, min(4, n) + 1))
    t = rng.random(n).tolist()
    static = rng.integers(0, 100, n).astype(float).tolist()
    act = rng.integers(0, 30, n).astype(float).tolist()
    boundary = [0.0] * n
    flight = [1.0] * k
    if scenario == "no cap":
        caps = [math.inf] * k
    elif scenario == "one cap":
        total = sum(static) + sum(act)
        caps = [float(int(total / k * rng.uniform(0.8, 2.0)))] * k
    else:  # per-stage caps, in-flight counts and send costs
        boundary = (rng.random(n) * 0.5).tolist()
        flight = rng.integers(1, 5, k).astype(float).tolist()
        total = sum(static) + max(flight) * sum(act)
        caps = [float(int(total / k * x)) for x in rng.uniform(0.6, 2.5, k)]
    return t, static, act, k, caps, flight, boundary


@pytest.mark.parametrize("scenario", ["no cap", "one cap", "per stage"])
def test_matches_brute_force_on_small_models(scenario):
    rng = np.random.default_rng(["no cap", "one cap", "per stage"].index(scenario))
    feasible = infeasible = capped = 0
    for _ in range(300):
        t, static, act, k, caps, flight, boundary = _instance(rng, scenario)
        want = _optimum(t, static, act, k, caps, flight, boundary)
        cap = caps[0] if scenario == "one cap" else caps
        inflight = None if scenario != "per stage" else flight
        sends = None if scenario != "per stage" else boundary
        if want is None:
            with pytest.raises(PartitionError):
                partition(t, static, act, k, cap, inflight=inflight, boundary_cost=sends)
            infeasible += 1
            continue
        got = partition(t, static, act, k, cap, inflight=inflight, boundary_cost=sends)
        feasible += 1
        assert got.bottleneck == pytest.approx(want, rel=1e-9, abs=1e-12)
        assert len(got.starts) == k and got.starts[0] == 0
        assert all(a < b for a, b in zip(got.starts, (*got.starts[1:], len(t)), strict=True))
        times, mems = _cost(got.starts, t, static, act, caps, flight, boundary)
        assert got.stage_time == pytest.approx(times) and got.bottleneck == max(got.stage_time)
        assert got.stage_memory == tuple(mems)
        assert all(m <= c for m, c in zip(mems, caps, strict=True))
        free = _optimum(t, static, act, k, [math.inf] * k, flight, boundary)
        capped += want > free
    assert feasible > 100
    if scenario != "no cap":  # the caps must actually bind, or this tests nothing about them
        assert infeasible > 10 and capped > 10


def test_a_cap_met_to_the_byte_fits():
    assert partition([1, 1, 1, 1], [3, 3, 3, 3], [0] * 4, 2, cap=6).starts == (0, 2)
    with pytest.raises(PartitionError):
        partition([1, 1, 1, 1], [3, 3, 3, 3], [0] * 4, 2, cap=5.999)


def test_ties_break_the_same_way_every_time():
    cases = [([0.0] * 7, 3), ([1, 0, 0, 1, 0, 0, 1], 3), ([2, 1, 1, 2, 1, 1], 2)]
    for t, k in cases:
        first = partition(t, [0] * len(t), [0] * len(t), k, cap=1.0)
        assert all(partition(t, [0] * len(t), [0] * len(t), k, cap=1.0) == first for _ in range(3))


def test_one_stage_takes_everything_and_sends_nothing():
    p = partition([1, 2, 3], [10, 20, 30], [1, 2, 3], 1, cap=100, inflight=[4],
                  boundary_cost=[5, 5, 5])
    assert p == Partition((0,), (6.0,), (60.0 + 4 * 6.0,), 6.0)


def test_one_layer_per_stage_charges_each_send_to_the_sender():
    p = partition([3, 1, 2], [1, 2, 3], [0, 0, 0], 3, cap=[1, 2, 3], boundary_cost=[1, 1, 100])
    assert p.starts == (0, 1, 2)
    assert p.stage_time == (4.0, 2.0, 2.0) and p.stage_memory == (1.0, 2.0, 3.0)


def test_a_costly_boundary_is_not_cut():
    p = partition([1, 1, 1, 1], [0] * 4, [0] * 4, 2, cap=1.0, boundary_cost=[0, 5, 0, 0])
    assert p.starts != (0, 2) and p.bottleneck == 3


def test_in_flight_microbatches_multiply_activation_memory():
    # 1F1B's first stage keeps one microbatch per stage alive; the last keeps one.
    even = partition([1] * 4, [0] * 4, [1] * 4, 2, cap=4)
    assert even.starts == (0, 2) and even.stage_memory == (2.0, 2.0)
    skewed = partition([1] * 4, [0] * 4, [1] * 4, 2, cap=4, inflight=[4, 1])
    assert skewed.starts == (0, 1) and skewed.stage_memory == (4.0, 3.0)


def test_a_layer_too_big_for_every_stage_is_named():
    names = [f"h.{i}" for i in range(10)]
    static = [GiB / 2] * 10
    static[7] = 4 * GiB
    with pytest.raises(PartitionError, match=r"layer 'h.7'.* 3.00 GiB.*short by 1.00 GiB.*pp"):
        partition([1] * 10, static, [0] * 10, 2, cap=[2 * GiB, 3 * GiB], names=names)
    # best case for this layer is the stage keeping fewest microbatches: 2 + 1 GiB
    act = [0] * 10
    act[7] = GiB
    static[7] = 2 * GiB
    with pytest.raises(PartitionError, match=r"layer 'h.7'.*short by 512.00 MiB"):
        partition([1] * 10, static, act, 2, cap=2.5 * GiB, inflight=[4, 1], names=names)
    assert issubclass(PartitionError, ValueError)


def test_a_model_too_big_in_total_names_the_first_layer_left_over():
    names = [f"h.{i}" for i in range(5)]
    with pytest.raises(PartitionError, match=r"'h.4'.*1.00 GiB"):
        partition([1] * 5, [GiB] * 5, [0] * 5, 2, cap=2 * GiB, names=names)


def test_caps_too_uneven_for_non_empty_stages():
    with pytest.raises(PartitionError, match="non-empty"):
        partition([1, 1], [5, 5], [0, 0], 2, cap=[10, 1])


GOOD = dict(time=[1, 1, 1], static_mem=[0, 0, 0], act_mem=[0, 0, 0], stages=2, cap=1.0)


@pytest.mark.parametrize(("change", "named"), [
    (dict(time=[]), "time"),
    (dict(time=[1, -1, 1]), "time"),
    (dict(time=[1, math.nan, 1]), "time"),
    (dict(time=[[1, 1, 1]]), "time"),
    (dict(static_mem=[0, 0]), "static_mem"),
    (dict(static_mem=[0, -1, 0]), "static_mem"),
    (dict(act_mem=[0, 0, 0, 0]), "act_mem"),
    (dict(act_mem=[0, math.nan, 0]), "act_mem"),
    (dict(stages=0), "stages"),
    (dict(stages=4), "stages"),
    (dict(stages=1.5), "stages"),
    (dict(cap=[1.0, 1.0, 1.0]), "cap"),
    (dict(cap=-1.0), "cap"),
    (dict(cap=math.nan), "cap"),
    (dict(inflight=[1, 1, 1]), "inflight"),
    (dict(inflight=[1, -2]), "inflight"),
    (dict(boundary_cost=[0, 0]), "boundary_cost"),
    (dict(boundary_cost=[0, -1, 0]), "boundary_cost"),
    (dict(names=["a", "b"]), "names"),
])
def test_bad_input_names_the_argument(change, named):
    with pytest.raises(ValueError, match=rf"\b{named}\b") as info:
        partition(**{**GOOD, **change})
    assert not isinstance(info.value, PartitionError)


def test_pipeline_step_time_is_fill_drain_over_the_slowest_stage():
    p = partition([1] * 8, [0] * 8, [0] * 8, 4, cap=1.0)
    assert p.starts == (0, 2, 4, 6) and p.bottleneck == 2
    assert pipeline_step_time(p, microbatches=8) == (8 + 4 - 1) * 2


def test_thousands_of_layers_on_dozens_of_stages():
    # Runs to show it finishes (the pytest timeout bounds it); the time is printed, not asserted.
    rng = np.random.default_rng(0)
    n, k = 2000, 64
    partition([1.0], [0.0], [0.0], 1, cap=1.0)  # compile outside the timing
    t, static, act = rng.random(n), rng.random(n), rng.random(n)
    cap = (static.sum() + act.sum()) / k * 1.3
    start = time.perf_counter()
    p = partition(t, static, act, k, cap, boundary_cost=rng.random(n) * 0.01)
    balanced = time.perf_counter() - start
    assert len(p.starts) == k and max(p.stage_memory) <= cap
    assert p.bottleneck >= max(t.max(), t.sum() / k)
    # one giant layer: the time pruning never fires, every (start, end) pair is visited
    t = np.full(n, 1e-9)
    t[0] = 1e6
    start = time.perf_counter()
    p = partition(t, np.zeros(n), np.zeros(n), k, cap=math.inf)
    worst = time.perf_counter() - start
    assert p.bottleneck == pytest.approx(1e6)
    print(f"n={n} k={k}: {balanced * 1e3:.1f} ms balanced, {worst * 1e3:.1f} ms worst case")
