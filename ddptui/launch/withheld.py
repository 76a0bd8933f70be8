"""Secret env values across a run's life: withheld from ``run.json``, read back on attach.

``run.json`` holds ``***`` for every secret env value (see :mod:`ddptui.config.secrets`), so
a config read back from it cannot launch anything by itself. On attach, the values come back
from the node that holds them, in its own ``launch.sh`` (mode 0700, in a 0700 node dir), over
the node's SSH connection, and are kept in memory only: the session masks them in the
lines that follow, and a dashboard restart of an attached run launches with them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ddptui.config import HostsConfig
from ddptui.config.secrets import REDACTED, Masker, missing_secrets
from ddptui.events import LogLine
from ddptui.launch.plan import exported_env
from ddptui.outcome import LaunchError
from ddptui.remote.reach import answers, map_at_once
from ddptui.store import rundir
from ddptui.transport.base import Transport

#: More than any launch.sh ddptui writes; a bigger file is not one of ours.
_SCRIPT_MAX = 1 << 22


def recover(config: HostsConfig, transports: Mapping[str, Transport],
            node_dirs: Mapping[str, str]) -> HostsConfig:
    """``config`` with each withheld value read back from its node's ``launch.sh``.

    A node whose script is gone (the run was cleaned) keeps ``***``: following and stopping
    need no env, and :func:`refuse_incomplete` stops such a config from being launched.
    """
    missing = missing_secrets({n.name: n.env for n in config.nodes}, config.withheld_env)
    names = [name for name in missing if name in transports and name in node_dirs]
    if not names:
        return config

    def read(name: str) -> dict[str, str]:
        path = rundir.in_node_dir(node_dirs[name], rundir.LAUNCH_SCRIPT)
        text = transports[name].read_from(path, 0, _SCRIPT_MAX).decode("utf-8", "replace")
        return exported_env(text)

    found = {got.item: got.value for got in answers(map_at_once(names, read))}
    nodes = []
    for node in config.nodes:
        got = found.get(node.name)
        if got is not None:
            env = {k: got[k] if v == REDACTED and k in got and k in config.withheld_env else v
                   for k, v in node.env.items()}
            node = dataclasses.replace(node, env=env)
        nodes.append(node)
    still = missing_secrets({n.name: n.env for n in nodes}, config.withheld_env)
    left = sorted({k for names in still.values() for k in names})
    return dataclasses.replace(config, nodes=tuple(nodes), withheld_env=tuple(left))


def refuse_incomplete(config: HostsConfig) -> None:
    """A config whose secrets were withheld and not read back must not launch with ``***``."""
    missing = missing_secrets({n.name: n.env for n in config.nodes}, config.withheld_env)
    if missing:
        names = sorted({k for names in missing.values() for k in names})
        raise LaunchError([
            f"this run's config came from run.json, which keeps no secret values "
            f"({', '.join(names)}), and its nodes no longer have them; launch from the hosts "
            f"file instead: ddptui {config.path}"])


def mask_lines(masker: Masker, events: list[Any]) -> list[Any]:
    """Lines ddptui itself read from a node (setup output) with every secret value masked."""
    if not masker:
        return events
    return [dataclasses.replace(e, text=masker.text(e.text)) if isinstance(e, LogLine) else e
            for e in events]
