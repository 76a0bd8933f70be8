"""Everything the worker writes to stdout goes through :class:`Emitter`.

One writer keeps the ``--number-lines`` sequence contiguous across plain and metric lines,
and flushes each line, because torchrun's ``--tee`` reads a pipe and a block-buffered
stdout would show a live run in bursts.
"""

from __future__ import annotations

import json
import math
import sys
from typing import TextIO, TypeAlias

MARK = "@ddptui "  # the contract in DESIGN.md; ddptui.events.METRIC_MARK on the reading side
VERSION = 1
#: A metric's field as ``json`` writes it (:func:`clean` makes a non-finite float None).
Field: TypeAlias = (
    "str | int | float | bool | list[Field] | tuple[Field, ...] | dict[str, Field] | None")


def clean(value: Field) -> Field:
    """JSON without NaN/Infinity (not JSON at all): non-finite floats become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def format_metric(
    kind: str, rank: int, attempt: int, fields: dict[str, Field], seq: int | None = None
) -> str:
    head: dict[str, Field] = {"v": VERSION, "kind": kind, "rank": rank, "attempt": attempt}
    if seq is not None:
        head["seq"] = seq
    cleaned = {k: clean(v) for k, v in fields.items()}
    body = {k: v for k, v in cleaned.items() if v is not None and k not in head}
    return MARK + json.dumps(head | body, separators=(", ", ": "), allow_nan=False)


def format_plain(text: str, seq: int | None = None) -> str:
    return text if seq is None else f"[seq {seq}] {text}"


class Emitter:
    def __init__(
        self, rank: int, attempt: int, number_lines: bool = False, out: TextIO | None = None
    ) -> None:
        self.rank = rank
        self.attempt = attempt
        self.number_lines = number_lines
        self.seq = 0
        self._out = out

    def _seq(self) -> int | None:
        if not self.number_lines:
            return None
        seq = self.seq
        self.seq += 1
        return seq

    def _write(self, line: str) -> None:
        out = self._out or sys.stdout
        out.write(line + "\n")
        out.flush()

    def line(self, text: str) -> None:
        for part in text.splitlines() or [""]:
            self._write(format_plain(part, self._seq()))

    def metric(self, kind: str, **fields: Field) -> None:
        self._write(format_metric(kind, self.rank, self.attempt, fields, self._seq()))
