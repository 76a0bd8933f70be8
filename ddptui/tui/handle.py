"""How the dashboard gets hold of a run: the factories it is given.

A run's handle is a :class:`ddptui.run_port.RunHandle`: the engine's client for real runs,
stand-ins in tests (``tests/fakes.py``, checked by mypy against the same Protocol). Nothing
here imports the session (paramiko), nor the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ddptui.config import HostsConfig
from ddptui.run_port import RunHandle
from ddptui.store.runs import RunSummary

RunFactory = Callable[[HostsConfig, Path | None], RunHandle]
"""Builds a handle for a new run of a hosts file, under a state root."""
Attacher = Callable[[str, Path | None], RunHandle]
"""Builds a handle following the run of that id, under a state root."""
AttemptFactory = Callable[[HostsConfig, Path | None, str], RunHandle]
"""Builds the handle of the attempt after a run that its allocation's time limit ended (its
hosts file as it ran, the state root, its run id): a new allocation is asked for first."""
RunLister = Callable[[Path | None], list[RunSummary]]
"""The runs recorded under a state root, newest first."""
