"""The job the dumps beside it were taken of: two gloo ranks, rank 1 doing 30 times the
others' work outside the collective; MODE=allreduce calls all_reduce itself, MODE=ddp
(the default) lets DDP's backward all-reduce the gradients."""

import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    mode = os.environ.get("MODE", "ddp")
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 256))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    x = torch.randn(64, 256)
    t0 = time.time()
    while time.time() - t0 < 40:
        for _ in range(30 if rank == 1 else 1):
            torch.randn(256, 256) @ torch.randn(256, 256)
        if mode == "ddp":
            ddp(x).sum().backward()
        else:
            dist.all_reduce(torch.ones(1000))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
