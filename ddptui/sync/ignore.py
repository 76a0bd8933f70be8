"""Which project paths are not shipped: ``.gitignore`` rules, ``job.exclude`` and defaults.

Git's own rules, as ``gitignore(5)`` states them: a pattern with a slash before its end is
anchored to the directory of the file that holds it, one without matches a name at any
depth; a trailing slash matches directories only; ``*`` and ``?`` stop at slashes, ``**``
crosses them; ``!`` re-includes; the last matching rule wins, and a deeper ``.gitignore``
comes after a shallower one. Nothing under an excluded directory can be re-included, since
the walk never enters it (git says the same).

The defaults keep out what no rank needs and what is usually large: version-control
metadata, caches, virtual environments (also any directory holding ``pyvenv.cfg``, found by
the walk), checkpoints, and ddptui's own ``.ddptui/`` (a workdir inside the project). They
come first, so a ``!pattern`` in ``job.exclude`` or a ``.gitignore`` brings one back.
``job.exclude`` comes last: what the hosts file says wins over the project's files.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".git/", ".hg/", ".svn/",
    "__pycache__/", "*.pyc", ".mypy_cache/", ".pytest_cache/", ".ruff_cache/", ".tox/",
    ".ipynb_checkpoints/", ".DS_Store",
    ".venv/", "venv/",
    "checkpoints/", "*.pt", "*.pth", "*.ckpt",
    ".ddptui/",
)
#: A directory holding this file is a virtual environment, whatever its name.
VENV_MARKER = "pyvenv.cfg"
GITIGNORE = ".gitignore"


@dataclass(frozen=True)
class Rule:
    """One pattern line, compiled; ``base`` is the directory (relative, "" = root) it sits in."""

    pattern: str
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    base: str

    def matches(self, path: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.base:
            if not path.startswith(self.base + "/"):
                return False
            path = path[len(self.base) + 1:]
        return self.regex.fullmatch(path) is not None


def _glob(pat: str) -> str:
    """The regex of a slash-separated glob, ``**`` forms included."""
    out: list[str] = []
    i, n = 0, len(pat)
    while i < n:
        if pat.startswith("**/", i) and (i == 0 or pat[i - 1] == "/"):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("**", i) and i + 2 == n and (i == 0 or pat[i - 1] == "/"):
            out.append(".*")
            i += 2
        elif pat[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pat[i] == "?":
            out.append("[^/]")
            i += 1
        elif pat[i] == "[":
            j = pat.find("]", i + 2 if pat.startswith(("[!", "[^"), i) else i + 1)
            if j < 0:
                out.append(re.escape("["))
                i += 1
                continue
            body = pat[i + 1:j]
            if body[:1] in ("!", "^"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\").replace("/", "") + "]")
            i = j + 1
        elif pat[i] == "\\" and i + 1 < n:
            out.append(re.escape(pat[i + 1]))
            i += 2
        else:
            out.append(re.escape(pat[i]))
            i += 1
    return "".join(out)


def compile_rule(line: str, base: str = "") -> Rule | None:
    """One line of a ``.gitignore`` (or one ``job.exclude`` item); None for blanks/comments."""
    raw = line.rstrip("\n\r")
    # Trailing spaces are dropped unless escaped with a backslash.
    stripped = raw.rstrip(" ")
    if stripped.endswith("\\") and len(raw) > len(stripped):
        stripped += " "
    text = stripped
    if not text or text.startswith("#"):
        return None
    negate = text.startswith("!")
    if negate or text.startswith(("\\!", "\\#")):
        text = text[1:]
    dir_only = text.endswith("/") and not text.endswith("\\/")
    text = text.rstrip("/") if dir_only else text
    if not text:
        return None
    anchored = "/" in text
    text = text.lstrip("/")
    if not text:
        return None
    regex = _glob(text)
    if not anchored:
        regex = "(?:.*/)?" + regex
    return Rule(stripped, re.compile(regex, re.DOTALL), negate, dir_only, base.strip("/"))


def rules_of(lines: list[str] | tuple[str, ...], base: str = "") -> list[Rule]:
    return [r for r in (compile_rule(ln, base) for ln in lines) if r is not None]


class Excluder:
    """The rules in force; the walk adds each directory's ``.gitignore`` as it enters it.

    Evaluation is in order (defaults, ``.gitignore`` files shallow to deep, then
    ``job.exclude``), and the last rule that matches decides.
    """

    def __init__(self, exclude: tuple[str, ...] = (), *, defaults: bool = True) -> None:
        self._first = rules_of(DEFAULT_EXCLUDES) if defaults else []
        self._files: list[Rule] = []
        self._last = rules_of(exclude)

    def add_gitignore(self, directory: str, text: str) -> None:
        """``directory`` is relative to the project root ("" for the root itself)."""
        self._files.extend(rules_of(text.splitlines(), directory))

    def excluded(self, path: str, is_dir: bool) -> bool:
        """``path`` is relative to the project root, with ``/`` separators."""
        path = posixpath.normpath(path)
        verdict = False
        for rule in (*self._first, *self._files, *self._last):
            if rule.matches(path, is_dir):
                verdict = not rule.negate
        return verdict
