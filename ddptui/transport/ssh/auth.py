"""Public-key authentication in ssh's order: identity files first (through the agent when it
holds the same key), then the agent's other keys unless IdentitiesOnly.

A failure lists every key offered and every file set aside with the reason, because "permission
denied" alone sends people guessing. Keys are named by path or by type and fingerprint only;
no key material or passphrase is ever logged or put in a message.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from ddptui.transport.ssh.resolve import Endpoint, HopError, expand

log = logging.getLogger(__name__)

_DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")

#: A key to offer, with the label it has in logs and in the failure message.
Candidate = tuple[str, paramiko.PKey]


@dataclass
class _Attempts:
    """What was offered or set aside, and what the server said: the failure message's parts."""

    tried: list[str] = field(default_factory=list)
    allowed: list[str] | None = None

    def failure(self, user: str) -> HopError:
        offered = (
            "; ".join(self.tried) if self.tried else "no key at all (no agent, no identity file)"
        )
        accepts = f" The server accepts: {', '.join(self.allowed)}." if self.allowed else ""
        return HopError(
            f"authentication as user {user!r} failed. Keys tried: {offered}.{accepts} "
            f"Check the user name and that one of these keys is in that user's "
            f"~/.ssh/authorized_keys there (or set identity_file / IdentityFile)."
        )


def authenticate(node: str, t: paramiko.Transport, ep: Endpoint) -> None:
    """Agent and identity files, in ssh's order; the error lists what was offered."""
    attempts = _Attempts()
    agent, agent_keys = _open_agent(node)
    candidates = _candidates(ep, agent_keys, attempts)
    try:
        if _offer_keys(node, t, ep, candidates, attempts):
            return
    finally:
        if agent is not None:
            with contextlib.suppress(Exception):
                agent.close()
    raise attempts.failure(ep.user)


def _open_agent(node: str) -> tuple[paramiko.Agent | None, list[paramiko.AgentKey]]:
    if not os.environ.get("SSH_AUTH_SOCK"):
        return None, []
    agent: paramiko.Agent | None = None
    try:
        agent = paramiko.Agent()
        return agent, list(agent.get_keys())
    except Exception as exc:  # a stale SSH_AUTH_SOCK must not stop key files
        log.debug("%s: ssh agent unusable: %s", node, exc)
        return agent, []


def _candidates(
    ep: Endpoint, agent_keys: Sequence[paramiko.AgentKey], attempts: _Attempts
) -> list[Candidate]:
    """Each distinct key once: the endpoint's files in order, then the agent's remaining keys."""
    used: set[bytes] = set()
    candidates = _file_keys(_identity_files(ep), agent_keys, used, attempts)
    if not ep.identities_only:
        for k in agent_keys:
            if k.asbytes() not in used:
                used.add(k.asbytes())
                candidates.append((f"agent key {k.get_name()} {k.fingerprint}", k))
    return candidates


def _identity_files(ep: Endpoint) -> list[str]:
    """The configured files, or like ssh the default ones that exist when none is configured."""
    files = list(ep.identity_files)
    if not files:
        files = [expand(p) for p in _DEFAULT_IDENTITIES if os.path.exists(expand(p))]
    return files


def _file_keys(
    files: Sequence[str],
    agent_keys: Sequence[paramiko.AgentKey],
    used: set[bytes],
    attempts: _Attempts,
) -> list[Candidate]:
    """Keys from files; one whose ``.pub`` the agent holds is offered through the agent.

    That way a passphrase-protected key loaded into the agent works without its passphrase.
    """
    by_blob = {k.asbytes(): k for k in agent_keys}
    candidates: list[Candidate] = []
    for path in files:
        pub = _public_blob(path)
        if pub is not None and pub in by_blob:
            candidates.append((f"{path} (via agent)", by_blob[pub]))
            used.add(pub)
            continue
        key = _load_key(path, attempts)
        if key is not None and key.asbytes() not in used:
            used.add(key.asbytes())
            candidates.append((path, key))
    return candidates


def _load_key(path: str, attempts: _Attempts) -> paramiko.PKey | None:
    """The private key at ``path``, or None with the reason noted for the failure message."""
    if not os.path.exists(path):
        attempts.tried.append(f"{path} (missing)")
        return None
    try:
        return paramiko.PKey.from_path(path)
    except paramiko.PasswordRequiredException:
        attempts.tried.append(f"{path} (passphrase-protected: load it into ssh-agent)")
    except Exception as exc:
        # The type only: a parse error's text could quote part of the file.
        attempts.tried.append(f"{path} (unusable: {type(exc).__name__})")
    return None


def _offer_keys(
    node: str,
    t: paramiko.Transport,
    ep: Endpoint,
    candidates: Sequence[Candidate],
    attempts: _Attempts,
) -> bool:
    """Offer keys in turn until one is accepted; stop early once the server refuses publickey."""
    for label, key in candidates:
        attempts.tried.append(label)
        try:
            t.auth_publickey(ep.user, key)
        except paramiko.BadAuthenticationType as exc:
            attempts.allowed = list(exc.allowed_types)
            return False
        except paramiko.AuthenticationException as exc:
            attempts.allowed = getattr(exc, "allowed_types", attempts.allowed)
            continue
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise HopError(
                f"the connection broke during authentication as {ep.user!r}: {exc}"
            ) from exc
        if t.is_authenticated():
            log.debug("%s: authenticated as %s with %s", node, ep.user, label)
            return True
    return False


def _public_blob(private_path: str) -> bytes | None:
    """The key blob of ``<path>.pub``, to spot the same key offered by the agent."""
    try:
        parts = Path(f"{private_path}.pub").read_text().split()
        return base64.b64decode(parts[1])
    except Exception:
        return None
