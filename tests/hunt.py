"""Flake hunt: run test files again and again under CI's own load, and say which test failed
in which round.

    python3 tests/hunt.py                      # the cluster files, 5 rounds
    python3 tests/hunt.py --repeat 10 tests/test_slurm_run.py tests/test_reserve.py
    python3 tests/hunt.py --keep-going         # every round, not up to the first failure

Each round is one ``python3 -m pytest`` of the files with the suite's own options (two
workers, each file whole on one of them: pyproject.toml), so two files run side by side as
they do in CI. A round that fails keeps its whole output in ``--logs``. docs/testing.md lists
every test that ever failed here, with its cause and its fix.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The files that build real clusters (sshd, Slurm, torchrun, tmux) or time real tools:
#: where a race between processes shows first.
CLUSTER_FILES = (
    "tests/test_slurm_run.py", "tests/test_controller_faults.py",
    "tests/test_telemetry_sampler.py", "tests/test_telemetry_cluster.py",
    "tests/test_ssh_run.py", "tests/test_lost_nodes.py", "tests/test_tui_tmux.py",
    "tests/test_bench_smoke.py", "tests/test_sync_bench_smoke.py",
)
_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)
_SUMMARY = re.compile(r"^(?:=+ )?(\d+ (?:passed|failed|errors?)\b.*?) in [\d.]+s", re.M)


def one_round(files: list[str], timeout: float) -> tuple[bool, str, list[str], str]:
    """(passed, pytest's summary line, the tests that failed, the whole output)."""
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *files], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
        out, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as e:
        out = f"{e.stdout or ''}{e.stderr or ''}\nhunt: the round outlasted {timeout:g} s"
        code = -1
    summary = _SUMMARY.findall(out)
    return code == 0, (summary[-1] if summary else f"exit code {code}"), \
        sorted(set(_FAILED.findall(out))), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", default=list(CLUSTER_FILES),
                    help="test files (default: the cluster files)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--keep-going", action="store_true",
                    help="run every round, not up to the first that fails")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds a round may take")
    ap.add_argument("--logs", type=Path, default=Path("/tmp/ddptui-hunt"),
                    help="where a failed round's output is kept")
    args = ap.parse_args(argv)
    args.logs.mkdir(parents=True, exist_ok=True)
    failures: dict[str, list[int]] = {}
    rounds = 0
    for n in range(1, args.repeat + 1):
        rounds = n
        t0 = time.monotonic()
        ok, summary, failed, out = one_round(args.files, args.timeout)
        took = time.monotonic() - t0
        print(f"hunt: round {n}/{args.repeat}: {summary} ({took:.0f} s)", flush=True)
        if not ok:
            log = args.logs / f"round-{n}.log"
            log.write_text(out)
            for test in failed or ["(no test named: see the log)"]:
                failures.setdefault(test, []).append(n)
                print(f"hunt:   failed: {test}", flush=True)
            print(f"hunt:   whole output: {log}", flush=True)
            if not args.keep_going:
                break
    if failures:
        print(f"hunt: {len(failures)} test(s) failed in {rounds} round(s):")
        for test, where in sorted(failures.items()):
            print(f"hunt:   {test}: round(s) {', '.join(map(str, where))}")
        return 1
    print(f"hunt: {rounds} round(s) in a row passed: {' '.join(args.files)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
