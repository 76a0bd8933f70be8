"""The Slurm test cluster's configuration text: pure, so that every key is read in one place.

:mod:`tests.slurmcluster` writes these files and starts the daemons. The keys come from
``/work/shared/notes/slurm-on-one-machine.md``: no cgroup, no accounting, root everywhere, and
state, spool and logs under the harness's own folders, so nothing reads ``/etc/slurm``.
"""

from __future__ import annotations

from pathlib import Path

#: The same on every node: each slurmd listens in its own network namespace, so nodes of
#: one cluster, and of clusters side by side, never compete for it.
SLURMD_PORT = 6818


def slurm_conf(*, cluster_name: str, ctl_name: str, ctl_address: str, ctld_port: int,
               munge_socket: Path, run_dir: Path, log_dir: Path, addresses: dict[str, str],
               cpus_per_node: int, partition: str, task_plugin: str = "task/none") -> str:
    """slurm.conf for one controller and ``addresses`` (node name -> NodeAddr).

    ``task_plugin`` ``task/affinity`` binds each task to its CPUs (``sched_setaffinity``,
    no cgroup needed), as most clusters do; ``task/none`` leaves a step's processes on every
    CPU of the machine.

    ``SlurmctldHost=name(address)`` and ``NodeAddr=`` let clients in the root namespace
    reach every daemon without resolving a name.
    """
    nodes = "".join(f"NodeName={n} NodeAddr={ip} CPUs={cpus_per_node} State=UNKNOWN\n"
                    for n, ip in addresses.items())
    return (
        f"ClusterName={cluster_name}\n"
        f"SlurmctldHost={ctl_name}({ctl_address})\n"
        f"SlurmctldPort={ctld_port}\n"
        f"SlurmdPort={SLURMD_PORT}\n"
        # slurmctld binds the controller's address only, so clusters never share a port.
        "CommunicationParameters=NoCtldInAddrAny\n"
        "AuthType=auth/munge\nCredType=cred/munge\n"
        f"AuthInfo=socket={munge_socket}\n"
        "SlurmUser=root\nSlurmdUser=root\n"
        f"StateSaveLocation={run_dir / 'state'}\n"
        f"SlurmdSpoolDir={run_dir}/%n\n"
        f"SlurmctldPidFile={run_dir / 'slurmctld.pid'}\n"
        f"SlurmdPidFile={run_dir}/slurmd-%n.pid\n"
        f"SlurmctldLogFile={log_dir / 'slurmctld.log'}\n"
        f"SlurmdLogFile={log_dir}/slurmd-%n.log\n"
        f"PlugStackConfig={log_dir / 'plugstack.conf'}\n"
        "SlurmctldDebug=info\nSlurmdDebug=info\n"
        # No cgroup, no accounting: what a plain machine (and CI) can run.
        "ProctrackType=proctrack/linuxproc\n"
        f"TaskPlugin={task_plugin}\n"
        "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
        "JobCompType=jobcomp/none\nMpiDefault=none\n"
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
        "SchedulerType=sched/backfill\nReturnToService=2\n"
        # A node may claim more CPUs than this machine has (4 nodes x 2 CPUs on 2 cores).
        "SlurmdParameters=config_overrides\n"
        # Short timeouts: a test waits seconds, not minutes, for a cancel or a lost node.
        "MessageTimeout=5\nSlurmctldTimeout=10\nSlurmdTimeout=10\nKillWait=2\n"
        "InactiveLimit=0\nMinJobAge=2\n"
        # A task's child that keeps the task's stdout open (daemonized without closing it)
        # holds its step after scancel; after this long slurmd gives up and drains the node.
        "UnkillableStepTimeout=10\n"
        + nodes
        + f"PartitionName={partition} Nodes=ALL Default=YES MaxTime=INFINITE "
          "State=UP OverSubscribe=FORCE:4\n"
    )


def hosts_file(names: dict[str, str]) -> str:
    """The daemons' private /etc/hosts: localhost, then ``name -> address``."""
    return ("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
            + "".join(f"{ip} {name}\n" for name, ip in names.items()))


def offline_conf(folder: Path) -> Path:
    """A slurm.conf with which ``scontrol show hostnames`` works and no daemon is needed.

    Without any slurm.conf the clients try a DNS SRV lookup first and give up.
    """
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "slurm.conf"
    conf.write_text("ClusterName=offline\nSlurmctldHost=localhost\n")
    return conf
