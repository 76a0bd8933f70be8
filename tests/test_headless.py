"""The headless face's words: prefixes, and the failure report a person reads first."""

from __future__ import annotations

from ddptui.events import Failure, Level, LogLine, Metric, Source
from ddptui.faces.headless import failure_report, format_line
from ddptui.launch.outcome import RunResult
from ddptui.store.store import Store


def test_prefixes_name_node_and_rank_or_source() -> None:
    assert format_line(LogLine("a", "hi", 0.0, rank=3)) == "[a r3] hi"
    assert format_line(LogLine("a", "x", 0.0, Source.AGENT)) == "[a agent] x"
    assert format_line(LogLine("a", "y", 0.0, Source.NCCL, rank=1)) == "[a r1 nccl] y"
    assert format_line(LogLine("a", "z", 0.0, Source.SSH)) == "[a ddptui] z"


def test_failure_report_names_node_rank_cause_and_what_the_rank_said() -> None:
    s = Store()
    s.add_node("b", 1)
    events: list[object] = []
    for i in range(30):
        events.append(LogLine("b", f"said {i}", 0.0, rank=3))
        events.append(Metric("b", 3, "metric", i, {"loss": 1.0}, 0.0, text='@ddptui {"x": 1}'))
    events.append(LogLine("b", "RuntimeError: boom", 0.0, level=Level.ERROR, rank=3))
    s.apply(events)  # type: ignore[arg-type]
    fail = Failure("b", 3, 1, None, "RuntimeError: boom", 0.0, error_file="/r/error.json")
    report = failure_report(s, RunResult(1, [fail], {"a": 0, "b": 1}, False), run_id="r1")
    lines = report.splitlines()
    assert lines[0] == "ddptui: node b, rank 3 failed: exit code 1: RuntimeError: boom"
    assert "error file on b: /r/error.json" in report
    shown = [ln.strip() for ln in lines[lines.index("  last lines of rank 3:") + 1:]]
    assert shown == [f"said {i}" for i in range(16, 30)] + ["RuntimeError: boom"]


def test_a_lost_node_says_how_to_follow_it_again() -> None:
    report = failure_report(Store(), RunResult(255, [], {"a": 0, "b": None}, False), run_id="r9")
    assert "node b was lost" in report and "`ddptui attach r9`" in report
