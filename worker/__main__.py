"""Entry point: ``torchrun ... -m ddptui_worker [train|allreduce] [flags]``."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import torch
from torch.distributed.elastic.multiprocessing.errors import record

from . import allreduce, train
from .cli import UsageError, parse_args
from .data import DataError
from .devices import (
    Env,
    PlacementError,
    destroy_process_group,
    devices_for,
    gpu_ids,
    init_process_group,
)
from .metrics import Emitter
from .stop import on_sigterm

PROG = "ddptui_worker"
USAGE_EXIT = 2


def fail(rank: int, message: str) -> None:
    """One line on rank 0; the other ranks of the job say nothing (same error, N copies)."""
    if rank == 0:
        print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(USAGE_EXIT)


@record
def main(argv: Sequence[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    rank = int(os.environ.get("RANK", 0))
    try:
        args = parse_args(argv)
    except UsageError as e:
        fail(rank, str(e))
        return
    env = Env.read(args.local_rank, args.local_world_size)
    try:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        ids = gpu_ids(env.local_rank, env.local_world_size, gpus)
    except PlacementError as e:
        # Not the same on every rank (local rank 0 may fit where 3 does not): each says it.
        print(f"{PROG}: error: rank {env.rank}: {e}", file=sys.stderr, flush=True)
        raise SystemExit(USAGE_EXIT) from None
    emit = Emitter(env.rank, env.attempt, args.number_lines)
    stop = on_sigterm()
    code = 0
    try:
        backend, env = init_process_group(env, ids)
        emit.attempt = env.attempt  # the attempt all ranks agree on, not this node's count
        if args.mode == "allreduce":
            code = allreduce.run(args, env, devices_for(ids)[0], backend, emit)
        else:
            code = train.run(args, env, ids, backend, emit, stop)
    except (DataError, UsageError) as e:
        fail(env.rank, str(e))
    finally:
        destroy_process_group()
    if code:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
