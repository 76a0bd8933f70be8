"""The hosts file: its typed form, loading and validation.

The file is composed (not loaded) with PyYAML's safe rules so that every value keeps the line
it came from: a person fixing a hosts file wants ``hosts.yaml:12: nodes[1].port: ...`` for
every mistake at once, not the first one wrapped in a traceback. Nothing here raises anything
but :class:`ConfigError` for bad input; only :func:`load_config` touches the file system
(besides checking that a local ``job.script`` exists, which is part of the file's meaning).
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

import yaml

NprocPerNode = int | Literal["gpu", "cpu", "auto"]


@dataclass(frozen=True)
class NodeConfig:
    name: str  # label shown everywhere; `name:` or else `host`; unique in the file
    host: str  # what ssh connects to (may be a ~/.ssh/config alias); "localhost" when local
    transport: Literal["ssh", "local"] = "ssh"
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    python: str = "python3"
    workdir: str = "~/.ddptui-work"
    nproc_per_node: NprocPerNode = "auto"
    env: Mapping[str, str] = field(default_factory=dict)
    addr: str | None = None  # address the other nodes reach this one at (rendezvous, --local-addr)
    node_rank: int | None = None  # static rendezvous only; default: position in the file
    line: int = 0  # line of this entry in the hosts file, for errors found later

    @property
    def is_local(self) -> bool:
        return self.transport == "local"


@dataclass(frozen=True)
class RendezvousConfig:
    backend: Literal["c10d", "static"] = "c10d"
    endpoint: str | None = None  # host; default: the first node's addr (or its ssh HostName)
    port: int | None = None  # default 29400 for c10d, 29500 for static
    id: str | None = None  # default: the run id
    join_timeout: int = 600  # seconds; torchrun's default
    last_call_timeout: int | None = None
    close_timeout: int | None = None

    @property
    def effective_port(self) -> int:
        if self.port is not None:
            return self.port
        return 29400 if self.backend == "c10d" else 29500


@dataclass(frozen=True)
class JobConfig:
    script: str | None = None  # None: the bundled worker
    module: bool = False  # run `script` as a module (python -m)
    args: tuple[str, ...] = ()
    max_restarts: int = 0
    monitor_interval: float | None = None
    nccl_debug: str | None = None
    nccl_debug_subsys: str | None = None
    torch_distributed_debug: str | None = None
    torch_cpp_log_level: str | None = None
    stop_grace: float = 10.0  # seconds between SIGTERM and SIGKILL

    @property
    def is_bundled_worker(self) -> bool:
        return self.script is None


@dataclass(frozen=True)
class SSHOptions:
    config_file: str | None = None  # default ~/.ssh/config when it exists
    known_hosts: str | None = None  # default ~/.ssh/known_hosts
    accept_new_host_keys: bool = False
    connect_timeout: float = 10.0


@dataclass(frozen=True)
class HostsConfig:
    path: Path
    nodes: tuple[NodeConfig, ...]
    rendezvous: RendezvousConfig = RendezvousConfig()
    job: JobConfig = JobConfig()
    ssh: SSHOptions = SSHOptions()

    def node_rank(self, node: NodeConfig) -> int:
        """Explicit ranks exist only for static rendezvous; otherwise the file decides."""
        if node.node_rank is not None:
            return node.node_rank
        return self.nodes.index(node)

    @property
    def ordered_nodes(self) -> tuple[NodeConfig, ...]:
        return tuple(sorted(self.nodes, key=self.node_rank))

    @property
    def rendezvous_node(self) -> NodeConfig:
        """Node rank 0: where the rendezvous lives unless ``rendezvous.endpoint`` says else."""
        return self.ordered_nodes[0]

    def node(self, name: str) -> NodeConfig:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready and exact (``from_dict`` gives it back), for ``run.json``."""
        d = asdict(self)
        d["path"] = str(self.path)
        for n in d["nodes"]:
            n["env"] = dict(n["env"])
        d["job"]["args"] = list(self.job.args)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HostsConfig:
        job = dict(d.get("job", {}))
        job["args"] = tuple(job.get("args", ()))
        return cls(
            path=Path(d["path"]),
            nodes=tuple(NodeConfig(**n) for n in d["nodes"]),
            rendezvous=RendezvousConfig(**d.get("rendezvous", {})),
            job=JobConfig(**job),
            ssh=SSHOptions(**d.get("ssh", {})),
        )

@dataclass(frozen=True)
class Problem:
    file: str
    line: int | None
    field: str  # dotted path, e.g. "nodes[1].nproc_per_node" or a host name
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.message}"


class ConfigError(Exception):
    """Every problem in the file at once; ``str()`` is what the CLI prints."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


# --------------------------------------------------------------------------- schema

TOP_KEYS = ("defaults", "nodes", "rendezvous", "job", "ssh")
DEFAULT_KEYS = (
    "user", "port", "identity_file", "python", "workdir", "nproc_per_node", "env", "transport",
)
NODE_ONLY_KEYS = ("name", "host", "addr", "node_rank")
NODE_KEYS = NODE_ONLY_KEYS + DEFAULT_KEYS
RENDEZVOUS_KEYS = (
    "backend", "endpoint", "port", "master_addr", "master_port", "id", "join_timeout",
    "last_call_timeout", "close_timeout",
)
JOB_KEYS = (
    "script", "module", "args", "max_restarts", "monitor_interval", "nccl_debug",
    "nccl_debug_subsys", "torch_distributed_debug", "torch_cpp_log_level", "stop_grace",
)
SSH_KEYS = ("config_file", "known_hosts", "accept_new_host_keys", "connect_timeout")

NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")
TORCH_DISTRIBUTED_DEBUG_LEVELS = ("OFF", "INFO", "DETAIL")
TORCH_CPP_LOG_LEVELS = ("INFO", "WARNING", "ERROR", "FATAL")
#: Set by ddptui on every run; a user value would silently break following the run.
RESERVED_ENV = frozenset({"DDPTUI_RUN", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"})

#: Names people reach for from other tools (torchrun, ssh, Ansible), for "did you mean".
_SYNONYMS = {
    "nproc": "nproc_per_node", "nprocs": "nproc_per_node", "procs": "nproc_per_node",
    "gpus": "nproc_per_node", "hostname": "host", "address": "addr", "ip": "addr",
    "username": "user", "login": "user", "ssh_port": "port", "key": "identity_file",
    "key_file": "identity_file", "identityfile": "identity_file", "ssh_key": "identity_file",
    "interpreter": "python", "python_path": "python", "dir": "workdir", "cwd": "workdir",
    "working_dir": "workdir", "environment": "env", "rank": "node_rank",
    "rdzv": "rendezvous", "hosts": "nodes", "machines": "nodes", "entrypoint": "script",
    "restarts": "max_restarts", "rdzv_backend": "backend", "rdzv_endpoint": "endpoint",
    "rdzv_id": "id", "timeout": "connect_timeout",
}
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# host:port or [ipv6]:port; a bare IPv6 address has more than one colon and no port.
_ENDPOINT_RE = re.compile(r"(?:\[([^\]]+)\]|([^:\[\]]+)):(\d{1,6})\Z")
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_STR_TAG = "tag:yaml.org,2002:str"


# --------------------------------------------------------------------------- value checks


class _Invalid(Exception):
    """One wrong value; the message is the sentence the person reads."""


class _List:
    """Stands for a YAML sequence where a scalar was expected, so messages can name it."""


class _Map:
    """Stands for a YAML mapping where a scalar was expected."""


def _show(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an integer too long for str()
        return "a very long number"
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"the number {_show(value)}"
    if isinstance(value, float):
        return f"the number {_show(value)}"
    if isinstance(value, str):
        return f"the string {_show(value)}"
    if isinstance(value, _List | list):
        return "a list"
    if isinstance(value, _Map):
        return "a mapping"
    if isinstance(value, bytes):
        return "binary data"
    return f"a {type(value).__name__} ({_show(value)})"


def _fail(what: str, value: Any) -> NoReturn:
    raise _Invalid(f"must be {what}, not {_kind(value)}.")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(value: Any, what: str = "a non-empty string") -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(what, value)
    if _CONTROL_RE.search(value):
        raise _Invalid(f"must be {what} without control characters such as newlines.")
    return value


def _word(value: Any, what: str = "a non-empty string") -> str:
    """Host names, user names, labels: a space in one is always a typo."""
    text = _text(value, what)
    if any(c.isspace() for c in text):
        raise _Invalid(f"must be {what} without spaces, not {_show(text)}.")
    return text


def _host(value: Any) -> str:
    text = _word(value, "a host name, ~/.ssh/config alias or address")
    if text.startswith("-"):
        raise _Invalid(f"must be a host name, not {_show(text)} (it may not start with '-').")
    if "@" in text:
        raise _Invalid(
            f"must be a host name only, not {_show(text)}; put the login name in `user:`."
        )
    return text


def _port(value: Any) -> int:
    if not _is_int(value):
        _fail("a port number between 1 and 65535", value)
    if not 1 <= value <= 65535:
        raise _Invalid(f"must be a port number between 1 and 65535, not {_show(value)}.")
    return int(value)


def _pos_int(value: Any) -> int:
    if not _is_int(value) or value < 1:
        _fail("a whole number of at least 1", value)
    return int(value)


def _nonneg_int(value: Any) -> int:
    if not _is_int(value) or value < 0:
        _fail("a whole number of 0 or more", value)
    return int(value)


def _pos_number(value: Any) -> float:
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        _fail("a number of seconds greater than 0", value)
    return float(value)


def _nonneg_number(value: Any) -> float:
    if not _is_number(value) or not math.isfinite(value) or value < 0:
        _fail("a number of seconds of 0 or more", value)
    return float(value)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        _fail("true or false", value)
    return value


def _choice(choices: tuple[str, ...]) -> Callable[[Any], str]:
    allowed = ", ".join(choices)

    def check(value: Any) -> str:
        if isinstance(value, str) and value.upper() in choices:
            return value.upper()
        _fail(f"one of {allowed}", value)

    return check


def _torch_distributed_debug(value: Any) -> str:
    # YAML 1.1 reads a bare OFF as false; that is what the person meant.
    if value is False:
        return "OFF"
    return _choice(TORCH_DISTRIBUTED_DEBUG_LEVELS)(value)


def _nproc(value: Any) -> NprocPerNode:
    if _is_int(value) and value >= 1:
        return int(value)
    if value in ("gpu", "cpu", "auto"):
        return value  # type: ignore[no-any-return]
    _fail('a whole number of at least 1, or "gpu", "cpu" or "auto"', value)


def _transport(value: Any) -> Literal["ssh", "local"]:
    if value == "ssh":
        return "ssh"
    if value == "local":
        return "local"
    _fail('"ssh" or "local"', value)


def _workdir(value: Any) -> str:
    text = _text(value, "a path")
    if not (text == "~" or text.startswith("~/") or text.startswith("/")):
        raise _Invalid(
            f"must be an absolute path or start with ~/ (the login user's home on the node), "
            f"not {_show(text)}."
        )
    return text


def _local_path(value: Any) -> str:
    return os.path.expanduser(_text(value, "a path"))


def _rdzv_id(value: Any) -> str:
    if _is_int(value):
        value = str(value)
    return _word(value, "a string")


def _subsystems(value: Any) -> str:
    """NCCL takes a comma-separated list; a YAML list of names means the same."""
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        value = ",".join(value)
    return _word(value, "a comma-separated list of NCCL subsystems such as INIT,NET")


def _module(value: Any) -> str:
    text = _text(value, "a Python module name")
    if not _MODULE_RE.match(text):
        raise _Invalid(f"must be a dotted Python module name like my_pkg.train, not {_show(text)}.")
    return text


def _scalar_text(value: Any, where: str, expected: str) -> str:
    """A number or string as the text a program receives; ``where`` names what cannot hold NUL."""
    if _is_int(value):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        if "\x00" in value:
            raise _Invalid(f"must not contain a NUL character ({where} cannot).")
        return value
    _fail(expected, value)


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return _scalar_text(value, "environment values",
                        "a string, number or boolean (quote it to be sure)")


def _arg(value: Any) -> str:
    return _scalar_text(value, "program arguments", "a string (quote values like 'true' or dates)")


# --------------------------------------------------------------------------- the walk


@dataclass
class _Entry:
    """One key of a YAML mapping with the nodes that carry its lines."""

    key: str
    key_node: yaml.Node
    value_node: yaml.Node

    @property
    def line(self) -> int:
        return self.key_node.start_mark.line + 1


_Missing = object()


class _Parser:
    def __init__(self, text: str, path: Path) -> None:
        self.text = text
        self.path = path
        self.file = str(path)
        self.problems: list[Problem] = []
        self.loader = yaml.SafeLoader("")
        self.merged: dict[int, int] = {}

    # ---- reporting

    def problem(self, line: int | None, field: str, message: str) -> None:
        self.problems.append(Problem(self.file, line, field or "file", message))

    @staticmethod
    def line_of(node: yaml.Node) -> int:
        return node.start_mark.line + 1

    # ---- YAML nodes to values

    def scalar(self, node: yaml.Node) -> Any:
        """A plain Python value for a scalar node; stand-ins for lists and mappings."""
        if isinstance(node, yaml.SequenceNode):
            if all(isinstance(item, yaml.ScalarNode) for item in node.value):
                return [self.loader.construct_object(item, deep=True) for item in node.value]
            return _List()
        if isinstance(node, yaml.MappingNode):
            return _Map()
        return self.loader.construct_object(node, deep=True)

    def check(self, node: yaml.Node, field: str, validate: Callable[[Any], Any]) -> Any:
        """The validated value, or ``_Missing`` after recording why it is wrong."""
        try:
            value = self.scalar(node)
        except yaml.YAMLError as exc:
            self.problem(self.line_of(node), field, f"cannot be read: {_yaml_reason(exc)}.")
            return _Missing
        except Exception:  # PyYAML's constructors fail in their own ways on explicit tags
            tag = str(node.tag).replace("tag:yaml.org,2002:", "!!")
            self.problem(self.line_of(node), field, f"cannot be read as {tag}.")
            return _Missing
        try:
            return validate(value)
        except _Invalid as exc:
            self.problem(self.line_of(node), field, str(exc))
            return _Missing

    def mapping(
        self, node: yaml.Node, field: str, allowed: tuple[str, ...] | None, *,
        what: str = "a mapping",
        misplaced: Mapping[str, str] | None = None,
    ) -> dict[str, _Entry] | None:
        """The keys of a mapping node; unknown and repeated keys are reported here."""
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
            return {}
        if not isinstance(node, yaml.MappingNode) or node.tag != _MAP_TAG:
            self.problem(self.line_of(node), field,
                         f"must be {what} (key: value lines), not {self.describe(node)}.")
            return None
        merged = self.flatten(node, field)
        if merged is None:
            return None
        entries: dict[str, _Entry] = {}
        from_merge: set[str] = set()  # `<<: *anchor` keys: the mapping's own keys override them
        for index, (key_node, value_node) in enumerate(node.value):
            key_line = self.line_of(key_node)
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _STR_TAG:
                self.problem(key_line, field,
                             f"has a key that is not a name: {self.describe(key_node)}.")
                continue
            key = str(key_node.value)
            sub = f"{field}.{key}" if field else key
            if key in entries and key not in from_merge:
                self.problem(key_line, sub,
                             f"is given twice (first on line {entries[key].line}); keep one.")
                continue
            if index < merged:
                from_merge.add(key)
            else:
                from_merge.discard(key)
            if allowed is not None and key not in allowed:
                self.problem(key_line, sub, self.unknown_key(key, allowed, misplaced))
                continue
            entries[key] = _Entry(key, key_node, value_node)
        return entries

    def flatten(self, node: yaml.MappingNode, field: str) -> int | None:
        """Resolve YAML merge keys in place; how many leading pairs came from them."""
        if id(node) in self.merged:  # an aliased mapping is visited once per use
            return self.merged[id(node)]
        own = sum(1 for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge")
        try:
            self.loader.flatten_mapping(node)
        except yaml.YAMLError as exc:
            self.problem(self.line_of(node), field, f"has a bad merge key: {_yaml_reason(exc)}.")
            return None
        self.merged[id(node)] = len(node.value) - own
        return self.merged[id(node)]

    def unknown_key(
        self, key: str, allowed: tuple[str, ...], misplaced: Mapping[str, str] | None
    ) -> str:
        if misplaced and key in misplaced:
            return misplaced[key]
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        if not close:
            close = difflib.get_close_matches(key.lower().replace("-", "_"), allowed, n=1,
                                              cutoff=0.6)
        if not close and _SYNONYMS.get(key.lower()) in allowed:
            close = [_SYNONYMS[key.lower()]]
        if close:
            return f"is not a known key; did you mean `{close[0]}`?"
        return f"is not a known key; the keys here are: {', '.join(allowed)}."

    def describe(self, node: yaml.Node) -> str:
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        try:
            return _kind(self.scalar(node))
        except yaml.YAMLError:
            return f"a value tagged {_show(node.tag)}, which this file does not allow"
        except Exception:  # as in check(): a bad explicitly tagged scalar
            return "an unreadable value"

    def sequence(self, node: yaml.Node) -> list[yaml.Node] | None:
        if isinstance(node, yaml.SequenceNode) and node.tag == _SEQ_TAG:
            return list(node.value)
        return None

    # ---- sections

    def parse(self) -> HostsConfig | None:
        try:
            # The reader checks the characters as it is built: inside the try.
            self.loader = yaml.SafeLoader(self.text)
            root = self.loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            col = f", column {mark.column + 1}" if mark else ""
            self.problem(line, "yaml", f"is not valid YAML{col}: {_yaml_reason(exc)}.")
            return None
        except yaml.reader.ReaderError as exc:
            line = self.text.count("\n", 0, exc.position) + 1
            self.problem(line, "yaml", f"is not valid YAML: it holds the character "
                                       f"{exc.character!r}, which YAML does not allow.")
            return None
        except yaml.YAMLError as exc:
            self.problem(None, "yaml", f"is not valid YAML: {_yaml_reason(exc)}.")
            return None
        finally:
            self.loader.dispose()
        if root is None:
            self.problem(None, "file",
                         "is empty; it needs at least a `nodes:` list (see hosts.example.yaml).")
            return None
        top = self.mapping(root, "", TOP_KEYS, what="a mapping with a `nodes:` list")
        if top is None:
            return None
        if not top and isinstance(root, yaml.ScalarNode):
            self.problem(self.line_of(root), "file",
                         "has no content; it needs at least a `nodes:` list.")
            return None

        rendezvous = self.rendezvous(top.get("rendezvous"))
        job = self.job(top.get("job"))
        ssh = self.ssh(top.get("ssh"))
        defaults = self.defaults(top.get("defaults"))
        if "nodes" not in top:
            self.problem(self.line_of(root), "nodes",
                         "is missing; list the machines to run on under `nodes:`.")
            return None
        nodes = self.nodes(top["nodes"], defaults, rendezvous.backend)
        if self.problems:
            return None
        return HostsConfig(self.path, tuple(nodes), rendezvous, job, ssh)

    def section(
        self, entry: _Entry | None, name: str, keys: tuple[str, ...],
        checks: Mapping[str, Callable[[Any], Any]],
    ) -> tuple[dict[str, Any], dict[str, int], dict[str, _Entry]]:
        """Values and their lines for a flat section; bad values are left out."""
        values: dict[str, Any] = {}
        lines: dict[str, int] = {}
        if entry is None:
            return values, lines, {}
        entries = self.mapping(entry.value_node, name, keys) or {}
        for key, e in entries.items():
            if key not in checks:
                continue
            value = self.check(e.value_node, f"{name}.{key}", checks[key])
            if value is not _Missing:
                values[key] = value
                lines[key] = e.line
        return values, lines, entries

    def rendezvous(self, entry: _Entry | None) -> RendezvousConfig:
        checks: dict[str, Callable[[Any], Any]] = {
            "backend": _choice_exact(("c10d", "static")),
            "endpoint": _host, "master_addr": _host, "port": _port, "master_port": _port,
            "id": _rdzv_id, "join_timeout": _pos_int, "last_call_timeout": _pos_int,
            "close_timeout": _pos_int,
        }
        v, lines, _ = self.section(entry, "rendezvous", RENDEZVOUS_KEYS, checks)
        backend = v.get("backend", "c10d")
        if "endpoint" in v and ":" in v["endpoint"]:
            m = _ENDPOINT_RE.match(v["endpoint"])
            if m is not None:
                host, port = m.group(1) or m.group(2), int(m.group(3))
                if not 1 <= port <= 65535:
                    self.problem(lines["endpoint"], "rendezvous.endpoint",
                                 f"names port {port}; a port must be between 1 and 65535.")
                elif "port" in v and v["port"] != port:
                    self.problem(lines["endpoint"], "rendezvous.endpoint",
                                 f"names port {port} but `port:` says {v['port']}; "
                                 "give the port once.")
                v["endpoint"], v["port"] = host, port
            elif v["endpoint"].count(":") == 1:
                self.problem(lines["endpoint"], "rendezvous.endpoint",
                             f"must be a host, or host:port, not {_show(v['endpoint'])}.")
        for alias, canonical in (("master_addr", "endpoint"), ("master_port", "port")):
            if alias not in v:
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
            for key in ("last_call_timeout", "close_timeout"):
                if key in v:
                    self.problem(lines[key], f"rendezvous.{key}",
                                 "is only used by the c10d backend; remove it for static.")
        return RendezvousConfig(
            backend=backend, endpoint=v.get("endpoint"), port=v.get("port"), id=v.get("id"),
            join_timeout=v.get("join_timeout", 600),
            last_call_timeout=v.get("last_call_timeout"), close_timeout=v.get("close_timeout"),
        )

    def job(self, entry: _Entry | None) -> JobConfig:
        checks: dict[str, Callable[[Any], Any]] = {
            "script": _local_path, "module": _module, "max_restarts": _max_restarts,
            "monitor_interval": _pos_number, "nccl_debug": _choice(NCCL_DEBUG_LEVELS),
            "nccl_debug_subsys": _subsystems, "torch_distributed_debug": _torch_distributed_debug,
            "torch_cpp_log_level": _choice(TORCH_CPP_LOG_LEVELS), "stop_grace": _nonneg_number,
        }
        v, lines, entries = self.section(entry, "job", JOB_KEYS, checks)
        args = self.job_args(entries["args"]) if "args" in entries else ()
        script = v.get("script")
        module = False
        if "module" in v:
            if "script" in v:
                self.problem(lines["module"], "job.module",
                             "cannot be given together with `script:`; keep one.")
            else:
                script, module = v["module"], True
        elif script is not None:
            script = self.resolve_script(script, lines["script"])
        return JobConfig(
            script=script, module=module, args=args, max_restarts=v.get("max_restarts", 0),
            monitor_interval=v.get("monitor_interval"), nccl_debug=v.get("nccl_debug"),
            nccl_debug_subsys=v.get("nccl_debug_subsys"),
            torch_distributed_debug=v.get("torch_distributed_debug"),
            torch_cpp_log_level=v.get("torch_cpp_log_level"),
            stop_grace=v.get("stop_grace", 10.0),
        )

    def job_args(self, entry: _Entry) -> tuple[str, ...]:
        value_node = entry.value_node
        if isinstance(value_node, yaml.ScalarNode) and value_node.tag == "tag:yaml.org,2002:null":
            return ()
        items = self.sequence(value_node)
        if items is None:
            self.problem(self.line_of(value_node), "job.args",
                         f"must be a list of strings, not {self.describe(value_node)}; write "
                         "`args: [--epochs, '3']` or one `- item` per line.")
            return ()
        out: list[str] = []
        for i, item in enumerate(items):
            value = self.check(item, f"job.args[{i}]", _arg)
            if value is not _Missing:
                out.append(value)
        return tuple(out)

    def resolve_script(self, script: str, line: int) -> str:
        """A relative script is relative to the hosts file: it is uploaded from here."""
        base = self.path.parent
        try:
            resolved = Path(script) if Path(script).is_absolute() else base / script
            resolved = Path(os.path.abspath(resolved))
            exists = resolved.is_file()
        except (OSError, ValueError):
            exists = False
            resolved = Path(script)
        if not exists:
            self.problem(line, "job.script",
                         f"names {str(resolved)!r}, which is not a file on this machine "
                         "(a relative path is taken from the hosts file's directory).")
        return str(resolved)

    def ssh(self, entry: _Entry | None) -> SSHOptions:
        checks: dict[str, Callable[[Any], Any]] = {
            "config_file": _local_path, "known_hosts": _local_path,
            "accept_new_host_keys": _bool, "connect_timeout": _pos_number,
        }
        v, _, _ = self.section(entry, "ssh", SSH_KEYS, checks)
        return SSHOptions(
            config_file=v.get("config_file"), known_hosts=v.get("known_hosts"),
            accept_new_host_keys=v.get("accept_new_host_keys", False),
            connect_timeout=v.get("connect_timeout", 10.0),
        )

    # ---- nodes

    def node_fields(self, node: yaml.Node, field: str, allowed: tuple[str, ...],
                    misplaced: Mapping[str, str] | None = None) -> dict[str, tuple[Any, int]]:
        """Per-node values with their lines; ``env`` comes back as a dict of strings.

        A key given with a bad value maps to ``_Missing`` so that it is not also "missing".
        """
        entries = self.mapping(node, field, allowed, misplaced=misplaced)
        out: dict[str, tuple[Any, int]] = {}
        for key, e in (entries or {}).items():
            out[key] = (_Missing, e.line)
        for key, e in (entries or {}).items():
            sub = f"{field}.{key}"
            if key == "env":
                env = self.env(e.value_node, sub)
                out[key] = (_Missing if env is None else env, e.line)
                continue
            out[key] = (self.check(e.value_node, sub, _NODE_CHECKS[key]), e.line)
        return out

    def env(self, node: yaml.Node, field: str) -> dict[str, str] | None:
        entries = self.mapping(node, field, None, what="a mapping of NAME: value")
        if entries is None:
            return None
        env: dict[str, str] = {}
        for key, e in entries.items():
            sub = f"{field}.{key}"
            if not _ENV_NAME_RE.match(key):
                self.problem(e.line, sub, "is not a valid environment variable name (letters, "
                                          "digits and _, not starting with a digit).")
                continue
            if key in RESERVED_ENV:
                self.problem(e.line, sub, "is set by ddptui itself on every run; remove it.")
                continue
            value = self.check(e.value_node, sub, _env_value)
            if value is not _Missing:
                env[key] = value
        return env

    def defaults(self, entry: _Entry | None) -> dict[str, tuple[Any, int]]:
        if entry is None:
            return {}
        misplaced = {k: f"cannot be a default; set `{k}:` on each node." for k in NODE_ONLY_KEYS}
        return self.node_fields(entry.value_node, "defaults", DEFAULT_KEYS, misplaced)

    def nodes(self, entry: _Entry, defaults: dict[str, tuple[Any, int]],
              backend: str) -> list[NodeConfig]:
        items = self.sequence(entry.value_node)
        if items is None or not items:
            what = "an empty list" if items is not None else self.describe(entry.value_node)
            self.problem(entry.line, "nodes",
                         f"must be a non-empty list of nodes (a host name or a mapping with "
                         f"`host:`), not {what}.")
            return []
        nodes: list[tuple[NodeConfig, str]] = []
        for i, item in enumerate(items):
            made = self.node(item, f"nodes[{i}]", defaults)
            if made is not None:
                nodes.append((made, f"nodes[{i}]"))
        self.check_duplicates(nodes)
        self.check_ranks(nodes, len(items), backend)
        return [n for n, _ in nodes]

    def node(self, item: yaml.Node, field: str,
             defaults: dict[str, tuple[Any, int]]) -> NodeConfig | None:
        line = self.line_of(item)
        if isinstance(item, yaml.ScalarNode) and item.tag == _STR_TAG:
            host = self.check(item, field, _host)
            if host is _Missing:
                return None
            own: dict[str, tuple[Any, int]] = {"host": (host, line)}
        elif isinstance(item, yaml.MappingNode):
            own = self.node_fields(item, field, NODE_KEYS)
        else:
            self.problem(line, field, f"must be a host name or a mapping with `host:`, not "
                                      f"{self.describe(item)}.")
            return None
        if any(v is _Missing for v, _ in own.values()):
            # Already reported; building the node would only add echoes of the same mistake.
            return None
        merged = {k: v for k, (v, _) in defaults.items() if v is not _Missing}
        merged.update({k: v for k, (v, _) in own.items()})
        env: dict[str, str] = {}
        for source in (defaults, own):
            value = source.get("env", ({}, 0))[0]
            if value is not _Missing:
                env.update(value)
        transport = merged.get("transport", "ssh")
        if transport == "local":
            for key in ("user", "port", "identity_file"):
                if key in own:
                    self.problem(own[key][1], f"{field}.{key}",
                                 "has no effect with `transport: local`; remove it.")
                merged.pop(key, None)  # ssh-only defaults do not apply to this machine
        host = merged.get("host")
        if host is None:
            if transport != "local":
                if isinstance(item, yaml.MappingNode):
                    self.problem(line, f"{field}.host",
                                 "is missing; a node needs `host:` (the machine to ssh to) "
                                 "unless it has `transport: local`.")
                return None
            host = "localhost"
        merged.pop("env", None)
        merged["host"] = host
        merged.setdefault("name", host)
        try:
            return NodeConfig(env=env, line=line, **merged)
        except TypeError:  # pragma: no cover - every key is checked above
            self.problem(line, field, "has fields this version does not understand.")
            return None

    def check_duplicates(self, nodes: list[tuple[NodeConfig, str]]) -> None:
        by_name: dict[str, str] = {}
        by_place: dict[tuple[Any, ...], str] = {}
        for node, where in nodes:
            if node.name in by_name:
                self.problem(node.line, f"{where}.name",
                             f"repeats the node name {node.name!r} of {by_name[node.name]}; "
                             "give each node its own `name:`.")
                continue
            by_name[node.name] = where
            place = (node.transport, node.host, node.port, node.user, node.workdir)
            if place in by_place:
                self.problem(node.line, where,
                             f"is the same machine and workdir as {by_place[place]} "
                             f"({node.host}, workdir {node.workdir}); give it another workdir "
                             "or remove it.")
            else:
                by_place[place] = where

    def check_ranks(self, nodes: list[tuple[NodeConfig, str]], count: int, backend: str) -> None:
        ranked = [(n, f) for n, f in nodes if n.node_rank is not None]
        if not ranked:
            return
        if backend != "static":
            for n, f in ranked:
                self.problem(n.line, f"{f}.node_rank",
                             "is only allowed with `rendezvous: {backend: static}`; c10d "
                             "assigns node ranks itself.")
            return
        if len(ranked) != len(nodes):
            for n, f in nodes:
                if n.node_rank is None:
                    self.problem(n.line, f"{f}.node_rank",
                                 "is missing; give every node a node_rank, or none.")
        seen: dict[int, str] = {}
        for n, f in ranked:
            rank = n.node_rank
            assert rank is not None
            if rank >= count:
                self.problem(n.line, f"{f}.node_rank",
                             f"must be below the number of nodes ({count}), not {rank}.")
            elif rank in seen:
                self.problem(n.line, f"{f}.node_rank",
                             f"repeats node rank {rank} of {seen[rank]}; ranks must be "
                             f"0 to {count - 1}, each once.")
            else:
                seen[rank] = f


def _choice_exact(choices: tuple[str, ...]) -> Callable[[Any], str]:
    allowed = ", ".join(choices)

    def check(value: Any) -> str:
        if isinstance(value, str) and value in choices:
            return value
        _fail(f"one of {allowed}", value)

    return check


def _max_restarts(value: Any) -> int:
    if _is_int(value) and value < 0:
        raise _Invalid(f"must be 0 or more (how many times torchrun restarts the workers), "
                       f"not {value}.")
    return _nonneg_int(value)


_NODE_CHECKS: dict[str, Callable[[Any], Any]] = {
    "name": lambda v: _word(v, "a non-empty label"),
    "host": _host,
    "addr": _host,
    "node_rank": _nonneg_int,
    "user": lambda v: _word(v, "a login name"),
    "port": _port,
    "identity_file": _local_path,
    "python": lambda v: _text(v, "the path or name of a Python interpreter"),
    "workdir": _workdir,
    "nproc_per_node": _nproc,
    "transport": _transport,
}


def _yaml_reason(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        parts = [p for p in (exc.context, exc.problem) if p]
        text = ", ".join(parts) if parts else "unreadable"
    else:
        text = str(exc).splitlines()[0] if str(exc) else "unreadable"
    return text.rstrip(".")


# --------------------------------------------------------------------------- entry points


def parse_config(text: str, path: str | Path) -> HostsConfig:
    """Validate a whole hosts file; raise ConfigError naming every problem in it."""
    path = Path(path)
    parser = _Parser(text, path)
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


def load_config(path: str | Path) -> HostsConfig:
    """Read and validate the hosts file; a missing or unreadable file is a ConfigError too."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError([Problem(str(path), None, "file", "does not exist.")]) from None
    except IsADirectoryError:
        raise ConfigError([Problem(str(path), None, "file",
                                   "is a directory, not a hosts file.")]) from None
    except OSError as exc:
        raise ConfigError([Problem(str(path), None, "file",
                                   f"cannot be read: {exc.strerror or exc}.")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError([Problem(str(path), line, "file",
                                   "is not UTF-8 text; save it as UTF-8.")]) from None
    return parse_config(text, path)
