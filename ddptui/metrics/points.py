"""A run's recorded metric points, as ``metrics.jsonl`` holds them: for ``ddptui logs
--metrics``, for notebooks, and for the dashboard's overlay of a past run.

One record a line, written by the store's mirror from each :class:`~ddptui.events.Metric`:
its node, rank, kind, step, time and attempt, then every value by name. A record of ddptui's
own carries no recognizer (``@ddptui``); a recognized one names it and its step kind. A
:class:`~ddptui.events.MetricRun` (a flood's run of metric lines) is one record holding its
lines' text (``lines``) instead of a step and values: one write for the run, where a JSON
encoding of every point was most of what a flood cost; :func:`points` reads its lines again
with its recognizer, into exactly the points a record per line gives. Pure: the lines come in,
points go out.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass

from ddptui.events import JSON, Metric, MetricRun
from ddptui.metrics.bulk import made_from

#: A record's fields that are not series values.
FIELDS = frozenset({"node", "rank", "kind", "step", "time", "attempt", "recognizer",
                    "step_kind", "seq"})
COLUMNS = ("node", "rank", "step", "step_kind", "name", "value", "recognizer", "time")


@dataclass(frozen=True, slots=True)
class Point:
    node: str
    rank: int
    step: int | float | None
    step_kind: str
    name: str
    value: float
    recognizer: str
    time: float


#: Printable ASCII but for ``"`` and ``\``: text that goes into a JSON string as it is.
_PLAIN = bytes(c for c in range(32, 127) if c not in b'"\\') + b"\n"


def record(ev: Metric) -> dict[str, JSON]:
    """A metric's line of ``metrics.jsonl``, as a dict."""
    rec: dict[str, JSON] = {"node": ev.node, "rank": ev.rank, "kind": ev.kind, "step": ev.step,
           "time": ev.time, "attempt": ev.attempt, **ev.values, **ev.extra}
    if ev.recognizer != "ddptui":  # read from an ordinary line (ddptui.metrics)
        rec.update(recognizer=ev.recognizer, step_kind=ev.step_kind)
    return rec


def run_record(run: MetricRun) -> str:
    """A run's line of ``metrics.jsonl``: its lines' text whole, escaped without a pass of the
    JSON encoder when, as a flood's are, they are plain ASCII."""
    head = json.dumps({"node": run.node, "rank": run.rank, "kind": "metric", "time": run.time,
                       "attempt": run.attempt, "recognizer": run.recognizer,
                       "step_kind": run.step_kind})
    text = run.text
    if text.isascii() and not text.encode("ascii").translate(None, _PLAIN):
        return f'{head[:-1]}, "lines": "{text.replace(chr(10), chr(92) + "n")}"}}'
    return f'{head[:-1]}, "lines": {json.dumps(text)}}}'


def points(lines: Iterable[str]) -> Iterator[Point]:
    """Every numeric value of every record, in the order recorded; a torn or foreign line
    (a killed session's last) is passed over."""
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        text = rec.get("lines")
        if isinstance(text, str) and "step" not in rec:
            try:
                made = made_from(text, str(rec["recognizer"]), str(rec.get("node", "")),
                                 int(rec.get("rank", -1)), float(rec.get("time", 0.0)),
                                 int(rec.get("attempt", 0)))
            except (KeyError, ValueError, TypeError):
                continue
            for ev in made:
                yield from _points_of(record(ev))
        else:
            yield from _points_of(rec)


def _points_of(rec: dict[str, JSON]) -> Iterator[Point]:
    rank, step, t = rec.get("rank", -1), rec.get("step"), rec.get("time", 0.0)
    if not isinstance(rank, int | float) or not isinstance(t, int | float):
        return  # a foreign record, with no rank or time to place its values by
    head = (str(rec.get("node", "")), int(rank), step if isinstance(step, int | float) else None,
            str(rec.get("step_kind", "step")))
    by = str(rec.get("recognizer", "ddptui"))
    for name, value in rec.items():
        if name in FIELDS or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        yield Point(*head, name, float(value), by, float(t))


def series_of(found: Iterable[Point], name: str) -> dict[int, tuple[list[float], list[float]]]:
    """Each rank's (steps, values) of series ``name``: what the overlay draws."""
    out: dict[int, tuple[list[float], list[float]]] = {}
    for p in found:
        if p.name != name or p.step is None:
            continue
        xs, ys = out.setdefault(p.rank, ([], []))
        if xs and xs[-1] == p.step:  # a later value of the same step wins, as in the store
            ys[-1] = p.value
            continue
        xs.append(float(p.step))
        ys.append(p.value)
    return out


#: A column added after ``step``: its name, and its value of a point's rank, step and time
#: (None: blank), e.g. the point's x on an axis (``ddptui.metrics.align``).
Extra = tuple[str, Callable[[int, float | None, float], float | None]]


def as_text(found: Iterable[Point], style: str, extra: Extra | None = None) -> Iterator[str]:
    """Lines to print: ``json`` (one object a point), ``csv`` (a header first), or columns."""
    name, of = extra if extra is not None else ("", None)
    if style == "json":
        for p in found:
            rec: dict[str, JSON] = asdict(p)
            if of is not None:
                rec[name] = of(p.rank, p.step, p.time)
            yield json.dumps(rec)
        return
    if style == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="")
        at = COLUMNS.index("step") + 1
        w.writerow(COLUMNS if of is None else (*COLUMNS[:at], name, *COLUMNS[at:]))
        yield buf.getvalue()
        for p in found:
            buf.seek(0)
            buf.truncate()
            row: list[object] = [getattr(p, c) for c in COLUMNS]
            if of is not None:
                x = of(p.rank, p.step, p.time)
                row.insert(at, "" if x is None else f"{x:.10g}")
            w.writerow(row)
            yield buf.getvalue()
        return
    head = "" if of is None else f" {name.upper():>12}"
    yield f"{'NODE':<12} {'RANK':>4} {'STEP':>10}{head} {'KIND':<6} {'NAME':<24} {'VALUE':>12}  BY"
    for p in found:
        step = f"{'-' if p.step is None else f'{p.step:g}':>10}"
        if of is not None:
            x = of(p.rank, p.step, p.time)
            step += f" {'-' if x is None else f'{x:.6g}':>12}"
        yield (f"{p.node:<12} {p.rank:>4} {step} {p.step_kind:<6} {p.name:<24} "
               f"{p.value:>12.6g}  {p.recognizer}")
