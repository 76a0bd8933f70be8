"""The dashboard's side of stalls and stacks through a real engine process: a Stall reaches
the replica store, and the `stacks` call comes back as the run took it."""

from __future__ import annotations

from typing import Any

import pytest
from test_engine_process import T0, ScriptedRun, engine, pump_until  # noqa: F401 - fixture
from test_stall_health import recorded

from ddptui.engine.client import EngineProcess
from ddptui.events import Stall
from ddptui.remote.stacks import Stacks

pytestmark = pytest.mark.timeout(120)


class StalledRun(ScriptedRun):
    """A scripted run whose rank 1 stalls once launched, and whose stacks are the recorded."""

    def launch(self) -> None:
        super().launch()
        self.store.apply([Stall("a", 1, T0 + 5, True, 65.0, False)])

    def stacks(self, rank: int | None = None) -> Stacks:
        got = recorded()
        return Stacks(got.run_id, got.time, got.nodes, saved=f"asked for {rank}")


def stalled(local_dir: str) -> Any:
    return StalledRun(local_dir, 0, True, "")


def test_a_stall_and_the_stacks_cross_to_the_dashboard(engine: EngineProcess,  # noqa: F811
                                                       tmp_path: Any) -> None:
    client = engine.open(stalled, str(tmp_path))
    client.launch()
    pump_until(client, lambda: bool(client.store.stall_list()))
    assert client.store.stall_list() == [Stall("a", 1, T0 + 5, True, 65.0, False)]
    got = client.stacks(3)
    assert got.saved == "asked for 3" and got.for_rank(3) == recorded().for_rank(3)
    client.stop()
