"""``ddptui clean``'s report: what each node freed, what was freed here, what stayed and why."""

from __future__ import annotations

import sys
from typing import TextIO

from ddptui.clean.sweep import CleanReport


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"  # pragma: no cover - the loop returns


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def report_lines(report: CleanReport) -> list[str]:
    verb = "would free" if report.dry_run else "freed"
    out: list[str] = []
    for name, freed in report.nodes.items():
        out.append(f"ddptui: node {name}: {verb} {human_bytes(freed.bytes)}: "
                   f"{_count(freed.runs, 'run', 'runs')}, "
                   f"{_count(freed.code, 'code cache', 'code caches')}")
        if freed.skipped:
            out.append(f"  left {', '.join(sorted(set(freed.skipped)))}: it started running "
                       "meanwhile")
        out.extend(f"  could not remove: {e}" for e in freed.errors)
    out.extend(f"ddptui: {e}" for e in report.errors)
    if report.errors:
        out.append("ddptui: the local run dirs were kept, since not every node was cleaned")
    elif report.keep_logs:
        n = len(report.choice.local)
        out.append(f"ddptui: here ({report.local_dir}): kept the logs of "
                   f"{_count(n, 'run', 'runs')} (--keep-logs); `ddptui logs` marks them")
    else:
        out.append(f"ddptui: here ({report.local_dir}): {verb} "
                   f"{human_bytes(report.local_bytes)}: "
                   f"{_count(report.local_runs, 'run', 'runs')}")
    choice = report.choice
    if choice.live:
        out.append(f"ddptui: kept {_count(len(choice.live), 'live run', 'live runs')}, "
                   f"untouched: {', '.join(choice.live)}")
    if choice.kept:
        why = f"the {report.policy.keep} newest" if report.policy.keep else "younger than "
        if report.policy.older_than_days is not None and not report.policy.keep:
            why += f"{report.policy.older_than_days:g} days"
        elif report.policy.older_than_days is not None:
            why += f", or younger than {report.policy.older_than_days:g} days"
        out.append(f"ddptui: kept {_count(len(choice.kept), 'finished run', 'finished runs')} "
                   f"({why}; --keep and --older-than choose)")
    return out


def print_clean(report: CleanReport, out: TextIO = sys.stdout) -> int:
    out.write("\n".join(report_lines(report)) + "\n")
    out.flush()
    return 0 if report.clean else 1
