"""bench/sync.py at its smallest size: it runs, syncs one file warm, and prints both ratios
to its targets (their figures are not judged here: exit 1 is a missed target, not a crash)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.cluster]


def test_sync_bench_quick_prints_cold_and_warm_ratios() -> None:
    import conftest

    conftest._require_cluster_environment()
    res = subprocess.run([sys.executable, str(ROOT / "bench" / "sync.py"), "--quick"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    assert "round 1 warm: ddptui" in res.stdout and "(2 files, " in res.stdout
    assert "cold: ddptui" in res.stdout and "ratio" in res.stdout
    assert "warm (one file changed): ddptui" in res.stdout
