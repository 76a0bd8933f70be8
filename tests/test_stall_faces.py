"""One rank's silence, said alike by every face: the run's own watch judges it once
(``ddptui.live.stalls.HealthWatch``, as the session runs it), the headless printer says what
the watch told, and the dashboard (Pilot), on a replica of the same store, shows the same
verdict in its table and its toasts, in the same words, without judging it again."""

from __future__ import annotations

import io
import time
from typing import NoReturn

import pytest
from replay import node_events
from test_tui_app import make_app, sync, table_text, toasts, until

from ddptui.config.model import HealthConfig
from ddptui.events import NodeState, NodeStatus, RunStatus
from ddptui.faces.headless import Printer
from ddptui.live.follow import Batch
from ddptui.live.stalls import HealthWatch
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
    app = make_app(replica, clock=time.time, stall_after=STALL_AFTER)
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
