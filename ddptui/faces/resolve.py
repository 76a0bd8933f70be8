"""Which config a `run` or `dashboard` command line stands for, or ddptui's words why none.

Three sources, one result: a hosts file (its `job.args` replaced by `-- ARGS`), an ad-hoc
`-H` command line, or a past run's saved hosts file (`--again`); the user-wide defaults lie
under each. Every mistake is exit 2 before anything starts, so this prints and returns None.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import yaml

from ddptui.config import ConfigError, HostsConfig, Problem, load_config, parse_config
from ddptui.config.adhoc import (
    SAVED_HOSTS,
    AdhocError,
    HostSlot,
    adhoc_document,
    parse_host_list,
    withheld_in,
)
from ddptui.config.load import load_user_config
from ddptui.config.user import UserDefaults
from ddptui.store import rundir
from ddptui.store.runs import state_root

#: Ad-hoc flags, by their dest, as the messages name them.
_ADHOC_FLAGS = {"nproc_per_node": "--nproc-per-node", "python": "--python",
                "workdir": "--workdir", "module": "-m"}
#: Fields of the ad-hoc document, as the command line spells them.
_FIELD_FLAGS = {"job.script": "SCRIPT", "job.module": "-m MODULE", "job.args": "ARGS",
                **{f"defaults.{k}": v for k, v in _ADHOC_FLAGS.items()}}


def say(text: str) -> None:
    print(f"ddptui: {text}", file=sys.stderr)


def report(e: ConfigError, source: str) -> None:
    """Every problem, under a head naming where they are (the file, or the command line)."""
    n = len(e.problems)
    files = {p.file for p in e.problems}
    where = files.pop() if len(files) == 1 else source
    say(f"{where}: {n} problem{'s' if n != 1 else ''}, nothing was started:\n"
        + "\n".join(f"  {p}" for p in e.problems))


def _user() -> UserDefaults | None:
    """The user-wide defaults; None once their problems are printed."""
    try:
        return load_user_config()
    except ConfigError as e:
        report(e, "the user-wide config")
        return None


def load_hosts(path: Path) -> HostsConfig | None:
    """A hosts file over the user-wide defaults; None once the problems are printed."""
    user = _user()
    return None if user is None else _file(path, user)


def run_config(args: argparse.Namespace) -> HostsConfig | None:
    """The config to run for `run`/`dashboard`; None once the reason is printed."""
    again, hosts = getattr(args, "again", False), getattr(args, "adhoc_hosts", None)
    script_args = getattr(args, "script_args", None)
    stray = [flag for dest, flag in _ADHOC_FLAGS.items() if getattr(args, dest, None)]
    if again and hosts is not None:
        say("--again repeats a past run as it was; it cannot take -H.")
        return None
    if hosts is None and stray:
        say(f"{', '.join(stray)} {'is' if len(stray) == 1 else 'are'} only for an ad-hoc run "
            "with -H HOSTS; set it in the hosts file (or the user-wide config) instead.")
        return None
    user = _user()
    if user is None:
        return None
    if hosts is not None:
        return _adhoc(args, hosts, script_args or [], user)
    cfg = _again(args, user) if again else _file(Path(args.hosts), user)
    if cfg is None or script_args is None:
        return cfg
    return dataclasses.replace(cfg, job=dataclasses.replace(cfg.job, args=tuple(script_args)))


def _file(path: Path, user: UserDefaults) -> HostsConfig | None:
    try:
        return load_config(path, user)
    except ConfigError as e:
        report(e, str(path))
        return None


def _adhoc(args: argparse.Namespace, hosts: str, script_args: list[str],
           user: UserDefaults) -> HostsConfig | None:
    """The command line as a hosts-file document, checked by the hosts file's own rules."""
    try:
        slots = parse_host_list(hosts)
    except AdhocError as e:
        say(f"{e} Nothing was started.")
        return None
    doc = adhoc_document(slots, str(args.hosts), script_args, module=args.module,
                         nproc_per_node=args.nproc_per_node, python=args.python,
                         workdir=args.workdir)
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    try:
        return parse_config(text, Path.cwd() / "ddptui-run-H", user)
    except ConfigError as e:
        source = f"ddptui run -H {hosts}"
        problems = [p if p.file != str(Path.cwd() / "ddptui-run-H") else
                    Problem(source, None, _flag_of(p.field, slots), p.message.replace(
                        "the hosts file's directory", "the current directory"))
                    for p in e.problems]
        report(ConfigError(problems), source)
        return None


def _flag_of(field: str, slots: list[HostSlot]) -> str:
    """``nodes[1].host`` -> ``-H item 'gpu-b'``; ``job.script`` -> ``SCRIPT``."""
    if field.startswith("nodes[") and "]" in field:
        i = int(field[6:field.index("]")])
        rest = field[field.index("]") + 1:].lstrip(".")
        item = f"-H host {slots[i].host!r}" if i < len(slots) else "-H"
        return f"{item} {rest}".strip()
    return _FIELD_FLAGS.get(field, field)


def _again(args: argparse.Namespace, user: UserDefaults) -> HostsConfig | None:
    """A past run's saved hosts file; withheld secrets come from this environment."""
    run_id = str(args.hosts)
    path = rundir.run_dir(state_root(args.state_dir), run_id) / SAVED_HOSTS
    if not path.is_file():
        say(f"run {run_id} has no saved hosts file ({path}): it does not exist, or an "
            "older ddptui started it; `ddptui logs` lists the runs. Nothing was started.")
        return None
    cfg = _file(path, user)
    if cfg is None:
        return None
    missing = withheld_in(cfg)
    lacking = sorted({k for names in missing.values() for k in names} - set(os.environ))
    if lacking:
        say(f"run {run_id} had secret env values that were not saved: {', '.join(lacking)}; "
            "set them in this environment to repeat it, or run its hosts file again. "
            "Nothing was started.")
        return None
    nodes = tuple(dataclasses.replace(n, env={k: os.environ[k] if k in missing.get(n.name, ())
                                              else v for k, v in n.env.items()})
                  for n in cfg.nodes)
    return dataclasses.replace(cfg, nodes=nodes)


def slurm_nodes(cfg: HostsConfig, job: str | None, *, ask: bool = True) -> HostsConfig | None:
    """``cfg`` with the nodes of its Slurm allocation (``--slurm-job`` wins over the file),
    asking Slurm for one where the file says so and ``ask``; None once the reason is printed.
    A queued request says how it stands, a line each time that changes."""
    if cfg.slurm is None and job is None:
        return cfg
    from ddptui.slurm.allocation import resolve
    from ddptui.slurm.jobinfo import SlurmError

    if not ask and job is None and cfg.slurm is not None and cfg.slurm.asks:
        say("this command works on an allocation you hold: give --slurm-job JOB (or "
            "`slurm.job`); only a run asks Slurm for one itself. Nothing was done.")
        return None
    try:
        return resolve(cfg, job, say=lambda line: print(f"ddptui: {line}", flush=True))
    except SlurmError as e:
        say(f"{e} Nothing was started.")
        return None
    except KeyboardInterrupt:
        say("interrupted while waiting for Slurm; the request was given back.")
        return None
