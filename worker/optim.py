"""AdamW with linear warm-up then cosine decay, the usual recipe for small transformers."""

from __future__ import annotations

import math

import torch
from torch import nn

MIN_FACTOR = 0.1  # decay to a tenth of the peak, not to zero: the last steps still learn


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Multiplier of the peak lr for the step about to run (0-based)."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return MIN_FACTOR + (1.0 - MIN_FACTOR) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build(
    model: nn.Module, lr: float, weight_decay: float, warmup: int, total: int
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    # Decay matrices only: decaying norms and biases hurts small models for nothing.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.95),
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, warmup, total))
    return opt, sched
