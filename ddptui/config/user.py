"""The user-wide file, ``$XDG_CONFIG_HOME/ddptui/config.yaml``: defaults under every run.

People keep the same login, key, interpreter and workdir for every cluster they use; writing
them into each hosts file (and each ad-hoc ``ddptui run -H``) is what this file spares. It
holds ``defaults:`` (the hosts file's own keys for it) and ``ssh:`` (how to connect, e.g. a
cluster's own ssh config), checked by the hosts-file parser so that its mistakes read the
same, naming this file and line. A hosts file's own ``defaults:`` and ``ssh:`` win per key;
``env`` is merged, the hosts file's names winning.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddptui.config.nodes import Fields
from ddptui.config.yaml_marks import MISSING

#: The top-level keys of the user-wide file (read by ``parse.parse_user_config``).
USER_KEYS = ("defaults", "ssh")


@dataclass(frozen=True)
class UserDefaults:
    """What the user-wide file gives: node defaults and ssh options, as parsed values."""

    defaults: Fields = field(default_factory=dict)
    ssh: Mapping[str, Any] = field(default_factory=dict)
    path: Path | None = None


NO_USER_DEFAULTS = UserDefaults()


def user_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/ddptui/config.yaml``, else ``~/.config/ddptui/config.yaml``."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(
        environ.get("HOME") or os.path.expanduser("~"), ".config")
    return Path(base) / "ddptui" / "config.yaml"


def merge_defaults(user: Fields, own: Fields) -> Fields:
    """The hosts file's ``defaults:`` over the user-wide ones, per key; ``env`` merged."""
    merged = {**user, **own}
    envs = [src["env"][0] for src in (user, own)
            if "env" in src and src["env"][0] is not MISSING]
    if len(envs) == 2:
        merged["env"] = ({**envs[0], **envs[1]}, own["env"][1])
    return merged


def supplied(user: UserDefaults, own_defaults: Collection[str] = (),
             own_ssh: Collection[str] = ()) -> dict[str, object]:
    """What the user-wide file gives a hosts file that sets ``own_defaults`` (in ``defaults:``
    or on every node) and ``own_ssh`` itself, by field (``defaults.user``, ``ssh.known_hosts``),
    for a file to say where its missing values come from.

    The rule is the merge's (``merge_defaults``, and ``ssh:`` per key): the file's own key wins,
    ``env`` is merged. ``env`` is given by its names only: its values may be secrets.
    """
    out: dict[str, object] = {}
    for key, (value, _line) in sorted(user.defaults.items()):
        if key == "env":
            if value:
                out["defaults.env"] = tuple(sorted(value))
        elif key not in own_defaults:
            out[f"defaults.{key}"] = value
    out |= {f"ssh.{key}": value for key, value in sorted(user.ssh.items()) if key not in own_ssh}
    return out
