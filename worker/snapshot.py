"""Snapshots that survive a crash mid-write, and finding the newest one after a restart.

Written to a temporary file and renamed with ``os.replace``: a reader (the restarted
workers) sees either the old complete snapshot or the new complete one, never half a file.
"""

from __future__ import annotations

import io
import os
import random
import re
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import torch

_NAME_RE = re.compile(r"^snapshot-(\d+)\.pt$")
KEEP = 2


def path_for(directory: Path, step: int) -> Path:
    return directory / f"snapshot-{step:08d}.pt"


def step_of(path: Path) -> int | None:
    m = _NAME_RE.match(path.name)
    return int(m.group(1)) if m else None


def newest(directory: Path) -> Path | None:
    if not directory.is_dir():
        return None
    found = [(s, p) for p in directory.iterdir() if (s := step_of(p)) is not None]
    return max(found)[1] if found else None


def remove_all(directory: Path) -> int:
    """Remove every snapshot in ``directory`` (``--fresh``); other files stay. Returns how many."""
    if not directory.is_dir():
        return 0
    gone = [p for p in directory.iterdir() if step_of(p) is not None]
    for p in gone:
        p.unlink(missing_ok=True)
    return len(gone)


class RngState(TypedDict):
    """Every generator a step draws from, for a resumed run to draw what it would have."""

    torch: torch.Tensor
    python: tuple[object, ...]  # random.getstate(); lists in place of tuples once loaded
    cuda: NotRequired[list[torch.Tensor]]


class Snapshot(TypedDict):
    """What a snapshot file holds; the optimizer's and scheduler's states are torch's own
    dictionaries (``dict[str, Any]`` in torch's typing)."""

    step: int
    epoch: int
    model: dict[str, Any]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: RngState
    config: dict[str, int]
    world_size: int


def rng_state() -> RngState:
    state: RngState = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: RngState) -> None:
    # map_location may have moved the byte tensors onto a GPU; the setters want CPU ones.
    torch.set_rng_state(state["torch"].cpu())
    random.setstate(tuple(_as_tuple(v) for v in state["python"]))
    if "cuda" in state and torch.cuda.is_available():
        cuda = [s.cpu() for s in state["cuda"]]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)


def _as_tuple(value: object) -> object:
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list | tuple) else value


def save(directory: Path, step: int, state: Snapshot, keep: int = KEEP) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    final = path_for(directory, step)
    tmp = directory / f".{final.name}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    old = sorted(p for p in directory.iterdir() if step_of(p) is not None)
    for p in old[:-keep]:
        p.unlink(missing_ok=True)
    return final


def load(path: Path, map_location: torch.device | str) -> Snapshot:
    state: Snapshot = torch.load(path, map_location=map_location, weights_only=True)
    return state


def load_bytes(blob: bytes, map_location: torch.device | str) -> Snapshot:
    """A snapshot file's bytes received from another rank, loaded as :func:`load` would."""
    state: Snapshot = torch.load(io.BytesIO(blob), map_location=map_location,
                                 weights_only=True)
    return state
