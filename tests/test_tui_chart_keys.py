"""The chart's keys on the dashboard (Pilot): TensorBoard's smoothing weight stepped and said
in the title, zoom and pan on the steps, `!` from one spike or NaN to the next, in the
chart and in the rank's log, and `b` between the ranks' band and each rank's line."""

from __future__ import annotations

import json

import pytest
from replay import T0, node_events
from test_tui_app import make_app, settle, sync, until

from ddptui.chart.band import RankView
from ddptui.events import NodeState, NodeStatus, RunStatus
from ddptui.store.store import Store
from ddptui.tui.views import ViewKind, ViewSpec

pytestmark = pytest.mark.timeout(60)

SPIKE, NAN = 40, 50


def spiky_run() -> Store:
    """Two ranks, 80 steps of a falling loss; rank 1 spikes at step 40 and says NaN at 50."""
    store = Store()
    store.set_run(run_id="spiky", status=RunStatus.RUNNING, started_at=T0, world_size=2)
    store.add_node("a", 0)
    store.apply([NodeState("a", NodeStatus.RUNNING, T0, pid=4100)])
    lines = []
    for step in range(1, 81):
        for rank in (0, 1):
            loss = 4.0 / (1 + step / 20) + 0.01 * (step % 3)
            if rank == 1 and step == SPIKE:
                loss *= 5
            text = json.dumps({"v": 1, "kind": "metric", "rank": rank, "step": step,
                               "loss": float("nan") if rank == 1 and step == NAN else loss})
            lines.append(f"[ddptui {rank} {rank}] @ddptui {text}")
            lines.append(f"[ddptui {rank} {rank}] step {step} of rank {rank} done")
    store.apply(node_events("a", lines))
    return store


@sync
async def test_smoothing_zoom_pan_and_the_marks_from_the_keyboard() -> None:
    app = make_app(spiky_run(), config=None)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app)
        chart = app.chart
        # the first drawing may come before the layout's last width: wait for the whole
        await until(pilot, lambda: "2 marks (! next): spike r1 step 40" in chart.text,
                    "the chart, its marks listed")
        assert "smoothing 0.60" in chart.text
        assert [(m.kind.value, m.rank, m.step) for m in chart.drawn.marks] == [
            ("spike", 1, SPIKE), ("NaN", 1, NAN)]
        assert chart.drawn.extent == (1, 80)

        await pilot.press("plus")
        await until(pilot, lambda: "smoothing 0.80" in chart.text, "more smoothing")
        await pilot.press("minus", "minus", "minus")
        await until(pilot, lambda: "raw " in chart.text, "no smoothing: the raw values")

        await pilot.press("z")
        await until(pilot, lambda: "steps 20.75-60.25" in chart.text, "zoomed in")
        await pilot.press("less_than_sign")
        await until(pilot, lambda: "steps 10.875-50.375" in chart.text, "panned earlier")
        await pilot.press("0")
        await until(pilot, lambda: "steps " not in chart.text, "every step again")

        await pilot.press("exclamation_mark")
        await until(pilot, lambda: app.view == ViewSpec(ViewKind.RANK, rank=1),
                    "rank 1's log")
        window = chart.view.window
        assert window is not None and window[0] < SPIKE < window[1]
        log = app.log_view
        await until(pilot, lambda: log.match_row is not None, "the log at the spike's step")
        assert log.match_row is not None and f'"step": {SPIKE},' in log.lines[log.match_row]
        await pilot.press("exclamation_mark")
        await until(pilot, lambda: log.match_row is not None
                    and f'"step": {NAN},' in log.lines[log.match_row], "the NaN's step")
        await until(pilot, lambda: f"steps {NAN - 4}" in chart.text, "the NaN centred")


@sync
async def test_b_switches_the_ranks_band_and_each_ranks_line_and_the_title_says_which() -> None:
    app = make_app(spiky_run(), config=None)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app)
        chart = app.chart
        await until(pilot, lambda: "ranks: median, min–max band (2)" in chart.text,
                    "the band, the default for two ranks")
        assert chart.drawn.band is not None and "⢕" in chart.text
        assert chart.view.ranks is RankView.BAND
        await pilot.press("b")
        await until(pilot, lambda: "r0 r1 ranks: each" in chart.text, "each rank's line")
        assert chart.view.ranks is RankView.EACH and chart.drawn.band is None
        await pilot.press("b")
        await until(pilot, lambda: "ranks: median, min–max band (2)" in chart.text,
                    "the band again")
        assert chart.drawn.band is not None
