"""What the screens read of the run they show, as protocols that the app meets structurally.

A screen is given its owner when it is made, and never imports the app: the app imports the
screens, so a screen that named the app back would tie the two into one cycle, and would be
free to reach into anything the app holds. These protocols say what each screen may read.
"""

from __future__ import annotations

from typing import Protocol

from ddptui.config.model import HealthConfig
from ddptui.run_port import RunHandle
from ddptui.store.store import Store
from ddptui.tui.notices import Notice
from ddptui.tui.state import Busy


class FollowedRun(Protocol):
    """The run followed now. Both change when another run is launched or attached, so they
    are read at each use, never kept."""

    @property
    def store(self) -> Store:
        """What the screens show: the handle's replica, or a store given (tests, snapshots)."""

    @property
    def session(self) -> RunHandle | None:
        """The handle that follows the run, if any; it answers what the store cannot."""


class NcclOwner(FollowedRun, Protocol):
    """What the NCCL view reads: a live run's facts are asked for again while it is up."""

    @property
    def live(self) -> bool:
        """A handle is following a run that has not finished."""


class DashboardOwner(FollowedRun, Protocol):
    """What the dashboard's main screen reads of its owner, beside the run itself."""

    @property
    def busy(self) -> Busy:
        """A launch, stop or attach under way: the header says so."""

    @property
    def health_config(self) -> HealthConfig:
        """When the nodes table calls a rank a straggler (stalls are the run's verdicts)."""

    @property
    def visible_devices(self) -> dict[str, str | None]:
        """Each node's ``CUDA_VISIBLE_DEVICES``: which GPU's samples are a rank's."""

    @property
    def drain_hz(self) -> float:
        """How often the screen reads the store."""

    def clock(self) -> float:
        """The wall clock for ages and the elapsed time (a fixed one in tests and snapshots)."""

    def show_notice(self, notice: Notice) -> None:
        """Tell the user: failures, node changes, stalls and the run's end, as toasts."""

    def after_end(self, handle: RunHandle) -> None:
        """The run followed has ended (said once): it may be tried again in a new allocation."""
