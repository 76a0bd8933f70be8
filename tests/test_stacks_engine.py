"""The dashboard's side of stalls and stacks through a real engine process: a Stall reaches
the replica store, and the `stacks` call comes back as the run took it."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import stalled
from replay import T0
from test_engine_process import engine, pump_until  # noqa: F401 - fixture
from test_stall_health import recorded

from ddptui.engine.client import EngineProcess
from ddptui.events import Stall

pytestmark = pytest.mark.timeout(120)


def test_a_stall_and_the_stacks_cross_to_the_dashboard(engine: EngineProcess,  # noqa: F811
                                                       tmp_path: Any) -> None:
    client = engine.open(stalled, str(tmp_path))
    client.launch()
    pump_until(client, lambda: bool(client.store.stall_list()))
    assert client.store.stall_list() == [Stall("a", 1, T0 + 5, True, 65.0, False)]
    got = client.stacks(3)
    assert got.saved == "asked for 3" and got.for_rank(3) == recorded().for_rank(3)
    client.stop()
