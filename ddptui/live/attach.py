"""Reopening a run from its run dir: ``ddptui attach``, the dashboard's engine, ``ddptui stop``.

The store is rebuilt from the raw node logs and the mirror's checkpoint before any node is
asked anything (so nothing is mirrored twice), then every node is reconnected, the secret
values run.json withholds are read back from the nodes' own launch.sh, and following resumes
where the raw copies end. A node that cannot be reached is followed as unreached (the watch
may declare it lost); only when none can be reached does attaching fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from ddptui.bars import BarKeeper
from ddptui.config import HostsConfig
from ddptui.events import Level
from ddptui.ingest import parse_chunk, split_complete
from ddptui.launch.ports import NodePool
from ddptui.metrics.scan import Scanner
from ddptui.nodelog import NodeLogParser
from ddptui.nodeprog import torchrun_tee
from ddptui.outcome import LaunchError
from ddptui.remote import nodeops
from ddptui.remote.reach import answers, failures, map_at_once
from ddptui.run_state import NodeRecord, RunRecord
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
    results = map_at_once(list(config.nodes), pool.open)
    failed = failures(results)
    if failed and len(failed) == len(results):
        pool.close_all()
        raise LaunchError([str(f.error) for f in failed])
    for f in failed:
        node = f.item
        pool.put(node.name, make_transport(node, config))  # not connected
        note(node.name, f"could not reach node {node.name} ({f.error}); it is lost unless it "
                        f"answers within {config.health.lost_after:g} s", Level.WARNING)


def marks(pool: NodePool, nodes: Mapping[str, NodeRecord]) -> dict[str, set[str]]:
    """Each node's launch marks (``nodeops.launch_marks_cmd``); a node that cannot be asked
    is left out (the watch declares it lost if it stays silent)."""
    def ask(name: str) -> set[str]:
        res = pool.get(name).run(nodeops.launch_marks_cmd(nodes[name].run_dir), timeout=30)
        return set(res.stdout.split())

    return {got.item: got.value for got in answers(map_at_once(list(nodes), ask))}


def unreleased(found: Mapping[str, set[str]]) -> dict[str, str]:
    """The nodes of a run caught in its launch (its ddptui died before the run was recorded
    as running) whose torchrun was never let go, each with where it stands."""
    stands: dict[str, str] = {}
    for name, got in found.items():
        if torchrun_tee.GO in got:
            continue
        if rundir.HOLD in got:
            stands[name] = "its torchrun waits for the go-ahead"
        elif torchrun_tee.EXPIRED in got:
            stands[name] = "its torchrun gave up waiting for the go-ahead"
        elif rundir.PGID not in got and rundir.EXIT_CODE not in got:
            stands[name] = "nothing was started there"
    return stands


class NothingLeft(LaunchError):
    """No node holds anything of the run: there is nothing to follow. ``exit_code``: the
    run's recorded one, when it ended."""

    def __init__(self, problems: list[str], exit_code: int | None) -> None:
        super().__init__(problems)
        self.exit_code = exit_code


def nothing_left(run_id: str, record: RunRecord, found: Mapping[str, set[str]]) -> None:
    """Raise :class:`NothingLeft` when every node answered and none holds the run's node
    directory (removed by ``ddptui clean`` or by hand): following it would only declare
    every node lost and read no line."""
    if len(found) < len(record.nodes) or any(nodeops.GONE not in m for m in found.values()):
        return
    gone = (f"nothing of run {run_id} is left on its nodes (their node directories are "
            "gone), so there is nothing to follow")
    if not record.status.live:
        raise NothingLeft([f"{gone}. It {record.status}, exit code {record.exit_code}, as "
                           f"recorded here; `ddptui logs {run_id}` shows its logs."],
                          record.exit_code)
    raise NothingLeft([f"{gone}, though it is recorded here as {record.status}: how it "
                       f"ended is unknown. `ddptui logs {run_id}` shows what was kept here."],
                      None)


def caught_in_launch(run_id: str, held: Mapping[str, str]) -> str:
    """What attach says of a run it undoes because its launch was cut short."""
    said = "; ".join(f"node {n}: {how}" for n, how in held.items())
    return (f"run {run_id} was caught in its launch: the ddptui that launched it ended before "
            f"it let every node go ({said}). Its checks and code sync may not have finished, "
            "so it is not let go now: what it started was stopped and its node directories "
            "removed on every node. Run the job again.")


def replay_raw_logs(store: Store, run_dir: Path, nodes: Iterable[str],
                    scanner: Mapping[str, Scanner]) -> dict[str, NodeLogParser]:
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
        if rest:  # a torn write from a killed session: read those bytes again
            with open(path, "r+b") as f:
                f.truncate(len(whole))
        done = min(raw_done.get(name, 0), len(whole))
        now = time.time()
        scan = scanner[name].scan  # every state read for metrics, before the keeper drops any
        bars = BarKeeper()  # a bar's states read at once: the first, the last before a line
        store.apply(bars.take(scan(parse_chunk(parser, whole[:done], now))), mirror=False)
        store.apply(bars.take(scan(parse_chunk(parser, whole[done:], now))) + bars.drain(),
                    {name: len(whole)})
    return parsers
