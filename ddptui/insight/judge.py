"""What the curves tell, judged once for every face: the run's per-rank points in, findings
out, each in ddptui's words, with its rank and node.

The faces never judge: the store of a live run holds one :class:`Judge` (its verdicts are the
nodes table's straggler marks and the headless face's lines), and ``ddptui logs RUN`` feeds
one the run's ``metrics.jsonl``, so a run reads the same live and afterwards. The rules are
the modules': :mod:`~ddptui.insight.divergence`, :mod:`~ddptui.insight.straggler` and
:mod:`~ddptui.insight.marks` (NaN and spikes, the chart's own rule).

A step is judged across ranks once it is *settled*: every rank that reported to the same
table has reported a later step, or the newest step is :data:`FAR_BEHIND` steps past it (a
rank that stopped printing holds nothing up for long, and memory stays bounded), or the run
ended. Ranks that are not synchronized each step are so judged at the same step, however far
apart they run. A rank's point of a step already judged is left out. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, TypeVar

from ddptui.insight.divergence import DivergenceWatch
from ddptui.insight.marks import MarkFinder, MarkKind
from ddptui.insight.straggler import Evidence, StackStraggle, StackWatch, Straggle, StragglerWatch
from ddptui.metrics.recognizers import NAN_COUNT

#: Steps the slowest rank may lag the newest before a step is judged without it.
FAR_BEHIND = 100
#: The values a rank prints of its own timing (the bundled worker does, ``docs/metrics.md``).
COMPUTE, WAIT = "compute_ms", "wait_ms"
#: Most spikes of one rank and series said, the rest counted.
SPIKES_SAID = 5

V = TypeVar("V")


class Kind(StrEnum):
    DIVERGES = "diverges"
    STRAGGLER = "straggler"
    BEHIND_ONCE = "behind once"
    NAN = "NaN"
    SPIKE = "spike"


@dataclass(frozen=True, slots=True)
class Finding:
    kind: Kind
    rank: int
    node: str
    step: float
    text: str
    name: str = ""
    """The series it is about (none for a straggler)."""


def curve_judged(name: str) -> bool:
    """Whether a series is judged for divergence and spikes: losses and gradient norms.
    A learning rate's warm-up is no spike, and timing series are the straggler's."""
    low = name.lower()
    return "loss" in low or ("grad" in low and "norm" in low)


class _Pending(Generic[V]):
    """One table's points by step and rank, given out in step order once settled."""

    def __init__(self) -> None:
        self.steps: dict[float, dict[int, V]] = {}
        self.done: float | None = None  # the last step given out
        self.latest: dict[int, float] = {}  # each rank's newest step in the table

    def put(self, step: float, rank: int, value: V) -> bool:
        if self.done is not None and step <= self.done:
            return False
        self.steps.setdefault(step, {})[rank] = value
        if step > self.latest.get(rank, step - 1):
            self.latest[rank] = step
        return True

    def settled(self, final: bool) -> Iterator[tuple[float, dict[int, V]]]:
        if not self.steps:
            return
        newest = max(self.latest.values())
        every = min(self.latest.values())
        for step in sorted(self.steps):
            if not final and step >= every and step > newest - FAR_BEHIND:
                break
            self.done = step
            yield step, self.steps.pop(step)


@dataclass(frozen=True, slots=True)
class Told:
    """What the judge told so far, a copy for a face: the findings in the order found, the
    end-of-run summary, and the ranks that straggle now (the nodes table's marks)."""

    findings: tuple[Finding, ...] = ()
    summary: tuple[str, ...] = ()
    stragglers: frozenset[int] = frozenset()


@dataclass
class Judge:
    """The run's points, fed in the order they came; :meth:`judge` settles what it can."""

    findings: list[Finding] = field(default_factory=list)
    nodes: dict[int, str] = field(default_factory=dict)
    _curves: dict[str, _Pending[float]] = field(default_factory=dict)
    _diverging: dict[str, DivergenceWatch] = field(default_factory=dict)
    _arrival: _Pending[float] = field(default_factory=_Pending)
    _compute: _Pending[tuple[float, float | None]] = field(default_factory=_Pending)
    _stragglers: dict[Evidence, StragglerWatch] = field(default_factory=lambda: {
        e: StragglerWatch(e) for e in (Evidence.COMPUTE, Evidence.ARRIVAL)})
    stacks: StackWatch = field(default_factory=StackWatch)
    _marks: dict[tuple[int, str], MarkFinder] = field(default_factory=dict)
    _nans: dict[tuple[int, str], int] = field(default_factory=dict)
    _spikes: dict[tuple[int, str], int] = field(default_factory=dict)
    _steppers: set[int] = field(default_factory=set)
    _shared_steps: int = 0

    def add(self, rank: int, node: str, step: float | None, values: Mapping[str, float],
            time: float) -> None:
        """One record of a rank: its values at ``step``, reaching ddptui at ``time``."""
        self.nodes[rank] = node
        if step is None:
            return
        self._steppers.add(rank)
        for name, v in values.items():
            self._mark(rank, node, step, name, v)
            if curve_judged(name) and math.isfinite(v):
                self._curves.setdefault(name, _Pending()).put(step, rank, v)
        if rank not in self._arrival.steps.get(step, {}):  # its first record of the step
            self._arrival.put(step, rank, time)
        compute = values.get(COMPUTE)
        if compute is not None and math.isfinite(compute):
            wait = values.get(WAIT)
            self._compute.put(step, rank, (compute, wait))

    def add_stacks(self, node: str, round_no: int, counts: Mapping[int, tuple[int, int]],
                   problem: str = "", cost: str = "") -> None:
        """One node's burst of sampled stacks: rank -> (samples, inside a collective)."""
        self.stacks.add(node, round_no, counts, problem, cost)

    def _mark(self, rank: int, node: str, step: float, name: str, v: float) -> None:
        key = (rank, name)
        if name == NAN_COUNT:
            if v > 0:
                self._nan(key, node, step, f"Megatron-LM counted {v:g} nan iteration(s) at "
                          f"step {step:g}")
            return
        if not curve_judged(name):
            if not math.isfinite(v):
                self._nan(key, node, step, _not_finite(name, v, step))
            return
        finder = self._marks.get(key)
        if finder is None:
            finder = self._marks[key] = MarkFinder(rank)
        before = len(finder.marks)
        finder.extend([step], [v])
        for m in finder.marks[before:]:
            if m.kind is MarkKind.NAN:
                self._nan(key, node, step, _not_finite(name, v, step))
            else:
                self._spike(key, node, step, v, m.level or 0.0)
        del finder.marks[:]

    def _nan(self, key: tuple[int, str], node: str, step: float, what: str) -> None:
        n = self._nans[key] = self._nans.get(key, 0) + 1
        if n == 1:
            rank, name = key
            self.findings.append(Finding(
                Kind.NAN, rank, node, step, f"rank {rank} (node {node}): {what}: look at this "
                "rank's inputs and learning rate there", name))

    def _spike(self, key: tuple[int, str], node: str, step: float, v: float,
               level: float) -> None:
        n = self._spikes[key] = self._spikes.get(key, 0) + 1
        if n <= SPIKES_SAID:
            rank, name = key
            self.findings.append(Finding(
                Kind.SPIKE, rank, node, step, f"rank {rank} (node {node}): {name} spikes at "
                f"step {step:g}: {v:.4g} against its recent level {level:.4g}", name))

    def judge(self, final: bool = False) -> list[Finding]:
        """Judge the settled steps (every step, at the run's end); the findings new at it."""
        first = len(self.findings)
        for name, pending in self._curves.items():
            watch = self._diverging.setdefault(name, DivergenceWatch())
            for step, values in pending.settled(final):
                for d in watch.step(step, values):
                    node = self.nodes.get(d.rank, "?")
                    self.findings.append(Finding(
                        Kind.DIVERGES, d.rank, node, d.since,
                        f"rank {d.rank} (node {node}) diverges from the other ranks since "
                        f"step {d.since:g} ({name} {d.value:.3g} against {d.center:.3g} ± "
                        f"{d.spread:.2g} at step {d.step:g}): compare its data and inputs "
                        "with the others'", name))
        computed: set[float] = set()
        for step, by_rank in self._compute.settled(final):
            computed.add(step)
            waits = [c + w for c, w in by_rank.values() if w is not None]
            period = (sorted(waits)[len(waits) // 2] if waits else
                      sorted(c for c, _ in by_rank.values())[len(by_rank) // 2]) / 1000
            late = {r: c / 1000 for r, (c, _) in by_rank.items()}
            self._straggle(self._stragglers[Evidence.COMPUTE].step(step, late, period))
        for step, times in self._arrival.settled(final):
            if len(times) >= 2:
                self._shared_steps += 1
            if step not in computed:
                self._straggle(self._stragglers[Evidence.ARRIVAL].step(step, times))
        for found in self.stacks.judge(final):
            if self._stacks_tell():
                self._stack_straggle(found)
        return self.findings[first:]

    def _stacks_tell(self) -> bool:
        """Stacks name a straggler only where the ranks' own timing does not: no compute
        times, and no straggler named by the lines' arrival."""
        return (not self._stragglers[Evidence.COMPUTE].judged
                and not self._stragglers[Evidence.ARRIVAL].chronic)

    def _stack_straggle(self, s: StackStraggle) -> None:
        node = self.nodes.get(s.rank, "?")
        step = max(self._arrival.latest.values(), default=0.0)
        if s.chronic:
            self.findings.append(Finding(Kind.STRAGGLER, s.rank, node, step,
                                         _stack_text(s, node, self.stacks.cost)))
        else:
            self.findings.append(Finding(
                Kind.BEHIND_ONCE, s.rank, node, step,
                f"rank {s.rank} (node {node}) fell behind once, in one of {s.judged} rounds of "
                "sampled stacks: the others waited inside a collective for it there, and not "
                "in the rounds after"))

    def _straggle(self, found: list[Straggle]) -> None:
        for s in found:
            node = self.nodes.get(s.rank, "?")
            if s.chronic:
                text, kind = _chronic_text(s, node), Kind.STRAGGLER
            else:
                text = (f"rank {s.rank} (node {node}) fell behind once, at step {s.step:g}: "
                        f"{s.gap_s:.3g} s after the others, in steps of {s.period_s:.3g} s "
                        f"(judged by {s.evidence.words})")
                kind = Kind.BEHIND_ONCE
            self.findings.append(Finding(kind, s.rank, node, s.step, text))

    def stragglers(self) -> dict[int, Straggle]:
        """The chronic stragglers that still stand, by rank: the nodes table's marks."""
        out: dict[int, Straggle] = {}
        for e in (Evidence.ARRIVAL, Evidence.COMPUTE):
            out.update(self._stragglers[e].standing())
        return out

    def stack_stragglers(self) -> set[int]:
        return set(self.stacks.standing()) if self._stacks_tell() else set()

    def told(self) -> Told:
        return Told(tuple(self.findings), tuple(self.summary()),
                    frozenset(self.stragglers()) | self.stack_stragglers())

    def summary(self) -> list[str]:
        """Every finding in step order, with how often a NaN or a spike came again, and what
        could not be judged: the end of a run's report."""
        out = []
        for f in sorted(self.findings, key=lambda f: f.step):  # alike live and afterwards
            text = f.text
            more = (self._nans if f.kind is Kind.NAN else self._spikes
                    if f.kind is Kind.SPIKE else {}).get((f.rank, f.name), 1)
            if f.kind is Kind.NAN and more > 1:
                text += f" (and at {more - 1} later step(s))"
            for watch in self._stragglers.values():  # its figures over the whole run
                if f.kind is Kind.STRAGGLER and (s := watch.chronic.get(f.rank)) is not None:
                    text = _chronic_text(watch.now(s), f.node)
            if f.kind is Kind.STRAGGLER and f.rank in self.stacks.chronic:
                text = _stack_text(self.stacks.now(f.rank, 0), f.node, self.stacks.cost)
            out.append(text)
        for (rank, name), n in self._spikes.items():
            if n > SPIKES_SAID:
                out.append(f"rank {rank} (node {self.nodes.get(rank, '?')}): {name} spiked "
                           f"{n - SPIKES_SAID} more time(s)")
        out.extend(self._stacks_summary())
        if self._steppers and not self._shared_steps:
            who = ", ".join(map(str, sorted(self._steppers)))
            out.append(f"per-rank timing not revealed: only rank {who} printed its steps, so "
                       "no straggler can be named from them (print each rank's loss, or its "
                       "compute and wait times, to have one named)")
        return out

    def _stacks_summary(self) -> list[str]:
        """What the sampled stacks could not tell: why none were taken, or that no rank
        stands out in them (where no other evidence named one)."""
        if not self._stacks_tell():
            return []
        if self.stacks.judged == 0:
            return [f"per-rank timing not revealed by sampled stacks: {why}"
                    for why in sorted(set(self.stacks.problems.values()))]
        alike = self.stacks.alike()
        if alike is None:
            return []
        cost = f" ({self.stacks.cost})" if self.stacks.cost else ""
        return [f"sampled stacks name no straggler: each rank was inside a collective or its "
                f"wait in {alike[0]:.0%}–{alike[1]:.0%} of its samples, over "
                f"{self.stacks.judged} rounds{cost}"]


def _chronic_text(s: Straggle, node: str) -> str:
    return (f"rank {s.rank} (node {node}) is a straggler: the others waited for it at "
            f"{s.behind} of {s.judged} steps, {s.gap_s:.3g} s of each {s.period_s:.3g} s "
            f"step, judged by {s.evidence.words}; its Python stack (`ddptui stacks RUN_ID`) "
            "shows where it spends its time")


def _stack_text(s: StackStraggle, node: str, cost: str) -> str:
    spread = (f"{s.low:.0%}" if round(s.low, 2) == round(s.high, 2) else
              f"{s.low:.0%}–{s.high:.0%}")
    return (f"rank {s.rank} (node {node}) is a straggler: from {s.samples} sampled stacks of "
            f"it, it was inside a collective or its wait in {s.share:.0%} of them, the others "
            f"in {spread} of theirs (behind in {s.behind} of {s.judged} sampling rounds"
            f"{'; ' + cost if cost else ''}), judged by {Evidence.STACKS.words}; its Python "
            "stack (`ddptui stacks RUN_ID`) shows where it spends its time")


def _not_finite(name: str, v: float, step: float) -> str:
    return f"{name} is {v} at step {step:g}, not a finite number"
