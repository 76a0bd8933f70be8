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
import yaml
from test_tui_e2e import ROOT, free_port, run_processes, tiny_hosts

from ddptui.chart.braille import HALF_TONE

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


def start_dashboard(tmp_path: Path, hosts: Path, state: Path, *flags: str) -> str:
    """The CLI's dashboard in a 120x40 tmux session, once its footer is up; the session.

    ``COLUMNS``/``LINES`` are unset: a tmux server started from within pytest keeps the
    80x24 that the test process had set in its environment, which every session inherits,
    and which the dashboard would take over the pane's real size."""
    session = f"ddptui-test-{tmp_path.name}"[:60]
    cmd = (f"unset COLUMNS LINES; cd {shlex.quote(str(ROOT))} && "
           f"XDG_STATE_HOME={shlex.quote(str(state))} "
           f"{shlex.quote(sys.executable)} -c 'import sys; from ddptui.cli import main; "
           f"sys.exit(main())' dashboard {' '.join(flags)} {shlex.quote(str(hosts))}")
    tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40", cmd)
    wait_screen(session, lambda s: "Launch" in s and "Quit" in s, "the dashboard", 30)
    return session


def wait_gone(session: str, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if subprocess.run(["tmux", "has-session", "-t", session],
                          capture_output=True).returncode != 0:
            return True
        time.sleep(0.5)
    return False


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_dashboard_in_tmux(tmp_path: Path) -> None:
    hosts = tiny_hosts(tmp_path)
    state = tmp_path / "state"
    session = start_dashboard(tmp_path, hosts, state)
    run_id = ""
    try:
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
        assert wait_gone(session, 20), "q did not end the dashboard"
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


#: A user's script, not the bundled worker: it prints what nanoGPT's train.py prints, and
#: knows nothing of ddptui.
NANOGPT = """
import math, time
print("number of parameters: 10.65M", flush=True)
for i in range(60):
    if i % 20 == 0:
        print(f"step {i}: train loss {4.2 - i / 30:.4f}, val loss {4.25 - i / 30:.4f}",
              flush=True)
    loss = 0.8 + 3.4 * math.exp(-i / 15)
    print(f"iter {i}: loss {loss:.4f}, time 12.00ms, mfu 3.00%", flush=True)
    time.sleep(0.05)
"""


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_chart_draws_a_user_scripts_own_loss_lines(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text(NANOGPT)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(yaml.safe_dump({
        "defaults": {"python": sys.executable, "nproc_per_node": 1,
                     "env": {"OMP_NUM_THREADS": "1"}},
        "nodes": [{"name": "local-a", "transport": "local",
                   "workdir": str(tmp_path / "work")}],
        "rendezvous": {"endpoint": "127.0.0.1", "port": free_port()},
        "job": {"script": "proj/train.py", "stop_grace": 5},
    }, sort_keys=False))
    state = tmp_path / "state"
    session = start_dashboard(tmp_path, hosts, state, "--no-preflight")
    run_id = ""
    try:
        tmux("send-keys", "-t", session, "l")
        # 120 columns: the log and the chart side by side; the chart's title names who read
        # the lines, and its plot is braille dots
        screen = wait_screen(session, lambda s: "loss by step (nanoGPT)" in s and len(
            re.findall("[\u2801-\u28ff]", s)) > 30, "the nanoGPT loss chart", 60)
        assert "no points yet" not in screen
        m = re.search(r"ddptui (\d{8}-\d{6}-\w+)", screen)
        run_id = m.group(1) if m else ""
        screen = wait_screen(session, lambda s: "● finished" in s, "the run's end", 60)
        title = next(line for line in screen.splitlines() if "loss by step" in line)
        assert title.split("▏")[-1].split() == ["loss", "by", "step", "(nanoGPT)", "smoothing",
                                                "0.60", "r0"]
        assert "    4.2┤" in screen, screen  # the top of the y axis: the first loss, 4.2000
        assert "no points yet" not in screen
        tmux("send-keys", "-t", session, "q")  # finished: q ends the dashboard at once
        assert wait_gone(session, 20), "q did not end the dashboard"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        for pid in run_processes(run_id) if run_id else ():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


CURVES_JOB = Path(__file__).resolve().parent / "data" / "curves_job.py"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_chart_shows_the_ranks_band_the_diverging_rank_and_a_spike(tmp_path: Path
                                                                       ) -> None:
    """A real run of 2 local nodes x 2 ranks (tests/data/curves_job.py with its faults: rank
    3 drifts away from step 40, rank 0 prints nan at 50 and spikes at 70): the chart on
    screen is the ranks' band (its half-tone cells), names rank 3 as the judge found it, and
    marks the spike under its axis."""
    (tmp_path / "proj").mkdir()
    shutil.copy(CURVES_JOB, tmp_path / "proj" / "job.py")
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(yaml.safe_dump({
        "defaults": {"python": sys.executable, "nproc_per_node": 2,
                     "env": {"OMP_NUM_THREADS": "1", "CURVES_FAULTS": "1"}},
        "nodes": [{"name": f"local-{n}", "transport": "local",
                   "workdir": str(tmp_path / f"work-{n}")} for n in "ab"],
        "rendezvous": {"endpoint": "127.0.0.1", "port": free_port()},
        "job": {"script": "proj/job.py", "stop_grace": 5},
    }, sort_keys=False))
    state = tmp_path / "state"
    session = start_dashboard(tmp_path, hosts, state, "--no-preflight")
    run_id = ""
    try:
        tmux("send-keys", "-t", session, "l")
        screen = wait_screen(session, lambda s: re.search(r"ddptui \d{8}-\d{6}-\w+", s)
                             is not None, "the run's id", 60)
        m = re.search(r"ddptui (\d{8}-\d{6}-\w+)", screen)
        run_id = m.group(1) if m else ""
        screen = wait_screen(session, lambda s: "● finished" in s, "the run's end", 120)
        # drawn after the end too: the judge settles the last steps when the run ends
        screen = wait_screen(session, lambda s: "rank 3 diverges from the other ranks since "
                             "step 40" in s and "▲" in s, "the flagged rank and the spike", 20)
        tmux("send-keys", "-t", session, "m", "m")  # 120 columns: both, logs, the chart alone
        screen = wait_screen(session, lambda s: "ranks: median, min–max band (4)" in s,
                             "the chart alone, its whole title", 20)
        lines = screen.splitlines()
        assert "rank 3 diverges from the other ranks since step 40" in screen, screen
        assert sum(line.count(HALF_TONE) for line in lines) >= 20, screen  # the band's cells
        axis = next(line for line in lines if "└" in line)
        assert "▲" in axis and "×" in axis, axis  # the spike at 70, the NaN at 50
        assert "spike r0 step 70" in screen, screen
        tmux("send-keys", "-t", session, "b")  # each rank's line: rank 3 still named
        screen = wait_screen(session, lambda s: "ranks: each" in s, "each rank's line", 20)
        assert "rank 3 diverges from the other ranks since step 40" in screen
        assert sum(line.count(HALF_TONE) for line in screen.splitlines()) < 20, screen
        tmux("send-keys", "-t", session, "q")
        assert wait_gone(session, 20), "q did not end the dashboard"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        for pid in run_processes(run_id) if run_id else ():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
