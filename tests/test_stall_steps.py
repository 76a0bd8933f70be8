"""Stalls judged on steps: a rank, or the whole run, whose steps stop for many times the run's
median time between steps is told stalled though it goes on printing, long before the
silence rule (``stall_after``) or NCCL's timeout would say anything (pure, clock passed in)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml
from jobs import ddptui, marked_pids, run_id_of, spawn_ddptui, wait_for

from ddptui.config.model import HealthConfig
from ddptui.events import Stall
from ddptui.store.health import STEP_FLOOR_S, StallWatch, stall_text, stall_texts
from ddptui.store.views import RankView

CFG = HealthConfig(stall_after=120.0, stall_steps=50.0)
EVERY = 0.4  # seconds between steps while the run goes: 2 or 3 a look


class Run:
    """Two ranks on node "a" printing a line every look and reporting a step every ``every``
    seconds (each report ``stride`` steps on), until told otherwise; looked at once a
    second, as the session's watch looks."""

    def __init__(self, every: float = EVERY, stride: int = 1) -> None:
        self.views = {r: RankView(r, "a") for r in (0, 1)}
        self.stepping = {0: True, 1: True}
        self.every, self.stride = every, stride
        self.watch = StallWatch(CFG)
        self.now = 0.0

    def run(self, until: float) -> list[Stall]:
        told: list[Stall] = []
        while self.now < until:
            self.now = round(self.now + 1.0, 6)
            reports = [k * self.every for k in range(int((self.now - 1) / self.every + 1e-9) + 1,
                                                     int(self.now / self.every + 1e-9) + 1)]
            for r, v in self.views.items():
                v.last_line_time = self.now  # it goes on printing, steps or not
                if self.stepping[r] and reports:
                    v.last_step = (v.last_step or 0) + self.stride * len(reports)
                    v.last_step_time = round(reports[-1], 6)
            told += self.watch.update(list(self.views.values()), self.now, {"a"})
        return told


def test_a_rank_whose_steps_stop_is_stalled_alone_though_it_prints() -> None:
    run = Run()
    assert run.run(10) == []
    run.stepping[1] = False  # its last step at t=10
    assert run.run(10 + STEP_FLOOR_S) == []  # 50 gaps of 0.5 s are 25 s: the floor, 30 s
    told = run.run(10 + STEP_FLOOR_S + 1)
    assert told == [Stall("a", 1, 41.0, True, 31.0, False, step_gap_s=told[0].step_gap_s)]
    assert told[0].step_gap_s == pytest.approx(EVERY)  # 2 or 3 steps a look: gaps of 0.4 s
    assert stall_text(told[0]) == ("rank 1 on a stalled: no step for 31 s, 78 times the run's "
                                   "usual 0.4 s between steps, while the other ranks go on")
    assert run.run(60) == []  # told once
    run.stepping[1] = True
    back = run.run(61)
    assert [(s.rank, s.stalled) for s in back] == [(1, False)]
    assert back[0].idle_s == pytest.approx(51.0, abs=0.5)  # from its last step to its next
    assert stall_text(back[0]) == "rank 1 on a is going again after 51 s without a step"


def test_the_whole_run_stopping_its_steps_is_one_stall_long_before_a_timeout() -> None:
    run = Run(every=2.0, stride=10)  # a report every 10 steps, every 2 s: 50 gaps, 100 s
    run.run(20)
    run.stepping = {0: False, 1: False}
    assert run.run(20 + 100) == []
    told = run.run(121)
    assert {(s.rank, s.stalled, s.whole_run, s.step_gap_s) for s in told} == {
        (0, True, True, 2.0), (1, True, True, 2.0)}
    assert told[0].idle_s == 101.0 < CFG.stall_after  # before the silence rule's 120 s
    [(_, text)] = stall_texts(told)
    assert text.startswith("the whole run stalled: no step for 101 s, 50 times the run's "
                           "usual 2 s between steps (ranks 0, 1 on a)")


def test_no_step_rule_before_the_gaps_are_known_and_none_for_ranks_without_steps() -> None:
    run = Run()
    run.run(2)  # one look with steps: no gap timed yet
    run.stepping = {0: False, 1: False}
    assert run.run(100) == []  # the silence rule alone (they print): nothing
    quiet = Run()
    quiet.stepping = {0: False, 1: False}
    assert quiet.run(100) == [] and quiet.watch.gaps == {}


def test_a_report_every_ten_steps_is_one_gap_not_ten() -> None:
    run = Run(every=1.5, stride=10)  # advances of 10 and 20 a look: a report is 10 steps
    run.run(30)
    gaps = [g for r in (0, 1) for g in run.watch.gaps[r]]
    assert gaps and all(g == pytest.approx(1.5) for g in gaps)


def test_fast_steps_are_held_by_the_floor() -> None:
    run = Run(every=0.03)  # 33 or 34 steps a look: 50 gaps are 1.5 s, the floor 30 s
    run.run(10)
    run.stepping[1] = False
    assert run.run(10 + STEP_FLOOR_S - 1) == []
    assert [s.rank for s in run.run(10 + STEP_FLOOR_S + 1)] == [1]


def test_silence_is_still_said_as_silence() -> None:
    run = Run()
    run.run(10)
    run.stepping[1] = False
    views = run.views
    told: list[Stall] = []
    for t in range(11, 42):  # rank 1 silent too: the step rule says it first, at 30 s
        views[0].last_line_time = views[0].last_step_time = float(t)
        views[0].last_step = (views[0].last_step or 0) + 2 + t % 2
        told += run.watch.update(list(views.values()), float(t), {"a"})
    assert [(s.rank, s.step_gap_s is not None) for s in told] == [(1, True)]
    watch = StallWatch(HealthConfig(stall_after=10.0))
    views[1].last_line_time = views[1].last_step_time = 0.0
    views[0].last_line_time = views[0].last_step_time = 20.0
    silent = watch.update(list(views.values()), 20.0, {"a"})
    assert [(s.rank, s.step_gap_s) for s in silent] == [(1, None)]
    assert "no line or metric for 20 s" in stall_text(silent[0])


# Two ranks step every 0.1 s, then wait for data (printing that they wait) until the test
# lets them go on; the generic recognizer reads "step N ... loss: X".
WAITING = r'''
import os, time
import torch.distributed as dist

dist.init_process_group("gloo")
r = dist.get_rank()
for i in range(60):
    print(f"step {i} loss: {1.0 / (i + 1):.4f}", flush=True)
    time.sleep(0.1)
deadline = time.monotonic() + 90
while not os.path.exists(os.environ["JOB_HOLD"]) and time.monotonic() < deadline:
    print(f"rank {r} waiting for data", flush=True)
    time.sleep(0.5)
for i in range(60, 70):
    print(f"step {i} loss: {1.0 / (i + 1):.4f}", flush=True)
    time.sleep(0.1)
dist.barrier()
dist.destroy_process_group()
'''


@pytest.mark.torchrun
@pytest.mark.timeout(240)
def test_a_run_whose_steps_stop_while_it_prints_is_told_stalled_then_going(
        tmp_path: Path) -> None:
    """Real torchrun (gloo, one local node): the silence rule never fires (the ranks print
    every 0.5 s), the step rule does, within seconds, and says the steps came again."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "job.py").write_text(WAITING)
    hold = tmp_path / "go-on"
    hosts = {"defaults": {"python": sys.executable, "nproc_per_node": 2, "transport": "local",
                          "env": {"JOB_HOLD": str(hold)}},
             "nodes": [{"name": "a", "workdir": str(tmp_path / "wa")}],
             "job": {"script": "job.py"},
             "health": {"stall_after": 4, "stall_steps": 10}}
    path = job / "hosts.yaml"
    path.write_text(yaml.safe_dump(hosts, sort_keys=False))
    out = tmp_path / "out.txt"
    state = tmp_path / "state"
    proc = spawn_ddptui("run", str(path), "--headless", state=state, out=out)
    try:
        told = wait_for(out, "the whole run stalled: no step for", 120, proc)
        m = re.search(r"times the run's usual ([\d.e-]+) s between steps \(ranks 0, 1 on a\)",
                      told)
        # steps every 0.1 s; the count of reports between looks errs low when the steps
        # seen are all multiples of 10, and the gap reads up to a look's second
        assert m is not None and 0.05 <= float(m.group(1)) <= 1.0, told[-3000:]
        assert "no line or metric" not in told  # they printed: no silence
        hold.touch()
        wait_for(out, "is going again after", 60, proc)
        assert proc.wait(timeout=90) == 0, out.read_text()[-3000:]
    finally:
        hold.touch()  # the job ends by itself; a run left going is stopped
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
            m = re.search(r"ddptui: run (\S+):", out.read_text())
            if m:
                ddptui("stop", m.group(1), state=state, timeout=60)
    text = out.read_text()
    assert "without a step" in text and "finished, exit code 0" in text
    assert marked_pids(run_id_of(text)) == []
