"""Smoothing as TensorBoard does it, so that a curve here looks like the one users know.

TensorBoard's scalar cards smooth with a debiased exponential moving average, weight 0.6 by
default: ``classicSmoothing`` in ``tensorboard/webapp/widgets/line_chart_v2/
data_transformer.ts`` (tensorflow/tensorboard at 412c86e). Its rules, kept here one for one:

* ``last`` starts at 0 and each finite value moves it: ``last = w * last + (1 - w) * y``;
* the value shown is ``last / (1 - w ** n)``, ``n`` the finite values so far (the debias: a
  mean started at 0 leans toward 0 until enough values came); with ``w == 1`` it is ``last``
  undivided (so 0 throughout, as TensorBoard draws it);
* a non-finite value (NaN, inf) is passed through as it is and neither moves ``last`` nor
  counts in ``n``;
* a series whose values all equal the first is returned as it is (TensorBoard's #786: a
  constant drawn with rounding wobble); NaN equals nothing, so a series with a NaN is not
  constant;
* a weight that is not finite is 0; any other is clamped to [0, 1].

W&B's default smoothing is the same formula (its docs say so). Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: TensorBoard's default weight, and the chart's.
DEFAULT_WEIGHT = 0.6
#: The weights the chart's keys step through, from none to TensorBoard's slider's top.
WEIGHTS = (0.0, 0.3, 0.6, 0.8, 0.9, 0.95, 0.99, 0.999)


def ema(ys: Sequence[float], weight: float) -> list[float]:
    """``ys`` smoothed by TensorBoard's debiased EMA (the module's rules)."""
    if constant(ys):
        return list(ys)
    smoother = Ema(weight)
    smoother.extend(ys)
    return smoother.values


def constant(ys: Sequence[float]) -> bool:
    """Every value equals the first (NaN equals nothing); TensorBoard leaves such a series
    as it is."""
    first = ys[0] if ys else 0.0
    return all(y == first for y in ys)


class Ema:
    """The EMA of a series taken a part at a time, as the chart redraws a growing series:
    the values so far and what the next one needs. Equal, value for value, to one pass."""

    def __init__(self, weight: float) -> None:
        if not math.isfinite(weight):
            weight = 0.0
        self.weight = max(0.0, min(weight, 1.0))
        self.values: list[float] = []
        self._last = 0.0
        self._n = 0
        self._settled = False  # 1 - w ** n rounds to 1.0 from here on: dividing changes nothing

    def extend(self, ys: Sequence[float]) -> None:
        w = self.weight
        put = self.values.append
        if w == 1.0:  # TensorBoard divides by 1 here: ``last`` stays 0
            self.values.extend(y if y - y != 0.0 else 0.0 for y in ys)
            return
        keep = 1.0 - w
        last, n, settled = self._last, self._n, self._settled
        for y in ys:
            if y - y != 0.0:  # NaN or an infinity (inf - inf is NaN)
                put(y)
                continue
            last = last * w + keep * y
            if settled:
                put(last)
                continue
            n += 1
            debias = 1.0 - w ** n
            settled = debias == 1.0
            put(last / debias)
        self._last, self._n, self._settled = last, n, settled


def step_weight(weight: float, step: int) -> float:
    """The next weight of :data:`WEIGHTS` above (``step`` 1) or below (-1) ``weight``, or the
    last one that way."""
    if step > 0:
        return next((w for w in WEIGHTS if w > weight + 1e-9), WEIGHTS[-1])
    return next((w for w in reversed(WEIGHTS) if w < weight - 1e-9), WEIGHTS[0])
