"""The straggler from sampled stacks, pure: each recorded ``py-spy dump`` of a real gloo rank
classified (inside a collective or its wait, or not), a node's counted answer made an event,
and the judge's rule: chronic, once, alike, not revealed, and where it defers to the ranks'
own timing."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddptui import nodeprog
from ddptui.engine.wire import Done, apply_change, decode, encode
from ddptui.events import Metric, StackCount
from ddptui.faces.logs import curves_report
from ddptui.insight.judge import Judge, Kind
from ddptui.insight.straggler import (
    CHRONIC_ROUNDS,
    MIN_SAMPLES,
    ROUND_SAMPLES,
    SHARE_MARGIN,
    WAITING,
    StackWatch,
)
from ddptui.live.stack_sampler import NATIVE, SAMPLES, counted
from ddptui.nodeprog import stack_share
from ddptui.nodeprog.spy import in_backward, inside_collective, main_thread
from ddptui.rank_stacks import PTRACE_HINT
from ddptui.store import rundir
from ddptui.store.changes import Change
from ddptui.store.mirror import event_record
from ddptui.store.store import Store

DATA = Path(__file__).resolve().parent / "data" / "stacks"


@pytest.mark.parametrize(("name", "inside", "backward"), [
    ("allreduce_waiting.txt", True, False),  # dist.all_reduce's Python frame
    ("allreduce_waiting_native.txt", True, False),  # and c10d::Work::wait under it
    ("allreduce_working.txt", False, False),  # the slow rank's own work
    ("ddp_backward.txt", False, True),  # DDP's wait, unseen: a native dump is taken
    ("ddp_backward_waiting_native.txt", True, True),  # Reducer::finalize_backward waits
    ("ddp_backward_launching_native.txt", False, True),  # launching a bucket is no wait
])
def test_each_recorded_dump_is_classified(name: str, inside: bool, backward: bool) -> None:
    stack = (DATA / name).read_text()
    assert main_thread(stack)  # the main thread's frames were read
    assert inside_collective(stack) is inside
    assert in_backward(stack) is backward


def test_only_the_main_thread_counts() -> None:
    waiting = (DATA / "allreduce_waiting.txt").read_text().splitlines()
    worker = [ln.replace('"MainThread"', '"pin_memory"').replace("Thread 15734", "Thread 9")
              for ln in waiting[3:]]
    main = ['Thread 15734 (active): "MainThread"', "    train (job.py:12)"]
    assert not inside_collective("\n".join([*waiting[:3], *worker, *main]))


def answer(rows: list[dict[str, object]], spy: str | None = "/bin/py-spy",
           native: float = 0.0) -> str:
    return "banner\n" + json.dumps({"py_spy": spy, "python": "/p/python", "ranks": rows,
                                    "longest_s": {"python": 0.031, "native": native}})


def test_a_nodes_answer_becomes_its_counts_and_its_cost() -> None:
    rows: list[dict[str, object]] = [
        {"rank": 2, "pid": 5, "samples": 10, "inside": 7, "unresolved": 0, "error": ""},
        {"rank": 3, "pid": 6, "samples": 8, "inside": 1, "unresolved": 2, "error": ""}]
    ev = counted("b", 4, "/p/python", answer(rows, native=0.9), "", 30, 1.0)
    assert ev == StackCount("b", 1.0, 4, {2: (10, 7), 3: (8, 1)}, "", ev.cost if ev else "")
    assert ev is not None and ev.cost == (
        f"{SAMPLES} py-spy samples a rank every 30 s, each 31 ms of py-spy at most, up to "
        f"{NATIVE} of them again with --native inside backward, 0.9 s each at most")
    # no rank there yet (or any more): nothing to say
    assert counted("b", 1, "/p/python", answer([]), "", 30, 1.0) is None


def test_a_node_that_cannot_sample_says_why() -> None:
    no_spy = counted("b", 1, "/p/python", answer([], spy=None), "", 30, 1.0)
    assert no_spy is not None and no_spy.problem.startswith("py-spy is not on b: pip install "
                                                            "py-spy")
    refused = [{"rank": 2, "pid": 5, "samples": 0, "inside": 0, "unresolved": 0,
                "error": "Permission denied (os error 13)"}]
    ev = counted("b", 1, "/p/python", answer(refused), "", 30, 1.0)
    assert ev is not None and ev.counts == {}
    assert ev.problem == ("py-spy could not read rank 2 on b: Permission denied (os error 13)"
                          + PTRACE_HINT)
    broken = counted("b", 1, "/p/python", "", "Traceback\nOSError: boom", 30, 1.0)
    assert broken is not None and broken.problem.endswith("OSError: boom")


def rounds(watch: StackWatch | Judge, n: int, shares: dict[int, float], samples: int = 10,
           start: int = 1) -> None:
    """``n`` rounds, each rank inside a collective in its ``shares`` of ``samples``."""
    for no in range(start, start + n):
        for node, ranks in (("a", (0, 1)), ("b", (2, 3))):
            counts = {r: (samples, round(shares[r] * samples)) for r in ranks}
            if isinstance(watch, Judge):
                watch.add_stacks(node, no, counts, cost="10 py-spy samples a rank every 30 s")
            else:
                watch.add(node, no, counts)


def test_the_rule_chronic_once_and_alike() -> None:
    slow = {0: 0.7, 1: 0.1, 2: 0.8, 3: 0.7}
    w = StackWatch()
    rounds(w, CHRONIC_ROUNDS, slow)
    assert w.judge() == []  # the newest round may still be coming in
    found = w.judge(final=True)
    assert [(s.rank, s.chronic, s.behind, s.samples) for s in found] == [
        (1, True, CHRONIC_ROUNDS, 10 * CHRONIC_ROUNDS)]
    assert (found[0].share, found[0].low, found[0].high) == (pytest.approx(0.1), 0.7, 0.8)
    assert set(w.standing()) == {1}

    once = StackWatch()  # behind in one round, not in the rounds after
    rounds(once, 1, slow)
    rounds(once, CHRONIC_ROUNDS, {r: 0.7 for r in range(4)}, start=2)
    found = once.judge(final=True)
    assert [(s.rank, s.chronic) for s in found] == [(1, False)] and once.standing() == {}

    alike = StackWatch()
    rounds(alike, 4, {0: 0.6, 1: 0.5, 2: 0.7, 3: 0.6})
    assert alike.judge(final=True) == [] and alike.alike() == (0.5, 0.7)


@pytest.mark.parametrize(("shares", "why"), [
    ({0: WAITING - 0.1, 1: 0.0, 2: WAITING - 0.1, 3: WAITING - 0.2}, "others not waiting"),
    ({0: 0.7, 1: 0.7 - SHARE_MARGIN + 0.05, 2: 0.7, 3: 0.7}, "not clearly the smallest"),
    ({0: 0.7, 1: 0.1, 2: 0.1, 3: 0.7}, "two ranks alike at the bottom"),
])
def test_no_rank_is_named_unless_it_clearly_waits_least(shares: dict[int, float],
                                                        why: str) -> None:
    w = StackWatch()
    rounds(w, 6, shares)
    assert w.judge(final=True) == [], why


def test_too_few_samples_judge_nothing() -> None:
    w = StackWatch()
    rounds(w, 6, {0: 0.75, 1: 0.0, 2: 0.75, 3: 0.75}, samples=ROUND_SAMPLES - 1)
    assert w.judge(final=True) == [] and w.judged == 0
    few = StackWatch()  # enough rounds, too few samples in all: behind, not yet named
    rounds(few, CHRONIC_ROUNDS, {0: 0.75, 1: 0.0, 2: 0.75, 3: 0.75}, samples=ROUND_SAMPLES)
    assert ROUND_SAMPLES * CHRONIC_ROUNDS < MIN_SAMPLES
    assert few.judge(final=True) == [] and few.behind == {1: [1, 2, 3]}


def test_noisy_rounds_of_a_chronic_straggler_still_name_it() -> None:
    rnd = random.Random(3)
    w = StackWatch()
    for no in range(1, 11):  # 10 rounds of 10 samples, each sample a coin thrown
        w.add("a", no, {r: (10, sum(rnd.random() < (0.05 if r == 1 else 0.67)
                                    for _ in range(10))) for r in range(4)})
    assert [s.rank for s in w.judge(final=True) if s.chronic] == [1]


def test_the_judge_says_it_in_its_words_with_the_node() -> None:
    j = Judge(nodes={0: "a", 1: "a", 2: "b", 3: "b"})
    rounds(j, 5, {0: 0.7, 1: 0.1, 2: 0.8, 3: 0.7})
    j.judge(final=True)
    told = j.told()
    assert [f.kind for f in told.findings] == [Kind.STRAGGLER] and told.stragglers == {1}
    assert told.summary == (
        "rank 1 (node a) is a straggler: from 50 sampled stacks of it, it was inside a "
        "collective or its wait in 10% of them, the others in 70%–80% of theirs (behind in 5 "
        "of 5 sampling rounds; 10 py-spy samples a rank every 30 s), judged by the ranks' "
        "sampled stacks; its Python stack (`ddptui stacks RUN_ID`) shows where it spends its "
        "time",)


def test_the_ranks_own_timing_comes_first() -> None:
    j = Judge(nodes={0: "a", 1: "a", 2: "b", 3: "b"})
    for step in range(30):  # each rank prints its compute time: alike
        for r in range(4):
            j.add(r, "a", step, {"compute_ms": 50.0, "wait_ms": 5.0}, 1000.0 + step)
    rounds(j, 5, {0: 0.7, 1: 0.1, 2: 0.8, 3: 0.7})
    j.judge(final=True)
    assert j.told().findings == () and j.told().stragglers == frozenset()


def test_alike_shares_and_no_sampling_are_said_not_guessed() -> None:
    j = Judge()
    rounds(j, 4, {0: 0.6, 1: 0.5, 2: 0.7, 3: 0.6})
    j.judge(final=True)
    assert j.told().summary == (
        "sampled stacks name no straggler: each rank was inside a collective or its wait in "
        "50%–70% of its samples, over 4 rounds (10 py-spy samples a rank every 30 s)",)
    refused = Judge()
    refused.add_stacks("b", 1, {}, "py-spy could not read rank 2 on b: Permission denied")
    refused.judge(final=True)
    assert refused.told().summary == ("per-rank timing not revealed by sampled stacks: py-spy "
                                      "could not read rank 2 on b: Permission denied",)


def test_ddptui_logs_judges_the_counts_again_from_events_jsonl(tmp_path: Path) -> None:
    events = [StackCount(n, 1.0, no, {r: (10, 1 if r == 1 else 7) for r in rs}, "", "c")
              for no in range(1, 5) for n, rs in (("a", (0, 1)), ("b", (2, 3)))]
    (tmp_path / rundir.EVENTS).write_text(
        "".join(json.dumps(event_record(ev)) + "\n" for ev in events))
    (tmp_path / rundir.METRICS).write_text("")
    report = curves_report(tmp_path)
    assert "rank 1 (node ?) is a straggler: from 40 sampled stacks of it" in report


def test_stacks_not_taken_are_no_news_where_the_ranks_own_timing_told() -> None:
    j = Judge()
    for step in range(30):
        for r in range(4):
            j.add(r, "a", step, {"compute_ms": 50.0, "wait_ms": 5.0}, 1000.0 + step)
    j.add_stacks("b", 1, {}, "py-spy is not on b")
    j.judge(final=True)
    assert j.told().summary == ()


def test_the_node_program_counts_a_marked_rank_and_keeps_no_stack(tmp_path: Path) -> None:
    """The program as a node gets it, on a real process of a run (its marker, RANK 0) busy
    outside any collective: its samples counted, none inside, no stack sent back."""
    marker = "DDPTUI_RUN=test-stacks/0"
    env = {**os.environ, "DDPTUI_RUN": "test-stacks/0", "RANK": "0", "LOCAL_RANK": "0"}
    rank = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"],
                            env=env)
    try:
        time.sleep(0.5)  # its interpreter up, for py-spy to find
        res = subprocess.run([sys.executable, "-c", nodeprog.source(stack_share), marker, "3",
                              "0.05", "2", "10"], capture_output=True, text=True, timeout=60)
    finally:
        rank.kill()
        rank.wait(10)
    out = json.loads(res.stdout)
    assert [{k: r[k] for k in ("rank", "pid", "samples", "inside", "error")}
            for r in out["ranks"]] == [
        {"rank": 0, "pid": rank.pid, "samples": 3, "inside": 0, "error": ""}], res.stderr
    assert 0 < out["longest_s"]["python"] < 10 and "stack" not in res.stdout


def test_the_counts_reach_the_nodes_table_through_the_store_the_mirror_and_the_wire(
        tmp_path: Path) -> None:
    """The session's store marks the straggler; the counts are in its events.jsonl; a
    dashboard's replica, fed the same changes over the wire, marks the same rank."""
    store = Store(tmp_path)
    replica = Store.replica(store.subscribe(lambda _change: None))
    sent: list[Change] = []
    store.subscribe(sent.append)
    for node in ("a", "b"):
        store.add_node(node, len(store.nodes))
    store.apply([Metric("a" if r < 2 else "b", r, "metric", 0, {"loss": 2.0}, 1.0)
                 for r in range(4)])
    for no in range(1, 5):
        store.apply([StackCount(n, 2.0 + no, no, {r: (10, 1 if r == 1 else 7) for r in rs},
                                cost="10 py-spy samples a rank every 2 s")
                     for n, rs in (("a", (0, 1)), ("b", (2, 3)))])
    for change in decode(encode(list(sent))):
        assert not isinstance(change, Done)
        apply_change(replica, change)
    for s in (store, replica):
        assert [r.rank for r in s.rank_views() if r.straggler] == [1]
    store.close()
    assert "rank 1 (node a) is a straggler: from 40 sampled stacks" in curves_report(tmp_path)
