"""Events: the one vocabulary between the session, the store and the faces.

Reader threads turn raw node-log bytes into these with :class:`ddptui.nodelog.NodeLogParser`
(and :mod:`ddptui.ingest` a read at a time). The line formats come from torchrun itself:
``--tee 3`` with ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`` (see :data:`PREFIX_TEMPLATE`)
prefixes every worker line with its global and local rank; unprefixed lines are the
torchrun agent's own. What a line says (its level, an NCCL line, a metric record) is read
here, as pure functions tested from recorded text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeAlias

from ddptui.telemetry.sample import NodeSample

#: Given to torchrun; ``${rank}`` is the global rank, right also after an elastic restart.
PREFIX_TEMPLATE = "[ddptui ${rank} ${local_rank}] "
METRIC_MARK = "@ddptui "

#: A value as ``json`` reads and writes it: a record's fields as a rank printed them (a
#: metric's ``extra``) and every record ddptui writes of its own. Written here, at the foot of
#: the layers, so that every package above names the same type.
JSON: TypeAlias = "str | int | float | bool | list[JSON] | dict[str, JSON] | None"


class NodeStatus(StrEnum):
    PENDING = "pending"
    CONNECTING = "connecting"
    UPLOADING = "uploading"
    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"
    EXITED = "exited"
    FAILED = "failed"
    STOPPING = "stopping"
    STOPPED = "stopped"
    LOST = "lost"

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset({NodeStatus.EXITED, NodeStatus.FAILED, NodeStatus.STOPPED})


class RunStatus(StrEnum):
    """A run as a whole, as the header shows it and ``run.json`` records it.

    idle -> launching -> running -> (stopping ->) finished | failed | stopped. A launch
    that fails goes from launching to failed. ``lost`` is the dashboard's word for a run whose
    engine died: the run may well go on, and ``ddptui attach`` finds it. ``unknown`` is a
    ``run.json`` that records no status.
    """

    IDLE = "idle"
    LAUNCHING = "launching"
    RUNNING = "running"
    STOPPING = "stopping"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"
    LOST = "lost"
    UNKNOWN = "unknown"

    @property
    def live(self) -> bool:
        """Something of the run may be going on nodes (so quitting should ask)."""
        return self in _LIVE_RUN

    @classmethod
    def read(cls, value: object) -> RunStatus:
        """A status as ``run.json`` holds it; anything else reads as unknown."""
        try:
            return cls(str(value))
        except ValueError:
            return cls.UNKNOWN


_LIVE_RUN = frozenset({RunStatus.LAUNCHING, RunStatus.RUNNING, RunStatus.STOPPING})


class Source(StrEnum):
    WORKER = "worker"
    AGENT = "agent"
    NCCL = "nccl"
    SSH = "ssh"
    SETUP = "setup"  # job.setup's output, before torchrun starts


class Level(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(slots=True)
class NodeState:
    node: str
    status: NodeStatus
    time: float
    detail: str = ""
    pid: int | None = None
    exit_code: int | None = None
    attempt: int = 0


@dataclass(slots=True)
class LogLine:
    node: str
    text: str
    time: float
    source: Source = Source.WORKER
    level: Level = Level.INFO
    rank: int | None = None
    local_rank: int | None = None
    attempt: int = 0
    #: A progress bar's state (the tee's mark, see ``ddptui.bars``): it writes over the rank's
    #: previous state, as on a terminal, and is kept at most once a second.
    bar: bool = False


@dataclass(slots=True)
class LineRun:
    """A rank's plain lines in a row, kept as the text they came in.

    A flood is nearly all such lines (one rank, INFO, no metric record, no NCCL line, no
    warning or error word), and one object per line was the session's ceiling
    (``bench/stream.py``): a run is one object, written to its rank's log as one string, and
    made into :class:`LogLine` objects only for the lines a ring keeps or a screen reads.
    """

    node: str
    rank: int
    local_rank: int
    attempt: int
    time: float
    text: str  # the lines, each ending in a newline, without torchrun's rank prefix
    count: int

    def tail(self, n: int) -> list[LogLine]:
        """The last ``n`` lines (all of them when the run is shorter), as the lines they are."""
        body = self.text[:-1]
        parts = body.rsplit("\n", n) if n < self.count else body.split("\n")
        if len(parts) > n:
            parts = parts[len(parts) - n:]
        return self._made(parts)

    def lines(self) -> list[LogLine]:
        return self.tail(self.count)

    def head(self, n: int) -> list[LogLine]:
        """The first ``n`` lines (all of them when the run is shorter)."""
        if n >= self.count:
            return self.lines()
        return self._made(self.text.split("\n", n)[:n])

    def _made(self, texts: list[str]) -> list[LogLine]:
        node, t, rank, local, attempt = self.node, self.time, self.rank, self.local_rank, \
            self.attempt
        return [LogLine(node, p, t, Source.WORKER, Level.INFO, rank, local, attempt)
                for p in texts]

    def after(self, n: int) -> LineRun:
        """The run without its first ``n`` lines (n < count)."""
        i = -1
        for _ in range(n):
            i = self.text.index("\n", i + 1)
        return LineRun(self.node, self.rank, self.local_rank, self.attempt, self.time,
                       self.text[i + 1:], self.count - n)


@dataclass(slots=True)
class Metric:
    """One ``@ddptui`` record; ``values`` holds every numeric field, ``extra`` the rest."""

    node: str
    rank: int
    kind: str
    step: int | float | None
    values: dict[str, float]
    time: float
    attempt: int = 0
    extra: dict[str, JSON] = field(default_factory=dict)
    text: str = ""  # the line as the rank printed it, for its per-rank log
    #: What read it: "ddptui" for a record, else a recognizer of ``ddptui.metrics`` (whose
    #: metrics carry no ``text``: their line stays an ordinary log line).
    recognizer: str = "ddptui"
    #: What ``step`` counts: "step" (iteration, global step), "epoch" (a fraction, so a
    #: float), or "count" (the rank's matching lines so far: the line had no step).
    step_kind: str = "step"

    def as_line(self) -> LogLine | None:
        """The record as the rank printed it, a line of its log: machine chatter (DEBUG)."""
        if not self.text:
            return None
        return LogLine(self.node, self.text, self.time, Source.WORKER, Level.DEBUG, self.rank,
                       None, self.attempt)


@dataclass(slots=True)
class MetricRun:
    """A rank's metric lines in a row, every one read by one recognizer, kept as their text.

    A flood of metric lines (nanoGPT prints one per iteration) made a :class:`Metric` per line,
    about 8 µs each through the scanner, the store and the mirror (``bench/ingest.py
    --recognizers``). The scanner (:mod:`ddptui.metrics.scan`) proves for a whole
    :class:`LineRun` at once that each of its lines is read by ``recognizer`` with a step, and
    says so with this one object; the points themselves are made only when a chart, a printer
    or ``metrics.jsonl``'s reader asks (:func:`ddptui.metrics.bulk.made`), exactly the
    :class:`Metric` events the per-line scan makes. ``names`` and ``step_kind`` are every
    line's; ``last`` is the last line's, which the store's rank view and the diagnosis read.
    """

    node: str
    rank: int
    attempt: int
    time: float
    recognizer: str
    step_kind: str
    names: tuple[str, ...]
    text: str  # the lines, each ending in a newline (a LineRun's text, or its tail)
    count: int
    last: Metric


@dataclass(slots=True)
class Failure:
    node: str
    rank: int | None
    exit_code: int | None
    signal: str | None
    root_cause: str
    time: float
    local_rank: int | None = None
    host: str | None = None
    error_file: str | None = None
    traceback: str = ""


@dataclass(slots=True)
class Stall:
    """ddptui's own judgement, not a line: a rank stopped progressing (``stalled``) or went
    on again; ``whole_run`` when every running rank stopped together. Made once, where the
    run is (``ddptui.store.health.StallWatch``), and read by every face from the store, so
    that no face judges a rank's silence again and says otherwise."""

    node: str
    rank: int
    time: float
    stalled: bool
    idle_s: float
    whole_run: bool = False
    after_error: bool = False
    """Not a stall (``stalled`` is False): silent past the threshold, but its last line was
    an error, which says more than its silence."""
    step_gap_s: float | None = None
    """Judged on its steps, not its silence: the run's median time between step reports, and
    ``idle_s`` the time since the rank's last step."""


@dataclass(slots=True)
class StackCount:
    """A node's round of sampled stacks (``live/stack_sampler.py``): rank -> (samples, inside)."""

    node: str
    time: float
    round: int
    counts: dict[int, tuple[int, int]]
    problem: str = ""
    cost: str = ""


# Events are never changed once made, but they are not ``frozen``: a frozen dataclass is built
# through object.__setattr__ per field, four times slower, and readers make 50k lines a second.
#: NodeSample: a node's telemetry (``ddptui.telemetry``), applied and sent as the others are.
Event = (NodeState | LogLine | LineRun | Metric | MetricRun | Failure | Stall | NodeSample
         | StackCount)

_GLOG_FIRST = frozenset("IWEF")
_GLOG_RE = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ")
# torch's own INFO lines (the agent's, with LOGLEVEL=INFO, and c10d's) are machinery a person
# reads only when digging: DEBUG, so the all-ranks view can leave them out.
_GLOG_LEVEL = {"I": Level.DEBUG, "W": Level.WARNING, "E": Level.ERROR, "F": Level.ERROR}
# As libnccl writes them with NCCL_DEBUG=INFO: `host:pid:tid [dev] NCCL INFO ...`, warnings
# with their source position `host:pid:tid [dev] misc/socket.cc:483 NCCL WARN ...`, the bare
# `NCCL version 2.21.5+cuda12.4` banner; torch may put `[rankN]:` in front of any of them.
_NCCL_RE = re.compile(
    # NCCL 2.26 and later stamp WARN lines: "[2026-11-22 11:58:29] host:pid:tid [dev] ...".
    r"^(?:\[rank\d+\]:)?(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] )?"
    r"(?:[^\s:]+:\d+:\d+ \[[^\]]*\] (?:\S+:\d+ )?NCCL "
    r"(INFO|WARN|TRACE|ERROR|ABORT)\b|NCCL version \d)"
)
_NCCL_LEVEL = {"WARN": Level.WARNING, "ERROR": Level.ERROR, "ABORT": Level.ERROR,
               "TRACE": Level.DEBUG}


def nccl_match(text: str) -> re.Match[str] | None:
    """The NCCL grammar's match of a line libnccl wrote (see :func:`nccl_level`), else None."""
    return _NCCL_RE.match(text) if "NCCL" in text else None


def nccl_level(m: re.Match[str]) -> Level:
    return _NCCL_LEVEL.get(m.group(1) or "INFO", Level.INFO)
_ERROR_RE = re.compile(
    r"Traceback \(most recent call last\)|^(\[rank\d+\]: )?[\w.]*(Error|Exception)(: |$)|"
    r"\bFAILED\b"
)
# `UserWarning: x`, Python's `file.py:88: UserWarning: x`, `WARNING ...`, `warning: ...`
_WARN_RE = re.compile(r"(^|: )(\[rank\d+\]: )?[\w.]*Warning: |\bWARN(ING)?\b|^[Ww]arning:")
def is_nccl(text: str) -> bool:
    """A line libnccl wrote (NCCL_DEBUG), whatever torch put in front of it."""
    return nccl_match(text) is not None


def classify_level(text: str) -> Level:
    # Every line of a flood comes through here: substring tests (C speed) decide whether a
    # regex needs to run at all, so a plain line costs no regex search.
    if text[:1] in _GLOG_FIRST:
        m = _GLOG_RE.match(text)
        if m:
            return _GLOG_LEVEL[m.group(1)]
    if ("Error" in text or "Exception" in text or "Traceback" in text or "FAILED" in text) \
            and _ERROR_RE.search(text):
        return Level.ERROR
    if ("arn" in text or "WARN" in text) and _WARN_RE.search(text):
        return Level.WARNING
    return Level.INFO


def parse_metric(payload: str) -> dict[str, JSON] | None:
    """The JSON object after the mark, or None when it is not one (then it is a plain line)."""
    try:
        obj: JSON = json.loads(payload)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def split_metric(
    obj: dict[str, JSON], default_rank: int | None
) -> tuple[int | None, str, int | None, dict[str, float], dict[str, JSON]]:
    rank = obj.get("rank", default_rank)
    rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else default_rank
    step = obj.get("step")
    step = step if isinstance(step, int) and not isinstance(step, bool) else None
    kind = str(obj.get("kind", "metric"))
    values: dict[str, float] = {}
    extra: dict[str, JSON] = {}
    for k, v in obj.items():
        if k in ("rank", "step", "kind", "v"):
            continue
        if isinstance(v, int | float) and not isinstance(v, bool):
            values[k] = float(v)
        else:
            extra[k] = v
    return rank, kind, step, values, extra


def format_metric(kind: str, step: int | float | None, values: dict[str, float]) -> str:
    """A metric record as a person scans it: ``@metric step=120 loss=0.41 lr=0.003``."""
    parts = [f"@{kind}"]
    if step is not None:
        parts.append(f"step={step}")
    parts.extend(f"{k}={v:.4g}" for k, v in values.items() if k not in ("attempt", "seq"))
    return " ".join(parts)


def compact_metric_line(text: str) -> str:
    """``@ddptui {json}`` as :func:`format_metric` shows it; other text unchanged."""
    if not text.startswith(METRIC_MARK):
        return text
    obj = parse_metric(text[len(METRIC_MARK):])
    if obj is None:
        return text
    _, kind, step, values, _ = split_metric(obj, None)
    return format_metric(kind, step, values)


def in_all_view(line: LogLine) -> bool:
    """The all-ranks view leaves out torch's own INFO chatter, not the ranks' metric records."""
    return line.level is not Level.DEBUG or line.text.startswith(METRIC_MARK)


def all_view_text(line: LogLine) -> str:
    """A line as the all-ranks view (and its disk mirror, ``lines.log``) shows it."""
    if line.rank is not None:
        return f"[{line.rank}] {compact_metric_line(line.text)}"
    return f"[{line.node}] {line.text}"


def ssh_line(node: str, text: str, time: float, level: Level = Level.INFO) -> LogLine:
    """A line ddptui itself says about a node (connection, upload, stop)."""
    return LogLine(node, text, time, Source.SSH, level)
