"""The launch, phase by phase: reach every node, plan, put files in place, start.

Each phase runs on every node at once and either succeeds everywhere or ends the launch
through :meth:`Controller.abort`, which undoes what earlier phases did on every node: a bad
hosts file or a node that cannot take the run never leaves a half-started cluster. A new
phase (a preflight, a code sync, setup commands) is one more function here, called in order
from :func:`launch`; the controller itself keeps only the run's bookkeeping.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ddptui.config.secrets import redact_config_dict
from ddptui.diagnose.preflight import Mark
from ddptui.events import NodeStatus, RunStatus
from ddptui.launch import nodeops, project, staging, withheld
from ddptui.launch import preflight as checks
from ddptui.launch.outcome import LaunchError
from ddptui.launch.plan import NodeLaunch, Plan, expand_home, make_plan
from ddptui.launch.reach import map_at_once, probe_node
from ddptui.transport.base import TransportError

if TYPE_CHECKING:
    from ddptui.config import NodeConfig
    from ddptui.launch.controller import Controller


def launch(ctl: Controller) -> None:
    """Every phase in order; on return every node runs torchrun and the followers run."""
    ctl.write_meta(run_id=ctl.run_id, config=redact_config_dict(ctl.config.to_dict()),
                   nodes={})
    try:
        withheld.refuse_incomplete(ctl.config)
    except LaunchError as e:
        ctl.abort(e.problems, cleanup=False)
    ctl.set_status(RunStatus.LAUNCHING, started_at=time.time())
    walked = project.prepare(ctl)  # a project that cannot ship is refused before any node
    homes, probes = reach(ctl)
    preflight(ctl, probes)
    plan = make_node_plans(ctl, homes, walked)
    project.check_in_place(ctl, plan)
    project.sync_all(ctl, plan, walked)
    put_files(ctl, plan)
    project.run_setup(ctl, plan)
    start_all(ctl, plan)
    ctl.set_status(RunStatus.RUNNING)
    ctl.start_following({})


def reach(ctl: Controller) -> tuple[dict[str, str], dict[str, nodeops.Probe]]:
    """Connect to and probe every node; node name -> its home directory, and its probe."""
    nodes = list(ctl.config.nodes)
    for n in nodes:
        ctl.node_state(n.name, NodeStatus.CONNECTING)

    def connect_and_probe(node: NodeConfig) -> tuple[str, nodeops.Probe]:
        transport, probe, home = probe_node(node, ctl.config)
        ctl.transports[node.name] = transport
        return home, probe

    problems: list[str] = []
    homes: dict[str, str] = {}
    probes: dict[str, nodeops.Probe] = {}
    for node, res in zip(nodes, map_at_once(nodes, connect_and_probe), strict=True):
        if isinstance(res, tuple):
            homes[node.name], probes[node.name] = res
            continue
        msg = str(res) if isinstance(res, TransportError | LaunchError) else (
            f"node {node.name} ({node.host}): {type(res).__name__}: {res}")
        problems.append(msg)
        ctl.node_state(node.name, NodeStatus.FAILED, msg.split("\n")[0])
    if problems:
        ctl.abort(problems, cleanup=False)
    return homes, probes


def preflight(ctl: Controller, probes: dict[str, nodeops.Probe]) -> None:
    """The fast preflight over the open connections (``launch/preflight.py``): a run that
    would fail or hang at its rendezvous is not started. ``--no-preflight`` skips it."""
    if not ctl.preflight:
        return
    outcome = checks.before_launch(ctl.config, ctl.transports, probes)
    verdict = outcome.verdict
    ctl.write_meta(preflight={"seconds": round(outcome.seconds, 3), "ok": verdict.ok,
                              "problems": verdict.problems})
    if verdict.ok:
        return
    failed: dict[str, list[str]] = {}
    for r in verdict.results:
        if r.mark == Mark.FAIL:
            failed.setdefault(r.node, []).append(r.check)
    for node, checks_failed in failed.items():
        ctl.node_state(node, NodeStatus.FAILED, f"preflight: {', '.join(checks_failed)}")
    ctl.abort([*verdict.problems, "preflight found the problems above, so nothing was "
               "started; `ddptui check HOSTS` shows every check, `--no-preflight` launches "
               "anyway"], cleanup=False)


def make_node_plans(ctl: Controller, homes: dict[str, str],
                    walked: project.Walked | None = None) -> Plan:
    """The pure plan, from what the nodes said; recorded in ``run.json`` before any file is
    written, so that a launch cut short can still be found and cleaned up."""
    cfg = ctl.config
    first = cfg.rendezvous_node
    rdzv_host = cfg.rendezvous.endpoint or first.addr or ctl.transports[first.name].address
    workdirs = {n.name: expand_home(n.workdir, homes[n.name]) for n in cfg.nodes}
    plan = make_plan(cfg, ctl.run_id, workdirs=workdirs, rdzv_host=rdzv_host,
                     project_dirs=project.project_dirs(ctl, workdirs, homes, walked))
    ctl.plan = plan
    ctl.store.set_run(world_size=plan.world_size)
    ctl.write_meta(
        world_size=plan.world_size,
        nodes={launch.node.name: {"name": launch.node.name, "node_rank": launch.node_rank,
                                  "run_dir": launch.node_dir, "pgid": None}
               for launch in plan.nodes})
    return plan


def put_files(ctl: Controller, plan: Plan) -> None:
    def upload(node_launch: NodeLaunch) -> None:
        ctl.node_state(node_launch.node.name, NodeStatus.UPLOADING)
        staging.upload(ctl.transports[node_launch.node.name], node_launch, ctl.config.job)

    errs = [e for e in map_at_once(list(plan.nodes), upload) if isinstance(e, Exception)]
    if errs:
        ctl.abort([str(e) for e in errs], cleanup=True)


def start_all(ctl: Controller, plan: Plan) -> None:
    def start(node_launch: NodeLaunch) -> None:
        name = node_launch.node.name
        ctl.node_state(name, NodeStatus.STARTING)
        pgid = staging.start(ctl.transports[name], node_launch)
        ctl.record_pgid(name, pgid)
        ctl.node_state(name, NodeStatus.RUNNING, f"pgid {pgid}")

    errs = [e for e in map_at_once(list(plan.nodes), start) if isinstance(e, Exception)]
    if errs:
        ctl.abort([str(e) for e in errs], cleanup=True, kill=True)
