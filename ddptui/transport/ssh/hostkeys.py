"""Host keys by OpenSSH's rules: strict by default, accept-new only when asked, never a changed key.

known_hosts is read here rather than through paramiko's ``HostKeys`` so that a refusal can name
the file and line holding the conflicting key (what the user must fix), and so that matching
follows OpenSSH: hashed names, wildcards, ``!`` negation. Only key types and fingerprints reach
a message or the log; both are public.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import paramiko

from ddptui.transport.ssh.resolve import Endpoint, HopError, expand, host_matches

log = logging.getLogger(__name__)

_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
#: known_hosts records RSA keys as ssh-rsa; these are the signature names paramiko negotiates.
_RSA_ALGS = ("rsa-sha2-512", "rsa-sha2-256")
#: accept-new appends from many connect threads at once; one writer at a time per process.
_KNOWN_HOSTS_WRITE_LOCK = threading.Lock()


class KnownKey(NamedTuple):
    """One known_hosts entry that names the endpoint; file and line are for the messages."""

    path: str
    line: int
    key: paramiko.PKey


def known_entries(ep: Endpoint) -> list[KnownKey]:
    """Every known_hosts entry for this endpoint, in ssh's order (user files, then global)."""
    name = ep.known_hosts_name.lower()
    found: list[KnownKey] = []
    for path in (*ep.known_hosts_files, *_GLOBAL_KNOWN_HOSTS):
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = fh.readlines()
        except OSError:
            continue
        for lineno, line in enumerate(lines, 1):
            line = line.strip()
            if not line or line.startswith(("#", "@")):
                continue  # @cert-authority / @revoked: not supported, ignored like comments
            try:
                entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
            except Exception:
                entry = None
            if entry is None or entry.key is None:
                continue
            if host_matches(name, entry.hostnames):
                found.append(KnownKey(path, lineno, entry.key))
    return found


def prefer_key_types(offered: Sequence[str], known_types: set[str]) -> tuple[str, ...]:
    """Key types with the ones already in known_hosts first, as ssh orders HostKeyAlgorithms.

    Otherwise the server may show a key of a type we hold no entry for, and a known host
    would look unknown.
    """
    first: list[str] = []
    for kt in known_types:
        first += list(_RSA_ALGS) if kt == "ssh-rsa" else [kt]
    head = [k for k in first if k in offered]
    return tuple(dict.fromkeys([*head, *offered]))


def check_host_key(
    node: str, ep: Endpoint, key: paramiko.PKey, known: list[KnownKey], accept_new: bool
) -> None:
    """Pass a known key, refuse a changed one always, and an unknown one unless ``accept_new``."""
    kind, fp = key.get_name(), key.fingerprint
    same_type = [(p, n) for p, n, k in known if k.get_name() == kind]
    if any(k.get_name() == kind and k.asbytes() == key.asbytes() for _, _, k in known):
        return
    if same_type:
        path, line = same_type[0]
        raise HopError(
            f"WARNING: THE HOST KEY HAS CHANGED. Someone may be intercepting this "
            f"connection (man-in-the-middle), or the machine was reinstalled. It now offers "
            f"{kind} {fp}, but {path}:{line} holds a different {kind} key for "
            f"{ep.known_hosts_name}. Refusing to connect. If the change is expected, remove "
            f"the old key with `ssh-keygen -R '{ep.known_hosts_name}' -f {path}` and trust "
            f"the new one only after checking its fingerprint."
        )
    write_to = _known_hosts_write_path(ep)
    if accept_new:
        _append_known_host(write_to, ep.known_hosts_name, key)
        log.warning(
            "%s: accepted new host key %s %s for %s into %s",
            node,
            kind,
            fp,
            ep.known_hosts_name,
            write_to,
        )
        return
    other = f" ({known[0].path}:{known[0].line} holds a key of another type.)" if known else ""
    raise HopError(
        f"its host key is not known: {kind} {fp}, and unknown hosts are refused.{other} "
        f"To trust it, check that fingerprint with the machine's owner, then run "
        f"`ssh-keyscan -p {ep.port} {ep.hostname} >> {write_to}` (or connect once with "
        f"`ssh {ep.alias}`), or set `ssh: accept_new_host_keys: true` in the hosts file."
    )


def _known_hosts_write_path(ep: Endpoint) -> str:
    return ep.known_hosts_files[0] if ep.known_hosts_files else expand("~/.ssh/known_hosts")


def _append_known_host(path: str, name: str, key: paramiko.PKey) -> None:
    """Record a key as ssh's accept-new does: one plain line appended to the user's file."""
    with _KNOWN_HOSTS_WRITE_LOCK:
        p = Path(path)
        p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        needs_nl = p.exists() and p.stat().st_size > 0 and not p.read_bytes().endswith(b"\n")
        with open(p, "a", encoding="utf-8") as fh:
            fh.write(("\n" if needs_nl else "") + f"{name} {key.get_name()} {key.get_base64()}\n")
