"""SSH transport (paramiko): one connection per node, resolved the way ``ssh`` would."""

from ddptui.transport.ssh.transport import SSHTransport

__all__ = ["SSHTransport"]
