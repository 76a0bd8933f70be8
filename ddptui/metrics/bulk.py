"""A run of metric lines proven at once, and its points made only when asked.

The scanner's per-line way (a regular expression, a reading, a :class:`Metric`, then a series
point and a JSON record each) costs about 8 µs a line; a flood of nanoGPT ``iter`` lines spent
97 % of the session's rate on it. Here a whole :class:`LineRun` is judged in a few passes in
C: its digits all made ``0`` (one ``bytes.translate``), its lines are a handful of distinct
*shapes* (``iter 000: loss 0.0000, time 00.00ms``), and each shape is read once by the
recognizer, its verdict kept.

Why a shape's verdict is every such line's: the recognizers in :data:`UNIFORM` decide from
where digits are, never from which digits they are (``\\d``, NUM, ``\\b`` treat every digit
alike, and their code only converts what matched), so a line reads, with a step, the same
series names and step kind, exactly when its shape does. Names holding a digit (which a shape
turns into ``0``) are refused, as is a line with no step (its step is the rank's count, which
is state). What a verdict cannot say, the values, is read from the lines themselves by
:func:`made`, with the recognizer's own function, only when a chart, a printer or a reader of
``metrics.jsonl`` wants the points: exactly the events the per-line scan makes (the repeat of
a state dropped as the scanner drops it), which ``tests/test_metric_runs.py`` checks. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from ddptui.events import Metric, MetricRun
from ddptui.metrics.recognizers import BUILT_IN, Recognizer

#: Recognizers whose verdict on a line depends on its digits' places only. Not Lightning (its
#: step depends on whether the epoch is 0), fairseq (its JSON refuses ``01`` but not ``10``),
#: the Hugging Face Trainer (``int()`` of ``2e308``, infinite, fails where ``1e308`` does not),
#: nor a hosts file's own pattern (anything may be in it).
UNIFORM = frozenset({"nanogpt", "megatron", "torchtitan", "pytorch_examples", "generic"})
BY_NAME: dict[str, Recognizer] = {r.name: r for r in BUILT_IN}
_ZEROS = bytes(48 if 48 <= c <= 57 else c for c in range(256))
#: A shape's verdict: (series names, step kind), or None when a line of it would not read.
Verdict = tuple[tuple[str, ...], str] | None
_VERDICTS: dict[tuple[str, bytes], Verdict] = {}
_MOST_VERDICTS = 4096
_MOST_SHAPES = 64  # a run with more distinct shapes than this goes line by line


def verdict(r: Recognizer, shape: bytes, gates: Sequence[str] | None) -> Verdict:
    """What a line of ``shape`` comes to through the scanner with ``r`` as the rank's first
    recognizer: read by ``r``, with a step, under those names; None when not all of that."""
    key = (r.name, shape)
    if key in _VERDICTS:
        return _VERDICTS[key]
    line = shape.decode("utf-8", "replace")
    found: Verdict = None
    if (gates is None or any(g in line for g in gates)) \
            and (not r.gates or any(g in line for g in r.gates)):
        try:
            reading = r.read(line)
        except Exception:  # the line's own values would fail alike: it goes line by line
            reading = None
        if reading is not None and reading.step is not None \
                and not any("0" in name for name in reading.values):
            found = (tuple(reading.values), reading.step_kind)
    if len(_VERDICTS) >= _MOST_VERDICTS:
        _VERDICTS.clear()
    _VERDICTS[key] = found
    return found


def fits(r: Recognizer, text: str, count: int, gates: Sequence[str] | None) -> Verdict:
    """The verdict every line of ``text`` (``count`` lines, each ending in a newline) shares,
    or None when one line would not read or two differ."""
    if r.name not in UNIFORM or r.redraws or (
            gates is not None and any(_has_digit(g) for g in gates)):
        return None
    zeroed = text.encode("utf-8", "surrogateescape").translate(_ZEROS)
    first = zeroed[:zeroed.index(b"\n") + 1]
    if zeroed == first * count:
        shapes: Sequence[bytes] = (first[:-1],)
    else:
        shapes = list(set(zeroed[:-1].split(b"\n")))
        if len(shapes) > _MOST_SHAPES:
            return None
    found = verdict(r, shapes[0], gates)
    if found is None:
        return None
    for shape in shapes[1:]:
        if verdict(r, shape, gates) != found:
            return None
    return found


#: A series' last point as the scanner keeps it: (step, values).
Last = tuple[object, dict[str, float]]


def repeats(last: Last | None, step: object, values: dict[str, float], redraws: bool) -> bool:
    """Whether a reading is its predecessor drawn again (no new point): the same values, at
    the same step, or at any step for a recognizer whose line is redrawn (a progress bar)."""
    return last is not None and last[1] == values and (redraws or last[0] == step)


def made(run: MetricRun) -> list[Metric]:
    """The run's points as the per-line scan makes them: one :class:`Metric` a line, less a
    line that repeats its predecessor's step and values (a state drawn again)."""
    return made_from(run.text, run.recognizer, run.node, run.rank, run.time, run.attempt)


def made_from(text: str, recognizer: str, node: str, rank: int, t: float, attempt: int
              ) -> list[Metric]:
    """:func:`made` for a run as ``metrics.jsonl`` records it."""
    r = BY_NAME[recognizer]
    out: list[Metric] = []
    last: Last | None = None
    for line in text[:-1].split("\n"):
        reading = r.read(line)
        if reading is None:  # not for a line of a run the scanner proved; kept honest anyway
            continue
        if repeats(last, reading.step, reading.values, r.redraws):
            continue
        last = (reading.step, reading.values)
        out.append(Metric(node, rank, "metric", reading.step, dict(reading.values), t, attempt,
                          {}, "", r.name, reading.step_kind))
    return out


def _has_digit(word: str) -> bool:
    return any(c.isdigit() for c in word)
