import ctypes

import torch
import torch.distributed as dist
from common import init

rank, world = init(timeout=30)
dist.all_reduce(torch.ones(4))
print(f"rank {rank} ready", flush=True)
if rank == 1:
    ctypes.string_at(0)
dist.all_reduce(torch.ones(4))
