"""The hosts file: its typed form, loading and validation.

TYPES ONLY FOR NOW: the loader (``load_config``) is being written to this shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

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
