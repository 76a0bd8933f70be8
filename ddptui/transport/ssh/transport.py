"""SSH transport (paramiko): one connection per node, resolved the way ``ssh`` would.

Why paramiko's low-level ``Transport`` and not ``SSHClient``: every failure has to become one
paragraph a person can act on (which host, which port, which user, which keys, which
known_hosts line), and host keys have to follow OpenSSH's rules (``[host]:port`` names, hashed
entries, accept-new that still refuses a changed key). Owning the handshake, the host-key check
and the key loop makes each of those explicit instead of reverse-engineered from exceptions.

Everything after ``connect()`` multiplexes over that one connection: an exec channel per
``run()``, one lazily opened SFTP session (behind a lock: paramiko's SFTP client is not
thread-safe) for files. Closing a channel does not end a remote process; stopping a job is the
caller's explicit kill of its process group.

Nothing here logs key material or passphrases: only paths, key types and fingerprints.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import getpass
import hmac
import logging
import os
import re
import select
import shlex
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from hashlib import sha1
from pathlib import Path

import paramiko

from ddptui.config import NodeConfig, SSHOptions
from ddptui.transport.base import CommandResult, TransportError

log = logging.getLogger(__name__)

KEEPALIVE_S = 15
#: A stuck SFTP request (dead peer, no RST) fails after this instead of hanging its caller.
SFTP_TIMEOUT_S = 60.0
_MAX_JUMPS = 8
_DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
#: known_hosts records RSA keys as ssh-rsa; these are the signature names paramiko negotiates.
_RSA_ALGS = ("rsa-sha2-512", "rsa-sha2-256")
#: accept-new appends from many connect threads at once; one writer at a time per process.
_KNOWN_HOSTS_WRITE_LOCK = threading.Lock()


class _HopError(Exception):
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


def _expand(path: str) -> str:
    return os.path.expanduser(path.replace("%d", str(Path.home())).replace("%u", getpass.getuser()))


def _parse_jump(spec: str) -> tuple[str | None, str, int | None]:
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


class SSHTransport:
    """A node reached over SSH. One controller thread plus occasional other callers may share it."""

    def __init__(self, node: NodeConfig, options: SSHOptions | None = None) -> None:
        self.node = node.name
        self.address = node.host  # until connect() resolves HostName
        self._cfg = node
        self._opts = options or SSHOptions()
        self._lock = threading.Lock()  # connect/close
        self._sftp_lock = threading.Lock()
        self._transport: paramiko.Transport | None = None
        self._hops: list[paramiko.Transport] = []  # jump hosts, outermost first
        self._sftp: paramiko.SFTPClient | None = None
        self._home: str | None = None
        self._ssh_config: paramiko.SSHConfig | None = None
        self._ssh_config_path: str | None = None

    # -- resolution ---------------------------------------------------------------------------

    def _config(self) -> paramiko.SSHConfig:
        if self._ssh_config is None:
            path = self._opts.config_file
            if path is not None:
                path = _expand(path)
                if not os.path.isfile(path):
                    raise TransportError(
                        self.node, f"{self.node}: the ssh config file {path} does not exist."
                    )
            else:
                default = _expand("~/.ssh/config")
                path = default if os.path.isfile(default) else None
            try:
                self._ssh_config = (
                    paramiko.SSHConfig.from_path(path) if path else paramiko.SSHConfig()
                )
            except Exception as exc:
                raise TransportError(
                    self.node, f"{self.node}: cannot read ssh config {path}: {exc}"
                ) from exc
            self._ssh_config_path = path
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
            identities = [_expand(identity_file)]
        else:
            identities = [_expand(p) for p in entry.get("identityfile", [])]
        known: list[str] = []
        if self._opts.known_hosts:
            known.append(_expand(self._opts.known_hosts))
        for raw in entry.get("userknownhostsfile", "").split():
            if raw.lower() != "none":
                known.append(_expand(raw))
        if not self._opts.known_hosts:
            known.append(_expand("~/.ssh/known_hosts"))
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

    def _chain(self, ep: Endpoint, depth: int = 0) -> list[Endpoint]:
        """Jump hosts to pass through before ``ep``, outermost first (a jump's own jumps too)."""
        if depth > _MAX_JUMPS:
            raise TransportError(self.node, f"{self.node}: ProxyJump loops (over {_MAX_JUMPS}).")
        hops: list[Endpoint] = []
        for i, spec in enumerate(ep.proxy_jump):
            user, host, port = _parse_jump(spec)
            jep = self.resolve(host, user=user, port=port)
            if i == 0:
                hops += self._chain(jep, depth + 1)
            hops.append(jep)
        return hops

    # -- connecting ---------------------------------------------------------------------------

    def connect(self, timeout: float | None = None) -> None:
        """Open (or reopen, if it dropped) the one connection; raise TransportError."""
        timeout = self._opts.connect_timeout if timeout is None else timeout
        with self._lock:
            if self._transport is not None and self._transport.is_active():
                return
            self._close_locked()
            target = self.resolve(
                self._cfg.host, self._cfg.user, self._cfg.port, self._cfg.identity_file
            )
            hops = self._chain(target)
            opened: list[paramiko.Transport] = []
            try:
                sock: socket.socket | paramiko.Channel | paramiko.ProxyCommand | None = None
                for i, ep in enumerate([*hops, target]):
                    is_target = i == len(hops)
                    try:
                        if sock is None:
                            sock = self._first_socket(ep, timeout)
                        t = self._handshake(ep, sock, timeout)
                        opened.append(t)
                        if is_target:
                            break
                        nxt = ([*hops, target])[i + 1]
                        sock = self._direct_tcpip(t, ep, nxt, timeout)
                    except _HopError as exc:
                        if is_target and not hops:
                            msg = f"{self.node} ({ep.label}): {exc}"
                        elif is_target:
                            via = " -> ".join(h.label for h in hops)
                            msg = f"{self.node} ({ep.label}, via ProxyJump {via}): {exc}"
                        else:
                            msg = (
                                f"{self.node} ({target.label}): ProxyJump host {ep.alias} "
                                f"({ep.label}) failed: {exc}"
                            )
                        raise TransportError(self.node, msg) from exc
            except BaseException:
                for t in reversed(opened):
                    with contextlib.suppress(Exception):
                        t.close()
                raise
            self._hops = opened[:-1]
            self._transport = opened[-1]
            self.address = target.hostname
            log.info("%s: connected to %s as %s", self.node, target.label, target.user)

    def _first_socket(self, ep: Endpoint, timeout: float) -> socket.socket | paramiko.ProxyCommand:
        if ep.proxy_command is None:
            return self._tcp(ep, timeout)
        try:
            return paramiko.ProxyCommand(ep.proxy_command)
        except Exception as exc:
            raise _HopError(f"its ProxyCommand {ep.proxy_command!r} did not start: {exc}") from exc

    def _tcp(self, ep: Endpoint, timeout: float) -> socket.socket:
        try:
            sock = socket.create_connection((ep.hostname, ep.port), timeout=timeout)
            # Small request/reply packets (exec, SFTP) otherwise sit out a delayed ACK each.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except socket.gaierror as exc:
            raise _HopError(
                f"cannot resolve the host name {ep.hostname!r} ({exc.strerror}). Check the "
                f"host in the hosts file, or its HostName in "
                f"{self._ssh_config_path or 'the ssh config'}."
            ) from exc
        except ConnectionRefusedError as exc:
            raise _HopError(
                f"connection refused: the machine answers but nothing listens on port "
                f"{ep.port}. Is sshd running there, and is the port right?"
            ) from exc
        except TimeoutError as exc:
            raise _HopError(
                f"no answer within {timeout:g}s: the machine is down, unreachable from here, "
                f"or a firewall drops the connection."
            ) from exc
        except OSError as exc:
            if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN):
                raise _HopError(
                    f"unreachable ({exc.strerror}): no route to the machine, or it is down."
                ) from exc
            raise _HopError(f"cannot connect: {exc.strerror or exc}.") from exc

    def _direct_tcpip(
        self, t: paramiko.Transport, via: Endpoint, to: Endpoint, timeout: float
    ) -> paramiko.Channel:
        try:
            return t.open_channel(
                "direct-tcpip", (to.hostname, to.port), ("127.0.0.1", 0), timeout=timeout
            )
        except paramiko.ChannelException as exc:
            raise _HopError(
                f"it could not open a tunnel to {to.label} ({exc.text}): the target is "
                f"down or unreachable from {via.alias}, or that jump host forbids forwarding."
            ) from exc
        except (paramiko.SSHException, EOFError, OSError) as exc:
            why = exc or type(exc).__name__
            raise _HopError(f"the tunnel to {to.label} failed: {why}.") from exc

    def _handshake(
        self,
        ep: Endpoint,
        sock: socket.socket | paramiko.Channel | paramiko.ProxyCommand,
        timeout: float,
    ) -> paramiko.Transport:
        t = paramiko.Transport(sock)
        t.banner_timeout = timeout
        t.handshake_timeout = timeout
        t.auth_timeout = timeout
        try:
            known = self._known_entries(ep)
            opts = t.get_security_options()
            opts.key_types = _prefer(opts.key_types, {e[2].get_name() for e in known})
            try:
                t.start_client(timeout=timeout)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                raise _HopError(
                    f"the SSH handshake failed ({exc or type(exc).__name__}): is this an SSH "
                    f"server, and is it reachable within {timeout:g}s?"
                ) from exc
            self._check_host_key(ep, t.get_remote_server_key(), known)
            self._authenticate(t, ep)
            t.set_keepalive(KEEPALIVE_S)
            return t
        except BaseException:
            t.close()
            raise

    # -- host keys ----------------------------------------------------------------------------

    def _known_entries(self, ep: Endpoint) -> list[tuple[str, int, paramiko.PKey]]:
        """(file, line, key) of every known_hosts entry for this endpoint, in ssh's order."""
        name = ep.known_hosts_name.lower()
        found: list[tuple[str, int, paramiko.PKey]] = []
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
                if _host_matches(name, entry.hostnames):
                    found.append((path, lineno, entry.key))
        return found

    def _check_host_key(
        self, ep: Endpoint, key: paramiko.PKey, known: list[tuple[str, int, paramiko.PKey]]
    ) -> None:
        kind, fp = key.get_name(), key.fingerprint
        same_type = [(p, n) for p, n, k in known if k.get_name() == kind]
        if any(k.get_name() == kind and k.asbytes() == key.asbytes() for _, _, k in known):
            return
        if same_type:
            path, line = same_type[0]
            raise _HopError(
                f"WARNING: THE HOST KEY HAS CHANGED. Someone may be intercepting this "
                f"connection (man-in-the-middle), or the machine was reinstalled. It now offers "
                f"{kind} {fp}, but {path}:{line} holds a different {kind} key for "
                f"{ep.known_hosts_name}. Refusing to connect. If the change is expected, remove "
                f"the old key with `ssh-keygen -R '{ep.known_hosts_name}' -f {path}` and trust "
                f"the new one only after checking its fingerprint."
            )
        write_to = self._known_hosts_write_path(ep)
        if self._opts.accept_new_host_keys:
            _append_known_host(write_to, ep.known_hosts_name, key)
            log.warning(
                "%s: accepted new host key %s %s for %s into %s",
                self.node,
                kind,
                fp,
                ep.known_hosts_name,
                write_to,
            )
            return
        other = f" ({known[0][0]}:{known[0][1]} holds a key of another type.)" if known else ""
        raise _HopError(
            f"its host key is not known: {kind} {fp}, and unknown hosts are refused.{other} "
            f"To trust it, check that fingerprint with the machine's owner, then run "
            f"`ssh-keyscan -p {ep.port} {ep.hostname} >> {write_to}` (or connect once with "
            f"`ssh {ep.alias}`), or set `ssh: accept_new_host_keys: true` in the hosts file."
        )

    def _known_hosts_write_path(self, ep: Endpoint) -> str:
        return ep.known_hosts_files[0] if ep.known_hosts_files else _expand("~/.ssh/known_hosts")

    # -- authentication -----------------------------------------------------------------------

    def _authenticate(self, t: paramiko.Transport, ep: Endpoint) -> None:
        """Agent and identity files, in ssh's order; the error lists what was offered."""
        tried: list[str] = []
        candidates: list[tuple[str, paramiko.PKey]] = []
        agent: paramiko.Agent | None = None
        agent_keys: list[paramiko.AgentKey] = []
        if os.environ.get("SSH_AUTH_SOCK"):
            try:
                agent = paramiko.Agent()
                agent_keys = list(agent.get_keys())
            except Exception as exc:  # a stale SSH_AUTH_SOCK must not stop key files
                log.debug("%s: ssh agent unusable: %s", self.node, exc)
        files = list(ep.identity_files)
        if not files:
            files = [_expand(p) for p in _DEFAULT_IDENTITIES if os.path.exists(_expand(p))]
        by_blob = {k.asbytes(): k for k in agent_keys}
        used: set[bytes] = set()
        for path in files:
            pub = _public_blob(path)
            if pub is not None and pub in by_blob:
                candidates.append((f"{path} (via agent)", by_blob[pub]))
                used.add(pub)
                continue
            if not os.path.exists(path):
                tried.append(f"{path} (missing)")
                continue
            try:
                key = paramiko.PKey.from_path(path)
            except paramiko.PasswordRequiredException:
                tried.append(f"{path} (passphrase-protected: load it into ssh-agent)")
                continue
            except Exception as exc:
                tried.append(f"{path} (unusable: {type(exc).__name__})")
                continue
            if key.asbytes() not in used:
                used.add(key.asbytes())
                candidates.append((path, key))
        if not ep.identities_only:
            for k in agent_keys:
                if k.asbytes() not in used:
                    used.add(k.asbytes())
                    candidates.append((f"agent key {k.get_name()} {k.fingerprint}", k))
        allowed: list[str] | None = None
        try:
            for label, key in candidates:
                tried.append(label)
                try:
                    t.auth_publickey(ep.user, key)
                except paramiko.BadAuthenticationType as exc:
                    allowed = list(exc.allowed_types)
                    break
                except paramiko.AuthenticationException as exc:
                    allowed = getattr(exc, "allowed_types", allowed)
                    continue
                except (paramiko.SSHException, EOFError, OSError) as exc:
                    raise _HopError(
                        f"the connection broke during authentication as {ep.user!r}: {exc}"
                    ) from exc
                if t.is_authenticated():
                    log.debug("%s: authenticated as %s with %s", self.node, ep.user, label)
                    return
        finally:
            if agent is not None:
                with contextlib.suppress(Exception):
                    agent.close()
        offered = "; ".join(tried) if tried else "no key at all (no agent, no identity file)"
        accepts = f" The server accepts: {', '.join(allowed)}." if allowed else ""
        raise _HopError(
            f"authentication as user {ep.user!r} failed. Keys tried: {offered}.{accepts} "
            f"Check the user name and that one of these keys is in that user's "
            f"~/.ssh/authorized_keys there (or set identity_file / IdentityFile)."
        )

    # -- using the connection -----------------------------------------------------------------

    def _active(self) -> paramiko.Transport:
        t = self._transport
        if t is None:
            raise TransportError(self.node, f"{self.node}: not connected (call connect() first).")
        if not t.is_active():
            raise TransportError(
                self.node, f"{self.node} ({self.address}): the SSH connection was lost."
            )
        return t

    def run(self, command: str, timeout: float) -> CommandResult:
        """``sh -c command`` on its own exec channel; stdout and stderr read as they come."""
        t = self._active()
        deadline = time.monotonic() + timeout
        try:
            chan = t.open_session(timeout=timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise TransportError(
                self.node,
                f"{self.node} ({self.address}): could not open a channel for a command "
                f"({exc or type(exc).__name__}); the server may limit sessions (MaxSessions).",
            ) from exc
        try:
            chan.exec_command(f"sh -c {shlex.quote(command)}")
            out, err = bytearray(), bytearray()
            while True:
                got = False
                while chan.recv_ready():
                    out += chan.recv(65536)
                    got = True
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                    got = True
                if got:
                    continue
                if chan.closed or (chan.eof_received and chan.exit_status_ready()):
                    break
                if not t.is_active():
                    raise TransportError(
                        self.node,
                        f"{self.node} ({self.address}): the SSH connection was lost while "
                        f"running a command: {command[:200]}",
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TransportError(
                        self.node,
                        f"{self.node} ({self.address}): command timed out after {timeout:g}s "
                        f"(it may still be running there): {command[:200]}",
                    )
                if chan.eof_received:
                    # Output is over; the exit status sets status_event, the pipe stays set.
                    chan.status_event.wait(min(left, 0.5))
                else:
                    select.select([chan], [], [], min(left, 0.5))
            code = chan.recv_exit_status() if chan.exit_status_ready() else -1
        except TransportError:
            raise
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise TransportError(
                self.node,
                f"{self.node} ({self.address}): the connection broke while running a command: "
                f"{exc or type(exc).__name__}",
            ) from exc
        finally:
            chan.close()
        return CommandResult(
            code, out.decode("utf-8", errors="replace"), err.decode("utf-8", errors="replace")
        )

    def _sftp_client(self) -> paramiko.SFTPClient:
        """The one SFTP session (caller holds ``_sftp_lock``), reopened if it died."""
        if self._sftp is not None and not self._sftp.get_channel().closed:
            return self._sftp
        t = self._active()
        try:
            self._sftp = paramiko.SFTPClient.from_transport(t)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise TransportError(
                self.node, f"{self.node} ({self.address}): could not start SFTP: {exc}"
            ) from exc
        if self._sftp is None:
            raise TransportError(self.node, f"{self.node} ({self.address}): SFTP refused.")
        self._sftp.get_channel().settimeout(SFTP_TIMEOUT_S)
        return self._sftp

    @contextlib.contextmanager
    def _sftp_call(self, what: str) -> Iterator[paramiko.SFTPClient]:
        """Hold the SFTP lock; turn connection trouble into TransportError, keep OSErrors."""
        with self._sftp_lock:
            try:
                yield self._sftp_client()
            except TransportError:
                raise
            except (TimeoutError, paramiko.SSHException, EOFError, ConnectionError) as exc:
                with contextlib.suppress(Exception):
                    if self._sftp is not None:
                        self._sftp.close()
                self._sftp = None
                raise TransportError(
                    self.node,
                    f"{self.node} ({self.address}): {what} failed: {exc or type(exc).__name__}",
                ) from exc

    def home(self) -> str:
        """SFTP's idea of ``.`` (the login directory); ``$HOME`` where SFTP is refused."""
        if self._home is None:
            try:
                with self._sftp_call("finding the home directory") as sftp:
                    self._home = sftp.normalize(".")
            except TransportError:
                r = self.run('printf %s "$HOME"', timeout=self._opts.connect_timeout)
                if r.exit_code != 0 or not r.stdout.startswith("/"):
                    raise
                self._home = r.stdout
        return self._home

    def put_bytes(self, data: bytes, remote_path: str, mode: int = 0o644) -> None:
        tmp = f"{remote_path}.ddptui-tmp-{os.urandom(4).hex()}"
        with self._sftp_call(f"writing {remote_path}") as sftp:
            try:
                with sftp.open(tmp, "wb") as fh:
                    fh.set_pipelined(True)
                    fh.write(data)
                sftp.chmod(tmp, mode)
                try:
                    sftp.posix_rename(tmp, remote_path)
                except OSError as exc:
                    # Servers without posix-rename@openssh.com: plain SFTP rename refuses an
                    # existing target, so remove it first (a short window, not atomic).
                    try:
                        with contextlib.suppress(FileNotFoundError):
                            sftp.remove(remote_path)
                        sftp.rename(tmp, remote_path)
                    except OSError:
                        raise exc from None
            except BaseException:
                with contextlib.suppress(Exception):
                    sftp.remove(tmp)
                raise

    def read_from(self, remote_path: str, offset: int, max_bytes: int) -> bytes:
        with self._sftp_call(f"reading {remote_path}") as sftp:
            try:
                size = sftp.stat(remote_path).st_size or 0
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    raise FileNotFoundError(errno.ENOENT, "no such file", remote_path) from None
                raise
            if offset >= size or max_bytes <= 0:
                return b""
            n = min(max_bytes, size - offset)
            with sftp.open(remote_path, "rb") as fh:
                return b"".join(fh.readv([(offset, n)]))

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        with self._sftp_lock:
            if self._sftp is not None:
                with contextlib.suppress(Exception):
                    self._sftp.close()
                self._sftp = None
        for t in [self._transport, *reversed(self._hops)]:
            if t is not None:
                with contextlib.suppress(Exception):
                    t.close()
        self._transport = None
        self._hops = []

    def __repr__(self) -> str:
        return f"SSHTransport({self.node!r}, {self._cfg.host!r})"


# -- helpers ---------------------------------------------------------------------------------


def _prefer(offered: Sequence[str], known_types: set[str]) -> tuple[str, ...]:
    """Key types with the ones already in known_hosts first, as ssh orders HostKeyAlgorithms."""
    first: list[str] = []
    for kt in known_types:
        first += list(_RSA_ALGS) if kt == "ssh-rsa" else [kt]
    head = [k for k in first if k in offered]
    return tuple(dict.fromkeys([*head, *offered]))


def _host_matches(name: str, patterns: Sequence[str]) -> bool:
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


def _public_blob(private_path: str) -> bytes | None:
    """The key blob of ``<path>.pub``, to spot the same key offered by the agent."""
    try:
        parts = Path(f"{private_path}.pub").read_text().split()
        return base64.b64decode(parts[1])
    except Exception:
        return None


def _append_known_host(path: str, name: str, key: paramiko.PKey) -> None:
    """Record a key as ssh's accept-new does: one plain line appended to the user's file."""
    with _KNOWN_HOSTS_WRITE_LOCK:
        p = Path(path)
        p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        needs_nl = p.exists() and p.stat().st_size > 0 and not p.read_bytes().endswith(b"\n")
        with open(p, "a", encoding="utf-8") as fh:
            fh.write(("\n" if needs_nl else "") + f"{name} {key.get_name()} {key.get_base64()}\n")
