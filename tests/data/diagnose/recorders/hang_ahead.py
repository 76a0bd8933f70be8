import time

import torch
import torch.distributed as dist
from common import init, metric

rank, world = init()
for step in range(6):
    if rank == 1 and step == 3:
        print("rank 1: loading shard 3 (slow disk)", flush=True)
        time.sleep(60)
    loss = 1.0 / (step + 1)
    metric(rank, step, loss)  # logged before the gradients are all-reduced
    t = torch.ones(4)
    dist.all_reduce(t)
    time.sleep(0.2)
