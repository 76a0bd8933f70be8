"""paramiko's ``invoke``, loaded only when an ssh_config ``Match exec`` line needs it.

paramiko imports ``invoke`` at its own import, for ``Match exec`` alone, and invoke brings
``unittest.mock`` and more with it: 0.05–0.07 s of every SSH launch on this project's test
machine (``python -X importtime -c 'import paramiko'``), spent before the first node is
dialled, where ``bench/launch.py`` puts ddptui right beside pdsh. A stand-in module, put in
place before paramiko is imported, loads the real one at its first attribute read
(``invoke.run``, when a ``Match exec`` is evaluated). importlib's ``LazyLoader`` cannot do
this on Python 3.11: the import statement reads the module's ``__spec__``, which loads it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

NAME = "invoke"


def defer() -> None:
    """Make the next ``import invoke`` cheap; its first attribute read loads it."""
    if NAME in sys.modules or importlib.util.find_spec(NAME) is None:
        return  # loaded already, or not installed (paramiko then says so itself)
    stand_in = types.ModuleType(NAME, "Loads invoke at its first attribute read.")

    def load(attr: str) -> Any:
        if sys.modules.get(NAME) is stand_in:
            del sys.modules[NAME]
        return getattr(importlib.import_module(NAME), attr)

    stand_in.__getattr__ = load  # type: ignore[method-assign]  # PEP 562
    sys.modules[NAME] = stand_in
