"""Key-press-to-repaint latency of the dashboard under a log flood, and memory after 5M lines.

One command: ``python bench/ui_latency.py``. The app runs headless (Textual still composes
every frame; only the write to a terminal is skipped) at 160x48 with the log and the charts
on screen. A feeder thread does what the node followers and the consumer do: raw torchrun
output (16 ranks, 50,000 lines/s, plus one metric line per rank per batch) through the real
parser, then into the store. Latency is from posting the
key (``s``, follow on/off, which changes the status line) to the first frame composed with
the new status. The same is measured with no lines, in the same run, and the ratio printed.
Then the feeder runs flat out to 5 million lines in total and the process's RSS is read.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddptui.events import NodeLogParser, NodeState, NodeStatus
from ddptui.follow import parse_chunk
from ddptui.store import Store
from ddptui.tui.app import DashboardApp

RANKS = 16
BATCH_S = 0.02


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Feeder(threading.Thread):
    """Applies batches at ``rate`` lines/s (0: as fast as it can) until ``total`` lines."""

    def __init__(self, store: Store, rate: float, total: int) -> None:
        super().__init__(daemon=True)
        self.store, self.rate, self.total = store, rate, total
        self.sent = 0
        self.stop_event = threading.Event()
        self.started = self.ended = 0.0

    def run(self) -> None:
        """Raw torchrun output through the real parser, as a node follower hands it on."""
        store, n = self.store, 0
        per_batch = int(self.rate * BATCH_S) if self.rate else 5000
        parsers = [NodeLogParser(f"node{i}") for i in range(RANKS // 8)]
        self.started = time.perf_counter()
        step = 0
        while not self.stop_event.is_set() and self.sent < self.total:
            now = time.time()
            step += 1
            chunks: list[list[str]] = [[] for _ in parsers]
            for _ in range(per_batch):
                r = n % RANKS
                chunks[r // 8].append(f"[ddptui {r} {r % 8}] it {n} rank {r} loss "
                                      f"0.{n % 997:03d} grad_norm 1.02 tokens/s 51234\n")
                n += 1
            for r in range(RANKS):
                loss = 5.0 / (1 + step * 0.01) + r * 0.01
                chunks[r // 8].append(f'[ddptui {r} {r % 8}] @ddptui {{"v": 1, "kind": '
                                      f'"metric", "rank": {r}, "step": {step}, "loss": {loss}, '
                                      '"step_time_s": 0.1}\n')
            batch: list[Any] = []
            for parser, lines in zip(parsers, chunks, strict=True):
                batch.extend(parse_chunk(parser, "".join(lines).encode(), now))
            store.apply(batch)
            self.sent = n
            if self.rate:
                ahead = self.started + n / self.rate - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
        self.ended = time.perf_counter()

    @property
    def achieved(self) -> float:
        end = self.ended or time.perf_counter()
        return self.sent / max(1e-9, end - self.started)


async def latencies(app: DashboardApp, frames: list[tuple[float, bool]], samples: int
                    ) -> list[float]:
    out: list[float] = []
    for _ in range(samples):
        want = not app.log_view.follow
        t0 = time.perf_counter()
        app.simulate_key("s")
        deadline = t0 + 2.0
        while time.perf_counter() < deadline:
            hit = next((t for t, follow in reversed(frames) if t > t0 and follow == want), None)
            if hit is not None:
                out.append(hit - t0)
                break
            await asyncio.sleep(0.001)
        else:
            out.append(2.0)
        await asyncio.sleep(0.05)
    return out


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


async def main(args: argparse.Namespace) -> int:
    store = Store()
    store.set_run(run_id="bench", status="running", started_at=time.time(),
                  world_size=RANKS)
    for i in range(2):
        store.add_node(f"node{i}", i)
        store.apply([NodeState(f"node{i}", NodeStatus.RUNNING, time.time(), pid=1000 + i)])
    app = DashboardApp(None, store=store, drain_hz=args.hz)
    frames: list[tuple[float, bool]] = []
    async with app.run_test(size=(args.width, 48)) as pilot:
        display = app._display

        def timed_display(screen: Any, renderable: Any) -> None:
            display(screen, renderable)
            if renderable is not None:
                frames.append((time.perf_counter(), app.log_status.state.follow))
                del frames[:-200]

        app._display = timed_display  # type: ignore[method-assign]
        await pilot.pause(0.5)
        idle = await latencies(app, frames, args.samples)

        feeder = Feeder(store, args.rate, args.total)
        feeder.start()
        await asyncio.sleep(1.0)
        loaded = await latencies(app, frames, args.samples)
        rate = feeder.achieved
        feeder.stop_event.set()
        feeder.join()

        flat_out = Feeder(store, 0, args.total - feeder.sent)
        flat_out.start()
        while flat_out.is_alive():
            await asyncio.sleep(0.2)
        total = feeder.sent + flat_out.sent
        await pilot.pause(0.3)
        rss = rss_mb()

    i50, i95, l50, l95 = p(idle, 50), p(idle, 95), p(loaded, 50), p(loaded, 95)
    ratio = l95 / i95 if i95 > 0 else float("inf")
    print(f"key-to-repaint, idle:    p50 {i50 * 1000:6.1f} ms  p95 {i95 * 1000:6.1f} ms")
    print(f"key-to-repaint, {rate / 1000:.0f}k lines/s from {RANKS} ranks: "
          f"p50 {l50 * 1000:6.1f} ms  p95 {l95 * 1000:6.1f} ms")
    print(f"ratio loaded/idle p95: {ratio:.2f}x  (target <= 2x, and p95 < 100 ms)")
    print(f"RSS after {total:,} lines: {rss:.0f} MB  (target < 300 MB)")
    ok = l95 < 0.1 and ratio <= 2.0 and rss < 300 and rate >= 0.9 * args.rate
    if rate < 0.9 * args.rate:
        print(f"note: the feeder reached only {rate:,.0f} lines/s of {args.rate:,.0f}")
    print("PASS" if ok else "MISS")
    return 0 if ok or not args.strict else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=50_000, help="lines/s while measuring")
    ap.add_argument("--total", type=int, default=5_000_000, help="lines before reading RSS")
    ap.add_argument("--samples", type=int, default=40, help="key presses per phase")
    ap.add_argument("--width", type=int, default=160, help="terminal columns (<120: no chart)")
    ap.add_argument("--hz", type=float, default=15, help="the dashboard's drain rate")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    sys.exit(asyncio.run(main(ap.parse_args())))
