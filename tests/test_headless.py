"""The headless face's words: prefixes, and the failure report a person reads first."""

from __future__ import annotations

import io
from types import SimpleNamespace

from replay import DATA, T0, node_events

from ddptui.diagnose import diagnose
from ddptui.events import Failure, Level, LogLine, Metric, NodeState, NodeStatus, Source
from ddptui.faces.headless import (
    Printer,
    failure_report,
    format_failure_head,
    format_line,
    run_headless,
)
from ddptui.insight.judge import Told
from ddptui.live.follow import Batch
from ddptui.nccl import NcclFacts
from ddptui.outcome import RunResult
from ddptui.store.store import Store

BOILER = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"


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


def recorded(name: str) -> tuple[Store, RunResult]:
    """A recorded single-node torchrun failure, as the controller hands it to the face."""
    store = Store()
    store.add_node("a", 0)
    text = (DATA / "diagnose" / name).read_text(encoding="utf-8").splitlines()
    events = [NodeState("a", NodeStatus.RUNNING, T0), *node_events("a", text),
              NodeState("a", NodeStatus.FAILED, T0 + 1000, exit_code=1)]
    store.apply(events)
    result = RunResult(1, store.failure_list(), {"a": 1}, False,
                       diagnose(events, nodes=["a"], exit_code=1))
    return store, result


def test_the_summary_leads_with_the_diagnosis_not_torchs_boilerplate() -> None:
    store, result = recorded("gloo-value-error.log")
    assert result.failures[0].root_cause == BOILER  # what the headline used to be
    lines = failure_report(store, result, run_id="r1").splitlines()
    assert lines[0] == ("ddptui: rank 1 (node a) raised ValueError: batch 3 has 0 samples: "
                        "check --data-dir on this node. What to do: fix it in the script; "
                        "rank 1's log holds the whole traceback.")
    assert lines[1] == ("  [a r1] [rank1]: ValueError: batch 3 has 0 samples: check "
                        "--data-dir on this node")
    assert "  node a: rank 1 (node a) raised ValueError: batch 3 has 0 samples: check " \
           "--data-dir on this node (the cause)" in lines
    # the per-rank report stays below, without torch's boilerplate for a cause
    assert "ddptui: node a, rank 1 failed: exit code 1" in lines
    assert lines.index("ddptui: node a, rank 1 failed: exit code 1") < \
        lines.index("  last lines of rank 1:")
    assert not any("To enable traceback" in ln for ln in lines if ln.startswith("ddptui:"))


def test_a_collective_timeout_summary_names_the_rank_that_stopped() -> None:
    store, result = recorded("gloo-hang-metrics-ahead.log")
    first = failure_report(store, result).splitlines()[0]
    assert first.startswith("ddptui: rank 0 timed out waiting in a gloo recv (5 s timeout) "
                            "for rank 1 (node a)")


def test_torchs_boilerplate_is_never_a_failure_head() -> None:
    f = Failure("b", 2, 1, None, BOILER, 0.0)
    assert format_failure_head(f) == "[b] ✗ rank 2 failed: exit code 1"
    out = io.StringIO()
    Printer(out)(Batch("b", [f], {}))
    assert out.getvalue() == "[b] ✗ rank 2 failed: exit code 1\n"
    report = failure_report(Store(), RunResult(1, [f], {"b": 1}, False))
    assert report.splitlines()[0] == "ddptui: node b, rank 2 failed: exit code 1"


def fake_ctl(result: RunResult, status: str) -> SimpleNamespace:
    info = SimpleNamespace(status=status)
    return SimpleNamespace(run_id="r7", wait=lambda _t: result,
                           store=SimpleNamespace(run_info=lambda: info,
                                                 insight=lambda final=False: Told()),
                           reaper=None,
                           nccl_facts=NcclFacts)


def test_a_run_that_succeeds_prints_as_before() -> None:
    out = io.StringIO()
    code = run_headless(fake_ctl(RunResult(0, [], {"a": 0}, False), "finished"),  # type: ignore[arg-type]
                        out)
    assert code == 0 and out.getvalue() == "ddptui: run r7 finished, exit code 0\n"


def test_a_failed_run_prints_the_diagnosis_before_its_status() -> None:
    store, result = recorded("gloo-value-error.log")
    ctl = fake_ctl(result, "failed")
    ctl.store = store
    store.set_run(status="failed")
    out = io.StringIO()
    assert run_headless(ctl, out) == 1  # type: ignore[arg-type]
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("ddptui: rank 1 (node a) raised ValueError: batch 3")
    assert lines[-1] == "ddptui: run r7 failed, exit code 1"


def test_last_lines_pass_over_harmless_warnings_unless_nothing_else_is_there() -> None:
    from ddptui.faces.headless import last_words

    warn = ("[W1125 21:25:35.256000 31720 torch/csrc/distributed/c10d/socket.cpp:767] [c10d] "
            "The hostname of the client socket cannot be retrieved. err=-3")
    said = [LogLine("a", t, 1.0 + i, Source.WORKER, level, 1, 1) for i, (t, level) in
            enumerate([("step 4", Level.INFO), ("ValueError: boom", Level.ERROR),
                       (warn, Level.WARNING), ("noise", Level.DEBUG), (warn, Level.WARNING)])]
    assert [ln.text for ln in last_words(said, 2)] == ["step 4", "ValueError: boom"]
    assert [ln.text for ln in last_words(said[2:], 5)] == [warn, warn]
