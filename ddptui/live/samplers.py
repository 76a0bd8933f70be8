"""Each node's telemetry sampler, from this side: started with the run on the node's own
connection, its output read and parsed, kept alive by a heartbeat, ended with the run.

The sampler runs detached on the node, as ``launch.sh`` does, and writes to files in the
node dir; one thread per node reads them by byte offset through the transport's
``read_from``, as the log follower reads ``node.log``. So it needs no channel of its own and
survives a dropped connection. What it cannot survive is ddptui going away for good: it exits
when its heartbeat file goes untouched (see :mod:`ddptui.telemetry.sampler`), and with the
run's process group. Stop, the run's end and detach also end it explicitly, and wait until
it is gone. Attach starts a fresh one.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable

from ddptui.config import HostsConfig
from ddptui.events import Event, Level
from ddptui.ingest import split_complete
from ddptui.live.stack_sampler import StackSampler
from ddptui.remote.reach import failures, map_at_once
from ddptui.store import rundir
from ddptui.telemetry import sampler
from ddptui.telemetry.parse import SamplerParser
from ddptui.telemetry.sample import NodeSample
from ddptui.transport.base import Transport, TransportError

FILES = sampler.SamplerFiles(rundir.SAMPLER_SCRIPT, rundir.SAMPLER_PID, rundir.SAMPLER_BEAT,
                             rundir.SAMPLER_OUT)
CHUNK = 1 << 18
#: A sampler that lost its heartbeat (ddptui was suspended, the link was down) is started
#: again, but not more often than this.
RESTART_AFTER_S = 10.0
#: A started sampler that wrote nothing for this long is started again (it was killed, or
#: ddptui fell a whole segment behind it).
SILENT_S = 20.0
#: Attempts to start a sampler (the connection may be down a while) before giving up.
START_TRIES = 5


class NodeSampler(threading.Thread):
    """One node's sampler: starts it, reads it, beats for it; :meth:`end` ends it."""

    def __init__(self, *, node: str, transport: Callable[[], Transport | None], node_dir: str,
                 run_id: str, pgid: int | None, path: str | None,
                 publish: Callable[[list[NodeSample]], None],
                 note: Callable[[str, Level], None], poll: float = 1.0,
                 beat_timeout: int = sampler.BEAT_TIMEOUT_S,
                 segment_lines: int = sampler.SEGMENT_LINES) -> None:
        super().__init__(name=f"telemetry-{node}", daemon=True)
        self.node = node
        self.transport = transport
        self.node_dir = node_dir
        self.run_id, self.pgid, self.path = run_id, pgid, path
        self.publish, self.note = publish, note
        self.poll, self.beat_timeout, self.segment_lines = poll, beat_timeout, segment_lines
        self.halt = threading.Event()
        self.parser = SamplerParser(node)
        self._segment = 0
        self._offset = 0
        self._buf = b""
        self._beats = 0
        self._next_beat = 0.0
        self._started_at = 0.0
        self._heard = 0.0  # when the sampler's output last grew

    def _t(self) -> Transport:
        t = self.transport()
        if t is None:
            raise TransportError(self.node, f"node {self.node}: not connected")
        return t

    def _in_dir(self, name: str) -> str:
        return rundir.in_node_dir(self.node_dir, name)

    def start_remote(self) -> None:
        """(Re)start the sampler: a previous one in this node dir is ended first."""
        t = self._t()
        t.put_bytes(sampler.script(FILES).encode(), self._in_dir(FILES.script))
        self._beat(t)
        res = t.run(sampler.start_cmd(self.node_dir, FILES, self.pgid, self.run_id,
                                      path=self.path, beat_timeout=self.beat_timeout,
                                      segment_lines=self.segment_lines), timeout=30)
        if "started" not in res.stdout:
            raise TransportError(self.node, f"node {self.node}: the telemetry sampler did not "
                                            f"start: {res.stderr.strip() or res.stdout.strip()}")
        self.parser = SamplerParser(self.node)
        self._segment, self._offset, self._buf = 0, 0, b""
        self._started_at = self._heard = time.monotonic()

    def _beat(self, t: Transport) -> None:
        self._beats += 1
        t.put_bytes(f"{self._beats}\n".encode(), self._in_dir(FILES.beat))
        self._next_beat = time.monotonic() + sampler.BEAT_EVERY_S

    def _read(self, t: Transport) -> bool:
        """Parse what is new; True when anything arrived."""
        try:
            data = t.read_from(self._in_dir(FILES.out.format(self._segment % 2)),
                               self._offset + len(self._buf), CHUNK)
        except FileNotFoundError:
            return False
        if not data:
            return False
        self._heard = time.monotonic()
        complete, self._buf = split_complete(self._buf + data)
        self._offset += len(complete)
        samples: list[NodeSample] = []
        now = time.time()
        for line in complete.decode("utf-8", "replace").splitlines():
            if line == "@next":  # the last line of a segment: go on in the other one
                self._segment, self._offset, self._buf = self._segment + 1, 0, b""
                break
            samples.extend(self.parser.feed(line, now))
        if samples:
            self.publish(samples)
        return True

    def run(self) -> None:
        try:
            self._sample()
        except Exception as e:  # a bug must not vanish with the thread: the run goes on
            self.note(f"ddptui stopped reading this node's telemetry: {e!r}", Level.WARNING)

    def _sample(self) -> None:
        started, failed_starts = False, 0
        while not self.halt.is_set():
            try:
                t = self._t()
                if not started:
                    self.start_remote()
                    started, failed_starts = True, 0
                if time.monotonic() >= self._next_beat:
                    self._beat(t)
                while self._read(t) and not self.halt.is_set():
                    pass
                if self.parser.ended:
                    if not self._ended():
                        return
                    started = False
                elif time.monotonic() - self._heard > SILENT_S:
                    self.note(f"telemetry sampler silent for {SILENT_S:.0f} s; starting it "
                              "again", Level.INFO)
                    started = False
            except (TransportError, OSError, EOFError) as e:
                if not started:
                    failed_starts += 1
                    if failed_starts == START_TRIES:
                        self.note(f"telemetry: {e}; no telemetry from this node", Level.WARNING)
                        return
                if self.halt.wait(2.0):
                    return
                continue
            self.halt.wait(self.poll)

    def _ended(self) -> bool:
        """The sampler exited by itself: True to start it again (it lost its heartbeat while
        ddptui is here), False when the run's processes are gone."""
        why, self.parser.ended = self.parser.ended, ""
        if not why.startswith("no heartbeat"):
            return False
        self.note(f"telemetry sampler stopped ({why}); starting it again", Level.INFO)
        wait = RESTART_AFTER_S - (time.monotonic() - self._started_at)
        return not self.halt.wait(max(0.0, wait))

    def end(self, timeout: float = 10.0, *, remote: bool = True) -> None:
        """Stop reading, then (``remote``) end the sampler on the node and wait until it is
        gone. A thread stuck on a dead connection is not waited for: it reads nothing more."""
        self.halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(2.0)
        t = self.transport()
        if remote and t is not None:
            t.run(sampler.stop_cmd(self.node_dir, FILES), timeout=timeout)
            if self.is_alive() and threading.current_thread() is not self:
                self.join(timeout)  # a start in flight (a loaded node) ends what it started
                if not self.is_alive():  # after the stop above: end that one as well
                    t.run(sampler.stop_cmd(self.node_dir, FILES), timeout=timeout)


class Samplers:
    """The run's samplers, one per node; the session starts and ends them."""

    def __init__(self) -> None:
        self.by_node: dict[str, NodeSampler] = {}
        self.stacks: StackSampler | None = None  # the ranks' sampled stacks, every node at once

    def start(self, config: HostsConfig, run_id: str, *,
              transport: Callable[[str], Transport | None], node_dir: Callable[[str], str],
              pgid: Callable[[str], int | None], publish: Callable[[str, list[Event]], None],
              note: Callable[[str, str, Level], None]) -> None:
        """One sampler per node of ``config``, and the ranks' stacks sampled on all of them;
        ``note`` must mask (an error may quote a command)."""
        if self.stacks is None and config.health.stack_sample_every > 0:
            self.stacks = StackSampler(config, run_id, transport, publish, note)
            self.stacks.start()
        if self.by_node or not config.health.telemetry:
            return
        for node in config.nodes:
            name = node.name

            def publish_node(samples: list[NodeSample], name: str = name) -> None:
                publish(name, list(samples))

            def note_node(text: str, level: Level, name: str = name) -> None:
                note(name, text, level)

            s = NodeSampler(node=name, transport=functools.partial(transport, name),
                            node_dir=node_dir(name), run_id=run_id, pgid=pgid(name),
                            path=node.env.get("PATH"), publish=publish_node, note=note_node)
            self.by_node[name] = s
            s.start()

    def end(self, lost: frozenset[str] = frozenset()) -> dict[str, str]:
        """End every sampler at once; node -> why one could not be ended. Nodes ``lost`` are
        not asked (they cannot answer): their samplers end by themselves, without a
        heartbeat or without the run."""
        if self.stacks is not None:  # a round under way finds the ranks gone, or is not said
            self.stacks.end()
            self.stacks = None
        samplers = list(self.by_node.values())
        for s in samplers:
            s.halt.set()
        results = map_at_once(samplers, lambda s: s.end(remote=s.node not in lost))
        problems = {f.item.node: str(f.error) for f in failures(results)}
        self.by_node.clear()
        return problems
