"""The dashboard's run list reads the state dir and writes nothing: a stale run is shown as it
ended, but settling it in ``run.json`` is not the dashboard's job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from replay import T0, scenario
from test_tui_app import make_app, settle, sync
from textual.widgets import OptionList

from ddptui.store import rundir
from ddptui.store.reader import run_list
from ddptui.tui.screens.run_picker import RunPicker

pytestmark = pytest.mark.timeout(60)


def kept_run(root: Path, run_id: str, nodes: list[str], ends: dict[str, int] | None) -> None:
    """A run whose ``run.json`` says running, and names no controller (an older ddptui's,
    or one killed): stale. ``ends``: the exit code each node's end recorded."""
    d = rundir.run_dir(root, run_id)
    d.mkdir(parents=True)
    (d / rundir.RUN_JSON).write_text(json.dumps({
        "run_id": run_id, "status": "running", "started_at": T0,
        "nodes": [{"name": n, "node_rank": i} for i, n in enumerate(nodes)],
        "world_size": 2 * len(nodes), "config": {"path": "hosts.yaml"}}, indent=2))
    if ends is not None:
        (d / rundir.EVENTS).write_text("".join(json.dumps({
            "type": "node_state", "node": n, "time": T0 + 5, "exit_code": code,
            "status": "exited" if code == 0 else "failed"}) + "\n" for n, code in ends.items()))


def state_dir(root: Path) -> dict[Path, bytes]:
    kept_run(root, "ended", ["a", "b"], {"a": 0, "b": 3})
    kept_run(root, "no-node", [], None)
    kept_run(root, "half-ended", ["a", "b"], {"a": 0})
    return {p: p.read_bytes() for p in root.glob("runs/*/run.json")}


def test_the_list_says_how_stale_runs_ended_from_their_records(tmp_path: Path) -> None:
    before = state_dir(tmp_path)
    shown = {r.run_id: (r.shown_status, r.exit_code) for r in run_list(tmp_path)}
    assert shown == {"ended": ("failed", 3), "no-node": ("failed", None),
                     "half-ended": ("running?", None)}
    assert {p: p.read_bytes() for p in before} == before


@sync
async def test_opening_the_run_list_leaves_every_run_json_as_it_was(tmp_path: Path) -> None:
    before = state_dir(tmp_path)
    app = make_app(scenario("train"), state_root=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        await pilot.press("a")  # the run list
        await settle(pilot, app)
        assert isinstance(app.screen, RunPicker)
        options = app.screen.query_one(OptionList)
        labels = [str(options.get_option_at_index(i).prompt)
                  for i in range(options.option_count)]
        assert any(label.startswith("ended  failed") for label in labels)
        assert any(label.startswith("half-ended  running?") for label in labels)
        await pilot.press("escape")
        await settle(pilot, app)
    assert sorted(tmp_path.glob("runs/*/run.json")) == sorted(before)
    assert {p: p.read_bytes() for p in before} == before
    assert not list(tmp_path.glob("runs/*/*.tmp"))
