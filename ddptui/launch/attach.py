"""Reopening a run from its run dir: ``ddptui attach``, the dashboard's engine, ``ddptui stop``.

The store is rebuilt from the raw node logs and the mirror's checkpoint before any node is
asked anything (so nothing is mirrored twice), then every node is reconnected, the secret
values run.json withholds are read back from the nodes' own launch.sh, and following resumes
where the raw copies end. A node that cannot be reached is followed as unreached (the watch
may declare it lost); only when none can be reached does attaching fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ddptui.config import HostsConfig
from ddptui.config.secrets import config_masker
from ddptui.events import RunStatus
from ddptui.launch import liveness, withheld
from ddptui.launch.follow import replay_raw_logs
from ddptui.launch.outcome import LaunchError
from ddptui.launch.reach import map_at_once
from ddptui.store.owner import this_controller
from ddptui.store.runs import no_run, read_run
from ddptui.store.runs import state_root as resolve_state_root

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
