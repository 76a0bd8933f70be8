"""Past runs on this machine: ``run.json`` read, and the list of runs. Its one writer is
:class:`ddptui.store.record.Recorder`.

``run.json`` holds everything needed to reopen a run without the hosts file: the config as
resolved (the file may have changed since), and for each node its node dir (under the key
``run_dir``, as older runs wrote it) and process group.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ddptui.events import RunStatus
from ddptui.store import rundir
from ddptui.store.owner import Owner, owner_of

if TYPE_CHECKING:
    from ddptui.config.model import HostsConfig
    from ddptui.run_state import RunRecord

#: run.json's record that ``ddptui clean`` removed (or found gone) the run's node dirs
#: (:attr:`ddptui.run_state.RunRecord.node_files_removed`).
NODE_FILES_REMOVED = "node_files_removed"


def state_root(explicit: Path | None = None) -> Path:
    """``explicit`` (``--state-dir``), else the XDG state dir of this user."""
    if explicit is not None:
        return explicit
    return rundir.state_dir(os.environ.get("XDG_STATE_HOME"), os.path.expanduser("~"))


def read_run(root: Path, run_id: str) -> dict[str, Any]:
    """The run's ``run.json`` as JSON read it (readers' dicts; :meth:`RunRecord.from_json`
    types it); OSError or ValueError when it cannot be read."""
    p = rundir.run_dir(root, run_id) / rundir.RUN_JSON
    data = json.loads(p.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{p} holds no record")
    return data


def run_taken(root: Path, run_id: str) -> str | None:
    """Why a new run may not take ``run_id`` here (a run of that name is kept), or None."""
    if not (rundir.run_dir(root, run_id) / rundir.RUN_JSON).exists():
        return None
    return (f"a run named {run_id} is already kept in {rundir.run_dir(root, run_id)}: give "
            "this one another name (`--run-id`), or leave it out for a new one; nothing was "
            "started")


def no_run(root: Path, run_id: str, why: object = None) -> str:
    """What every command that names a run says when there is none by that name."""
    because = f" ({why})" if why else ""
    return (f"no run {run_id!r} under {rundir.runs_dir(root)}{because}; `ddptui logs` lists "
            "the runs there")


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    hosts_file: str
    started_at: float | None
    status: RunStatus
    nodes: list[str]
    world_size: int | None
    exit_code: int | None = None
    stale: bool = False  # run.json says live, but its session is gone (or unknown)
    alive_at_check: bool = False  # the last `ddptui logs --check` found processes running
    node_files_removed: bool = False  # `ddptui clean` removed (or found gone) its node dirs
    slurm_job: str | None = None  # the Slurm allocation its nodes came from
    #: A run resubmitted after its time limit (``slurm.resubmit``): its number of attempts
    #: in the first one's row; in a later one's, the first's run id.
    attempts: int = 1
    first: str | None = None

    @property
    def where(self) -> str:
        """Its nodes as lists show them, after the Slurm job they were allocated in."""
        return (f"slurm {self.slurm_job}: " if self.slurm_job else "") + ",".join(self.nodes)

    @property
    def shown_status(self) -> str:
        """The status as lists show it: ``running?`` when nothing here can vouch for it."""
        if not self.stale:
            return str(self.status)
        return "detached" if self.alive_at_check else f"{self.status}?"


def list_runs(root: Path | None = None) -> list[RunSummary]:
    """Past and running runs, newest first; unreadable entries are skipped, not fatal."""
    runs = rundir.runs_dir(state_root(root))
    out: list[RunSummary] = []
    if not runs.is_dir():
        return out
    for d in runs.iterdir():
        try:
            data = json.loads((d / rundir.RUN_JSON).read_text())
        except (OSError, ValueError):
            continue
        out.append(summary_of(d, data))
    out.sort(key=lambda r: (r.started_at or 0, r.run_id), reverse=True)
    return one_row_per_run(out)


def one_row_per_run(runs: list[RunSummary]) -> list[RunSummary]:
    """A resubmitted run's attempts as one row: the first's, with the latest one's state
    (``runs`` newest first)."""
    firsts = {r.run_id for r in runs if r.first is None}
    latest: dict[str, RunSummary] = {}
    count: dict[str, int] = {}
    for r in runs:
        if r.first in firsts:
            latest.setdefault(r.first, r)
            count[r.first] = count.get(r.first, 1) + 1
    out = []
    for r in runs:
        if r.first in firsts:
            continue
        last = latest.get(r.run_id)
        out.append(r if last is None else dataclasses.replace(
            r, status=last.status, exit_code=last.exit_code, stale=last.stale,
            alive_at_check=last.alive_at_check, attempts=count[r.run_id]))
    return out


def summary_of(d: Path, data: dict[str, Any]) -> RunSummary:
    """One run as lists show it, from its ``run.json`` alone (no node is asked)."""
    status = RunStatus.read(data.get("status"))
    stale = status.live and owner_of(data) in (Owner.GONE, Owner.UNKNOWN)
    checked = data.get("reconciled")
    return RunSummary(
        run_id=str(data.get("run_id", d.name)),
        hosts_file=str(data.get("config", {}).get("path", "")),
        started_at=data.get("started_at"),
        status=status,
        nodes=[str(n.get("name")) for n in data.get("nodes", [])],
        world_size=data.get("world_size"),
        exit_code=data.get("exit_code"),
        stale=stale,
        alive_at_check=stale and isinstance(checked, dict) and bool(checked.get("alive")),
        node_files_removed=NODE_FILES_REMOVED in data,
        slurm_job=(data.get("config", {}).get("slurm") or {}).get("job"),
        first=attempt["first"] if isinstance(attempt := data.get("attempt"), dict)
        and attempt.get("number", 1) > 1 else None,
    )


def new_record(run_dir: Path, run_id: str, config: HostsConfig) -> RunRecord:
    """A new run's ``run.json`` record (secrets withheld), its hosts file saved beside it."""
    from ddptui.config.secrets import redact_config_dict
    from ddptui.run_state import RunRecord
    from ddptui.store.saved import write_saved_hosts

    # a full disk is said by the run's own writers; --again then says the file is missing
    with contextlib.suppress(OSError):
        write_saved_hosts(run_dir, config)
    return RunRecord(run_id, redact_config_dict(config.to_dict()))
