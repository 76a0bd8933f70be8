"""SSH transport (paramiko): one connection per node, resolved the way ``ssh`` would.

``resolve`` applies ~/.ssh/config and the ProxyJump chain, ``hostkeys`` checks known_hosts
strictly, ``auth`` offers keys in ssh's order, and ``transport`` owns the connection. Nothing
here logs key material or passphrases: only paths, key types and fingerprints.
"""

from ddptui.transport.ssh.transport import SSHTransport

__all__ = ["SSHTransport"]
