"""Two runs on one axis (``ddptui.metrics.align``), pure: step, samples from Megatron's consumed
samples or a ``samples`` series, tokens, wall time since the start; a counter printed at other
steps than the series, interpolated; an axis one run lacks; the difference A − B inside and
outside B's range; runs of different lengths and restarted ones."""

from __future__ import annotations

import pytest

from ddptui.events import LogLine, Metric
from ddptui.metrics.align import (
    Axis,
    Ruler,
    RunTracks,
    Track,
    align,
    ascending,
    at_each,
    common,
    difference,
    first_curve,
    interpolate,
    ruler,
    tracks_of,
)
from ddptui.metrics.points import Point, points, record
from ddptui.metrics.scan import Scanner

T0 = 1_700_000_000.0


def pt(rank: int, step: float, name: str, value: float, t: float = T0) -> Point:
    return Point("a", rank, step, "step", name, value, "ddptui", t)


def run_of(run_id: str, *found: Point, start: float | None = None) -> RunTracks:
    return tracks_of(run_id, found, start)


# -- interpolation ---------------------------------------------------------------------------

def test_interpolate_is_linear_inside_and_nothing_outside() -> None:
    xs, ys = [0.0, 10.0, 20.0], [0.0, 100.0, 300.0]
    assert interpolate(xs, ys, 0.0) == 0.0 and interpolate(xs, ys, 20.0) == 300.0
    assert interpolate(xs, ys, 5.0) == 50.0 and interpolate(xs, ys, 15.0) == 200.0
    assert interpolate(xs, ys, 10.0) == 100.0
    assert interpolate(xs, ys, -0.1) is None and interpolate(xs, ys, 20.1) is None
    assert interpolate([], [], 1.0) is None
    assert interpolate([3.0], [7.0], 3.0) == 7.0 and interpolate([3.0], [7.0], 4.0) is None


def test_ascending_sorts_and_keeps_the_last_value_of_a_repeated_x() -> None:
    """A restarted run prints some steps again: the later value is the one read."""
    assert ascending([1, 2, 3, 2, 3, 4], [10, 20, 30, 21, 31, 40]) == (
        [1, 2, 3, 4], [10, 21, 31, 40])


# -- each axis -------------------------------------------------------------------------------

def test_by_step_is_the_step_as_printed() -> None:
    run = run_of("a", pt(0, 1, "loss", 3.0), pt(0, 2, "loss", 2.0), pt(1, 2, "loss", 2.5))
    by = ruler(run, Axis.STEP)
    assert isinstance(by, Ruler)
    assert align(run, "loss", by).curves == {0: ([1.0, 2.0], [3.0, 2.0]), 1: ([2.0], [2.5])}


def megatron_lines() -> list[str]:
    """Megatron's training_log lines as it prints them (consumed samples: 64 a step)."""
    return [f" [2024-10-01 12:00:{i:02d}.000000] iteration {i * 10:8d}/   10000 | consumed "
            f"samples: {i * 640:12d} | elapsed time per iteration (ms): 800.0 | learning rate: "
            f"1.500000E-05 | global batch size:    64 | lm loss: {10 - i:.6E} | loss scale: 1.0 "
            "| grad norm: 1.000 | number of skipped iterations:   0 | number of nan "
            "iterations:   0 |" for i in range(1, 6)]


def test_samples_from_megatrons_consumed_samples_read_from_its_lines() -> None:
    """The recognizer keeps ``consumed samples`` as a series; the axis reads it."""
    scanned = Scanner("a").scan([LogLine("a", t, T0, rank=7) for t in megatron_lines()])
    found = list(points(_records(scanned)))
    run = tracks_of("mega", found)
    by = ruler(run, Axis.SAMPLES)
    assert isinstance(by, Ruler)
    got = align(run, "lm loss", by)
    assert got.curves == {7: ([640.0, 1280.0, 1920.0, 2560.0, 3200.0],
                              [9.0, 8.0, 7.0, 6.0, 5.0])}
    assert got.left_out == 0


def _records(events: list[object]) -> list[str]:
    import json

    return [json.dumps(record(e)) for e in events if isinstance(e, Metric)]


def test_samples_from_a_samples_series_and_tokens_from_a_tokens_series() -> None:
    run = run_of("a", *(p for s in range(1, 4) for p in (
        pt(0, s, "loss", 4.0 - s), pt(0, s, "samples", 32.0 * s), pt(0, s, "tokens", 4096.0 * s))))
    samples, tokens = ruler(run, Axis.SAMPLES), ruler(run, Axis.TOKENS)
    assert isinstance(samples, Ruler) and isinstance(tokens, Ruler)
    assert align(run, "loss", samples).curves[0] == ([32.0, 64.0, 96.0], [3.0, 2.0, 1.0])
    assert align(run, "loss", tokens).curves[0] == ([4096.0, 8192.0, 12288.0], [3.0, 2.0, 1.0])


def test_hugging_face_tokens_seen_count_as_tokens() -> None:
    """The Trainer's log dict with ``include_num_input_tokens_seen=True``, as it prints it."""
    lines = [f"{{'loss': '{3 - i / 2}', 'grad_norm': '1.2', 'learning_rate': '4.9e-05', "
             f"'num_input_tokens_seen': '{4096 * i}', 'epoch': '{i / 10}'}}" for i in (1, 2)]
    scanned = Scanner("a").scan([LogLine("a", t, T0, rank=0) for t in lines])
    run = tracks_of("hf", points(_records(scanned)))
    by = ruler(run, Axis.TOKENS)
    assert isinstance(by, Ruler)
    assert align(run, "loss", by).curves[0] == ([4096.0, 8192.0], [2.5, 2.0])


def test_a_counter_at_other_steps_is_interpolated_and_never_extrapolated() -> None:
    """Tokens printed every 10 steps, loss every 5: the loss at step 15 gets the tokens
    halfway between steps 10 and 20; the loss at step 5 (before the first count) and at
    step 35 (after the last) get no x and are counted as left out."""
    counter = [pt(0, s, "tokens", 100.0 * s) for s in (10, 20, 30)]
    losses = [pt(0, s, "loss", 1.0 / s) for s in (5, 10, 15, 20, 25, 30, 35)]
    run = run_of("a", *counter, *losses)
    by = ruler(run, Axis.TOKENS)
    assert isinstance(by, Ruler)
    got = align(run, "loss", by)
    assert got.curves[0][0] == [1000.0, 1500.0, 2000.0, 2500.0, 3000.0]
    assert got.curves[0][1] == [1 / 10, 1 / 15, 1 / 20, 1 / 25, 1 / 30]
    assert got.left_out == 2


def test_a_rank_without_its_own_counter_reads_the_lowest_ranks() -> None:
    """Megatron prints its counts on the last rank only; the count is the run's."""
    run = run_of("a", pt(3, 10, "consumed samples", 640.0), pt(3, 20, "consumed samples", 1280.0),
                 pt(0, 15, "loss", 2.0), pt(3, 20, "loss", 1.0))
    by = ruler(run, Axis.SAMPLES)
    assert isinstance(by, Ruler)
    assert align(run, "loss", by).curves == {0: ([960.0], [2.0]), 3: ([1280.0], [1.0])}


def test_consumed_samples_win_over_a_samples_series() -> None:
    run = run_of("a", pt(0, 1, "samples", 1.0), pt(0, 1, "consumed samples", 64.0),
                 pt(0, 1, "loss", 1.0))
    by = ruler(run, Axis.SAMPLES)
    assert isinstance(by, Ruler) and align(run, "loss", by).curves[0] == ([64.0], [1.0])


def test_by_time_is_seconds_since_the_runs_start_else_its_first_point() -> None:
    found = [pt(0, s, "loss", 5.0 - s, T0 + 10 + 2 * s) for s in range(3)]
    started = run_of("a", *found, start=T0)
    by = ruler(started, Axis.TIME)
    assert isinstance(by, Ruler)
    assert align(started, "loss", by).curves[0] == ([10.0, 12.0, 14.0], [5.0, 4.0, 3.0])
    unknown = run_of("a", *found)  # no run.json start: the first point's time
    by = ruler(unknown, Axis.TIME)
    assert isinstance(by, Ruler)
    assert align(unknown, "loss", by).curves[0][0] == [0.0, 2.0, 4.0]


def test_a_missing_axis_is_said_plainly() -> None:
    run = run_of("run-b", pt(0, 1, "loss", 1.0))
    assert ruler(run, Axis.SAMPLES) == (
        "run run-b prints no consumed samples (a `consumed samples` or `samples` series)")
    assert "run run-b prints no tokens" in str(ruler(run, Axis.TOKENS))
    live = RunTracks("live", {"loss": {0: Track([1.0], [1.0])}})  # the store: no times
    assert ruler(live, Axis.TIME) == "run live has no recorded time for its points"


# -- two runs --------------------------------------------------------------------------------

def test_both_runs_fall_back_to_step_when_one_lacks_the_axis() -> None:
    a = run_of("run-a", pt(0, 1, "loss", 1.0), pt(0, 1, "consumed samples", 64.0))
    b = run_of("run-b", pt(0, 1, "loss", 2.0))
    on = common(a, b, Axis.SAMPLES)
    assert on.a.axis is on.b.axis is Axis.STEP and [i for i, _ in on.missing] == ["run-b"]
    assert on.why == ("run run-b prints no consumed samples (a `consumed samples` or `samples` "
                      "series): aligned by step")
    on = common(a, a, Axis.SAMPLES)
    assert on.a.axis is on.b.axis is Axis.SAMPLES and on.missing == () and on.why == ""
    on = common(b, a, Axis.TOKENS)
    assert [i for i, _ in on.missing] == ["run-b", "run-a"]
    assert on.why.count("prints no tokens") == 2


def test_runs_of_different_batch_sizes_meet_on_samples() -> None:
    """A at 64 samples a step, B at 128: B's step 5 is A's step 10."""
    a = run_of("a", *(p for s in range(1, 11) for p in (
        pt(0, s, "loss", 10.0 - s), pt(0, s, "samples", 64.0 * s))))
    b = run_of("b", *(p for s in range(1, 6) for p in (
        pt(0, s, "loss", 10.0 - 2 * s), pt(0, s, "samples", 128.0 * s))))
    on = common(a, b, Axis.SAMPLES)
    ca, cb = align(a, "loss", on.a).curves[0], align(b, "loss", on.b).curves[0]
    assert ca[0][-1] == cb[0][-1] == 640.0
    # the same loss per sample: A − B is 0 at each of A's x from B's first (128) on
    assert difference(ca, cb) == ([64.0 * k for k in range(2, 11)], [0.0] * 9)


def test_difference_is_b_interpolated_at_as_x_inside_bs_range_only() -> None:
    a = ([0.0, 5.0, 10.0, 15.0, 20.0, 25.0], [10.0, 9.0, 8.0, 7.0, 6.0, 5.0])
    b = ([2.0, 12.0, 22.0], [12.0, 10.0, 8.0])
    # 9.0 - 11.4 is -2.4000000000000004 in floats: a steady difference stays steady
    assert difference(a, b) == ([5.0, 10.0, 15.0, 20.0], [-2.4] * 4)
    rows = at_each(a, b)
    assert [r[2] for r in rows] == [None, pytest.approx(11.4), pytest.approx(10.4),
                                   pytest.approx(9.4), pytest.approx(8.4), None]
    assert [r[3] for r in rows] == [None, -2.4, -2.4, -2.4, -2.4, None]
    assert difference(a, ([100.0, 200.0], [1.0, 1.0])) == ([], [])  # no overlap: nothing
    assert difference(([1.0], [3.0]), ([1.0], [2.0])) == ([1.0], [1.0])  # one shared point


def test_difference_of_runs_of_different_lengths_ends_where_the_shorter_does() -> None:
    long = ([float(s) for s in range(100)], [1.0] * 100)
    short = ([float(s) for s in range(40)], [0.5] * 40)
    xs, ds = difference(long, short)
    assert xs == [float(s) for s in range(40)] and set(ds) == {0.5}
    xs, ds = difference(short, long)
    assert len(xs) == 40 and set(ds) == {-0.5}


def test_difference_reads_a_restarted_b_by_its_last_value_of_each_x() -> None:
    a = ([1.0, 2.0, 3.0], [1.0, 1.0, 1.0])
    b = ([1.0, 2.0, 3.0, 2.0, 3.0], [5.0, 5.0, 5.0, 3.0, 3.0])  # restarted from step 2
    assert difference(a, b) == ([1.0, 2.0, 3.0], [-4.0, -2.0, -2.0])


def test_the_compared_curve_is_the_lowest_ranks_or_the_asked_one() -> None:
    run = run_of("a", pt(1, 1, "loss", 1.0), pt(0, 1, "loss", 2.0))
    got = align(run, "loss", Ruler(Axis.STEP))
    assert first_curve(got) == (0, ([1.0], [2.0]))
    assert first_curve(got, 1) == (1, ([1.0], [1.0]))
    assert first_curve(got, 5) is None
    assert first_curve(align(run, "eval_loss", Ruler(Axis.STEP))) is None


def test_tracks_keep_the_later_value_of_a_step_and_skip_points_without_one() -> None:
    run = tracks_of("a", [pt(0, 1, "loss", 3.0, T0), pt(0, 1, "loss", 2.0, T0 + 1),
                          Point("a", 0, None, "step", "loss", 9.0, "ddptui", T0)],
                    names=frozenset({"loss"}))
    assert run.tracks["loss"][0] == Track([1.0], [2.0], [T0])
    assert tracks_of("a", [pt(0, 1, "lr", 1.0)], names=frozenset({"loss"})).tracks == {}
