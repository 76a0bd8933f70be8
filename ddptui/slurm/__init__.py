"""Slurm: the allocation a run's nodes come from, read and asked for with Slurm's own tools."""
