"""Slurm: the allocation a run's nodes come from, read and asked for with Slurm's own tools.

Pure pieces (the hostlist syntax, ``scontrol``'s records, the words for a job's states) live
beside the parts that run Slurm's commands, so that the rules Slurm applies are tested
without a cluster.
"""
