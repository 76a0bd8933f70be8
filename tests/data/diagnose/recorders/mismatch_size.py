import torch
import torch.distributed as dist
from common import init, metric

rank, world = init(timeout=30)
for step in range(3):
    dist.all_reduce(torch.ones(1))
    metric(rank, step, 1.0)
# rank 2 reduces 1,000 elements where the others reduce 1 (no TORCH_DISTRIBUTED_DEBUG)
dist.all_reduce(torch.ones(1000 if rank == 2 else 1))
metric(rank, 3, 1.0)
