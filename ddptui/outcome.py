"""How a launch, a run and a stop ended, as types every face can catch and read.

They live apart from the session, which pulls in paramiko through its transports, so the
dashboard (whose process never talks to a node) catches :class:`LaunchError` by type and
reads a :class:`RunResult` without loading any of that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ddptui.diagnose import Diagnosis
from ddptui.events import Failure, NodeStatus, RunStatus

#: The exit code of a run that was stopped (by a key, ``ddptui stop`` or Ctrl-C), as a
#: shell reports a command ended by SIGINT.
STOPPED_EXIT = 130
#: The exit code of a run that ended because a node was lost (as ssh's for a lost link).
LOST_EXIT = 255
#: The exit code of a run that went well on its nodes but whose record here is incomplete
#: (a full disk): EX_TEMPFAIL, as ``ddptui attach`` can fetch the rest later.
INCOMPLETE_EXIT = 75


def node_end(code: int | None, stop_requested: bool, expired: bool) -> tuple[NodeStatus, str]:
    """How a node's part of the run ended, and in words, from what it left there: the exit
    code ``launch.sh`` wrote, the mark a stop leaves, a hold that ran out (``expired``: its
    ddptui ended mid-launch, so nothing ran). The follower and ``ddptui logs --check`` judge
    by this one rule."""
    if stop_requested:
        return NodeStatus.STOPPED, ("on request" if code is None
                                    else f"on request, exit code {code}")
    if code is None and expired:
        return NodeStatus.FAILED, ("never released: the ddptui that launched it ended before "
                                   "its checks did, and torchrun gave up waiting; run the job "
                                   "again")
    if code is None:
        return NodeStatus.LOST, "the launcher is gone and left no exit code (killed from outside?)"
    if code == 0:
        return NodeStatus.EXITED, "exit code 0"
    return NodeStatus.FAILED, f"exit code {code}"


class LaunchError(Exception):
    """Why a launch (or an attach) did not happen; nothing of the run is left on any node."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass
class RunResult:
    """A run that ended: its exit code (0 only when every node exited 0), what failed, and
    each node's own exit code (None where none was written: the node was lost).

    ``diagnosis`` is ddptui's one explanation of a failed run (None for a run that succeeded
    or was stopped, or that no rule explains): faces lead with its headline, never with the
    root cause torch recorded, which is often its own boilerplate.
    """

    exit_code: int
    failures: list[Failure]
    node_exit_codes: dict[str, int | None]
    stopped: bool
    diagnosis: Diagnosis | None = None
    #: ddptui's own trouble during the run (a full disk here, a thread of its own that
    #: failed), in its words: the run's record here is incomplete. None when all went well.
    problem: str | None = None


def run_end(names: Sequence[str], ends: Mapping[str, tuple[NodeStatus, int | None]],
            failures: Sequence[Failure] = (), *, stopping: bool = False, lost: bool = False,
            failed: bool = False) -> tuple[RunStatus, int]:
    """How a run ended and its exit code, from every node's end (status, exit code). The
    live run, attach and ``ddptui logs --check`` judge by this one rule.

    ``stopping``: a stop was asked for, which comes first; ``lost``: the watch declared a
    node lost; ``failed``: the watch stopped the others after a node failed. A run some node
    of which was stopped (from beside, say) was stopped.
    """
    ended = (lost or failed) and not stopping
    stopped = not ended and (stopping or any(s is NodeStatus.STOPPED for s, _ in ends.values()))
    codes = {n: code for n, (_, code) in ends.items()}
    code = (LOST_EXIT if lost and not stopping
            else run_exit_code(codes, failures, names, stopped))
    if stopped:
        return RunStatus.STOPPED, code
    return (RunStatus.FINISHED if code == 0 else RunStatus.FAILED), code


def run_exit_code(codes: Mapping[str, int | None], failures: Sequence[Failure],
                  nodes: Sequence[str], stopped: bool) -> int:
    """One code for the run, as a shell reads it: the first failed node's own (by failure
    order, then hosts-file order), squeezed into 1-255; 255 for a node that was lost."""
    if stopped:
        return STOPPED_EXIT
    if all(c == 0 for c in codes.values()):
        return 0
    for name in [f.node for f in failures] + list(nodes):
        c = codes.get(name)
        if c != 0:
            return 255 if c is None else (c if 0 < c < 256 else 1)
    return 255


@dataclass
class StopReport:
    """What a stop left behind: process ids still alive per node, and nodes it could not
    reach. A clean stop leaves both empty."""

    leftover: dict[str, list[int]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    #: Per node, what was checked gone there after the stop, in ddptui's words.
    checked: dict[str, list[str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not self.errors and not any(self.leftover.values())
