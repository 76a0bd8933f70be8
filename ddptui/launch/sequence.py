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
from ddptui.launch.reach import connect, map_at_once, probe
from ddptui.transport.base import TransportError

if TYPE_CHECKING:
    from ddptui.config import NodeConfig
    from ddptui.launch.controller import Controller


def launch(ctl: Controller) -> None:
    """Every phase in order; on return every node runs torchrun and the followers run.

    Unless setup commands must run first, every node's torchrun is started as soon as its
    node is reached, and holds (see :mod:`ddptui.launch.torchrun_tee`) while the probe, the
    preflight and the code sync run: its import of torch overlaps them instead of following
    them. Nothing it does is visible before its release, and an abort stops it like any
    started node; if starting early fails anywhere, it is undone and the launch goes on in
    order, where the phase at fault explains the failure.
    """
    ctl.write_meta(run_id=ctl.run_id, config=redact_config_dict(ctl.config.to_dict()),
                   nodes={})
    try:
        withheld.refuse_incomplete(ctl.config)
    except LaunchError as e:
        ctl.abort(e.problems, cleanup=False)
    ctl.set_status(RunStatus.LAUNCHING, started_at=time.time())
    walked = project.prepare(ctl)  # a project that cannot ship is refused before any node
    homes = reach(ctl)
    hold = None if ctl.config.job.setup else ctl.hold_s
    plan = make_node_plans(ctl, homes, walked, hold)
    early = hold is not None and start_early(ctl, plan)
    if hold is not None and not early:
        plan = make_node_plans(ctl, homes, walked)
    probes = probe_all(ctl)
    preflight(ctl, probes)
    project.check_in_place(ctl, plan)
    project.sync_all(ctl, plan, walked)
    if early:
        release_all(ctl, plan)
    else:
        put_files(ctl, plan)
        project.run_setup(ctl, plan)
        start_all(ctl, plan)
    ctl.set_status(RunStatus.RUNNING)
    ctl.start_following({})


def _failed(ctl: Controller, node: NodeConfig, err: Exception) -> str:
    msg = str(err) if isinstance(err, TransportError | LaunchError) else (
        f"node {node.name} ({node.host}): {type(err).__name__}: {err}")
    ctl.node_state(node.name, NodeStatus.FAILED, msg.split("\n")[0])
    return msg


def reach(ctl: Controller) -> dict[str, str]:
    """Connect to every node; node name -> its home directory. A node that cannot be reached
    ends the launch, with what the probe says of the others (every bad node in one go)."""
    nodes = list(ctl.config.nodes)
    for n in nodes:
        ctl.node_state(n.name, NodeStatus.CONNECTING)

    def open_node(node: NodeConfig) -> str:
        transport = connect(node, ctl.config)
        ctl.transports[node.name] = transport
        return transport.home()

    problems: list[str] = []
    homes: dict[str, str] = {}
    for node, res in zip(nodes, map_at_once(nodes, open_node), strict=True):
        if isinstance(res, str):
            homes[node.name] = res
        else:
            problems.append(_failed(ctl, node, res))
    if problems:
        problems += _probe(ctl, [n for n in nodes if n.name in homes])[1]
        ctl.abort(problems, cleanup=False)
    return homes


def probe_all(ctl: Controller) -> dict[str, nodeops.Probe]:
    """Every node's interpreter and torch (:func:`ddptui.launch.reach.probe`)."""
    probes, problems = _probe(ctl, list(ctl.config.nodes))
    if problems:
        ctl.abort(problems, cleanup=False)
    return probes


def _probe(ctl: Controller, nodes: list[NodeConfig]
           ) -> tuple[dict[str, nodeops.Probe], list[str]]:
    probes: dict[str, nodeops.Probe] = {}
    problems: list[str] = []
    found = map_at_once(nodes, lambda n: probe(n, ctl.transports[n.name]))
    for node, res in zip(nodes, found, strict=True):
        if isinstance(res, nodeops.Probe):
            probes[node.name] = res
        else:
            problems.append(_failed(ctl, node, res))
    return probes, problems


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
    ctl.abort([*verdict.problems, "preflight found the problems above, so the job was not "
               "started" + (" (torchrun, waiting for the checks on every node, was stopped)"
                            if ctl.started else "") + "; `ddptui check HOSTS` shows every check, "
               "`--no-preflight` launches anyway"], cleanup=False)


def make_node_plans(ctl: Controller, homes: dict[str, str],
                    walked: project.Walked | None = None, hold_s: float | None = None) -> Plan:
    """The pure plan, from what the nodes said; recorded in ``run.json`` before any file is
    written, so that a launch cut short can still be found and cleaned up."""
    cfg = ctl.config
    first = cfg.rendezvous_node
    rdzv_host = cfg.rendezvous.endpoint or first.addr or ctl.transports[first.name].address
    workdirs = {n.name: expand_home(n.workdir, homes[n.name]) for n in cfg.nodes}
    plan = make_plan(cfg, ctl.run_id, workdirs=workdirs, rdzv_host=rdzv_host,
                     project_dirs=project.project_dirs(ctl, workdirs, homes, walked),
                     hold_s=hold_s)
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
        if staging.upload(ctl.transports[node_launch.node.name], node_launch, ctl.config.job):
            ctl.new_workdirs.add(node_launch.node.name)

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


def start_early(ctl: Controller, plan: Plan) -> bool:
    """Put every node's files in place and start its torchrun held; False (with whatever
    was done undone) when any node could not, for the launch to go on in order."""
    def early(node_launch: NodeLaunch) -> None:
        name = node_launch.node.name
        ctl.node_state(name, NodeStatus.UPLOADING)
        transport = ctl.transports[name]
        if staging.upload(transport, node_launch, ctl.config.job):
            ctl.new_workdirs.add(name)
        ctl.record_pgid(name, staging.start(transport, node_launch))

    if any(isinstance(e, Exception) for e in map_at_once(list(plan.nodes), early)):
        undo(ctl, kill=True, cleanup=True)
        for node_launch in plan.nodes:
            ctl.record_pgid(node_launch.node.name, None)
        return False
    return True


def release_all(ctl: Controller, plan: Plan) -> None:
    """Release every held torchrun; one whose hold ran out is started again and released."""
    def release(node_launch: NodeLaunch) -> None:
        name = node_launch.node.name
        transport = ctl.transports[name]
        ctl.node_state(name, NodeStatus.STARTING)
        if not staging.release(transport, node_launch):
            restart = nodeops.restart_cmd(node_launch.node_dir)
            ctl.record_pgid(name, staging.start(transport, node_launch, restart))
            if not staging.release(transport, node_launch):
                raise LaunchError([f"node {name}: torchrun, started again after its wait for "
                                   "the launch ran out, could not be released"])
        ctl.node_state(name, NodeStatus.RUNNING, f"pgid {ctl.pgid(name)}")

    errs = [e for e in map_at_once(list(plan.nodes), release) if isinstance(e, Exception)]
    if errs:
        ctl.abort([str(e) for e in errs], cleanup=True, kill=True)


def undo(ctl: Controller, *, kill: bool, cleanup: bool) -> None:
    """Stop what the launch started and remove the node dirs it wrote, on every node."""
    if ctl.plan is None:
        return
    if kill:
        map_at_once([n.node.name for n in ctl.plan.nodes], lambda name: ctl._stop_node(name, 2.0))
    if cleanup:
        def remove_node_dir(node_launch: NodeLaunch) -> None:
            transport = ctl.transports.get(node_launch.node.name)
            if transport is not None:
                transport.run(nodeops.remove_run_cmd(
                    node_launch.node_dir, node_launch.node.name in ctl.new_workdirs), timeout=30)
        map_at_once(list(ctl.plan.nodes), remove_node_dir)
