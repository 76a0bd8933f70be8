"""Node programs run in the ranks' environment, and what a bare login there sees beside it.

A check made at a bare login misses what the hosts file's ``env:`` does: a ``PYTHONPATH`` or
``PATH`` pointing at a site's own build makes the ranks import another torch than the login
does. So the probe and the preflight program run as torchrun's ranks will: the same export
lines ``launch.sh`` holds (:func:`ddptui.launch.plan.env_exports`, the one source of them),
the same interpreter looked up on that ``PATH``, in the project's directory. Those lines go
on the command's stdin, never on its command line, where any user of the node could read
the secret values among them. The (cheap, import-free) launch probe runs at the bare login
too, at the same time (``ddptui check``: first, in the same command), so one round trip
tells both; only when the two differ and the ranks' torch fails a check is the node asked
again, once per suspect name left out, to say which name does it
(:mod:`ddptui.diagnose.preflight.envdiff` compares).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ddptui.config import HostsConfig, NodeConfig
from ddptui.diagnose.preflight.envdiff import PROJECT, causes, suspects
from ddptui.diagnose.preflight.report import TorchInfo
from ddptui.launch.plan import Plan, env_exports, job_env, quote
from ddptui.remote import nodeops
from ddptui.remote.reach import beside, found_probe
from ddptui.transport.base import CommandResult, Transport

#: Marks the bare login's answer in the output; the ranks' answer follows it.
BARE = "@ddptui-bare "
#: Marks each answer without one suspect name: ``@ddptui-without NAME {json}``.
WITHOUT = "@ddptui-without "


@dataclass(frozen=True)
class RankEnv:
    """How a node's ranks start: interpreter, what ddptui exports, project, directory."""

    python: str
    env: Mapping[str, str]
    """What ``launch.sh`` exports (see :func:`ddptui.launch.plan.job_env`); may hold secrets."""
    project: str | None = None
    """First on ``PYTHONPATH``, and the ranks' working directory."""
    own: frozenset[str] = frozenset()
    """Names ddptui sets itself: never suspects, as they name no path."""

    def exports(self, without: str | None = None) -> list[str]:
        env = {k: v for k, v in self.env.items() if k != without}
        return env_exports(env, None if without == PROJECT else self.project)


def for_node(config: HostsConfig, node: NodeConfig, project: str | None = None) -> RankEnv:
    """The ranks' environment of ``node``, from the config alone (``ddptui check``)."""
    env = job_env(config, node)
    return RankEnv(node.python, env, project, frozenset(k for k in env if k not in node.env))


def for_plan(config: HostsConfig, plan: Plan) -> dict[str, RankEnv]:
    """Node name -> its ranks' environment, as the launch's plan has it."""
    return {n.node.name: for_node(config, n.node, n.project_dir) for n in plan.nodes}


def command(rank: RankEnv, src: str, *args: str, no_site: bool = False, bare: bool = True
            ) -> str:
    """The bare login's launch probe, then ``src`` in the ranks' environment (read from
    stdin: :func:`stdin_of`), in the project when it is there already (``/`` otherwise,
    so that a login's own directory puts nothing on ``sys.path``)."""
    q = quote(rank.python)
    probe = f"{q} -c {quote(nodeops.PROBE_SRC)} </dev/null 2>/dev/null"
    where = quote(rank.project or "/")
    first = f"printf '%s%s\\n' {quote(BARE)} \"$({probe})\"; " if bare else ""
    return (first +
            'eval "$(cat)"; '
            f"command -v {q} >/dev/null 2>&1 || "
            f"{{ echo 'ddptui: no such interpreter: '{q} >&2; exit 127; }}; "
            + (f"cd {where} 2>/dev/null || cd /; " if rank.project else "cd /; ")
            + f"exec {q} {'-S ' if no_site else ''}-c {quote(src)} "
            + " ".join(quote(a) for a in args))


def stdin_of(rank: RankEnv) -> bytes:
    return ("\n".join(rank.exports()) + "\n").encode()


def run(transport: Transport, rank: RankEnv, src: str, *args: str, timeout: float,
        no_site: bool = False, bare: bool = True) -> CommandResult:
    """``src`` on the node as its ranks would run it; with ``bare``, the bare login's answer
    first."""
    return transport.run_stream(command(rank, src, *args, no_site=no_site, bare=bare),
                                timeout, stdin=[stdin_of(rank)])


def split_bare(stdout: str) -> tuple[TorchInfo | None, str]:
    """The bare login's torch (None: not in the output) and the rest of the output."""
    bare, rest = None, []
    for line in stdout.splitlines():
        if line.startswith(BARE):
            probe = nodeops.parse_probe(line[len(BARE):])
            bare = torch_of(probe) if probe is not None else None
        else:
            rest.append(line)
    return bare, "\n".join(rest)


def torch_of(probe: nodeops.Probe) -> TorchInfo:
    if probe.torch is None:
        return TorchInfo(error=probe.torch_error)
    return TorchInfo(probe.torch, probe.cuda_version, probe.nccl, probe.cuda, probe.devices,
                     path=probe.torch_path)


def probe(transport: Transport, rank: RankEnv) -> tuple[CommandResult, TorchInfo | None]:
    """The launch probe (:data:`ddptui.remote.nodeops.PROBE_SRC`) in the ranks' environment,
    and beside it, at once, at the bare login (a node program of its own, which the srun
    agent runs without a new interpreter); the first's output, and the bare login's torch."""
    at_login = beside(lambda: transport.run(nodeops.probe_cmd(rank.python), timeout=60))
    try:
        res = run(transport, rank, nodeops.PROBE_SRC, timeout=60, bare=False)
    finally:
        try:
            said = nodeops.parse_probe(at_login().stdout)
        except Exception:  # a login that cannot answer knows no torch; the ranks' probe
            said = None    # says why, if it failed too
    return res, torch_of(said) if said is not None else None


def without_cmd(rank: RankEnv, names: list[str]) -> str:
    """One command: the launch probe once per name, in the ranks' environment less it, each
    in a subshell of its own. Each environment comes on stdin as a shell function
    (:func:`without_stdin`), so no value is on the command line."""
    q = quote(rank.python)
    where = quote(rank.project) if rank.project else "/"
    runs = [f"( v{i}; cd {where} 2>/dev/null || cd /; printf '%s%s %s\\n' {quote(WITHOUT)} "
            f"{quote(name)} \"$({q} -c {quote(nodeops.PROBE_SRC)} </dev/null 2>/dev/null)\" )"
            for i, name in enumerate(names)]
    return 'eval "$(cat)"; ' + "; ".join(runs)


def without_stdin(rank: RankEnv, names: list[str]) -> bytes:
    """``v0() { export ...; }`` and so on: one function per name, defined and not yet run."""
    funcs = [f"v{i}() {{\n" + "\n".join(rank.exports(without=name)) + "\n:\n}"
             for i, name in enumerate(names)]
    return ("\n".join(funcs) + "\n").encode()


def ask_causes(transport: Transport, rank: RankEnv, bare: TorchInfo | None
               ) -> tuple[str, ...]:
    """The suspect names that alone make the ranks' torch differ from ``bare``: a second
    round trip, asked only when that difference fails a check."""
    names = suspects(rank.env, rank.own, rank.project)
    if not names:
        return ()
    res = transport.run_stream(without_cmd(rank, names), 60,
                               stdin=[without_stdin(rank, names)])
    found: dict[str, TorchInfo | None] = {}
    for line in res.stdout.splitlines():
        if line.startswith(WITHOUT):
            name, _, text = line[len(WITHOUT):].partition(" ")
            p = nodeops.parse_probe(text)
            found[name] = torch_of(p) if p is not None else None
    return causes(bare, {n: found.get(n) for n in names})


def probe_as_ranks(node: NodeConfig, transport: Transport, rank: RankEnv
                   ) -> tuple[nodeops.Probe, TorchInfo | None]:
    """:func:`probe` in the ranks' environment (``env:``, the project on ``PYTHONPATH``), and
    the torch a bare login finds there, from the same round trip."""
    res, bare = probe(transport, rank)
    return found_probe(node, res, bare), bare
