"""``ddptui init HOST...``: ask every host at once, write the hosts file, then check it.

Nothing is written unless every host answered with a python that imports torch: a file
that names a python which cannot run the job would only fail later, further from the cause.
Bad input (an existing file without ``--force``, a missing folder or ssh file, a repeated
host) is refused before any host is asked. The user-wide config lies under the hosts as it
lies under every hosts file (``config/user.py``): init reaches, asks and checks the hosts
with its login, key, ssh settings and python, as ``run`` would, and the file names what it
took from there.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TextIO

import yaml

from ddptui.config import ConfigError, HostsConfig, parse_config
from ddptui.config.load import load_user_config
from ddptui.config.user import UserDefaults, supplied
from ddptui.remote.reach import Failed, answers, connect, failures, map_at_once
from ddptui.scaffold.hostsfile import HostFacts, UserWide, render
from ddptui.scaffold.probe import Found, parse, probe_cmd

USAGE_EXIT = 2
PROBE_TIMEOUT = 120.0  # several interpreters may each import torch from a cold disk


def refusal(hosts: list[str], out: Path, force: bool, files: dict[str, Path | None]) -> str | None:
    """Why the command line cannot be run (then nothing is asked or written), or None."""
    if not hosts:
        return "init needs at least one host"
    dup = sorted({h for h in hosts if hosts.count(h) > 1})
    if dup:
        return f"init: host {', '.join(dup)} given twice; each host is one node"
    if out.exists() and not force:
        return f"{out} already exists; --force replaces it"
    if out.is_dir():
        return f"{out} is a directory; give a file name with -o"
    if not out.parent.is_dir():
        return f"{out}: its folder {out.parent} does not exist"
    for flag, path in files.items():
        if path is not None and not path.expanduser().is_file():
            return f"{flag} {path}: no such file"
    return None


def own_ssh(files: dict[str, Path | None]) -> dict[str, str]:
    """The ``ssh:`` section the flags give the file."""
    return {k: str(v) for k, v in (("config_file", files["--ssh-config"]),
                                   ("known_hosts", files["--known-hosts"])) if v is not None}


def asking_config(hosts: list[str], files: dict[str, Path | None], out: Path,
                  user: UserDefaults) -> HostsConfig:
    """The hosts as a hosts file of their own over the user-wide defaults, parsed as any
    other: one way to reach a node."""
    ssh = own_ssh(files)
    text = yaml.safe_dump({"nodes": hosts, **({"ssh": ssh} if ssh else {})})
    return parse_config(text, out, user)


def python_to_ask(python: str | None, user: UserDefaults) -> tuple[str | None, str]:
    """``--python``, else the user-wide config's (which ``run`` would use), else None (the
    usual places); and how messages name it."""
    if python is None and "python" in user.defaults:
        return str(user.defaults["python"][0]), f"python of the user-wide config {user.path}"
    return python, "--python"


def run_init(hosts: list[str], out: Path, *, python: str | None, force: bool,
             ssh_config: Path | None, known_hosts: Path | None,
             stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    # Absolute in the file: it is read later, from wherever the hosts file is opened.
    ssh_config, known_hosts = (None if p is None else p.expanduser().absolute()
                               for p in (ssh_config, known_hosts))
    files = {"--ssh-config": ssh_config, "--known-hosts": known_hosts}
    if (why := refusal(hosts, out, force, files)) is not None:
        print(f"ddptui: {why}; nothing was written", file=stderr)
        return USAGE_EXIT
    try:
        user = load_user_config()
        config = asking_config(hosts, files, out, user)
    except ConfigError as e:
        print("ddptui: init: " + "; ".join(str(p) for p in e.problems)
              + "; nothing was written", file=stderr)
        return USAGE_EXIT
    nodes = list(config.ordered_nodes)
    ask_python, label = python_to_ask(python, user)
    opened = map_at_once(nodes, lambda n: connect(n, config))
    transports = [t.value for t in answers(opened)]
    try:
        if len(transports) < len(nodes):
            return _unreached(stderr, [(f.item.host, f.error) for f in failures(opened)])
        # Toward the first host's address as ssh resolved it; the first asks toward the second.
        towards = [(nodes[0].host, transports[0].address) if i else
                   (nodes[1].host, transports[1].address) if len(nodes) > 1 else (None, None)
                   for i in range(len(nodes))]
        asked = map_at_once(
            list(zip(transports, towards, strict=True)),
            lambda tt: parse(tt[0].run(probe_cmd(ask_python, tt[1][1], label),
                                       timeout=PROBE_TIMEOUT).stdout))
    finally:
        for transport in transports:
            transport.close()
    unreached = [(n.host, a.error) for n, a in zip(nodes, asked, strict=True)
                 if isinstance(a, Failed)]
    if unreached:
        return _unreached(stderr, unreached)
    found: list[Found] = [a.value for a in answers(asked)]
    missing = [(n.host, f) for n, f in zip(nodes, found, strict=True) if f.python is None]
    if missing:
        for host, f in missing:
            print(f"ddptui: host {host}: no python there imports torch; tried:", file=stderr)
            for t in f.tried:
                print(f"  {t}", file=stderr)
        print("ddptui: install torch on " + ("that host" if len(missing) == 1 else "those hosts")
              + " or name an interpreter that has it with --python"
              + (" (it wins over the user-wide config's)" if ask_python != python else "")
              + "; nothing was written", file=stderr)
        return USAGE_EXIT
    facts = [HostFacts(n.host, f, tw[0])
             for n, f, tw in zip(nodes, found, towards, strict=True)]
    command = shlex.join(["ddptui", "init", *hosts])
    written = {"nproc_per_node"} | ({"python"} if ask_python == python else set())
    out.write_text(render(facts, command=command,
                          ssh_config=str(ssh_config) if ssh_config else None,
                          known_hosts=str(known_hosts) if known_hosts else None,
                          user=UserWide(user.path, supplied(user, written, own_ssh(files)))))
    for h in facts:
        print(f"ddptui: {h.host}: {h.found.python} ({h.found.summary()}), "
              f"nproc_per_node {h.found.nproc}", file=stdout)
    print(f"ddptui: wrote {out}; checking it as `ddptui check {out}` does", file=stdout,
          flush=True)
    return _check(out, user, stdout, stderr)


def _check(out: Path, user: UserDefaults, stdout: TextIO, stderr: TextIO) -> int:
    from ddptui.config import load_config
    from ddptui.faces.check import print_check
    from ddptui.launch.precheck import check

    try:
        cfg = load_config(out, user)
    except ConfigError as e:  # a bug here, not the user's input: say it plainly
        print("ddptui: the file init wrote does not load: "
              + "; ".join(str(p) for p in e.problems), file=stderr)
        return 1
    code = print_check(check(cfg), [n.name for n in cfg.ordered_nodes], stdout)
    if code:
        print(f"ddptui: {out} was written, but the checks above marked ✗ still fail; fix "
              f"them and run `ddptui check {out}`", file=stdout)
    return code


def _unreached(stderr: TextIO, failed: list[tuple[str, Exception]]) -> int:
    for host, err in failed:
        print(f"ddptui: host {host} could not be asked: {err}", file=stderr)
    print("ddptui: nothing was written", file=stderr)
    return USAGE_EXIT
