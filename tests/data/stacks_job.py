"""A synchronous loop on gloo whose ranks print their loss each step AFTER the step's
all_reduce, so the lines arrive together and reveal no straggler, and print no timing of
their own. With STACKS_SLOW=1, rank 1 works three times as long each step: only the ranks'
sampled stacks can name it. Without it, the same run, clean."""

import math
import os
import time

import torch
import torch.distributed as dist

STEPS = 240
WORK_S = 0.05  # a step's work: a sleep, so that 4 ranks on 2 loaded CPUs keep their pace


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    slow = os.environ.get("STACKS_SLOW") == "1" and rank == 1
    t = torch.zeros(1)
    for step in range(STEPS):
        time.sleep(WORK_S * (3 if slow else 1))
        t.fill_(4.0 * math.exp(-step / 60) + 1.5)
        dist.all_reduce(t)  # every rank waits here for the slowest
        print(f"step {step} loss {t.item() / dist.get_world_size():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
