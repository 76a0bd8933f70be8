"""Slurm support: what ddptui needs to read and drive a Slurm allocation.

Pure pieces (the hostlist syntax) live here beside the parts that talk to Slurm, so that the
rules Slurm applies are tested without a cluster.
"""
