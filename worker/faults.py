"""Failures on demand, so ddptui's handling of crashes, hangs and stragglers is testable."""

from __future__ import annotations

import time
from dataclasses import dataclass


class InjectedCrash(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class Faults:
    rank: int
    attempt: int
    crash_rank: int | None = None
    crash_step: int | None = None
    hang_rank: int | None = None
    hang_step: int | None = None
    slow_rank: int | None = None
    slow_ms: int = 0
    step_sleep_ms: int = 0

    def should_crash(self, step: int) -> bool:
        # Only the first attempt: a restarted group must be able to get past the step.
        return self.attempt == 0 and self.crash_rank == self.rank and self.crash_step == step

    def should_hang(self, step: int) -> bool:
        return self.hang_rank == self.rank and self.hang_step == step

    def delay_s(self) -> float:
        slow = self.slow_ms if self.slow_rank == self.rank else 0
        return (self.step_sleep_ms + slow) / 1000.0

    def before_step(self, step: int) -> None:
        if self.should_crash(step):
            raise InjectedCrash(f"injected crash on rank {self.rank} at step {step}")
        if self.should_hang(step):
            # A hung rank ignores SIGTERM like one stuck in a collective would; only
            # SIGKILL ends it, which is what a stop's grace period is for.
            while True:
                time.sleep(3600)
        if delay := self.delay_s():
            time.sleep(delay)
