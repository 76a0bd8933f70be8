"""The launch, phase by phase: reach every node, plan, put files in place, start.

Each phase runs on every node at once and either succeeds everywhere or raises
:class:`~ddptui.launch.ports.Abort`, after which the session undoes what earlier phases did
on every node (:func:`undo`): a bad hosts file or a node that cannot take the run never
leaves a half-started cluster. A phase sees only its :class:`~ddptui.launch.ports.
LaunchContext`; :func:`launch` calls them in order.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from ddptui.config import NodeConfig
from ddptui.diagnose.preflight import Mark
from ddptui.diagnose.preflight.report import TorchInfo
from ddptui.events import Level, ssh_line
from ddptui.launch import precheck as node_checks
from ddptui.launch import project, rank_env, reserve, staging, warm, withheld
from ddptui.launch.plan import NodeLaunch, Plan, expand_home, make_plan
from ddptui.launch.ports import Abort, LaunchContext, on_every_node
from ddptui.launch.rank_env import probe_as_ranks
from ddptui.outcome import LaunchError
from ddptui.remote import nodeops
from ddptui.remote.reach import Failed, beside, failures, map_at_once, probe
from ddptui.run_state import NodeEvent, NodeRecord
from ddptui.sync.walk import Walked
from ddptui.transport.base import TransportError


def launch(ctx: LaunchContext, *, checks_first: bool, planned: Callable[[Plan], Plan]) -> None:
    """:func:`in_order`; a launch that does not end well cancels the run's steps where
    torchrun was started as ddptui started (``launch.warm``): one that took nothing yet
    would import torch for nothing, and the others are stopped by the undo anyway."""
    try:
        in_order(ctx, checks_first=checks_first, planned=planned)
    except BaseException:
        warm.cancel(ctx.config, ctx.run_id, ctx.warm, ctx.pool.current)
        raise


def in_order(ctx: LaunchContext, *, checks_first: bool, planned: Callable[[Plan], Plan]
             ) -> None:
    """Every phase in order; ``planned`` takes each plan as it is made; ``checks_first``:
    the fast preflight (``--no-preflight``: False).

    Unless setup commands must run first, every node's torchrun is started as soon as its
    node is reached, and holds (see :mod:`ddptui.nodeprog.torchrun_tee`) while the probe, the
    preflight and the code sync run: its import of torch overlaps them instead of following
    them. Nothing it does is visible before its release, and an abort stops it like any
    started node; if starting early fails anywhere, it is undone and the launch goes on in
    order, where the phase at fault explains the failure.
    """
    try:
        withheld.refuse_incomplete(ctx.config)
    except LaunchError as e:
        raise Abort(e.problems, cleanup=False) from None
    walked = project.prepare(ctx)  # a project that cannot ship is refused before any node
    homes = reach(ctx)
    rdzv_store = reserve.reserve_port(ctx, homes)
    hold = None if ctx.config.job.setup else ctx.hold_s
    plan = planned(make_node_plans(ctx, homes, walked, hold, rdzv_store))
    early = hold is not None and start_early(ctx, plan)
    if hold is not None and not early:
        warm.cancel(ctx.config, ctx.run_id, ctx.warm, ctx.pool.current)  # none taken now
        ctx.warm.clear()
        plan = planned(make_node_plans(ctx, homes, walked, rdzv_store=rdzv_store))
    envs = rank_env.for_plan(ctx.config, plan)
    checking = beside(lambda: node_checks.gather_for_launch(ctx.config, ctx.pool.all(), envs)
                      ) if checks_first else None
    try:
        probes, bare = probe_all(ctx, envs)
    finally:
        gathered = checking() if checking is not None else None
    if gathered is not None:
        preflight(ctx, probes, envs, bare, gathered)
    project.check_in_place(ctx, plan)
    project.sync_all(ctx, plan, walked)
    if early:
        release_all(ctx, plan)
    else:
        put_files(ctx, plan)
        project.run_setup(ctx, plan)
        start_all(ctx, plan)


def _failed(ctx: LaunchContext, failed: Failed[NodeConfig]) -> str:
    node, err = failed.item, failed.error
    msg = str(err) if isinstance(err, TransportError | LaunchError) else (
        f"node {node.name} ({node.host}): {type(err).__name__}: {err}")
    ctx.node_update(node.name, NodeEvent.FAIL, msg.split("\n")[0])
    return msg


def reach(ctx: LaunchContext) -> dict[str, str]:
    """Connect to every node; node name -> its home directory. A node that cannot be reached
    ends the launch, with what the probe says of the others (every bad node in one go)."""
    nodes = list(ctx.config.nodes)
    for n in nodes:
        ctx.node_update(n.name, NodeEvent.CONNECT, "")

    problems: list[str] = []
    homes: dict[str, str] = {}

    def reached(node: NodeConfig) -> str:
        transport = ctx.pool.open(node)
        home = transport.home()
        if ctx.hold_s is not None and not warm.at_once(ctx.config, node) and (
                warm.answered(ctx.run_id, node.name)  # sent through ssh as ddptui started
                or warm.over(transport, ctx.config, node, ctx.run_id)):
            ctx.warm.add(node.name)  # an SSH node: torchrun imports while the launch goes on
        return home

    for res in map_at_once(nodes, reached):
        if isinstance(res, Failed):
            problems.append(_failed(ctx, res))
        else:
            homes[res.item.name] = res.value
    if problems:
        problems += _probe(ctx, [n for n in nodes if n.name in homes])[1]
        raise Abort(problems, cleanup=False)
    return homes


def probe_all(ctx: LaunchContext, envs: dict[str, rank_env.RankEnv]
              ) -> tuple[dict[str, nodeops.Probe], dict[str, TorchInfo | None]]:
    """Every node's interpreter and torch as its ranks will see them, and the torch a bare
    login finds there (:func:`ddptui.launch.rank_env.probe_as_ranks`)."""
    nodes = list(ctx.config.nodes)
    probes: dict[str, nodeops.Probe] = {}
    bare: dict[str, TorchInfo | None] = {}
    problems: list[str] = []
    for res in map_at_once(nodes, lambda n: probe_as_ranks(n, ctx.pool.get(n.name),
                                                            envs[n.name])):
        if isinstance(res, Failed):
            problems.append(_failed(ctx, res))
        else:
            probes[res.item.name], bare[res.item.name] = res.value
    if problems:
        raise Abort(problems, cleanup=False)
    return probes, bare


def _probe(ctx: LaunchContext, nodes: list[NodeConfig]
           ) -> tuple[dict[str, nodeops.Probe], list[str]]:
    probes: dict[str, nodeops.Probe] = {}
    problems: list[str] = []
    for res in map_at_once(nodes, lambda n: probe(n, ctx.pool.get(n.name))):
        if isinstance(res, Failed):
            problems.append(_failed(ctx, res))
        else:
            probes[res.item.name] = res.value
    return probes, problems


def preflight(ctx: LaunchContext, probes: dict[str, nodeops.Probe],
              envs: dict[str, rank_env.RankEnv] | None = None,
              bare: dict[str, TorchInfo | None] | None = None,
              gathered: node_checks.Gathered | None = None) -> None:
    """The fast preflight over the open connections (``launch/precheck.py``), in the ranks'
    environment: a run that would fail or hang at its rendezvous is not started. ``launch``
    asks the nodes (``gathered``) while the probe runs: neither waits for the other."""
    outcome = node_checks.before_launch(ctx.config, ctx.pool.all(), probes, envs, bare,
                                        gathered)
    verdict = outcome.verdict
    ctx.routes = {chosen.node: chosen for chosen in verdict.routes}
    ctx.record.update(preflight={"seconds": round(outcome.seconds, 3), "ok": verdict.ok,
                                 "problems": verdict.problems})
    if ctx.routes:
        ctx.record.update(routes={c.node: c.as_note() for c in verdict.routes})
    for r in verdict.cautions:  # the run starts, but is told why it may be slow
        ctx.publish(r.node, [ssh_line(r.node, f"preflight: {r.problem}", time.time(),
                                      Level.WARNING)])
    if verdict.ok:
        return
    failed: dict[str, list[str]] = {}
    for r in verdict.results:
        if r.mark == Mark.FAIL:
            failed.setdefault(r.node, []).append(r.check)
    for node, checks_failed in failed.items():
        ctx.node_update(node, NodeEvent.FAIL, f"preflight: {', '.join(checks_failed)}")
    raise Abort([*verdict.problems, "preflight found the problems above, so the job was not "
                 "started" + (" (torchrun, waiting for the checks on every node, was stopped)"
                              if ctx.started() else "") + "; `ddptui check HOSTS` shows every "
                 "check, `--no-preflight` launches anyway"], cleanup=False)


def make_node_plans(ctx: LaunchContext, homes: dict[str, str], walked: Walked | None = None,
                    hold_s: float | None = None, rdzv_store: reserve.RendezvousStore | None = None
                    ) -> Plan:
    """The pure plan, from what the nodes said; recorded in ``run.json`` before any file is
    written, so that a launch cut short can still be found and cleaned up."""
    cfg = ctx.config
    first = cfg.rendezvous_node
    rdzv_host = cfg.rendezvous.endpoint or first.addr or ctx.pool.get(first.name).address
    workdirs = {n.name: expand_home(n.workdir, homes[n.name]) for n in cfg.nodes}
    plan = make_plan(cfg, ctx.run_id, workdirs=workdirs, rdzv_host=rdzv_host,
                     project_dirs=project.project_dirs(cfg.job, workdirs, homes, walked),
                     hold_s=hold_s, store_node=rdzv_store.host_node if rdzv_store else None,
                     locks={rdzv_store.lock_node: rdzv_store.lock} if rdzv_store else None)
    ctx.record.update(world_size=plan.world_size)
    ctx.record.set_nodes([NodeRecord(n.node.name, n.node_rank, n.node_dir,
                                     project_dir=n.project_dir) for n in plan.nodes])
    return plan


def _upload(ctx: LaunchContext, node_launch: NodeLaunch, warm_spec: str | None = None) -> None:
    name = node_launch.node.name
    ctx.node_update(name, NodeEvent.UPLOAD, "")
    spec = None
    if warm_spec is not None and ctx.hold_s is not None:
        spec = (warm_spec, staging.warm_spec(node_launch, ctx.hold_s))
    try:
        if staging.upload(ctx.pool.get(name), node_launch, ctx.config.job,
                          ctx.routes.get(name), spec):
            ctx.new_workdirs.add(name)
    except staging.RunExists:
        ctx.not_ours.add(name)
        raise


def put_files(ctx: LaunchContext, plan: Plan) -> None:
    on_every_node(plan, lambda n: _upload(ctx, n), cleanup=True)


def start_all(ctx: LaunchContext, plan: Plan) -> None:
    def start(node_launch: NodeLaunch) -> None:
        name = node_launch.node.name
        ctx.node_update(name, NodeEvent.START, "")
        pgid = staging.start(ctx.pool.get(name), node_launch, ctx.run_id)
        ctx.record.node(name, pgid=pgid)
        ctx.node_update(name, NodeEvent.RUN, f"pgid {pgid}")

    on_every_node(plan, start, cleanup=True, kill=True)


def start_early(ctx: LaunchContext, plan: Plan) -> bool:
    """Put every node's files in place and start its torchrun held; False (with whatever
    was done undone) when any node could not, for the launch to go on in order."""
    def early(node_launch: NodeLaunch) -> None:
        name = node_launch.node.name
        spec = warm.spec_path(node_launch.node_dir) if name in ctx.warm else None
        _upload(ctx, node_launch, spec)
        transport = ctx.pool.get(name)
        pgid = staging.take_warm(transport, node_launch, spec) if spec is not None else None
        if pgid is None:
            pgid = staging.start(transport, node_launch, ctx.run_id)
        ctx.record.node(name, pgid=pgid)

    failed = failures(map_at_once(plan.nodes, early))
    if ctx.not_ours:  # going on in order would meet the same: the name is taken
        raise Abort([str(f.error) for f in failed if isinstance(f.error, staging.RunExists)],
                    cleanup=True, kill=True)
    if failed:
        undo(ctx, kill=True, cleanup=True)
        for node_launch in plan.nodes:
            ctx.record.node(node_launch.node.name, pgid=None)
        return False
    return True


def release_all(ctx: LaunchContext, plan: Plan) -> None:
    """Release every held torchrun; one whose hold ran out is started again and released."""
    def release(node_launch: NodeLaunch) -> None:
        name = node_launch.node.name
        transport = ctx.pool.get(name)
        ctx.node_update(name, NodeEvent.START, "")
        route = ctx.routes.get(name)
        if not staging.release(transport, node_launch, route):
            ctx.record.node(name, pgid=staging.start(transport, node_launch, ctx.run_id,
                                                     restart=True))
            if not staging.release(transport, node_launch, route):
                raise LaunchError([f"node {name}: torchrun, started again after its wait for "
                                   "the launch ran out, could not be released"])
        ctx.node_update(name, NodeEvent.RUN, f"pgid {ctx.record.pgid(name)}")

    on_every_node(plan, release, cleanup=True, kill=True)


def undo(ctx: LaunchContext, *, kill: bool, cleanup: bool) -> None:
    """Stop what the launch started and remove the node dirs it wrote (as ``run.json``
    names them), on every node but those where a run of the same name was found: its
    processes and files are not this launch's."""
    dirs = {n: r.run_dir for n, r in ctx.record.nodes().items() if n not in ctx.not_ours}
    rdzv = ctx.record.record().rendezvous
    if kill:
        map_at_once(list(dirs), lambda name: ctx.stopper.stop(name, 2.0))
    if cleanup:
        def remove_node_dir(name: str) -> None:
            transport = ctx.pool.current(name)
            if transport is not None:
                transport.run(nodeops.remove_run_cmd(dirs[name], name in ctx.new_workdirs),
                              timeout=30)
        map_at_once(list(dirs), remove_node_dir)
    transport = ctx.pool.current(rdzv["node"]) if rdzv else None
    if rdzv and transport is not None:  # the port is free again at once, not when it ages
        with contextlib.suppress(Exception):
            transport.run(reserve.release_cmd(rdzv["lock"], ctx.run_id), timeout=30)
