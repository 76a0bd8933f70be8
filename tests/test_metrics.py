"""Metric lines of real stacks, read from recorded output (tests/data/metrics/, each file's
first line names the library version and the source of its format)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from ddptui.chart.rows import chart_rows, chart_title
from ddptui.chart.view import ChartView
from ddptui.config import ConfigError
from ddptui.config.parse import parse_hosts
from ddptui.events import LineRun, LogLine, Metric, Source
from ddptui.metrics.points import as_text, points, series_of
from ddptui.metrics.recognizers import BUILT_IN, NAMES
from ddptui.metrics.scan import Scanner, recognizers
from ddptui.store.store import Store

DATA = Path(__file__).parent / "data" / "metrics"


def sample(name: str) -> list[str]:
    """A sample's lines as torchrun's tee hands them on: split at \\n and \\r alike."""
    return (DATA / name).read_text().splitlines()[1:]


def read(name: str, scanner: Scanner | None = None) -> list[Metric]:
    s = scanner or Scanner("n")
    out = s.scan([LogLine("n", t, 0.0, rank=0) for t in sample(name)])
    return [e for e in out if isinstance(e, Metric)]


def test_every_sample_names_its_library_and_source() -> None:
    for f in DATA.glob("*.txt"):
        head = f.read_text().splitlines()[0]
        assert head.startswith("# "), f.name
        assert re.search(r"\d+\.\d+|main|master|no library", head), f.name


def test_hugging_face_trainer_dicts_hold_what_it_printed_step_for_step() -> None:
    printed = [ast.literal_eval(t[t.index("{'"):]) for t in sample("hf_trainer.txt")
               if "{'" in t]
    got = read("hf_trainer.txt")
    assert [m.recognizer for m in got] == ["hf_trainer"] * len(printed)
    for d, m in zip(printed, got, strict=True):
        assert m.step == float(d["epoch"]) and m.step_kind == "epoch"
        assert m.values == {k: float(v) for k, v in d.items() if k not in ("epoch",)}
    assert "eval_loss" in got[5].values and "train_loss" in got[-1].values


def test_lightning_tqdm_bar_gives_one_point_a_step_with_that_steps_loss() -> None:
    bar = re.compile(r"Epoch (\d+):.*?(\d+)/(\d+) \[.*train_loss=([0-9.]+)\]")
    last: dict[int, float] = {}
    for t in sample("lightning_tqdm.txt"):
        m = bar.search(t)
        if m:  # the bar is drawn twice a step; its last drawing holds the step's loss
            last[int(m[1]) * int(m[3]) + int(m[2])] = float(m[4])
    last.pop(0, None)
    got = read("lightning_tqdm.txt")
    assert {m.step: m.values["train_loss"] for m in got} == last
    assert len(got) == 32 and all(m.step_kind == "step" for m in got)


def test_lightning_rich_bar_in_a_pipe_is_one_state_at_the_end() -> None:
    got = read("lightning_rich.txt")  # its postfix wrapped onto the next line: not read
    assert all(m.recognizer == "lightning" for m in got)


@pytest.mark.parametrize(("name", "recognizer", "first"), [
    ("nanogpt.txt", "nanogpt", (0, "step", {"train loss": 4.2874, "val loss": 4.2823})),
    ("torchtitan.txt", "torchtitan",
     (1, "step", {"loss": 12.2534, "memory": 42.1, "tps": 1024.0, "tflops": 59.4, "mfu": 6.01})),
    ("megatron.txt", "megatron",
     (10, "step", {"consumed samples": 640.0, "elapsed time per iteration (ms)": 812.3,
                   "learning rate": 1.5e-05,
                   "lm loss": 10.45678, "loss scale": 1.0, "grad norm": 12.345})),
    ("fairseq.txt", "fairseq", (100, "step", {
        "loss": 9.876, "nll_loss": 9.5, "ppl": 724.08, "wps": 12345.6, "ups": 2.34,
        "wpb": 4096.0, "bsz": 128.0, "lr": 0.0005, "gnorm": 1.234, "loss_scale": 64.0,
        "train_wall": 42.0, "gb_free": 61.2, "wall": 60.0})),
    ("fairseq_json.txt", "fairseq", (100, "step", {
        "loss": 9.876, "nll_loss": 9.5, "ppl": 724.08, "wps": 12345.6, "ups": 2.34,
        "wpb": 4096.0, "bsz": 128.0, "lr": 0.0005, "gnorm": 1.234, "loss_scale": 64.0,
        "train_wall": 42.0, "gb_free": 61.2, "wall": 60.0})),
    ("pytorch_mnist.txt", "pytorch_examples", (0.0, "epoch", {"loss": 2.299825})),
    ("pytorch_wlm.txt", "pytorch_examples",
     (200 / 2983, "epoch", {"lr": 20.0, "ms/batch": 45.12, "loss": 7.63, "ppl": 2061.52})),
    ("generic.txt", "generic", (10, "step", {"loss": 1.2345})),
])
def test_each_stack_first_line(name: str, recognizer: str,
                               first: tuple[float, str, dict[str, float]]) -> None:
    got = read(name)
    assert got and {m.recognizer for m in got} == {recognizer}
    assert (got[0].step, got[0].step_kind, got[0].values) == first
    assert all(m.text == "" and m.rank == 0 for m in got)


def test_later_lines_of_each_stack() -> None:
    assert [m.values.get("val loss") for m in read("nanogpt.txt")][-2] == 2.065
    assert read("megatron.txt")[1].values["lm loss"] == 9.123456
    fs = read("fairseq.txt")
    assert (fs[2].step, fs[2].values["valid_loss"]) == (1000, 7.654)
    assert read("fairseq_json.txt")[2].step == 1000
    mnist = read("pytorch_mnist.txt")
    assert (mnist[3].step_kind, mnist[3].values) == ("count", {"test loss": 0.0497})
    wlm = read("pytorch_wlm.txt")
    assert wlm[2].values == {"valid loss": 5.89, "valid ppl": 361.84}
    assert (wlm[-1].step_kind, wlm[-1].values) == ("count", {"test loss": 5.5, "test ppl": 244.99})
    generic = read("generic.txt")
    assert [(m.step, m.step_kind) for m in generic] == [(10, "step"), (20, "step"),
                                                        (1, "count")]
    assert len(generic) == 3  # val_loss is nobody's "loss"


def test_a_line_run_is_read_in_bulk_and_a_flood_without_gate_words_untouched() -> None:
    plain = "".join(f"line {i} of nothing\n" for i in range(100))
    events: list = [LineRun("n", 1, 1, 0, 5.0, plain, 100)]
    s = Scanner("n")
    assert s.scan(events) is events
    text = plain + "iter 7: loss 1.5000, time 3.00ms, mfu 1.00%\n" + plain
    out = s.scan([LineRun("n", 1, 1, 2, 5.0, text, 201)])
    assert len(out) == 2 and isinstance(out[1], Metric)
    assert (out[1].rank, out[1].step, out[1].attempt, out[1].values["loss"]) == (1, 7, 2, 1.5)


def test_ddptui_records_win_said_once() -> None:
    s = Scanner("n")
    rec = Metric("n", 0, "metric", 1, {"loss": 2.0}, 0.0, text="@ddptui {}")
    out = s.scan([rec, LogLine("n", "loss: 3.0", 0.0, rank=0), rec,
                  LogLine("n", "loss: 4.0", 0.0, rank=1)])
    notes = [e for e in out if isinstance(e, LogLine) and e.source is Source.SSH]
    assert len(notes) == 1 and "rank 0 prints @ddptui" in notes[0].text
    got = [e for e in out if isinstance(e, Metric) and e.recognizer != "ddptui"]
    assert [(m.rank, m.values) for m in got] == [(1, {"loss": 4.0})]


def test_a_carriage_return_line_is_read_state_by_state() -> None:
    line = ("Epoch 0:  50%|#| 1/2 [00:00<00:00, 1.0it/s, v_num=0, train_loss=0.5]\r"
            "Epoch 0: 100%|#| 2/2 [00:00<00:00, 1.0it/s, v_num=0, train_loss=0.25]")
    got = [e for e in Scanner("n").scan([LogLine("n", line, 0.0, rank=3)])
           if isinstance(e, Metric)]
    assert [(m.step, m.values["train_loss"]) for m in got] == [(1, 0.5), (2, 0.25)]


def test_parse_choices_and_patterns_come_first() -> None:
    assert recognizers("off", ()) == ()
    assert [r.name for r in recognizers(["generic", "nanogpt"], ())] == ["nanogpt", "generic"]
    own = recognizers("auto", [r"acc=(?P<acc>[0-9.]+) @(?P<step>\d+)"])
    assert own[0].name == "patterns[0]" and own[1:] == BUILT_IN
    got = [e for e in Scanner("n", own).scan([LogLine("n", "acc=0.9 @12 loss=1", 0.0, rank=0)])
           if isinstance(e, Metric)]
    assert [(m.recognizer, m.step, m.values) for m in got] == [("patterns[0]", 12, {"acc": 0.9})]


def hosts(metrics: str) -> str:
    return "nodes: [a]\nmetrics:\n" + metrics


def test_metrics_in_the_hosts_file() -> None:
    c = parse_hosts(hosts("  parse: [hf_trainer]\n  patterns: ['x (?P<x>\\d+)']\n"), "h.yaml")
    assert c.metrics.parse == ("hf_trainer",) and c.metrics.patterns == (r"x (?P<x>\d+)",)
    assert type(c).from_dict(json.loads(json.dumps(c.to_dict()))).metrics == c.metrics
    assert parse_hosts("nodes: [a]\n", "h.yaml").metrics.parse == "auto"
    assert parse_hosts(hosts("  parse: off\n"), "h.yaml").metrics.parse == "off"


def test_a_bad_pattern_or_name_is_named_with_file_and_line() -> None:
    with pytest.raises(ConfigError) as e:
        parse_hosts(hosts("  parse: [hf, generic]\n  patterns:\n    - 'ok (?P<ok>1)'\n"
                          "    - 'a (?P<a>[0-9.]+'\n    - 'step (?P<step>1)'\n"), "h.yaml")
    said = str(e.value).splitlines()
    assert said[0].startswith("h.yaml:3: metrics.parse: names 'hf', which ddptui does not know")
    assert said[1].startswith("h.yaml:6: metrics.patterns[1]: is not a regular expression")
    assert said[2].startswith("h.yaml:7: metrics.patterns[2]: has no named group for a value")
    assert set(NAMES) <= set(said[0].replace(",", " ").replace(".", " ").split())


def test_the_store_keeps_a_steps_latest_value_and_says_where_a_series_came_from() -> None:
    s = Store(None)
    mk = [Metric("n", 0, "metric", st, {"loss": v}, 0.0, recognizer="lightning")
          for st, v in ((1, 3.0), (2, 2.0), (2, 1.5), (3, 1.0))]
    s.apply(mk)
    assert s.series(0, "loss") == ([1, 2, 3], [3.0, 1.5, 1.0])
    assert s.series_source["loss"] == ("lightning", "step")
    drawn = chart_rows(ChartView(), [0], s.series, 60, 12, s.series_source["loss"])
    rows, plotted = drawn.rows, drawn.plotted
    assert rows[0][0][0].startswith("loss by step (PyTorch Lightning)") and plotted == {0: 3}


def test_chart_titles() -> None:
    assert chart_title("loss", False, None) == "loss by step "
    assert chart_title("loss", True, ("hf_trainer", "epoch")) == \
        "loss (log) by epoch (Hugging Face Trainer) "
    assert "by count: lines had no step" in chart_title("loss", False, ("generic", "count"))


def test_a_past_run_is_drawn_dimmed_beneath() -> None:
    rows = chart_rows(ChartView(), [0], lambda r, n: ([1, 2], [2.0, 1.0]), 40, 10,
                      past=[([1.0, 2.0, 3.0], [3.0, 2.5, 2.0])]).rows
    assert rows[0][-1] == ("past run", -2)
    styles = {style for row in rows[1:-2] for _, style in row[1:]}
    assert -2 in styles and 0 in styles


def test_recorded_points_read_back_and_print(tmp_path: Path) -> None:
    ms = [*read("hf_trainer.txt")[:3],
          Metric("m", 1, "metric", 4, {"loss": 0.5}, 9.0, text="@ddptui")]
    store = Store(tmp_path)
    store.apply(ms)
    store.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    foreign = ['{"rank": null, "loss": 1.0}', '{"rank": 0, "time": "now", "loss": 1.0}']
    found = list(points([*lines, "{torn", *foreign]))  # the foreign records are passed over
    assert [(p.name, p.recognizer, p.step_kind) for p in found][:3] == [
        ("loss", "hf_trainer", "epoch"), ("grad_norm", "hf_trainer", "epoch"),
        ("learning_rate", "hf_trainer", "epoch")]
    assert found[-1].recognizer == "ddptui" and found[-1].step == 4
    assert series_of(found, "loss") == {0: ([0.02, 0.04, 0.06], [3.906, 3.907, 3.897]),
                                        1: ([4.0], [0.5])}
    js = [json.loads(t) for t in as_text(found, "json")]
    assert js[0] == {"node": "n", "rank": 0, "step": 0.02, "step_kind": "epoch", "name": "loss",
                     "value": 3.906, "recognizer": "hf_trainer", "time": 0.0}
    csv_lines = list(as_text(found, "csv"))
    assert csv_lines[0] == "node,rank,step,step_kind,name,value,recognizer,time"
    assert csv_lines[1] == "n,0,0.02,epoch,loss,3.906,hf_trainer,0.0"
    assert len(list(as_text(found, "table"))) == len(found) + 1


def test_a_bad_pattern_stops_the_cli_with_exit_2_naming_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ddptui.cli import main

    path = tmp_path / "hosts.yaml"
    path.write_text(hosts("  patterns:\n    - 'loss (?P<loss>[0-9.]+'\n"))
    assert main(["--state-dir", str(tmp_path / "s"), "run", str(path), "--headless"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:4: metrics.patterns[0]: is not a regular expression" in err


def test_logs_metrics_needs_a_run_that_recorded_some(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ddptui.cli import main

    assert main(["--state-dir", str(tmp_path), "logs", "--metrics"]) == 2
    assert main(["--state-dir", str(tmp_path), "logs", "nope", "--metrics", "--json"]) == 2
    assert main(["--state-dir", str(tmp_path), "logs", "nope", "--csv"]) == 2
    assert "needs a run id" in capsys.readouterr().err
