"""The local run directory's index: ``run.json``, where runs live, and the list of past runs.

``run.json`` holds everything needed to reopen a run without the hosts file: the config as
resolved (the file may have changed since), and for each node its run dir and process group.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddptui.events import RunStatus


def state_root(explicit: Path | None = None) -> Path:
    if explicit is not None:
        return explicit
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                            "state")
    return Path(base) / "ddptui"


def run_dir(root: Path, run_id: str) -> Path:
    return root / "runs" / run_id


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


def read_run(root: Path, run_id: str) -> dict[str, Any]:
    p = run_dir(root, run_id) / "run.json"
    return json.loads(p.read_text())


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    hosts_file: str
    started_at: float | None
    status: RunStatus
    nodes: list[str]
    world_size: int | None
    exit_code: int | None = None


def list_runs(root: Path | None = None) -> list[RunSummary]:
    """Past and running runs, newest first; unreadable entries are skipped, not fatal."""
    runs = state_root(root) / "runs"
    out: list[RunSummary] = []
    if not runs.is_dir():
        return out
    for d in runs.iterdir():
        try:
            data = json.loads((d / "run.json").read_text())
        except (OSError, ValueError):
            continue
        out.append(RunSummary(
            run_id=str(data.get("run_id", d.name)),
            hosts_file=str(data.get("config", {}).get("path", "")),
            started_at=data.get("started_at"),
            status=RunStatus.read(data.get("status")),
            nodes=[str(n.get("name")) for n in data.get("nodes", [])],
            world_size=data.get("world_size"),
            exit_code=data.get("exit_code"),
        ))
    out.sort(key=lambda r: (r.started_at or 0, r.run_id), reverse=True)
    return out
