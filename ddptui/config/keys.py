"""The hosts file's keys, read off the model's fields so that no key is spelled twice.

The parser, the JSON Schema and the docs' tables all ask here which keys a section accepts,
in which order messages list them, and which check each value goes through.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

from ddptui.config.fieldkey import KEY, Key
from ddptui.config.model import (
    HealthConfig,
    HostsConfig,
    JobConfig,
    MetricsConfig,
    NodeConfig,
    RendezvousConfig,
    SSHOptions,
)
from ddptui.config.slurm import SlurmConfig
from ddptui.config.values import Rule

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: A section's class: a dataclass, whose fields are read off it.
T = TypeVar("T", bound="DataclassInstance")

#: Every class whose fields are keys of the file: the top level, then its sections.
SECTIONS: tuple[type, ...] = (HostsConfig, NodeConfig, RendezvousConfig, JobConfig, SSHOptions,
                             HealthConfig, MetricsConfig, SlurmConfig)


def file_fields(cls: type) -> list[tuple[str, Key]]:
    """The fields the hosts file may set, with their :class:`Key`, in field order."""
    return [(f.name, f.metadata[KEY]) for f in fields(cls) if KEY in f.metadata]


def yaml_keys(cls: type) -> tuple[str, ...]:
    """The keys a section accepts, in the order messages list them.

    A ``defaults_key`` comes just before its list; torchrun's static aliases follow the run of
    fields they stand for (``endpoint, port, master_addr, master_port``).
    """
    out: list[str] = []
    pending: list[str] = []
    for name, k in file_fields(cls):
        if k.static_alias is None:
            out += pending
            pending = []
        if k.defaults_key:
            out.append(k.defaults_key)
        out.append(name)
        if k.static_alias:
            pending.append(k.static_alias)
    return (*out, *pending)


def checks_of(cls: type) -> dict[str, Rule]:
    """The check of every key of a section that has one, aliases included."""
    out: dict[str, Rule] = {}
    for name, k in file_fields(cls):
        if k.check is not None:
            out[name] = k.check
            if k.static_alias:
                out[k.static_alias] = k.check
    return out


def build(cls: type[T], values: Mapping[str, Any]) -> T:
    """``cls(**values)`` for the keys that are fields, so defaults stay the model's own."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


TOP_KEYS = yaml_keys(HostsConfig)
NODE_KEYS = yaml_keys(NodeConfig)
NODE_ONLY_KEYS = tuple(name for name, k in file_fields(NodeConfig) if k.node_only)
DEFAULT_KEYS = tuple(name for name in NODE_KEYS if name not in NODE_ONLY_KEYS)
RENDEZVOUS_KEYS = yaml_keys(RendezvousConfig)
JOB_KEYS = yaml_keys(JobConfig)
SSH_KEYS = yaml_keys(SSHOptions)
HEALTH_KEYS = yaml_keys(HealthConfig)
SYNONYMS = {hint: name for cls in SECTIONS for name, k in file_fields(cls) for hint in k.hints}
