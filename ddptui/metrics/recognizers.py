"""The metric lines real training stacks print, each read by one recognizer.

A recognizer is a name (what the hosts file's ``metrics.parse`` lists), a label (what the
dashboard says a series came from), the words without which its expression cannot match (so a
line is looked at only when one of them is in it: a substring test in C), and a function from a
line to a :class:`Reading`, or None. Each format is taken from the stack's own source; the
samples under ``tests/data/metrics/`` name the file and the version, and the tests read them.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

#: A number as the stacks print them: 1, -0.5, 4.9e-05, .3, nan, inf, 1,234 (torchtitan's tps).
NUM = r"[-+]?(?:\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)"
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True, slots=True)
class Reading:
    """What one line says: its step (None: the rank's count of such lines stands in), what
    that step counts, and each series' value by the name the stack gives it."""

    step: int | float | None
    step_kind: str
    values: dict[str, float]


@dataclass(frozen=True, slots=True)
class Recognizer:
    name: str
    label: str
    gates: tuple[str, ...]
    read: Callable[[str], Reading | None]
    #: A progress bar: it is drawn again as it moves, first with the last step's values (tqdm
    #: redraws on ``n`` and again on ``set_postfix``), so unchanged values are no new point.
    redraws: bool = False


def number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _pairs(pairs: list[tuple[str, str]], skip: tuple[str, ...] = ()) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, text in pairs:
        value = number(text)
        if value is not None and name not in skip:
            out[name.strip()] = value
    return out


def _step(step: int | float | None, kind: str, values: dict[str, float]) -> Reading | None:
    return Reading(step, kind, values) if values else None


# -- Hugging Face Trainer: ProgressCallback.on_log writes str(logs), numbers as "%.4g" strings
# in 4.4x and later, bare floats before; eval_* dicts and the final train_* one likewise.
_HF_RE = re.compile(r"\{'[a-z_]+': .*\}\s*$")
_HF_PAIR = re.compile(rf"'(\w+)': '?({NUM})'?(?=[,}}])")


def hf_trainer(line: str) -> Reading | None:
    m = _HF_RE.search(line)
    if m is None:
        return None
    values = _pairs(_HF_PAIR.findall(m.group()), ("total_flos",))
    if not any("loss" in k or k.startswith(("eval_", "train_")) for k in values):
        return None
    step = values.pop("step", None)
    epoch = values.pop("epoch", None)
    if step is not None:
        return _step(int(step), "step", values)
    return _step(epoch, "epoch" if epoch is not None else "count", values)


# -- PyTorch Lightning's progress bars. tqdm (TQDMProgressBar): "Epoch 0:  50%|###  | 5/10
# [00:01<00:01, 4.00it/s, v_num=3, train_loss=0.123]"; rich (RichProgressBar): "Epoch 0/1 ━━━
# 5/10 0:00:01 • 0:00:01 4.00it/s v_num: 3 train_loss: 0.123", in its theme's colours, and
# past the console's width its cells wrapped onto the lines below, which the node's tee joins
# to the row in order (another column's "0:00:05" may come between two pairs). The step:
# epoch x total + n.
_TQDM_RE = re.compile(r"Epoch (\d+):.*?(\d+)/(\d+|\?) \[[^\]]*?, ([^\]]*)\]")
_RICH_RE = re.compile(r"Epoch (\d+)/?\d*\s.*?(\d+)/(\d+|\?)\s(.*)")
_EQ_PAIR = re.compile(rf"([\w/.-]+)=({NUM})(?=,|$)")
_COLON_PAIR = re.compile(rf"([\w/.-]+): ({NUM})(?=\s|$)")


def lightning(line: str) -> Reading | None:
    m = _TQDM_RE.search(line)
    pairs = _EQ_PAIR.findall(m.group(4)) if m is not None else []
    if m is None:
        if "\x1b" in line:
            line = _ANSI_RE.sub("", line)
        m = _RICH_RE.search(line)
        if m is None:
            return None
        pairs = _COLON_PAIR.findall(m.group(4))
    values = _pairs(pairs, ("v_num",))
    epoch, n, total = int(m.group(1)), int(m.group(2)), m.group(3)
    if total == "?":
        return _step(n, "step", values) if epoch == 0 else _step(None, "count", values)
    return _step(epoch * int(total) + n, "step", values)


# -- nanoGPT train.py: f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu
# {running_mfu*100:.2f}%" and f"step {iter_num}: train loss {...:.4f}, val loss {...:.4f}".
_NANO_ITER = re.compile(rf"\biter (\d+): loss ({NUM}), time ({NUM})ms(?:, mfu ({NUM})%)?")
_NANO_EVAL = re.compile(rf"\bstep (\d+): train loss ({NUM}), val loss ({NUM})")


def nanogpt(line: str) -> Reading | None:
    m = _NANO_ITER.search(line)
    if m is not None:
        values = {"loss": float(m[2]), "time": float(m[3])}
        if m[4] is not None:
            values["mfu"] = float(m[4])
        return Reading(int(m[1]), "step", values)
    m = _NANO_EVAL.search(line)
    if m is not None:
        return Reading(int(m[1]), "step", {"train loss": float(m[2]), "val loss": float(m[3])})
    return None


# -- torchtitan components/metrics.py MetricsProcessor.log: f"{color.red}step: {step:2}
# {color.green}loss: {global_avg_loss:8.5f}  {color.orange}grad_norm: {grad_norm:7.4f}
# {color.turquoise}memory: {..:5.2f}GiB({..:.2f}%)  {color.blue}tps: {round(tps):,}  {color.cyan}
# tflops: {tflops:,.2f}  {color.magenta}mfu: {mfu_str}{color.reset}" (v0.1.0: loss 7.4f, no
# grad_norm; mfu "N/A" under quantization), and .log_validation: f"{color.yellow}validate step:
# {step:2}  {color.green}loss: {loss:7.4f}  ...memory...  tps: ..." (its series: "validate ...",
# not the training loss). Colours are SGR codes, 24-bit ones too (tools/utils.py Color).
_TITAN_RE = re.compile(rf"\b(validate )?step:\s*(\d+)\s+loss:\s*({NUM})(.*)")
_TITAN_PAIR = re.compile(rf"(\w+):\s*({NUM})")


def torchtitan(line: str) -> Reading | None:
    if "\x1b" in line:
        line = _ANSI_RE.sub("", line)
    m = _TITAN_RE.search(line)
    if m is None:
        return None
    values = {"loss": float(m[3])}
    values.update(_pairs(_TITAN_PAIR.findall(m[4])))
    if m[1]:
        values = {m[1] + k: v for k, v in values.items()}
    return Reading(int(m[2]), "step", values)


# -- Megatron-LM training/training.py training_log: " [%Y-%m-%d %H:%M:%S.%f] iteration {:8d}/
# {:8d} | consumed samples: {:12d} | elapsed time per iteration (ms): {:.1f} | learning rate:
# {:.6E} | global batch size: {:5d} | lm loss: {:.6E} | loss scale: {:.1f} | grad norm: {:.3f}
# | number of skipped iterations: {:3d} | number of nan iterations: {:3d} |"; and
# evaluate_and_print_results: " validation loss at iteration N on validation set | lm loss
# value: {:.6E} | lm loss PPL: {:.6E} | ", its series named as its TensorBoard ones
# ("lm loss validation", "lm loss validation ppl").
_MEGA_RE = re.compile(r"\biteration\s+(\d+)/\s*\d+\s*\|(.*)")
_MEGA_PAIR = re.compile(rf"\s*([^|:]+?):\s*({NUM})\s*(?=\||$)")
# "consumed samples" is kept, a series: the axis by samples reads it (ddptui.metrics.align)
_MEGA_SKIP = ("number of skipped iterations", "skipped samples", "global batch size")
_MEGA_NAN = "number of nan iterations"
#: The series of Megatron's ``number of nan iterations``, a point only where it is above 0:
#: the chart marks those steps as NaN (``ddptui.insight.marks``), as the loss printed there
#: leaves those iterations out.
NAN_COUNT = "nan iterations"
_MEGA_VALID = re.compile(r"\bvalidation(-[\w-]+)? loss at iteration (\d+)\b[^|]*\|(.*)")
_MEGA_VALUE = re.compile(rf"\s*([^|:]+?) (value|PPL): ({NUM})\s*(?=\||$)")


def megatron(line: str) -> Reading | None:
    m = _MEGA_RE.search(line)
    if m is not None:
        values = _pairs(_MEGA_PAIR.findall(m[2]), _MEGA_SKIP)
        nans = values.pop(_MEGA_NAN, 0.0)
        if nans > 0:
            values[NAN_COUNT] = nans
        return _step(int(m[1]), "step", values)
    m = _MEGA_VALID.search(line)
    if m is None:
        return None
    suffix = m[1] or ""
    pairs = [(f"{key} validation{suffix}" + (" ppl" if kind == "PPL" else ""), text)
             for key, kind, text in _MEGA_VALUE.findall(m[3])]
    return _step(int(m[2]), "step", _pairs(pairs))


# -- fairseq logging/progress_bar.py. simple: "epoch 001:    100 / 1000 loss=2.345, ppl=5.08,
# ..., num_updates=100, ..." (SimpleProgressBar.log, "{}:  {:5d} / {:d} {}"), and .print's
# "epoch 001 | loss 2.3 | ... | num_updates 100" and "epoch 001 | valid on 'valid' subset |
# loss ...", behind the logger's "| INFO | train | " (the tag: the end-of-epoch train stats
# are "train_loss", not the running "loss"); json: {"epoch": 1, "update": 0.25, "loss":
# "2.345", ...} (JsonProgressBar: stats as "{:g}" strings, .print's keys tag + "_" + key).
_FS_INNER = re.compile(r"\bepoch (\d+):\s+(\d+) / (\d+) (.*)")
_FS_PRINT = re.compile(r"(?:\| (\w+) \| )?\bepoch (\d+)(?: \| valid on '(\w+)' subset)? \| (.*)")
_FS_PIPE = re.compile(rf"(\w+) ({NUM})(?= \||$)")
_FS_JSON = re.compile(r"\{\"epoch\": .*\}")
_FS_JSON_SKIP = ("epoch", "update", "num_updates")


def fairseq(line: str) -> Reading | None:
    m = _FS_INNER.search(line)
    if m is not None:
        values = _pairs(_EQ_PAIR.findall(m[4].replace(", ", ",")))
        updates = values.pop("num_updates", None)
        if updates is not None:
            return _step(int(updates), "step", values)
        return _step(int(m[1]) - 1 + int(m[2]) / max(1, int(m[3])), "epoch", values)
    m = _FS_PRINT.search(line)
    if m is not None:  # named as JsonProgressBar.print names them: tag + "_" + key
        tag = m[3] or m[1]
        prefix = f"{tag}_" if tag else ""
        values = {prefix + k: v for k, v in _pairs(_FS_PIPE.findall(m[4])).items()}
        updates = values.pop(prefix + "num_updates", None)
        if updates is not None:
            return _step(int(updates), "step", values)
        return _step(float(m[2]), "epoch", values)
    m = _FS_JSON.search(line)
    if m is None:
        return None
    try:
        obj = json.loads(m.group())
    except ValueError:
        return None
    counter = next((k for k in obj if k.endswith("num_updates")), "num_updates")
    values = _pairs([(k, str(v)) for k, v in obj.items()], (*_FS_JSON_SKIP, counter))
    updates = number(str(obj.get(counter, "")))
    if updates is not None:
        return _step(int(updates), "step", values)
    epoch = number(str(obj.get("epoch", "")))
    update = number(str(obj.get("update", "")))
    return _step(update if update is not None else epoch, "epoch", values)


# -- pytorch/examples. mnist/main.py: "Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}" and
# "Test set: Average loss: {:.4f}, Accuracy: ..."; word_language_model/main.py: "| epoch {:3d}
# | {:5d}/{:5d} batches | lr {:02.2f} | ms/batch {:5.2f} | loss {:5.2f} | ppl {:8.2f}" and
# "| end of epoch {:3d} | time: {:5.2f}s | valid loss {:5.2f} | valid ppl {:8.2f}", and after
# the last epoch "| End of training | test loss {:5.2f} | test ppl {:8.2f}" (no epoch: a count).
_MNIST_RE = re.compile(rf"Train Epoch: (\d+) \[(\d+)/(\d+) \([^)]*\)\]\s+Loss: ({NUM})")
_MNIST_TEST = re.compile(rf"Test set: Average loss: ({NUM})")
_WLM_RE = re.compile(r"\| epoch\s+(\d+) \|\s*(\d+)/\s*(\d+) batches \|(.*)")
_WLM_END = re.compile(r"\| end of epoch\s+(\d+) \|(.*)")
_WLM_PAIR = re.compile(rf"\s*([a-z/ ]+?):? ({NUM})s?\s*(?=\||$)")
_WLM_TEST = re.compile(r"\| End of training \|(.*)")


def pytorch_examples(line: str) -> Reading | None:
    m = _MNIST_RE.search(line)
    if m is not None:
        epoch = int(m[1]) - 1 + int(m[2]) / max(1, int(m[3]))
        return Reading(epoch, "epoch", {"loss": float(m[4])})
    m = _MNIST_TEST.search(line)
    if m is not None:
        return Reading(None, "count", {"test loss": float(m[1])})
    m = _WLM_RE.search(line)
    if m is not None:
        epoch = int(m[1]) - 1 + int(m[2]) / max(1, int(m[3]))
        return _step(epoch, "epoch", _pairs(_WLM_PAIR.findall(m[4])))
    m = _WLM_END.search(line)
    if m is not None:
        return _step(float(m[1]), "epoch", _pairs(_WLM_PAIR.findall(m[2]), ("time",)))
    m = _WLM_TEST.search(line)
    if m is not None:
        return _step(None, "count", _pairs(_WLM_PAIR.findall(m[1])))
    return None


# -- Anything else that prints a loss: "loss: X", "loss=X", "loss X", with a step when the
# line names one ("step 10", "iter=10", "global_step: 10").
_LOSS_RE = re.compile(rf"(?<![\w-])loss\s*[:=]?\s*({NUM})(?![\w.])", re.I)
_STEP_RE = re.compile(r"(?<![\w-])(?:global_step|step|iter|iteration)\s*[:=]?\s*(\d+)", re.I)


def generic(line: str) -> Reading | None:
    m = _LOSS_RE.search(line)
    if m is None:
        return None
    value = number(m[1])
    if value is None:
        return None
    s = _STEP_RE.search(line)
    if s is not None:
        return Reading(int(s[1]), "step", {"loss": value})
    return Reading(None, "count", {"loss": value})


#: Every built-in recognizer, in the order a line is tried: the generic one last.
BUILT_IN: tuple[Recognizer, ...] = (
    Recognizer("hf_trainer", "Hugging Face Trainer", ("{'",), hf_trainer),
    Recognizer("lightning", "PyTorch Lightning", ("Epoch ",), lightning, redraws=True),
    Recognizer("nanogpt", "nanoGPT", ("iter ", "train loss"), nanogpt),
    Recognizer("torchtitan", "torchtitan", ("step:",), torchtitan),
    Recognizer("megatron", "Megatron-LM", ("iteration ", "validation"), megatron),
    Recognizer("fairseq", "fairseq", ("epoch ", '{"epoch"'), fairseq),
    Recognizer("pytorch_examples", "PyTorch examples", ("Train Epoch", "Test set", "| epoch",
                                                        "| end of epoch", "| End of training"),
               pytorch_examples),
    Recognizer("generic", "a loss line", ("loss", "Loss"), generic),
)
NAMES: tuple[str, ...] = tuple(r.name for r in BUILT_IN)
#: What every built-in line holds (loss, Loss, lm loss, train_loss, eval_loss): a read without
#: it is looked at no more. One word, because each is a scan of the whole read (a 3-letter
#: word at about 3 ns a character, bench/ingest.py --recognizers): a Lightning bar that shows
#: no loss, or a LOSS in capitals, needs a pattern of the hosts file's own.
GATES: tuple[str, ...] = ("oss",)
LABELS: dict[str, str] = {r.name: r.label for r in BUILT_IN} | {"ddptui": "@ddptui records"}


def user_pattern(index: int, pattern: re.Pattern[str]) -> Recognizer:
    """A hosts file's ``metrics.patterns[index]``: its ``step`` group is the step, each other
    named group a series. No gate: any line may match it."""

    def read(line: str) -> Reading | None:
        m = pattern.search(line)
        if m is None:
            return None
        values: dict[str, float] = {}
        step: int | float | None = None
        for name, text in m.groupdict().items():
            value = None if text is None else number(text)
            if value is None:
                continue
            if name == "step":
                step = int(value) if value.is_integer() else value
            else:
                values[name] = value
        return _step(step, "step" if step is not None else "count", values)

    return Recognizer(f"patterns[{index}]", f"pattern {pattern.pattern}", (), read)


def pattern_problem(text: str) -> str | None:
    """Why ``text`` cannot be a ``metrics.patterns`` entry, in the hosts file's words."""
    try:
        compiled = re.compile(text)
    except re.error as e:
        return (f"is not a regular expression ({e}); write one with named groups, e.g. "
                r"'step (?P<step>\d+) acc (?P<acc>[0-9.]+)'.")
    if not set(compiled.groupindex) - {"step"}:
        return ("has no named group for a value; name each number to chart, e.g. "
                r"'acc (?P<acc>[0-9.]+)' (a group named `step` gives the step).")
    return None

