"""Reopening a run from its run dir: ``ddptui attach``, the dashboard's engine, ``ddptui stop``.

The store is rebuilt from the raw node logs and the mirror's checkpoint before any node is
asked anything (so nothing is mirrored twice), then every node is reconnected, the secret
values run.json withholds are read back from the nodes' own launch.sh, and following resumes
where the raw copies end. A node that cannot be reached is followed as unreached (the watch
may declare it lost); only when none can be reached does attaching fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ddptui.config import HostsConfig
from ddptui.events import Level
from ddptui.ingest import parse_chunk, split_complete
from ddptui.launch.outcome import LaunchError
from ddptui.launch.ports import NodePool
from ddptui.launch.reach import map_at_once
from ddptui.nodelog import NodeLogParser
from ddptui.run_state import RunRecord
from ddptui.store import rundir
from ddptui.store.runs import no_run, read_run
from ddptui.store.store import Store
from ddptui.transport.factory import make_transport


def read_record(root: Path, run_id: str) -> RunRecord:
    """The run's ``run.json``, or a :class:`LaunchError` that says why it cannot be reopened."""
    try:
        record = RunRecord.from_json(read_run(root, run_id))
    except (OSError, ValueError, KeyError) as e:
        raise LaunchError([no_run(root, run_id, e)]) from None
    if not record.nodes:
        raise LaunchError([f"run {run_id} never started on any node "
                           f"(status {record.status})"])
    return record


def reconnect(config: HostsConfig, pool: NodePool,
              note: Callable[[str, str, Level], None]) -> None:
    """Connect to every node again. A node that cannot be reached is followed all the same,
    as silent from the start: the watch declares it lost after ``lost_after``, so attaching
    settles a run whose node is gone. Only when no node answers does attaching fail."""
    nodes = list(config.nodes)
    results = map_at_once(nodes, pool.open)
    problems = [str(e) for e in results if isinstance(e, Exception)]
    if problems and len(problems) == len(results):
        pool.close_all()
        raise LaunchError(problems)
    for node, res in zip(nodes, results, strict=True):
        if isinstance(res, Exception):
            pool.put(node.name, make_transport(node, config.ssh))  # not connected
            note(node.name, f"could not reach node {node.name} ({res}); it is lost unless it "
                            f"answers within {config.health.lost_after:g} s", Level.WARNING)


def replay_raw_logs(store: Store, run_dir: Path, nodes: list[str]) -> dict[str, NodeLogParser]:
    """Rebuild ``store``'s memory from the raw copies; mirror only what the checkpoint lacks.

    Call it before ``store`` has mirrored anything: recovery truncates the mirror's files. The
    parsers come back mid-stream, so that following resumes with the state they reached.
    """
    raw_done = Store.recover(run_dir)
    parsers: dict[str, NodeLogParser] = {}
    for name in nodes:
        path = rundir.node_log(run_dir, name)
        parser = parsers[name] = NodeLogParser(name)
        if not path.exists():
            continue
        whole, rest = split_complete(path.read_bytes())
        if rest:  # a torn write from a killed controller: read those bytes again
            with open(path, "r+b") as f:
                f.truncate(len(whole))
        done = min(raw_done.get(name, 0), len(whole))
        now = time.time()
        store.apply(parse_chunk(parser, whole[:done], now), mirror=False)
        store.apply(parse_chunk(parser, whole[done:], now), {name: len(whole)})
    return parsers
