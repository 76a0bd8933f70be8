"""Bytes and flags across the process group, without numpy.

torch's object collectives (``broadcast_object_list``, ``all_gather_object`` and the rest)
turn their received tensor back into bytes with ``tensor.numpy()``, and torch does not
require numpy: on a node without it every rank but the sender dies with "Numpy is not
available". These send a length, then the bytes as a uint8 tensor that shares memory with a
``bytearray`` (``torch.frombuffer``), so nothing but torch and the standard library is used.
Tensors go on ``device``: the process group's backend (NCCL) may only take GPU tensors.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def broadcast_bytes(data: bytes | None, device: torch.device, src: int = 0) -> bytes:
    """Rank ``src`` passes its bytes, every other rank ``None``; all get ``src``'s bytes."""
    sender = dist.get_rank() == src
    if sender and data is None:
        raise ValueError("the source rank must pass bytes")
    size = torch.tensor([len(data) if sender and data is not None else 0], dtype=torch.int64,
                        device=device)
    dist.broadcast(size, src=src)
    n = int(size.item())
    buf = bytearray(data) if sender and data is not None else bytearray(n)
    if n:
        host = torch.frombuffer(buf, dtype=torch.uint8)  # writes land in buf
        wire = host.to(device)  # the same tensor on CPU, a copy on a GPU
        dist.broadcast(wire, src=src)
        if wire is not host:
            host.copy_(wire)
    return bytes(buf)


def all_true(flag: bool, device: torch.device) -> bool:
    """True on every rank if ``flag`` is true on every rank."""
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())
