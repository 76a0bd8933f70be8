import torch
import torch.distributed as dist
from common import init

rank, world = init(30)
dist.all_reduce(torch.ones(4))
shard = f"data/shard-{rank}.bin"
if rank == 0:
    import os
    os.makedirs("data", exist_ok=True)
    open(shard, "wb").close()
with open(shard, "rb") as f:  # rank 1's shard was never copied to this node
    f.read()
dist.all_reduce(torch.ones(4))
