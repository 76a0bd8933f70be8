"""Log streaming: lines/s from flooding ranks to the local per-rank logs, on 1, 4 and 16 hosts.

One command: ``python bench/stream.py`` (as root: it builds a namespace cluster of 16 hosts).
``--long`` adds the 10-minute memory run.

Flood: one rank per host writes ``--lines`` numbered lines as fast as it can (100 whole
lines per write: torchrun's tee copies a line cut by a flush in two), through torchrun's
``--tee`` into the node's ``node.log``; the controller (``Session.launch``, as ``ddptui
run`` does, without a face printing them) follows every node over its SSH connection into
the store and the per-rank logs. Figures, same run:

* the ranks' own write rate (lines / time from the first rank's first line to the last
  rank's last, as the ranks clock it);
* ddptui's delivery rate: lines / time from the first line written to the last line in the
  store (and so in ``ranks/rank<N>.log``);
* ``ssh host cat node.log``, the same bytes through OpenSSH, one per node, all at once: the
  limit of the SSH path on this machine (target: ddptui >= 0.5x per node);
* torchrun's tee: when the nodes' ``node.log`` held every line. Nothing that reads
  torchrun's prefixed output live can be faster, so ddptui/tee says how much of the live
  figure is ddptui's;
* ``ddptui attach`` of the finished run from a state dir holding only its ``run.json``: the
  whole pipeline (SSH reads, parsing, store, mirror) on the same bytes as ``ssh cat``, with no
  tee ahead of it; the rank logs it writes must equal the live run's, byte for byte.

Every rank log is then read back: each rank's numbers in order, none lost, none twice.

Latency: 16 ranks print ``--rate`` lines/s each (a moderate, steady rate), each line carrying
the time it was written; the figure is written-to-store time (the dashboard then shows it at
its next frame; see bench/ui_latency.py), p50 and p95 (target p95 <= 300 ms).

Memory (``--long``): 16 ranks x 1,000 lines/s for ``--long-minutes`` (10), the controller's
RSS sampled every 10 s; flat means the last sample is within 10% (or 20 MiB) of the one after
the first minute. Without ``--long`` the same runs for 60 s.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_setup import ROOT, Cluster, Host, hosts_file, make_cluster, median

sys.path.insert(0, str(ROOT))

from ddptui.config import load_config
from ddptui.events import LineRun, LogLine
from ddptui.live.follow import Batch
from ddptui.live.session import Session
from ddptui.store import rundir

FLOOD = """import os, sys, time
r, n = os.environ["RANK"], int(os.environ["FLOOD_LINES"])
pad = "x" * 40
t0 = time.time()
for j in range(0, n, 100):  # whole lines per write: torchrun's tee splits a partial line
    sys.stdout.write("".join(f"L {r} {i} {pad}\\n" for i in range(j, min(n, j + 100))))
    sys.stdout.flush()
print(f"T {r} {t0} {time.time()}", flush=True)
"""
PACED = """import os, time
r, rate, secs = os.environ["RANK"], float(os.environ["RATE"]), float(os.environ["SECS"])
start, i = time.time(), 0
while time.time() - start < secs:
    print(f"P {r} {i} {time.time()}", flush=True)
    i += 1
    time.sleep(max(0.0, start + i / rate - time.time()))
"""
TIMEOUT_S = 420.0


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Counter:
    """A listener on the controller's batches: counts worker lines, notes when all arrived."""

    def __init__(self, expected: int, prefix: str, latencies: bool = True) -> None:
        self.expected, self.prefix, self.keep = expected, prefix, latencies
        self.count = 0
        self.first = self.last = 0.0
        self.latencies: list[float] = []
        self.torn = 0
        self.all_in = threading.Event()

    def __call__(self, batch: Batch) -> None:
        now = time.time()
        for ev in batch.events:
            if type(ev) is LineRun and self.prefix == "L ":  # a flood's lines, taken whole
                self.count += ev.text.count("\nL ") + ev.text.startswith("L ")
                continue
            for line in ev.lines() if type(ev) is LineRun else (ev,):
                if type(line) is LogLine and line.rank is not None \
                        and line.text.startswith(self.prefix):
                    self._line(line, now)
        self._seen(now)

    def _line(self, line: LogLine, now: float) -> None:
        self.count += 1
        if self.prefix == "P " and self.keep:
            try:
                self.latencies.append(now - float(line.text.rsplit(" ", 1)[1]))
            except ValueError:  # a line torn in two on its way (torch's own tee did that)
                self.torn += 1

    def _seen(self, now: float) -> None:
        if self.count and not self.first:
            self.first = now
        if self.count >= self.expected and not self.all_in.is_set():
            self.last = now
            self.all_in.set()


def _launch(c: Cluster, hosts: list[Host], work: Path, script: str,
            env: dict[str, str], counter: Counter) -> Session:
    ctl = Session(load_config(hosts_file(c, hosts, work, script, env=env)),
                     state_root=work / "state")
    ctl.add_listener(counter)
    ctl.launch()
    return ctl


def flood(c: Cluster, n: int, lines: int, work: Path) -> dict[str, float]:
    hosts = c.hosts[:n]
    counter = Counter(n * lines, "L ")
    ctl = _launch(c, hosts, work, FLOOD, {"FLOOD_LINES": str(lines)}, counter)
    teed = tee_watch(ctl, n, lines)
    peak = [rss_mb()]

    def sample_rss() -> None:  # the backlog is bounded: this must not grow with the flood
        while not counter.all_in.wait(0.25):
            peak.append(max(peak[-1], rss_mb()))

    threading.Thread(target=sample_rss, daemon=True).start()
    if not counter.all_in.wait(TIMEOUT_S):
        ctl.stop(grace=1)
        raise RuntimeError(f"{n} hosts: {counter.count} of {n * lines} lines arrived")
    result = ctl.wait(120)
    if result is None or result.exit_code != 0:
        raise RuntimeError(f"{n} hosts: the run ended {result}")
    spans = [ln.text.split()[2:4] for ln in ctl.store.recent_lines() if ln.text.startswith("T ")]
    if len(spans) != n:  # the ring may have dropped them; the rank logs hold every line
        spans = []
        for r in range(n):
            tail = (ctl.local_dir / rundir.rank_log_name(r)).read_text().splitlines()[-1]
            spans.append(tail.split()[2:4])
    start, end = min(float(s) for s, _ in spans), max(float(e) for _, e in spans)
    deadline = time.monotonic() + 30
    while not teed and time.monotonic() < deadline:
        time.sleep(0.05)
    check_rank_logs(ctl.local_dir, n, lines)
    cat = ssh_cat(c, hosts, [ctl.local_dir / rundir.node_log(Path("."), h.name) for h in hosts])
    caught = catch_up(ctl.run_id, ctl.local_dir, work / "attach")
    total = n * lines
    return {"write": total / (end - start), "tee": total / (teed[0] - start),
            "ddptui": total / (counter.last - start), "cat": total / cat,
            "attach": total / caught, "rss_peak": peak[-1], "rss_before": peak[0]}


def catch_up(run_id: str, run_dir: Path, root: Path) -> float:
    """Seconds for ``ddptui attach`` to take in the whole finished run from nothing local
    (what a laptop that slept through a run does): a fresh state dir holding only the run's
    ``run.json``, every node's log read from its start over SSH, parsed, stored and mirrored,
    to the run's end. The same bytes as ``ssh cat``, and no torchrun tee ahead of it."""
    fresh = rundir.run_dir(root, run_id)
    fresh.mkdir(parents=True)
    shutil.copy(run_dir / rundir.RUN_JSON, fresh / rundir.RUN_JSON)
    t0 = time.perf_counter()
    ctl = Session.attach(run_id, state_root=root)
    if ctl.wait(TIMEOUT_S) is None:
        raise RuntimeError("attach did not take in the finished run")
    took = time.perf_counter() - t0
    for path in sorted((run_dir / rundir.RANKS).glob("rank*.log")):  # not their .seq indexes
        name = str(path.relative_to(run_dir))
        if (fresh / name).read_bytes() != (run_dir / name).read_bytes():
            raise RuntimeError(f"attach's {name} differs from the live run's")
    return took


#: The tee watcher, in a process of its own so that it takes no time from the controller's.
TEE_WATCH = """
import sys, time
n, paths = int(sys.argv[1]), sys.argv[2:]
seen, offsets, end = [0] * len(paths), [0] * len(paths), time.monotonic() + %d
while sum(seen) < n and time.monotonic() < end:
    for i, path in enumerate(paths):
        with open(path, "rb") as f:
            f.seek(offsets[i])
            data = f.read()
        cut = data.rfind(b"\\n") + 1
        offsets[i] += cut
        seen[i] += data[:cut].count(b"] L ")
    time.sleep(0.005)
print(time.time(), flush=True)
"""


def tee_watch(ctl: Session, n: int, lines: int) -> list[float]:
    """When the nodes' own ``node.log`` files held every line (torchrun's --tee wrote them).

    The hosts share this machine's file system, so the remote files are read here directly,
    at no cost to the SSH path, by a process of its own. The returned list gets the time once
    it is known.
    """
    out: list[float] = []
    nodes = ctl.plan.nodes if ctl.plan is not None else ()
    paths = [rundir.in_node_dir(nl.node_dir, rundir.NODE_LOG) for nl in nodes]
    proc = subprocess.Popen([sys.executable, "-c", TEE_WATCH % TIMEOUT_S, str(n * lines), *paths],
                            stdout=subprocess.PIPE, text=True)

    def wait() -> None:
        said = proc.communicate(timeout=TIMEOUT_S + 30)[0].strip()
        out.append(float(said) if said else time.time())

    threading.Thread(target=wait, daemon=True).start()
    return out


def check_rank_logs(run_dir: Path, n: int, lines: int) -> None:
    """Each rank's numbered lines, in order, once each."""
    for r in range(n):
        got = [int(ln.split()[2]) for ln in
               (run_dir / rundir.rank_log_name(r)).read_text().splitlines() if ln.startswith("L ")]
        if got != list(range(lines)):
            lost = lines - len(set(got))
            raise RuntimeError(f"rank {r}: {len(got)} lines, {lost} lost, "
                               f"{len(got) - len(set(got))} repeated or out of order")


def ssh_cat(c: Cluster, hosts: list[Host], node_logs: list[Path]) -> float:
    """Seconds for ``ssh host cat node.log`` on every host at once (the same bytes)."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(c.ssh_argv(h, f"cat {log}"), stdout=subprocess.PIPE,
                              stdin=subprocess.DEVNULL) for h, log in zip(hosts, node_logs,
                                                                           strict=True)]
    for p in procs:
        assert p.stdout is not None
        while p.stdout.read(1 << 20):
            pass
        p.wait(60)
    return time.perf_counter() - t0


def paced(c: Cluster, n: int, rate: float, secs: float, work: Path,
          sample_every: float = 0.0) -> tuple[list[float], list[float], int]:
    """(write-to-store latencies, RSS samples in MiB, lines torchrun tore) of ``n`` ranks at
    ``rate`` lines/s."""
    counter = Counter(10**12, "P ", latencies=not sample_every)  # the memory run: no list
    ctl = _launch(c, c.hosts[:n], work, PACED, {"RATE": str(rate), "SECS": str(secs)}, counter)
    samples: list[float] = []
    end = time.monotonic() + secs + TIMEOUT_S
    next_sample = time.monotonic()
    while not ctl.done and time.monotonic() < end:
        if sample_every and time.monotonic() >= next_sample:
            samples.append(rss_mb())
            next_sample += sample_every
        time.sleep(0.2)
    if ctl.wait(60) is None:
        ctl.stop(grace=1)
    return counter.latencies, samples, counter.torn


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--lines", type=int, default=200_000, help="lines per rank in the flood")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--rate", type=float, default=50.0, help="lines/s per rank, latency run")
    p.add_argument("--latency-secs", type=float, default=20.0)
    p.add_argument("--long", action="store_true", help="the 10-minute memory run")
    p.add_argument("--long-minutes", type=float, default=10.0)
    p.add_argument("--memory-secs", type=float, default=60.0)
    opts = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ddptui-bench-stream-"))
    c = make_cluster(max(opts.sizes), work / "cluster")
    ok = True
    try:
        for n in opts.sizes:
            rows = [flood(c, n, opts.lines, work / f"flood-{n}-{r}") for r in range(opts.rounds)]
            got = {k: median([row[k] for row in rows]) for k in rows[0]}
            ok &= got["ddptui"] >= 0.5 * got["cat"] and got["attach"] >= 0.5 * got["cat"]
            print(f"{n:2d} hosts x {opts.lines} lines: ranks wrote {got['write']:,.0f} lines/s, "
                  f"torchrun's tee into node.log {got['tee']:,.0f} lines/s, ddptui delivered "
                  f"{got['ddptui']:,.0f} lines/s ({got['ddptui'] / n:,.0f} per node), "
                  f"ssh cat {got['cat']:,.0f} lines/s, attach caught up at "
                  f"{got['attach']:,.0f} lines/s; live: ddptui/ssh-cat "
                  f"{got['ddptui'] / got['cat']:.2f} (target >= 0.5), ddptui/tee "
                  f"{got['ddptui'] / got['tee']:.2f}; catching up: attach/ssh-cat "
                  f"{got['attach'] / got['cat']:.2f}; none lost or repeated; controller RSS "
                  f"{got['rss_before']:.0f} MiB before, peak {got['rss_peak']:.0f} MiB",
                  flush=True)
        n = max(opts.sizes)
        lat, _, torn = paced(c, n, opts.rate, opts.latency_secs, work / "latency")
        p95 = pct(lat, 0.95)
        ok &= p95 <= 0.3
        print(f"latency, {n} ranks x {opts.rate:g} lines/s: p50 {pct(lat, 0.5) * 1e3:.0f} ms, "
              f"p95 {p95 * 1e3:.0f} ms over {len(lat)} lines (target p95 <= 300 ms); "
              f"{torn} line(s) torn in two by torchrun's tee",
              flush=True)
        secs = opts.long_minutes * 60 if opts.long else opts.memory_secs
        if secs <= 0:  # --memory-secs 0: the smoke test's shortcut
            print("memory run skipped")
            print("all targets met" if ok else "some target missed")
            return 0 if ok else 1
        _, rss, _ = paced(c, n, 1000.0, secs, work / "memory", sample_every=10.0)
        base = rss[min(6, len(rss) - 1)]
        flat = rss[-1] <= max(base * 1.1, base + 20)
        ok &= flat
        print(f"memory, {n} ranks x 1000 lines/s for {secs:.0f} s: controller RSS "
              f"{base:.0f} MiB after the first minute, {rss[-1]:.0f} MiB at the end, "
              f"max {max(rss):.0f} MiB ({'flat' if flat else 'GROWING'}); samples "
              f"{[round(x) for x in rss]}", flush=True)
    finally:
        c.close()
        shutil.rmtree(work, ignore_errors=True)
    print("all targets met" if ok else "some target missed")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
