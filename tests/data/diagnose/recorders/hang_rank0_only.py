import time

import torch
import torch.distributed as dist
from common import init

rank, world = init()
for step in range(6):
    if rank == 1 and step == 3:
        time.sleep(60)
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 0:
        print(f"step {step} done", flush=True)
    time.sleep(0.2)
