"""The dashboard when the engine marks a stall: a toast in ddptui's words, and `k` for the
ranks' Python stacks (Pilot, on a recorded run; the run handle is a stand-in)."""

from __future__ import annotations

import pytest
from fakes import FakeController, StackedController
from replay import T0
from test_tui_app import DashboardUnderTest, make_app, settle, sync, toasts

from ddptui.events import Stall
from ddptui.tui.screens.stacks import StacksScreen
from ddptui.tui.views import ViewKind, ViewSpec

pytestmark = pytest.mark.timeout(60)


def stacked_app() -> DashboardUnderTest:
    StackedController.asked = []
    return make_app(session_factory=lambda config, root: StackedController())


@sync
async def test_a_stall_toasts_naming_node_and_rank() -> None:
    app = stacked_app()
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await pilot.press("l")
        await settle(pilot, app)
        run = FakeController.instances[-1]
        run.store.apply([Stall("local-b", 3, T0 + 9, True, 65.0, False)])
        await settle(pilot, app)
        said = toasts(app)
        assert ("rank 3 on local-b stalled: no line or metric for 65 s while the other ranks "
                "go on. Press k for its Python stack.") in said
        run.store.apply([Stall("local-b", 3, T0 + 20, False, 70.0, False)])
        await settle(pilot, app)
        assert "rank 3 on local-b is going again after 70 s" in toasts(app)
        assert toasts(app).count("stalled:") == 1


@sync
async def test_k_shows_the_stacks_of_the_rank_in_view() -> None:
    app = stacked_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("k")  # no run yet: said, nothing asked
        await settle(pilot, app)
        assert StackedController.asked == [] and "No run is going" in toasts(app)
        await pilot.press("l")
        await settle(pilot, app)
        app.dashboard.log_pane.set_view(ViewSpec(ViewKind.RANK, rank=3))
        await pilot.press("k")
        await settle(pilot, app)
        screen = app.screen
        assert isinstance(screen, StacksScreen) and StackedController.asked == [3]
        shown = str(screen.query_one("#stacks-text").render())
        assert "rank 3 on node2 (pid 12696):" in shown and "wait_forever (job.py:8)" in shown
        assert "rank 0 on node1" not in shown
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, StacksScreen)
