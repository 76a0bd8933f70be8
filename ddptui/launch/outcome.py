"""How a launch, a run and a stop ended, as types every face can catch and read.

They live apart from the controller, which pulls in paramiko through its transports, so the
dashboard (whose process never talks to a node) catches :class:`LaunchError` by type and
reads a :class:`RunResult` without loading any of that.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddptui.events import Failure

#: The exit code of a run that was stopped (by a key, ``ddptui stop`` or Ctrl-C), as a
#: shell reports a command ended by SIGINT.
STOPPED_EXIT = 130


class LaunchError(Exception):
    """Why a launch (or an attach) did not happen; nothing of the run is left on any node."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass
class RunResult:
    """A run that ended: its exit code (0 only when every node exited 0), what failed, and
    each node's own exit code (None where none was written: the node was lost)."""

    exit_code: int
    failures: list[Failure]
    node_exit_codes: dict[str, int | None]
    stopped: bool


@dataclass
class StopReport:
    """What a stop left behind: process ids still alive per node, and nodes it could not
    reach. A clean stop leaves both empty."""

    leftover: dict[str, list[int]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not self.errors and not any(self.leftover.values())
