"""Ingest: the event parser and the store alone, lines/s against raw line splitting.

One command: ``python bench/ingest.py``. The input is what a node's ``node.log`` holds under
a flood: torchrun's per-rank prefix on every line (``[ddptui R L] ``), plain log lines from
``--ranks`` ranks in blocks of ``--block`` lines (as ddptui's tee writes them; 1 interleaves
them line by line, as torch's own does), and one ``@ddptui`` metric record every 100 lines.
The same bytes,
cut into 1 MiB chunks at line ends as the follower reads them, go through

* raw splitting: ``bytes.decode().split("\\n")``, the least any reader does (the baseline);
* the parser: ``parse_chunk`` (a rank's plain lines in a row as one ``LineRun``, other
  lines as ``NodeLogParser.feed`` makes them), what the follower does;
* parser + store: ``Store.apply`` with its disk mirror (per-rank logs, the all-ranks view,
  metrics, checkpoint), as the controller does with every batch.

And a progress-bar flood of as many lines: every rank's tqdm bar redrawn, one node.log line
per state as the tee marks them (``[ddptui R L] \r<state>``), an ordinary line every 1,000
states, through the parser and then the parser, the bar keeper (``ddptui.bars``) and the
store, as the controller does; against the same raw splitting of its own bytes.

With ``--recognizers``, the metric recognizers' cost instead (``ddptui.metrics``, run on
the parser's events as the follower does): the parser alone against the parser with every
built-in recognizer, on a flood whose lines match none (no gate word in them) and on one whose
every line is a nanoGPT ``iter N: loss X, time Yms, mfu Z%`` line, each as a ratio to the
parser alone on the same bytes in the same rounds.

Rounds alternate between the three and the medians are compared. Each is timed in CPU
seconds of this process (``time.process_time``): the work is one thread's, and on a shared
machine the wall clock also counts the time other programs held the cores. What it means: the rate
here is the most lines per second one controller can take in from all nodes together, before
any SSH cost; each figure is printed as lines/s and as a fraction of raw splitting.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_setup import median

from ddptui.bars import BarKeeper
from ddptui.ingest import parse_chunk, split_complete
from ddptui.metrics.scan import Scanner
from ddptui.nodelog import NodeLogParser
from ddptui.store.store import Store

CHUNK = 1 << 20


def flood_bytes(lines: int, ranks: int, block: int = 1) -> bytes:
    """``block`` lines of one rank, then the next rank's: ddptui's tee copies a rank's
    lines a block at a time (a flood's blocks hold thousands); 1 is torch's own tee."""
    out = []
    for n in range(lines):
        r = (n // block) % ranks
        if n % 100 == 99:
            out.append(f'[ddptui {r} {r}] @ddptui {{"v": 1, "kind": "metric", "rank": {r}, '
                       f'"step": {n // 100}, "loss": {1.0 / (1 + n):.6f}}}\n')
        else:
            out.append(f"[ddptui {r} {r}] step {n} rank {r} loss 0.{n % 997:03d} "
                       f"grad_norm 1.02 tokens/s 51234\n")
    return "".join(out).encode()


def bar_bytes(lines: int, ranks: int, block: int = 1) -> bytes:
    """A flood of progress bar states (tqdm's own text, with a loss in its postfix), in
    blocks of one rank as the tee copies a read of its file, an ordinary line every 1,000."""
    out = []
    for n in range(lines):
        r = (n // block) % ranks
        if n % 1000 == 999:
            out.append(f"[ddptui {r} {r}] epoch {n // 1000} done, loss 0.{n % 997:03d}\n")
        else:
            pct = n * 100 // lines
            out.append(f"[ddptui {r} {r}] \r{pct:3d}%|{'#' * (pct // 10):10s}| {n}/{lines} "
                       f"[00:09<00:11, 5000.00it/s, loss=0.{n % 997:03d}]\n")
    return "".join(out).encode()


def chunks_of(data: bytes) -> list[bytes]:
    out, rest = [], b""
    for i in range(0, len(data), CHUNK):
        whole, rest = split_complete(rest + data[i:i + CHUNK])
        if whole:
            out.append(whole)
    if rest:
        out.append(rest)
    return out


def raw_split(chunks: list[bytes]) -> int:
    return sum(len(c.decode("utf-8", "replace").split("\n")) - 1 for c in chunks)


def parse_only(chunks: list[bytes]) -> int:
    parser = NodeLogParser("node1")
    return sum(len(parse_chunk(parser, c, time.time())) for c in chunks)


def parse_and_store(chunks: list[bytes], work: Path, bars: BarKeeper | None = None) -> int:
    run_dir = Path(tempfile.mkdtemp(dir=work))
    store = Store(run_dir)
    store.add_node("node1", 0)
    parser = NodeLogParser("node1")
    done, n = 0, 0
    for c in chunks:
        events = parse_chunk(parser, c, time.time())
        if bars is not None:
            events = bars.take(events)
        done += len(c)
        store.apply(events, {"node1": done})
        n += len(events)
    if bars is not None:
        store.apply(bars.drain())
    store.close()
    shutil.rmtree(run_dir, ignore_errors=True)
    return n


def metric_flood(lines: int, ranks: int, block: int, matching: bool) -> bytes:
    """Lines that every recognizer passes over (``matching=False``), or that one reads."""
    out = []
    for n in range(lines):
        r = (n // block) % ranks
        if matching:
            out.append(f"[ddptui {r} {r}] iter {n}: loss {1.0 / (1 + n % 977):.4f}, "
                       f"time {10 + n % 7}.25ms, mfu 31.{n % 89:02d}%\n")
        else:
            out.append(f"[ddptui {r} {r}] step {n} rank {r} ppl 3.{n % 997:03d} "
                       f"grad_norm 1.02 tokens/s 51234\n")
    return "".join(out).encode()


def parse_scan(chunks: list[bytes]) -> int:
    parser, scanner = NodeLogParser("node1"), Scanner("node1")
    return sum(len(scanner.scan(parse_chunk(parser, c, time.time()))) for c in chunks)


def parse_scan_store(chunks: list[bytes], scan: bool = True) -> int:
    work = Path(tempfile.mkdtemp(prefix="ddptui-bench-scan-"))
    store, parser, scanner = Store(work), NodeLogParser("node1"), Scanner("node1")
    store.add_node("node1", 0)
    done = n = 0
    for c in chunks:
        events = parse_chunk(parser, c, time.time())
        done += len(c)
        events = scanner.scan(events) if scan else events
        store.apply(events, {"node1": done})
        n += len(events)
    store.close()
    shutil.rmtree(work, ignore_errors=True)
    return n


def recognizer_cost(opts: argparse.Namespace) -> int:
    print(f"{opts.lines} lines from {opts.ranks} ranks in blocks of {opts.block}, "
          f"{opts.rounds} rounds (medians, per CPU second):")
    for matching in (False, True):
        chunks = chunks_of(metric_flood(opts.lines, opts.ranks, opts.block, matching))
        times: dict[str, list[float]] = {"parser": [], "scan": [], "store": [], "both": []}
        for r in range(opts.rounds):
            order = [("parser", parse_only), ("scan", parse_scan),
                     ("store", lambda c: parse_scan_store(c, scan=False)),
                     ("both", parse_scan_store)]
            for name, fn in order[r % 4:] + order[:r % 4]:
                t0 = time.process_time()
                fn(chunks)
                times[name].append(time.process_time() - t0)
        rate = {k: opts.lines / median(v) for k, v in times.items()}
        print(f"  {'every line a metric' if matching else 'no line a metric':20} parser "
              f"{rate['parser']:12,.0f} lines/s, with recognizers {rate['scan']:12,.0f} "
              f"lines/s: {rate['scan'] / rate['parser']:.3f}x")
        print(f"  {'':20} parser + store {rate['store']:10,.0f} lines/s, with recognizers "
              f"{rate['both']:10,.0f} lines/s: {rate['both'] / rate['store']:.3f}x")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lines", type=int, default=500_000)
    p.add_argument("--ranks", type=int, default=16)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--block", type=int, default=1000,
                   help="lines of one rank in a row (1: interleaved line by line)")
    p.add_argument("--recognizers", action="store_true",
                   help="the metric recognizers' cost (none match / every line matches)")
    opts = p.parse_args()
    if opts.recognizers:
        return recognizer_cost(opts)
    chunks = chunks_of(flood_bytes(opts.lines, opts.ranks, opts.block))
    bar_chunks = chunks_of(bar_bytes(opts.lines, opts.ranks, opts.block))
    work = Path(tempfile.mkdtemp(prefix="ddptui-bench-ingest-"))
    times: dict[str, list[float]] = {k: [] for k in ("raw", "parser", "store", "bars raw",
                                                     "bars parser", "bars store")}
    try:
        for r in range(opts.rounds):
            order = [("raw", lambda: raw_split(chunks)), ("parser", lambda: parse_only(chunks)),
                     ("store", lambda: parse_and_store(chunks, work)),
                     ("bars raw", lambda: raw_split(bar_chunks)),
                     ("bars parser", lambda: parse_only(bar_chunks)),
                     ("bars store", lambda: parse_and_store(bar_chunks, work, BarKeeper()))]
            for name, fn in order[r % 6:] + order[:r % 6]:
                t0 = time.process_time()
                count = fn()
                times[name].append(time.process_time() - t0)
                if name.endswith("raw") and count != opts.lines:
                    raise RuntimeError(f"split {count} lines, wrote {opts.lines}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rate = {k: opts.lines / median(v) for k, v in times.items()}
    print(f"{opts.lines} lines from {opts.ranks} ranks in blocks of {opts.block}, "
          f"{opts.rounds} rounds (medians, per CPU second):")
    print(f"  raw line splitting {rate['raw']:12,.0f} lines/s")
    print(f"  parser             {rate['parser']:12,.0f} lines/s  "
          f"{rate['parser'] / rate['raw']:.3f}x raw")
    print(f"  parser + store     {rate['store']:12,.0f} lines/s  "
          f"{rate['store'] / rate['raw']:.3f}x raw")
    print("a progress-bar flood of as many lines (states, an ordinary line every 1,000):")
    print(f"  raw line splitting {rate['bars raw']:12,.0f} lines/s")
    print(f"  parser             {rate['bars parser']:12,.0f} lines/s  "
          f"{rate['bars parser'] / rate['bars raw']:.3f}x raw")
    print(f"  parser+keeper+store{rate['bars store']:12,.0f} lines/s  "
          f"{rate['bars store'] / rate['bars raw']:.3f}x raw, "
          f"{rate['bars store'] / rate['store']:.2f}x the plain flood's parser + store")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
