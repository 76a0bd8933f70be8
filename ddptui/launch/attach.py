"""Reopening a run from its run dir: ``ddptui attach``, the dashboard's engine, ``ddptui stop``.

The store is rebuilt from the raw node logs and the mirror's checkpoint before any node is
asked anything (so nothing is mirrored twice), then every node is reconnected, the secret
values run.json withholds are read back from the nodes' own launch.sh, and following resumes
where the raw copies end. A node that cannot be reached is followed as unreached (the watch
may declare it lost); only when none can be reached does attaching fail.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from ddptui.config import HostsConfig
from ddptui.config.secrets import config_masker
from ddptui.events import RunStatus
from ddptui.ingest import parse_chunk, split_complete
from ddptui.launch import liveness, withheld
from ddptui.launch.outcome import LaunchError
from ddptui.launch.reach import map_at_once
from ddptui.nodelog import NodeLogParser
from ddptui.store import rundir
from ddptui.store.owner import this_controller
from ddptui.store.runs import no_run, read_run
from ddptui.store.runs import state_root as resolve_state_root
from ddptui.store.store import Store

if TYPE_CHECKING:
    from ddptui.launch.controller import Controller


def reopen(cls: type[Controller], run_id: str, *, state_root: Path | None, poll: float,
           follow: bool) -> Controller:
    root = resolve_state_root(state_root)
    try:
        meta = read_run(root, run_id)
    except (OSError, ValueError) as e:
        raise LaunchError([no_run(root, run_id, e)]) from None
    config = HostsConfig.from_dict(meta["config"])
    ctl = cls(config, state_root=root, run_id=run_id, poll=poll)
    ctl._meta = {**meta, "controller": this_controller()}
    ctl._meta["nodes"] = {n["name"]: n for n in meta.get("nodes", [])}
    if not ctl._meta["nodes"]:
        raise LaunchError([f"run {run_id} never started on any node "
                           f"(status {meta.get('status')})"])
    ctl._pgids = {n: v.get("pgid") for n, v in ctl._meta["nodes"].items()}
    # the new store has opened no mirror file yet, so recovery may truncate them
    parsers = replay_raw_logs(ctl.store, ctl.local_dir, [n.name for n in config.nodes])
    ctl.evidence.seed(ctl.store)
    ctl.evidence.nccl.reread(ctl.local_dir, [n.name for n in config.nodes], meta.get("nccl"))
    ctl.store.set_run(run_id=run_id, status=RunStatus.RUNNING,
                      started_at=meta.get("started_at"),
                      world_size=meta.get("world_size"))
    errors = map_at_once(list(config.nodes), ctl._reconnect)
    problems = [str(e) for e in errors if isinstance(e, Exception)]
    if problems and len(problems) == len(errors):
        ctl._close_transports()
        raise LaunchError(problems)
    liveness.follow_unreached(ctl, errors)
    ctl.config = withheld.recover(config, ctl.transports,
                                  {n: v["run_dir"] for n, v in ctl._meta["nodes"].items()})
    ctl.masker = config_masker(ctl.config)
    ctl.write_meta()  # run.json names this controller now: the run is not stale
    if follow:
        ctl.start_following(parsers)
    return ctl


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
