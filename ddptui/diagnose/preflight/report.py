"""A node's preflight answer, read into typed facts: pure, so recorded answers test every rule.

The node program (:mod:`ddptui.diagnose.preflight.probe`) prints one JSON line; ``nvidia-smi``
output is passed through as its CSV text and read here, by its header, so a recorded capture
and a live answer go through the same parser whatever columns or units they carry.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddptui.events import JSON


@dataclass(frozen=True)
class TorchInfo:
    version: str | None = None
    cuda: str | None = None
    """The CUDA torch was built with (None: a CPU build)."""
    nccl: str | None = None
    cuda_available: bool | None = None
    devices: int | None = None
    error: str | None = None
    """Why ``import torch`` failed there."""
    path: str | None = None
    """The directory torch was found in: two environments that import the same version
    from two places are told apart, and the place says which path entry won."""

    @property
    def key(self) -> tuple[str | None, str | None, str | None]:
        """What must agree across nodes."""
        return (self.version, self.cuda, self.nccl)

    def describe(self) -> str:
        extra = [s for s in (self.cuda and f"CUDA {self.cuda}",
                             self.nccl and f"NCCL {self.nccl}") if s]
        return f"torch {self.version}" + (f" ({', '.join(extra)})" if extra else "")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    used_mib: float | None
    total_mib: float | None


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_mib: float | None
    gpu_uuid: str
    command: str | None = None
    """Its command line, when the node let us read it."""
    run: str | None = None
    """The ``DDPTUI_RUN`` marker it carries (``run_id/node_rank``): a run of ddptui's own."""


@dataclass(frozen=True)
class GpuInfo:
    gpus: tuple[Gpu, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    error: str | None = None
    """nvidia-smi ran but failed (no driver, a GPU fallen off the bus)."""


@dataclass(frozen=True)
class PortHolder:
    pid: int
    command: str | None
    run: str | None


@dataclass(frozen=True)
class Listen:
    """The endpoint node's bind of the rendezvous port."""

    bound: bool
    accepted: int = 0
    error: str | None = None
    in_use: bool = False
    holders: tuple[PortHolder, ...] = ()


@dataclass(frozen=True)
class Connect:
    """One node's connect to the rendezvous endpoint."""

    result: str
    """ok, foreign (something else answered), refused, timeout, error, or unresolved."""
    addr: str | None = None
    error: str | None = None
    ms: int | None = None


@dataclass(frozen=True)
class Workdir:
    path: str
    exists: bool
    writable: bool
    free_bytes: int | None
    error: str | None = None


@dataclass(frozen=True)
class NodeReport:
    """Everything preflight learned about one node; None where it was not asked or not
    answered (the rules then say "not checked" rather than guess)."""

    node: str
    unreachable: str | None = None
    """Why ddptui could not connect to the node."""
    not_run: str | None = None
    """Why the check program gave no answer there (its last line of output)."""
    python_missing: bool = False
    python: str | None = None
    python_version: str | None = None
    torch: TorchInfo | None = None
    bare_torch: TorchInfo | None = None
    """What a bare login (no ``env:``, no project) finds there, beside ``torch``, which is
    what the ranks import; None where not asked."""
    torch_causes: tuple[str, ...] = ()
    """The ``env:`` names (or ``job.project``) that alone make ``torch`` differ from
    ``bare_torch``; asked only when that difference fails a check."""
    hostname: str | None = None
    fqdn: str | None = None
    host_addrs: tuple[str, ...] | None = None
    """What ``fqdn`` resolves to there: c10d advertises the node by ``socket.getfqdn()``."""
    host_error: str | None = None
    short_addrs: tuple[str, ...] | None = None
    """What ``hostname`` resolves to there: gloo binds to it (``gethostname()``)."""
    short_error: str | None = None
    route_dest: str | None = None
    route_dev: str | None = None
    route_src: str | None = None
    route_error: str | None = None
    interfaces: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Every interface of the node and its addresses (NCCL and gloo skip one without)."""
    login_env: Mapping[str, str | None] = field(default_factory=dict)
    workdir: Workdir | None = None
    gpu: GpuInfo | None = None
    """None: no nvidia-smi on the node (a CPU node), so GPU checks do not apply."""
    gpu_checked: bool = False
    affinity: tuple[int, ...] | None = None
    """The CPUs the ranks may run on there (the check program's own affinity, started as
    they are); None where not told."""
    slurm_job: str | None = None
    slurm_cpus: int | None = None
    """The CPUs the Slurm job holds on the node; None off Slurm or where it does not say."""
    listen: Listen | None = None
    connect: Connect | None = None
    clock_offset: float | None = None
    """Node clock minus this machine's, in seconds, when the answer arrived."""
    errors: Mapping[str, str] = field(default_factory=dict)
    """Parts of the program that raised, by part."""


def _last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and d.get("v") == 1:
            return d
    return None


def _mib(value: str) -> float | None:
    m = re.match(r"\s*([0-9.]+)", value)
    return float(m.group(1)) if m else None


def read_csv(text: str) -> list[dict[str, str]]:
    """nvidia-smi ``--format=csv`` rows keyed by column name without its unit
    (``memory.used [MiB]`` -> ``memory.used``)."""
    rows = [r for r in csv.reader(text.strip().splitlines(), skipinitialspace=True) if r]
    if not rows:
        return []
    head = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in rows[0]]
    out = []
    for r in rows[1:]:
        if len(r) > len(head):  # a comma inside a process name
            k = len(r) - len(head)
            r = [*r[:1], ", ".join(r[1:2 + k]), *r[2 + k:]]
        out.append({h: v.strip() for h, v in zip(head, r, strict=False)})
    return out


def read_gpus(query: str, apps: str, procs: Mapping[str, JSON] | None = None,
              error: str | None = None) -> GpuInfo:
    gpus = []
    for r in read_csv(query):
        if r.get("index", "").isdigit():
            gpus.append(Gpu(int(r["index"]), r.get("name", "?"), r.get("uuid", ""),
                            _mib(r.get("memory.used", "")), _mib(r.get("memory.total", ""))))
    holders = []
    for r in read_csv(apps):
        if not r.get("pid", "").isdigit():
            continue
        info = (procs or {}).get(r["pid"])
        cmd, run = (info.get("cmd"), info.get("run")) if isinstance(info, dict) else (None, None)
        holders.append(GpuProcess(int(r["pid"]), r.get("process_name", "?"),
                                  _mib(r.get("used_gpu_memory", "")), r.get("gpu_uuid", ""),
                                  cmd if isinstance(cmd, str) else None,
                                  run if isinstance(run, str) else None))
    return GpuInfo(tuple(gpus), tuple(holders), error)


def read_route(out: str) -> tuple[str | None, str | None]:
    """``ip -o route get`` -> (dev, src)."""
    words = out.replace("\\", " ").split()
    dev = words[words.index("dev") + 1] if "dev" in words[:-1] else None
    src = words[words.index("src") + 1] if "src" in words[:-1] else None
    return dev, src


def _error(part: object) -> str | None:
    return str(part["error"]) if isinstance(part, dict) and "error" in part else None


def parse_report(node: str, stdout: str, *, exit_code: int = 0, stderr: str = "",
                 received_at: float | None = None) -> NodeReport:
    """The node program's output (or its failure) as a :class:`NodeReport`."""
    d = _last_json(stdout)
    if d is None:
        tail = (stderr.strip() or stdout.strip()).splitlines()
        why = tail[-1] if tail else f"exit code {exit_code}, no output"
        return NodeReport(node, not_run=why, python_missing=exit_code == 127)
    errors = {k: e for k in ("names", "route", "workdir", "gpus", "listen", "connect",
                             "interfaces") if (e := _error(d.get(k))) is not None}
    if "interfaces" in errors:
        d["interfaces"] = {}
    for k in d.get("pending") or ():  # a hung NFS workdir, DNS, or nvidia-smi
        errors[k] = "no answer in time"
        if k == "gpus":
            d[k] = {"error": "nvidia-smi did not answer in time"}
    kw: dict[str, Any] = {"python": d.get("python"), "python_version": d.get("version"),
                          "interfaces": {str(k): tuple(v) for k, v in
                                         (d.get("interfaces") or {}).items()},
                          "login_env": dict(d.get("env") or {}), "errors": errors}
    if isinstance(t := d.get("torch"), dict):
        kw["torch"] = TorchInfo(t.get("torch"), t.get("cuda"), t.get("nccl"),
                                t.get("cuda_available"), t.get("devices"), t.get("error"),
                                t.get("path"))
    if isinstance(n := d.get("names"), dict):
        kw.update(hostname=n.get("hostname"), fqdn=n.get("fqdn"), host_error=n.get("error"),
                  short_error=n.get("short_error"))
        if "short_addrs" in n:
            kw["short_addrs"] = tuple(n["short_addrs"])
        if "addrs" in n:
            kw["host_addrs"] = tuple(n["addrs"])
    if isinstance(r := d.get("route"), dict):
        kw["route_dest"] = r.get("dest")
        if "error" in r:
            kw["route_error"] = r["error"]
        elif r.get("rc", 0) != 0:
            kw["route_error"] = r.get("err") or f"ip route get exited {r.get('rc')}"
        elif "out" in r:
            kw["route_dev"], kw["route_src"] = read_route(r["out"])
    if isinstance(w := d.get("workdir"), dict) and "path" in w:
        kw["workdir"] = Workdir(w["path"], bool(w.get("exists")), bool(w.get("writable")),
                                w.get("free"), w.get("error"))
    if "gpus" in d:
        kw["gpu_checked"] = True
        g = d["gpus"]
        if isinstance(g, dict) and "query" in g:
            bad = g.get("query_rc", 0) != 0
            kw["gpu"] = read_gpus("" if bad else g["query"], g.get("apps", ""),
                                  g.get("procs"), g["query"].strip() if bad else None)
        elif isinstance(g, dict):
            kw["gpu"] = GpuInfo(error=g.get("error"))
    if isinstance(cp := d.get("cpus"), dict) and isinstance(cp.get("affinity"), list):
        kw["affinity"] = tuple(int(x) for x in cp["affinity"])
        kw["slurm_job"] = cp.get("slurm_job")
        on_node = str(cp.get("slurm_cpus") or "")
        kw["slurm_cpus"] = int(on_node) if on_node.isdigit() else None
    if isinstance(li := d.get("listen"), dict) and "bound" in li:
        held = li.get("holders") or {}
        kw["listen"] = Listen(bool(li["bound"]), int(li.get("accepted", 0)), li.get("error"),
                              li.get("errno") == 98 or bool(held),
                              tuple(PortHolder(p["pid"], p.get("cmd"), p.get("run"))
                                    for p in held.get("pids", ())))
    if isinstance(c := d.get("connect"), dict):
        result = c.get("result") or (
            "unresolved" if str(c.get("error", "")).startswith("gaierror") else "error")
        kw["connect"] = Connect(result, c.get("addr"), c.get("error"), c.get("ms"))
    if received_at is not None and isinstance(d.get("time"), int | float):
        kw["clock_offset"] = float(d["time"]) - received_at
    return NodeReport(node, **kw)
