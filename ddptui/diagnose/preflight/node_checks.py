"""The checks of a node by itself: reached, interpreter, torch (and that it agrees with the
other nodes'), GPUs against ``nproc_per_node`` and who holds them, workdir, clock."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from ddptui.config import HostsConfig, NodeConfig
from ddptui.diagnose.preflight.envdiff import env_changes_torch, explain
from ddptui.diagnose.preflight.report import NodeReport, TorchInfo
from ddptui.diagnose.preflight.verdict import (
    Context,
    Outcome,
    caution,
    fail,
    gib,
    mib,
    ok,
    skip,
)

#: Below this, a run's logs and snapshots may fill the disk midway.
MIN_FREE_BYTES = 1 << 30
#: A GPU holding more than this with no process listed is used from elsewhere (a container).
HELD_MIB = 1024.0
#: Beyond this, the nodes' log times (torch's, NCCL's) no longer line up.
CLOCK_LIMIT_S = 2.0


def check_ssh(c: Context, n: NodeConfig, r: NodeReport) -> Outcome:
    if r.unreachable is not None:
        return fail("unreachable", f"node {n.name} ({n.host}): {r.unreachable}")
    return ok("connected")


def check_python(c: Context, n: NodeConfig, r: NodeReport) -> Outcome:
    if r.python_missing:
        return fail("missing", f"node {n.name}: the interpreter {n.python!r} does not exist "
                     f"there ({r.not_run}). Set `python:` for this node (or in "
                     "`defaults:`) to the interpreter that has torch.")
    if r.python is None:
        return fail("did not run", f"node {n.name}: {n.python} could not run the check: "
                     f"{r.not_run}. Make `python:` a working Python 3 interpreter.")
    return ok(f"{r.python_version}")


def torch_reference(config: HostsConfig, reports: Mapping[str, NodeReport],
                     ) -> tuple[str, TorchInfo] | None:
    """The versions most nodes have; on a tie, those of the earliest node rank whose `env:`
    does not change its torch (a bare login there imports the same), else the earliest."""
    have = [(n.name, t, env_changes_torch(r)) for n in config.ordered_nodes
            if (r := reports.get(n.name)) is not None and (t := r.torch) is not None
            and t.error is None and t.version]
    if not have:
        return None
    counts = Counter(t.key for _, t, _ in have)
    best = max(counts.values())
    tied = [(name, t, changed) for name, t, changed in have if counts[t.key] == best]
    name, t, _ = min(tied, key=lambda x: x[2])  # stable: the earliest of the unchanged
    return name, t


def check_torch(c: Context, n: NodeConfig, r: NodeReport) -> Outcome:
    t = r.torch
    if t is None:
        return skip("not checked")
    why = explain(n.name, r)
    if t.error is not None:
        return fail("no torch", f"node {n.name}: {r.python or n.python} cannot import torch "
                     f"({t.error}). " + (why or "Install torch there, or point `python:` at "
                                               "an environment that has it."))
    ref = c.torch_ref
    if ref is not None and ref[1].key != t.key:
        parts = [f"{w} {mine or 'none'}" for w, mine, theirs in
                 zip(("torch", "CUDA", "NCCL"), t.key, ref[1].key, strict=True)
                 if mine != theirs]
        other = ", ".join(f"{w} {theirs or 'none'}" for w, mine, theirs in
                          zip(("torch", "CUDA", "NCCL"), t.key, ref[1].key, strict=True)
                          if mine != theirs)
        return fail(t.version or "?", f"node {n.name} has {', '.join(parts)} but node "
                     f"{ref[0]} has {other}: ranks of different builds fail or hang at the "
                     "first collective. " + (why or "Install the same torch on every "
                                             f"node, or point node {n.name}'s `python:` at "
                                             "an environment that has it."))
    return ok(t.describe().removeprefix("torch "))


def check_gpus(c: Context, n: NodeConfig, r: NodeReport) -> Outcome:
    if not r.gpu_checked:
        return skip("not checked")
    g = r.gpu
    if g is None:
        if n.nproc_per_node == "gpu":
            return fail("no GPU", f"node {n.name} has no nvidia-smi, so no NVIDIA GPU, but "
                         "nproc_per_node is `gpu`: torchrun stops there. Set a number, or "
                         "`auto`.")
        return skip("no nvidia-smi")
    if g.error is not None:
        first = g.error.splitlines()[0] if g.error else "no output"
        return fail("nvidia-smi fails", f"node {n.name}: nvidia-smi fails ({first}): the "
                     "driver is not loaded or a GPU is unhealthy. Fix the node, or leave it "
                     "out of the hosts file.")
    count = len(g.gpus)
    names = Counter(x.name for x in g.gpus)
    have = ", ".join(f"{k}× {name}" for name, k in names.items()) or "no GPU"
    want = n.nproc_per_node
    if count == 0 and want == "gpu":
        return fail("no GPU", f"node {n.name} lists no GPU but nproc_per_node is `gpu`: "
                     "torchrun stops there. Set a number, or `auto`.")
    if isinstance(want, int) and 0 < count < want:
        return fail(f"{count} < {want}", f"node {n.name} has {count} GPU(s) ({have}) but "
                     f"nproc_per_node is {want}: ranks would share a GPU, which NCCL refuses "
                     f"('Duplicate GPU detected'). Set nproc_per_node to {count}, or `gpu`.")
    visible = r.login_env.get("CUDA_VISIBLE_DEVICES")
    shown = [d for d in (visible or "").split(",") if d.strip()]
    if visible is not None and isinstance(want, int) and len(shown) < want <= count:
        return fail(f"{len(shown)} visible < {want}", f"node {n.name}: CUDA_VISIBLE_DEVICES="
                     f"{visible or '(empty)'} shows its ranks {len(shown)} of its {count} GPUs "
                     f"but nproc_per_node is {want}: rank {len(shown)} would fail with "
                     "'invalid device ordinal'. Leave CUDA_VISIBLE_DEVICES out of `env:` "
                     "(ddptui gives torchrun every GPU of the node), or set nproc_per_node to "
                     f"{len(shown)}.")
    t = r.torch
    if count and t is not None and t.error is None and t.version:
        if t.cuda is None:
            return fail("CPU torch", f"node {n.name} has {have} but its torch {t.version} "
                         "is a CPU build: the ranks would not use them. Install a CUDA build "
                         "of torch there.")
        if t.cuda_available is False:
            return fail("CUDA unusable", f"node {n.name} has {have} but torch cannot use "
                         f"them (torch.cuda.is_available() is False): the driver is older "
                         f"than CUDA {t.cuda} needs, or CUDA_VISIBLE_DEVICES hides them.")
    return ok(have)


def check_gpu_use(c: Context, n: NodeConfig, r: NodeReport) -> Outcome:
    g = r.gpu
    if g is None or g.error is not None or not g.gpus:
        return skip("not applicable" if r.gpu_checked else "not checked")
    index = {x.uuid: x.index for x in g.gpus}
    held = []
    runs = set()
    for p in g.processes:
        cmd = p.command or p.name
        held.append(f"GPU {index.get(p.gpu_uuid, '?')} by pid {p.pid} ({cmd}, "
                    f"{mib(p.used_mib)})")
        if p.run:
            runs.add(p.run.split("/")[0])
    listed = {p.gpu_uuid for p in g.processes}
    for x in g.gpus:
        if x.uuid not in listed and x.used_mib is not None and x.used_mib > HELD_MIB:
            held.append(f"GPU {x.index} holds {mib(x.used_mib)} for a process not shown "
                        "here (another container?)")
    if not held:
        return ok("idle")
    todo = (f"it is left from ddptui run {', '.join(sorted(runs))}: "
            f"`ddptui stop {sorted(runs)[0]}`" if runs else
            "stop it if it is an orphan of an earlier run, or choose other GPUs with "
            "CUDA_VISIBLE_DEVICES in `env:`")
    return fail("in use", f"node {n.name}: {'; '.join(held)}. A new run there would run "
                 f"out of memory or share the GPU; {todo}.")


def check_cpus(c: Context, n: NodeConfig, r: NodeReport) -> Outcome:
    """On Slurm: the CPUs the ranks may run on, against those the job holds on the node.
    One core for all of a node's ranks starves their DataLoader workers (Lightning #18650)
    and is easy to get by accident (a task's default binding, an inherited
    ``SLURM_CPUS_PER_TASK=1``); unless the allocation holds only that one."""
    if n.transport != "srun":
        return skip("not on Slurm")
    if r.affinity is None:
        return skip("not checked")
    have, held = len(r.affinity), r.slurm_cpus
    cpus = ",".join(str(x) for x in r.affinity)
    if held is not None and have < held:
        ranks = (f"its {n.nproc_per_node} ranks" if isinstance(n.nproc_per_node, int)
                 else "its ranks")
        return fail(f"{have} of {held}", f"node {n.name}: {ranks} may run on {have} of the "
                     f"{held} CPUs Slurm job {r.slurm_job} holds there (CPU {cpus}), so they "
                     "share them and their DataLoader workers starve. Something narrows the "
                     "CPUs of ddptui's step there (the cluster's task binding, a `taskset` or "
                     "`numactl` in `env:`): ask for a binding of none, or ask Slurm for no more "
                     f"CPUs per node than {have} (`--cpus-per-task`, `--exclusive`).")
    if have == 1 and isinstance(n.nproc_per_node, int) and n.nproc_per_node > 1:
        return caution(f"1 CPU for {n.nproc_per_node} ranks", f"node {n.name}: its "
                       f"{n.nproc_per_node} ranks share the one CPU Slurm job {r.slurm_job} "
                       "holds there, so their DataLoader workers will starve; ask Slurm for "
                       f"{n.nproc_per_node} or more CPUs per node (`salloc --ntasks-per-node="
                       f"{n.nproc_per_node}`, `-c {n.nproc_per_node}` or `--exclusive`).")
    return ok(f"{have} CPUs" + (f" ({held} held)" if held is not None and held != have else ""))


def check_workdir(c: Context, n: NodeConfig, r: NodeReport) -> Outcome:
    w = r.workdir
    if w is None:
        err = r.errors.get("workdir")
        if err:
            return fail("error", f"node {n.name}: could not check workdir {n.workdir}: "
                         f"{err}.")
        return skip("not checked")
    if not w.writable:
        where = w.path if w.exists else f"{w.path} (to be created)"
        return fail("not writable", f"node {n.name}: workdir {where} is not writable "
                     f"({w.error}); every run keeps its files there. Set `workdir:` to a "
                     "directory the login user can write.")
    if w.free_bytes is not None and w.free_bytes < MIN_FREE_BYTES:
        return fail(f"{gib(w.free_bytes)} free", f"node {n.name}: only "
                     f"{gib(w.free_bytes)} free at {w.path}: logs and snapshots may fill "
                     "it midway. Free some space or set `workdir:` elsewhere.")
    return ok(f"{gib(w.free_bytes)} free" if w.free_bytes is not None else "writable")


def check_clock(c: Context, n: NodeConfig, r: NodeReport) -> Outcome:
    off = r.clock_offset
    if off is None:
        return skip("not checked")
    if abs(off) > CLOCK_LIMIT_S:
        return fail(f"{off:+.1f} s", f"node {n.name}'s clock is {off:+.1f} s off this "
                     "machine's: its log times (torch's, NCCL's) will not line up with the "
                     "other nodes'. Keep it in sync (chrony, systemd-timesyncd).")
    return ok(f"{off:+.2f} s")
