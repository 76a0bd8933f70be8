"""One rank's silence, said alike by every face: the run's own watch judges it once
(``ddptui.live.stalls.HealthWatch``, as the session runs it), the headless printer says what
the watch told, and the dashboard (Pilot), on a replica of the same store, shows the same
verdict in its table and its toasts, in the same words, without judging it again."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import NoReturn

import pytest
from fakes import ScriptedRun
from replay import node_events
from test_engine_process import engine  # noqa: F401 - fixture
from test_tui_app import make_app, sync, table_text, toasts, until

from ddptui.config.model import HealthConfig
from ddptui.engine.client import EngineProcess
from ddptui.events import NodeState, NodeStatus, RunStatus
from ddptui.faces.headless import Printer
from ddptui.live.follow import Batch
from ddptui.live.stalls import HealthWatch
from ddptui.run_port import RunPort
from ddptui.store.store import Store

pytestmark = pytest.mark.timeout(60)

STALL_AFTER = 5.0
#: How long rank 1 has been silent when the watch looks: well past ``STALL_AFTER``.
QUIET_S = 20.0
ERROR_END = ["step 3", "Traceback (most recent call last):",
             "RuntimeError: CUDA error: an illegal memory access was encountered"]


def quiet_run(now: float, last_words: list[str]) -> Store:
    """One node, two ranks: rank 0 goes on (heard from a second ago), rank 1 said
    ``last_words`` and then nothing for :data:`QUIET_S` seconds."""
    store = Store()
    store.set_run(run_id="quiet-run", status=RunStatus.RUNNING, started_at=now - 60,
                  world_size=2)
    store.add_node("local-a", 0)
    store.apply([NodeState("local-a", NodeStatus.RUNNING, now - 60, pid=4100)])
    dt = 0.1
    t1 = now - QUIET_S - dt * (len(last_words) - 1)
    store.apply(node_events("local-a", [f"[ddptui 1 1] {w}" for w in last_words], t0=t1, dt=dt))
    store.apply(node_events("local-a", [f"[ddptui 0 0] step {i}" for i in range(5)],
                            t0=now - 1.5, dt=0.2))
    return store


def headless_says(store: Store) -> list[str]:
    """What ``ddptui run --headless`` prints of the watch's look at ``store``, as ddptui's
    lines about rank 1 (the session's printer is one of the watch's listeners)."""
    out = io.StringIO()

    def no_stacks(nodes: list[str] | None) -> NoReturn:
        raise OSError("no node to take stacks on in this test")  # said as a warning

    published: list[Batch] = []
    watch = HealthWatch(HealthConfig(stall_after=STALL_AFTER), store, [Printer(out)],
                        no_stacks, published.append, "quiet-run")
    watch.tick()
    if watch.stacks_thread is not None:
        watch.stacks_thread.join(10)
    return [ln for ln in out.getvalue().splitlines() if "rank 1" in ln]


async def dashboard_shows(store: Store) -> tuple[str, str]:
    """The nodes table's mark on rank 1's row, and the toasts, of a dashboard following a
    replica of ``store`` (as one built from the engine's snapshot)."""
    replica = Store.replica(store.subscribe(lambda change: None))
    app = make_app(replica, clock=time.time)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await until(pilot, lambda: "r:1" in app.nodes_table.row_keys and bool(toasts(app)),
                    "rank 1's row and a toast")
        return table_text(app)["r:1"][3], toasts(app)


@sync
async def test_a_rank_silent_after_its_error_is_no_stall_on_any_face() -> None:
    store = quiet_run(time.time(), ERROR_END)
    said = headless_says(store)
    assert len(said) == 1, said
    head = "[local-a ddptui] ⚠ "
    assert said[0].startswith(head + "rank 1 on local-a: no line or metric for 20 s since its "
                              "last line, an error; not a stall"), said
    words = said[0].removeprefix(head)
    mark, shown = await dashboard_shows(store)
    # the table does not call it stalled, and the toast says what the headless output says
    assert mark == "silent after error", mark
    assert words in shown.splitlines(), shown
    assert "stalled" not in shown and "stalled" not in said[0]


@sync
async def test_a_rank_silent_without_an_error_is_stalled_on_every_face() -> None:
    store = quiet_run(time.time(), ["step 3"])
    said = headless_says(store)
    assert said == ["[local-a ddptui] ⚠ rank 1 on local-a stalled: no line or metric for 20 s "
                    "while the other ranks go on"], said
    mark, shown = await dashboard_shows(store)
    assert mark == "stalled"
    assert said[0].removeprefix("[local-a ddptui] ⚠ ") + ". Press k for its Python stack." \
        in shown.splitlines(), shown


class QuietRun(ScriptedRun):
    """Built in an engine process, as a session is: its store a :func:`quiet_run` whose
    rank 1 ended on an error, judged at launch by the session's own watch, with the headless
    printer writing to ``headless.out`` in ``local_dir``."""

    def __init__(self, local_dir: str) -> None:
        super().__init__(local_dir, 0, False, "")
        self.store = quiet_run(time.time(), ERROR_END)

    def launch(self) -> None:
        said = headless_says(self.store)
        (self.local_dir / "headless.out").write_text("".join(f"{ln}\n" for ln in said))


def quiet(local_dir: str) -> RunPort:
    return QuietRun(local_dir)


@sync
async def test_through_the_engine_the_dashboard_says_what_the_headless_face_said(
        engine: EngineProcess, tmp_path: Path) -> None:  # noqa: F811
    """The verdict crosses the engine's wire to the dashboard's replica as the watch made
    it: the same words as the printer's, no stall in the table."""
    client = engine.open(quiet, str(tmp_path))
    app = make_app(session_factory=lambda config, root: client)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await pilot.press("l")
        await until(pilot, lambda: "not a stall" in toasts(app), "the verdict's toast")
        said = (tmp_path / "headless.out").read_text().splitlines()
        words = [ln.removeprefix("[local-a ddptui] ⚠ ") for ln in said]
        assert len(words) == 1 and words[0] in toasts(app).splitlines(), (said, toasts(app))
        await until(pilot, lambda: "r:1" in app.nodes_table.row_keys
                    and table_text(app)["r:1"][3] != "", "rank 1's row marked")
        assert table_text(app)["r:1"][3] == "silent after error"
