"""The value rules of the `metrics:` section, apart from ``values.py`` because they read the
recognizers' names and check patterns as the recognizers will compile them (``ddptui.metrics``).
"""

from __future__ import annotations

from ddptui.config.values import Check, Invalid, ListOf, kind, show
from ddptui.metrics import recognizers


def _metric_parse(value: object) -> str | tuple[str, ...]:
    if value is False:
        return "off"
    if isinstance(value, str) and value in ("auto", "off"):
        return value
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        unknown = [x for x in value if x not in recognizers.NAMES]
        if unknown:
            raise Invalid(f"names {', '.join(map(show, unknown))}, which ddptui does not know; "
                          f"the recognizers are {', '.join(recognizers.NAMES)}.")
        return tuple(value)
    raise Invalid(f"must be auto, off, or a list of recognizer names "
                  f"({', '.join(recognizers.NAMES)}), not {kind(value)}.")


def _metric_pattern(value: object) -> str:
    if not isinstance(value, str):
        raise Invalid(f"must be a regular expression in quotes, not {kind(value)}.")
    problem = recognizers.pattern_problem(value)
    if problem is not None:
        raise Invalid(problem)
    return value


METRIC_PARSE = Check(_metric_parse, {"anyOf": [
    {"enum": ["auto", "off", False]},
    {"type": "array", "items": {"enum": list(recognizers.NAMES)}},
]}, "`auto`, `off` or list of names")
METRIC_PATTERNS = ListOf(Check(_metric_pattern, {"type": "string"}, "string"),
                         "list of regular expressions")
