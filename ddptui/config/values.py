"""The value rules of the hosts file, each written once for the parser, the schema and the docs.

A :class:`Check` is built from the same few parameters (a range, a list of choices, a pattern)
for its runtime test, its JSON Schema fragment and its one-line summary in
``docs/hosts-file.md``, so the three cannot drift apart. ``model.py`` names the check of every
field; nothing here knows which field uses which rule. :class:`Invalid`, :func:`kind` and
:func:`show` are the words for a wrong value, shared with the YAML walker.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, NoReturn, TypeGuard, TypeVar

from ddptui.events import JSON

NprocWord = Literal["gpu", "cpu", "auto"]
NprocPerNode = int | NprocWord
#: What a rule makes of a value (a port's int, a host's str): each check says its own.
T_co = TypeVar("T_co", covariant=True)

NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")
TORCH_DISTRIBUTED_DEBUG_LEVELS = ("OFF", "INFO", "DETAIL")
TORCH_CPP_LOG_LEVELS = ("INFO", "WARNING", "ERROR", "FATAL")
NPROC_WORDS: tuple[NprocWord, ...] = ("gpu", "cpu", "auto")
#: Set by ddptui on every run; a user value would silently break following the run.
RESERVED_ENV = frozenset({"DDPTUI_RUN", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"})

# Patterns are written once, in the dialect both Python's re and JSON Schema (ECMA 262) read.
ENV_NAME = "[A-Za-z_][A-Za-z0-9_]*"
_MODULE = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"
_CONTROL = "\\x00-\\x1f\\x7f"
_CONTROL_RE = re.compile(f"[{_CONTROL}]")
_TEXT = f"^[^{_CONTROL}]*[^\\s{_CONTROL}][^{_CONTROL}]*$"
_WORD = f"^[^\\s{_CONTROL}]+$"
_HOST = f"^[^\\s{_CONTROL}@-][^\\s{_CONTROL}@]*$"
_WORKDIR = f"^(~|~/[^{_CONTROL}]*|/[^{_CONTROL}]*)$"


class Invalid(Exception):
    """One wrong value; the message is the sentence the person reads."""


class ListStandIn:
    """Stands for a YAML sequence where a scalar was expected, so messages can name it."""


class MapStandIn:
    """Stands for a YAML mapping where a scalar was expected."""


def show(value: object) -> str:
    """A value as the message quotes it: short, and never failing on a huge number."""
    try:
        text = repr(value)
    except ValueError:  # an integer too long for str()
        return "a very long number"
    return text if len(text) <= 60 else text[:57] + "..."


def kind(value: object) -> str:
    """What a wrong value is, in words, for "must be X, not <kind>"."""
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {show(value)}"
    if isinstance(value, str):
        return f"the string {show(value)}"
    if isinstance(value, ListStandIn | list):
        return "a list"
    if isinstance(value, MapStandIn):
        return "a mapping"
    if isinstance(value, bytes):
        return "binary data"
    return f"a {type(value).__name__} ({show(value)})"


@dataclass(frozen=True)
class Check(Generic[T_co]):
    """One value rule: the runtime test and what the JSON Schema and the docs say of it."""

    validate: Callable[[object], T_co]
    """Returns the value as the config holds it; raises :class:`Invalid` with the sentence.
    It takes whatever the YAML held (a scalar, a list of them, a stand-in), unchecked."""
    schema: dict[str, JSON]
    """The JSON Schema of the YAML values it accepts (a superset is fine, a subset is not)."""
    summary: str
    """The type column of the docs' field tables."""

    def __call__(self, value: object) -> T_co:
        return self.validate(value)


@dataclass(frozen=True)
class ListOf:
    """A YAML list whose items each pass ``item``; an empty value is the empty list."""

    item: Check[str]
    summary: str

    @property
    def schema(self) -> dict[str, JSON]:
        return {"type": ["array", "null"], "items": self.item.schema}


@dataclass(frozen=True)
class MappingOf:
    """A YAML mapping of environment-variable names to values that pass ``value``."""

    value: Check[str]
    reserved: frozenset[str]
    """Names ddptui sets itself, which a file may not."""
    summary: str

    @property
    def schema(self) -> dict[str, JSON]:
        return {
            "type": ["object", "null"],
            "propertyNames": {"pattern": f"^{ENV_NAME}$",
                              "not": {"enum": [*sorted(self.reserved)]}},
            "additionalProperties": self.value.schema,
        }


#: What a field's value must be: one scalar, or a list or mapping the parser walks item by item.
Rule = Check[object] | ListOf | MappingOf


def _fail(what: str, value: object) -> NoReturn:
    raise Invalid(f"must be {what}, not {kind(value)}.")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(what, value)
    if _CONTROL_RE.search(value):
        raise Invalid(f"must be {what} without control characters such as newlines.")
    return value


def _word(value: object, what: str) -> str:
    """Host names, user names, labels: a space in one is always a typo."""
    text = _text(value, what)
    if any(c.isspace() for c in text):
        raise Invalid(f"must be {what} without spaces, not {show(text)}.")
    return text


def text(what: str, summary: str = "string") -> Check[str]:
    return Check(lambda v: _text(v, what), {"type": "string", "pattern": _TEXT}, summary)


def word(what: str, summary: str = "string") -> Check[str]:
    return Check(lambda v: _word(v, what), {"type": "string", "pattern": _WORD}, summary)


def _host(value: object) -> str:
    text = _word(value, "a host name, ~/.ssh/config alias or address")
    if text.startswith("-"):
        raise Invalid(f"must be a host name, not {show(text)} (it may not start with '-').")
    if "@" in text:
        raise Invalid(f"must be a host name only, not {show(text)}; put the login name in `user:`.")
    return text


def whole(minimum: int, what: str, maximum: int | None = None) -> Check[int]:
    """A whole number in a range; ``what`` is the message for anything else."""

    def check(value: object) -> int:
        if not _is_int(value):
            _fail(what, value)
        if value < minimum or (maximum is not None and value > maximum):
            if maximum is None:
                _fail(what, value)
            raise Invalid(f"must be {what}, not {show(value)}.")
        return int(value)

    schema: dict[str, JSON] = {"type": "integer", "minimum": minimum}
    summary = f"int ≥ {minimum}"
    if maximum is not None:
        schema["maximum"] = maximum
        summary = f"int {minimum}–{maximum}"
    return Check(check, schema, summary)


def seconds(*, above_zero: bool) -> Check[float]:
    what = "greater than 0" if above_zero else "of 0 or more"

    def check(value: object) -> float:
        if (not _is_number(value) or not math.isfinite(value) or value < 0
                or (above_zero and value == 0)):
            _fail(f"a number of seconds {what}", value)
        return float(value)

    bound = "exclusiveMinimum" if above_zero else "minimum"
    return Check(check, {"type": "number", bound: 0},
                 "seconds > 0" if above_zero else "seconds ≥ 0")


def _fraction(value: object) -> float:
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        _fail("a fraction greater than 0 (0.25 means 25 % slower than the median)", value)
    return float(value)


FRACTION = Check(_fraction, {"type": "number", "exclusiveMinimum": 0}, "number > 0")


def _max_restarts(value: object) -> int:
    if _is_int(value) and value < 0:
        raise Invalid(f"must be 0 or more (how many times torchrun restarts the workers), "
                      f"not {value}.")
    return int(NONNEG_INT(value))


def _upper_pattern(choices: tuple[str, ...]) -> str:
    """Case-insensitive alternatives, which JSON Schema patterns cannot say with a flag."""
    def letters(word: str) -> str:
        return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in word)
    return "^(" + "|".join(letters(c) for c in choices) + ")$"


def levels(choices: tuple[str, ...], *, off_is_false: bool = False) -> Check[str]:
    """Level names in any case; ``off_is_false``: YAML 1.1 reads a bare OFF as false."""
    allowed = ", ".join(choices)

    def check(value: object) -> str:
        if off_is_false and value is False:
            return "OFF"
        if isinstance(value, str) and value.upper() in choices:
            return value.upper()
        _fail(f"one of {allowed}", value)

    any_case: list[JSON] = [
        {"enum": list(choices)}, {"type": "string", "pattern": _upper_pattern(choices)}]
    if off_is_false:
        any_case.append({"const": False})
    return Check(check, {"anyOf": any_case}, ", ".join(f"`{c}`" for c in choices))


def exactly(choices: tuple[str, ...], what: str) -> Check[str]:
    def check(value: object) -> str:
        if isinstance(value, str) and value in choices:
            return value
        _fail(what, value)

    return Check(check, {"enum": list(choices)}, " or ".join(f"`{c}`" for c in choices))


def _nproc(value: object) -> NprocPerNode:
    if _is_int(value) and value >= 1:
        return int(value)
    for word in NPROC_WORDS:
        if value == word:
            return word
    _fail('a whole number of at least 1, or "gpu", "cpu" or "auto"', value)


def _workdir(value: object) -> str:
    text = _text(value, "a path")
    if not (text == "~" or text.startswith("~/") or text.startswith("/")):
        raise Invalid(
            f"must be an absolute path or start with ~/ (the login user's home on the node), "
            f"not {show(text)}."
        )
    return text


def _rdzv_id(value: object) -> str:
    if _is_int(value):
        value = str(value)
    return _word(value, "a string")


def _subsystems(value: object) -> str:
    """NCCL takes a comma-separated list; a YAML list of names means the same."""
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        value = ",".join(value)
    return _word(value, "a comma-separated list of NCCL subsystems such as INIT,NET")


def _module(value: object) -> str:
    text = _text(value, "a Python module name")
    if not re.fullmatch(_MODULE, text):
        raise Invalid(f"must be a dotted Python module name like my_pkg.train, not {show(text)}.")
    return text


def _scalar_text(value: object, where: str, expected: str) -> str:
    """A number or string as the text a program receives; ``where`` names what cannot hold NUL."""
    if _is_int(value):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        if "\x00" in value:
            raise Invalid(f"must not contain a NUL character ({where} cannot).")
        return value
    _fail(expected, value)


def _env_value(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return _scalar_text(value, "environment values",
                        "a string, number or boolean (quote it to be sure)")


def _env_name(value: object) -> str:
    text = _word(value, "an environment variable name")
    if not re.fullmatch(ENV_NAME, text):
        raise Invalid(f"must be an environment variable name (letters, digits and _, not "
                      f"starting with a digit), not {show(text)}.")
    return text


def _command(value: object) -> str:
    """A shell command as the person wrote it: several lines are fine, a NUL cannot pass."""
    if not isinstance(value, str) or not value.strip():
        _fail("a shell command", value)
    if "\x00" in value:
        raise Invalid("must not contain a NUL character (a shell command cannot).")
    return value


def _arg(value: object) -> str:
    return _scalar_text(value, "program arguments", "a string (quote values like 'true' or dates)")


_NO_NUL = "^[^\\x00]*$"
HOST = Check(_host, {"type": "string", "pattern": _HOST}, "string")
PORT = whole(1, "a port number between 1 and 65535", maximum=65535)
POS_INT = whole(1, "a whole number of at least 1")
NONNEG_INT = whole(0, "a whole number of 0 or more")
MAX_RESTARTS = Check(_max_restarts, NONNEG_INT.schema, NONNEG_INT.summary)
BOOL = Check(lambda v: v if isinstance(v, bool) else _fail("true or false", v),
             {"type": "boolean"}, "bool")
LOCAL_PATH = Check(lambda v: os.path.expanduser(_text(v, "a path")),
                   {"type": "string", "pattern": _TEXT}, "path on this machine")
WORKDIR = Check(_workdir, {"type": "string", "pattern": _WORKDIR},
                "absolute path or `~/...` on the node")
NPROC = Check(_nproc, {"anyOf": [{"type": "integer", "minimum": 1},
                                 {"enum": list(NPROC_WORDS)}]},
              "int ≥ 1, `gpu`, `cpu` or `auto`")
TRANSPORT = exactly(("ssh", "local", "srun"), '"ssh", "local" or "srun"')
BACKEND = exactly(("c10d", "static"), "one of c10d, static")
RDZV_ID = Check(_rdzv_id, {"type": ["string", "integer"], "pattern": _WORD}, "string")
MODULE = Check(_module, {"type": "string", "pattern": f"^{_MODULE}$"}, "dotted module name")
SUBSYSTEMS = Check(_subsystems, {"anyOf": [
    {"type": "string", "pattern": _WORD},
    {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
]}, "string or list of strings")
ARG = Check(_arg, {"type": ["string", "number"], "pattern": _NO_NUL}, "string")
ENV_VALUE = Check(_env_value, {"type": ["string", "number", "boolean"], "pattern": _NO_NUL},
                  "string, number or boolean")
ARGS = ListOf(ARG, "list of strings")
PATTERNS = ListOf(text("a .gitignore pattern"), "list of patterns")
COMMANDS = ListOf(Check(_command, {"type": "string", "pattern": _NO_NUL}, "string"),
                  "list of shell commands")
ENV = MappingOf(ENV_VALUE, RESERVED_ENV, "mapping NAME: value")
ENV_NAMES = ListOf(Check(_env_name, {"type": "string", "pattern": f"^{ENV_NAME}$"}, "string"),
                   "list of names")
