"""The log parser against real torchrun output and the formats it must not mistake."""

from __future__ import annotations

from pathlib import Path

from ddptui.events import (
    Failure,
    Level,
    LogLine,
    Metric,
    NodeState,
    NodeStatus,
    Source,
    classify_level,
    is_nccl,
)
from ddptui.nodelog import NodeLogParser

DATA = Path(__file__).parent / "data" / "torchrun"


def feed_all(parser: NodeLogParser, text: str) -> list[object]:
    return [e for line in text.splitlines() for e in parser.feed(line, 1.0)]


def test_root_cause_from_real_torchrun_output() -> None:
    events = feed_all(NodeLogParser("n1"), (DATA / "root_cause.log").read_text())
    failures = [e for e in events if isinstance(e, Failure)]
    assert len(failures) == 1
    f = failures[0]
    assert (f.node, f.rank, f.local_rank, f.exit_code, f.signal) == ("n1", 1, 1, 1, None)
    assert f.root_cause == "ValueError: boom on rank 1"
    assert f.error_file is not None and f.error_file.endswith("attempt_0/1/error.json")
    assert 'raise ValueError("boom on rank 1")' in f.traceback
    worker = [e for e in events if isinstance(e, LogLine) and e.source is Source.WORKER]
    assert {e.rank for e in worker} == {0, 1}
    assert any(e.text == "hello from 0 attempt 0" and e.rank == 0 for e in worker)
    assert [e.level for e in worker if e.text == "[rank1]: ValueError: boom on rank 1"] == [
        Level.ERROR]


def test_worker_prefix_gives_global_and_local_rank() -> None:
    (ev,) = NodeLogParser("b").feed("[ddptui 7 3] step 5\n", 2.0)
    assert isinstance(ev, LogLine)
    assert (ev.node, ev.rank, ev.local_rank, ev.text, ev.time) == ("b", 7, 3, "step 5", 2.0)
    assert ev.source is Source.WORKER


def test_unprefixed_lines_are_the_agent() -> None:
    line = ("W1121 14:50:17.517000 2842 site-packages/torch/distributed/elastic/agent/server/"
            "api.py:753] Received 15 death signal, shutting down workers")
    (ev,) = NodeLogParser("a").feed(line, 0.0)
    assert isinstance(ev, LogLine) and ev.source is Source.AGENT and ev.rank is None
    assert ev.level is Level.WARNING


def test_metric_lines_become_metrics_and_keep_unknown_fields() -> None:
    p = NodeLogParser("a")
    (m,) = p.feed('[ddptui 1 1] @ddptui {"v": 1, "kind": "metric", "rank": 1, "step": 120, '
                  '"loss": 0.41, "samples_per_s": 5310, "note": "x", "attempt": 2}', 0.0)
    assert isinstance(m, Metric)
    assert (m.rank, m.step, m.kind, m.attempt) == (1, 120, "metric", 2)
    assert m.values["loss"] == 0.41 and m.values["samples_per_s"] == 5310.0
    assert m.extra == {"note": "x"}
    assert m.text.startswith('@ddptui {"v": 1') and m.text.endswith('"attempt": 2}')


def test_malformed_metric_line_is_a_plain_line() -> None:
    for bad in ('@ddptui {"loss": ', "@ddptui [1, 2]", "@ddptui nonsense"):
        (ev,) = NodeLogParser("a").feed(f"[ddptui 0 0] {bad}", 0.0)
        assert isinstance(ev, LogLine) and ev.text == bad


def test_metric_without_rank_takes_the_prefix_rank() -> None:
    (m,) = NodeLogParser("a").feed('[ddptui 5 1] @ddptui {"step": 3, "loss": 1}', 0.0)
    assert isinstance(m, Metric) and m.rank == 5 and m.kind == "metric"


def test_nccl_lines_inside_and_outside_the_prefix() -> None:
    inside = "[ddptui 0 0] gpu-a:1234:1290 [0] NCCL INFO Channel 00/02 :    0   1"
    (ev,) = NodeLogParser("a").feed(inside, 0.0)
    assert isinstance(ev, LogLine) and ev.source is Source.NCCL and ev.rank == 0
    assert ev.level is Level.INFO
    (w,) = NodeLogParser("a").feed("gpu-a:1234:1290 [0] NCCL WARN NET/Socket : no iface", 0.0)
    assert isinstance(w, LogLine) and w.source is Source.NCCL and w.level is Level.WARNING


def test_restart_announcement_moves_the_attempt() -> None:
    p = NodeLogParser("a")
    out = p.feed("I1121 14:00:00.000000 11 torch/distributed/elastic/agent/server/api.py:940] "
                 "[default] Worker group FAILED. 3/3 attempts left; will restart worker group",
                 0.0)
    states = [e for e in out if isinstance(e, NodeState)]
    assert states and states[0].status is NodeStatus.RESTARTING and states[0].attempt == 1
    (ev,) = p.feed("[ddptui 0 0] again", 0.0)
    assert isinstance(ev, LogLine) and ev.attempt == 1


def test_signal_in_root_cause() -> None:
    text = """Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_14:50:24
  host      : node2
  rank      : 3 (local_rank: 1)
  exitcode  : -9 (pid: 2954)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 2954
============================================================"""
    (f,) = [e for e in feed_all(NodeLogParser("b"), text) if isinstance(e, Failure)]
    assert (f.rank, f.local_rank, f.exit_code, f.host, f.error_file) == (3, 1, -9, "node2", None)
    assert "SIGKILL" in f.root_cause


def test_levels() -> None:
    assert classify_level("E1121 14:50:24.489000 2909 x.py:1] failed") is Level.ERROR
    assert classify_level("Traceback (most recent call last):") is Level.ERROR
    assert classify_level("RuntimeError: oops") is Level.ERROR
    assert classify_level("UserWarning: careful") is Level.WARNING
    assert classify_level("step 3 loss 1.2") is Level.INFO
    assert classify_level("[rank1]: torch.distributed.DistBackendError: x") is Level.ERROR
    assert classify_level('    raise ValueError("x")') is Level.INFO


def test_nccl_debug_formats() -> None:
    events = feed_all(NodeLogParser("a"), (DATA.parent / "nccl" / "formats.log").read_text())
    lines = [e for e in events if isinstance(e, LogLine)]
    assert len(lines) == 18
    assert all(e.source is Source.NCCL for e in lines), [e.text for e in lines
                                                         if e.source is not Source.NCCL]
    warns = [e for e in lines if e.level is Level.WARNING]
    assert len(warns) == 2 and all("NCCL WARN" in e.text for e in warns)
    assert [e.rank for e in lines][:5] == [0, 0, 0, 0, 1]
    assert lines[-1].rank is None  # written by the agent's own process, not a worker


def test_lines_that_merely_mention_nccl_are_not_nccl() -> None:
    for text in ("using backend NCCL for 4 ranks", "NCCL_DEBUG=INFO set",
                 "host:1:2 [0] something else"):
        (ev,) = NodeLogParser("a").feed(f"[ddptui 0 0] {text}", 0.0)
        assert isinstance(ev, LogLine) and ev.source is Source.WORKER


def test_python_warnings_and_torch_info() -> None:
    assert classify_level("/x/train.py:88: UserWarning: lr is high") is Level.WARNING
    assert classify_level("I1121 14:50:17.5 28 api.py:9] [default] Starting worker group") \
        is Level.DEBUG


def test_compact_metric_line() -> None:
    from ddptui.events import compact_metric_line

    text = '@ddptui {"v": 1, "kind": "metric", "rank": 0, "step": 7, "loss": 0.5, "seq": 3}'
    assert compact_metric_line(text) == "@metric step=7 loss=0.5"
    assert compact_metric_line("@ddptui {broken") == "@ddptui {broken"
    assert compact_metric_line("plain") == "plain"


def test_nccl_stamped_warn_lines_are_nccl() -> None:
    """NCCL 2.26 and later put a timestamp before WARN lines (recorded on an H100, 2.28.9)."""
    raw = ("[ddptui 0 0] [2026-11-22 11:58:29] vm:541:541 [0] bootstrap.cc:114 NCCL WARN "
           "Bootstrap : no socket interface found")
    (line,) = [e for e in NodeLogParser("gpu0").feed(raw, 1.0) if isinstance(e, LogLine)]
    assert (line.source, line.level, line.rank) == (Source.NCCL, Level.WARNING, 0)
    assert not is_nccl("[2026-11-22 11:58:29] training resumed, NCCL was fine")
