"""Once through a real terminal: the dashboard under tmux, keys sent, the screen read back.

Same path as the end-to-end test, but via the CLI in a 120x40 tmux pane, so the terminal
driver, key decoding and what is actually painted are what a user gets.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_tui_e2e import ROOT, run_processes, tiny_hosts

pytestmark = [pytest.mark.torchrun, pytest.mark.timeout(300)]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True,
                          timeout=10).stdout


def wait_screen(session: str, ok: Callable[[str], bool], what: str, limit: float) -> str:
    deadline = time.monotonic() + limit
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", "-t", session)
        if ok(screen):
            return screen
        time.sleep(0.5)
    raise AssertionError(f"waited {limit:.0f}s for {what}; the screen was:\n{screen}")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_dashboard_in_tmux(tmp_path: Path) -> None:
    hosts = tiny_hosts(tmp_path)
    state = tmp_path / "state"
    session = f"ddptui-test-{tmp_path.name}"[:60]
    cmd = (f"cd {shlex.quote(str(ROOT))} && XDG_STATE_HOME={shlex.quote(str(state))} "
           f"{shlex.quote(sys.executable)} -c 'import sys; from ddptui.cli import main; "
           f"sys.exit(main())' dashboard {shlex.quote(str(hosts))}")
    tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40", cmd)
    run_id = ""
    try:
        wait_screen(session, lambda s: "Launch" in s and "Quit" in s, "the dashboard", 30)
        tmux("send-keys", "-t", session, "l")
        # every rank's row in the table shows its loss (sparkline and last value)
        screen = wait_screen(session, lambda s: all(
            re.search(rf"rank {r} .*[▁▂▃▄▅▆▇█]+ \d+\.\d+", s) for r in range(4)),
            "a loss for all 4 ranks", 180)
        m = re.search(r"ddptui (\d{8}-\d{6}-\w+)", screen)
        assert m, screen
        run_id = m.group(1)
        assert "● running" in screen and run_processes(run_id)
        tmux("send-keys", "-t", session, "x")
        wait_screen(session, lambda s: "processes on 2 nodes" in s, "the stop question", 20)
        tmux("send-keys", "-t", session, "y")
        wait_screen(session, lambda s: "● stopped" in s, "the stopped state", 90)
        assert run_processes(run_id) == []
        tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            alive = subprocess.run(["tmux", "has-session", "-t", session],
                                   capture_output=True).returncode == 0
            if not alive:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("q did not end the dashboard")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        if run_id:
            subprocess.run([sys.executable, "-c", "import sys; from ddptui.cli import main; "
                            "sys.exit(main())", "stop", run_id, "--grace", "1"],
                           env={**os.environ, "XDG_STATE_HOME": str(state)},
                           capture_output=True, timeout=60, cwd=ROOT)
            for pid in run_processes(run_id):  # whatever the stop missed: ours, by marker
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
