"""The sampler as it runs on a node, here through the local transport: real sh, real /proc,
the stand-in nvidia-smi. It must report, rotate its files, and leave no process behind, by
itself too when ddptui goes away."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ddptui.live import samplers
from ddptui.live.samplers import FILES, NodeSampler
from ddptui.telemetry import sampler
from ddptui.telemetry.sample import NodeSample
from ddptui.transport.local import LocalTransport

STANDIN = Path(__file__).parent / "data" / "telemetry"
PATH = f"{STANDIN}:{Path(sys.executable).parent}:/usr/bin:/bin"


def samplers_in(node_dir: Path) -> list[int]:
    """Processes running the sampler script in ``node_dir`` (its children share its cwd)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{d}/cwd")
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        if cwd == str(node_dir) and stat[stat.rfind(")") + 2] != "Z":
            found.append(int(d))
    return found


def wait_for(cond: object, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


class Run:
    """A stand-in for the run's process group: a sleeping process in its own session."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(["sleep", "120"], start_new_session=True)

    def end(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def start(tmp: Path, run: Run, **kw: object) -> tuple[NodeSampler, list[NodeSample], list[str]]:
    got: list[NodeSample] = []
    notes: list[str] = []
    lock = threading.Lock()

    def publish(samples: list[NodeSample]) -> None:
        with lock:
            got.extend(samples)

    t = LocalTransport(SimpleNamespace(name="n1"))  # type: ignore[arg-type]
    s = NodeSampler(node="n1", transport=lambda: t, node_dir=str(tmp), run_id="r1",
                    pgid=run.proc.pid, path=PATH, publish=publish,
                    note=lambda text, level: notes.append(text), poll=0.2, **kw)  # type: ignore[arg-type]
    s.start()
    return s, got, notes


def test_samples_arrive_across_segments_and_end_leaves_nothing(tmp_path: Path) -> None:
    run = Run()
    try:
        # a segment of about three seconds (/proc/net/dev's lines depend on the machine)
        s, got, notes = start(tmp_path, run, segment_lines=200)
        wait_for(lambda: s._segment >= 2 and len(got) >= 5, 40, "two segments read")
        times = [x.time for x in got]
        assert times == sorted(times) and len(set(times)) == len(times)
        assert all(0.5 < b - a < 2.5 for a, b in itertools.pairwise(times))
        assert got[-1].gpus and got[-1].gpus[0].name == "NVIDIA H100 80GB HBM3"
        assert got[-1].cpu is not None and got[-1].mem_total
        assert samplers_in(tmp_path)
        s.end()
        assert not s.is_alive() and samplers_in(tmp_path) == [] and notes == []
    finally:
        run.end()


def test_it_ends_by_itself_with_the_run(tmp_path: Path) -> None:
    run = Run()
    s, got, _ = start(tmp_path, run)
    try:
        wait_for(lambda: len(got) >= 2, 20, "two samples")
    finally:
        run.end()
    s.join(10)
    assert not s.is_alive() and s.parser.ended == ""
    wait_for(lambda: not samplers_in(tmp_path), 5, "the sampler's processes to end")
    assert "the run's processes are gone" in (tmp_path / FILES.out.format(0)).read_text()


def test_without_a_heartbeat_it_ends_by_itself(tmp_path: Path) -> None:
    """A closed laptop: nobody touches the heartbeat file, and nothing stays behind."""
    run = Run()
    try:
        (tmp_path / FILES.script).write_text(sampler.script(FILES))
        (tmp_path / FILES.beat).write_text("1\n")
        res = subprocess.run(["sh", "-c", sampler.start_cmd(str(tmp_path), FILES, run.proc.pid,
                                                            "r1", path=PATH, beat_timeout=2)],
                             capture_output=True, text=True, timeout=30)
        assert res.stdout.strip() == "started"
        wait_for(lambda: samplers_in(tmp_path), 10, "the sampler")
        wait_for(lambda: not samplers_in(tmp_path), 15, "the sampler to end by itself")
        out = (tmp_path / FILES.out.format(0)).read_text()
        assert "@bye no heartbeat from ddptui for 2s" in out and "\nG 0, GPU-" in out
        assert not (tmp_path / FILES.pid).exists()
    finally:
        run.end()


def test_a_lost_heartbeat_while_ddptui_is_here_starts_it_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(samplers, "RESTART_AFTER_S", 0.0)
    run = Run()
    try:
        s, got, notes = start(tmp_path, run, beat_timeout=2)
        s._next_beat = float("inf")  # as if ddptui had been suspended
        wait_for(lambda: notes, 30, "the restart note")
        assert "starting it again" in notes[0]
        s._next_beat = 0.0
        n = len(got)
        wait_for(lambda: len(got) > n, 30, "samples from the new sampler")
        s.end()
        assert samplers_in(tmp_path) == []
    finally:
        run.end()


def test_a_stop_right_after_a_start_ends_the_sampler_and_waits_for_it(tmp_path: Path) -> None:
    """"started" means its pid is known, and "stopped" that none of its processes is left:
    a run that ends the moment its sampler started leaves nothing behind."""
    run = Run()
    try:
        (tmp_path / FILES.script).write_text(sampler.script(FILES))
        for _ in range(10):
            for cmd, said in ((sampler.start_cmd(str(tmp_path), FILES, run.proc.pid, "r1",
                                                 path=PATH), "started"),
                              (sampler.stop_cmd(str(tmp_path), FILES), "stopped")):
                res = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True,
                                     timeout=30)
                assert res.stdout.strip() == said, res
            assert samplers_in(tmp_path) == []
            assert not (tmp_path / FILES.pid).exists()
    finally:
        run.end()


def test_commands_quote_every_value() -> None:
    cmd = sampler.start_cmd("/w/it's here", FILES, None, "r-1", path="/a b:$(id)")
    assert "'/w/it'\"'\"'s here'" in cmd and "'/a b:$(id)'" in cmd and " 0 60 " in cmd


def test_a_node_that_cannot_start_it_says_so_once_and_is_left_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(samplers, "START_TRIES", 2)
    notes: list[str] = []
    s = NodeSampler(node="n1", transport=lambda: None, node_dir=str(tmp_path), run_id="r1",
                    pgid=None, path=None, publish=lambda samples: None,
                    note=lambda text, level: notes.append(text), poll=0.1)
    s.start()
    s.join(10)
    assert not s.is_alive()
    assert notes == ["telemetry: node n1: not connected; no telemetry from this node"]
