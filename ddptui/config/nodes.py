"""The `defaults:` and `nodes:` sections: merging, environment, and the rules between nodes.

A node is built from `defaults:` and its own entry; what no single field can check is here:
ssh-only fields on a local node, a missing host, two entries for one machine and workdir, and
node ranks that must be all or none and each of 0 … N-1 once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from ddptui.config.keys import DEFAULT_KEYS, NODE_KEYS, NODE_ONLY_KEYS, checks_of
from ddptui.config.model import NodeConfig
from ddptui.config.values import ENV_NAME, Check, MappingOf
from ddptui.config.yaml_marks import MISSING, STR_TAG, Entry, MarkedWalker, line_of

#: A node's own fields with their lines; a value that was wrong (and reported) is MISSING.
#: Each value's type is its field's (the field's check made it), so it is looked up by name
#: and handed to ``NodeConfig(**...)``: a value whose type depends on its key, hence Any.
Fields = dict[str, tuple[Any, int]]

_CHECKS = checks_of(NodeConfig)
_ENV_NAME_RE = re.compile(f"{ENV_NAME}\\Z")
#: Meaningless with `transport: local`: defaults for them are dropped, a node's own is an error.
_SSH_ONLY = ("user", "port", "identity_file")


class NodeWalker(MarkedWalker):
    """The node half of the hosts-file parser."""

    def node_fields(self, node: yaml.Node, field: str, allowed: tuple[str, ...],
                    misplaced: Mapping[str, str] | None = None) -> Fields:
        """Per-node values with their lines; ``env`` comes back as a dict of strings.

        A key given with a bad value maps to ``MISSING`` so that it is not also "missing".
        """
        entries = self.mapping(node, field, allowed, misplaced=misplaced)
        out: Fields = {}
        for key, e in (entries or {}).items():
            out[key] = (MISSING, e.line)
        for key, e in (entries or {}).items():
            sub = f"{field}.{key}"
            check = _CHECKS[key]
            if isinstance(check, MappingOf):
                env = self.env(e.value_node, sub, check)
                out[key] = (MISSING if env is None else env, e.line)
                continue
            assert isinstance(check, Check)
            out[key] = (self.check(e.value_node, sub, check), e.line)
        return out

    def env(self, node: yaml.Node, field: str, rule: MappingOf) -> dict[str, str] | None:
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
            if key in rule.reserved:
                self.problem(e.line, sub, "is set by ddptui itself on every run; remove it.")
                continue
            value = self.check(e.value_node, sub, rule.value)
            if value is not MISSING:
                env[key] = value
        return env

    def defaults(self, entry: Entry | None) -> Fields:
        if entry is None:
            return {}
        misplaced = {k: f"cannot be a default; set `{k}:` on each node." for k in NODE_ONLY_KEYS}
        return self.node_fields(entry.value_node, "defaults", DEFAULT_KEYS, misplaced)

    def nodes(self, entry: Entry, defaults: Fields, backend: str) -> list[NodeConfig]:
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

    def node(self, item: yaml.Node, field: str, defaults: Fields) -> NodeConfig | None:
        line = line_of(item)
        if isinstance(item, yaml.ScalarNode) and item.tag == STR_TAG:
            rule = _CHECKS["host"]
            assert isinstance(rule, Check)
            host = self.check(item, field, rule)
            if host is MISSING:
                return None
            own: Fields = {"host": (host, line)}
        elif isinstance(item, yaml.MappingNode):
            own = self.node_fields(item, field, NODE_KEYS)
        else:
            self.problem(line, field, f"must be a host name or a mapping with `host:`, not "
                                      f"{self.describe(item)}.")
            return None
        if any(v is MISSING for v, _ in own.values()):
            # Already reported; building the node would only add echoes of the same mistake.
            return None
        merged = {k: v for k, (v, _) in defaults.items() if v is not MISSING}
        merged.update({k: v for k, (v, _) in own.items()})
        env: dict[str, str] = {}
        for source in (defaults, own):
            value = source.get("env", ({}, 0))[0]
            if value is not MISSING:
                env.update(value)
        transport = merged.get("transport", NodeConfig.transport)
        if transport == "local":
            for key in _SSH_ONLY:
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
        by_place: dict[tuple[str, str, int | None, str | None, str], str] = {}
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
