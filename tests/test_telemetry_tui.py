"""Telemetry on the dashboard: the nodes table's cells and alerts (pure), the node detail
view, and both in the app with a stand-in run handle."""

from __future__ import annotations

from typing import Any

from replay import T0
from rich.console import Console
from test_tui_app import launched, make_app, settle, sync, table_text

from ddptui.events import NodeStatus
from ddptui.store.views import NodeView, RankView
from ddptui.telemetry.sample import GpuApp, GpuSample, NodeSample
from ddptui.tui import node_rows, sample_cells
from ddptui.tui.node_rows import build_rows, columns
from ddptui.tui.screens.node_detail import NodeDetailScreen, detail

NOW = T0 + 10


def history(node: str, n: int = 40, gpus: int = 2) -> list[NodeSample]:
    """``n`` seconds up to NOW: gpu0 idle throughout, gpu1 busy and nearly full."""
    out = []
    for i in range(n):
        t = NOW - (n - 1 - i)
        out.append(NodeSample(
            node, t, cpu=50.0, load1=1.0, mem_used=2 << 30, mem_total=8 << 30,
            net={"eth0": (1000.0 * i, 500.0), "lo": (9e9, 9e9)},
            gpus=[GpuSample(g, "NVIDIA H100 80GB HBM3", f"GPU-{g}", 0.0 if g == 0 else 40.0 + i,
                            1000.0 if g == 0 else 80_000.0, 81559.0, 100.0, 700.0, 40.0,
                            1980.0) for g in range(gpus)],
            apps=[GpuApp("GPU-1", 77, "someone-else.py", 5.0, False, 1)]))
    return out


def views() -> tuple[list[NodeView], list[RankView]]:
    nodes = [NodeView("a", 0, NodeStatus.RUNNING, ranks={0, 1}),
             NodeView("b", 1, NodeStatus.RUNNING, ranks={2})]
    ranks = [RankView(0, "a", 0), RankView(1, "a", 1), RankView(2, "b", 0)]
    return nodes, ranks


def test_cells_worst_gpu_and_mean_with_sparklines_and_alerts() -> None:
    nodes, ranks = views()
    assert sample_cells.build({}, nodes, ranks, NOW) is None
    quiet = [NodeSample("b", NOW, cpu=1.0, net={"eth0": (10.0, 0.0)})]
    cells = sample_cells.build({"a": history("a"), "b": quiet}, nodes, ranks, NOW)
    assert cells is not None
    gpu, mem, net = cells.node("a")
    assert gpu.startswith("0/40% ") and len(gpu.split()[1]) == sample_cells.SPARK_WIDTH
    assert mem.startswith("98/50% ")  # the fullest GPU, then the mean
    assert net.startswith("39.5kB/s ")  # 39000 in + 500 out; loopback left out
    assert cells.node("b") == ("-", "-", "10B/s")
    assert cells.rank(0) == ("0%", "1%", "") and cells.rank(1) == ("79%", "98%", "")
    assert cells.rank_alerts == {0: "gpu0 0% 30s"}
    assert cells.node_alerts == {"a": "gpu1 mem 98%; gpu1: pid 77 not ours"}
    old = sample_cells.build({"a": history("a")}, nodes, ranks, NOW + 60)
    assert old is not None and old.node("a") == ("-", "-", "stale") and not old.node_alerts


def test_a_rank_is_read_on_the_gpu_its_nodes_cuda_visible_devices_gives_it() -> None:
    """Node a hides gpu0 (``CUDA_VISIBLE_DEVICES=1,0``): local rank 0 runs on gpu1 (busy), so
    no idle alert, and local rank 1 on the idle gpu0, so that one is alerted."""
    nodes, ranks = views()
    cells = sample_cells.build({"a": history("a")}, nodes, ranks, NOW, {"a": "1,0"})
    assert cells is not None
    assert cells.rank(0) == ("79%", "98%", "") and cells.rank(1) == ("0%", "1%", "")
    assert cells.rank_alerts == {1: "gpu0 0% 30s"}
    uuids = sample_cells.build({"a": history("a")}, nodes, ranks, NOW, {"a": "GPU-9f3c"})
    assert uuids is not None and uuids.rank(0) == ("", "", "") and not uuids.rank_alerts


def test_rows_carry_the_cells_and_alerts_only_once_telemetry_exists() -> None:
    nodes, ranks = views()
    plain = build_rows(nodes, ranks, {}, lambda r: [], NOW)
    assert columns(None) == node_rows.COLUMNS and all(len(r.cells) == len(node_rows.COLUMNS)
                                                     for r in plain)
    cells = sample_cells.build({"a": history("a")}, nodes, ranks, NOW)
    rows = {r.key: r for r in build_rows(nodes, ranks, {}, lambda r: [], NOW, cells)}
    assert columns(cells)[-3:] == ("GPU", "GMem", "Net")
    assert all(len(r.cells) == len(columns(cells)) for r in rows.values())
    assert rows["n:a"].cells[3] == "running · gpu1 mem 98%; gpu1: pid 77 not ours"
    assert rows["n:a"].tone == "warning" and rows["n:b"].cells[-3:] == ("-", "-", "-")
    assert rows["r:0"].cells[3] == "gpu0 0% 30s" and rows["r:0"].tone == "warning"
    assert rows["r:1"].cells[3] == "" and rows["r:1"].cells[-3:] == ("79%", "98%", "")


def render(renderable: Any) -> str:
    console = Console(width=120, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_node_detail_shows_every_gpu_processes_and_interfaces() -> None:
    text = render(detail("a", history("a", gpus=3), NOW))
    assert text.count("NVIDIA H100 80GB HBM3") == 3
    assert "78.1 / 79.6" in text and "100 / 700" in text and "1980" in text
    assert "someone-else.py" in text and "another job" in text
    assert "eth0" in text and "39.0kB" in text and "CPU busy" in text
    assert "no telemetry yet" in render(detail("z", [], NOW))
    bare = render(detail("b", [NodeSample("b", NOW - 30, cpu=3.0)], NOW))
    assert "no GPUs" in bare and "(30 s old)" in bare


@sync
async def test_the_table_grows_telemetry_columns_and_g_opens_the_node() -> None:
    app = make_app()
    async with app.run_test(size=(200, 48)) as pilot:
        c = await launched(pilot, app)
        before = table_text(app)
        assert len(before["n:local-a"]) == len(node_rows.COLUMNS)
        c.store.apply(history("local-a") + history("local-b", gpus=1))
        await settle(pilot, app)
        rows = table_text(app)
        assert len(rows["n:local-a"]) == len(node_rows.COLUMNS) + 3
        assert rows["n:local-a"][-3].startswith("0/40% ")
        assert rows["n:local-b"][-3].startswith("0% ")
        assert "gpu1 mem 98%" in rows["n:local-a"][3]
        app.nodes_table.move_cursor(app.nodes_table.row_keys.index("n:local-b"))
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, NodeDetailScreen) and app.screen.node == "local-b"
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, NodeDetailScreen)
