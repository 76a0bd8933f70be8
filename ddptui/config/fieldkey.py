"""How a field of the hosts file's model is marked as a key of the file: its value rule and
the names around it. Apart from ``model.py`` so that a section kept in a module of its own
(``slurm.py``) marks its fields the same way without importing the model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ddptui.config import values as v

KEY: Final = "ddptui.config"
"""The metadata entry that holds a field's :class:`Key`."""


@dataclass(frozen=True)
class Key:
    """How a field is written in the hosts file; a field without one is not read from it."""

    check: v.Rule | None = None
    """The field's value rule; None for a section, which the parser walks itself."""
    node_only: bool = False
    """Says something about one node, so it may not be given in `defaults:`."""
    static_alias: str | None = None
    """torchrun's name for the field, accepted in its place with `backend: static`."""
    defaults_key: str | None = None
    """The key of a mapping giving values for every item of this list."""
    hints: tuple[str, ...] = ()
    """Names people reach for from other tools (torchrun, ssh, Ansible), for "did you mean"."""


def key(check: v.Rule | None = None, *, node_only: bool = False,
        static_alias: str | None = None, defaults_key: str | None = None,
        hints: tuple[str, ...] = ()) -> dict[str, Key]:
    """Field metadata: ``field(default=..., metadata=key(...))``."""
    return {KEY: Key(check, node_only, static_alias, defaults_key, hints)}
