"""From hosts-file text to :class:`HostsConfig`: the sections and the rules between fields.

Pure: the text comes in, a config or a :class:`ConfigError` naming every problem comes out.
The keys each section accepts and the check of each value come from the fields of
``model.py``; what is written here is only what no single field can say (an endpoint that
carries its port, torchrun's ``master_*`` names, repeated nodes, node ranks).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ddptui.config.keys import SYNONYMS, TOP_KEYS, build, checks_of, file_fields, yaml_keys
from ddptui.config.model import (
    ConfigError,
    HealthConfig,
    HostsConfig,
    JobConfig,
    MetricsConfig,
    NodeConfig,
    Problem,
    RendezvousConfig,
    SSHOptions,
)
from ddptui.config.nodes import Fields, NodeWalker
from ddptui.config.slurm import SLURM_TEMPLATE, SlurmConfig, requeue_advice
from ddptui.config.user import NO_USER_DEFAULTS, USER_KEYS, UserDefaults, merge_defaults
from ddptui.config.values import Check, ListOf, show
from ddptui.config.yaml_marks import MISSING, NULL_TAG, STR_TAG, Entry, line_of

#: Rendezvous settings torchrun's static backend has no use for.
_C10D_ONLY = ("last_call_timeout", "close_timeout")
# host:port or [ipv6]:port; a bare IPv6 address has more than one colon and no port.
_ENDPOINT_RE = re.compile(r"(?:\[([^\]]+)\]|([^:\[\]]+)):(\d{1,6})\Z")


class _HostsParser(NodeWalker):
    def __init__(self, text: str, path: Path, is_file: Callable[[Path], bool],
                 is_dir: Callable[[Path], bool], user: UserDefaults = NO_USER_DEFAULTS) -> None:
        super().__init__(text, path, SYNONYMS)
        self.is_file = is_file
        self.is_dir = is_dir
        self.user = user

    def parse(self) -> HostsConfig | None:
        root = self.compose()
        if root is None:
            if not self.problems:
                self.problem(None, "file", "is empty; it needs at least a `nodes:` list (see "
                                           "hosts.example.yaml).")
            return None
        top = self.mapping(root, "", TOP_KEYS, what="a mapping with a `nodes:` list")
        if top is None:
            return None
        if not top and isinstance(root, yaml.ScalarNode):
            self.problem(line_of(root), "file",
                         "has no content; it needs at least a `nodes:` list.")
            return None
        rendezvous = self.rendezvous(top.get("rendezvous"))
        job = self.job(top.get("job"))
        ssh = build(SSHOptions, {**self.user.ssh,
                                 **self.section(top.get("ssh"), "ssh", SSHOptions)[0]})
        health = build(HealthConfig,
                       self.section(top.get("health"), "health", HealthConfig)[0])
        defaults = merge_defaults(self.user.defaults, self.defaults(top.get("defaults")))
        slurm = None
        if "slurm" in top:
            slurm = self.slurm(top["slurm"], top.get("nodes"), defaults)
            nodes = [slurm.template] if slurm is not None and slurm.template is not None else []
        elif "nodes" not in top:
            self.problem(line_of(root), "nodes",
                         "is missing; list the machines to run on under `nodes:` (or take "
                         "them from a Slurm allocation with `slurm:`).")
            return None
        else:
            nodes = self.nodes(top["nodes"], defaults, rendezvous.backend)
            for n in nodes:
                if n.transport == "srun":
                    self.problem(n.line, "transport", "`srun` reaches the nodes of a Slurm "
                                 "allocation; add a `slurm:` section and leave out `nodes:`.")
        secret_env = self.secret_env(top.get("secret_env"), nodes)
        metrics = self.metrics(top.get("metrics"))
        if self.problems:
            return None
        return HostsConfig(self.path, () if slurm else tuple(nodes), rendezvous, job, ssh,
                           health, secret_env=secret_env, metrics=metrics, slurm=slurm)

    def slurm(self, entry: Entry, listed: Entry | None, defaults: Fields
              ) -> SlurmConfig[NodeConfig] | None:
        """The section, and the node every allocation node is made from (`defaults:`)."""
        v, lines, entries = self.section(entry, "slurm", SlurmConfig)
        if "options" in entries:
            rule = checks_of(SlurmConfig)["options"]
            assert isinstance(rule, ListOf)
            v["options"] = self.job_args(entries["options"], rule.item, "slurm.options")
        if listed is not None:
            self.problem(listed.line, "nodes", "cannot be given with `slurm:`; the nodes come "
                                               "from the allocation. Remove one of them.")
        asked = [k for k in ("partition", "nodes", "gpus_per_node", "time", "account",
                             "options", "keep") if k in v]
        if "job" in v and asked:
            self.problem(lines.get(asked[0], entry.line), f"slurm.{asked[0]}",
                         "is for an allocation ddptui asks for; with `job:` the allocation "
                         "you hold is used as it is. Remove one of them.")
        elif "job" in v and v.get("resubmit"):
            self.problem(lines.get("resubmit", entry.line), "slurm.resubmit",
                         "asks ddptui for a new allocation, which it does only for one it "
                         f"asked for itself (no `job:`). {requeue_advice()}")
        elif "job" not in entries and "nodes" not in entries:
            self.problem(entry.line, "slurm", "needs `job:` (an allocation you hold, or "
                                              "`env`) or `nodes:` (how many to ask for).")
        transport = defaults.get("transport", ("srun", entry.line))
        if transport[0] == "local":
            self.problem(transport[1], "defaults.transport",
                         "`local` cannot reach the nodes of a Slurm allocation; use `srun` "
                         "(the default) or `ssh`.")
        mark = entry.value_node.start_mark
        template = self.node(yaml.ScalarNode(STR_TAG, SLURM_TEMPLATE, mark, mark), "slurm",
                             {"transport": ("srun", entry.line), **defaults})
        if template is None or self.problems:
            return None
        return build(SlurmConfig, {**v, "template": template})

    def metrics(self, entry: Entry | None) -> MetricsConfig:
        """Each pattern checked on its own line: a bad one is named where it is written."""
        v, _, entries = self.section(entry, "metrics", MetricsConfig)
        if "patterns" in entries:
            rule = checks_of(MetricsConfig)["patterns"]
            assert isinstance(rule, ListOf)
            v["patterns"] = self.job_args(entries["patterns"], rule.item, "metrics.patterns")
        return build(MetricsConfig, v)

    def section(
        self, entry: Entry | None, name: str, cls: type,
    ) -> tuple[dict[str, Any], dict[str, int], dict[str, Entry]]:
        """Values and their lines for a flat section; bad values and lists are left out."""
        values: dict[str, Any] = {}
        lines: dict[str, int] = {}
        if entry is None:
            return values, lines, {}
        checks = checks_of(cls)
        entries = self.mapping(entry.value_node, name, yaml_keys(cls)) or {}
        for key, e in entries.items():
            check = checks.get(key)
            if not isinstance(check, Check):  # a list or mapping: the section walks it
                continue
            value = self.check(e.value_node, f"{name}.{key}", check)
            if value is not MISSING:
                values[key] = value
                lines[key] = e.line
        return values, lines, entries

    def rendezvous(self, entry: Entry | None) -> RendezvousConfig:
        v, lines, _ = self.section(entry, "rendezvous", RendezvousConfig)
        backend = v.get("backend", RendezvousConfig.backend)
        if "endpoint" in v and ":" in v["endpoint"]:
            self.split_endpoint(v, lines["endpoint"])
        for canonical, k in file_fields(RendezvousConfig):
            alias = k.static_alias
            if alias is None or alias not in v:
                continue
            if backend != "static":
                self.problem(lines[alias], f"rendezvous.{alias}",
                             f"is only for `backend: static`; with c10d use `{canonical}:`.")
            elif canonical in v:
                self.problem(lines[alias], f"rendezvous.{alias}",
                             f"is another name for `{canonical}:`, which is also given; "
                             "keep one.")
            else:
                v[canonical] = v[alias]
        if backend == "static":
            for key in _C10D_ONLY:
                if key in v:
                    self.problem(lines[key], f"rendezvous.{key}",
                                 "is only used by the c10d backend; remove it for static.")
        return build(RendezvousConfig, v)

    def split_endpoint(self, v: dict[str, Any], line: int) -> None:
        """``host:port`` or ``[ipv6]:port`` gives the port too; a bare IPv6 address has none."""
        m = _ENDPOINT_RE.match(v["endpoint"])
        if m is not None:
            host, port = m.group(1) or m.group(2), int(m.group(3))
            if not 1 <= port <= 65535:
                self.problem(line, "rendezvous.endpoint",
                             f"names port {port}; a port must be between 1 and 65535.")
            elif "port" in v and v["port"] != port:
                self.problem(line, "rendezvous.endpoint",
                             f"names port {port} but `port:` says {v['port']}; "
                             "give the port once.")
            v["endpoint"], v["port"] = host, port
        elif v["endpoint"].count(":") == 1:
            self.problem(line, "rendezvous.endpoint",
                         f"must be a host, or host:port, not {show(v['endpoint'])}.")

    def job(self, entry: Entry | None) -> JobConfig:
        v, lines, entries = self.section(entry, "job", JobConfig)
        for name in ("args", "exclude", "setup"):
            if name in entries:
                rule = checks_of(JobConfig)[name]
                assert isinstance(rule, ListOf)
                v[name] = self.job_args(entries[name], rule.item, name)
        if "module" in v:
            if "script" in v:
                self.problem(lines["module"], "job.module",
                             "cannot be given together with `script:`; keep one.")
                del v["module"]
            else:
                v["script"], v["module"] = v["module"], True
        elif "script" in v:
            v["script"] = self.resolve_script(v["script"], lines["script"],
                                              must_exist=v.get("sync", True))
        if "script" in v:
            self.project(v, lines)
        elif "project" in v or v.get("sync") is False:
            key = "project" if "project" in v else "sync"
            self.problem(lines[key], f"job.{key}",
                         "applies to your own code only; give `script:` or `module:` too.")
        return build(JobConfig, v)

    def project(self, v: dict[str, Any], lines: dict[str, int]) -> None:
        """The project's root, resolved as the script is; the script must lie inside it.

        With ``sync: false`` it is a path on the nodes (``~`` is each node's home), so it is
        not looked for here."""
        sync = v.get("sync", True)
        if "project" in v:
            given = os.path.expanduser(v["project"]) if sync else v["project"]
            if not given.startswith(("/", "~")):
                given = str(self.path.parent / given)
            project = given if given.startswith("~") else os.path.abspath(given)
            line = lines["project"]
        else:
            project = str(Path(os.path.abspath(self.path.parent if v.get("module")
                                               else Path(v["script"]).parent)))
            line = 0  # the default: the script's folder exists with it, the hosts file's too
        if sync and "project" in lines and not self.is_dir(Path(project)):
            self.problem(line, "job.project",
                         f"names {project!r}, which is not a directory on this machine (a "
                         "relative path is taken from the hosts file's directory).")
        elif not v.get("module"):
            rel = os.path.relpath(v["script"], project)
            if rel == ".." or rel.startswith("../"):
                self.problem(lines["script"], "job.script",
                             f"names {v['script']!r}, which is not inside the project "
                             f"{project!r}; every rank runs the script from the project's "
                             "copy, so set `project:` to a directory that holds it.")
        v["project"] = project

    def job_args(self, entry: Entry, item: Check[str], name: str = "args") -> tuple[str, ...]:
        value_node = entry.value_node
        if isinstance(value_node, yaml.ScalarNode) and value_node.tag == NULL_TAG:
            return ()
        items = self.sequence(value_node)
        field = name if "." in name else f"job.{name}"
        if items is None:
            example = {"args": "`args: [--epochs, '3']`",
                       "exclude": "`exclude: [data/, '*.log']`",
                       "setup": "`setup: ['pip install -r requirements.txt']`",
                       "metrics.patterns": r"`patterns: ['acc (?P<acc>[0-9.]+)']`"}[name]
            self.problem(line_of(value_node), field,
                         f"must be a list of strings, not {self.describe(value_node)}; write "
                         f"{example} or one `- item` per line.")
            return ()
        out: list[str] = []
        for i, node in enumerate(items):
            value = self.check(node, f"{field}[{i}]", item)
            if value is not MISSING:
                out.append(value)
        return tuple(out)

    def secret_env(self, entry: Entry | None, nodes: list[NodeConfig]) -> tuple[str, ...]:
        """Names only a node's `env:` can give a value to: any other name is a typo."""
        if entry is None:
            return ()
        value_node = entry.value_node
        if isinstance(value_node, yaml.ScalarNode) and value_node.tag == NULL_TAG:
            return ()
        items = self.sequence(value_node)
        if items is None:
            self.problem(line_of(value_node), "secret_env",
                         f"must be a list of environment variable names, not "
                         f"{self.describe(value_node)}; write `secret_env: [MY_TOKEN]`.")
            return ()
        rule = checks_of(HostsConfig)["secret_env"]
        assert isinstance(rule, ListOf)
        known = {k for n in nodes for k in n.env}
        out: list[str] = []
        for i, node in enumerate(items):
            name = self.check(node, f"secret_env[{i}]", rule.item)
            if name is MISSING:
                continue
            if nodes and name not in known:
                self.problem(line_of(node), f"secret_env[{i}]",
                             f"names {name}, which no node's `env:` sets; list the names of "
                             "`env:` values to keep secret.")
                continue
            out.append(name)
        return tuple(out)

    def resolve_script(self, script: str, line: int, must_exist: bool = True) -> str:
        """A relative script is relative to the hosts file: it is uploaded from here (with
        ``sync: false`` it lies at the same path on the nodes, where it is looked for)."""
        try:
            resolved = Path(script) if Path(script).is_absolute() else self.path.parent / script
            resolved = Path(os.path.abspath(resolved))
            exists = not must_exist or self.is_file(resolved)
        except (OSError, ValueError):
            exists = False
            resolved = Path(script)
        if not exists:
            self.problem(line, "job.script",
                         f"names {str(resolved)!r}, which is not a file on this machine "
                         "(a relative path is taken from the hosts file's directory).")
        return str(resolved)


def parse_hosts(text: str, path: str | Path, *,
                is_file: Callable[[Path], bool] = lambda _: True,
                is_dir: Callable[[Path], bool] = lambda _: True,
                user: UserDefaults = NO_USER_DEFAULTS) -> HostsConfig:
    """Check a whole hosts file; raise ConfigError naming every problem in it.

    ``is_file`` and ``is_dir`` answer whether a local ``job.script`` and ``job.project``
    exist; they are the only questions about the file system, asked by ``load.py``, so that
    this stays pure. ``user`` holds the user-wide defaults, which the file's own override.
    """
    path = Path(path)
    parser = _HostsParser(text, path, is_file, is_dir, user)
    try:
        config = parser.parse()
    except RecursionError:
        parser.problems = [Problem(str(path), None, "yaml", "is nested too deeply to read.")]
        config = None
    if config is None or parser.problems:
        if not parser.problems:  # pragma: no cover - parse() returns None only with problems
            parser.problem(None, "file", "could not be read.")
        raise ConfigError(sorted(parser.problems, key=lambda p: (p.line or 0)))
    return config


def parse_user_config(text: str, path: str | Path) -> UserDefaults:
    """Check the user-wide file (``user.py``); raise ConfigError naming every problem."""
    path = Path(path)
    walker = _HostsParser(text, path, Path.is_file, Path.is_dir)
    root = walker.compose()
    out = UserDefaults(path=path)
    if root is not None:
        top = walker.mapping(root, "", USER_KEYS,
                             what="a mapping with `defaults:` and `ssh:`") or {}
        defaults = walker.defaults(top.get("defaults"))
        ssh = walker.section(top.get("ssh"), "ssh", SSHOptions)[0]
        out = UserDefaults(defaults, ssh, path)
    if walker.problems:
        raise ConfigError(sorted(walker.problems, key=lambda p: p.line or 0))
    return out
