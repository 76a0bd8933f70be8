"""The dashboard's NCCL view: ``i`` and the palette open it, it shows ddptui's warnings over
the node x fact table and a rank's detail, and ``l`` goes to the raw NCCL lines. The run is
played from the real H100 captures (tests/data/nccl/README.md) by a stand-in handle."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeController, NcclRun
from replay import T0, scenario
from test_tui_app import make_app, settle, sync
from textual.command import CommandPalette
from textual.widgets import DataTable, OptionList, Static

from ddptui.engine.client import EngineProcess
from ddptui.nccl import NcclFacts, nccl_warnings
from ddptui.tui.app import DashboardApp
from ddptui.tui.screens.nccl import NcclScreen
from ddptui.tui.views import ViewKind

pytestmark = pytest.mark.timeout(60)


def nccl_app(**kw: Any) -> Any:
    return make_app(session_factory=lambda config, root: NcclRun(**kw))


async def opened(pilot: Any, app: DashboardApp, *keys: str) -> NcclScreen:
    await pilot.press("l")
    await settle(pilot, app)
    await pilot.press(*keys)
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()
    assert isinstance(app.screen, NcclScreen)
    return app.screen


def text_of(screen: NcclScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


def table_of(screen: NcclScreen) -> dict[str, list[str]]:
    table = screen.query_one("#nccl-table", DataTable)
    rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
    return {"": [str(c.label) for c in table.columns.values()],
            **{row[0]: row[1:] for row in rows}}


@sync
async def test_i_opens_the_view_warnings_over_the_table_and_a_ranks_detail() -> None:
    app = nccl_app()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await opened(pilot, app, "i")
        assert FakeController.instances[-1].asked == 0  # the store's facts: no call
        title = text_of(screen, "#nccl-title")
        assert "nccl-run · 2 node(s), 2 process(es) with NCCL lines · 2 warning(s)" in title
        warnings = text_of(screen, "#nccl-warning-text").splitlines()
        assert warnings[0].startswith("✖ node gpu0: NCCL uses bootstrap lo:127.0.0.1 "
                                      "(loopback), socket lo:127.0.0.1 (loopback)")
        assert "NCCL said:" in warnings[1] and "Bootstrap: Using lo:127.0.0.1<0>" in warnings[1]
        assert any(w.startswith("▲ node gpu1: NCCL could not read the link speed")
                   for w in warnings)
        table = table_of(screen)
        assert table[""] == ["fact", "gpu0", "gpu1"]
        assert table["NCCL"] == ["2.28.9", "2.28.9"]
        assert table["network"] == ["Socket", "Socket"]
        assert table["why not IB"] == ["NET/IB : No device found."] * 2
        assert table["bootstrap"] == ["lo:127.0.0.1", "eth0:192.0.2.2"]
        ranks = screen.query_one("#nccl-rank-list", OptionList)
        assert [str(ranks.get_option_at_index(i).prompt) for i in range(ranks.option_count)
                ] == ["rank 0 (gpu0)", "rank 1 (gpu1)"]
        assert "lo:127.0.0.1" in text_of(screen, "#nccl-rank-text")
        await pilot.press("down")
        await pilot.pause()
        detail = text_of(screen, "#nccl-rank-text")
        assert "gpu1" in detail and "init 0.60 s" in detail and "eth0:192.0.2.2" in detail
        await pilot.press("x")  # the run keys sleep while the view is up
        await pilot.pause()
        assert isinstance(app.screen, NcclScreen) and FakeController.instances[-1].stopped == 0
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, NcclScreen)


@sync
async def test_l_goes_to_the_raw_nccl_lines() -> None:
    app = nccl_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await opened(pilot, app, "i")
        await pilot.press("l")
        await settle(pilot, app)
        assert not isinstance(app.screen, NcclScreen)
        assert app.view.kind is ViewKind.NCCL
        assert any("Bootstrap: Using lo:127.0.0.1<0>" in ln for ln in app.log_view.lines)


@sync
async def test_the_palette_opens_it() -> None:
    app = nccl_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("l")
        await settle(pilot, app)
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"NCCL facts")
        await asyncio.wait_for(app.workers.wait_for_complete(), 30)  # the palette's search
        await pilot.press("enter")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, NcclScreen)


@sync
async def test_the_view_shows_the_stores_facts_and_gathers_none() -> None:
    """The handle cannot answer (its engine ended): the view shows the facts the run put in
    the store; and only those: it reads no line of the replica's rings itself."""
    app = nccl_app(gone=True)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await opened(pilot, app, "i")
        assert FakeController.instances[-1].asked == 0
        assert table_of(screen)["NCCL"] == ["2.28.9", "2.28.9"]
        assert text_of(screen, "#nccl-warning-text").startswith("✖ node gpu0: NCCL uses")
        app.store.set_run(nccl=NcclFacts())  # the gatherer's, though the rings hold NCCL lines
        await pilot.press("r")
        await pilot.pause()
        assert table_of(screen) == {"": []}
        assert "NCCL_DEBUG=INFO" in text_of(screen, "#nccl-warning-text")


@sync
async def test_a_run_without_nccl_lines_says_how_to_get_them() -> None:
    app = make_app(scenario("train"))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, app)
        await pilot.press("i")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, NcclScreen)
        assert "NCCL_DEBUG=INFO" in text_of(screen, "#nccl-warning-text")
        assert screen.query_one("#nccl-table", DataTable).row_count == 0


def fed_controller(tmp: str) -> Any:
    """Built in the engine (by name): a real controller that has consumed both nodes'
    recorded lines, as its followers would hand them over."""
    from test_nccl_cli import controller

    from ddptui.live.follow import Batch

    ctl = controller(Path(tmp))
    ctl.bus.apply([Batch(node, events, {}) for node, events in NcclRun().events.items()])
    return ctl


def test_the_engine_sends_the_controllers_facts(tmp_path: Path) -> None:
    engine = EngineProcess()
    try:
        client = engine.open(fed_controller, str(tmp_path))
        facts = client.nccl_facts()
    finally:
        engine.close(timeout=10)
    assert isinstance(facts, NcclFacts)
    assert facts.to_dict() == NcclRun().nccl_facts().to_dict()
    assert [w.rule for w in nccl_warnings(facts)] == ["bad-interface", "speed-fallback"]


def test_snapshot(snap_compare: Any) -> None:
    async def to_nccl(pilot: Any) -> None:
        await pilot.pause()
        await pilot.press("i")
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    run = NcclRun()  # its store alone: the view reads the facts the run put there
    run.launch()
    app = DashboardApp(None, store=run.store, clock=lambda: T0 + 12)
    assert snap_compare(app, terminal_size=(120, 36), run_before=to_nccl)
