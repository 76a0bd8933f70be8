"""Which devices a process owns, and the process group around them.

The assignment is pure (``gpu_ids``, ``layer_devices``) so the GPU branches are tested on
a CPU-only machine; the rest is the smallest amount of torch glue around it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import timedelta

import torch
import torch.distributed as dist

from . import generation


@dataclass(frozen=True, slots=True)
class Env:
    """What torchrun tells each worker through the environment."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    attempt: int

    @classmethod
    def read(cls, legacy_local_rank: int | None = None,
             local_world_size: int | None = None) -> Env:
        e = os.environ
        local_rank = int(e.get("LOCAL_RANK", legacy_local_rank or 0))
        world = int(e.get("WORLD_SIZE", 1))
        return cls(
            rank=int(e.get("RANK", 0)),
            local_rank=local_rank,
            world_size=world,
            local_world_size=local_world_size or int(e.get("LOCAL_WORLD_SIZE", world)),
            attempt=int(e.get("TORCHELASTIC_RESTART_COUNT") or 0),
        )


class PlacementError(Exception):
    pass


def gpu_ids(local_rank: int, local_world_size: int, gpu_count: int) -> list[int]:
    """GPUs of one process: an equal, contiguous share of the node's GPUs.

    With one process per GPU this is ``[local_rank]``; with fewer processes than GPUs each
    spans ``gpu_count // local_world_size`` of them (leftover GPUs stay idle). Seeing one
    GPU as local rank 0 of several is torchrun's ``--virtual-local-rank`` (each process is
    shown only its own GPU). Otherwise more processes than GPUs cannot work with NCCL (two
    ranks on one GPU), so it is an error.
    """
    if gpu_count <= 0:
        return []
    if not 0 <= local_rank < local_world_size:
        raise PlacementError(f"local rank {local_rank} outside local world {local_world_size}")
    if gpu_count == 1 and local_rank == 0:
        return [0]
    if local_world_size > gpu_count:
        raise PlacementError(
            f"{local_world_size} processes on this node but only {gpu_count} GPU(s)"
        )
    n = gpu_count // local_world_size
    return list(range(local_rank * n, local_rank * n + n))


def layer_devices(n_layers: int, n_devices: int) -> list[int]:
    """Index into the process's devices for each layer: contiguous, balanced chunks."""
    if n_devices <= 1:
        return [0] * n_layers
    return [i * n_devices // n_layers for i in range(n_layers)]


def backend_for(ids: list[int]) -> str:
    return "nccl" if ids else "gloo"


def devices_for(ids: list[int]) -> list[torch.device]:
    return [torch.device("cuda", i) for i in ids] or [torch.device("cpu")]


def ddp_device_ids(ids: list[int]) -> list[int] | None:
    """DDP wants device_ids only for a single-device module; a split module takes None."""
    return ids if len(ids) == 1 else None


def attempt_store(env: Env) -> tuple[dist.Store, int]:
    """The agent's store, namespaced by restart attempt, and that attempt.

    torchrun keeps one rendezvous store for all attempts, so a restarted group would read
    the previous attempt's gloo/NCCL addresses (seen with torch 2.13 and a c10d endpoint:
    "Gloo connectFullMesh failed ... Connection refused"). A prefix per attempt avoids it.
    The attempt is the one all ranks agree on (:mod:`.generation`), not the node's own count.
    """
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), env.world_size,
        is_master=False, timeout=timedelta(minutes=10),
    )
    attempt = generation.agree(store, env.rank)
    return dist.PrefixStore(f"/ddptui/attempt_{attempt}", store), attempt


def init_process_group(env: Env, ids: list[int]) -> tuple[str, Env]:
    """The process group, and ``env`` with the attempt every rank agrees on."""
    backend = backend_for(ids)
    if ids:
        torch.cuda.set_device(ids[0])
    if dist.is_initialized():
        return backend, env
    if env.world_size == 1 and "MASTER_ADDR" not in os.environ:
        # Started without torchrun: a one-process group needs no rendezvous.
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    elif os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        store, attempt = attempt_store(env)
        dist.init_process_group(backend, store=store, rank=env.rank, world_size=env.world_size)
        env = replace(env, attempt=attempt)
    else:
        dist.init_process_group(backend, rank=env.rank, world_size=env.world_size)
    return backend, env


def destroy_process_group() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
