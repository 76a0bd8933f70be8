"""What ``ddptui init`` asks a host: which python imports torch, its GPUs, its route.

One shell program per host (POSIX ``sh``, since no interpreter is known yet) tries the
candidate interpreters in order and stops at the first that imports torch; every one tried
before it is reported with why it failed, so a host with none names all of them. Pure: the
program is text and its answer is parsed here, so both are tested without a host.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

MARK = "DDPTUI-INIT"
#: What a candidate prints when torch imports: one JSON line after MARK-OK.
_PY = ("import json, sys, torch; c = torch.cuda.is_available(); "
       f"print('{MARK}-OK ' + json.dumps({{'python': sys.executable, "
       "'version': sys.version.split()[0], 'torch': torch.__version__, 'cuda': c, "
       "'devices': torch.cuda.device_count() if c else 0}))")

#: (how the candidate is named in messages, its shell word); globs expand on the host.
COMMON = (
    ("python3 on the login PATH", "python3"),
    ("$VIRTUAL_ENV", '"${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}"'),
    ("$CONDA_PREFIX", '"${CONDA_PREFIX:+$CONDA_PREFIX/bin/python}"'),
    ("~/venv*", '"$HOME"/venv*/bin/python'),
    ("~/.venv", '"$HOME"/.venv/bin/python'),
    ("~/miniconda3", '"$HOME"/miniconda3/bin/python'),
    ("~/anaconda3", '"$HOME"/anaconda3/bin/python'),
    ("/opt/conda", "/opt/conda/bin/python"),
)


def shell_word(path: str) -> str:
    """``--python`` as the host's shell should see it: ``~/`` is that host's home."""
    if path == "~" or path.startswith("~/"):
        return '"$HOME"' + (shlex.quote(path[1:]) if len(path) > 1 else "")
    return shlex.quote(path)


def candidates(python: str | None, label: str = "--python") -> tuple[tuple[str, str], ...]:
    """A python given (with ``--python``, or the user-wide config's, named by ``label``) is
    the only one tried: a fallback would hide a typo."""
    return ((label, shell_word(python)),) if python else COMMON


def probe_cmd(python: str | None, toward: str | None, label: str = "--python") -> str:
    """The program for one host; ``toward``: the address whose route (interface) is asked."""
    lines = [
        "t() {",
        '  if [ -z "$2" ]; then printf "%s\\t%s\\t%s\\t%s\\n" ' + f"{MARK}-NO"
        + ' "$1" "" "not set"; return 1; fi',
        '  case $2 in */*) p=$2; [ -x "$p" ] || p= ;; *) p=$(command -v "$2" 2>/dev/null) ;; esac',
        '  if [ -z "$p" ]; then printf "%s\\t%s\\t%s\\t%s\\n" ' + f"{MARK}-NO" + ' "$1" "$2" '
        '"does not exist"; return 1; fi',
        f'  out=$("$p" -c {shlex.quote(_PY)} 2>&1) && {{ printf "%s\\n" "$out" | '
        f'grep "^{MARK}-OK " && return 0; }}',
        '  why=$(printf "%s\\n" "$out" | grep -v "^ *$" | tail -n 1)',
        '  printf "%s\\t%s\\t%s\\t%s\\n" ' + f"{MARK}-NO" + ' "$1" "$p" "${why:-no output}"',
        "  return 1",
        "}",
    ]
    if toward:
        lines.append(f'printf "%s\\t%s\\n" {MARK}-ROUTE "$(ip route get {shlex.quote(toward)} '
                     '2>&1 | head -n 1)"')
    for named, word in candidates(python, label):
        if "*" in word:
            lines.append(f"for c in {word}; do t {shlex.quote(named)} \"$c\" && exit 0; done")
        else:
            lines.append(f"t {shlex.quote(named)} {word} && exit 0")
    lines.append("exit 0")
    return "\n".join(lines)


@dataclass(frozen=True)
class Tried:
    """One candidate that did not import torch, and why (its last line of output)."""

    label: str
    path: str
    why: str

    def __str__(self) -> str:
        where = f"{self.path} ({self.label})" if self.path else self.label
        return f"{where}: {self.why}"


@dataclass(frozen=True)
class Found:
    """What one host answered: the winning interpreter (if any) and what was tried before."""

    python: str | None = None
    version: str = ""
    torch: str = ""
    cuda: bool = False
    devices: int = 0
    tried: tuple[Tried, ...] = ()
    route: str | None = None  # e.g. "eth0, from 10.0.0.2"

    @property
    def nproc(self) -> int:
        """One process per GPU, or one on a host without a usable GPU."""
        return self.devices if self.cuda and self.devices > 0 else 1

    def summary(self) -> str:
        gpus = f"{self.devices} GPU{'s' if self.devices != 1 else ''}"
        return f"torch {self.torch}, Python {self.version}, {gpus}"


def parse_route(line: str) -> str | None:
    """``ip route get`` output as "eth0, from 10.0.0.2"; None when it said no route."""
    words = line.split()
    if "dev" not in words[:-1]:
        return None
    dev = words[words.index("dev") + 1]
    src = words[words.index("src") + 1] if "src" in words[:-1] else None
    return dev + (f", from {src}" if src else "")


def parse(stdout: str) -> Found:
    tried: list[Tried] = []
    route: str | None = None
    for line in stdout.splitlines():
        if line.startswith(f"{MARK}-OK "):
            d = json.loads(line[len(MARK) + 4:])
            return Found(str(d["python"]), str(d["version"]), str(d["torch"]),
                         bool(d["cuda"]), int(d["devices"]), tuple(tried), route)
        parts = line.split("\t")
        if parts[0] == f"{MARK}-NO" and len(parts) == 4:
            tried.append(Tried(parts[1], parts[2], parts[3]))
        elif parts[0] == f"{MARK}-ROUTE" and len(parts) == 2:
            route = parse_route(parts[1])
    return Found(tried=tuple(tried), route=route)
