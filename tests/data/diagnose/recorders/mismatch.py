import torch
import torch.distributed as dist
from common import init, metric

rank, world = init()
for step in range(3):
    dist.all_reduce(torch.ones(4))
    metric(rank, step, 1.0)
if rank == 0:
    dist.all_reduce(torch.ones(4))
else:
    dist.broadcast(torch.ones(4), src=0)
