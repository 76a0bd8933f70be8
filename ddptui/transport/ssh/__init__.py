"""SSH transport (paramiko): one connection per node, resolved the way ``ssh`` would.

``resolve`` applies ~/.ssh/config and the ProxyJump chain, ``hostkeys`` checks known_hosts
strictly, ``auth`` offers keys in ssh's order, and ``transport`` owns the connection. Nothing
here logs key material or passphrases: only paths, key types and fingerprints.
"""

from ddptui.transport.ssh import lazy_invoke

lazy_invoke.defer()  # before any paramiko import below

from ddptui.transport.ssh.transport import SSHTransport  # noqa: E402

__all__ = ["SSHTransport"]
