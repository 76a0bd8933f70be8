"""The hosts file: its typed form, loading and validation.

``model`` holds the dataclasses, the one place each key, default, value rule and description
is written; ``keys`` reads the accepted keys off them, ``values`` holds the value rules,
``yaml_marks`` walks YAML keeping lines, ``parse``/``nodes`` check the sections and the rules
between fields, ``load`` reads the file, and ``schema`` writes the JSON Schema and the docs'
tables. Nothing raises anything but :class:`ConfigError` for bad input.
"""

from ddptui.config.keys import (
    DEFAULT_KEYS,
    HEALTH_KEYS,
    JOB_KEYS,
    NODE_KEYS,
    NODE_ONLY_KEYS,
    RENDEZVOUS_KEYS,
    SSH_KEYS,
    TOP_KEYS,
)
from ddptui.config.load import load_config, parse_config
from ddptui.config.model import (
    ConfigError,
    HealthConfig,
    HostsConfig,
    JobConfig,
    NodeConfig,
    Problem,
    RendezvousConfig,
    SSHOptions,
)
from ddptui.config.values import (
    NCCL_DEBUG_LEVELS,
    RESERVED_ENV,
    TORCH_CPP_LOG_LEVELS,
    TORCH_DISTRIBUTED_DEBUG_LEVELS,
    NprocPerNode,
)

__all__ = [
    "DEFAULT_KEYS",
    "HEALTH_KEYS",
    "JOB_KEYS",
    "NCCL_DEBUG_LEVELS",
    "NODE_KEYS",
    "NODE_ONLY_KEYS",
    "RENDEZVOUS_KEYS",
    "RESERVED_ENV",
    "SSH_KEYS",
    "TOP_KEYS",
    "TORCH_CPP_LOG_LEVELS",
    "TORCH_DISTRIBUTED_DEBUG_LEVELS",
    "ConfigError",
    "HealthConfig",
    "HostsConfig",
    "JobConfig",
    "NodeConfig",
    "NprocPerNode",
    "Problem",
    "RendezvousConfig",
    "SSHOptions",
    "load_config",
    "parse_config",
]
