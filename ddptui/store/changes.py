"""A store's changes as a replica applies them, one small type per kind.

The store hands each change to its tap (the engine's backlog) with the writer's lock held,
up to thousands a second, so each is a ``NamedTuple``: built as fast as the bare tuple it
replaced, and told apart by ``type(...) is``. On the wire they travel as the bare tuples they
were (``ddptui.engine.wire``), so a message is no bigger than before.
"""

from __future__ import annotations

from typing import NamedTuple

from ddptui.events import Event
from ddptui.store.views import RunInfoChanges


class Applied(NamedTuple):
    """A batch of events, as :meth:`ddptui.store.store.Store.apply` took it."""

    events: list[Event]


class RunSet(NamedTuple):
    """Fields of the run as a whole (:meth:`ddptui.store.store.Store.set_run`)."""

    changes: RunInfoChanges


class NodeAdded(NamedTuple):
    name: str
    node_rank: int


class Skipped(NamedTuple):
    """Lines a replica far behind was not sent (they are on disk, in the mirror)."""

    lines: int


Change = Applied | RunSet | NodeAdded | Skipped
