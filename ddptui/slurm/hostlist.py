"""Slurm hostlist syntax (``gpu[01-04,07],node5``), expanded and compressed without Slurm.

Why pure: ``SLURM_JOB_NODELIST`` and ``squeue -o %N`` give nodes in this syntax, and calling
``scontrol show hostnames`` for every read needs a configured client and costs a process.
The rules follow Slurm 22.05's ``hostlist.c`` (checked against ``scontrol`` by the tests):

- names are separated by commas or whitespace outside brackets; empty names are skipped;
- a bracket holds comma-separated numbers or ``lo-hi`` ranges, printed zero-padded to the
  width of ``lo`` as written (``[08-10]`` gives ``08 09 10``, ``[8-010]`` gives ``8 9 10``);
- several brackets in one name expand left to right, the first one varying slowest
  (``rack[1-2]-n[01-02]`` gives ``rack1-n01 rack1-n02 rack2-n01 rack2-n02``);
- order and duplicates are kept (``a[1,1]`` gives ``a1 a1``).

One superset: text after the last bracket (``cpu-a[1-2]b``) expands here, where Slurm 22.05
calls the whole list invalid. Slurm never writes such a list (it only compresses trailing
digits), so reading its output is unaffected. Malformed brackets raise ``ValueError`` where
Slurm would sometimes print a guess (``a[1-2`` gives ``a]`` there).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator

#: Slurm's own limit on the hosts of one range (``hostlist.c``: ``MAX_RANGE``).
MAX_RANGE = 64 * 1024
#: ddptui's guard on one name's expansion (several brackets multiply), against a typo
#: such as ``n[0-65535]-g[0-65535]`` filling the memory.
MAX_NAMES = 1 << 20

_SEPARATORS = frozenset(", \t\n")
_RANGE_RE = re.compile(r"(\d+)(?:-(\d+))?")
_TRAILING_DIGITS_RE = re.compile(r"^(.*?)(\d*)$", re.S)


def expand(hostlist: str) -> list[str]:
    """Every host name of ``hostlist``, in the order ``scontrol show hostnames`` prints them.

    Raises:
        ValueError: unbalanced or nested brackets, or a bracket that is not a range list.
    """
    names: list[str] = []
    for token in _tokens(hostlist):
        names.extend(_expand_name(token, hostlist))
    return names


def _bad(hostlist: str, why: str) -> ValueError:
    return ValueError(f"bad hostlist {hostlist!r}: {why}")


def _tokens(hostlist: str) -> Iterator[str]:
    """The names of the list: separators split only outside brackets."""
    start = 0
    inside = False
    for i, ch in enumerate(hostlist):
        if ch == "[":
            if inside:
                raise _bad(hostlist, f"'[' inside a bracket at {i}")
            inside = True
        elif ch == "]":
            if not inside:
                raise _bad(hostlist, f"']' without '[' at {i}")
            inside = False
        elif ch in _SEPARATORS:
            if not inside:
                if i > start:
                    yield hostlist[start:i]
                start = i + 1
            elif ch != ",":
                raise _bad(hostlist, f"whitespace inside a bracket at {i}")
    if inside:
        raise _bad(hostlist, "'[' is never closed")
    if start < len(hostlist):
        yield hostlist[start:]


def _expand_name(token: str, hostlist: str) -> list[str]:
    # re.split with a group alternates literal text and bracket bodies: [lit, body, lit, ...]
    parts = re.split(r"\[([^\]]*)\]", token)
    choices: list[list[str]] = [
        [part] if i % 2 == 0 else _expand_bracket(part, hostlist) for i, part in enumerate(parts)
    ]
    count = 1
    for c in choices:
        count *= len(c)
    if count > MAX_NAMES:
        raise _bad(hostlist, f"{token!r} expands to {count} names (limit {MAX_NAMES})")
    return ["".join(combo) for combo in itertools.product(*choices)]


def _expand_bracket(body: str, hostlist: str) -> list[str]:
    out: list[str] = []
    for piece in body.split(","):
        m = _RANGE_RE.fullmatch(piece)
        if m is None:
            raise _bad(hostlist, f"{piece!r} in [{body}] is not a number or a lo-hi range")
        lo_text, hi_text = m.group(1), m.group(2)
        lo = int(lo_text)
        hi = int(hi_text) if hi_text is not None else lo
        if lo > hi:
            raise _bad(hostlist, f"range {piece!r} goes down")
        if hi - lo + 1 > MAX_RANGE:
            raise _bad(hostlist, f"range {piece!r} has more than {MAX_RANGE} hosts")
        width = len(lo_text)
        out.extend(f"{n:0{width}d}" for n in range(lo, hi + 1))
    return out


def compress(names: Iterable[str]) -> str:
    """The hostlist ``scontrol show hostlist`` writes for ``names`` (order and repeats kept).

    Neighbouring names that differ only in their trailing number share a bracket, and runs of
    consecutive numbers become ``lo-hi`` when the width of ``lo`` prints every member as
    written (``a9,a10`` gives ``a[9-10]``, ``a1,a01`` gives ``a[1,01]``). ``expand`` of the
    result is ``names`` again.

    Raises:
        ValueError: a name that is empty or holds a separator or a bracket.
    """
    groups: list[tuple[str, list[str]]] = []  # (prefix, digit strings; "" = no number)
    for name in names:
        if not name or any(ch in _SEPARATORS or ch in "[]" for ch in name):
            raise ValueError(f"cannot compress host name {name!r}")
        m = _TRAILING_DIGITS_RE.fullmatch(name)
        assert m is not None  # the pattern matches every string
        prefix, digits = m.group(1), m.group(2)
        if digits and groups and groups[-1][0] == prefix and groups[-1][1][-1]:
            groups[-1][1].append(digits)
        else:
            groups.append((prefix, [digits]))
    return ",".join(_group_text(prefix, numbers) for prefix, numbers in groups)


def _group_text(prefix: str, numbers: list[str]) -> str:
    if len(numbers) == 1:
        return prefix + numbers[0]
    runs: list[str] = []
    i = 0
    while i < len(numbers):
        lo_text = numbers[i]
        width, n = len(lo_text), int(lo_text)
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == f"{n + (j + 1 - i):0{width}d}":
            j += 1
        runs.append(lo_text if j == i else f"{lo_text}-{numbers[j]}")
        i = j + 1
    return f"{prefix}[{','.join(runs)}]"
