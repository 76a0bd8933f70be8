"""The hosts file's typed form: the one place its keys, defaults and value rules are written.

Every field read from the file carries a :class:`Key` in its metadata naming its value rule
(see ``values.py``), so the parser's accepted keys, the JSON Schema and the docs' tables are
all derived from these classes. Each field's attribute docstring is its description in the
schema and the docs: keep it to one line saying what the field is for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from ddptui.config import metric_rules
from ddptui.config import values as v
from ddptui.config.fieldkey import key
from ddptui.config.slurm import SlurmConfig
from ddptui.config.values import NprocPerNode
from ddptui.events import JSON


@dataclass(frozen=True)
class NodeConfig:
    """One machine of the job; every key but the node-only ones may be set in `defaults:`."""

    name: str = field(metadata=key(v.word("a non-empty label"), node_only=True))
    """Label shown everywhere (panes, logs, `ddptui logs`); unique; default: the host."""
    host: str = field(metadata=key(v.HOST, node_only=True, hints=("hostname",)))
    """What ssh connects to: a name, address or ~/.ssh/config alias; `localhost` when local."""
    addr: str | None = field(default=None, metadata=key(
        v.HOST, node_only=True, hints=("address", "ip")))
    """Address the other nodes reach this one at (`--local-addr`, and the rendezvous here)."""
    node_rank: int | None = field(default=None, metadata=key(
        v.NONNEG_INT, node_only=True, hints=("rank",)))
    """Node rank 0 … N-1, only with `backend: static`; default: the position in the file."""
    user: str | None = field(default=None, metadata=key(
        v.word("a login name"), hints=("username", "login")))
    """Login name; default: from ~/.ssh/config, else your login name."""
    port: int | None = field(default=None, metadata=key(v.PORT, hints=("ssh_port",)))
    """SSH port; default: from ~/.ssh/config, else 22."""
    identity_file: str | None = field(default=None, metadata=key(
        v.LOCAL_PATH, hints=("key", "key_file", "identityfile", "ssh_key")))
    """Private key on this machine; default: from ~/.ssh/config and the ssh agent."""
    python: str = field(default="python3", metadata=key(
        v.text("the path or name of a Python interpreter"),
        hints=("interpreter", "python_path")))
    """Interpreter on the node; it must `import torch`, whose torchrun is the one used."""
    workdir: str = field(default="~/.ddptui-work", metadata=key(
        v.WORKDIR, hints=("dir", "cwd", "working_dir")))
    """Directory on the node that holds every run (`~` is the login user's home there)."""
    nproc_per_node: NprocPerNode = field(default="auto", metadata=key(
        v.NPROC, hints=("nproc", "nprocs", "procs", "gpus")))
    """torchrun's `--nproc-per-node`: a number, or one per GPU, per CPU, or GPUs if any (auto)."""
    env: Mapping[str, str] = field(default_factory=dict, metadata=key(
        v.ENV, hints=("environment",)))
    """Environment for torchrun and the workers; merged over `defaults.env`."""
    transport: Literal["ssh", "local", "srun"] = field(default="ssh", metadata=key(v.TRANSPORT))
    """`local`: this machine, no SSH; `srun`: job steps of the `slurm:` allocation (its default)."""
    line: int = 0
    """Line of this entry in the hosts file, for errors found later."""

    @property
    def is_local(self) -> bool:
        return self.transport == "local"


@dataclass(frozen=True)
class RendezvousConfig:
    """How the nodes find each other: torchrun's `--rdzv-*` flags."""

    backend: Literal["c10d", "static"] = field(default="c10d", metadata=key(
        v.BACKEND, hints=("rdzv_backend",)))
    """torchrun's `--rdzv-backend`; static fixes node ranks, c10d assigns them."""
    endpoint: str | None = field(default=None, metadata=key(
        v.HOST, static_alias="master_addr", hints=("rdzv_endpoint",)))
    """Host (or host:port) of the rendezvous store; default: node rank 0's addr or ssh address."""
    port: int | None = field(default=None, metadata=key(v.PORT, static_alias="master_port"))
    """Port of the rendezvous store; default: 29400 for c10d, 29500 for static."""
    id: str | None = field(default=None, metadata=key(v.RDZV_ID, hints=("rdzv_id",)))
    """torchrun's `--rdzv-id`, which also names its log sub-directory; default: the run id."""
    join_timeout: int = field(default=600, metadata=key(v.POS_INT))
    """Seconds to wait for every node to join (torchrun's default)."""
    last_call_timeout: int | None = field(default=None, metadata=key(v.POS_INT))
    """c10d only: seconds to wait for more nodes once enough joined; default: torchrun's (30)."""
    close_timeout: int | None = field(default=None, metadata=key(v.POS_INT))
    """c10d only: seconds to wait for the rendezvous to close; default: torchrun's (30)."""

    @property
    def effective_port(self) -> int:
        if self.port is not None:
            return self.port
        return 29400 if self.backend == "c10d" else 29500


@dataclass(frozen=True)
class JobConfig:
    """What runs on every node, and how torchrun watches it."""

    script: str | None = field(default=None, metadata=key(v.LOCAL_PATH, hints=("entrypoint",)))
    """Your training script (relative to the hosts file), run from the project on every node."""
    module: bool = field(default=False, metadata=key(v.MODULE))
    """A module on the nodes to run with `-m` instead of a script (then held in `script`)."""
    project: str | None = field(default=None, metadata=key(
        v.text("a directory"), hints=("project_dir", "code_dir", "src")))
    """The project run on every node; default: the script's folder (`module`: the hosts file's)."""
    sync: bool = field(default=True, metadata=key(v.BOOL, hints=("rsync", "copy")))
    """Copy the project to every node (only changes travel); false: run it in place there."""
    exclude: tuple[str, ...] = field(default=(), metadata=key(
        v.PATTERNS, hints=("excludes", "ignore")))
    """.gitignore patterns not shipped, beyond the project's .gitignore files and the defaults."""
    max_sync_mb: int = field(default=500, metadata=key(v.POS_INT, hints=("max_sync",)))
    """Refuse to ship a project larger than this (MB, 10^6 bytes), naming its largest files."""
    setup: tuple[str, ...] = field(default=(), metadata=key(
        v.COMMANDS, hints=("setup_commands", "before", "install")))
    """Shell commands run verbatim in the project on every node before torchrun, in order."""
    args: tuple[str, ...] = field(default=(), metadata=key(v.ARGS))
    """Arguments after the script or module (numbers become text)."""
    max_restarts: int = field(default=0, metadata=key(v.MAX_RESTARTS, hints=("restarts",)))
    """torchrun's `--max-restarts`."""
    monitor_interval: float | None = field(default=None, metadata=key(v.seconds(above_zero=True)))
    """torchrun's `--monitor-interval`; default: torchrun's (0.1)."""
    nccl_debug: str | None = field(default=None, metadata=key(v.levels(v.NCCL_DEBUG_LEVELS)))
    """Sets `NCCL_DEBUG` (any case)."""
    nccl_debug_subsys: str | None = field(default=None, metadata=key(v.SUBSYSTEMS))
    """Sets `NCCL_DEBUG_SUBSYS`, e.g. `INIT,NET` or a list of names."""
    torch_distributed_debug: str | None = field(default=None, metadata=key(
        v.levels(v.TORCH_DISTRIBUTED_DEBUG_LEVELS, off_is_false=True)))
    """Sets `TORCH_DISTRIBUTED_DEBUG` (any case; a bare OFF works)."""
    torch_cpp_log_level: str | None = field(default=None, metadata=key(
        v.levels(v.TORCH_CPP_LOG_LEVELS)))
    """Sets `TORCH_CPP_LOG_LEVEL` (any case)."""
    stop_grace: float = field(default=10.0, metadata=key(v.seconds(above_zero=False)))
    """Seconds between SIGTERM and SIGKILL when stopping."""

    @property
    def is_bundled_worker(self) -> bool:
        return self.script is None


@dataclass(frozen=True)
class SSHOptions:
    """How ddptui connects to nodes with `transport: ssh`."""

    config_file: str | None = field(default=None, metadata=key(v.LOCAL_PATH))
    """OpenSSH client config to honour; default: ~/.ssh/config when it exists."""
    known_hosts: str | None = field(default=None, metadata=key(v.LOCAL_PATH))
    """Host keys to trust; default: ~/.ssh/known_hosts."""
    accept_new_host_keys: bool = field(default=False, metadata=key(v.BOOL))
    """Trust and record the key of a host not seen before (ssh's accept-new)."""
    connect_timeout: float = field(default=10.0, metadata=key(
        v.seconds(above_zero=True), hints=("timeout",)))
    """Seconds per connection attempt."""


@dataclass(frozen=True)
class HealthConfig:
    """When ddptui calls a rank slow, stalled, or a node lost, and what it watches on the
    nodes, while the run is up."""

    stall_after: float = field(default=120.0, metadata=key(
        v.seconds(above_zero=True), hints=("stall_timeout", "hang_after")))
    """Seconds without a line or metric from a rank before it is marked stalled."""
    stall_steps: float = field(default=50.0, metadata=key(v.FRACTION, hints=("step_stall",)))
    """Times the run's median step gap a rank may go without a step (≥ 30 s or stall_after)."""
    straggler_fraction: float = field(default=0.25, metadata=key(
        v.FRACTION, hints=("straggler",)))
    """Not read: stragglers come from per-rank timing (docs/metrics.md); kept so files load."""
    lost_after: float = field(default=30.0, metadata=key(
        v.seconds(above_zero=True), hints=("lost_timeout",)))
    """Seconds a node may be unreachable before it is declared lost and the run ends."""
    end_after_failure: float = field(default=30.0, metadata=key(
        v.seconds(above_zero=False), hints=("failure_grace",)))
    """Seconds the other nodes may run on after a node failed, before ddptui stops them."""
    telemetry: bool = field(default=True, metadata=key(
        v.BOOL, hints=("monitor", "sampling", "nvidia_smi")))
    """Sample each node's GPUs, CPU and network every second (false: no sampler on the nodes)."""
    stack_sample_every: float = field(default=60.0, metadata=key(
        v.seconds(above_zero=False), hints=("stack_sampling", "py_spy", "sample_stacks")))
    """Seconds between rounds of the ranks' sampled stacks (py-spy; stragglers); 0: none."""


@dataclass(frozen=True)
class MetricsConfig:
    """Which lines of the ranks' own output become chart series, beside `@ddptui` records."""

    parse: str | tuple[str, ...] = field(default="auto", metadata=key(
        metric_rules.METRIC_PARSE, hints=("recognizers", "parsers", "recognize")))
    """`auto` (every recognizer ddptui knows), `off`, or a list of recognizer names."""
    patterns: tuple[str, ...] = field(default=(), metadata=key(
        metric_rules.METRIC_PATTERNS, hints=("regex", "regexes", "pattern")))
    """Regular expressions tried first on each rank line: named group `step`, and series."""


@dataclass(frozen=True)
class HostsConfig:
    """A ddptui hosts file: which machines run a PyTorch DDP job, how to reach them, what runs."""

    path: Path
    """The file this came from; a relative `job.script` is taken from its directory."""
    nodes: tuple[NodeConfig, ...] = field(metadata=key(
        defaults_key="defaults", hints=("hosts", "machines")))
    """The machines, in file order: a host name, or a mapping of node fields."""
    rendezvous: RendezvousConfig = field(default=RendezvousConfig(), metadata=key(
        hints=("rdzv",)))
    """How the nodes find each other; default: c10d on node rank 0."""
    job: JobConfig = field(default=JobConfig(), metadata=key())
    """What runs; default: the bundled worker."""
    ssh: SSHOptions = field(default=SSHOptions(), metadata=key())
    """How ddptui connects to the nodes."""
    health: HealthConfig = field(default=HealthConfig(), metadata=key())
    """When a rank counts as stalled or a straggler, a node as lost; whether nodes are sampled."""
    metrics: MetricsConfig = field(default=MetricsConfig(), metadata=key(hints=("charts",)))
    """Which lines of the ranks' output ddptui reads as metrics; default: every stack it knows."""
    slurm: SlurmConfig[NodeConfig] | None = field(default=None, metadata=key(
        hints=("sbatch", "salloc")))
    """Nodes from a Slurm allocation instead of `nodes:`: one you hold, or one ddptui asks for."""
    secret_env: tuple[str, ...] = field(default=(), metadata=key(
        v.ENV_NAMES, hints=("secrets", "secret", "mask_env")))
    """More `env` names to keep secret, beyond those named like one (`*TOKEN*`, `*KEY*`, ...)."""
    withheld_env: tuple[str, ...] = ()
    """Secret env names whose values this copy lacks (read from run.json): never launched so."""

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

    def to_dict(self) -> dict[str, JSON]:
        """JSON-ready and exact (``from_dict`` gives it back), for ``run.json``."""
        d = asdict(self)  # which keeps tuples as tuples: each becomes a list here
        d["path"] = str(self.path)
        d["nodes"] = list(d["nodes"])
        for n in d["nodes"]:
            n["env"] = dict(n["env"])
        for name in ("args", "exclude", "setup"):
            d["job"][name] = list(getattr(self.job, name))
        d["secret_env"] = list(self.secret_env)
        d["withheld_env"] = list(self.withheld_env)
        d["metrics"]["patterns"] = list(self.metrics.patterns)
        if not isinstance(self.metrics.parse, str):
            d["metrics"]["parse"] = list(self.metrics.parse)
        if self.slurm is not None:
            d["slurm"] = self.slurm.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HostsConfig:
        job = dict(d.get("job", {}))
        job["args"] = tuple(job.get("args", ()))
        for name in ("exclude", "setup"):
            job[name] = tuple(job.get(name, ()))
        return cls(
            path=Path(d["path"]),
            nodes=tuple(NodeConfig(**n) for n in d["nodes"]),
            rendezvous=RendezvousConfig(**d.get("rendezvous", {})),
            job=JobConfig(**job),
            ssh=SSHOptions(**d.get("ssh", {})),
            health=HealthConfig(**d.get("health", {})),
            secret_env=tuple(d.get("secret_env", ())),
            withheld_env=tuple(d.get("withheld_env", ())),
            metrics=_metrics(d.get("metrics", {})),
            slurm=_slurm(d.get("slurm")),
        )


def _slurm(d: Mapping[str, Any] | None) -> SlurmConfig[NodeConfig] | None:
    return None if d is None else SlurmConfig.from_dict(d, NodeConfig)


def _metrics(d: Mapping[str, Any]) -> MetricsConfig:
    parse = d.get("parse", "auto")
    return MetricsConfig(parse if isinstance(parse, str) else tuple(parse),
                         tuple(d.get("patterns", ())))


@dataclass(frozen=True)
class Problem:
    """One mistake in a hosts file, as the CLI prints it."""

    file: str
    """The hosts file as the person named it."""
    line: int | None
    """1-based line of the mistake; None for the file as a whole."""
    field: str
    """Dotted path such as `nodes[1].nproc_per_node`, or `yaml`/`file` for the whole text."""
    message: str
    """The sentence after the field, ending in a full stop or a question mark."""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.message}"


class ConfigError(Exception):
    """Every problem in the file at once; ``str()`` is what the CLI prints."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))
