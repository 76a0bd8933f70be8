"""The controller's bounded copy for the diagnosis, and the diagnosis reaching RunResult and
``run.json``, from recorded torchrun output (no torchrun runs here)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from jobs import write_job
from replay import T0, node_events
from test_diagnose import headless_events, node_log

from ddptui.config import load_config
from ddptui.diagnose import Cause, diagnose
from ddptui.events import Event, Level, LogLine, Metric, NodeState, NodeStatus, Source
from ddptui.live import evidence as ev_mod
from ddptui.live.evidence import Evidence
from ddptui.live.follow import Batch, Finished
from ddptui.live.session import Session
from ddptui.outcome import RunResult
from ddptui.run_state import RunEvent


def kept(events: list[Event], batch: int = 37) -> Evidence:
    """Fed as the consumer feeds it: in batches."""
    e = Evidence()
    for i in range(0, len(events), batch):
        e.add(events[i:i + batch])
    return e


RECORDED = {
    "rank error, two nodes": lambda: [*node_log("a", "fail-node0.log"),
                                      *node_log("b", "train-node1.log", end=NodeStatus.STOPPED,
                                                code=-15)],
    "value error, boilerplate root cause": lambda: node_log("a", "gloo-value-error.log"),
    "hang, metrics ahead": lambda: node_log("a", "gloo-hang-metrics-ahead.log"),
    "sigkill": lambda: node_log("a", "gloo-sigkill.log"),
    "segfault": lambda: node_log("a", "gloo-segfault.log"),
    "address in use": lambda: node_log("a", "gloo-addr-in-use.log"),
    "rendezvous timeout": lambda: node_log("a", "gloo-rdzv-timeout.log"),
    "cuda oom": lambda: headless_events("h100-cuda-oom-headless.log"),
    "nccl no interface": lambda: headless_events("h100-nccl-socket-ifname-missing-headless.log"),
}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_the_copy_gives_the_diagnosis_every_event_gives(name: str) -> None:
    events = RECORDED[name]()
    whole = diagnose(events, nodes=["a", "b"], world_size=None)
    assert whole is not None
    got = diagnose(kept(events).events(), nodes=["a", "b"])
    assert got is not None and got.to_dict() == whole.to_dict()


def flood(node: str, rank: int, n: int, t0: float, level: Level = Level.INFO,
          source: Source = Source.WORKER) -> list[Event]:
    return [LogLine(node, f"[rank{rank}]: step {i} ok", t0 + i * 1e-4, source, level, rank, rank)
            for i in range(n)]


def test_a_flood_stays_bounded_and_keeps_both_ends_of_each_rank() -> None:
    """The NCCL WARN at the start and the traceback at the end survive 200k lines between."""
    events = headless_events("h100-nccl-socket-ifname-missing-headless.log")
    warn = next(i for i, e in enumerate(events) if "no socket interface found" in
                getattr(e, "text", ""))
    noise = [*flood("gpu0", 0, 100_000, T0 + 0.01),
             *flood("gpu0", 0, 50_000, T0 + 0.02, Level.INFO, Source.NCCL),
             *flood("gpu0", 0, 50_000, T0 + 0.03, Level.DEBUG),
             *flood("gpu0", 1, 50_000, T0 + 0.04, Level.WARNING)]
    e = kept([*events[:warn + 1], *noise, *events[warn + 1:]], batch=500)
    # per rank: four streams (own and NCCL lines, plain and loud); per node: the agent's
    limit = 2 * 4 * (ev_mod.RANK_HEAD + ev_mod.RANK_TAIL) + 4 * (ev_mod.NODE_HEAD
                                                                + ev_mod.NODE_TAIL)
    assert len(e) <= limit + 50
    assert not any(x.level is Level.DEBUG and x.rank is not None
                   for x in e.events() if isinstance(x, LogLine))
    d = diagnose(e.events())
    assert d is not None and d.cause is Cause.NCCL_NO_INTERFACE and d.rank == 0


def test_the_error_outlives_prints_after_it() -> None:
    """A rank whose other threads print on after its exception: the ERROR line is kept."""
    events = node_log("a", "gloo-value-error.log")
    end = len(events) - 1  # before the final NodeState
    cut = next(i for i, x in enumerate(events) if isinstance(x, LogLine)
               and "ValueError: batch 3" in x.text) + 1
    more = flood("a", 1, 20_000, T0 + 0.5)
    d = diagnose(kept([*events[:cut], *more, *events[cut:end], events[end]]).events())
    assert d is not None and d.cause is Cause.RANK_ERROR and d.rank == 1
    assert "ValueError: batch 3 has 0 samples" in d.headline


def test_the_last_metric_with_a_step_is_kept_per_rank() -> None:
    e = Evidence()
    e.add([Metric("a", 0, "metric", i, {"loss": 1.0}, T0 + i) for i in range(1000)])
    e.add([Metric("a", 0, "summary", None, {"loss": 1.0}, T0 + 2000),
           Metric("a", 1, "metric", 3, {"loss": 1.0}, T0 + 3)])
    metrics = [x for x in e.events() if isinstance(x, Metric)]
    assert [(m.rank, m.step) for m in metrics] == [(0, 999), (1, 3)]


def test_every_node_state_is_kept() -> None:
    states = [NodeState("a", NodeStatus.RESTARTING, T0 + i, attempt=i) for i in range(500)]
    e = kept([*states, *flood("a", 0, 5_000, T0)])
    assert [x for x in e.events() if isinstance(x, NodeState)] == states


def test_a_broken_rule_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object, **__: object) -> None:
        raise KeyError("x")

    monkeypatch.setattr(ev_mod, "diagnose", broken)
    assert Evidence().diagnose(["a"], 2, 1) == (None, "KeyError: 'x'")


def local_config(tmp: Path) -> Session:
    import sys

    hosts = {"defaults": {"python": sys.executable, "nproc_per_node": 2, "transport": "local"},
             "nodes": [{"name": "a", "workdir": str(tmp / "wa")},
                       {"name": "b", "workdir": str(tmp / "wb")}],
             "rendezvous": {"endpoint": "127.0.0.1", "port": 29799},
             "job": {"script": "job.py"}}
    return Session(load_config(write_job(tmp, hosts)), state_root=tmp / "state")


def running(ctl: Session) -> Session:
    """A session as its launch leaves it, with no node reached: running."""
    ctl.advance(RunEvent.LAUNCH)
    ctl.advance(RunEvent.RELEASE)
    return ctl


def test_the_run_ends_with_its_diagnosis_on_the_result_and_in_run_json(tmp_path: Path) -> None:
    ctl = running(local_config(tmp_path))
    a = node_log("a", "gloo-value-error.log")
    b = node_log("b", "train-node1.log", t0=T0 + 1)
    ctl.bus.apply([Batch("a", a, {}), Batch("b", b, {}),
              Finished("a", NodeStatus.FAILED, 1), Finished("b", NodeStatus.FAILED, 1)])
    ctl.conclude()
    res = ctl.result
    assert res is not None and res.exit_code == 1 and res.diagnosis is not None
    assert res.diagnosis.cause is Cause.RANK_ERROR and res.diagnosis.node == "a"
    meta = json.loads((ctl.local_dir / "run.json").read_text())
    assert meta["diagnosis"] == res.diagnosis.to_dict()
    assert meta["status"] == "failed"
    back = pickle.loads(pickle.dumps(res))  # RunResult crosses the engine's wire by pickle
    assert back.diagnosis is not None and back.diagnosis.to_dict() == res.diagnosis.to_dict()


def test_wait_gives_the_result_only_once_run_json_holds_the_status(tmp_path: Path) -> None:
    """A face that exits on ``wait``'s result must find the run's end in ``run.json``: in CI
    the headless face once returned between ``result`` and the status, leaving ``running``."""
    ctl = running(local_config(tmp_path))
    seen: list[object] = []
    update = ctl.recorder.update

    def watched(**kw: object) -> None:
        if "status" in kw:
            seen.append(ctl.wait(0))  # the result exists by now; the status is not yet written
        update(**kw)

    ctl.recorder.update = watched  # type: ignore[method-assign]
    ctl.bus.apply([Finished("a", NodeStatus.FAILED, 1), Finished("b", NodeStatus.EXITED, 0)])
    ctl.conclude()
    assert ctl.result is not None and seen == [None]
    assert ctl.wait(0) is ctl.result
    assert json.loads((ctl.local_dir / "run.json").read_text())["status"] == "failed"


def test_a_run_that_succeeds_has_no_diagnosis(tmp_path: Path) -> None:
    ctl = running(local_config(tmp_path))
    a = [*node_events("a", ["[ddptui 0 0] hello"]),
         NodeState("a", NodeStatus.EXITED, T0, exit_code=0)]
    ctl.bus.apply([Batch("a", a, {}), Finished("a", NodeStatus.EXITED, 0),
              Finished("b", NodeStatus.EXITED, 0)])
    ctl.conclude()
    assert ctl.result == RunResult(0, [], {"a": 0, "b": 0}, False, None)
    assert json.loads((ctl.local_dir / "run.json").read_text())["diagnosis"] is None


def test_an_attached_run_seeds_the_copy_from_its_rebuilt_store() -> None:
    from replay import DATA, replay

    from ddptui.store.store import Store

    store = Store()
    replay(store, {"a": DATA / "diagnose" / "gloo-value-error.log"})
    e = Evidence()
    e.add([NodeState("a", NodeStatus.RUNNING, T0)])
    e.seed(store)
    e.add([NodeState("a", NodeStatus.FAILED, T0 + 1000, exit_code=1)])
    d, why_not = e.diagnose(["a"], 2, 1)
    assert why_not is None and d is not None
    assert (d.cause, d.node, d.rank) == (Cause.RANK_ERROR, "a", 1)
