"""The restart attempt every rank agrees on, read from the agent's store.

torchrun's ``TORCHELASTIC_RESTART_COUNT`` is kept per node: a node whose workers failed
counts a restart, a node that restarts its healthy workers so that the others can rejoin
does not. After one crash on one of two nodes, the nodes say 1 and 0; anything keyed by it
(the store prefix of the process group, "crash on the first attempt only") splits the job,
and the ranks wait for each other under different keys until a timeout.

So each worker takes its global rank's seat in the current generation, kept in the store
all agents share. A seat already taken means that generation is over and a new one has
begun: torchrun's agents stop all their workers before they join the next round, so every
worker of one generation has started before any worker of the next. The first to find its
seat taken moves the generation on; the others follow.
"""

from __future__ import annotations

from typing import Protocol

KEY = "/ddptui/generation"


class Store(Protocol):
    def add(self, key: str, amount: int) -> int: ...

    def compare_set(self, key: str, expected: str, desired: str) -> bytes: ...


def agree(store: Store, rank: int) -> int:
    """This worker's generation: 0 for the first start of the job, +1 per restart."""
    gen = int(store.add(KEY, 0))
    while int(store.add(f"{KEY}/{gen}/rank{rank}", 1)) > 1:
        store.compare_set(KEY, str(gen), str(gen + 1))  # first to notice moves it on
        gen = int(store.add(KEY, 0))
    return gen
