"""The ranks' stacks sampled while the run is up, for any script: a straggler is the rank that
waits least inside a collective (:mod:`ddptui.insight.straggler`, "stacks").

Every :data:`config.health.stack_sample_every <ddptui.config.model.HealthConfig>` seconds, a
round: on every node at once, over the run's own connection (as the stall path takes stacks,
:mod:`ddptui.remote.stacks`), a node program (:mod:`ddptui.nodeprog.stack_share`) takes
:data:`SAMPLES` ``py-spy dump`` samples of each rank, :data:`GAP_S` apart, and counts on the
node those inside a collective or its wait; only the counts come back, as one
:class:`~ddptui.events.StackCount` a node, through the session's queue to the store (and the
mirror, and a dashboard's replica), whose judge reads them.

Its cost, measured on a loaded 2-CPU machine (``tests/data/stacks/README.md``): a Python-only
dump pauses the rank about 4 ms (25 ms of py-spy's own wall time); a sample inside
``loss.backward()`` is taken again with ``--native`` (DDP's wait shows only there), which
paused the rank up to 0.35 s, at most :data:`NATIVE` a rank a round. So a rank pauses about
40 ms a round, and up to 1.4 s in a DDP script: at the default minute, about 0.1 % and 2 % of
its time. A node where sampling cannot run (no py-spy, ptrace refused) says why once and is
not asked again.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from ddptui import nodeprog
from ddptui.config import HostsConfig
from ddptui.events import Event, Level, StackCount
from ddptui.nodeprog import stack_share
from ddptui.rank_stacks import DUMP_TIMEOUT_S, PTRACE_HINT
from ddptui.remote import nodeops
from ddptui.remote.reach import Done, map_at_once
from ddptui.remote.stacks import HOW_TO_GET
from ddptui.transport.base import PythonCommand, Transport

SAMPLES = 10
GAP_S = 0.2
NATIVE = 4
SRC = nodeprog.source(stack_share)


def sample_cmd(python: str, run_id: str, node_rank: int) -> PythonCommand:
    return nodeops.python_cmd(python, SRC, nodeops.marker(run_id, node_rank), str(SAMPLES),
                              f"{GAP_S:g}", str(NATIVE), f"{DUMP_TIMEOUT_S:g}")


def counted(node: str, round_no: int, python: str, stdout: str, stderr: str, every: float,
            now: float) -> StackCount | None:
    """The node's answer as an event: its counts, or why it has none (None: no rank there
    to sample, as before the ranks start or after they end)."""
    d: dict[str, Any] | None = nodeops.last_json(stdout, "ranks")
    if d is None:
        why = (stderr.strip().splitlines() or ["no answer"])[-1]
        return StackCount(node, now, round_no, {}, f"the stack sampler failed on {node}: {why}")
    if d.get("py_spy") is None:
        return StackCount(node, now, round_no, {}, f"py-spy is not on {node}: "
                          + HOW_TO_GET.format(python=d.get("python") or python))
    rows = d["ranks"]
    counts = {int(r["rank"]): (int(r["samples"]), int(r["inside"])) for r in rows
              if not r["error"]}
    refused = [r for r in rows if r["error"]]
    if not rows or (not refused and not any(n for n, _ in counts.values())):
        return None
    problem = ""
    if refused and not counts:
        r = refused[0]
        hint = PTRACE_HINT if "ermission" in r["error"] or "not permitted" in r["error"] else ""
        problem = f"py-spy could not read rank {r['rank']} on {node}: {r['error']}{hint}"
    longest = d.get("longest_s") or {}
    python_ms = 1000 * float(longest.get("python", 0))
    cost = (f"{SAMPLES} py-spy samples a rank every {every:g} s, each {python_ms:.0f} ms of "
            "py-spy at most")
    if float(longest.get("native", 0)):
        cost += (f", up to {NATIVE} of them again with --native inside backward, "
                 f"{float(longest['native']):.1f} s each at most")
    return StackCount(node, now, round_no, counts, problem, cost)


class StackSampler(threading.Thread):
    """Rounds of sampled stacks on every node until :attr:`halt`; each node's answer goes
    to ``publish``. Off when the hosts file's period is 0."""

    def __init__(self, config: HostsConfig, run_id: str,
                 transport: Callable[[str], Transport | None],
                 publish: Callable[[str, list[Event]], None],
                 note: Callable[[str, str, Level], None]) -> None:
        super().__init__(name="ddptui-stack-sampler", daemon=True)
        self.config, self.run_id = config, run_id
        self.transport, self.publish, self.note = transport, publish, note
        self.every = config.health.stack_sample_every
        self.halt = threading.Event()
        self.given_up: dict[str, str] = {}  # node -> why it is not sampled

    def run(self) -> None:
        round_no = 0
        try:
            while not self.halt.wait(self.every):
                round_no += 1
                names = [n.name for n in self.config.nodes if n.name not in self.given_up]
                for got in map_at_once(names, functools.partial(self._one, round_no=round_no)):
                    if isinstance(got, Done) and got.value is not None:
                        self._said(got.value)
        except Exception as e:  # a bug must not vanish with the thread: the run goes on
            self.note(self.config.nodes[0].name, f"ddptui stopped sampling the ranks' "
                      f"stacks: {e!r}", Level.WARNING)

    def _one(self, name: str, round_no: int) -> StackCount | None:
        node = self.config.node(name)
        t = self.transport(name)
        if t is None:
            return None
        res = t.run(sample_cmd(node.python, self.run_id, self.config.node_rank(node)),
                    timeout=SAMPLES * (GAP_S + 2 * DUMP_TIMEOUT_S) + 30)
        return counted(name, round_no, node.python, res.stdout, res.stderr, self.every,
                       time.time())

    def _said(self, ev: StackCount) -> None:
        if ev.problem and not ev.counts:
            self.given_up[ev.node] = ev.problem
            self.note(ev.node, f"the ranks' stacks are not sampled here: {ev.problem}",
                      Level.INFO)
        self.publish(ev.node, [ev])

    def end(self) -> None:
        self.halt.set()
