"""Telemetry's pure parts on recorded output: nvidia-smi as an H100 printed it, and the
sampler's own output as it ran here with the stand-in nvidia-smi (tests/data/telemetry)."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import pytest

from ddptui.engine.wire import decode, encode
from ddptui.store import rundir
from ddptui.store.changes import Applied, Change
from ddptui.store.samples import read_telemetry
from ddptui.store.store import Store
from ddptui.telemetry import alerts
from ddptui.telemetry.alerts import RankSeat
from ddptui.telemetry.parse import (
    SamplerParser,
    app_row,
    cpu_busy,
    field_names,
    gpu_csv,
    gpu_row,
    number,
)
from ddptui.telemetry.sample import GpuApp, GpuSample, NodeSample
from ddptui.telemetry.sampler import GPU_FIELDS

DATA = Path(__file__).parent / "data" / "telemetry"
IDLE = (DATA / "h100-nvidia-smi-query-idle.csv").read_text()
TRAINING = (DATA / "h100-nvidia-smi-query-l1-while-training.csv").read_text()
RECORDED_FIELDS = field_names(IDLE.splitlines()[0])


def test_idle_csv_with_header_and_units() -> None:
    [[g]] = gpu_csv(IDLE)
    assert RECORDED_FIELDS[:3] == ["index", "name", "uuid"]
    assert g == GpuSample(0, "NVIDIA H100 80GB HBM3", "GPU-76d5d0e1-3ccb-a2a4-e982-f89aff455b2e",
                          util=0.0, mem_used=0.0, mem_total=81559.0, power=71.9,
                          power_limit=700.0, temp=39.0, sm_clock=345.0)
    assert g.mem_fraction == 0.0


def test_training_csv_memory_and_power_rise_and_zero_utilization_is_a_value() -> None:
    intervals = gpu_csv(TRAINING, RECORDED_FIELDS)
    assert len(intervals) == len(TRAINING.splitlines()) == 57
    gpus = [i[0] for i in intervals]
    assert all(len(i) == 1 and i[0].index == 0 for i in intervals)
    assert gpus[0].mem_used == 0 and max(g.mem_used or 0 for g in gpus) == 8719
    assert max(g.power or 0 for g in gpus) > 600 > gpus[0].power  # type: ignore[operator]
    assert all(g.util is not None for g in gpus)  # 0 under load is read, not dropped
    assert sum(g.util == 0 for g in gpus) > len(gpus) / 2
    assert {g.sm_clock for g in gpus} >= {345.0, 1980.0, 1965.0}


@pytest.mark.parametrize(("text", "value"), [
    ("71.90", 71.9), ("71.90 W", 71.9), ("0 %", 0.0), ("81559 MiB", 81559.0), ("0", 0.0),
    ("[N/A]", None), ("[Not Supported]", None), ("N/A", None), ("", None), ("abc", None),
])
def test_number(text: str, value: float | None) -> None:
    assert number(text) == value


def test_rows_with_missing_values_commas_in_names_and_errors() -> None:
    fields = list(GPU_FIELDS)
    mig = gpu_row(fields, "0, GPU-a, NVIDIA A100-SXM4-80GB, [N/A], 12288, 81920, "
                          "[Not Supported], [N/A], 58, 1410")
    assert mig is not None and mig.util is None and mig.power is None and mig.temp == 58
    comma = gpu_row(fields, "1, GPU-b, Tesla, the fast one, 45, 1, 2, 3, 4, 5, 6")
    assert comma is not None and comma.name == "Tesla, the fast one" and comma.util == 45
    assert gpu_row(fields, "Failed to initialize NVML: Driver/library version mismatch") is None
    assert gpu_row(fields, "0, GPU-a") is None


def test_compute_apps_recorded_header_only_and_rows() -> None:
    recorded = (DATA / "h100-nvidia-smi-compute-apps.txt").read_text().splitlines()
    assert all(app_row(ln) is None for ln in recorded)
    assert app_row("GPU-a, 4242, /usr/bin/python3, 512") == GpuApp("GPU-a", 4242,
                                                                  "/usr/bin/python3", 512.0)
    assert app_row("GPU-a, 7, a, b, [N/A]") == GpuApp("GPU-a", 7, "a, b", None)


def _feed(parser: SamplerParser, text: str, now: float = 0.0) -> list[NodeSample]:
    return [s for ln in text.splitlines() for s in parser.feed(ln, now)]


def test_the_recorded_sampler_output() -> None:
    p = SamplerParser("node1")
    samples = _feed(p, (DATA / "sampler-2gpus.out").read_text(), now=-1.0)
    assert len(samples) == 8 and p.has_gpus and p.ended.startswith("no heartbeat")
    first, second = samples[0], samples[1]
    assert first.time == 1795378833.0  # the node's clock, not the caller's
    assert 0.9 < second.time - first.time < 1.3
    assert first.cpu is None and first.net == {}  # rates need two readings
    assert all(s.cpu is not None and 0 <= s.cpu <= 100 for s in samples[1:])
    assert set(second.net) == {"lo", "eth0"} and second.net_rate is not None
    assert first.mem_total == 24683656 * 1024 and 0 < (first.mem_used or 0) < first.mem_total
    assert first.load1 is not None
    assert [g.index for g in samples[-1].gpus] == [0, 1]
    assert samples[-1].gpus[0].mem_total == 81559
    [app] = first.apps or []
    assert app.pid == 4242 and app.ours is False and app.gpu in (None, 1)
    assert samples[-1].apps and samples[-1].apps[0].gpu == 1  # joined on the uuid


def test_cpu_and_network_rates_from_deltas() -> None:
    p = SamplerParser("n")
    block = ("T {up}\nC cpu  {u} 0 {s} {i} {w} 0 0 0 0 0\nL 0.50 0.40 0.30 1/2 3\n"
             "M MemTotal: 1000\nM MemAvailable: 250\n"
             "N eth0: {rx} 1 0 0 0 0 0 0 {tx} 1 0 0 0 0 0 0\n"
             "N lo:{rx} 1 0 0 0 0 0 0 0 1 0 0 0 0 0 0\n"
             "E\n")
    out = _feed(p, "@gpu-none\n@epoch 1000 50.0\n" + block.format(up=50.0, u=100, s=100, i=700,
                                                                   w=100, rx=0, tx=0), 7.0)
    out += _feed(p, block.format(up=52.0, u=160, s=120, i=800, w=120, rx=4000, tx=1000))
    a, b = out
    assert a.time == 1000.0 and b.time == 1002.0 and p.has_gpus is False
    assert b.cpu == pytest.approx(100 * 80 / 200)
    assert b.net == {"eth0": (2000.0, 500.0), "lo": (2000.0, 0.0)}
    assert b.net_rate == (2000.0, 500.0)  # loopback is not the network
    assert b.mem_used == 750 * 1024 and b.gpus == [] and b.apps is None and b.gpu_error == ""
    assert cpu_busy([1, 2], [1, 2]) is None and cpu_busy(None, [1]) is None


def test_gpu_values_go_stale_and_errors_are_said() -> None:
    p = SamplerParser("n")
    fields = ",".join(GPU_FIELDS)
    lines = [f"@gpu {fields}", "G 0, GPU-a, X, 50, 1, 2, 3, 4, 5, 6", "T 1.0", "E"]
    assert _feed(p, "\n".join(lines))[0].gpus[0].util == 50
    for i in range(5):
        [s] = _feed(p, f"T {2 + i}\nE")
    assert s.gpus == [] and "no answer from nvidia-smi" in s.gpu_error
    [s] = _feed(p, "G Failed to initialize NVML: Driver/library version mismatch\nT 9\nE")
    assert s.gpu_error.startswith("Failed to initialize NVML")


def test_record_round_trip() -> None:
    s = NodeSample("n", 12.5, 40.0, 1.5, 10, 20, {"eth0": (1.0, 2.0)},
                   [GpuSample(0, "H100", "GPU-a", 0.0, 1.0, 2.0, None, 700.0, 40.0, 1980.0)],
                   [GpuApp("GPU-a", 9, "python", 100.0, True, 0)], "")
    assert NodeSample.from_record(json.loads(json.dumps(s.to_record()))) == s
    bare = NodeSample("n", 1.0)
    assert NodeSample.from_record(bare.to_record()) == bare


def test_a_record_names_every_field_of_its_sample() -> None:
    """The records are written out field by field (typed): a field added to a sample and
    not to its record would be lost on disk, so every field must be there."""
    s = NodeSample("n", 1.0, gpus=[GpuSample(0)], apps=[GpuApp("GPU-a", 9, "python", None)],
                   gpu_error="x")
    rec = s.to_record()
    assert set(rec) == {f.name for f in dataclasses.fields(NodeSample)} - {"_summary"}
    assert set(rec["gpus"][0]) == {f.name for f in dataclasses.fields(GpuSample)}
    assert set(rec["apps"][0]) == {f.name for f in dataclasses.fields(GpuApp)}


def _history(utils: list[float | None], start: float = 0.0, mem: float = 10.0,
             ) -> list[NodeSample]:
    return [NodeSample("n", start + i, gpus=[GpuSample(0, util=u, mem_used=mem,
                                                       mem_total=100.0),
                                             GpuSample(1, util=50.0, mem_used=1.0,
                                                       mem_total=100.0)])
            for i, u in enumerate(utils)]


def test_idle_gpu_alert_needs_a_whole_window_of_zeros_on_a_running_rank() -> None:
    seats = [RankSeat(0, "n", 0, True), RankSeat(1, "n", 1, True)]
    idle = _history([0.0] * 32)
    [a] = alerts.assess({"n": idle}, seats, now=31.0)
    assert (a.kind, a.rank, a.gpu, a.node) == ("gpu-idle", 0, 0, "n") and "0%" in a.text
    assert alerts.assess({"n": _history([0.0] * 15 + [3.0] + [0.0] * 16)}, seats, 31.0) == []
    assert alerts.assess({"n": _history([0.0] * 10)}, seats, 9.0) == []  # not 30 s yet
    assert alerts.assess({"n": idle}, [RankSeat(0, "n", 0, False)], 31.0) == []
    assert alerts.assess({"n": idle}, seats, now=500.0) == []  # old values say nothing


def test_the_recorded_training_run_raises_no_idle_alert_once_it_computes() -> None:
    """On the recorded VM, utilization reads 0 much of the time even under load."""
    rows = gpu_csv(TRAINING, RECORDED_FIELDS)
    history = [NodeSample("n", float(i), gpus=g) for i, g in enumerate(rows)]
    seat = [RankSeat(0, "n", 0, True)]
    for i in range(len(rows)):  # at no moment: its zeros never last 30 s
        assert alerts.assess({"n": history[:i + 1]}, seat, now=float(i)) == []
    assert alerts.idle_gpus(history[:18], now=17.0, idle_after=15.0) == {0}  # the start


def test_memory_full_and_foreign_process_alerts() -> None:
    full = NodeSample("n", 1.0, gpus=[GpuSample(0, mem_used=97.9, mem_total=100.0),
                                      GpuSample(1, mem_used=98.0, mem_total=100.0)],
                      apps=[GpuApp("GPU-a", 5, "python", 1.0, True, 0),
                            GpuApp("GPU-b", 6, "other", 1.0, False, 1),
                            GpuApp("GPU-c", 7, "unknown", 1.0, None, None)])
    kinds = [(a.kind, a.gpu, a.text) for a in alerts.node_alerts(full)]
    assert kinds == [("gpu-mem-full", 1, "gpu1 mem 98%"),
                     ("gpu-foreign", 1, "gpu1: pid 6 not ours")]


def test_store_keeps_histories_writes_telemetry_jsonl_and_replicas_get_them(
        tmp_path: Path) -> None:
    store = Store(tmp_path)
    samples = _feed(SamplerParser("node1"), (DATA / "sampler-2gpus.out").read_text())
    store.apply(samples[:4])
    store.apply(samples[4:])
    seen: list[Change] = []
    snap = store.subscribe(seen.append)
    replica = Store.replica(pickle.loads(pickle.dumps(snap)))
    assert [s.time for s in replica.node_samples()["node1"]] == [s.time for s in samples]
    extra = NodeSample("node1", samples[-1].time + 1)
    store.apply([extra])
    for change in decode(encode(list(seen))):
        assert type(change) is Applied
        replica.apply(change.events, mirror=False)
    assert replica.node_samples()["node1"][-1] == extra
    store.close()
    written = list(read_telemetry(tmp_path))
    assert written == [*samples, extra]
    assert not (tmp_path / rundir.EVENTS).exists()  # samples are not events.jsonl's


def test_torn_and_foreign_lines_are_left_out() -> None:
    p = SamplerParser("n")
    torn = ["T 12.3x", "T 5", "C cpu 1 2 x", "L", "M MemTotal: lots", "N eth0: 1 2",
            "@epoch 1", "P+ nonsense", "garbage", "", "E"]
    [s] = _feed(p, "\n".join(torn))
    assert s.cpu is None and s.mem_total is None and s.net == {} and s.time == 0.0


@pytest.mark.parametrize(("local_rank", "visible", "gpu"), [
    (0, None, 0), (3, None, 3), (None, "0,1", None), (0, "2,3", 2), (1, " 2, 3 ", 3),
    (2, "2,3", None), (0, "GPU-8c1b2f", None), (0, "MIG-1f2e", None), (0, "", None),
    (1, "4,,5", 5),
])
def test_rank_gpu_follows_cuda_visible_devices(local_rank: int | None, visible: str | None,
                                               gpu: int | None) -> None:
    assert alerts.rank_gpu(local_rank, visible) == gpu
