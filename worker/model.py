"""A small decoder-only transformer, optionally split across a process's GPUs.

Splitting by layers (embedding on the first device, head on the last) is the simplest
model parallelism that lets one process span several GPUs; DDP then wraps the split module
with ``device_ids=None``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .devices import layer_devices


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        shape = (b, t, self.n_heads, c // self.n_heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        mlp: torch.Tensor = self.mlp(self.ln2(x))  # a Module's call is untyped
        return x + mlp


class CharLM(nn.Module):
    def __init__(
        self, vocab: int, d_model: int, n_layers: int, n_heads: int, seq_len: int,
        devices: list[torch.device] | None = None,
    ) -> None:
        super().__init__()
        devs = devices or [torch.device("cpu")]
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        self.layer_devs = [devs[i] for i in layer_devices(n_layers, len(devs))]
        self.first, self.last = devs[0], devs[-1]
        self.tok.to(self.first)
        self.pos.to(self.first)
        for block, dev in zip(self.blocks, self.layer_devs, strict=True):
            block.to(dev)
        self.ln.to(self.last)
        self.head.to(self.last)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        idx = idx.to(self.first, non_blocking=True)
        pos = torch.arange(idx.shape[1], device=self.first)
        x = self.tok(idx) + self.pos(pos)
        for block, dev in zip(self.blocks, self.layer_devs, strict=True):
            x = block(x.to(dev, non_blocking=True))
        logits: torch.Tensor = self.head(self.ln(x.to(self.last, non_blocking=True)))
        return logits


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    targets = targets.to(logits.device, non_blocking=True)
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
