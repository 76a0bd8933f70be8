"""The compared chart on one axis: ``A`` cycles step, samples, tokens, time (named in the title),
``D`` shows the difference A − B; the pure builder first (the title, the fallback to step and
why, the difference curve), then the keys with Pilot on a store that mirrors its run to disk,
as a live run's does, so that aligned by time its points are read back with their times."""

from __future__ import annotations

import json
from pathlib import Path

from replay import T0
from test_tui_app import make_app, settle, toasts
from test_tui_compare import dimmed_dots, runs_of, write_run

from ddptui.chart.view import ChartView
from ddptui.events import Metric
from ddptui.metrics.align import Axis
from ddptui.store import rundir
from ddptui.store.store import Store
from ddptui.tui.compare import changed, compare_chart
from ddptui.tui.overlay import Overlay, build_overlay
from ddptui.tui.screens.help import HelpScreen
from ddptui.tui.widgets.metrics_pane import COMPARE_KEYS

STEPS = range(1, 201)


def old_records() -> list[str]:
    """The past run: 128 samples a step, a step every 2 s; its loss well above the new one's."""
    return [json.dumps({"node": "a", "rank": 0, "kind": "metric", "step": s,
                        "time": T0 + 2 * s, "attempt": 0, "loss": 30.0 - s / 20,
                        "samples": 128.0 * s}) for s in STEPS]


def new_store(root: Path | None) -> Store:
    """The shown run: 64 samples a step, a step a second; mirrored under ``root``."""
    store = Store(rundir.run_dir(root, "new-run") if root is not None else None)
    store.set_run(run_id="new-run", started_at=T0)
    store.apply([Metric("a", 0, "metric", s, {"loss": 10.0 - s / 40, "samples": 64.0 * s},
                        T0 + s) for s in STEPS])
    return store


def title(rows: list[list[tuple[str, int]]]) -> str:
    return "".join(text for text, _ in rows[0])


def overlay(axis: Axis = Axis.STEP, difference: bool = False) -> Overlay:
    return changed_to(build_overlay("old-run", old_records(), start=T0), axis, difference)


def changed_to(o: Overlay, axis: Axis, difference: bool) -> Overlay:
    while o.axis is not axis:
        o = changed(o, "align")[0] or o
    return changed(o, "difference")[0] or o if difference else o


# -- pure ------------------------------------------------------------------------------------

def test_the_keys_cycle_the_axis_and_toggle_the_difference() -> None:
    o = build_overlay("old-run", old_records())
    seen = []
    for _ in range(5):
        seen.append(o.axis)
        o = changed(o, "align")[0] or o
    assert seen == [Axis.STEP, Axis.SAMPLES, Axis.TOKENS, Axis.TIME, Axis.STEP]
    on, said = changed(o, "difference")
    assert on is not None and on.difference and "A − B (this run − old-run)" in said
    off, said = changed(on, "difference")
    assert off is not None and not off.difference and "old-run dimmed" in said
    assert changed(None, "align") == (
        None, "No run is compared: C picks one, then A aligns and D shows A − B.")


def test_by_step_the_chart_is_as_before_compare_had_axes() -> None:
    drawn = compare_chart(new_store(None), overlay(), ChartView("loss"), 80, 20)
    rows, plotted = drawn.rows, drawn.plotted
    assert title(rows).startswith("loss by step smoothing 0.60 r0 vs old-run") and plotted[0] > 0


def test_by_samples_the_title_says_so_and_both_runs_span_the_same_x() -> None:
    rows = compare_chart(new_store(None), overlay(Axis.SAMPLES), ChartView("loss"), 80,
                         20).rows
    assert title(rows).startswith("loss aligned by samples smoothing 0.60 r0 vs old-run")
    assert rows[-1][0][0].split() == ["64", "25600"]  # B's samples reach 200 x 128


def test_an_axis_a_run_lacks_is_step_with_the_reason_in_the_title() -> None:
    rows = compare_chart(new_store(None), overlay(Axis.TOKENS), ChartView("loss"), 120,
                         20).rows
    assert title(rows) == ("loss aligned by step smoothing 0.60 r0 vs old-run "
                           "(no tokens in new-run or old-run)")
    rows = compare_chart(new_store(None), overlay(Axis.TIME), ChartView("loss"), 120,
                         20).rows
    assert title(rows).endswith(" (no recorded times in new-run)")


def test_the_difference_is_one_curve_named_in_the_title() -> None:
    drawn = compare_chart(new_store(None), overlay(Axis.SAMPLES, True), ChartView("loss"), 160,
                          20)
    rows, plotted = drawn.rows, drawn.plotted
    assert title(rows).startswith(
        "loss A − B: r0 of new-run − r0 of old-run, aligned by samples smoothing 0.60 r0")
    assert plotted == {0: 200 - 1}  # A's 200 x but the first (64), before B's first (128)
    # A − B at equal samples: (10 - s/40) - (30 - (s/2)/20) = -20: a flat line at -20
    labels = [r[0][0].strip() for r in rows[1:-2]]
    assert [x for x in labels if x != "│"] == ["-19.5┤", "-20┤", "-20.5┤"]
    rows = compare_chart(new_store(None), overlay(Axis.STEP, True), ChartView("eval_loss"),
                         80, 20).rows
    assert "(new-run has no eval_loss)" in title(rows)


# -- the keys --------------------------------------------------------------------------------

async def _keys(tmp_path: Path) -> None:
    write_run(tmp_path, "old-run", old_records())
    (rundir.run_dir(tmp_path, "old-run") / rundir.RUN_JSON).write_text(
        json.dumps({"run_id": "old-run", "started_at": T0}))
    app = make_app(new_store(tmp_path), state_root=tmp_path,
                   run_lister=lambda root: runs_of("old-run"))
    async with app.run_test(size=(200, 48)) as pilot:
        await settle(pilot, app)
        chart = app.chart
        await pilot.press("A")  # nothing compared yet: said, nothing changes
        await settle(pilot, app)
        assert "No run is compared: C picks one" in toasts(app)
        await pilot.press("C", "enter")
        await settle(pilot, app)
        assert chart.compared == "old-run" and dimmed_dots(chart) > 20
        assert chart.text.splitlines()[0].startswith("loss by step smoothing 0.60 r0 vs old-run")
        await pilot.press("A")
        await settle(pilot, app)
        assert chart.text.splitlines()[0].startswith(
            "loss aligned by samples smoothing 0.60 r0 vs old-run")
        assert "Aligned by samples where both runs print them" in toasts(app)
        await pilot.press("A", "A")  # tokens (neither prints them: by step), then time
        await settle(pilot, app)
        first = chart.text.splitlines()[0]
        assert first.startswith("loss aligned by seconds smoothing 0.60 r0 vs old-run")
        assert "(" not in first
        assert chart.text.splitlines()[-1].split() == ["1", "400"]  # B's last step at 400 s
        await pilot.press("D")
        await settle(pilot, app)
        assert chart.text.splitlines()[0].startswith("loss A − B: r0 of new-run − r0 of old-run")
        assert dimmed_dots(chart) == 0  # one curve, A's colour
        await pilot.press("D")
        await settle(pilot, app)
        assert dimmed_dots(chart) > 20
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert ("A compared chart", COMPARE_KEYS) in app.screen.sections


def test_the_compared_charts_keys(tmp_path: Path) -> None:
    import asyncio

    asyncio.run(_keys(tmp_path))
