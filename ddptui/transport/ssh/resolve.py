"""Where a node really is: ~/.ssh/config applied as ``ssh -G`` would, and the ProxyJump chain.

Also OpenSSH's host pattern matching, which known_hosts lookups need: it lives with the names
it matches rather than with the keys.
"""

from __future__ import annotations

import base64
import getpass
import hmac
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from hashlib import sha1
from pathlib import Path

import paramiko

from ddptui.config import SSHOptions
from ddptui.transport.base import TransportError

_MAX_JUMPS = 8


class HopError(Exception):
    """A failure on one hop, worded without the node name (the caller adds it)."""


@dataclass(frozen=True)
class Endpoint:
    """One SSH destination after ~/.ssh/config: what ``ssh -G`` would print, the parts we use."""

    alias: str  # as asked for (node host or ProxyJump entry)
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    identities_only: bool
    known_hosts_files: tuple[str, ...]
    host_key_alias: str | None
    proxy_jump: tuple[str, ...]
    proxy_command: str | None = None

    @property
    def label(self) -> str:
        return f"{self.hostname}:{self.port}"

    @property
    def known_hosts_name(self) -> str:
        """The name ssh looks up and records in known_hosts for this endpoint."""
        name = self.host_key_alias or self.hostname
        return name if self.port == 22 else f"[{name}]:{self.port}"


def expand(path: str) -> str:
    """``~``, ``%d`` and ``%u`` as ssh expands them in its config, so paths match what it uses."""
    return os.path.expanduser(path.replace("%d", str(Path.home())).replace("%u", getpass.getuser()))


def parse_jump(spec: str) -> tuple[str | None, str, int | None]:
    """``[ssh://][user@]host[:port]`` (``[v6]:port`` too) -> (user, host, port)."""
    spec = spec.strip().removeprefix("ssh://")
    user = None
    if "@" in spec:
        user, spec = spec.rsplit("@", 1)
    port: int | None = None
    if spec.startswith("["):
        host, _, rest = spec[1:].partition("]")
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif spec.count(":") == 1:
        host, _, p = spec.partition(":")
        port = int(p) if p.isdigit() else None
    else:
        host = spec
    return user, host, port


class Resolver:
    """One node's view of the ssh config, read once on first use and kept for reconnects.

    Errors name ``node`` because they reach the user as that node's failure.
    """

    def __init__(self, node: str, options: SSHOptions) -> None:
        self.node = node
        self._opts = options
        self._ssh_config: paramiko.SSHConfig | None = None
        #: The file actually read, for messages that send the user to fix a HostName there.
        self.config_path: str | None = None

    def _config(self) -> paramiko.SSHConfig:
        if self._ssh_config is None:
            path = self._opts.config_file
            if path is not None:
                path = expand(path)
                if not os.path.isfile(path):
                    raise TransportError(
                        self.node, f"{self.node}: the ssh config file {path} does not exist."
                    )
            else:
                default = expand("~/.ssh/config")
                path = default if os.path.isfile(default) else None
            try:
                self._ssh_config = (
                    paramiko.SSHConfig.from_path(path) if path else paramiko.SSHConfig()
                )
            except Exception as exc:
                raise TransportError(
                    self.node, f"{self.node}: cannot read ssh config {path}: {exc}"
                ) from exc
            self.config_path = path
        return self._ssh_config

    def resolve(
        self,
        host: str,
        user: str | None = None,
        port: int | None = None,
        identity_file: str | None = None,
    ) -> Endpoint:
        """Apply ~/.ssh/config to ``host``; explicit arguments win over the config file."""
        try:
            entry = self._config().lookup(host)
        except TransportError:
            raise
        except Exception as exc:
            raise TransportError(
                self.node, f"{self.node}: ssh config lookup for {host!r} failed: {exc}"
            ) from exc
        # An explicit identity_file replaces the config's IdentityFile list (the hosts file
        # wins), so a wrong key there fails loudly instead of being rescued by another.
        if identity_file:
            identities = [expand(identity_file)]
        else:
            identities = [expand(p) for p in entry.get("identityfile", [])]
        known: list[str] = []
        if self._opts.known_hosts:
            known.append(expand(self._opts.known_hosts))
        for raw in entry.get("userknownhostsfile", "").split():
            if raw.lower() != "none":
                known.append(expand(raw))
        if not self._opts.known_hosts:
            known.append(expand("~/.ssh/known_hosts"))
        jump = entry.get("proxyjump", "")
        jumps = () if not jump or jump.lower() == "none" else tuple(jump.split(","))
        command = entry.get("proxycommand")
        if command is not None and command.lower() == "none":
            command = None
        return Endpoint(
            alias=host,
            hostname=entry.get("hostname", host),
            port=port or int(entry.get("port", 22)),
            user=user or entry.get("user") or getpass.getuser(),
            identity_files=tuple(dict.fromkeys(identities)),
            identities_only=entry.get("identitiesonly", "no").lower() == "yes",
            known_hosts_files=tuple(dict.fromkeys(known)),
            host_key_alias=entry.get("hostkeyalias"),
            proxy_jump=jumps,
            # ssh uses whichever of the two comes first in the file; ProxyJump wins here.
            proxy_command=None if jumps else command,
        )

    def chain(self, ep: Endpoint, depth: int = 0) -> list[Endpoint]:
        """Jump hosts to pass through before ``ep``, outermost first (a jump's own jumps too)."""
        if depth > _MAX_JUMPS:
            raise TransportError(self.node, f"{self.node}: ProxyJump loops (over {_MAX_JUMPS}).")
        hops: list[Endpoint] = []
        for i, spec in enumerate(ep.proxy_jump):
            user, host, port = parse_jump(spec)
            jump = self.resolve(host, user=user, port=port)
            if i == 0:
                hops += self.chain(jump, depth + 1)
            hops.append(jump)
        return hops


def host_matches(name: str, patterns: Sequence[str]) -> bool:
    """OpenSSH's known_hosts host matching: hashed names, wildcards, ``!`` negation."""
    hit = False
    for pat in patterns:
        if not pat.startswith("|1|"):
            pat = pat.lower()  # names compare case-insensitively; hashes are base64
        if pat.startswith("|1|"):
            try:
                salt = base64.b64decode(pat[3:].split("|")[0])
                want = base64.b64decode(pat[3:].split("|")[1])
            except Exception:
                continue
            if hmac.compare_digest(hmac.new(salt, name.encode(), sha1).digest(), want):
                hit = True
        elif pat.startswith("!"):
            if _glob(pat[1:]).fullmatch(name):
                return False
        elif _glob(pat).fullmatch(name):
            hit = True
    return hit


def _glob(pattern: str) -> re.Pattern[str]:
    """ssh patterns know only ``*`` and ``?``; ``[`` is literal (``[host]:port``)."""
    return re.compile(
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    )
