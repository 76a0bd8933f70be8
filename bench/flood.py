"""A run that floods: what ``bench/ui_latency.py`` opens in the dashboard's engine process.

It stands in for the session, a :class:`ddptui.run_port.RunPort` as mypy checks it (``flood_run``
returns one), and does what the node followers do:
raw torchrun output (one line prefix per rank, plus one ``@ddptui`` metric record per rank per
batch) goes through the real parser into a real store with its disk mirror. ``launch`` starts
the flood at ``rate`` lines/s; while the file ``hold`` exists, the run stays up and quiet (the
bench's idle blocks). ``stop`` ends the measured phase: the flood then goes flat out until
``total`` lines, and the run is done. ``detach`` stops the flood where it is.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

from ddptui.config import HostsConfig
from ddptui.events import NodeState, NodeStatus, RunStatus
from ddptui.ingest import parse_chunk
from ddptui.nccl import NcclFacts
from ddptui.nodelog import NodeLogParser
from ddptui.outcome import RunResult, StopReport
from ddptui.rank_stacks import Stacks
from ddptui.run_port import RunPort
from ddptui.store.store import Store
from ddptui.telemetry.sample import GpuApp, GpuSample, NodeSample

BATCH_S = 0.02
RANKS_PER_NODE = 8


class FloodRun:
    def __init__(self, ranks: int, rate: float, total: int, hold: Path | None = None,
                 telemetry_nodes: int = 0) -> None:
        self.ranks, self.rate, self.total, self.hold = ranks, rate, total, hold
        self.run_id = "bench"
        self.config: HostsConfig | None = None
        self.local_dir = Path(tempfile.mkdtemp(prefix="ddptui-bench-"))
        self.store = Store(self.local_dir)
        self.store.set_run(run_id=self.run_id, status=RunStatus.RUNNING, started_at=time.time(),
                           world_size=ranks)
        self.nodes = [f"node{i}" for i in range(max(1, ranks // RANKS_PER_NODE))]
        self.sampled = [f"node{i}" for i in range(telemetry_nodes)]
        for i, name in enumerate(dict.fromkeys(self.nodes + self.sampled)):
            self.store.add_node(name, i)
            self.store.apply([NodeState(name, NodeStatus.RUNNING, time.time(), pid=1000 + i)])
        self.result: RunResult | None = None
        self._done = threading.Event()
        self._flat_out = threading.Event()
        self._halt = threading.Event()
        self._feeder = threading.Thread(target=self._feed, daemon=True)
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def launch(self) -> None:
        self._feeder.start()
        if self.sampled:
            self._sampler.start()

    def _sample(self) -> None:
        """What each node's telemetry sampler sends: one sample a node a second, 8 GPUs each,
        each a batch of its own, as the controller's samplers publish them."""
        tick = 0
        while not self._halt.is_set() and not self._done.is_set():
            tick += 1
            now = time.time()
            for i, name in enumerate(self.sampled):
                gpus = [GpuSample(g, "NVIDIA H100 80GB HBM3", f"GPU-{i}-{g}",
                                  float((tick * 7 + g * 13 + i) % 101), 40_000.0 + g * 100,
                                  81559.0, 300.0 + g, 700.0, 50.0, 1980.0) for g in range(8)]
                apps = [GpuApp(f"GPU-{i}-{g}", 5000 + g, "python", 39_000.0, True, g)
                        for g in range(8)]
                self.store.apply([NodeSample(
                    name, now, cpu=float(tick % 100), load1=8.0, mem_used=200 << 30,
                    mem_total=1 << 40, net={"eth0": (1e8 + tick, 9e7), "ib0": (5e9, 5e9),
                                            "lo": (1e6, 1e6)}, gpus=gpus, apps=apps)])
            self._halt.wait(1.0)

    def stop(self, grace: float | None = None) -> StopReport:
        self._flat_out.set()
        return StopReport()

    def nccl_facts(self) -> NcclFacts:
        return NcclFacts()  # the flood has no NCCL lines

    def stacks(self, rank: int | None = None) -> Stacks:
        return Stacks(self.run_id, time.time(), [])  # no rank process to dump

    def rehearse(self) -> str:
        return "no rank here to signal: the flood is not a run"

    def again(self) -> str | None:
        return None

    def detach(self) -> None:
        """The dashboard let go before the end: the flood stops where it is."""
        self._halt.set()
        if self._feeder.is_alive():
            self._feeder.join()

    def _feed(self) -> None:
        store, n, step = self.store, 0, 0
        parsers = [NodeLogParser(name) for name in self.nodes]
        per_node = len(self.nodes)
        started, paced = time.perf_counter(), 0
        while n < self.total and not self._halt.is_set():
            flat = self._flat_out.is_set()
            if not flat and self.hold is not None and self.hold.exists():
                time.sleep(BATCH_S)
                started, paced = time.perf_counter(), n  # after the hold, at rate again
                continue
            per_batch = 5000 if flat else int(self.rate * BATCH_S)
            now = time.time()
            step += 1
            chunks: list[list[str]] = [[] for _ in parsers]
            for _ in range(per_batch):
                r = n % self.ranks
                chunks[r // RANKS_PER_NODE % per_node].append(
                    f"[ddptui {r} {r % RANKS_PER_NODE}] it {n} rank {r} loss "
                    f"0.{n % 997:03d} grad_norm 1.02 tokens/s 51234\n")
                n += 1
            for r in range(self.ranks):
                loss = 5.0 / (1 + step * 0.01) + r * 0.01
                chunks[r // RANKS_PER_NODE % per_node].append(
                    f'[ddptui {r} {r % RANKS_PER_NODE}] @ddptui {{"v": 1, "kind": "metric", '
                    f'"rank": {r}, "step": {step}, "loss": {loss}, "step_time_s": 0.1}}\n')
            for name, parser, lines in zip(self.nodes, parsers, chunks, strict=True):
                data = "".join(lines).encode()
                store.apply(parse_chunk(parser, data, now), {name: n})
            if not flat:
                ahead = started + (n - paced) / self.rate - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
        if self._halt.is_set():
            return
        self.store.set_run(status=RunStatus.FINISHED, exit_code=0, ended_at=time.time())
        self.store.close()
        # shaped like a RunResult where the dashboard reads one (its end toast)
        self.result = RunResult(0, [], dict.fromkeys(self.nodes, 0), stopped=False)
        self._done.set()


def flood_run(ranks: int, rate: float, total: int, hold: Path | None = None,
              telemetry_nodes: int = 0) -> RunPort:
    return FloodRun(ranks, rate, total, hold, telemetry_nodes)
