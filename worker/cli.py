"""The worker's flags.

Parsing never exits on its own: a bad flag raises :class:`UsageError`, so that only rank 0
says so (one line on stderr) while every other rank of the same torchrun exits silently.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

MODES = ("train", "allreduce")


class UsageError(Exception):
    """A problem the user can fix from the command line; exit code 2, no traceback."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        # Only --help reaches here; let it behave as usual.
        if message:
            self._print_message(message)
        raise SystemExit(status)


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="ddptui_worker",
        description="ddptui's bundled DDP worker: a tiny char-level LM, or an all-reduce test.",
        allow_abbrev=False,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("mode", nargs="?", default="train", metavar="{train,allreduce}",
                   help="train (default) or allreduce (bus-bandwidth self-test)")
    # torch.distributed.launch passes --local-rank=N (--local_rank before 2.0); LOCAL_RANK
    # in the environment wins when both are present.
    p.add_argument("--local-rank", "--local_rank", dest="local_rank", type=int, default=None,
                   help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=1234, help="seed for init and data order")

    g = p.add_argument_group("train")
    g.add_argument("--data", default=None,
                   help="text file to train on; None: the standard library's *.py sources")
    g.add_argument("--corpus-bytes", type=_positive, default=2_000_000,
                   help="at most this many bytes of text are used")
    g.add_argument("--eval-fraction", type=float, default=0.1,
                   help="tail of the text held out for eval loss")
    g.add_argument("--d-model", type=_positive, default=64, help="transformer width")
    g.add_argument("--n-layers", type=_positive, default=2, help="transformer blocks")
    g.add_argument("--n-heads", type=_positive, default=4, help="attention heads")
    g.add_argument("--seq-len", type=_positive, default=64, help="context, in bytes")
    g.add_argument("--batch-size", type=_positive, default=16, help="per rank")
    g.add_argument("--steps", type=_positive, default=600, help="total optimizer steps")
    g.add_argument("--epochs", type=_positive, default=1000, help="upper bound on epochs")
    g.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    g.add_argument("--weight-decay", type=float, default=0.01, help="AdamW, matrices only")
    g.add_argument("--warmup-steps", type=_non_negative, default=30,
                   help="linear lr warm-up, then cosine decay to 10%%")
    g.add_argument("--grad-clip", type=float, default=1.0, help="max grad norm, 0: off")
    g.add_argument("--log-every", type=_positive, default=10, help="steps per metric line")
    g.add_argument("--eval-every", type=_positive, default=50, help="steps per eval line")
    g.add_argument("--eval-batches", type=_positive, default=4, help="per rank and eval")
    g.add_argument("--snapshot-every", type=_non_negative, default=50, help="0: never")
    g.add_argument("--snapshot-dir", default="ckpt", help="relative to the working directory")
    g.add_argument("--no-resume", action="store_true",
                   help="ignore snapshots already in --snapshot-dir, on every restart too")
    g.add_argument("--fresh", action="store_true",
                   help="start again from step 0: remove the snapshots an earlier run left in "
                        "--snapshot-dir (restarts of this run still resume from its own)")
    g.add_argument("--stop-check-every", type=_positive, default=10,
                   help="steps between the ranks' agreement on a SIGTERM (then all stop at "
                        "the same step); 1 reacts fastest, at one tiny all-reduce per step")
    g.add_argument("--local-world-size", type=_positive, default=None,
                   help="processes on this node (default: $LOCAL_WORLD_SIZE); fewer than "
                        "GPUs makes each process span several GPUs")

    a = p.add_argument_group("allreduce")
    a.add_argument("--min-bytes", type=_positive, default=1024, help="smallest message")
    a.add_argument("--max-bytes", type=_positive, default=16 * 1024 * 1024,
                   help="largest message; sizes double from --min-bytes")
    a.add_argument("--iters", type=_positive, default=20, help="timed all-reduces per size")
    a.add_argument("--warmup-iters", type=_non_negative, default=5,
                   help="untimed all-reduces per size")

    t = p.add_argument_group("test hooks")
    t.add_argument("--crash-rank", type=int, default=None, help="global rank to crash")
    t.add_argument("--crash-step", type=int, default=None,
                   help="raise at this step (first attempt only)")
    t.add_argument("--hang-rank", type=int, default=None, help="global rank to hang")
    t.add_argument("--hang-step", type=int, default=None, help="sleep forever at this step")
    t.add_argument("--slow-rank", type=int, default=None, help="global rank to slow down")
    t.add_argument("--slow-ms", type=_non_negative, default=0, help="extra ms per step")
    t.add_argument("--step-sleep-ms", type=_non_negative, default=0, help="all ranks, per step")
    t.add_argument("--resumed-step-sleep-ms", type=_non_negative, default=None,
                   help="all ranks, per step, once resumed from a snapshot (default: "
                        "--step-sleep-ms): a first try slow enough to meet its time limit, "
                        "and a resumed one that ends")
    t.add_argument("--number-lines", action="store_true",
                   help="per-rank sequence number on every stdout line")
    t.add_argument("--print-every-step", action="store_true",
                   help="one plain stdout line per step")
    return p


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    # Unknown flags first: "--bogus 1" should name --bogus, not complain about mode "1".
    args, unknown = build_parser().parse_known_args(list(argv))
    if unknown:
        raise UsageError(f"unrecognized arguments: {' '.join(unknown)}")
    if args.mode not in MODES:
        raise UsageError(f"unknown mode {args.mode!r} (choose from {', '.join(MODES)})")
    if args.d_model % args.n_heads:
        raise UsageError(f"--d-model {args.d_model} is not divisible by --n-heads {args.n_heads}")
    if args.min_bytes > args.max_bytes:
        raise UsageError(f"--min-bytes {args.min_bytes} exceeds --max-bytes {args.max_bytes}")
    if not 0.0 < args.eval_fraction < 1.0:
        raise UsageError(f"--eval-fraction must be in (0, 1), got {args.eval_fraction}")
    for hook in ("crash", "hang"):
        if (getattr(args, f"{hook}_rank") is None) != (getattr(args, f"{hook}_step") is None):
            raise UsageError(f"--{hook}-rank and --{hook}-step go together")
    return args
