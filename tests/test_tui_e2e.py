"""End to end: the real dashboard drives the real controller on hosts.example.yaml.

Launch with the key, wait (bounded) until every rank's loss is plotted, stop with the key
and its confirmation, then look for any process of the run left on this machine: each one
carries ``DDPTUI_RUN=<run id>/`` in its environment. The controller runs in the dashboard's
engine process, so this also covers the replica store that the dashboard reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest
from test_tui_app import DashboardUnderTest as DashboardApp  # the screen's parts at hand

from ddptui.config import load_config
from ddptui.tui.screens.confirm import ConfirmScreen

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--steps", "100000", "--d-model", "32", "--n-layers", "1", "--seq-len", "32",
        "--log-every", "1", "--eval-every", "20", "--snapshot-every", "0",
        "--step-sleep-ms", "50"]

pytestmark = [pytest.mark.torchrun, pytest.mark.timeout(300)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tiny_hosts(tmp: Path) -> Path:
    """hosts.example.yaml with a tiny never-ending job, private workdirs and a free port."""
    text = (ROOT / "hosts.example.yaml").read_text()
    text = text.replace("~/.ddptui-demo", str(tmp / "work"))
    text = re.sub(r"(?m)^(\s*)args: \[[^\]]*\].*$", lambda m: f"{m.group(1)}args: {TINY!r}"
                  .replace("'", '"'), text)
    text = re.sub(r"(?m)^(\s*)port: 29400", lambda m: f"{m.group(1)}port: {free_port()}",
                  text)
    text = re.sub(r"(?m)^(\s*)stop_grace: \d+", lambda m: f"{m.group(1)}stop_grace: 5", text)
    path = tmp / "hosts.yaml"
    path.write_text(text)
    return path


def run_processes(run_id: str) -> list[int]:
    marker = f"DDPTUI_RUN={run_id}/".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes()
        except OSError:
            continue
        if marker in env:
            found.append(int(d.name))
    return found


def test_launch_plot_stop_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = load_config(tiny_hosts(tmp_path))
    app = DashboardApp(config, state_root=tmp_path / "state" / "ddptui")
    asyncio.run(_drive(app))


async def _drive(app: DashboardApp) -> None:
    run_id = ""
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.press("l")
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                await pilot.pause(0.25)
                if app.session is not None:
                    run_id = app.session.run_id
                plotted = app.chart.plotted
                if len(plotted) == 4 and all(n >= 2 for n in plotted.values()):
                    break
                assert not (app.session and app.session.done), "the run ended early"
            else:
                raise AssertionError(f"no loss for every rank in time: {app.chart.plotted}; "
                                     f"{[str(n.message) for n in app._notifications]}")
            assert run_id and run_processes(run_id), "the run should have processes now"
            assert app.nodes_table.row("n:local-a").cells[3] == "running"

            await pilot.press("x")
            await pilot.pause(0.2)
            assert isinstance(app.screen, ConfirmScreen)
            assert re.search(r"ends \d+ processes on 2 nodes", app.screen.question)
            await pilot.press("y")
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                await pilot.pause(0.25)
                if app.session is not None and app.session.done and not app.busy:
                    break
            else:
                raise AssertionError("stop did not finish in time")
            assert any("no process of it is left" in str(n.message)
                       for n in app._notifications)
            left = run_processes(run_id)
            assert left == [], f"processes of {run_id} still alive: {left}"
            engine = app.session.engine.process
            assert engine.poll() is None, "the engine ended before the dashboard"
        # Quitting the dashboard ends its engine process too (closed on unmount, not left).
        assert engine.poll() is not None, "the engine process outlived the dashboard"
    finally:
        if run_id and app.session is not None and not app.session.done:
            app.session.stop(grace=1)
        for pid in run_processes(run_id) if run_id else []:  # ours, by marker
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
