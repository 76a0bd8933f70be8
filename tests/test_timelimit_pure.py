"""The time limit's and the resubmission's pure parts: a checkpoint's step from its name, when
a run is tried again and with which arguments, the time left, attempts as one row, and when
the signal goes (a stand-in transport: what it records is what a node would be asked)."""

from __future__ import annotations

import dataclasses
import re
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from ddptui.afterwards import resubmit
from ddptui.config import HostsConfig, parse_config
from ddptui.events import Level, RunStatus
from ddptui.live.timelimit import RETRY_S, TimeLimit
from ddptui.remote.checkpoint import pattern, step_of
from ddptui.run_state import NodeRecord, RunRecord
from ddptui.slurm.attempts import attempt_id, first_of, why_again
from ddptui.slurm.jobinfo import JobEnd, JobInfo, seconds_left, slurm_duration
from ddptui.store.runs import RunSummary, one_row_per_run
from ddptui.transport.base import CommandResult


@pytest.mark.parametrize(("path", "step"), [
    ("/w/ckpt/snapshot-00001200.pt", 1200), ("out/checkpoint-1200", 1200),
    ("out/checkpoint-1200/", 1200), ("ckpts/epoch=3-step=4500.ckpt", 4500),
    ("ckpt_iter_300.pt", 300), ("model_77.pt", 77), ("latest.pt", None),
])
def test_a_checkpoints_step_is_read_from_its_name(path: str, step: int | None) -> None:
    assert step_of(path) == step


def test_the_checkpoint_is_the_workers_snapshots_unless_set_and_unknown_for_a_script(
        tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("")
    worker = parse_config("defaults: {python: python3}\nslurm: {nodes: 1}\n", tmp_path / "h")
    script = parse_config("defaults: {python: python3}\nslurm: {nodes: 1}\njob: {script: t.py}\n",
                          tmp_path / "h")
    given = parse_config("defaults: {python: python3}\nslurm: {nodes: 1, checkpoint: 'o/*'}\n"
                         "job: {script: t.py}\n", tmp_path / "h")
    assert pattern(worker) == "ckpt/snapshot-*.pt"
    assert pattern(script) is None
    assert pattern(given) == "o/*"


def owned(resubmit_n: int) -> HostsConfig:
    section = "{nodes: 1, resubmit: " + str(resubmit_n) + "}"
    c = parse_config(f"defaults: {{python: python3}}\nslurm: {section}\n", "/tmp/h.yaml")
    assert c.slurm is not None
    return dataclasses.replace(c, slurm=dataclasses.replace(c.slurm, job="7", owned=True))


def test_a_run_is_tried_again_only_for_the_time_limit_or_a_preemption_within_its_budget(
        ) -> None:
    c = owned(1)
    assert why_again(c, 1, left_at_signal=True, end=None, stopped=False) == (
        "the ranks left at the signal of Slurm job 7's time limit")
    assert why_again(c, 1, left_at_signal=False, end=JobEnd("7", "PREEMPTED", "x"),
                              stopped=False) == "Slurm job 7 ended (PREEMPTED)"
    assert why_again(c, 2, left_at_signal=True, end=None, stopped=False) is None
    assert why_again(c, 1, left_at_signal=True, end=None, stopped=True) is None
    assert why_again(c, 1, left_at_signal=False, end=JobEnd("7", "FAILED", "x"),
                              stopped=False) is None
    assert why_again(owned(0), 1, left_at_signal=True, end=None, stopped=False) is None
    theirs = dataclasses.replace(c, slurm=dataclasses.replace(c.slurm, owned=False))
    assert why_again(theirs, 1, left_at_signal=True, end=None, stopped=False) is None


def test_a_later_attempt_of_the_worker_resumes_from_the_first_attempts_snapshots() -> None:
    assert resubmit.worker_args(("--steps", "9", "--fresh"), "/w/r/node0") == (
        "--steps", "9", "--snapshot-dir", "/w/r/node0/ckpt")
    assert resubmit.worker_args(("--snapshot-dir", "s", "--lr", "1"), "/n0") == (
        "--lr", "1", "--snapshot-dir", "/n0/s")
    assert resubmit.worker_args(("--snapshot-dir=/abs",), "/n0") == ("--snapshot-dir", "/abs")
    asked = parse_config("defaults: {python: python3}\nslurm: {nodes: 2, resubmit: 1}\n"
                         "job: {args: ['--steps', '9']}\n", "/tmp/h.yaml")
    first = RunRecord("r1", nodes={"a": NodeRecord("a", 1, "/w/r1/node1"),
                                   "b": NodeRecord("b", 0, "/w/r1/node0")})
    nxt = resubmit.next_config(asked, 2, first, {"node": "b", "path": "/w/r1/node0/ckpt/s-5.pt",
                                                "step": 5, "after_s": 1.0})
    assert nxt.job.args == ("--steps", "9", "--snapshot-dir", "/w/r1/node0/ckpt")
    assert nxt.slurm is not None and nxt.slurm.template is not None
    assert nxt.slurm.template.env == {"DDPTUI_ATTEMPT": "2",
                                      "DDPTUI_RESUME_FROM": "/w/r1/node0/ckpt/s-5.pt"}
    assert nxt.slurm.job is None  # a new allocation is asked for
    assert attempt_id("r1", 2) == "r1.2" and first_of("r1.2") == "r1"
    assert first_of("20261127-1-ab12") == "20261127-1-ab12"


def test_time_left_is_counted_from_slurms_end_time() -> None:
    now = datetime(2026, 11, 27, 14, 0, 0)
    info = JobInfo("7", "RUNNING", "None", 0, "u", "n1", 1, 1, 1, 0, "p", "00:01:00",
                   (now + timedelta(seconds=45)).isoformat(timespec="seconds"))
    assert seconds_left(info, now) == 45
    assert seconds_left(dataclasses.replace(info, end_time="Unknown"), now) is None
    assert slurm_duration(90061) == "1-01:01:01"


def test_attempts_are_one_row_with_the_latest_attempts_state() -> None:
    def row(run_id: str, t: float, status: RunStatus, first: str | None = None) -> RunSummary:
        return RunSummary(run_id, "", t, status, ["n"], 2, 0, first=first)

    rows = one_row_per_run([row("r1.2", 3, RunStatus.RUNNING, "r1"), row("r2", 2,
                            RunStatus.FAILED), row("r1", 1, RunStatus.FINISHED),
                            row("gone.2", 0, RunStatus.FINISHED, "gone")])
    assert [(r.run_id, r.status, r.attempts) for r in rows] == [
        ("r2", RunStatus.FAILED, 1), ("r1", RunStatus.RUNNING, 2),
        ("gone.2", RunStatus.FINISHED, 1)]


class Node:
    """A node as the time limit's programs see it: what they were asked, canned answers."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.asked: list[str] = []
        self.answers = answers

    def run(self, command: str, timeout: float) -> CommandResult:
        self.asked.append(command)
        answer = next(v for k, v in self.answers.items() if k in command)
        return CommandResult(0, answer, "")


def test_the_signal_goes_once_at_the_lead_and_the_checkpoint_is_named() -> None:
    c = owned(0)
    c = dataclasses.replace(c, slurm=dataclasses.replace(c.slurm, signal_before=30))
    c = dataclasses.replace(c, nodes=(dataclasses.replace(c.slurm.template, name="a", host="a"),))
    node = Node({"os.kill": '{"signalled": [[0, 0, 11]], "failed": []}',
                 "glob": '{"newest": {"path": "/n/ckpt/snapshot-00000042.pt", "mtime": '
                         f'{datetime.now().timestamp() + 3}}}, "matches": 1, "now": 0}}'})
    said: list[tuple[str, Level]] = []
    recorded: list[object] = []
    done = threading.Event()
    tl = TimeLimit(c, "r1", lambda _n: node, lambda _n: "/n", lambda _n: "/n/.ddptui/r1/node0",
                   lambda _n, t, lv: said.append(
        (t, lv)), recorded.append, done)  # type: ignore[arg-type]
    now = datetime.now()

    def info(left: int) -> JobInfo:
        return JobInfo("7", "RUNNING", "None", 0, "u", "a", 1, 1, 1, 0, "p", "00:01:00",
                       (now + timedelta(seconds=left)).isoformat(timespec="seconds"))

    assert 28 <= (tl.heard(info(59)) or 0) <= 30  # the next look: at the lead
    assert tl.sent is None and "00:00:5" in said[0][0]
    tl.heard(info(30))
    tl.heard(info(29))  # once
    deadline = datetime.now() + timedelta(seconds=10)
    while tl.found is None and datetime.now() < deadline:
        done.wait(0.05)
    done.set()
    assert tl.left_at_signal and tl.found is not None and tl.found["step"] == 42
    texts = [t for t, _lv in said]
    assert sum("sent SIGUSR2 to 1 rank(s) on 1 node(s)" in t for t in texts) == 1
    assert any(t.startswith("checkpoint step 42 written ") for t in texts), texts
    assert sum("os.kill" in cmd for cmd in node.asked) == 1
    signal_cmd = next(cmd for cmd in node.asked if "os.kill" in cmd)
    assert "USR2 'time limit' /n/.ddptui/r1/node0/time_limit_signal" in signal_cmd


def test_ranks_that_catch_no_signal_yet_are_not_sent_it_and_get_it_once_they_do() -> None:
    """A rank without a handler (a script that never saves, or one still importing torch)
    would die of the signal: it is not sent it, nothing is recorded, the problem is said once
    however often it is tried, and the signal goes as soon as a rank catches it."""
    c = owned(1)
    c = dataclasses.replace(c, slurm=dataclasses.replace(c.slurm, signal_before=30))
    c = dataclasses.replace(c, nodes=(dataclasses.replace(c.slurm.template, name="a", host="a"),))
    node = Node({"os.kill": '{"signalled": [], "deaf": [[0, 11]], "failed": []}',
                 "glob": '{"newest": null, "matches": 0, "now": 0}'})
    said: list[tuple[str, Level]] = []
    recorded: list[object] = []
    done = threading.Event()
    tl = TimeLimit(c, "r1", lambda _n: node, lambda _n: "/n", lambda _n: "/n/node0",
                   lambda _n, t, lv: said.append((t, lv)), recorded.append,
                   done)  # type: ignore[arg-type]
    nothing = ("no rank of the run could take SIGUSR2 now (none runs, or none catches it): "
               "nothing was sent")
    assert tl.rehearse() == nothing and tl.rehearse() == nothing
    assert tl.sent is None and recorded == [] and not tl.left_at_signal  # no exit code 3
    assert len(said) == 1 and said[0][1] is Level.ERROR, said
    assert said[0][0].startswith("rehearsing the time limit: no rank of the run catches SIGUSR2 "
                                 "yet (rank 0 on node a), so none was sent it")
    assert "ddptui sends it as soon as one does" in said[0][0]
    now = datetime.now()
    info = JobInfo("7", "RUNNING", "None", 0, "u", "a", 1, 1, 1, 0, "p", "00:01:00",
                   (now + timedelta(seconds=20)).isoformat(timespec="seconds"))
    assert tl.heard(info) == RETRY_S  # the lead is past and no rank got the signal: soon again
    deadline = datetime.now() + timedelta(seconds=10)  # its try, in the background
    while (tl.sent is not None or sum("os.kill" in a for a in node.asked) < 3) and \
            datetime.now() < deadline:
        done.wait(0.02)
    told = [t for t, _lv in said if "no rank" in t]
    assert tl.sent is None and len(told) == 2  # the time limit's words, once
    assert re.match(r"the allocation ends in (19|20) s \(its time limit\): no rank", told[1])
    assert tl.heard(info) == RETRY_S
    deadline = datetime.now() + timedelta(seconds=10)
    while (tl.sent is not None or sum("os.kill" in a for a in node.asked) < 4) and \
            datetime.now() < deadline:
        done.wait(0.02)
    assert tl.sent is None and sum("no rank" in t for t, _lv in said) == 2  # not said again
    node.answers["os.kill"] = '{"signalled": [[0, 0, 11]], "deaf": [], "failed": []}'
    assert tl.rehearse() == "sent SIGUSR2 to 1 rank(s), as the time limit would"
    done.set()
    assert tl.left_at_signal and len(recorded) == 1


def test_a_signal_due_when_no_rank_runs_is_neither_sent_nor_recorded_and_comes_again() -> None:
    """The lead reached just as the run's ranks ended (or while torchrun starts them again):
    nothing to save, so nothing is recorded or said, and a later look may still send it."""
    c = owned(1)
    c = dataclasses.replace(c, slurm=dataclasses.replace(c.slurm, signal_before=30))
    c = dataclasses.replace(c, nodes=(dataclasses.replace(c.slurm.template, name="a", host="a"),))
    node = Node({"os.kill": '{"signalled": [], "failed": []}',
                 "glob": '{"newest": null, "matches": 0, "now": 0}'})
    said: list[str] = []
    recorded: list[object] = []
    done = threading.Event()
    tl = TimeLimit(c, "r1", lambda _n: node, lambda _n: "/n", lambda _n: "/n/node0",
                   lambda _n, t, _lv: said.append(t), recorded.append, done)  # type: ignore[arg-type]
    assert tl.rehearse().startswith("no rank of the run could take SIGUSR2 now")
    assert tl.sent is None and recorded == [] and said == []
    assert not tl.left_at_signal
    node.answers["os.kill"] = '{"signalled": [[0, 0, 11]], "failed": []}'
    assert tl.rehearse() == "sent SIGUSR2 to 1 rank(s), as the time limit would"
    done.set()
    assert tl.left_at_signal and len(recorded) == 1
