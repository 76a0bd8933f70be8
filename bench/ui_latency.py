"""Key-press-to-repaint latency of the dashboard under a log flood, and memory after 5M lines.

One command: ``python bench/ui_latency.py``. The dashboard runs as it does for a real run:
its controller lives in an engine process (``ddptui.engine.process``), and the dashboard pumps
the engine's changes into its replica store on its timer. The engine here runs
``bench/flood.py``, which does what the node followers do: raw torchrun output from 16 ranks
at 50,000 lines/s, plus one metric line per rank per batch, through the real parser into a
real store with its disk mirror, and (``--telemetry-nodes``, 16 by default) one telemetry
sample a second from each of 16 nodes with 8 GPUs, so the nodes table has 16 node rows with
their GPU and network cells. The app runs headless at 160x48 with the log and the charts
on screen. Textual still composes every frame; only the write to a terminal is skipped.

Latency is measured from posting the key (``s``, follow on/off, which changes the status line)
to the first frame composed with the new status. The baseline is the same run with no lines:
the flood is held and released in alternate blocks, so both are measured under the same load
from the rest of the machine (on a shared virtual machine that drifts by more than the effect
being measured, from one half-minute to the next). Before launch, with an empty dashboard, it
is measured once more, for reference. Then the flood goes flat out to 5 million lines in total,
and the RSS of both processes is read.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flood import flood_run

from ddptui.engine.client import EngineClient, EngineProcess
from ddptui.tui.app import DashboardApp

RANKS = 16


def rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Watch:
    """Set by the display hook when the first frame with the wanted status goes out, so the
    measuring loop sleeps until then instead of polling the loop it measures."""

    def __init__(self) -> None:
        self.want: bool | None = None
        self.hit = 0.0
        self.seen = asyncio.Event()

    def frame(self, follow: bool) -> None:
        if self.want is not None and follow == self.want:
            self.hit, self.want = time.perf_counter(), None
            self.seen.set()


async def latencies(app: DashboardApp, watch: Watch, samples: int) -> list[float]:
    out: list[float] = []
    gaps = random.Random(4)  # keys at uneven times, never in step with the app's timers
    for _ in range(samples):
        watch.seen.clear()
        watch.want = not app.dashboard.log_view.follow
        t0 = time.perf_counter()
        app.simulate_key("s")
        try:
            await asyncio.wait_for(watch.seen.wait(), 2.0)
            out.append(watch.hit - t0)
        except TimeoutError:
            watch.want = None
            out.append(2.0)
        await asyncio.sleep(gaps.uniform(0.03, 0.07))
    return out


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


async def settled(app: DashboardApp, client: EngineClient, limit: float = 10.0) -> None:
    """Until the held flood's last lines are applied, written to the log and charted."""
    deadline = time.monotonic() + limit
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        seq = client.store.seq
        if seq != seen:
            seen, since = seq, time.monotonic()
        elif (time.monotonic() - since > 0.3 and app.dashboard.log_pane.cursor == seq
              and not app.dashboard.chart.dirty):
            return
        await asyncio.sleep(0.05)


async def main(args: argparse.Namespace) -> int:
    hold = Path(tempfile.mkdtemp(prefix="ddptui-bench-")) / "hold"
    hold.touch()
    engine = EngineProcess()
    client: EngineClient = engine.open(flood_run, RANKS, args.rate, args.total, hold,
                                       args.telemetry_nodes)
    app = DashboardApp(None, session_factory=lambda config, root: client,
                       attacher=lambda run_id, root: client, drain_hz=args.hz)
    watch = Watch()
    per_block = max(1, args.samples // args.blocks)
    idle: list[float] = []
    loaded: list[float] = []
    lines, seconds = 0, 0.0
    try:
        async with app.run_test(size=(args.width, 48)) as pilot:
            app.use_session(client)
            display = app._display

            def timed_display(screen: Any, renderable: Any) -> None:
                display(screen, renderable)
                if renderable is not None:
                    watch.frame(app.dashboard.log_status.state.follow)

            app._display = timed_display  # type: ignore[method-assign]
            await pilot.pause(0.5)
            empty = await latencies(app, watch, max(2, args.samples // 2))

            await asyncio.to_thread(client.launch)  # held: the run is up, quiet
            for _ in range(args.blocks):
                hold.touch()
                await settled(app, client)
                idle += await latencies(app, watch, per_block)
                hold.unlink()
                await asyncio.sleep(args.warm)
                seq0, t0 = client.store.seq, time.perf_counter()
                loaded += await latencies(app, watch, per_block)
                lines += client.store.seq - seq0
                seconds += time.perf_counter() - t0
            await asyncio.to_thread(client.stop)

            deadline = time.monotonic() + 600
            while not client.done and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            await pilot.pause(0.3)
            rss_ui, rss_engine = rss_mb(), rss_mb(engine.process.pid)
            total = getattr(client.result, "lines", 0)
    finally:
        engine.close()
        shutil.rmtree(hold.parent, ignore_errors=True)
        if client.store.run_dir is not None:
            shutil.rmtree(client.store.run_dir, ignore_errors=True)

    rate = lines / seconds if seconds else 0.0
    e50, e95 = p(empty, 50), p(empty, 95)
    i50, i95, l50, l95 = p(idle, 50), p(idle, 95), p(loaded, 50), p(loaded, 95)
    ratio = l95 / i95 if i95 > 0 else float("inf")
    print(f"key-to-repaint, before launch (reference): p50 {e50 * 1000:6.1f} ms  "
          f"p95 {e95 * 1000:6.1f} ms")
    print(f"key-to-repaint, run up, no lines (idle):   p50 {i50 * 1000:6.1f} ms  "
          f"p95 {i95 * 1000:6.1f} ms")
    print(f"key-to-repaint, {rate / 1000:.0f}k lines/s from {RANKS} ranks:    "
          f"p50 {l50 * 1000:6.1f} ms  p95 {l95 * 1000:6.1f} ms")
    print(f"ratio loaded/idle p95: {ratio:.2f}x  (target <= 2x, and p95 < 100 ms)")
    print(f"RSS after {total:,} lines: dashboard {rss_ui:.0f} MB, engine {rss_engine:.0f} MB "
          "(target < 300 MB each)")
    ok = (l95 < 0.1 and ratio <= 2.0 and rss_ui < 300 and rss_engine < 300
          and rate >= 0.9 * args.rate and total >= args.total)
    if rate < 0.9 * args.rate:
        print(f"note: the dashboard received only {rate:,.0f} lines/s of {args.rate:,.0f}")
    if args.show_samples:
        print(f"in blocks of {per_block}, alternating")
        print("idle (ms):", [round(x * 1000) for x in idle])
        print("loaded (ms):", [round(x * 1000) for x in loaded])
    print("PASS" if ok else "MISS")
    return 0 if ok or not args.strict else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=50_000, help="lines/s while measuring")
    ap.add_argument("--total", type=int, default=5_000_000, help="lines before reading RSS")
    ap.add_argument("--samples", type=int, default=200, help="key presses per phase")
    ap.add_argument("--blocks", type=int, default=10,
                    help="idle and loaded blocks, alternating, that the samples are split into")
    ap.add_argument("--warm", type=float, default=0.5,
                    help="seconds of flood before each loaded block is measured")
    ap.add_argument("--width", type=int, default=160, help="terminal columns (<120: no chart)")
    ap.add_argument("--hz", type=float, default=15, help="the dashboard's drain rate")
    ap.add_argument("--telemetry-nodes", type=int, default=16,
                    help="nodes sending a telemetry sample (8 GPUs) a second, in the table "
                         "(0: none)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--show-samples", action="store_true", help="print every latency, in order")
    sys.exit(asyncio.run(main(ap.parse_args())))
