"""NCCL facts wired in: the controller keeps them in ``run.json``, an attach reads them back,
and ``ddptui nccl RUN_ID`` prints them, from run directories built of the real H100 captures
(tests/data/nccl/README.md) and from a live local run whose script prints recorded NCCL
lines (NCCL cannot run here; the lines are real, only their source is a stand-in)."""

from __future__ import annotations

import io
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from jobs import ddptui, spawn_ddptui, write_job
from replay import node_events

from ddptui.cli import main
from ddptui.config import load_config
from ddptui.events import NodeStatus
from ddptui.faces.nccl import show_nccl
from ddptui.live.follow import Batch, Finished
from ddptui.live.nccl_watch import facts_from_raw
from ddptui.live.session import Session
from ddptui.run_state import NodeRecord, RunEvent
from ddptui.store import rundir

DATA = Path(__file__).parent / "data" / "nccl"
LO = DATA / "h100-nccl-socket-ifname-lo-headless.log"
SUBSYS = DATA / "h100-nccl-subsys-all-init.log"
WORKER = DATA / "h100-worker-torchrun-nccl-info.log"
_HEADLESS_RE = re.compile(r"^\[(\S+) (?:r(\d+)(?: nccl)?|(agent))\] ")


def raw_from_headless(path: Path) -> list[str]:
    """ddptui's headless output back into the node.log torchrun wrote: a rank's lines with
    torchrun's ``[ddptui R L]`` prefix, the agent's bare; ddptui's own lines dropped."""
    out = []
    for line in path.read_text().splitlines():
        m = _HEADLESS_RE.match(line)
        if m is None:
            continue
        text = line[m.end():]
        out.append(text if m.group(3) else f"[ddptui {m.group(2)} 0] {text}")
    return out


def as_rank(path: Path, rank: int, drop: str = "") -> list[str]:
    """A plain torchrun capture as rank ``rank``'s output in a node.log."""
    return [f"[ddptui {rank} 0] {ln}" for ln in path.read_text().splitlines()
            if not (drop and drop in ln)]


def past_run(root: Path, run_id: str, logs: dict[str, list[str]], status: str = "failed",
             **meta: object) -> Path:
    d = rundir.run_dir(root, run_id)
    (d / rundir.NODES).mkdir(parents=True)
    for node, lines in logs.items():
        rundir.node_log(d, node).write_text("\n".join(lines) + "\n")
    (d / rundir.RUN_JSON).write_text(json.dumps(
        {"run_id": run_id, "status": status, "nodes": [{"name": n} for n in logs], **meta}))
    return d


@pytest.fixture
def two_nodes(tmp_path: Path) -> Path:
    """gpu0 bootstraps on loopback (NCCL_SOCKET_IFNAME=lo); gpu1 guesses its NIC's speed."""
    root = tmp_path / "state"
    past_run(root, "r1", {"gpu0": raw_from_headless(LO), "gpu1": as_rank(SUBSYS, 1)})
    return root


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    got = capsys.readouterr()
    return code, got.out, got.err


def test_a_past_run_prints_the_warnings_then_the_table(two_nodes: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    code, out, err = run_cli(capsys, "--state-dir", str(two_nodes), "nccl", "r1")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "ddptui: NCCL in run r1, failed"
    assert lines[1] == "NCCL: 2 thing(s) to look at:"
    assert lines[2].startswith("  ERROR node gpu0: NCCL uses bootstrap lo:127.0.0.1 "
                               "(loopback)")
    assert lines[3].startswith("        NCCL said: ") and "Bootstrap: Using lo:127.0.0.1" \
        in lines[3]
    assert lines[4].startswith("  WARN  node gpu1: NCCL could not read the link speed and "
                               "assumes eth0 as 10 Gbps")
    table = out[out.index("\n\n") + 2:].splitlines()
    assert table[0].split() == ["gpu0", "gpu1"]
    row = {ln.split("  ")[0]: ln for ln in table[2:]}
    assert row["NCCL"].split()[1:] == ["2.28.9", "2.28.9"]
    assert "Socket" in row["network"] and "lo:127.0.0.1" in row["bootstrap"]
    assert "eth0:192.0.2.2" in row["bootstrap"]
    assert re.search(r"init time\s+\S+ s\s+0\.60 s", row["init time"])


def test_one_ranks_detail_and_an_unknown_rank(two_nodes: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--state-dir", str(two_nodes), "nccl", "r1", "--rank", "1")
    assert code == 0
    fields = dict(re.split(r"\s{2,}", ln, maxsplit=1) for ln in out.splitlines())
    assert fields["node"] == "gpu1" and fields["process"] == "rank 1 on host vm, pid 451"
    assert fields["NCCL"] == "2.28.9 (built for CUDA 13.0)"
    assert fields["why not IB"] == "NET/IB : No device found."
    comm = next(v for k, v in fields.items() if k.startswith("comm 0x"))
    assert "rank 0 of 1, 1 node(s), 1 local" in comm and "init 0.60 s" in comm
    code, out, err = run_cli(capsys, "--state-dir", str(two_nodes), "nccl", "r1", "--rank", "7")
    assert code == 2 and out == ""
    assert err == ("ddptui: run r1 has no NCCL lines from rank 7 (ranks with NCCL lines: 0, "
                   "1); NCCL prints them with NCCL_DEBUG=INFO\n")


def test_json_holds_the_warnings_and_every_fact(two_nodes: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--state-dir", str(two_nodes), "nccl", "r1", "--json")
    assert code == 0
    got = json.loads(out)
    assert [(w["rule"], w["nodes"]) for w in got["warnings"]] == [
        ("bad-interface", ["gpu0"]), ("speed-fallback", ["gpu1"])]
    assert sorted(got["facts"]["nodes"]) == ["gpu0", "gpu1"]
    assert got["facts"]["nodes"]["gpu1"]["ranks"]["1"]["speed_fallbacks"] == {"eth0": "10 Gbps"}


def test_an_unknown_run_is_exit_2_and_one_clear_line(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "--state-dir", str(tmp_path), "nccl", "nope")
    assert code == 2 and out == ""
    assert err.startswith("ddptui: no run 'nope' under ") and "Traceback" not in err


def test_a_run_without_nccl_lines_says_how_to_get_them(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    past_run(tmp_path, "quiet", {"a": ["[ddptui 0 0] step 1 loss 2.0"]}, status="finished")
    code, out, _ = run_cli(capsys, "--state-dir", str(tmp_path), "nccl", "quiet")
    assert code == 0
    assert out == ("ddptui: NCCL in run quiet, finished\n"
                   "no NCCL lines (run with NCCL_DEBUG=INFO to see what NCCL chose)\n")


def test_a_raw_log_read_in_pieces_gives_the_same_facts(two_nodes: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:

    d = rundir.run_dir(two_nodes, "r1")
    facts = facts_from_raw(d, ["gpu0", "gpu1"])
    whole = facts.to_dict()
    from ddptui.live import nccl_watch
    monkeypatch.setattr(nccl_watch, "CHUNK", 97)  # cuts nearly every line somewhere
    assert facts_from_raw(d, ["gpu0", "gpu1"]).to_dict() == whole
    assert facts.nodes["gpu1"].ranks["1"].lines > 400


# -- the controller: live facts into run.json, and back on attach ---------------------------


def controller(tmp: Path) -> Session:
    hosts = {"defaults": {"python": sys.executable, "nproc_per_node": 1, "transport": "local"},
             "nodes": [{"name": "gpu0", "workdir": str(tmp / "w0")},
                       {"name": "gpu1", "workdir": str(tmp / "w1")}],
             "rendezvous": {"endpoint": "127.0.0.1", "port": 29798},
             "job": {"script": "job.py"}}
    return Session(load_config(write_job(tmp, hosts)), state_root=tmp / "state")


def test_the_run_keeps_its_facts_in_run_json_and_an_attach_reads_them_back(tmp_path: Path
                                                                           ) -> None:
    """Without NCCL's own ``Init timings`` line, init time is the gap between the Init START
    and COMPLETE lines' arrival: only ``run.json`` knows it once the run is over."""
    ctl = controller(tmp_path)
    ctl.recorder.set_nodes([NodeRecord(n, i, str(tmp_path / n))
                            for i, n in enumerate(("gpu0", "gpu1"))])
    ctl.advance(RunEvent.LAUNCH)
    ctl.advance(RunEvent.RELEASE)
    logs = {"gpu0": raw_from_headless(LO), "gpu1": as_rank(WORKER, 1, drop="Init timings")}
    events = {n: node_events(n, lines, dt=0.5) for n, lines in logs.items()}
    cut = {n: 1 + next(i for i, e in enumerate(ev) if "NCCL version" in getattr(e, "text", ""))
           for n, ev in events.items()}
    ctl.bus.apply([Batch(n, ev[:cut[n]], {}) for n, ev in events.items()])
    saved = json.loads((ctl.local_dir / "run.json").read_text())
    assert saved["nccl"]["nodes"]["gpu0"]["nccl_versions"] == ["2.28.9"]  # saved while live
    ctl.bus.apply([Batch(n, ev[cut[n]:], {}) for n, ev in events.items()])
    assert ctl.nccl_facts().nodes["gpu1"].ranks["1"].network == "Socket"
    ctl.bus.apply([Finished("gpu0", NodeStatus.EXITED, 0), Finished("gpu1", NodeStatus.EXITED, 0)])
    ctl.conclude()
    shipped = ctl.store.run_info().nccl  # what every face reads: the gatherer's, in the store
    assert shipped is not None and shipped.to_dict() == ctl.nccl_facts().to_dict()
    meta = json.loads((ctl.local_dir / "run.json").read_text())
    (comm,) = meta["nccl"]["nodes"]["gpu1"]["ranks"]["1"]["comms"].values()
    assert comm["init_seconds"] == pytest.approx(39.0)  # 78 lines between, 0.5 s apart
    assert [w["rule"] for w in meta["nccl_warnings"]] == ["bad-interface"]
    assert meta["nccl_warnings"][0]["nodes"] == ["gpu0"]

    for node, lines in logs.items():  # what the followers wrote as the run went
        rundir.node_log(ctl.local_dir, node).write_text("\n".join(lines) + "\n")
    bare = facts_from_raw(ctl.local_dir, ["gpu0", "gpu1"])
    assert next(iter(bare.nodes["gpu1"].ranks["1"].comms.values())).init_seconds is None
    again = Session.attach(ctl.run_id, state_root=tmp_path / "state", follow=False)
    try:
        back = again.nccl_facts()
        shipped = again.store.run_info().nccl
        assert shipped is not None and shipped.to_dict() == back.to_dict()
    finally:
        again.detach()
    assert back.to_dict() == ctl.nccl_facts().to_dict()
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        assert show_nccl(tmp_path / "state", ctl.run_id, out=f) == 0
    assert re.search(r"^init time +0\.\d\d s +39\.00 s$", out.read_text(), re.M)


# -- a live local run ----------------------------------------------------------------------

#: A user script standing in for libnccl: each rank prints its node's recorded capture to
#: stderr (node a's was recorded with NCCL_SOCKET_IFNAME=lo), then waits for the test's gate
#: file (two minutes at most) so the test can look at the run while it is live.
NCCL_JOB = r'''
import os, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
for line in open(os.environ["NCCL_CAPTURE"]).read().splitlines():
    print(line, file=sys.stderr, flush=True)
end = time.monotonic() + 120
while not os.path.exists(os.environ["GATE"]) and time.monotonic() < end:
    time.sleep(0.1)
print(f"rank {r} done", flush=True)
dist.barrier()
dist.destroy_process_group()
'''


def poll(what: str, check: Callable[[], str | None], timeout: float) -> str:
    """``check()`` until it gives a value (at most ``timeout`` seconds)."""
    end = time.monotonic() + timeout
    while True:
        got = check()
        if got is not None:
            return got
        assert time.monotonic() < end, f"no {what} after {timeout} s"
        time.sleep(0.3)


@pytest.mark.torchrun
def test_a_live_run_shows_its_nccl_facts_while_it_runs_and_keeps_them(tmp_path: Path) -> None:
    lo = tmp_path / "lo.log"
    lo.write_text("\n".join(ln.split("] ", 1)[1] for ln in raw_from_headless(LO)
                            if ln.startswith("[ddptui ")) + "\n")
    gate = tmp_path / "gate"
    hosts = {"defaults": {"python": sys.executable, "nproc_per_node": 1, "transport": "local",
                          "env": {"GATE": str(gate)}},
             "nodes": [{"name": "a", "workdir": str(tmp_path / "wa"),
                        "env": {"NCCL_CAPTURE": str(lo)}},
                       {"name": "b", "workdir": str(tmp_path / "wb"),
                        "env": {"NCCL_CAPTURE": str(SUBSYS)}}],
             "rendezvous": {"endpoint": "127.0.0.1", "port": 29731},
             "job": {"script": "job.py"}}
    project = tmp_path / "project"  # what is sent to the nodes: the test's files stay out
    project.mkdir()
    path = write_job(project, hosts)
    (project / "job.py").write_text(NCCL_JOB)
    state = tmp_path / "state"
    run_json = state / "runs" / "nccl-live" / "run.json"
    proc = spawn_ddptui("run", str(path), "--headless", "--no-preflight", "--run-id",
                        "nccl-live", state=state, out=tmp_path / "run.out")
    try:
        def live_answer() -> str | None:
            out = io.StringIO()
            code = show_nccl(state, "nccl-live", out=out) if run_json.exists() else None
            return out.getvalue() if code == 0 and "2 thing(s)" in out.getvalue() else None

        shown = poll("live NCCL warnings", live_answer, 120)
        assert shown.startswith("ddptui: NCCL in run nccl-live, running (still running: what "
                                "NCCL said so far)\n")
        assert "ERROR node a: NCCL uses bootstrap lo:127.0.0.1 (loopback)" in shown

        def saved() -> str | None:  # kept in run.json while the run goes on
            meta = json.loads(run_json.read_text())
            return "yes" if len(meta.get("nccl_warnings", [])) == 2 else None

        poll("NCCL facts in run.json while live", saved, 30)
        assert json.loads(run_json.read_text())["status"] == "running"
        gate.write_text("go")
        assert proc.wait(120) == 0, (tmp_path / "run.out").read_text()[-3000:]
    finally:
        gate.write_text("go")
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    meta = json.loads(run_json.read_text())
    assert meta["status"] == "finished"
    said = (tmp_path / "run.out").read_text()  # the headless summary names them too
    assert "ddptui: NCCL: node a: NCCL uses bootstrap lo:127.0.0.1 (loopback)" in said, said
    assert "`ddptui nccl nccl-live` shows what NCCL chose on each node" in said
    nodes = meta["nccl"]["nodes"]
    assert nodes["a"]["interfaces"][0] == {"name": "lo", "address": "127.0.0.1",
                                           "role": "bootstrap"}
    (b,) = nodes["b"]["ranks"].values()  # the rendezvous gives node b rank 0 or 1
    assert b["speed_fallbacks"] == {"eth0": "10 Gbps"}
    assert [(w["rule"], w["nodes"]) for w in meta["nccl_warnings"]] == [
        ("bad-interface", ["a"]), ("speed-fallback", ["b"])]
    done = ddptui("nccl", "nccl-live", state=state, timeout=60)  # the command as installed
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("ddptui: NCCL in run nccl-live, finished\n")
