"""What ``ddptui clean`` removes, decided from what the nodes and the state dir say: pure.

Each node answers a scan (:data:`NODE_SRC` ``scan``): its node dirs, each with its liveness,
when it ended, its size and the code caches its ``launch.sh`` names; and its code caches with
when each was last used. :func:`choose` decides across the whole cluster, since a run is one
thing on every node: a run alive on any node is alive everywhere, and is never touched. Of the
finished runs, the ``keep`` newest stay, and with ``older_than`` only those that ended longer
ago go. A code cache goes when no run that stays (alive or kept) uses it on that node and it
was not used for :data:`CACHE_GRACE_S` (a launch writes its ``launch.sh`` just after its sync).

The node program (``remove``) checks liveness again right before it removes anything, so a
run started between the scan and the removal is skipped, and counts the bytes it frees by
inode: synced trees share unchanged files as hard links, and removing one tree frees only what
no other link holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ddptui.remote import nodeops
from ddptui.store import rundir

#: ``--keep``'s default: the newest finished runs stay, so `ddptui logs` keeps recent history.
DEFAULT_KEEP = 3
#: A node dir with a ``launch.sh`` but no ``pgid`` yet is a launch under way (its setup steps
#: may take an hour) for this long; after that it is what a killed launch left.
LAUNCH_GRACE_S = 2 * 3600
#: A code cache used this recently may belong to a launch whose ``launch.sh`` is not written.
CACHE_GRACE_S = 600
#: A sync's temporary tree this old is what an interrupted sync left.
TMP_GRACE_S = 3600

NODE_SRC = nodeops.PROCS_SRC + r"""
import json, re, shutil, stat, sys, time
mode, runs_root, code_root, suf, grace = sys.argv[1:6]
grace, code_root = float(grace), os.path.normpath(code_root)
runs_root = os.path.normpath(runs_root)
CODE_REF = re.compile(r"\.ddptui/code/([A-Za-z0-9_][A-Za-z0-9._-]*)")
GROUPS = set()  # process groups with a live member (a group of zombies is over)
def markers():
    found = set()
    GROUPS.clear()
    for pid, env, fields in procs():
        GROUPS.add(int(fields[2]))
        for e in env:
            if e.startswith(b"DDPTUI_RUN="):
                found.add(e[11:].decode("utf-8", "replace"))
    return found
def mtime(p):
    try:
        return os.lstat(p).st_mtime
    except OSError:
        return None
def read(p):
    try:
        with open(p, "rb") as f:
            return f.read(1 << 22).decode("utf-8", "replace")
    except OSError:
        return None
def state(d, run_id, rank, marks, now):
    if run_id + "/" + rank in marks:
        return "live"
    code = read(os.path.join(d, "exit_code"))
    pgid = (read(os.path.join(d, "pgid")) or "").strip()
    if code is None and pgid.isdigit() and int(pgid) in GROUPS:
        return "live"
    if code is None and not pgid:
        t = mtime(os.path.join(d, "launch.sh")) or mtime(d)
        if t is not None and now - t < grace:
            return "launching"
    return "done"
def size(paths):
    seen, total = {}, 0
    for top in paths:
        stack = [top]
        while stack:
            p = stack.pop()
            try:
                st = os.lstat(p)
            except OSError:
                continue
            b = getattr(st, "st_blocks", 0) * 512 or st.st_size
            if stat.S_ISDIR(st.st_mode):
                total += b
                try:
                    stack.extend(os.path.join(p, n) for n in os.listdir(p))
                except OSError:
                    pass
            elif st.st_nlink <= 1:
                total += b
            else:
                k = (st.st_dev, st.st_ino)
                n, _ = seen.get(k, (0, b))
                seen[k] = (n + 1, b)
                if n + 1 == st.st_nlink:
                    total += b
    return total
def node_dirs():
    out = []
    try:
        ids = sorted(os.listdir(runs_root))
    except OSError:
        return out
    for run_id in ids:
        try:
            names = sorted(os.listdir(os.path.join(runs_root, run_id)))
        except OSError:
            continue
        for n in names:
            if n.startswith("node") and n[4:].isdigit():
                out.append((run_id, n[4:], os.path.join(runs_root, run_id, n)))
    return out
def scan():
    now, marks = time.time(), markers()
    runs = []
    for run_id, rank, d in node_dirs():
        s = state(d, run_id, rank, marks, now)
        ended = max([t for t in (mtime(os.path.join(d, x)) for x in
                                 ("exit_code", "node.log", "launch.sh", "")) if t] or [0])
        refs = sorted(set(CODE_REF.findall(read(os.path.join(d, "launch.sh")) or "")))
        runs.append({"run_id": run_id, "rank": int(rank), "dir": d, "state": s,
                     "ended": ended, "bytes": size([d]), "code": refs})
    code, tmp = [], []
    try:
        names = sorted(os.listdir(code_root))
    except OSError:
        names = []
    for n in names:
        p = os.path.join(code_root, n)
        if n.startswith(".tmp-"):
            tmp.append({"name": n, "used": mtime(p) or 0})
        elif not n.endswith(suf) and not n.startswith(".") and os.path.isdir(p):
            used = max(mtime(p + suf) or 0, mtime(p) or 0)
            code.append({"name": n, "used": used, "bytes": size([p, p + suf])})
    return {"runs": runs, "code": code, "tmp": tmp, "now": now}
def remove(todo):
    now, marks = time.time(), markers()
    live_refs, skipped = set(), []
    for run_id, rank, d in node_dirs():
        if state(d, run_id, rank, marks, now) != "done":
            live_refs.update(CODE_REF.findall(read(os.path.join(d, "launch.sh")) or ""))
    dirs, runs, caches = [], 0, 0
    for d, run_id, rank in todo["runs"]:
        d = os.path.normpath(d)
        if os.path.dirname(os.path.dirname(d)) != runs_root or not os.path.isdir(d):
            continue  # never anything but a node dir of this workdir
        if state(d, run_id, str(rank), marks, now) != "done":
            skipped.append(run_id)
            continue
        dirs.append(d)
        runs += 1
    for n in todo["code"] + todo["tmp"]:
        p = os.path.join(code_root, n)
        if "/" in n or n in (".", "..") or n in live_refs or not os.path.lexists(p):
            continue
        dirs += [p, p + suf]
        caches += 1
    freed = size(dirs)
    errors = []
    if not todo["dry"]:
        for p in dirs:
            # another node sharing this disk may be removing the same tree at once
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    errors.append(str(e))
            if os.path.isdir(p) and not os.path.islink(p):
                errors.append("could not remove all of " + p)
            if os.path.normpath(os.path.dirname(p)) != code_root:
                try:
                    os.rmdir(os.path.dirname(p))
                except OSError:
                    pass
    return {"runs": runs, "code": caches, "bytes": freed, "skipped": skipped, "errors": errors}
if mode == "scan":
    print(json.dumps(scan()))
else:
    print(json.dumps(remove(json.loads(sys.argv[6]))))
"""


def node_args(workdir: str, todo: str | None = None) -> tuple[str, ...]:
    """The program's arguments: scan, or remove ``todo`` (:func:`removal_request`), in the
    runs and code caches of this workdir."""
    return ("scan" if todo is None else "remove", f"{workdir.rstrip('/')}/{rundir.NODE_RUNS}",
            rundir.code_root(workdir), rundir.CODE_MANIFEST_SUFFIX, str(LAUNCH_GRACE_S),
            *(() if todo is None else (todo,)))


@dataclass(frozen=True)
class NodeRun:
    """One node dir as a node's scan saw it."""

    run_id: str
    rank: int
    dir: str
    state: str  # live, launching or done
    ended: float
    bytes: int
    code: tuple[str, ...]

    @property
    def alive(self) -> bool:
        return self.state != "done"


@dataclass(frozen=True)
class NodeScan:
    runs: tuple[NodeRun, ...]
    code: Mapping[str, float]  # cache name -> when it was last used
    code_bytes: Mapping[str, int]
    tmp: Mapping[str, float]
    now: float


def parse_scan(stdout: str) -> NodeScan | None:
    """The scan's JSON line (a login banner may come before it); None if there is none."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and "runs" in d:
            runs = tuple(NodeRun(str(r["run_id"]), int(r["rank"]), str(r["dir"]),
                                 str(r["state"]), float(r["ended"]), int(r["bytes"]),
                                 tuple(r["code"])) for r in d["runs"])
            return NodeScan(runs, {c["name"]: float(c["used"]) for c in d["code"]},
                            {c["name"]: int(c["bytes"]) for c in d["code"]},
                            {t["name"]: float(t["used"]) for t in d["tmp"]}, float(d["now"]))
    return None


@dataclass(frozen=True)
class LocalRun:
    """A run dir of this machine's state dir that belongs to this hosts file's cluster."""

    run_id: str
    live: bool  # its run.json says launching, running or stopping
    ended: float  # ended_at, else started_at, else 0
    nodes: tuple[str, ...]  # the node names its run.json records


@dataclass(frozen=True)
class Policy:
    keep: int = DEFAULT_KEEP
    older_than_days: float | None = None


@dataclass
class Choice:
    """What goes, node by node and here, and what stays because it is alive."""

    node_runs: dict[str, list[NodeRun]] = field(default_factory=dict)
    node_code: dict[str, list[str]] = field(default_factory=dict)
    node_tmp: dict[str, list[str]] = field(default_factory=dict)
    local: list[str] = field(default_factory=list)
    live: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    #: Runs kept here whose node dirs no node has any more: ``ddptui logs`` marks them.
    gone_from_nodes: list[str] = field(default_factory=list)


def choose(scans: Mapping[str, NodeScan], local: Iterable[LocalRun], policy: Policy,
           now: float) -> Choice:
    """Which runs and caches go (see the module); ``scans`` covers every node of the file."""
    local = {r.run_id: r for r in local}
    on_nodes: dict[str, list[NodeRun]] = {}
    for scan in scans.values():
        for r in scan.runs:
            on_nodes.setdefault(r.run_id, []).append(r)
    live, ended = set(), {}
    for run_id in set(on_nodes) | set(local):
        entries = on_nodes.get(run_id, [])
        mine = local.get(run_id)
        if any(r.alive for r in entries):
            live.add(run_id)
        elif not entries and mine is not None and mine.live and (
                not mine.nodes or not set(mine.nodes) <= set(scans)):
            live.add(run_id)  # said to run, on nodes this file does not name: not ours to judge
        else:
            times = [r.ended for r in entries] or [mine.ended if mine else 0.0]
            ended[run_id] = max(times)
    finished = sorted(ended, key=lambda i: (ended[i], i), reverse=True)
    limit = None if policy.older_than_days is None else now - policy.older_than_days * 86400
    going = {i for i in finished[policy.keep:] if limit is None or ended[i] < limit}
    out = Choice(live=sorted(live), kept=sorted(set(finished) - going))
    for name, scan in scans.items():
        out.node_runs[name] = [r for r in scan.runs if r.run_id in going]
        used = {c for r in scan.runs if r.run_id not in going for c in r.code}
        out.node_code[name] = sorted(
            c for c, t in scan.code.items() if c not in used and now - t > CACHE_GRACE_S
            and (limit is None or t < limit))
        out.node_tmp[name] = sorted(t for t, m in scan.tmp.items() if now - m > TMP_GRACE_S)
    out.local = sorted(i for i in going if i in local)
    out.gone_from_nodes = sorted(
        i for i, r in local.items()
        if i not in going and i not in on_nodes and r.nodes and set(r.nodes) <= set(scans))
    return out


def removal_request(runs: list[NodeRun], code: list[str], tmp: list[str], dry: bool) -> str:
    """What the ``remove`` program is to remove (its last argument: paths, no secret)."""
    return json.dumps({"runs": [[r.dir, r.run_id, r.rank] for r in runs], "code": code,
                       "tmp": tmp, "dry": dry})


@dataclass(frozen=True)
class Freed:
    """What one node's ``remove`` freed (or, dry, would free)."""

    runs: int
    code: int
    bytes: int
    skipped: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


def parse_freed(stdout: str) -> Freed | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            d: Any = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and "bytes" in d:
            return Freed(int(d["runs"]), int(d["code"]), int(d["bytes"]),
                         tuple(d.get("skipped", ())), tuple(d.get("errors", ())))
    return None
