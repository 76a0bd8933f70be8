"""torchrun's combined output on one node, a line at a time, into events.

torchrun ``--tee 3`` with ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`` (``events.PREFIX_TEMPLATE``)
prefixes every worker line with its global and local rank; unprefixed lines are the agent's
own: its restarts, its children's exits, and the "Root Cause" block of a failed run. Pure: no
I/O, no clock of its own, so every format here is tested from recorded text.
"""

from __future__ import annotations

import re

from ddptui.events import (
    METRIC_MARK,
    Event,
    Failure,
    Level,
    LogLine,
    Metric,
    NodeState,
    NodeStatus,
    Source,
    classify_level,
    nccl_level,
    nccl_match,
    parse_metric,
    split_metric,
)

#: A rank line's prefix (events.PREFIX_TEMPLATE): its global and local rank.
PREFIX_RE = re.compile(r"\[ddptui (\d+) (\d+)\] ")
_RESTART_RE = re.compile(r"Worker group (FAILED|UNHEALTHY)\. (\d+)/(\d+) attempts left")
# Healthy workers restarted so that another node's may rejoin: torch counts no attempt, ddptui
# does (it is the same restart of the job), so every node shows the same attempt.
_FOLLOW_RESTART_RE = re.compile(r"Detected (\d+) new nodes from group_rank=\d+; will restart")
_FIELD_RE = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*: ?(.*)$")
_RANK_FIELD_RE = re.compile(r"(-?\d+) \(local_rank: (-?\d+)\)")
_EXIT_FIELD_RE = re.compile(r"(-?\d+)(?: \(pid: \d+\))?\s*(?:\((SIG\w+)\))?")



class NodeLogParser:
    """Turns one node's combined torchrun output, line by line, into events.

    Stateful because torchrun's answers span lines: the restart attempt is announced once
    and holds for every later line, and the "Root Cause" summary is a block of fields.
    """

    def __init__(self, node: str, attempt: int = 0) -> None:
        self.node = node
        self.attempt = attempt
        self._block: dict[str, str] | None = None
        self._in_root_cause = False
        self._trace: list[str] = []
        self._field: str | None = None

    def feed(self, line: str, time: float) -> list[Event]:
        line = line.rstrip("\r\n")
        m = PREFIX_RE.match(line)
        if m is not None:
            rank, local_rank = int(m.group(1)), int(m.group(2))
            text = line[m.end():]
            if text[:1] == "\r":  # a progress bar's state (the tee's mark): see ddptui.bars
                events = self.worker_line(text[1:], rank, local_rank, time)
                for e in events:
                    if type(e) is LogLine:
                        e.bar = True
                return events
            return self.worker_line(text, rank, local_rank, time)
        return self._agent_line(line, time)

    def worker_line(self, text: str, rank: int, local_rank: int, time: float) -> list[Event]:
        if text.startswith(METRIC_MARK):
            obj = parse_metric(text[len(METRIC_MARK):])
            if obj is not None:
                r, kind, step, values, extra = split_metric(obj, rank)
                attempt = int(values.get("attempt", self.attempt))
                return [Metric(self.node, rank if r is None else r, kind, step, values, time,
                               attempt, extra, text)]
        m = nccl_match(text)
        if m is not None:
            return [LogLine(self.node, text, time, Source.NCCL, nccl_level(m), rank, local_rank,
                            self.attempt)]
        return [LogLine(self.node, text, time, Source.WORKER, classify_level(text), rank,
                        local_rank, self.attempt)]

    def _agent_line(self, line: str, time: float) -> list[Event]:
        out: list[Event] = []
        m = nccl_match(line)
        if m is not None:
            return [LogLine(self.node, line, time, Source.NCCL, nccl_level(m), None, None,
                            self.attempt)]
        level = classify_level(line)
        m = _RESTART_RE.search(line)
        if m is not None or ("Detected" in line and _FOLLOW_RESTART_RE.search(line)):
            self.attempt += 1
            level = Level.WARNING
            why = f" of {m.group(3)}" if m is not None else ": another node restarted its workers"
            out.append(NodeState(self.node, NodeStatus.RESTARTING, time,
                                 f"restart {self.attempt}{why}", attempt=self.attempt))
        out.append(LogLine(self.node, line, time, Source.AGENT, level, None, None, self.attempt))
        out.extend(self._root_cause(line, time))
        return out

    def _root_cause(self, line: str, time: float) -> list[Event]:
        if line.startswith("Root Cause (first observed failure)"):
            self._in_root_cause = True
            self._block = {}
            self._trace = []
            self._field = None
            return []
        if not self._in_root_cause or self._block is None:
            return []
        if line.startswith("====") or (line.startswith("----") and self._block):
            return [self._finish_block(time)]
        m = _FIELD_RE.match(line)
        if m is not None and not (self._field == "traceback" and line.startswith("    ")):
            self._field = m.group(1)
            self._block[self._field] = m.group(2).strip()
            if self._field == "traceback" and m.group(2).strip():
                self._trace.append(m.group(2).strip())
        elif self._field == "traceback" and line.strip():
            self._trace.append(line.strip())
        return []

    def _finish_block(self, time: float) -> Failure:
        block = self._block or {}
        self._in_root_cause = False
        self._block = None
        rank = local_rank = exit_code = None
        sig = None
        m = _RANK_FIELD_RE.search(block.get("rank", ""))
        if m is not None:
            rank, local_rank = int(m.group(1)), int(m.group(2))
        m = _EXIT_FIELD_RE.match(block.get("exitcode", ""))
        if m is not None:
            exit_code = int(m.group(1))
            sig = m.group(2)
        # The last line of a traceback names the exception: what a person wants first.
        cause = self._trace[-1] if self._trace else block.get("traceback", "")
        err = block.get("error_file")
        return Failure(self.node, rank, exit_code, sig, cause, time, local_rank,
                       block.get("host"), None if err in (None, "", "<N/A>") else err,
                       "\n".join(self._trace))
