"""The run's Slurm allocation while the run is followed: Slurm's word on the job
(:class:`~ddptui.slurm.ending.JobWatch`), its time limit seen coming
(:class:`~ddptui.live.timelimit.TimeLimit`), and, once the run is over, whether it is to be
tried again in a new allocation (:func:`~ddptui.slurm.attempts.why_again`). Without Slurm
each part does nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from ddptui.config import HostsConfig
from ddptui.live.timelimit import Note, TimeLimit
from ddptui.slurm.attempts import why_again
from ddptui.slurm.ending import Followed, JobWatch, RunInfo
from ddptui.store.record import Recorder
from ddptui.transport.base import Transport


class Allocation:
    def __init__(self, config: HostsConfig, run_id: str, store: RunInfo,
                 followers: Mapping[str, Followed], transport: Callable[[str], Transport],
                 recorder: Recorder, note: Note, done: threading.Event) -> None:
        """``recorder``: the run's, where each node's working folder is (a checkpoint's
        pattern starts there) and the signal is kept (a run reopened does not send it
        twice)."""
        self.config = config
        self.limit = TimeLimit(config, run_id, transport, lambda n: recorder.nodes()[n].cwd,
                               lambda n: recorder.nodes()[n].run_dir, note,
                               lambda sent: recorder.update(time_limit=sent), done,
                               recorder.record().time_limit)
        self.job = JobWatch.of(config, store, followers, self.limit.heard)
        self.limit.marks_readable = lambda: not self.job.gone

    def again(self, number: int, *, stopped: bool) -> str | None:
        """Why attempt ``number`` of the run, now over, is to be tried again; None: not."""
        return why_again(self.config, number, left_at_signal=self.limit.left_at_signal,
                         end=self.job.end, stopped=stopped)
