"""The training loop: data, DDP model, optimizer, snapshots, metrics.

Only step boundaries are consistent states, so a SIGTERM only sets a flag; the ranks agree
on it at a step boundary (:mod:`.stop`), rank 0 writes its snapshot, and every rank leaves
the loop at the same step.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from . import bytecast, optim, snapshot
from .data import VOCAB, DataError, Shards, check_fits, read_corpus, split, to_tokens
from .devices import Env, ddp_device_ids, devices_for
from .faults import Faults
from .metrics import Emitter
from .model import CharLM, lm_loss, param_count
from .stop import StopFlag, StopVote

STOPPED_EXIT = 128 + 15  # what a shell reports for SIGTERM: the run did not finish
MODEL_FLAGS = ("d_model", "n_layers", "n_heads", "seq_len")


def autocast_for(device: torch.device) -> Callable[[], contextlib.AbstractContextManager[None]]:
    if device.type == "cuda":
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


def train_step(
    model: nn.Module, opt: torch.optim.Optimizer, sched: torch.optim.lr_scheduler.LRScheduler,
    x: torch.Tensor, y: torch.Tensor, grad_clip: float,
    amp: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
    fence: Callable[[], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One optimizer step; returns tensors (no .item()) so a GPU never waits on the host.
    ``fence``, between the forward and the backward, is where the step's timing is taken."""
    opt.zero_grad(set_to_none=True)
    with amp():
        loss = lm_loss(model(x), y)
    if fence is not None:
        fence()
    torch.autograd.backward(loss)  # loss.backward(), which torch leaves untyped
    norm = nn.utils.clip_grad_norm_(model.parameters(), grad_clip) if grad_clip > 0 else None
    opt.step()
    sched.step()
    return loss.detach(), norm


def load_corpus(args: argparse.Namespace, env: Env,
                device: torch.device | None = None) -> torch.Tensor:
    """Rank 0 reads, everyone receives: one text for the whole job, errors on every rank."""
    message = b""  # b"D" + the corpus, or b"E" + the error
    if env.rank == 0:
        try:
            message = b"D" + read_corpus(args.data, args.corpus_bytes)
        except DataError as e:
            message = b"E" + str(e).encode()
    if env.world_size > 1:
        device = device or torch.device("cpu")
        message = bytecast.broadcast_bytes(message if env.rank == 0 else None, device)
    if message[:1] != b"D":
        raise DataError(message[1:].decode(errors="replace"))
    return to_tokens(message[1:])


@torch.no_grad()
def evaluate(model: nn.Module, shards: Shards, n_batches: int, world_size: int,
             amp: Callable[[], contextlib.AbstractContextManager[None]]) -> float:
    model.eval()
    losses = []
    for windows in shards.batches(0)[:n_batches]:
        x, y = shards.batch(windows)
        with amp():
            losses.append(lm_loss(model(x), y))
    model.train()
    mean = torch.stack(losses).mean()
    if world_size > 1:
        dist.all_reduce(mean)
        mean /= world_size
    return float(mean)


class StepTiming:
    """Each rank's own share of a logged step: ``compute_ms``, its work from the step's start
    to the forward's end, and ``wait_ms``, the time it then waits in a one-element all_reduce
    for the others (DDP's own all-reduces run inside the backward, mixed with its compute).
    The rank the others wait for waits least: ddptui names it (``docs/metrics.md``). The
    fence costs one tiny collective (and on a GPU two synchronizations) per logged step."""

    def __init__(self, on: bool, device: torch.device) -> None:
        self.on = on
        self._buf = torch.zeros(1, device=device)
        self._gpu = device.type == "cuda"
        self._t0 = 0.0
        self._took: dict[str, float] = {}

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def fence(self) -> None:
        self._sync()
        t = time.perf_counter()
        dist.all_reduce(self._buf)
        self._sync()
        self._took = {"compute_ms": 1000 * (t - self._t0),
                      "wait_ms": 1000 * (time.perf_counter() - t)}

    def _sync(self) -> None:
        if self._gpu:  # the GPU's queued work is the step's too
            torch.cuda.synchronize()

    def take(self) -> dict[str, float]:
        """The last timed step's figures, once."""
        took, self._took = self._took, {}
        return took


class Run:
    """State of one attempt: built once, then driven by :meth:`loop`."""

    def __init__(self, args: argparse.Namespace, env: Env, ids: list[int], backend: str,
                 emit: Emitter, stop: StopFlag) -> None:
        self.args, self.env, self.emit, self.stop = args, env, emit, stop
        self.vote = StopVote(stop, env.world_size, args.stop_check_every)
        self.backend = backend
        self.devices = devices_for(ids)
        self.device = self.devices[0]
        self.amp = autocast_for(self.device)
        train_tokens, eval_tokens = split(load_corpus(args, env, self.device),
                                           args.eval_fraction)
        common = dict(seq_len=args.seq_len, batch_size=args.batch_size, rank=env.rank,
                      world_size=env.world_size, seed=args.seed)
        self.train = Shards(train_tokens, shuffle=True, **common)
        self.held_out = Shards(eval_tokens, shuffle=False, **common)
        check_fits(self.train, self.held_out)
        torch.manual_seed(args.seed)
        self.model = CharLM(VOCAB, args.d_model, args.n_layers, args.n_heads, args.seq_len,
                            self.devices)
        self.ddp = DDP(self.model, device_ids=ddp_device_ids(ids))
        self.opt, self.sched = optim.build(self.model, args.lr, args.weight_decay,
                                           args.warmup_steps, args.steps)
        self.faults = Faults(env.rank, env.attempt, args.crash_rank, args.crash_step,
                             args.hang_rank, args.hang_step, args.slow_rank, args.slow_ms,
                             args.step_sleep_ms)
        self.snap_dir = Path(args.snapshot_dir)
        self.step = 0
        self.resumed_from: str | None = None
        self.timing = StepTiming(env.world_size > 1, self.device)

    # -- snapshots ---------------------------------------------------------------------
    def config(self) -> dict[str, int]:
        return {k: int(getattr(self.args, k)) for k in MODEL_FLAGS}

    def consistent(self) -> bool:
        """False only if a step failed between optimizer and scheduler: never save that.

        A step that fails in forward or backward (a peer died mid all-reduce) has not
        touched parameters or optimizer yet, so the state of ``self.step`` still holds.
        """
        return self.sched.last_epoch == self.step

    def state(self) -> snapshot.Snapshot:
        return {
            "step": self.step,
            "epoch": self.step // self.train.steps_per_epoch,
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict(),
            "rng": snapshot.rng_state(),
            "config": self.config(),
            "world_size": self.env.world_size,
        }

    def save(self) -> Path | None:
        if self.env.rank != 0 or not self.consistent():
            return None
        path = snapshot.save(self.snap_dir, self.step, self.state())
        self.emit.metric("snapshot", step=self.step, path=str(path))
        return path

    def resume(self) -> None:
        """Every rank continues from rank 0's newest snapshot.

        Ranks that see the file (same node, or a shared disk) load it themselves with their
        own map_location; if any cannot, rank 0 sends its copy over the process group.
        """
        if self.args.no_resume:
            return
        if self.args.fresh and self.env.attempt == 0:
            # Only rank 0 looks for a snapshot (below): removing its copies is enough.
            if self.env.rank == 0 and (gone := snapshot.remove_all(self.snap_dir)):
                self.emit.line(f"--fresh: removed {gone} snapshot(s) of an earlier run from "
                               f"{self.snap_dir}")
            return
        name = b""
        if self.env.rank == 0 and (newest := snapshot.newest(self.snap_dir)) is not None:
            name = newest.name.encode()
        multi = self.env.world_size > 1
        if multi:
            name = bytecast.broadcast_bytes(name if self.env.rank == 0 else None, self.device)
        if not name:
            return
        path = self.snap_dir / name.decode()
        state = snapshot.load(path, self.device) if path.exists() else None
        if multi and not bytecast.all_true(state is not None, self.device):
            # The file as written, not unpickled and pickled again: every receiver loads it
            # with weights_only as from disk. Empty if it vanished from rank 0 too.
            blob = b""
            if self.env.rank == 0:
                with contextlib.suppress(OSError):
                    blob = path.read_bytes()
            blob = bytecast.broadcast_bytes(blob if self.env.rank == 0 else None, self.device)
            if state is None and blob:
                state = snapshot.load_bytes(blob, self.device)
        if state is None:
            raise DataError(f"snapshot {path} vanished while resuming")
        if state.get("config") != self.config():
            if self.env.rank == 0:
                self.emit.line(f"ignoring snapshot {path}: made with other model flags")
            return
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        snapshot.set_rng_state(state["rng"])
        self.step = int(state["step"])
        self.resumed_from = str(path)
        if self.args.resumed_step_sleep_ms is not None:
            self.faults = dataclasses.replace(self.faults,
                                              step_sleep_ms=self.args.resumed_step_sleep_ms)
        if self.env.rank == 0:
            self.emit.line(self.resumed_line(path))

    def resumed_line(self, path: Path) -> str:
        """Says plainly what a resume means, so a second run in a folder is not a silent no-op."""
        total = self.args.steps
        epochs_done = self.step // self.train.steps_per_epoch >= self.args.epochs
        if self.step >= total or epochs_done:
            bound = (f"step {self.step} of {total}" if self.step >= total
                     else f"epoch {self.args.epochs} of {self.args.epochs}")
            return (f"resumed from snapshot {path}: the run in this folder is already complete "
                    f"({bound}), nothing to train; --fresh starts again from step 0")
        return f"resumed from snapshot {path} at step {self.step} of {total}"

    # -- the loop ----------------------------------------------------------------------
    def step_once(self, windows: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The per-step work of the loop, apart so bench/worker_overhead.py can time it."""
        self.timing.start()
        self.faults.before_step(self.step + 1)
        x, y = self.train.batch(windows)
        logged = (self.step + 1) % self.args.log_every == 0 or self.step + 1 == self.args.steps
        loss, norm = train_step(self.ddp, self.opt, self.sched, x, y, self.args.grad_clip,
                                self.amp, self.timing.fence if self.timing.on and logged
                                else None)
        self.step += 1
        self.vote.poll(self.step)
        return loss, norm

    def loop(self) -> int:
        args, emit = self.args, self.emit
        self.resume()
        emit.metric(
            "start", mode="train", world_size=self.env.world_size, backend=self.backend,
            device=str(self.device), devices=[str(d) for d in self.devices],
            local_rank=self.env.local_rank, params=param_count(self.model),
            torch=torch.__version__, steps=args.steps, start_step=self.step,
            resumed_from=self.resumed_from, batch_size=args.batch_size,
            seq_len=args.seq_len, steps_per_epoch=self.train.steps_per_epoch,
            train_tokens=len(self.train.tokens), eval_tokens=len(self.held_out.tokens),
        )
        spe = self.train.steps_per_epoch
        tokens_per_step = args.batch_size * args.seq_len
        began = time.perf_counter()
        first_step = self.step
        window_t0, window_n = began, 0
        loss_sum = torch.zeros((), device=self.model.last)
        last_loss: float | None = None
        eval_loss: float | None = None
        norm: torch.Tensor | None = None
        stopped = False
        try:
            while self.step < args.steps and self.step // spe < args.epochs and not stopped:
                epoch = self.step // spe
                for windows in self.train.batches(epoch)[self.step - epoch * spe:]:
                    loss, norm = self.step_once(windows)
                    loss_sum += loss
                    window_n += 1
                    if args.print_every_step:
                        emit.line(f"step {self.step} loss {float(loss):.4f}")
                    if self.step % args.log_every == 0 or self.step == args.steps:
                        last_loss = float(loss_sum) / window_n
                        dt = (time.perf_counter() - window_t0) / window_n
                        emit.metric(
                            "metric", step=self.step, epoch=epoch, loss=last_loss,
                            lr=float(self.sched.get_last_lr()[0]), step_time_s=dt,
                            samples_per_s=args.batch_size / dt, tokens_per_s=tokens_per_step / dt,
                            grad_norm=None if norm is None else float(norm),
                            **self.timing.take(),
                        )
                        loss_sum.zero_()
                        window_t0, window_n = time.perf_counter(), 0
                    if self.step % args.eval_every == 0 or self.step == args.steps:
                        t_eval = time.perf_counter()
                        eval_loss = evaluate(self.model, self.held_out, args.eval_batches,
                                             self.env.world_size, self.amp)
                        emit.metric("eval", step=self.step, epoch=epoch, eval_loss=eval_loss)
                        window_t0 += time.perf_counter() - t_eval  # eval time is not step time
                    if args.snapshot_every and self.step % args.snapshot_every == 0:
                        self.save()
                    if self.vote.agreed:
                        stopped = True
                        break
                    if self.step >= args.steps:
                        break
        except BaseException:
            if self.stop.is_set():  # killed mid-step by our own stop: keep what is whole
                self.save()
            raise
        self.vote.drain()
        wall = time.perf_counter() - began
        done = self.step - first_step
        if stopped:
            path = self.save()
            if self.stop.to_resume:
                saved = f"snapshot {path} saved" if path else "rank 0 saves the snapshot"
                emit.line(f"{self.stop.name} at step {self.step}: {saved}; leaving, to be "
                          "resumed from it")
            else:
                emit.line(f"stopped by SIGTERM at step {self.step}"
                          + (f", snapshot {path}" if path else ""))
        rate = done / wall if wall > 0 else 0.0
        emit.metric(
            "summary", mode="train", step=self.step, steps_run=done, wall_time_s=wall,
            loss=last_loss, eval_loss=eval_loss, stopped=stopped,
            samples_per_s=rate * args.batch_size, tokens_per_s=rate * tokens_per_step,
            global_samples_per_s=rate * args.batch_size * self.env.world_size,
        )
        return STOPPED_EXIT if stopped and not self.stop.to_resume else 0


def run(args: argparse.Namespace, env: Env, ids: list[int], backend: str, emit: Emitter,
        stop: StopFlag) -> int:
    return Run(args, env, ids, backend, emit, stop).loop()
