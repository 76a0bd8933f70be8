"""A synchronous DDP loop on gloo whose every rank prints its loss each step, before the
step's all_reduce, as users' scripts do. With CURVES_FAULTS=1: rank 1 works three times as
long each step, rank 3's loss drifts away from step 40, rank 0 prints nan at step 50 and ten
times its level at step 70. Without it, the same run, clean."""

import math
import os
import random
import time

import torch
import torch.distributed as dist

STEPS = 90
WORK_S = 0.05  # a step's work: a sleep, so that 4 ranks on 2 loaded CPUs keep their pace


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    faults = os.environ.get("CURVES_FAULTS") == "1"
    rnd = random.Random(rank)
    t = torch.zeros(1)
    for step in range(STEPS):
        time.sleep(WORK_S * (3 if faults and rank == 1 else 1))
        loss = 4.0 * math.exp(-step / 60) + 1.5 + rnd.uniform(-0.03, 0.03)
        if faults and rank == 3 and step >= 40:
            loss += 0.5 + 0.03 * (step - 40)
        if faults and rank == 0 and step == 50:
            loss = float("nan")
        if faults and rank == 0 and step == 70:
            loss *= 10
        print(f"step {step} loss {loss:.4f}", flush=True)
        t.fill_(loss if math.isfinite(loss) else 0.0)
        dist.all_reduce(t)  # every rank waits here for the slowest
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
