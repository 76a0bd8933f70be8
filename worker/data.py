"""Training text and how it is cut into per-rank batches.

The default corpus is Python's own standard library source, so the demo needs no download
and no data file on any node. Only rank 0 reads it and broadcasts the bytes: nodes with
different Python versions would otherwise train on different text.
"""

from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from torch.utils.data import Dataset, DistributedSampler

VOCAB = 256  # bytes: character-level for ASCII text, and no vocabulary to agree on


class DataError(Exception):
    """The data cannot serve this run (missing file, too little text for the world)."""


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(root.glob("*.py"))  # sorted: the same text on every run


def stdlib_text(limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    for path in stdlib_files():
        if size >= limit:
            break
        try:
            chunk = path.read_bytes()
        except OSError:
            continue
        parts.append(chunk)
        size += len(chunk)
    if not parts:
        raise DataError("no Python standard library sources found here; pass --data FILE")
    return b"".join(parts)[:limit]


def read_corpus(path: str | None, limit: int) -> bytes:
    if path is None:
        return stdlib_text(limit)
    try:
        with open(path, "rb") as f:
            data = f.read(limit)
    except FileNotFoundError:
        raise DataError(f"data file not found: {path}") from None
    except OSError as e:
        raise DataError(f"cannot read data file {path}: {e.strerror}") from None
    if not data:
        raise DataError(f"data file is empty: {path}")
    return data


def to_tokens(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def split(tokens: torch.Tensor, eval_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Train on the head, evaluate on the tail: held-out text the model never sees."""
    cut = int(len(tokens) * (1.0 - eval_fraction))
    return tokens[:cut], tokens[cut:]


def n_windows(n_tokens: int, seq_len: int) -> int:
    """Non-overlapping windows of seq_len inputs (+1 target each)."""
    return max(0, (n_tokens - 1) // seq_len)


@dataclass(frozen=True, slots=True)
class Shards:
    """One rank's view of a token stream: which windows, in which order, each epoch."""

    tokens: torch.Tensor
    seq_len: int
    batch_size: int
    rank: int
    world_size: int
    seed: int
    shuffle: bool = True

    @property
    def windows(self) -> int:
        return n_windows(len(self.tokens), self.seq_len)

    @property
    def steps_per_epoch(self) -> int:
        return self.windows // self.world_size // self.batch_size

    def batches(self, epoch: int) -> list[list[int]]:
        # the sampler only needs the length: window indices stand in for a dataset
        windows = cast("Dataset[int]", range(self.windows))
        sampler: DistributedSampler[int] = DistributedSampler(
            windows, num_replicas=self.world_size, rank=self.rank,
            shuffle=self.shuffle, seed=self.seed, drop_last=True,
        )
        sampler.set_epoch(epoch)
        order = list(sampler)
        b = self.batch_size
        return [order[i:i + b] for i in range(0, self.steps_per_epoch * b, b)]

    def batch(self, windows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.tensor(windows, dtype=torch.long) * self.seq_len
        idx = starts[:, None] + torch.arange(self.seq_len + 1)
        chunk = self.tokens[idx]
        return chunk[:, :-1], chunk[:, 1:]


def check_fits(train: Shards, held_out: Shards) -> None:
    if train.steps_per_epoch == 0 or held_out.steps_per_epoch == 0:
        raise DataError(
            f"world size {train.world_size} is larger than the data: "
            f"{train.windows} train / {held_out.windows} eval windows of {train.seq_len} "
            f"tokens, each rank needs at least --batch-size {train.batch_size} of each"
        )
