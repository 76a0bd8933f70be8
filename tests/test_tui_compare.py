"""Comparing the chart with a past run: the pure reading of ``metrics.jsonl`` (a big file in
windows), the title's ``vs RUN_ID``, and, with Pilot, the run list's keys that lay a past
run's series under the chart and take them away."""

from __future__ import annotations

import json
from pathlib import Path

from replay import T0, scenario
from test_tui_app import FakeController, make_app, settle, sync, toasts

from ddptui.chart.rows import DIM, chart_rows
from ddptui.chart.view import ChartView
from ddptui.events import RunStatus
from ddptui.store.reader import WINDOW, WINDOWS, metrics_file, sample_lines
from ddptui.store.runs import RunSummary
from ddptui.tui.overlay import Overlay, build_overlay, label_past, overlay_notice, read_overlay
from ddptui.tui.screens.run_picker import Pick, RunPicker, picker_question, run_label
from ddptui.tui.widgets.metrics_pane import MetricsPane


def record(rank: int, step: int, **values: float) -> str:
    return json.dumps({"node": "a", "rank": rank, "kind": "metric", "step": step,
                       "time": T0 + step, "attempt": 0, **values})


def write_run(root: Path, run_id: str, lines: list[str] | None) -> None:
    path = metrics_file(root, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    if lines is not None:
        path.write_text("".join(f"{line}\n" for line in lines))


# -- pure ------------------------------------------------------------------------------------

def test_overlay_holds_each_series_per_rank_in_rank_order() -> None:
    lines = [record(r, s, loss=5.0 - s / 10, lr=0.1) for s in range(10) for r in (1, 0)]
    overlay = build_overlay("old", [*lines, "{torn"])
    assert set(overlay.series) == {"loss", "lr"}
    (xs0, ys0), (xs1, _) = overlay.past("loss")
    assert xs0 == xs1 == [float(s) for s in range(10)] and ys0[0] == 5.0
    assert overlay.past("eval_loss") == []


def test_a_long_series_is_cut_to_what_a_chart_shows() -> None:
    lines = [record(0, s, loss=float(s % 7)) for s in range(20_000)]
    (xs, ys), = build_overlay("old", lines, max_points=400).past("loss")
    assert len(xs) <= 402 and xs[0] == 0 and xs[-1] == 19_999 and max(ys) == 6.0


def test_a_big_file_is_read_in_windows_of_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [record(0, s, loss=1.0 / (s + 1)) for s in range(50_000)]
    path.write_text("".join(f"{line}\n" for line in lines))
    assert sample_lines(path, read_whole=path.stat().st_size) == lines  # small: read whole
    # over the size read whole: at most WINDOWS x WINDOW bytes of it (lines of ~120 bytes)
    assert len(sample_lines(path)) <= WINDOWS * WINDOW // 100 < len(lines)
    sampled = sample_lines(path, read_whole=1000, windows=50, window=2048)
    assert 50 <= len(sampled) < 50 * 2048 // 60
    assert all(json.loads(line) for line in sampled)  # never a torn line
    steps = [json.loads(line)["step"] for line in sampled]
    assert steps == sorted(steps) and steps[0] == 0 and steps[-1] > 48_000


def test_a_big_file_of_records_longer_than_a_window_still_gives_whole_ones(
        tmp_path: Path) -> None:
    """A flood's run of metric lines is one record of many kilobytes (``metrics.jsonl``'s
    ``lines``): each window takes the first whole record that starts in it."""
    path = tmp_path / "metrics.jsonl"
    pad = "x" * 10_000
    path.write_text("".join(json.dumps({"step": s, "loss": 1.0, "pad": pad}) + "\n"
                            for s in range(600)))
    sampled = sample_lines(path, read_whole=1000, windows=50, window=2048)
    steps = [json.loads(line)["step"] for line in sampled]  # never a torn record
    assert 45 <= len(steps) <= 50 and steps == sorted(set(steps)) and steps[-1] > 580


def test_a_run_without_metrics_reads_as_empty(tmp_path: Path) -> None:
    write_run(tmp_path, "bare", None)
    assert read_overlay(tmp_path, "bare").series == {}
    write_run(tmp_path, "nothing", ["{}", "not json"])
    assert read_overlay(tmp_path, "nothing").series == {}


def test_title_names_the_compared_run() -> None:
    overlay = Overlay("old-run", {"loss": [([1.0, 2.0, 3.0], [3.0, 2.5, 2.0])]})
    rows = chart_rows(ChartView("loss"), [0], lambda r, n: ([1, 2], [2.0, 1.0]), 40, 10,
                      past=overlay.past("loss")).rows
    title = label_past(rows, overlay, "loss")[0]
    assert ("vs old-run", DIM) in title and ("past run", DIM) not in title
    rows = chart_rows(ChartView("lr"), [0], lambda r, n: ([1, 2], [2.0, 1.0]), 40, 10).rows
    assert label_past(rows, overlay, "lr")[0][-1] == ("vs old-run: no lr", DIM)
    assert "its loss is drawn dimmed" in overlay_notice(overlay, "loss")
    assert "it has no lr; c shows another metric" in overlay_notice(overlay, "lr")


def test_picker_marks_the_compared_run_and_says_what_enter_does() -> None:
    run = RunSummary(run_id="old-run", status=RunStatus.FINISHED, started_at=T0, nodes=["a"],
                     world_size=2, hosts_file="h.yaml")
    assert run_label(run, compared=True).startswith("◆ old-run")
    assert not run_label(run).startswith("◆")
    assert picker_question(False, None).startswith("Attach to which run?")
    assert "enter/c: compare" in picker_question(True, "old-run")
    assert "old-run is drawn under the chart now" in picker_question(True, "old-run")


# -- the dashboard ---------------------------------------------------------------------------

def dimmed_dots(chart: MetricsPane) -> int:
    """Braille cells the chart paints dimmed and colourless: the past run's series (the axes
    are not braille; a rank's raw values beside its smoothed line are dimmed in its
    colour)."""
    return sum(1 for row in chart._rows for seg in row
               if seg.style is not None and seg.style.dim and seg.style.color is None
               for ch in seg.text if "\u2801" <= ch <= "\u28ff")


def runs_of(*ids: str) -> list[RunSummary]:
    return [RunSummary(run_id=i, status=RunStatus.FINISHED, started_at=T0, nodes=["a"],
                       world_size=1, hosts_file="h.yaml") for i in ids]


@sync
async def test_compare_from_the_run_list_then_clear(tmp_path: Path) -> None:
    # the past run's loss sits well above this run's, so its dots cannot hide under them
    write_run(tmp_path, "old-run", [record(0, s, loss=20.0 - s / 100) for s in range(400)])
    app = make_app(scenario("train"), state_root=tmp_path,
                   run_lister=lambda root: runs_of("old-run"),
                   attacher=lambda run_id, root: FakeController(run_id=run_id))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app)
        chart = app.chart
        assert chart.compared is None and dimmed_dots(chart) == 0
        await pilot.press("a")  # the attach list: c compares the highlighted run
        await settle(pilot, app)
        assert isinstance(app.screen, RunPicker)
        await pilot.press("c")
        await settle(pilot, app)
        assert not isinstance(app.screen, RunPicker) and app.session is None
        assert chart.compared == "old-run"
        assert "vs old-run" in chart.text.splitlines()[0]
        assert dimmed_dots(chart) > 20
        assert "Comparing with old-run (loss)" in toasts(app)
        await pilot.press("a", "c")  # the same run again: no longer compared
        await settle(pilot, app)
        assert chart.compared is None and dimmed_dots(chart) == 0
        assert "vs old-run" not in chart.text
        await pilot.press("C")  # the compare list: enter compares
        await settle(pilot, app)
        assert isinstance(app.screen, RunPicker) and app.screen.compare
        await pilot.press("enter")
        await settle(pilot, app)
        assert chart.compared == "old-run" and dimmed_dots(chart) > 20
        await pilot.press("C")
        await settle(pilot, app)
        assert "◆ old-run" in str(app.screen.query_one("OptionList").get_option_at_index(0)
                                  .prompt)
        await pilot.press("delete")  # the clear key
        await settle(pilot, app)
        assert chart.compared is None and "vs old-run" not in chart.text


@sync
async def test_a_run_without_metrics_is_told_and_nothing_changes(tmp_path: Path) -> None:
    write_run(tmp_path, "bare-run", None)
    app = make_app(scenario("train"), state_root=tmp_path,
                   run_lister=lambda root: runs_of("bare-run"),
                   attacher=lambda run_id, root: FakeController(run_id=run_id))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app)
        await pilot.press("C", "enter")
        await settle(pilot, app)
        assert app.chart.compared is None
        assert "bare-run recorded no metrics: there is nothing of it to draw" in toasts(app)


def test_pick_says_what_was_chosen() -> None:
    assert Pick("r") == Pick("r", compare=False) and Pick(None, compare=True).run_id is None
