"""Real output, recorded raw on an H100 and in CPU DDP (tests/data/metrics-gpu/, its README
says how), taken through what a node does with it: the tee cuts each rank's file into lines
and bar states (``bar_states.cut``), each behind the rank's prefix (a bar state with a CR
right after it); the follower parses that ``node.log`` text (``ingest.parse_chunk``) and scans
it (``Scanner``). What comes out is compared with what the raw file says, parsed here on its
own (``ast.literal_eval`` of the Trainer's dicts, a regex over tqdm's states), so that every
value the library printed is a point, under its name, at the step the line shows.

Also the composed samples of the stacks that need GPUs or data (tests/data/metrics/*.txt,
each built from its project's format strings): the lines the earlier samples lacked.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ddptui.events import LogLine, Metric
from ddptui.ingest import parse_chunk
from ddptui.metrics.scan import Scanner
from ddptui.nodelog import NodeLogParser
from ddptui.nodeprog.bar_states import cut

GPU = Path(__file__).parent / "data" / "metrics-gpu"
DATA = Path(__file__).parent / "data" / "metrics"


def raw(name: str) -> str:
    """A recorded file as the tee opens a rank's file: newlines as written, bad bytes replaced."""
    with open(GPU / name, errors="replace", newline="") as f:
        return f.read()


def tee(text: str, rank: int) -> str:
    """``text`` as the tee copies a finished rank's file into node.log (one read: the files
    are far below its CHUNK): whole pieces behind the prefix, then the unfinished rest."""
    block, rest, _, _ = cut(text, False)
    if rest.rstrip("\r"):
        block += rest.rstrip("\r") + "\n"
    header = f"[ddptui {rank} {rank}] "
    return "".join(header + piece + "\n" for piece in block.split("\n")[:-1])


def node_metrics(*files: tuple[str, int]) -> list[Metric]:
    """The metrics the follower makes of a node.log holding ``files`` (name, rank), in order."""
    log = "".join(tee(raw(name), rank) for name, rank in files)
    events = parse_chunk(NodeLogParser("n"), log.encode(), 0.0)
    return [e for e in Scanner("n").scan(events) if isinstance(e, Metric)]


def test_the_tee_keeps_bar_states_apart_behind_the_prefix() -> None:
    log = tee(raw("h100-lightning-gpu-tqdm.stdout"), 0)
    states = [t for t in log.split("\n") if t.startswith("[ddptui 0 0] \rEpoch ")]
    assert len(states) > 120 and "\r" not in "".join(s[14:] for s in states)


# -- Lightning's TQDMProgressBar: every refresh a state; one step drawn twice, first with the
# postfix of the step before (tqdm redraws on n, then on set_postfix).
_STATE = re.compile(r"^Epoch (\d+): +\d+%\|[^|]*\| *(\d+)/(\d+) \[[^\]]*?it/s(?:, ([^\]]*))?\]")


def printed_states(text: str) -> list[tuple[int, dict[str, float]]]:
    """(epoch x total + n, the postfix but v_num) of each Epoch bar state with a postfix, a
    state that repeats the one before left out (a redraw shows no new value)."""
    out: list[tuple[int, dict[str, float]]] = []
    last: dict[str, float] | None = None
    for piece in re.split(r"[\r\n]+", text):
        m = _STATE.match(piece.strip())
        if m is None or not m[4]:
            continue
        post = dict(kv.split("=") for kv in m[4].split(", "))
        values = {k: float(v) for k, v in post.items() if k != "v_num"}
        if values != last:
            out.append((int(m[1]) * int(m[3]) + int(m[2]), values))
        last = values
    return out


@pytest.mark.parametrize(("files", "steps"), [
    ((("h100-lightning-gpu-tqdm.stdout", 0), ("h100-lightning-gpu-tqdm.stderr", 0)), 60),
    ((("lightning-cpuddp-rank0.stdout", 0), ("lightning-cpuddp-rank0.stderr", 0),
      ("lightning-cpuddp-rank1.stderr", 1)), 30),
])
def test_lightning_tqdm_every_value_drawn_is_a_point_at_its_step(
        files: tuple[tuple[str, int], ...], steps: int) -> None:
    printed = printed_states(raw(files[0][0]))
    got = node_metrics(*files)
    assert {m.recognizer for m in got} == {"lightning"} and {m.rank for m in got} == {0}
    assert all(m.step_kind == "step" for m in got)
    assert [(m.step, m.values) for m in got] == printed
    # each step's last drawing holds its loss; every step of both epochs is there
    last = {step: v["train_loss"] for step, v in printed}
    assert {m.step: m.values["train_loss"] for m in got} == last
    assert sorted(last) == list(range(1, steps + 1))
    # val_loss is drawn after each validation, at the epoch's last step
    vals = [(m.step, m.values["val_loss"]) for m in got if "val_loss" in m.values]
    assert vals[0][0] == steps // 2 and vals[-1][0] == steps
    text = raw(files[0][0])
    for name in ("train_loss", "val_loss"):
        seen = {float(v) for v in re.findall(rf"{name}=([0-9.e-]+)", text)}
        assert {m.values[name] for m in got if name in m.values} == seen


# -- Lightning's RichProgressBar. Into a pipe, rich draws once, at the end, its postfix wrapped
# onto lines of their own; told it writes to a terminal (TTY_COMPATIBLE=1, as ddptui's ranks
# are), it redraws in place at each refresh: a CR, erase codes, the rows, a wrapped postfix
# below its row.
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def drawn_states(text: str) -> list[tuple[int, dict[str, float]]]:
    """(epoch x total + n, every *_loss) of each drawing of the Epoch row, read here on its
    own: control codes out, a drawing is what lies between two CRs (its wrapped postfix on
    the lines below included), one that repeats the values before it left out."""
    out: list[tuple[int, dict[str, float]]] = []
    last: dict[str, float] | None = None
    for drawn in re.split(r"\r(?!\n)", _CONTROL.sub("", text)):
        m = re.search(r"Epoch (\d+)/\d+ .*? (\d+)/(\d+) ", drawn)
        values = {k: float(v) for k, v in re.findall(r"(\w+_loss): ([0-9.]+)", drawn)}
        if m is None or not values or values == last:
            continue
        out.append((int(m[1]) * int(m[3]) + int(m[2]), values))
        last = values
    return out


def test_lightning_rich_on_a_terminal_every_drawing_is_a_point_at_its_step() -> None:
    text = raw("lightning-cpu-rich-tty.stdout")
    drawn = drawn_states(text)
    assert len(drawn) > 10 and any("val_loss" in v for _, v in drawn)
    assert "\n" in text.split("train_loss")[0][-80:]  # the postfix is wrapped below its row
    got = node_metrics(("lightning-cpu-rich-tty.stdout", 0))
    assert {m.recognizer for m in got} == {"lightning"} and {m.step_kind for m in got} == {"step"}
    assert [(m.step, m.values) for m in got] == drawn


def test_lightning_rich_into_a_pipe_gives_no_wrong_point() -> None:
    assert node_metrics(("h100-lightning-gpu-rich.stdout", 0)) == []


# -- Hugging Face Trainer: ProgressCallback.on_log's str(logs) on stdout, the bar on stderr.
@pytest.mark.parametrize("files", [
    (("h100-trainer-gpu.stdout", 0), ("h100-trainer-gpu.stderr", 0)),
    (("trainer-cpuddp-rank0.stdout", 0), ("trainer-cpuddp-rank0.stderr", 0),
     ("trainer-cpuddp-rank1.stderr", 1)),
])
def test_trainer_every_dict_is_a_point_with_every_value(
        files: tuple[tuple[str, int], ...]) -> None:
    dicts = [ast.literal_eval(t) for t in raw(files[0][0]).splitlines() if t.startswith("{'")]
    assert len(dicts) == 9 and "train_loss" in dicts[-1]
    got = node_metrics(*files)
    assert {m.recognizer for m in got} == {"hf_trainer"} and {m.rank for m in got} == {0}
    assert [(m.step, m.step_kind, m.values) for m in got] == [
        (float(d["epoch"]), "epoch", {k: float(v) for k, v in d.items() if k != "epoch"})
        for d in dicts]


def test_the_trainer_bar_and_its_warnings_are_no_metric() -> None:
    # "[transformers] `loss_type=None` ... the default loss: `ForCausalLMLoss`" holds "loss"
    assert node_metrics(("h100-trainer-gpu.stderr", 0)) == []


# -- The composed samples: lines the earlier samples left out.
def sample(name: str) -> list[Metric]:
    lines = (DATA / name).read_text().splitlines()[1:]
    out = Scanner("n").scan([LogLine("n", t, 0.0, rank=0) for t in lines])
    return [e for e in out if isinstance(e, Metric)]


def test_every_composed_sample_says_so_and_names_commit_and_lines() -> None:
    for name in ("nanogpt", "torchtitan", "megatron", "fairseq", "fairseq_json",
                 "pytorch_mnist", "pytorch_wlm"):
        head = (DATA / f"{name}.txt").read_text().splitlines()[0]
        assert "composed from the format strings, not recorded" in head, name
        assert re.search(r"[0-9a-f]{40}", head) and re.search(r"\.py:\d+", head), name


def test_torchtitan_colours_grad_norm_and_its_validate_line() -> None:
    got = sample("torchtitan.txt")
    assert [m.step for m in got] == [1, 10, 20, 30, 40, 40]
    assert got[2].values == {"loss": 8.00213, "grad_norm": 2.3456, "memory": 48.22,
                             "tps": 12401.0, "tflops": 719.58, "mfu": 72.76}
    assert "mfu" not in got[3].values and got[3].values["tflops"] == 1719.58  # "N/A", "1,719"
    assert got[4].values["loss"] == 7.1  # no colours (NoColor)
    assert got[5].values == {"validate loss": 7.4321, "validate memory": 48.3,
                             "validate tps": 30512.0}


def test_megatron_number_formats_and_its_validation_line() -> None:
    got = sample("megatron.txt")
    assert got[1].values == {
        "consumed samples": 1280.0, "elapsed time per iteration (ms)": 790.1,
        "throughput per GPU (TFLOP/s/GPU)": 412.3,
        "learning rate": 3e-05, "lm loss": 9.123456, "loss scale": 1.0, "grad norm": 4.21}
    assert (got[2].step, got[2].values) == (20, {"lm loss validation": 8.912345,
                                                 "lm loss validation ppl": 7423.048})
    assert len(got) == 3  # the rules of '-' around it are nothing


def test_fairseq_end_of_epoch_stats_are_named_by_their_tag_in_both_formats() -> None:
    simple, js = sample("fairseq.txt"), sample("fairseq_json.txt")
    assert [m.step for m in simple] == [100, 200, 1000, 1000] == [m.step for m in js]
    for a, b in zip(simple, js, strict=True):
        assert a.values == b.values
    assert simple[1].values["lr"] == 5e-05  # "{:g}"
    assert simple[2].values["valid_best_loss"] == 7.654
    assert simple[3].values["train_loss"] == 8.321 and "loss" not in simple[3].values


def test_word_language_model_test_loss_is_not_a_training_loss() -> None:
    got = sample("pytorch_wlm.txt")
    assert [m.recognizer for m in got] == ["pytorch_examples"] * 5
    assert (got[3].step, got[3].values["lr"]) == (1 + 200 / 2983, 5.0)
    assert (got[4].step_kind, got[4].values) == ("count", {"test loss": 5.5, "test ppl": 244.99})


def test_nanogpt_iter_lines_before_mfu_settles() -> None:
    got = sample("nanogpt.txt")
    assert got[1].values == {"loss": 4.2649, "time": 12054.83, "mfu": -100.0}
    assert [m.step for m in got] == [0, 0, 10, 20, 30, 250, 250]
