"""Programs that run on the nodes, kept as real modules and shipped as files.

Each runs under the node's own interpreter, which has no ddptui: the standard library only
(``tests/test_nodeprog.py`` checks it), torch where a program is there to ask it. The node
programs that share code import it from this package (``from ddptui.nodeprog.procs import
...``): here that is an ordinary import, and :func:`source`, which makes the text sent to a
node, puts the imported module's body in place of that line, so the node gets one program.

Their annotations are deferred (``from __future__ import annotations``: Python 3.7, older than
any torch 2 runs on), or quoted in the three that any ``python3`` runs (the srun agent, its
file reads and writes, and the launch probe, 3.6); their typing names are imported only for
the checker (``TYPE_CHECKING``): importing ``typing`` costs a node program about 10 ms a
start, which a stop would pay on every node.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

#: A line of a node program that imports another one of this package.
_SIBLING = re.compile(r"^from ddptui\.nodeprog\.(\w+) import [^\n]*\n", re.M)
_FUTURE = "from __future__ import annotations\n"
#: Where a module's own text begins after its docstring, in the modules :func:`source` inlines.
_BODY = re.compile(r'\A(?:"""(?:.|\n)*?"""\n)?\s*', re.M)


def source(module: ModuleType) -> str:
    """The program as the node runs it (``python -c``): the module's file, with each module
    of this package it imports put in place of its import line (its docstring and its
    ``__future__`` line left out, which may only open a program)."""
    text = Path(str(module.__file__)).read_text()
    return _SIBLING.sub(lambda m: _inlined(m.group(1)), text)


def _inlined(name: str) -> str:
    text = (Path(__file__).parent / f"{name}.py").read_text()
    body = _BODY.sub("", text, count=1).replace(_FUTURE, "", 1)
    return _SIBLING.sub(lambda m: _inlined(m.group(1)), body)


def shell(name: str) -> str:
    """The text of a shell program of this package (``<name>.sh``)."""
    return (Path(__file__).parent / f"{name}.sh").read_text()
