"""The curves' judges, pure: divergence by robust z-score over a window, stragglers (chronic,
once, none, not revealed) from compute times or arrival, NaN (Megatron's count too), spikes."""

from __future__ import annotations

import math
import random

from ddptui.insight.divergence import WINDOW, WITHIN, DivergenceWatch, robust_z
from ddptui.insight.judge import Judge, Kind
from ddptui.insight.straggler import MIN_STEPS, Evidence, StragglerWatch
from ddptui.metrics.recognizers import NAN_COUNT

NODES = {0: "a", 1: "a", 2: "b", 3: "b"}


def loss(step: int, rank: int, rnd: random.Random) -> float:
    return 4.0 * math.exp(-step / 60) + 1.5 + rnd.uniform(-0.03, 0.03) + 0.01 * rank


def run(steps: int = 90, *, drift: int | None = None, slow: int | None = None,
        nan_at: int | None = None, spike_at: int | None = None, jitter: float = 0.02,
        seed: int = 1, compute: bool = False, work: float = 0.05) -> Judge:
    """A synchronous 4-rank run as ddptui would see it: each rank's line of a step arrives
    after its work (``slow``'s three times as long), plus read jitter; the next step starts
    when the slowest is done."""
    rnd = random.Random(seed)
    j = Judge()
    t = 1000.0
    for step in range(steps):
        works = {r: work * (3 if r == slow else 1) for r in range(4)}
        end = max(works.values())
        for r in range(4):
            v = loss(step, r, rnd)
            if drift is not None and r == 3 and step >= drift:
                v += 0.5 + 0.03 * (step - drift)
            if r == 0 and step == nan_at:
                v = float("nan")
            if r == 0 and step == spike_at:
                v *= 10
            values = {"loss": v}
            if compute:
                values.update(compute_ms=works[r] * 1000, wait_ms=(end - works[r]) * 1000)
            j.add(r, NODES[r], step, values, t + works[r] + rnd.uniform(0, jitter))
        t += end + 0.005
        j.judge()
    j.judge(final=True)
    return j


def kinds(j: Judge) -> list[tuple[Kind, int, float]]:
    return [(f.kind, f.rank, f.step) for f in j.findings]


def test_the_must_show_run_names_each_fault_once_with_its_step() -> None:
    j = run(drift=40, slow=1, nan_at=50, spike_at=70)
    assert sorted(kinds(j), key=str) == sorted([
        (Kind.DIVERGES, 3, 40), (Kind.NAN, 0, 50), (Kind.SPIKE, 0, 70),
        (Kind.STRAGGLER, 1, j.findings[[f.kind for f in j.findings].index(Kind.STRAGGLER)].step),
    ], key=str)
    text = {f.kind: f.text for f in j.findings}
    assert text[Kind.DIVERGES].startswith("rank 3 (node b) diverges from the other ranks since "
                                          "step 40 (loss ")
    assert "rank 1 (node a) is a straggler" in text[Kind.STRAGGLER]
    assert "arrives" in text[Kind.STRAGGLER]
    assert "rank 0 (node a): loss is nan at step 50" in text[Kind.NAN]
    assert "rank 0 (node a): loss spikes at step 70" in text[Kind.SPIKE]
    assert list(j.stragglers()) == [1]


def test_a_clean_run_tells_nothing_whatever_its_jitter() -> None:
    for seed in range(20):
        for jitter in (0.0, 0.02, 0.045):
            j = run(seed=seed, jitter=jitter)
            assert j.findings == [], (seed, jitter)
            assert j.summary() == [] and j.stragglers() == {}


def test_the_straggler_by_its_printed_compute_time_even_in_fast_steps() -> None:
    """Steps of a few ms: arrival cannot tell (below its floor), the ranks' own times can."""
    j = run(slow=2, compute=True, work=0.002)
    (s,) = [f for f in j.findings if f.kind is Kind.STRAGGLER]
    assert s.rank == 2 and "compute_ms" in s.text
    assert run(slow=2, work=0.002).findings == []  # arrival alone: not a clear margin


def test_straggler_watch_chronic_once_and_none() -> None:
    w = StragglerWatch(Evidence.COMPUTE)
    for step in range(MIN_STEPS - 1):
        assert w.step(step, {0: 0.01, 1: 0.03, 2: 0.01}, 0.03) == []
    (found,) = w.step(MIN_STEPS, {0: 0.01, 1: 0.03, 2: 0.01}, 0.03)
    assert found.chronic and found.rank == 1 and found.behind == MIN_STEPS
    # behind at fewer than half the steps: it no longer stands
    for step in range(MIN_STEPS + 1, 3 * MIN_STEPS):
        w.step(step, {0: 0.01, 1: 0.01, 2: 0.01}, 0.03)
    assert w.standing() == {}
    once = StragglerWatch(Evidence.ARRIVAL)
    found_once = []
    for step in range(40):
        t = 100.0 + step * 0.1
        late = {0: t, 1: t, 2: t + (3.0 if step == 25 else 0.0)}
        found_once += once.step(step, late)
    assert [(s.rank, s.step, s.chronic) for s in found_once] == [(2, 25, False)]
    # two ranks later by the same margin (a node read later): neither is behind
    pair = StragglerWatch(Evidence.ARRIVAL)
    for step in range(40):
        t = 100.0 + step * 0.1
        assert pair.step(step, {0: t, 1: t, 2: t + 0.08, 3: t + 0.08}) == []


def test_timing_not_revealed_is_said_not_guessed() -> None:
    j = Judge()
    for step in range(50):
        j.add(0, "a", step, {"loss": 2.0 - step / 100}, 100.0 + step)
    j.judge(final=True)
    assert j.findings == []
    (note,) = j.summary()
    assert note.startswith("per-rank timing not revealed: only rank 0 printed its steps")


def test_robust_z_and_the_window() -> None:
    z, center, spread = robust_z(3.1, [2.2, 2.1, 2.3])
    assert center == 2.2 and math.isclose(spread, 1.4826 * 0.1) and z > 4
    z, _, spread = robust_z(2.25, [2.2, 2.2, 2.2])  # no spread: the floor, 5 % of the level
    assert math.isclose(spread, 0.11) and abs(z) < 1
    w = DivergenceWatch()
    out = []
    # out of the spread at WITHIN of WINDOW steps: found at the window's end, since its first
    for step in range(30):
        far = (step >= 10 and (step - 10) % WINDOW < WITHIN) or step >= 20
        out += w.step(step, {0: 2.0, 1: 2.01, 2: 1.99, 3: 3.0 if far else 2.0})
    assert [(d.rank, d.since) for d in out] == [(3, 10)]
    assert out[0].step == 10 + WITHIN - 1  # the WITHIN-th step out
    # a rank out for fewer than WITHIN steps of a window is no divergence; two ranks: no judge
    w = DivergenceWatch()
    for step in range(40):
        assert w.step(step, {0: 2.0, 1: 2.0, 2: 2.0, 3: 9.0 if step % 3 == 0 else 2.0}) == []
        assert w.step(step, {0: 2.0, 1: 9.0}) == []


def test_a_rank_diverging_downward_is_named_too() -> None:
    w = DivergenceWatch()
    out = []
    for step in range(30):
        out += w.step(step, {0: 2.0, 1: 2.02, 2: 1.98, 3: 0.5 if step >= 5 else 2.0})
    assert [(d.rank, d.since) for d in out] == [(3, 5)]


def test_nan_inf_and_megatron_nan_iterations() -> None:
    j = Judge()
    for step in range(30):
        j.add(0, "a", step, {"loss": float("inf") if step >= 20 else 2.0,
                             "lr": float("nan") if step == 7 else 0.1}, 100.0 + step)
        j.add(1, "b", step, {"lm loss": 2.0, NAN_COUNT: 2.0 if step == 12 else 0.0}, 100.0 + step)
    j.judge(final=True)
    assert sorted(kinds(j)) == [(Kind.NAN, 0, 7), (Kind.NAN, 0, 20), (Kind.NAN, 1, 12)]
    said = "\n".join(j.summary())
    assert "rank 0 (node a): loss is inf at step 20" in said
    assert "(and at 9 later step(s))" in said
    assert "rank 1 (node b): Megatron-LM counted 2 nan iteration(s) at step 12: look at" in said


def test_a_spike_is_far_above_the_level_and_noise_is_not() -> None:
    rnd = random.Random(3)
    j = Judge()
    for step in range(200):
        v = 2.0 + rnd.gauss(0, 0.05)
        j.add(0, "a", step, {"loss": v * (5 if step == 150 else 1)}, float(step))
    j.judge(final=True)
    assert kinds(j) == [(Kind.SPIKE, 0, 150)]
    quiet = Judge()
    for step in range(300):
        quiet.add(0, "a", step, {"loss": 2.0 + rnd.gauss(0, 0.05), "lr": step * 1e-4},
                  float(step))
    quiet.judge(final=True)
    assert quiet.findings == []


def test_megatrons_own_line_with_nan_iterations_is_a_nan() -> None:
    from ddptui.metrics.recognizers import BUILT_IN

    line = (" [2024-10-01 12:00:01.123456] iteration       {}/   10000 | consumed samples:  "
            "        640 | elapsed time per iteration (ms): 812.3 | learning rate: 1.500000E-05 "
            "| global batch size:    64 | lm loss: 1.045678E+01 | loss scale: 1.0 | grad norm: "
            "12.345 | number of skipped iterations:   0 | number of nan iterations:   {} |")
    (megatron,) = [r for r in BUILT_IN if r.name == "megatron"]
    j = Judge()
    for step in range(10, 40):
        reading = megatron.read(line.format(step, 3 if step == 30 else 0))
        assert reading is not None and reading.step == step
        j.add(0, "a", reading.step, reading.values, float(step))
    j.judge(final=True)
    assert [(f.kind, f.step) for f in j.findings] == [(Kind.NAN, 30)]
    assert "Megatron-LM counted 3 nan iteration(s) at step 30" in j.findings[0].text


def test_ranks_not_synchronized_are_compared_at_the_same_step() -> None:
    """No collective each step: rank 2 runs 1.5 times slower and falls further behind at every
    step; its lines arrive long after the others have gone on, and it is still compared."""
    j = Judge()
    lines = sorted((100.0 + (0.15 if r == 2 else 0.1) * step, r, step)
                   for step in range(60) for r in range(4))
    for t, r, step in lines:
        j.add(r, NODES[r], step, {"loss": 2.0}, t)
        j.judge()
    j.judge(final=True)
    assert [(f.kind, f.rank) for f in j.findings] == [(Kind.STRAGGLER, 2)]


def test_a_rank_that_stops_printing_holds_nothing_up_for_long() -> None:
    j = Judge()
    for step in range(420):
        for r in range(4):
            if r != 3 or step < 10:
                j.add(r, NODES[r], step, {"loss": 2.0 + (5.0 if r == 0 and step >= 300
                                                          else 0.0)}, 100.0 + step)
        j.judge()
    # rank 3 silent since step 10 neither blocks nor is judged; rank 0's jump is seen in time
    assert [(f.rank, f.step) for f in j.findings if f.kind is not Kind.SPIKE] == [(0, 300)]
    assert {f.kind for f in j.findings} == {Kind.SPIKE, Kind.DIVERGES}
    assert max(len(p.steps) for p in [j._arrival, *j._curves.values()]) <= 101
