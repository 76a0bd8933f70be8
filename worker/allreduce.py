"""All-reduce bus bandwidth, measured like nccl-tests' all_reduce_perf.

busbw = algbw * 2(n-1)/n is what a ring all-reduce actually moves per link, so it compares
against the hardware's link speed whatever the number of ranks.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist

from .devices import Env
from .metrics import Emitter

DTYPE = torch.float32


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Doubling message sizes from min to max, both included when max is on the ladder."""
    out = []
    size = min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= 2
    return out


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    return size_bytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw_gbps(algbw: float, world_size: int) -> float:
    return algbw * 2 * (world_size - 1) / world_size


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(args: argparse.Namespace, env: Env, device: torch.device, backend: str,
        emit: Emitter) -> int:
    emit.metric("start", mode="allreduce", world_size=env.world_size, backend=backend,
                device=str(device), local_rank=env.local_rank, dtype="float32",
                min_bytes=args.min_bytes, max_bytes=args.max_bytes, iters=args.iters,
                warmup_iters=args.warmup_iters)
    began = time.perf_counter()
    fence = torch.zeros(1, device=device)
    bus: list[float] = []
    for size in sizes(args.min_bytes, args.max_bytes):
        count = max(1, size // DTYPE.itemsize)
        buf = torch.zeros(count, dtype=DTYPE, device=device)
        for _ in range(args.warmup_iters):
            dist.all_reduce(buf)
        dist.all_reduce(fence)  # start the timed loop together
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(buf)
        _sync(device)
        seconds = (time.perf_counter() - t0) / args.iters
        nbytes = count * DTYPE.itemsize
        alg = algbw_gbps(nbytes, seconds)
        bus.append(busbw_gbps(alg, env.world_size))
        emit.metric("allreduce", size_bytes=nbytes, count=count, time_us=seconds * 1e6,
                    algbw_gbps=alg, busbw_gbps=bus[-1])
    emit.metric("summary", mode="allreduce", wall_time_s=time.perf_counter() - began,
                sizes=len(bus), avg_busbw_gbps=sum(bus) / len(bus) if bus else 0.0,
                max_busbw_gbps=max(bus, default=0.0))
    return 0
