"""The OpenSSH client's command line for a node, as ddptui's own connection reaches it.

ddptui connects through paramiko, which costs its import and a handshake in Python before the
first command; OpenSSH is connected by then. Where a command is worth sending at ddptui's
very start (a warm torchrun, :mod:`ddptui.launch.warm`), it goes through ``ssh`` itself,
never less strict than ddptui: no prompt (``BatchMode``), only host keys already known
(``StrictHostKeyChecking=yes``, whatever ``ssh.accept_new_host_keys`` says: a first contact
is ddptui's to record), the same config file, known hosts, login, port and key. What it
cannot do (an unknown host, a key with a passphrase and no agent) it fails to do, and ddptui's
connection goes on as before.
"""

from __future__ import annotations

import os

from ddptui.config import NodeConfig, SSHOptions


def argv(node: NodeConfig, ssh: SSHOptions, command: str) -> list[str]:
    """``ssh`` running ``command`` on ``node`` (no terminal; stdin is the command's)."""
    args = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"ConnectTimeout={max(1, round(ssh.connect_timeout))}",
            "-o", "LogLevel=ERROR"]
    if ssh.config_file:
        args += ["-F", os.path.expanduser(ssh.config_file)]
    if ssh.known_hosts:
        args += ["-o", f'UserKnownHostsFile="{os.path.expanduser(ssh.known_hosts)}"']
    if node.user:
        args += ["-l", node.user]
    if node.port:
        args += ["-p", str(node.port)]
    if node.identity_file:  # the hosts file's key alone, as ddptui offers it
        args += ["-i", os.path.expanduser(node.identity_file), "-o", "IdentitiesOnly=yes"]
    return [*args, "--", node.host, command]
