"""The dashboard's own states, as types: what the screen shows, what the app is busy doing."""

from __future__ import annotations

from enum import StrEnum


class LayoutMode(StrEnum):
    """What the body shows: the log, the charts or both side by side. ``auto`` is both on a
    wide terminal (see :data:`ddptui.tui.dashboard.WIDE_COLUMNS`), the log alone otherwise;
    ``m`` steps through the other three."""

    AUTO = "auto"
    LOGS = "logs"
    BOTH = "both"
    CHARTS = "charts"


class Busy(StrEnum):
    """A launch, stop, attach or restart under way in a thread worker; the header shows it in
    place of the run's status, and the other run keys wait for it. ``IDLE`` (the empty
    string, so false) when none is."""

    IDLE = ""
    LAUNCHING = "launching"
    STOPPING = "stopping"
    ATTACHING = "attaching"
    RESTARTING = "restarting"
