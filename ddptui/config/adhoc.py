"""Runs without a hosts file, and the hosts file each run keeps of itself.

``ddptui run -H gpu-a,gpu-b:4 train.py --epochs 3`` is what people type after torchrun,
pdsh and horovodrun. It becomes the very document a hosts file would hold (so that its
checks and messages are the hosts file's own), and every run saves its resolved config as a
hosts file beside ``run.json``, so that ``ddptui run RUN_ID --again`` repeats it. Pure: no
I/O; ``faces/resolve.py`` reads and writes.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ddptui.config.model import HostsConfig
from ddptui.config.secrets import REDACTED, as_list, as_mapping, redact_config_dict
from ddptui.events import JSON

#: What the saved hosts file of a run is called, beside its ``run.json``.
SAVED_HOSTS = "hosts.yaml"
#: The flags that make a run ad hoc: everything after the script is the script's.
HOSTS_FLAGS = ("-H", "--hosts")
_SLOTS_RE = re.compile(r"[1-9][0-9]*\Z")


class AdhocError(ValueError):
    """A command line that cannot become a run; ``str()`` is ddptui's message."""


@dataclass(frozen=True)
class HostSlot:
    """One item of ``-H``: a host, and its process count when ``:slots`` gives one."""

    host: str
    slots: int | None = None


def parse_host_list(text: str) -> list[HostSlot]:
    """``gpu-a,gpu-b:4`` (horovodrun's form); ``[::1]:2`` for an IPv6 address with slots."""
    out: list[HostSlot] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise AdhocError(f"-H {text!r} has an empty item; write hosts as "
                             "`-H gpu-a,gpu-b:4` (host, or host:processes).")
        if item.startswith("["):
            host, sep, rest = item[1:].partition("]")
            if not sep or (rest and not rest.startswith(":")):
                raise AdhocError(f"-H item {item!r} is not `[ipv6]` or `[ipv6]:processes`.")
            slots = rest[1:] if rest else None
        elif item.count(":") == 1:
            host, slots = item.split(":")
        else:  # a name, or a bare IPv6 address (more than one colon, no slots)
            host, slots = item, None
        if slots is not None and not _SLOTS_RE.match(slots):
            raise AdhocError(f"-H item {item!r}: the number of processes after `:` must be a "
                             f"whole number of 1 or more, not {slots!r}.")
        if not host:
            raise AdhocError(f"-H item {item!r} has no host before `:`.")
        out.append(HostSlot(host, None if slots is None else int(slots)))
    return out


def nproc_value(text: str) -> int | str:
    """``--nproc-per-node``: a number becomes one, as the hosts file would read it."""
    return int(text) if text.isdigit() else text


def adhoc_document(hosts: Sequence[HostSlot], script: str, args: Sequence[str], *,
                   module: bool = False, nproc_per_node: str | None = None,
                   python: str | None = None, workdir: str | None = None) -> dict[str, JSON]:
    """The hosts-file document an ad-hoc command line stands for."""
    defaults: dict[str, JSON] = {}
    if nproc_per_node is not None:
        defaults["nproc_per_node"] = nproc_value(nproc_per_node)
    if python is not None:
        defaults["python"] = python
    if workdir is not None:
        defaults["workdir"] = workdir
    nodes: list[JSON] = [{"host": h.host, "nproc_per_node": h.slots} if h.slots else h.host
                         for h in hosts]
    job: dict[str, JSON] = {"module": script} if module else {"script": script}
    doc: dict[str, JSON] = {"nodes": nodes, "job": {**job, "args": [*args]}}
    if defaults:
        doc = {"defaults": defaults, **doc}
    return doc


def saved_document(config: HostsConfig) -> dict[str, JSON]:
    """``config`` as a hosts file that parses back to it, secret env values withheld (as
    ``run.json`` holds them: ``***``), for ``SAVED_HOSTS``."""
    d = redact_config_dict(config.to_dict())
    nodes: list[JSON] = []
    for n in as_list(d["nodes"]):
        node = as_mapping(n)
        node.pop("line", None)
        nodes.append({k: v for k, v in node.items() if v is not None and v != {}})
    job: dict[str, JSON] = {k: v for k, v in as_mapping(d["job"]).items() if v is not None}
    if job.pop("module", False):
        job["module"] = job.pop("script")
    out: dict[str, JSON] = {
        "nodes": nodes,
        "rendezvous": {k: v for k, v in as_mapping(d["rendezvous"]).items() if v is not None},
        "job": job,
        "ssh": {k: v for k, v in as_mapping(d["ssh"]).items() if v is not None},
        "health": d["health"],
        "metrics": d["metrics"],
    }
    if d["secret_env"]:
        out["secret_env"] = d["secret_env"]
    return out


def withheld_in(config: HostsConfig) -> dict[str, list[str]]:
    """Node name -> env names whose value a saved hosts file withheld (``***``)."""
    return {n.name: names for n in config.nodes
            if (names := sorted(k for k, v in n.env.items() if v == REDACTED))}


def split_script_args(argv: Sequence[str], value_options: Collection[str],
                      ) -> tuple[list[str], list[str] | None]:
    """ddptui's own words, and the script's arguments (None: not given, keep ``job.args``).

    After ``-H``, everything past the script is the script's (torchrun's way); otherwise
    only what follows ``--``. Only ``run`` and ``dashboard`` take script arguments.
    """
    positionals = 0
    adhoc = False
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return list(argv[:i]), list(argv[i + 1:])
        name = tok.split("=", 1)[0]
        if tok.startswith("-") and len(tok) > 1:
            adhoc = adhoc or name in HOSTS_FLAGS or any(
                tok.startswith(f) and len(tok) > 2 for f in HOSTS_FLAGS if len(f) == 2)
            if name in value_options and "=" not in tok and not (
                    len(tok) > 2 and tok[:2] in value_options and not tok.startswith("--")):
                i += 1  # its value
        else:
            positionals += 1
            if positionals == 1 and tok not in ("run", "dashboard"):
                return list(argv), None
            if positionals == 2 and adhoc:
                rest = list(argv[i + 1:])
                return list(argv[:i + 1]), rest[1:] if rest[:1] == ["--"] else rest
        i += 1
    return list(argv), None
