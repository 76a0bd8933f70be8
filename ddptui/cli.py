"""``ddptui``: the dashboard by default, and plain commands for scripts and CI.

Exit codes: the run's own (0 only when every node exited 0), 2 for bad input of any kind
(hosts file, unreachable node, unknown host key, missing interpreter, a failed preflight:
nothing was started), 130 for a run stopped by Ctrl-C. `ddptui check` exits 0 when every
check passed, 1 when any failed (the cluster is not ready), 2 for a bad hosts file;
`ddptui init` as `check` once the file is written, 2 when nothing was written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ddptui import __version__
from ddptui.faces.compare import add_flags as add_align_flags

if TYPE_CHECKING:
    from ddptui.config import HostsConfig

COMMANDS = ("run", "check", "attach", "stop", "logs", "dashboard", "schema", "nccl",
            "stacks", "rehearse", "clean", "init")
USAGE_EXIT = 2


_SLURM_JOB = ("take the nodes from this Slurm allocation (a job id, or `env` for this shell's "
              "SLURM_JOB_ID) instead of the hosts file's `slurm:` section")
_NO_PREFLIGHT = ("launch without the automatic preflight (rendezvous port free and reachable, "
                 "interfaces, versions, GPUs, workdir; see `ddptui check`)")


class _Parser(argparse.ArgumentParser):
    """Remembers every option that takes a value (subparsers too: they share the set), so
    that the option's value is not taken for the script (``split_script_args``)."""

    value_options: ClassVar[set[str]] = set()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _formatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        if action.nargs is None:
            _Parser.value_options.update(action.option_strings)
        return action


def _formatter(prog: str) -> argparse.HelpFormatter:
    """argparse's own, told the terminal's width: finding it itself, argparse imports
    ``shutil``, and with it ``bz2`` and ``lzma``, on every start (10 ms), help or not."""
    try:
        columns = int(os.environ.get("COLUMNS", "")) or 0
    except ValueError:
        columns = 0
    if columns <= 0:
        out = sys.__stdout__
        try:
            columns = os.get_terminal_size(out.fileno()).columns if out is not None else 80
        except (ValueError, OSError):  # not a terminal, or closed
            columns = 80
    return argparse.HelpFormatter(prog, width=columns - 2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="ddptui",
        description="Launch, follow and stop multi-node PyTorch DDP jobs from one terminal. "
                    "`ddptui HOSTS.yaml` opens the dashboard.",
    )
    p.add_argument("--version", action="version", version=f"ddptui {__version__}")
    p.add_argument("--state-dir", type=Path, default=None,
                   help="where local run directories live (default: $XDG_STATE_HOME/ddptui)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    d = sub.add_parser("dashboard", help="open the dashboard for a hosts file (the default)")
    d.add_argument("hosts", type=Path, help="the hosts file (YAML)")
    d.add_argument("--no-preflight", action="store_true", help=_NO_PREFLIGHT)
    d.add_argument("--slurm-job", default=None, metavar="JOB", help=_SLURM_JOB)

    r = sub.add_parser("run", help="launch a run; --headless prints every line instead of the "
                                   "dashboard")
    r.add_argument("hosts", type=Path, metavar="HOSTS|SCRIPT|RUN_ID",
                   help="the hosts file (YAML); with -H the script (or module, with -m), "
                        "and everything after it is the script's arguments; with --again a "
                        "past run. `-- ARGS` replaces the hosts file's job.args")
    r.add_argument("-H", "--hosts", dest="adhoc_hosts", default=None, metavar="HOST[:N],...",
                   help="run without a hosts file on these hosts (ssh names, addresses or "
                        "~/.ssh/config aliases), N processes on a host given `:N`")
    r.add_argument("--nproc-per-node", default=None, metavar="N|gpu|cpu|auto",
                   help="with -H: processes per host without `:N` (default: auto)")
    r.add_argument("--python", default=None, help="with -H: the interpreter on every host")
    r.add_argument("--workdir", default=None, help="with -H: the run directory on every host")
    r.add_argument("-m", "--module", action="store_true",
                   help="with -H: SCRIPT is a module on the hosts, run with python -m")
    r.add_argument("--slurm-job", default=None, metavar="JOB", help=_SLURM_JOB)
    r.add_argument("--again", action="store_true",
                   help="repeat the past run RUN_ID from the hosts file it saved")
    r.add_argument("--headless", action="store_true",
                   help="no dashboard: print node states and every line, prefixed with node "
                        "and global rank; exit with the run's exit code")
    r.add_argument("--run-id", default=None, help="name the run (default: time + random)")
    r.add_argument("--no-metrics", action="store_true",
                   help="headless: do not echo parsed @ddptui metric records")
    r.add_argument("--no-preflight", action="store_true", help=_NO_PREFLIGHT)

    c = sub.add_parser("check", help="validate the hosts file and check every node and the "
                                     "way to the rendezvous (a table, one line per problem); "
                                     "start nothing; exit 1 when a check fails")
    c.add_argument("hosts", type=Path)
    c.add_argument("--json", action="store_true", help="the checks as JSON, for scripts")
    c.add_argument("--slurm-job", default=None, metavar="JOB", help=_SLURM_JOB)

    a = sub.add_parser("attach", help="follow a run again (after a dropped connection or a "
                                      "closed laptop)")
    a.add_argument("run_id")
    a.add_argument("--headless", action="store_true", help="print lines instead of the "
                                                           "dashboard")

    s = sub.add_parser("stop", help="stop a run on every node: SIGTERM, grace, SIGKILL")
    s.add_argument("run_id")
    s.add_argument("--grace", type=float, default=None,
                   help="seconds between SIGTERM and SIGKILL (default: job.stop_grace)")

    lg = sub.add_parser("logs", help="list past runs, or print one run's logs")
    lg.add_argument("run_id", nargs="?")
    lg.add_argument("--rank", type=int, default=None, help="only this global rank")
    lg.add_argument("--node", default=None, help="only this node")
    lg.add_argument("--telemetry", action="store_true",
                    help="print the run's telemetry samples (GPUs, CPU, memory, network) "
                         "instead of its lines")
    lg.add_argument("--metrics", action="store_true",
                    help="print every metric point of the run (node, rank, step, name, value, "
                         "the recognizer that read it) instead of its lines")
    shape = lg.add_mutually_exclusive_group()
    shape.add_argument("--json", dest="shape", action="store_const", const="json",
                       default="table", help="with --metrics: one JSON object a line")
    shape.add_argument("--csv", dest="shape", action="store_const", const="csv",
                       help="with --metrics: CSV with a header line")
    add_align_flags(lg)
    lg.add_argument("--check", action="store_true",
                    help="ask the nodes of runs whose controller is gone what is left of "
                         "them, and record it; with RUN_ID, also record a diagnosis made "
                         "again from its stored logs when run.json holds none")

    sub.add_parser("schema", help="print the hosts file's JSON Schema (for editors and CI)")

    nc = sub.add_parser("nccl", help="what NCCL chose on each node (network, interfaces, "
                                     "versions, init time) and what looks wrong")
    nc.add_argument("run_id")
    nc.add_argument("--rank", type=int, default=None,
                    help="every fact of this global rank's NCCL")
    nc.add_argument("--json", action="store_true", help="the facts and warnings as JSON")

    st = sub.add_parser("stacks", help="the Python stack of every rank of a running run, now "
                                       "(py-spy dump on each node)")
    st.add_argument("run_id")
    st.add_argument("--rank", type=int, default=None, help="only this global rank")

    rh = sub.add_parser("rehearse", help="send a running run's ranks the time limit's signal "
                                         "now (`slurm.signal`) and look for the checkpoint "
                                         "it saves: a preemption, tried before one comes")
    rh.add_argument("run_id")
    rh.add_argument("--wait", type=float, default=120.0, metavar="S",
                    help="seconds to look for the checkpoint (default 120)")

    cl = sub.add_parser("clean", help="remove finished runs and unused code caches on every "
                                      "node and here; live runs are never touched")
    cl.add_argument("hosts", type=Path, help="the hosts file (YAML) of the nodes to clean")
    cl.add_argument("--keep", type=_count, default=None, metavar="N",
                    help="keep the N newest finished runs (default: 3, or 0 with "
                         "--older-than)")
    cl.add_argument("--older-than", type=float, default=None, metavar="DAYS",
                    help="remove only finished runs that ended more than DAYS ago")
    cl.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    cl.add_argument("--slurm-job", default=None, metavar="JOB", help=_SLURM_JOB)
    cl.add_argument("--keep-logs", action="store_true",
                    help="remove node-side files only; keep the local logs (`ddptui logs` "
                         "marks them)")
    i = sub.add_parser("init", help="ask each host which python imports torch and how many "
                                     "GPUs it has, write a commented hosts file, then check it")
    i.add_argument("hosts", nargs="+", metavar="HOST",
                   help="a name, address or ~/.ssh/config alias; the first is the rendezvous")
    i.add_argument("-o", "--output", type=Path, default=Path("hosts.yaml"),
                   help="the hosts file to write (default: hosts.yaml)")
    i.add_argument("--python", default=None,
                   help="the interpreter to use on every host (then no other is tried)")
    i.add_argument("--force", action="store_true", help="replace an existing file")
    i.add_argument("--ssh-config", type=Path, default=None,
                   help="OpenSSH client config (default: ~/.ssh/config); written as "
                        "ssh.config_file")
    i.add_argument("--known-hosts", type=Path, default=None,
                   help="host keys to trust (default: ~/.ssh/known_hosts); written as "
                        "ssh.known_hosts")
    return p


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number of 0 or more, not {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        argv.insert(0, "dashboard")
    from ddptui.config.adhoc import split_script_args

    parser = _parser()
    argv, script_args = split_script_args(argv, _Parser.value_options)
    args = parser.parse_args(argv)
    args.script_args = script_args
    if args.command is None:
        _parser().print_help()
        return USAGE_EXIT
    try:
        return int(_dispatch(args))
    except KeyboardInterrupt:
        return 130


def _load(path: Path) -> HostsConfig | None:
    from ddptui.faces.resolve import load_hosts

    return load_hosts(path)


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "schema":
        from ddptui.config.schema import print_schema

        return print_schema()
    if args.command == "nccl":
        from ddptui.faces.nccl import show_nccl

        return show_nccl(args.state_dir, args.run_id, rank=args.rank, as_json=args.json)
    if args.command == "init":
        from ddptui.faces.init import run_init

        return run_init(args.hosts, args.output, python=args.python, force=args.force,
                        ssh_config=args.ssh_config, known_hosts=args.known_hosts)
    if args.command == "rehearse":
        from ddptui.faces.rehearse import rehearse

        return rehearse(args.state_dir, args.run_id, wait=args.wait)
    if args.command == "stacks":
        from ddptui.faces.stacks import show_stacks

        return show_stacks(args.state_dir, args.run_id, rank=args.rank)
    shaped = args.command == "logs" and (args.shape != "table" or args.compare is not None
                                         or args.align != "step")
    if args.command == "logs" and (args.telemetry or args.metrics or shaped):
        flag = "--telemetry" if args.telemetry else "--metrics"
        if args.run_id is None or (shaped and not args.metrics):
            print(f"ddptui: logs {flag} needs a run id, and --json/--csv/--align/--compare "
                  "need --metrics; `ddptui logs` lists the runs", file=sys.stderr)
            return USAGE_EXIT
    if args.command == "logs" and args.metrics:
        from ddptui.faces.compare import export

        return export(args.state_dir, args.run_id, axis=args.align, other=args.compare,
                      metric=args.metric, style=args.shape, rank=args.rank, node=args.node)
    if args.command == "logs" and args.telemetry:
        from ddptui.faces.logs import show_telemetry

        return show_telemetry(args.state_dir, args.run_id, node=args.node)
    if args.command == "logs":
        from ddptui.faces.logs import show_logs

        return show_logs(args.state_dir, args.run_id, rank=args.rank, node=args.node,
                         check=args.check)
    if args.command in ("dashboard", "run"):
        from ddptui.faces.resolve import run_config, slurm_nodes

        cfg = run_config(args)  # a hosts file, -H, or --again; user-wide defaults under each
        cfg = slurm_nodes(cfg, args.slurm_job) if cfg is not None else None
        if cfg is None:
            return USAGE_EXIT
    run_id, warm = getattr(args, "run_id", None), frozenset[str]()
    if args.command == "run" and args.headless and run_id is None and cfg is not None:
        from ddptui.launch import warm as warm_start  # torchrun imports while ddptui does

        run_id, warm = warm_start.new_run(cfg)
    if args.command in ("dashboard", "run") and not getattr(args, "headless", False):
        from ddptui.tui.app import run_dashboard

        return run_dashboard(cfg, state_root=args.state_dir,
                             preflight=not args.no_preflight)
    if args.command == "attach" and not args.headless:
        from ddptui.tui.app import run_dashboard

        return run_dashboard(None, attach=args.run_id, state_root=args.state_dir)
    if args.command == "check":
        return _check(args)
    if args.command == "clean":
        return _clean(args)
    if args.command == "stop":
        from ddptui.faces.stop import stop_run

        return stop_run(args.state_dir, args.run_id, args.grace)

    from ddptui.faces.headless import Printer, run_headless
    from ddptui.live.attach import NothingLeft
    from ddptui.live.session import Session
    from ddptui.outcome import LaunchError

    if args.command == "attach":
        try:
            session = Session.attach(args.run_id, state_root=args.state_dir)
        except LaunchError as e:
            print(f"ddptui: {e}", file=sys.stderr)
            code = e.exit_code if isinstance(e, NothingLeft) else None  # the run's own
            return USAGE_EXIT if code is None else code
        print(f"ddptui: attached to run {session.run_id}", flush=True)
        session.add_listener(Printer(store=session.store))
        return run_headless(session)

    if cfg is None:  # only `run` comes here, its hosts resolved above
        return USAGE_EXIT
    try:
        session = Session(cfg, state_root=args.state_dir, run_id=run_id)
    except LaunchError as e:
        print(f"ddptui: the run was not started: {e}", file=sys.stderr)
        return USAGE_EXIT
    session.preflight, session.warm = not args.no_preflight, warm
    session.add_listener(Printer(metrics=not args.no_metrics, store=session.store))
    print(f"ddptui: run {session.run_id}: {len(session.config.nodes)} node(s), logs in "
          f"{session.local_dir}", flush=True)
    try:
        session.launch()
    except LaunchError as e:
        print("ddptui: the run was not started:\n" + "\n".join(f"  {p}" for p in e.problems),
              file=sys.stderr)
        return USAGE_EXIT
    except KeyboardInterrupt:
        print("ddptui: interrupted while launching; stopping what started", file=sys.stderr)
        session.stop(grace=2)
        return 130
    from ddptui.faces.attempts import run_attempts
    from ddptui.faces.resolve import slurm_nodes

    return run_attempts(session, lambda c: slurm_nodes(c, None), metrics=not args.no_metrics)


def _check(args: argparse.Namespace) -> int:
    from ddptui.faces.check import print_check
    from ddptui.faces.resolve import slurm_nodes
    from ddptui.launch.precheck import check

    cfg = _load(args.hosts)
    cfg = slurm_nodes(cfg, args.slurm_job, ask=False) if cfg is not None else None
    if cfg is None:
        return USAGE_EXIT
    outcome = check(cfg)
    code = print_check(outcome, [n.name for n in cfg.ordered_nodes], sys.stdout,
                       json_out=args.json)
    from ddptui.config.secrets import config_secret_names

    if not args.json and (secret := config_secret_names(cfg)):
        print("ddptui: secret env, kept out of run.json, the logs and every command line: "
              + ", ".join(f"{name}=***" for name in secret))
    return code


def _clean(args: argparse.Namespace) -> int:
    from ddptui.clean.choice import DEFAULT_KEEP, Policy
    from ddptui.clean.sweep import clean
    from ddptui.faces.clean import print_clean
    from ddptui.faces.resolve import slurm_nodes
    from ddptui.outcome import LaunchError

    cfg = _load(args.hosts)  # a Slurm hosts file: its nodes from the allocation held now
    cfg = slurm_nodes(cfg, args.slurm_job, ask=False) if cfg is not None else None
    if cfg is None:
        return USAGE_EXIT
    if args.older_than is not None and not args.older_than >= 0:
        print("ddptui: clean --older-than must be a number of days, 0 or more",
              file=sys.stderr)
        return USAGE_EXIT
    keep = args.keep if args.keep is not None else (
        DEFAULT_KEEP if args.older_than is None else 0)
    policy = Policy(keep, args.older_than)
    try:
        report = clean(cfg, state=args.state_dir, policy=policy, dry_run=args.dry_run,
                       keep_logs=args.keep_logs)
    except LaunchError as e:
        print("ddptui: clean failed:\n" + "\n".join(f"  {p}" for p in e.problems),
              file=sys.stderr)
        return USAGE_EXIT
    return print_clean(report)


if __name__ == "__main__":
    sys.exit(main())
