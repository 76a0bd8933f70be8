"""``ddptui clean``: finished runs and unused code caches removed, on every node and here.

Every node is reached and scanned at once; the choice is made for the whole cluster
(:mod:`ddptui.clean.choice`), then every node removes its part at once. A node that
cannot be reached or scanned stops the clean before anything is removed anywhere: a run that
looks finished on the nodes that answered may still run on the one that did not.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from ddptui.clean.choice import (
    NODE_SRC,
    Choice,
    Freed,
    LocalRun,
    NodeScan,
    Policy,
    choose,
    node_args,
    parse_freed,
    parse_scan,
    removal_request,
)
from ddptui.config import HostsConfig, NodeConfig
from ddptui.events import RunStatus
from ddptui.launch.plan import expand_home
from ddptui.outcome import LaunchError
from ddptui.remote import nodeops
from ddptui.remote.reach import Failed, connect, map_at_once
from ddptui.run_notes import Note
from ddptui.store import rundir
from ddptui.store.record import Recorder
from ddptui.store.runs import state_root
from ddptui.transport.base import Transport, TransportError


@dataclass
class CleanReport:
    """What was freed (or, with ``dry_run``, would be), per node and here."""

    dry_run: bool
    policy: Policy
    choice: Choice
    nodes: dict[str, Freed] = field(default_factory=dict)
    local_runs: int = 0
    local_bytes: int = 0
    local_dir: Path | None = None
    keep_logs: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.errors and not any(f.errors for f in self.nodes.values())


def clean(config: HostsConfig, *, state: Path | None = None, policy: Policy | None = None,
          dry_run: bool = False, keep_logs: bool = False) -> CleanReport:
    """Clean the cluster of ``config`` and this machine's state dir; LaunchError when a node
    cannot be reached or scanned (then nothing was removed)."""
    root = state_root(state)
    policy = policy or Policy()
    nodes = list(config.nodes)
    transports: dict[str, Transport] = {}
    try:
        scans, workdirs = _scan_all(config, nodes, transports)
        local = _local_runs(root, config, scans)
        choice = choose(scans, local, policy, time.time())
        report = CleanReport(dry_run, policy, choice, local_dir=rundir.runs_dir(root),
                             keep_logs=keep_logs)

        def remove(node: NodeConfig) -> Freed:
            name = node.name
            todo = removal_request(choice.node_runs[name], choice.node_code[name],
                                   choice.node_tmp[name], dry_run)
            cmd = nodeops.python_cmd(node.python, NODE_SRC, *node_args(workdirs[name], todo))
            res = transports[name].run(cmd, timeout=600)
            freed = parse_freed(res.stdout)
            if freed is None:
                raise TransportError(name, f"node {name}: removing old runs failed (exit code "
                                           f"{res.exit_code}): {_last(res.stderr)}")
            return freed

        for removed in map_at_once(nodes, remove):
            if isinstance(removed, Failed):
                report.errors.append(str(removed.error))
            else:
                report.nodes[removed.item.name] = removed.value
    finally:
        for t in transports.values():
            with contextlib.suppress(Exception):
                t.close()
    _clean_here(root, report, keep_logs)
    return report


def _last(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "no output"


def _scan_all(config: HostsConfig, nodes: list[NodeConfig], transports: dict[str, Transport],
              ) -> tuple[dict[str, NodeScan], dict[str, str]]:
    def scan(node: NodeConfig) -> tuple[NodeScan, str]:
        transport = connect(node, config)
        transports[node.name] = transport
        workdir = expand_home(node.workdir, transport.home())
        res = transport.run(nodeops.python_cmd(node.python, NODE_SRC, *node_args(workdir)),
                            timeout=300)
        found = parse_scan(res.stdout)
        if found is None:
            raise TransportError(node.name, f"node {node.name} ({node.host}): could not list its "
                                            f"runs (exit code {res.exit_code}): "
                                            f"{_last(res.stderr)}")
        return found, workdir

    problems: list[str] = []
    scans: dict[str, NodeScan] = {}
    workdirs: dict[str, str] = {}
    for got in map_at_once(nodes, scan):
        node = got.item
        if isinstance(got, Failed):
            e = got.error
            problems.append(str(e) if isinstance(e, TransportError | LaunchError)
                            else f"node {node.name} ({node.host}): {type(e).__name__}: {e}")
        else:
            scans[node.name], workdirs[node.name] = got.value
    if problems:
        raise LaunchError([*problems, "nothing was removed on any node: a run that looks "
                                      "finished elsewhere may still run there"])
    return scans, workdirs


def _local_runs(root: Path, config: HostsConfig, scans: dict[str, NodeScan]) -> list[LocalRun]:
    """This machine's runs of this cluster: launched from this hosts file, or found on its
    nodes. Runs of other clusters are not this clean's to judge."""
    on_nodes = {r.run_id for s in scans.values() for r in s.runs}
    mine = os.path.abspath(config.path)
    out = []
    runs = rundir.runs_dir(root)
    for d in sorted(runs.iterdir()) if runs.is_dir() else []:
        try:
            meta = json.loads((d / rundir.RUN_JSON).read_text())
        except (OSError, ValueError):
            continue
        path = str(meta.get("config", {}).get("path", ""))
        if d.name not in on_nodes and (not path or os.path.abspath(path) != mine):
            continue
        ended = meta.get("ended_at") or meta.get("started_at") or 0.0
        out.append(LocalRun(d.name, RunStatus.read(meta.get("status")).live, float(ended),
                            tuple(str(n.get("name")) for n in meta.get("nodes", []))))
    return out


def _du(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


def _clean_here(root: Path, report: CleanReport, keep_logs: bool) -> None:
    """Local run dirs of removed runs (or, with ``keep_logs``, a note in their run.json);
    runs whose node dirs are gone are noted too, for ``ddptui logs``."""
    removed_everywhere = not report.errors
    now = time.time()
    for run_id in report.choice.local:
        d = rundir.run_dir(root, run_id)
        if keep_logs or not removed_everywhere:
            if not report.dry_run and removed_everywhere:
                _note(root, run_id, {"at": now, "by": "ddptui clean"})
            continue
        report.local_bytes += _du(d)
        report.local_runs += 1
        if not report.dry_run:
            shutil.rmtree(d, ignore_errors=True)
    if not report.dry_run:
        for run_id in report.choice.gone_from_nodes:
            _note(root, run_id, {"at": now, "by": "found gone by ddptui clean"})


def _note(root: Path, run_id: str, note: Note) -> None:
    try:
        recorder = Recorder.of_run(rundir.run_dir(root, run_id))
    except (OSError, ValueError, KeyError, TypeError):
        return
    if recorder.record().node_files_removed is None:
        recorder.update(node_files_removed=note)
