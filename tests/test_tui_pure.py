"""The dashboard's pure helpers: views, downsampling, health, rows, disk scrollback."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from rich.style import Style

from ddptui.chart.downsample import BLOCKS, downsample, sparkline
from ddptui.config.model import HealthConfig
from ddptui.events import Level, LogLine, NodeStatus, Source
from ddptui.store.health import assess
from ddptui.store.logfile import LineFile
from ddptui.store.views import NodeView, RankView
from ddptui.tui.node_rows import age, build_rows, rank_span, rate
from ddptui.tui.views import (
    ViewKind,
    ViewSpec,
    compile_filter,
    format_line,
    line_style,
    printable,
    wrap_line,
)
from ddptui.tui.widgets.log_view import LineStyler

NCCL = "gpu-b:4312:4312 [0] NCCL INFO Bootstrap : Using eth0"


def line(text: str, rank: int | None = 0, node: str = "a", **kw: object) -> LogLine:
    return LogLine(node, text, 0.0, rank=rank, **kw)  # type: ignore[arg-type]


def test_views_accept_what_they_name() -> None:
    nccl = line(NCCL, source=Source.NCCL)
    warn = line("careful", rank=1, level=Level.WARNING)
    agent = line("agent says", rank=None, node="b", source=Source.AGENT)
    assert ViewSpec().accepts(agent)
    assert ViewSpec(ViewKind.RANK, rank=1).accepts(warn)
    assert not ViewSpec(ViewKind.RANK, rank=1).accepts(agent)
    assert ViewSpec(ViewKind.NODE, node="b").accepts(agent)
    assert ViewSpec(ViewKind.NCCL).accepts(nccl) and not ViewSpec(ViewKind.NCCL).accepts(warn)
    assert ViewSpec(ViewKind.PROBLEMS).accepts(warn)
    assert not ViewSpec(ViewKind.PROBLEMS).accepts(nccl)


def test_format_line_tags_whose_line_it_is() -> None:
    assert format_line(line("x", rank=3), ViewSpec()) == "[3] x"
    assert format_line(line("x", rank=None, node="b"), ViewSpec()) == "[b] x"
    assert format_line(line("x", rank=3), ViewSpec(ViewKind.RANK, rank=3)) == "x"
    agent = line("x", rank=None, source=Source.AGENT)
    assert format_line(agent, ViewSpec(ViewKind.NODE, node="a")) == "[agent] x"


def test_line_style_colours_and_dims() -> None:
    assert line_style(f"[2] {NCCL}") is None
    assert line_style("[1] ValueError: boom") is Level.ERROR
    assert line_style("[1] step 3") is Level.INFO


def test_filter_smart_case_and_bad_regex() -> None:
    pat, msg = compile_filter("loss")
    assert pat is not None and pat.search("LOSS") and msg == ""
    pat, _ = compile_filter("Loss")
    assert pat is not None and not pat.search("loss")
    pat, msg = compile_filter("a[")
    assert pat is not None and pat.search("xa[y") and "not a regex" in msg
    assert compile_filter("") == (None, "")


def test_printable_keeps_what_a_terminal_would_show() -> None:
    assert printable("plain [1] step 3") == "plain [1] step 3"
    assert printable("\x1b[1;32mINFO\x1b[0m ok") == "INFO ok"
    assert printable("10%|#  | 1/10\r50%|##### | 5/10\r") == "50%|##### | 5/10"
    assert printable("a\tb") == "a       b"
    assert printable("\x1b]0;title\x07x\x00") == "x\ufffd"


def test_wrap_line() -> None:
    assert wrap_line("short", 20) == ["short"]
    rows = wrap_line("x" * 50, 20)
    assert rows[0] == "x" * 20 and all(r.startswith("  ") for r in rows[1:])
    assert "".join(r.lstrip() for r in rows) == "x" * 50


def test_downsample_keeps_extremes_and_bounds() -> None:
    xs = list(range(10_000))
    ys = [float(i % 100) for i in xs]
    ys[5000] = 1e6
    dx, dy = downsample(xs, ys, 50)
    assert len(dx) <= 102 and 1e6 in dy and dx == sorted(dx)
    assert (dx[0], dx[-1]) == (0, 9999)  # the axis spans the whole series
    assert downsample([1, 2], [3.0, 4.0], 50) == ([1, 2], [3.0, 4.0])


def test_sparkline() -> None:
    assert sparkline([], 8) == ""
    s = sparkline([float(i) for i in range(100)], 8)
    assert len(s) == 8 and s[0] == BLOCKS[0] and s[-1] == BLOCKS[-1]
    assert sparkline([1.0, 1.0], 8) == BLOCKS[0] * 2


def test_health_straggler_and_stall() -> None:
    ranks = [RankView(r, "a", step_time_s=0.1, last_step_time=100.0) for r in range(3)]
    ranks.append(RankView(3, "a", step_time_s=0.1, last_step_time=100.0, straggler=True))
    ranks.append(RankView(4, "a", step_time_s=0.1, last_step_time=10.0))
    ranks.append(RankView(5, "b", last_step_time=0.0, straggler=True))  # node b is done
    h = assess(ranks, 101.0, live_nodes={"a"},
               config=HealthConfig(stall_after=60, straggler_fraction=0.25))
    assert h[3].straggler and not h[0].straggler
    assert h[4].stalled and h[4].mark == "stalled"
    assert not h[5].stalled and not h[5].straggler
    quiet = RankView(6, "a", last_line_time=0.0)
    assert assess([quiet], 100.0, live_nodes={"a"},
                  config=HealthConfig(stall_after=60))[6].stalled


def test_rows_and_cells() -> None:
    nodes = [NodeView("a", 0, NodeStatus.FAILED, pid=7, exit_code=1, ranks={0, 1}),
             NodeView("b", 1, NodeStatus.RESTARTING, attempt=2)]
    ranks = [RankView(0, "a", last_step=5, samples_per_s=1500.0, loss=2.5)]
    rows = build_rows(nodes, ranks, {}, lambda r: [3.0, 2.0, 1.0], 10.0)
    assert [r.key for r in rows] == ["n:a", "r:0", "n:b"]
    assert rows[0].tone == "error" and rows[0].cells[6] == "1"
    assert rows[1].cells[2] == "s5" and rows[1].cells[8] == "1.5k"
    assert rows[2].cells[3] == "restart #2" and rows[2].tone == "warning"
    assert age(5) == "5s" and age(120) == "2m" and age(None) == "-"
    assert rate(2.5e6) == "2.5M" and rank_span([0, 1, 2, 3]) == "0-3"


def test_line_file_reads_by_line_and_grows(tmp_path: Path) -> None:
    p = tmp_path / "rank0.log"
    p.write_text("".join(f"line {i}\n" for i in range(1000)))
    lf = LineFile(p)
    assert lf.refresh() == 1000
    assert lf.read(10, 13) == ["line 10", "line 11", "line 12"]
    assert lf.find_before("line 500", 1000) == 500
    with open(p, "a") as f:
        f.write("line 1000\npartial")
    assert lf.refresh() == 1001
    assert lf.read(999, 2000) == ["line 999", "line 1000"]
    p.write_text("new\n")  # truncated: index again
    assert lf.refresh() == 1 and lf.read(0, 1) == ["new"]
    assert LineFile(tmp_path / "missing").refresh() == 0


def test_braille_plot_draws_inside_its_box() -> None:
    from ddptui.chart.braille import plot, tick_label

    frame = plot([([0, 5, 10], [1.0, 5.0, 2.0]), ([0, 10], [3.0, 3.0])], 10, 4)
    assert frame is not None
    assert len(frame.rows) == 4 and all(len(r) == 10 for r in frame.rows)
    owners = {o for row in frame.rows for _, o in row}
    assert owners == {-1, 0, 1}
    assert frame.y_range == (1.0, 5.0) and frame.x_range == (0, 10)
    assert plot([([], [])], 10, 4) is None
    log_frame = plot([([1, 2], [0.01, 100.0])], 10, 4, log_y=True)
    assert log_frame is not None and log_frame.y_range == (-2.0, 2.0)
    assert tick_label(2.0, True) == "100" and tick_label(0.5, False) == "0.5"


def test_chart_rows_are_runs_of_one_style_each_as_wide_as_the_pane() -> None:
    from ddptui.chart.band import RankView
    from ddptui.chart.rows import BOLD, DIM, PLAIN, Y_LABEL, chart_rows
    from ddptui.chart.view import ChartView

    def series(rank: int, name: str) -> tuple[list[int], list[float]]:
        return ([], []) if rank == 2 or name != "loss" else (
            list(range(100)), [float(rank + i % 7) for i in range(100)])

    raw = ChartView(smoothing=0.0, ranks=RankView.EACH)
    drawn = chart_rows(raw, [0, 1, 2], series, 40, 12)
    rows, plotted = drawn.rows, drawn.plotted
    assert plotted == {0: 64, 1: 64}  # per plot column (32) a min and a max
    assert rows[0] == [("loss by step ", BOLD), ("raw ", DIM), ("r0 ", 0), ("r1 ", 1),
                       ("ranks: each ", DIM)]
    assert len(rows) == 12
    for row in rows[1:-2]:  # the plot: a label, then the cells
        assert sum(len(text) for text, _ in row) == 40
        assert row[0][1] == DIM and len(row[0][0]) == Y_LABEL + 1
        codes = [code for _, code in row[1:]]
        assert all(a != b for a, b in itertools.pairwise(codes))  # runs are merged
        assert set(codes) <= {PLAIN, 0, 1}
    assert rows[-2] == [(" " * Y_LABEL + "└" + "─" * 32, DIM)]
    assert rows[-1][0][0].split() == ["0", "99"]
    empty = chart_rows(raw, [2], series, 40, 12)
    assert empty.plotted == {} and empty.rows[1] == [(" " * Y_LABEL + " no points yet", DIM)]


def test_chart_strips_fit_the_width() -> None:
    from ddptui.chart.rows import chart_rows
    from ddptui.chart.view import ChartView
    from ddptui.tui.widgets.metrics_pane import metric_cycle, strips

    def series(rank: int, name: str) -> tuple[list[int], list[float]]:
        if name != "loss":
            return [], []
        return list(range(500)), [5.0 / (1 + i + rank) for i in range(500)]

    drawn = chart_rows(ChartView(), [0, 1], series, 60, 20)
    runs, plotted = drawn.rows, drawn.plotted
    rows = strips(runs)
    assert set(plotted) == {0, 1} and all(0 < n <= 4 * 52 for n in plotted.values())
    assert len(rows) == 20 and all(r.cell_length <= 60 for r in rows)
    assert metric_cycle(["zeta", "loss", "eval_loss"]) == ["loss", "eval_loss", "zeta"]


def test_log_rows_are_cut_to_the_pane_and_carry_selection_offsets() -> None:
    styler = LineStyler()
    base = Style(color="white")
    row = styler.row("[1] RuntimeError: rank 3 failed", base, False, 4, 12, 42)
    assert row.text == "RuntimeError" and row.cell_length == 12
    first = next(iter(row))
    assert first.style is not None and first.style.color is not None
    assert first.style.color.name == "red" and first.style.meta == {"offset": (4, 42)}

    short = styler.row("ok", base, False, 0, 6, 0)
    assert short.text == "ok    " and [s.style.meta["offset"] for s in short] == [(0, 0), (2, 0)]

    wide = styler.row("损失 loss 0.5", base, False, 1, 6, 0)  # a cut through a wide glyph
    assert wide.cell_length == 6 and wide.text == " 失 lo"

    coloured = styler.row("a\tb \x1b[31mred\x1b[0m\x07", base, False, 0, 16, 0)
    assert coloured.text == "a       b red\ufffd  "

    styler.pattern = re.compile("loss")
    styler.forget()
    hit = [s for s in styler.row("step 5 loss 0.1", base, True, 0, 20, 3) if s.text == "loss"]
    assert hit and hit[0].style is not None and hit[0].style.bgcolor is not None
    assert hit[0].style.reverse and hit[0].style.meta == {"offset": (7, 3)}


def test_failure_notice_names_rank_code_signal_and_cause() -> None:
    from ddptui.events import Failure
    from ddptui.tui.notices import failure_notice

    said = failure_notice(Failure("node-b", 3, -9, "SIGKILL", "", 0.0))
    assert said.message == "node-b: rank 3 failed, exit code -9 (SIGKILL): no root cause reported"
    assert (said.title, said.severity, said.timeout) == ("Node failed", "error", 15)
    said = failure_notice(Failure("node-b", None, None, None, "ValueError: boom", 0.0))
    assert said.message == "node-b: a rank failed, failed: ValueError: boom"


def test_node_change_notices_only_for_changes_not_told_already() -> None:
    from ddptui.tui.notices import node_change_notices

    lost = NodeView("a", 0, NodeStatus.LOST, detail="no answer", exit_code=None)
    failed = NodeView("b", 1, NodeStatus.FAILED, exit_code=1)
    restarting = NodeView("c", 2, NodeStatus.RESTARTING, detail="rank 4 failed", attempt=2)
    running = NodeView("d", 3, NodeStatus.RUNNING)
    said = node_change_notices([lost, failed, restarting, running],
                               {"d": NodeStatus.STARTING}, failed_nodes={"b"})
    assert [n.message for n in said] == [
        "a lost: no answer", "c restarting the workers (attempt 2). rank 4 failed"]
    assert [n.severity for n in said] == ["error", "warning"]
    assert node_change_notices([lost], {"a": NodeStatus.LOST}, set()) == []


def test_stop_texts() -> None:
    from ddptui.outcome import RunResult, StopReport
    from ddptui.tui.notices import (
        finished_notice,
        quit_question,
        stop_question,
        stop_report_notice,
    )

    assert stop_question("Stop", "r1", 1, 1) == "Stop run r1? This ends 1 process on 1 node."
    assert stop_question("Restart", "r1", 5, 2).endswith("ends 5 processes on 2 nodes.")
    clean = stop_report_notice("r1", StopReport(leftover={"a": []}))
    assert (clean.message, clean.title) == ("Run r1 stopped; no process of it is left.",
                                            "Stopped")
    checked = {n: ["no process of the run is left", f"Slurm lists no step of the run on {n} "
                   "(squeue -s)", "no torchelastic temp dir of the run is left"] for n in "ab"}
    slurm = stop_report_notice("r1", StopReport(leftover={"a": [], "b": []}, checked=checked))
    assert slurm.message == ("Run r1 stopped; no process of it is left. Checked after the stop: "
                             "Slurm lists no step of the run (squeue -s); no torchelastic temp "
                             "dir of the run is left.")
    left = stop_report_notice("r1", StopReport(leftover={"a": [], "b": [12, 13]}))
    assert left.message == "Processes still alive after stop: b: 12, 13"
    assert (left.title, left.severity) == ("Stop incomplete", "error")
    assert finished_notice("r1", None) is None
    failed = finished_notice("r1", RunResult(1, [], {}, False))
    assert failed is not None and failed.severity == "error"
    assert failed.message == "Run r1 finished with exit code 1."
    assert "`ddptui attach r1`" in quit_question("r1", 5, 2)


def test_toasts_never_headline_torchs_boilerplate_and_tell_the_diagnosis() -> None:
    from ddptui.diagnose import Cause, Diagnosis
    from ddptui.events import Failure
    from ddptui.outcome import RunResult
    from ddptui.tui.notices import failure_notice, finished_notice

    boiler = ("To enable traceback see: "
              "https://pytorch.org/docs/stable/elastic/errors.html")
    said = failure_notice(Failure("node-b", 1, 1, None, boiler, 0.0))
    assert said.message == "node-b: rank 1 failed, exit code 1: no root cause reported"
    d = Diagnosis(Cause.RANK_ERROR, "rank 1 (node b) raised ValueError: boom. What to do: fix "
                  "it in the script.", "rank 1 (node b) raised ValueError: boom",
                  "fix it in the script", "b", 1,
                  evidence=["[b r1] [rank1]: ValueError: boom"])
    told = finished_notice("r1", RunResult(1, [], {"b": 1}, False, diagnosis=d))
    assert told is not None
    assert told.message == d.headline + "\n[b r1] [rank1]: ValueError: boom"
    assert (told.title, told.severity) == ("Run r1 failed (exit code 1)", "error")
