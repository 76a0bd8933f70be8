"""One node's sync over its existing connection: ask what it has, stream what it lacks.

Two commands, whatever the project's size: the query (does the node hold this digest, and if
not, the manifest of its newest tree) and the push (a header, then every missing file's
bytes back to back on the command's stdin; see :mod:`ddptui.sync.remote`). Per-file SFTP
puts would cost a round trip each, seconds for a few thousand files on a far node.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ddptui.events import JSON
from ddptui.run_notes import SyncStats
from ddptui.sync.manifest import (
    Entry,
    Manifest,
    PushPlan,
    done_text,
    plan_push,
    progress_text,
    stats,
)
from ddptui.sync.walk import ProjectError, Walked
from ddptui.transport.base import Transport

_CHUNK = 256 << 10
#: How often the progress detail may change (the faces show every change).
PROGRESS_EVERY_S = 0.5
#: How long the node's program may take to say what it has.
ANSWER_TIMEOUT_S = 60.0


class SyncError(Exception):
    """A node could not take the code; ``str()`` names the node and says why."""


@dataclass
class Plans:
    """Push plans shared by the nodes of one launch: nodes that answer alike (usually all of
    them, holding the same previous tree) cost one diff and one header, not one each."""

    _made: dict[tuple[str, int], tuple[PushPlan, bytes]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, answer_text: str, answer: dict[str, JSON], manifest: Manifest
            ) -> tuple[PushPlan, bytes]:
        key = (answer_text, len(answer_text))
        with self._lock:
            if key not in self._made:
                m, base = answer.get("manifest"), answer.get("base")
                entries = m.get("entries") if isinstance(m, dict) else None
                have = (Manifest.of(Entry.from_list(e) for e in entries)
                        if isinstance(entries, list) else None)
                plan = plan_push(manifest, have)
                header = json.dumps(plan.header(manifest, base if isinstance(base, str) else None),
                                    separators=(",", ":")) + "\n"
                self._made[key] = (plan, header.encode())
            return self._made[key]


def _last_json(stdout: str) -> dict[str, JSON] | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict):
            return d
    return None


def _answer(buf: bytes | str) -> tuple[str, dict[str, JSON]] | None:
    """The node's first word, as text and parsed; whole lines only, and any line a login
    script printed before it is passed over."""
    text = buf.decode("utf-8", "replace") if isinstance(buf, bytes) else buf
    for line in text.split("\n")[:-1]:
        if line.startswith('{"have"'):
            d = _last_json(line)
            if d is not None:
                return line, d
    return None


def _chunks(header: bytes, plan: PushPlan, walked: Walked, local_root: str,
            progress: Callable[[int, int], None]) -> Iterator[bytes]:
    """The push's stdin. A file touched since it was hashed is hashed again as it is sent:
    a log that only grew (one being written in the project, say) ships as it was when
    hashed; any other change ends the push, since the bytes would not be what the manifest
    promises."""
    yield header
    sent = 0
    for i, e in enumerate(plan.send):
        path = os.path.join(local_root, e.path)
        st = os.stat(path)
        check = (hashlib.sha256() if (st.st_size, st.st_mtime_ns) != walked.stamps.get(e.path)
                 else None)
        left = e.size
        with open(path, "rb") as fh:
            while left:
                chunk = fh.read(min(_CHUNK, left))
                if not chunk:
                    raise ProjectError(f"{e.path} shrank while the project was being sent; "
                                       "launch again")
                if check is not None:
                    check.update(chunk)
                left -= len(chunk)
                sent += len(chunk)
                yield chunk
                progress(i, sent)
        if check is not None and check.hexdigest() != e.sha256:
            raise ProjectError(f"{e.path} changed while the project was being sent; "
                               "launch again")
        progress(i + 1, sent)


def sync_node(node: str, transport: Transport, command: str, walked: Walked,
              local_root: str, on_progress: Callable[[str], None],
              plans: Plans | None = None) -> SyncStats:
    """Put the project's tree on the node under its digest; return the counts for run.json.

    One conversation on one channel (``command``: :data:`ddptui.sync.remote.SYNC_SRC`): the
    node's answer arrives while stdin waits, then the header and the missing bytes follow.
    ``plans``: shared by every node of one launch."""
    t0 = time.monotonic()
    manifest = walked.manifest
    digest = manifest.digest()
    plans = plans or Plans()
    out = bytearray()
    answered = threading.Event()
    last = [0.0]

    def on_output(data: bytes, is_err: bool) -> None:
        if not is_err and not answered.is_set():
            out.extend(data)
            if b"\n" in data and _answer(bytes(out)) is not None:
                answered.set()

    def feed() -> Iterator[bytes]:
        deadline = t0 + ANSWER_TIMEOUT_S
        while not answered.is_set():
            if time.monotonic() > deadline:
                return  # stdin closes: the node's program ends without writing anything
            yield b""  # lets the transport read the answer between chunks
            answered.wait(0.002)
        first, answer = _answer(bytes(out)) or ("", {"have": True})
        if answer.get("have"):
            return
        plan, header = plans.get(first, answer, manifest)
        total = len(plan.send)

        def counted(files_done: int, sent: int) -> None:
            now = time.monotonic()
            if now - last[0] >= PROGRESS_EVERY_S:
                last[0] = now
                on_progress(progress_text(files_done, total, sent, now - t0))

        yield from _chunks(header, plan, walked, local_root, counted)

    res = transport.run_stream(command, timeout=120 + manifest.total_bytes / 1e6,
                               stdin=feed(), on_output=on_output)
    found = _answer(res.stdout)
    if found is None:
        raise SyncError(f"node {node}: could not read its code cache (exit code "
                        f"{res.exit_code}): {(res.stderr.strip() or res.stdout.strip())[-500:]}")
    first, answer = found
    plan, _ = plans.get(first, answer, manifest)
    cached = bool(answer.get("have"))
    if res.exit_code != 0 or not (cached or (_last_json(res.stdout) or {}).get("ok")):
        said = (res.stderr.strip() or res.stdout.strip()).splitlines()
        own = [ln for ln in said if ln.startswith("ddptui sync: ")]
        why = own[-1].removeprefix("ddptui sync: ") if own else (
            f"exit code {res.exit_code}: {said[-1][-300:] if said else 'no output'}")
        raise SyncError(f"node {node}: the project's code could not be written there "
                        f"({why}). Check that the node's workdir exists and is writable "
                        "(`ddptui check` tests it).")
    seconds = time.monotonic() - t0
    on_progress(done_text(plan, seconds, cached=cached))
    return stats(plan, seconds, digest, cached=cached)
