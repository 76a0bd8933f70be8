"""The environment of every step ddptui starts on Slurm: what ``srun`` is left to read as its
options, and what the run's ranks are left of Slurm's own variables.

``srun`` takes ``SLURM_*`` (and ``SRUN_*``) variables of its environment as options:
``SLURM_CPUS_PER_TASK`` is ``--cpus-per-task``, ``SLURM_MEM_PER_CPU`` ``--mem-per-cpu``,
``SLURM_NTASKS`` ``--ntasks``. Started from an ``salloc`` shell or an sbatch script, or after
an ``export`` by hand, ddptui would hand them to every step it starts: "cpus-per-task set by
two different environment variables", "SLURM_MEM_PER_CPU, SLURM_MEM_PER_GPU, and
SLURM_MEM_PER_NODE are mutually exclusive", both ranks of a node bound to one core. What a
launcher exports for its own ranks (``MASTER_PORT``, ``RANK``) must not reach torchrun,
which sets its own; nor may a ``CUDA_VISIBLE_DEVICES`` narrowed for the shell's own task
(``--gpus-per-task``) hide the node's GPUs from it. So ``srun`` runs without all of them
(:func:`unset_argv`): the steps get only what Slurm sets for them, and the run's step keeps
of that only what describes the job and the node, not its own single task
(:func:`ranks_unset`), which torchrun's ranks are not.

``SLURM_JOB_ID`` goes from srun's environment too: srun is told the job by ``--jobid``, and
Slurm sets it (with the node list and the job's CPUs on the node) in every step it starts,
from the job itself, so the ranks still have it, and never one a shell left from another
job. ``SLURM_CONF`` stays: it says where the cluster is, not what a step asks for.

Pure: tested whole without a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Prefixes of the variables srun reads as options.
OPTION_PREFIXES = ("SLURM_", "SRUN_")
#: Kept for srun: where the client finds its cluster, which no step option changes.
SRUN_KEEPS = frozenset({"SLURM_CONF"})
#: What a launcher (torchrun, an earlier job's script) sets for its own ranks; torchrun sets
#: each of them for ours.
LAUNCHER = frozenset({"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                      "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
                      "ROLE_NAME", "ROLE_WORLD_SIZE"})
LAUNCHER_PREFIXES = ("TORCHELASTIC_",)
#: The GPUs the shell's own task was narrowed to; Slurm sets the step's.
GPU_NARROWING = frozenset({"CUDA_VISIBLE_DEVICES"})

#: Slurm's variables the ranks keep: they describe the job and the node, and stay true for
#: every rank. The rest describe the run's step as Slurm sees it (one task: SLURM_NTASKS,
#: SLURM_PROCID, SLURM_CPUS_PER_TASK, SLURM_CPU_BIND...), which would make a training stack
#: believe Slurm started its ranks (Lightning's SLURMEnvironment reads SLURM_NTASKS) and a
#: nested srun take them as options.
RANKS_KEEP = frozenset({
    "SLURM_CONF", "SLURM_CLUSTER_NAME", "SLURM_WORKING_CLUSTER", "SLURM_JOB_ID", "SLURM_JOBID",
    "SLURM_JOB_NAME", "SLURM_JOB_USER", "SLURM_JOB_UID", "SLURM_JOB_GID", "SLURM_JOB_ACCOUNT",
    "SLURM_JOB_PARTITION", "SLURM_JOB_QOS", "SLURM_JOB_RESERVATION", "SLURM_JOB_NODELIST",
    "SLURM_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_JOB_CPUS_PER_NODE", "SLURM_CPUS_ON_NODE",
    "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE", "SLURM_JOB_START_TIME", "SLURM_JOB_END_TIME",
    "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST", "SLURM_RESTART_COUNT", "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP", "SLURM_TOPOLOGY_ADDR",
    "SLURM_TOPOLOGY_ADDR_PATTERN"})


def dropped(env: Mapping[str, str]) -> list[str]:
    """The names of ``env`` that no step of ddptui's may inherit, sorted."""
    return sorted(k for k in env if (k.startswith(OPTION_PREFIXES) and k not in SRUN_KEEPS)
                  or k in LAUNCHER or k.startswith(LAUNCHER_PREFIXES) or k in GPU_NARROWING)


def scrubbed(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` as srun may inherit it."""
    gone = set(dropped(env))
    return {k: v for k, v in env.items() if k not in gone}


def unset_argv(env: Mapping[str, str]) -> list[str]:
    """``env -u NAME...`` (GNU's, BSD's and BusyBox's env all take ``-u``), to put before
    srun's argv when it runs in ``env``: by name only, so no value (a secret among them) is
    put on a command line; [] when nothing goes."""
    names = dropped(env)
    return ["env", *(a for k in names for a in ("-u", k))] if names else []


def ranks_unset() -> str:
    """Shell that unsets, in the run's step, every Slurm variable not in
    :data:`RANKS_KEEP` (Slurm sets them in the step, after srun's environment)."""
    keep = "|".join(sorted(RANKS_KEEP))
    return ("for v in $(env | sed -n 's/^\\(SLURM_[A-Za-z0-9_]*\\)=.*/\\1/p'); do "
            f'case "$v" in {keep}) ;; *) unset "$v" ;; esac; done; ')
