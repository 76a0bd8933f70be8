"""The curves' findings as the faces say them, from the store's one judge: the headless face
each once as found and all in its summary, ``ddptui logs RUN`` the same from metrics.jsonl."""

from __future__ import annotations

import io
from pathlib import Path

from ddptui.events import Metric
from ddptui.faces.headless import Printer, insight_report
from ddptui.faces.logs import curves_report
from ddptui.live.follow import Batch
from ddptui.store.store import Store


def steps(first: int, last: int) -> list[list[Metric]]:
    """Four ranks on nodes a and b; rank 1 computes three times as long, rank 0 prints nan at
    step 50; one batch per step."""
    out = []
    for step in range(first, last):
        batch = []
        for r in range(4):
            loss = float("nan") if (r, step) == (0, 50) else 2.0 - step / 200 + r / 1000
            batch.append(Metric("ab"[r // 2], r, "metric", step,
                                {"loss": loss, "compute_ms": 30.0 if r == 1 else 10.0,
                                 "wait_ms": 0.0 if r == 1 else 20.0}, 100.0 + step / 10))
        out.append(batch)
    return out


def test_headless_says_each_finding_once_then_all_at_the_end_as_logs_does(tmp_path: Path
                                                                          ) -> None:
    store, out = Store(tmp_path), io.StringIO()
    printer = Printer(out, metrics=False, store=store)
    for batch in steps(0, 90):
        store.apply(batch)
        printer(Batch("a", batch, {}))
    said = out.getvalue().splitlines()
    assert said == [
        said[0],
        "[a ddptui] ⚠ rank 0 (node a): loss is nan at step 50, not a finite number: look at "
        "this rank's inputs and learning rate there",
    ]
    assert said[0].startswith("[a ddptui] ⚠ rank 1 (node a) is a straggler: the others "
                              "waited for it at 20 of 20 steps, 0.02 s of each 0.03 s step")
    assert "compute_ms" in said[0]
    end = insight_report(store.insight(final=True))
    assert end.startswith("ddptui: what the curves tell:\nddptui: rank 1 (node a) is a straggler")
    assert "ddptui: rank 0 (node a): loss is nan at step 50" in end
    store.close()
    assert curves_report(tmp_path) == end


def test_nothing_found_nothing_said(tmp_path: Path) -> None:
    store, out = Store(tmp_path), io.StringIO()
    printer = Printer(out, metrics=False, store=store)
    for step in range(60):
        batch = [Metric("ab"[r // 2], r, "metric", step, {"loss": 2.0 - step / 100},
                        100.0 + step / 10) for r in range(4)]
        store.apply(batch)
        printer(Batch("a", batch, {}))
    assert out.getvalue() == "" and insight_report(store.insight(final=True)) == ""
    store.close()
    assert curves_report(tmp_path) == ""
