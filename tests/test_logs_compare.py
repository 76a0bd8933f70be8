"""``ddptui logs RUN --metrics --align AXIS [--compare OTHER]`` on stored runs: each point's x on
the axis, the comparison's rows (x, A, B interpolated, A − B), the axis one run lacks said on
stderr, and each refusal (unknown run, a series not in both, an axis neither has, a flag
without --metrics) one paragraph with exit 2."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from ddptui.cli import main
from ddptui.store import rundir

T0 = 1_700_000_000.0


def stored(state: Path, run_id: str, records: list[dict[str, object]],
           started: float | None = T0) -> None:
    """A run as the store leaves it: run.json and metrics.jsonl."""
    d = rundir.run_dir(state, run_id)
    d.mkdir(parents=True)
    meta: dict[str, object] = {"run_id": run_id, "status": "finished", "nodes": []}
    if started is not None:
        meta["started_at"] = started
    (d / rundir.RUN_JSON).write_text(json.dumps(meta))
    (d / rundir.METRICS).write_text("".join(json.dumps(r) + "\n" for r in records))


def rec(step: int, t: float, rank: int = 0, **values: float) -> dict[str, object]:
    return {"node": "a", "rank": rank, "kind": "metric", "step": step, "time": T0 + t,
            "attempt": 0, **values}


def logs(capsys: pytest.CaptureFixture[str], state: Path, *args: str) -> tuple[int, str, str]:
    code = main(["--state-dir", str(state), "logs", *args])
    got = capsys.readouterr()
    return code, got.out, got.err


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """Run A: 64 samples a step, a step a second; B: 128 samples a step, one every 3 s."""
    stored(tmp_path, "run-a", [rec(s, s, loss=10.0 - s, samples=64.0 * s) for s in range(1, 11)])
    stored(tmp_path, "run-b", [rec(s, 3 * s, loss=10.0 - s, samples=128.0 * s)
                               for s in range(1, 6)], started=T0 - 2)
    stored(tmp_path, "run-c", [rec(s, s, loss=9.0 - s) for s in range(1, 4)])  # no samples
    stored(tmp_path, "run-d", [rec(s, s, lr=0.1) for s in range(1, 4)])  # no loss
    return tmp_path


def table(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_each_point_gets_its_x_on_the_axis(state: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = logs(capsys, state, "run-a", "--metrics", "--csv", "--align", "samples")
    rows = table(out)
    assert code == 0 and rows[0][:4] == ["node", "rank", "step", "samples"]
    loss = [r for r in rows[1:] if r[5] == "loss"]
    assert [(r[2], r[3]) for r in loss][:2] == [("1", "64"), ("2", "128")] and len(loss) == 10
    code, out, _ = logs(capsys, state, "run-b", "--metrics", "--csv", "--align", "time")
    assert [r[3] for r in table(out)[1:] if r[5] == "loss"] == ["5", "8", "11", "14", "17"]
    code, out, _ = logs(capsys, state, "run-a", "--metrics", "--json", "--align", "time")
    assert json.loads(out.splitlines()[0])["seconds"] == 1.0
    code, out, _ = logs(capsys, state, "run-a", "--metrics", "--align", "samples")
    assert out.splitlines()[0].split()[3] == "SAMPLES" and "640" in out.splitlines()[-1]


def test_by_step_the_export_is_as_it_was(state: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    _, plain, _ = logs(capsys, state, "run-a", "--metrics", "--csv")
    _, stepped, _ = logs(capsys, state, "run-a", "--metrics", "--csv", "--align", "step")
    assert plain == stepped and table(plain)[0][3] == "step_kind"


def test_the_comparison_has_a_row_per_x_of_a_with_b_interpolated(
        state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = logs(capsys, state, "run-a", "--metrics", "--csv", "--compare", "run-b",
                          "--align", "samples")
    rows = table(out)
    assert code == 0 and err == ""
    assert rows[0] == ["samples", "run-a r0", "run-b r0", "A - B"]
    assert [r[0] for r in rows[1:]] == [str(64 * s) for s in range(1, 11)]
    # B at A's 64 samples: before B's first point (128): blank, never extrapolated
    assert rows[1] == ["64", "9", "", ""]
    # A's 192 samples: B halfway between its steps 1 (9.0) and 2 (8.0)
    assert rows[3] == ["192", "7", "8.5", "-1.5"]
    assert rows[10] == ["640", "0", "5", "-5"]


def test_by_time_and_by_step_the_same_two_runs_differ_otherwise(
        state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = logs(capsys, state, "run-a", "--metrics", "--csv", "--compare", "run-b")
    rows = table(out)
    assert rows[0][0] == "step" and len(rows) == 11 and rows[5] == ["5", "5", "5", "0"]
    assert rows[6] == ["6", "4", "", ""]  # B ended at step 5
    _, out, _ = logs(capsys, state, "run-a", "--metrics", "--csv", "--compare", "run-b",
                     "--align", "time")
    rows = table(out)  # B started 2 s earlier: its step s is at 3s + 2 seconds
    assert rows[0][0] == "seconds" and rows[5] == ["5", "5", "9", "-4"]
    assert rows[8] == ["8", "2", "8", "-6"]


def test_json_rows_are_keyed_as_the_csv_header(state: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = logs(capsys, state, "run-a", "--metrics", "--json", "--compare", "run-b")
    first = json.loads(out.splitlines()[0])
    assert first == {"step": 1.0, "run-a r0": 9.0, "run-b r0": 9.0, "A - B": 0.0}


def test_an_axis_one_run_lacks_aligns_both_by_step_and_says_so(
        state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = logs(capsys, state, "run-a", "--metrics", "--csv", "--compare", "run-c",
                          "--align", "samples")
    assert code == 0 and table(out)[0][0] == "step"
    assert err == ("ddptui: run run-c prints no consumed samples (a `consumed samples` or "
                   "`samples` series): aligned by step\n")


def test_points_outside_the_counters_steps_are_left_out_and_counted(
        state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run E counts its samples from step 3 to 8 only: its loss at steps 1, 2, 9 and 10 has
    no x by samples."""
    stored(state, "run-e", [rec(s, s, loss=10.0 - s, **({"samples": 64.0 * s} if 3 <= s <= 8
                                                        else {})) for s in range(1, 11)])
    code, out, err = logs(capsys, state, "run-e", "--metrics", "--csv", "--compare", "run-a",
                          "--align", "samples")
    assert code == 0 and [r[0] for r in table(out)[1:]] == [str(64 * s) for s in range(3, 9)]
    assert err == ("ddptui: 4 points of loss in run run-e lie outside the steps where it "
                   "counted its samples: left out, not extrapolated\n")
    _, out, _ = logs(capsys, state, "run-e", "--metrics", "--csv", "--align", "samples")
    assert [r[3] for r in table(out)[1:] if r[5] == "loss"] == (
        ["", ""] + [str(64 * s) for s in range(3, 9)] + ["", ""])


def test_refusals_are_one_paragraph_and_exit_2(state: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    def refused(*args: str) -> str:
        code, out, err = logs(capsys, state, *args)
        assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
        return err

    assert "no run 'nope'" in refused("run-a", "--metrics", "--csv", "--compare", "nope")
    assert "no run 'nope'" in refused("nope", "--metrics", "--csv", "--align", "time")
    assert ("series 'loss' is not in both runs: run-d printed none"
            in refused("run-a", "--metrics", "--csv", "--compare", "run-d"))
    err = refused("run-c", "--metrics", "--csv", "--compare", "run-c", "--align", "tokens")
    assert err.startswith("ddptui: neither run can be aligned by tokens: run run-c prints no")
    err = refused("run-c", "--metrics", "--csv", "--align", "samples")
    assert "run run-c prints no consumed samples" in err and "`--align step`" in err
    assert "has no loss of rank 3" in refused("run-a", "--metrics", "--compare", "run-b",
                                               "--rank", "3")
    assert "need --metrics" in refused("run-a", "--compare", "run-b")
    assert "need --metrics" in refused("run-a", "--align", "time")


def test_an_unknown_axis_is_refused_by_the_parser(state: Path) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--state-dir", str(state), "logs", "run-a", "--metrics", "--align", "epochs"])
    assert e.value.code == 2
