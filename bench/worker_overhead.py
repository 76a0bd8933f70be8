"""What the bundled worker's training step costs over a bare DDP loop.

Two gloo processes on CPU each build the worker's model twice from the same seed: one is
driven by the worker's own step (``Run.step_once``: test hooks, batching, grad clipping,
lr schedule), the other by the plain loop of the PyTorch DDP tutorial (zero_grad, forward,
loss, backward, step) on the very same batches, with the same AdamW settings. Short blocks
of steps alternate between the two (which goes first alternates too), and the result is the
median over rounds of worker-block / baseline-block time: pairing neighbouring blocks
cancels the slow swings of a shared, busy machine.

    python bench/worker_overhead.py            # prints: worker/baseline step time ratio
Target: ratio <= 1.05.
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ddptui_worker import optim
from ddptui_worker.cli import parse_args
from ddptui_worker.data import VOCAB
from ddptui_worker.devices import Env
from ddptui_worker.metrics import Emitter
from ddptui_worker.model import CharLM, lm_loss
from ddptui_worker.train import Run

WORLD = 2
TARGET = 1.05


def _bench(rank: int, port: int, opts: argparse.Namespace, out: mp.Queue) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    try:
        flags = ["--steps", str(10**6), "--no-resume", "--snapshot-every", "0",
                 "--corpus-bytes", "400000", *opts.worker_flags]
        args = parse_args(flags)
        env = Env(rank=rank, local_rank=rank, world_size=WORLD, local_world_size=WORLD,
                  attempt=0)
        run = Run(args, env, [], "gloo", Emitter(rank, 0, out=io.StringIO()),
                  threading.Event())
        torch.manual_seed(args.seed)
        base = CharLM(VOCAB, args.d_model, args.n_layers, args.n_heads, args.seq_len)
        base.load_state_dict(run.model.state_dict())
        ddp = DDP(base)
        opt, _ = optim.build(base, args.lr, args.weight_decay, 0, 1)
        batches = run.train.batches(0)

        def worker_block(start: int) -> float:
            t0 = time.perf_counter()
            for i in range(start, start + opts.block):
                run.step_once(batches[i])
            return (time.perf_counter() - t0) / opts.block

        def baseline_block(start: int) -> float:
            t0 = time.perf_counter()
            for i in range(start, start + opts.block):
                x, y = run.train.batch(batches[i])  # the same batches, built the same way
                opt.zero_grad()
                lm_loss(ddp(x), y).backward()
                opt.step()
            return (time.perf_counter() - t0) / opts.block

        worker_block(0), baseline_block(0)  # warm-up: allocator, gloo buffers
        w, b = [], []
        for r in range(opts.rounds):
            start = (r + 1) * opts.block % (len(batches) - opts.block)
            if r % 2:
                b.append(baseline_block(start))
                w.append(worker_block(start))
            else:
                w.append(worker_block(start))
                b.append(baseline_block(start))
        if rank == 0:
            ratios = [x / y for x, y in zip(w, b, strict=True)]
            out.put((statistics.median(w), statistics.median(b), statistics.median(ratios)))
    finally:
        dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--block", type=int, default=4, help="steps per timed block")
    p.add_argument("worker_flags", nargs=argparse.REMAINDER,
                   help="flags for the worker's model, e.g. -- --d-model 128")
    opts = p.parse_args()
    opts.worker_flags = [f for f in opts.worker_flags if f != "--"]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(_bench, args=(port, opts, out), nprocs=WORLD, start_method="spawn")
    worker, baseline, ratio = out.get()
    print(f"worker step {worker * 1e3:.2f} ms, DDP tutorial loop {baseline * 1e3:.2f} ms "
          f"(medians); worker/baseline ratio {ratio:.3f} (target <= {TARGET})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
