"""SVG snapshots of the main views at 80x24 and 160x48, from recorded runs.

Deterministic: the store holds a replay with fixed times, the app's clock is fixed, and the
run ids are fixed. Update after a deliberate change with `pytest --snapshot-update`.
"""

from __future__ import annotations

from typing import Any

import pytest
from replay import T0, scenario

from ddptui.tui.app import DashboardApp

pytestmark = pytest.mark.timeout(120)

SIZES = [(80, 24), (160, 48)]


def app_for(name: str) -> DashboardApp:
    return DashboardApp(None, store=scenario(name), clock=lambda: T0 + 12)


async def settled(pilot: Any) -> None:
    app = pilot.app
    await pilot.pause()
    await app.workers.wait_for_complete()
    screen = app.dashboard
    screen.redraw_chart()
    screen.chart.dirty = True  # draw now, at the final size, whatever earlier ticks did
    screen.refresh_run()  # a tick that builds the table now
    await pilot.pause()
    await app.workers.wait_for_complete()  # the chart is drawn by a thread worker
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", ["train", "failed", "restart"])
def test_main_view(snap_compare: Any, name: str, size: tuple[int, int]) -> None:
    assert snap_compare(app_for(name), terminal_size=size, run_before=settled)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_problems_view(snap_compare: Any, size: tuple[int, int]) -> None:
    async def to_problems(pilot: Any) -> None:
        await pilot.press("v", "v", "v", "v")
        await settled(pilot)

    assert snap_compare(app_for("nccl"), terminal_size=size, run_before=to_problems)


def test_nccl_view_filtered(snap_compare: Any) -> None:
    async def filtered(pilot: Any) -> None:
        await pilot.press("v", "v", "v")
        pilot.app.dashboard.log_pane.set_filter("init")
        await settled(pilot)

    assert snap_compare(app_for("nccl"), terminal_size=(80, 24), run_before=filtered)


def test_charts_only_narrow(snap_compare: Any) -> None:
    async def charts(pilot: Any) -> None:
        await pilot.press("m")
        await settled(pilot)

    assert snap_compare(app_for("train"), terminal_size=(80, 24), run_before=charts)


def test_help_screen(snap_compare: Any) -> None:
    async def helped(pilot: Any) -> None:
        await settled(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(app_for("train"), terminal_size=(80, 24), run_before=helped)
