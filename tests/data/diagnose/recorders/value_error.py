import torch
import torch.distributed as dist
from common import init, metric

rank, world = init()
for step in range(3):
    t = torch.ones(4)
    dist.all_reduce(t)
    metric(rank, step, 1.0 / (step + 1))
if rank == 1:
    raise ValueError("batch 3 has 0 samples: check --data-dir on this node")
dist.all_reduce(torch.ones(4))
