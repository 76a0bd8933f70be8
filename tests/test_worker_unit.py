"""The worker's pure parts: flags, placement, data order, metric lines, formulas, schedule."""

from __future__ import annotations

import ast
import io
import itertools
import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from ddptui_worker import allreduce, data, devices, metrics, optim, snapshot
from ddptui_worker.cli import UsageError, parse_args
from ddptui_worker.faults import Faults, InjectedCrash

from ddptui.events import METRIC_MARK, LogLine, Metric, parse_metric
from ddptui.nodelog import NodeLogParser

pytestmark = pytest.mark.timeout(60)

WORKER = Path(__file__).resolve().parent.parent / "worker"


# -- flags ---------------------------------------------------------------------------------
def test_defaults_are_a_train_demo() -> None:
    a = parse_args([])
    assert a.mode == "train"
    assert (a.d_model, a.n_layers, a.n_heads, a.seq_len, a.batch_size) == (64, 2, 4, 64, 16)
    assert a.snapshot_dir == "ckpt"
    assert a.local_rank is None and not a.number_lines


@pytest.mark.parametrize("flag", ["--local-rank=3", "--local_rank=3"])
def test_legacy_launcher_local_rank_is_accepted(flag: str) -> None:
    assert parse_args(["allreduce", flag]).local_rank == 3


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--bogus", "1"], "unrecognized arguments: --bogus"),
        (["walk"], "unknown mode 'walk'"),
        (["--steps", "0"], "--steps"),
        (["--d-model", "30", "--n-heads", "4"], "not divisible"),
        (["--crash-rank", "1"], "go together"),
        (["allreduce", "--min-bytes", "10", "--max-bytes", "5"], "--min-bytes"),
    ],
)
def test_bad_flags_raise_one_line_usage_errors(argv: list[str], needle: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_args(argv)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


# -- devices -------------------------------------------------------------------------------
def test_one_gpu_per_process() -> None:
    assert [devices.gpu_ids(r, 8, 8) for r in range(8)] == [[r] for r in range(8)]


def test_process_spanning_several_gpus() -> None:
    assert devices.gpu_ids(0, 2, 8) == [0, 1, 2, 3]
    assert devices.gpu_ids(1, 2, 8) == [4, 5, 6, 7]
    assert devices.gpu_ids(1, 3, 8) == [2, 3]  # 8 // 3 = 2 each, GPUs 6 and 7 idle


def test_cpu_only_and_oversubscribed() -> None:
    assert devices.gpu_ids(1, 2, 0) == []
    with pytest.raises(devices.PlacementError):
        devices.gpu_ids(0, 4, 2)
    with pytest.raises(devices.PlacementError):
        devices.gpu_ids(1, 2, 1)
    assert devices.gpu_ids(0, 4, 1) == [0]  # torchrun --virtual-local-rank: its own GPU only


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_autocast_only_on_gpu() -> None:
    from ddptui_worker.train import autocast_for

    with autocast_for(torch.device("cpu"))():
        assert not torch.is_autocast_enabled("cpu")
    ctx = autocast_for(torch.device("cuda", 0))()
    assert isinstance(ctx, torch.autocast) and ctx.fast_dtype == torch.bfloat16
    with pytest.raises(devices.PlacementError):
        devices.gpu_ids(2, 2, 4)


def test_backend_and_ddp_device_ids_follow_the_placement() -> None:
    assert devices.backend_for([]) == "gloo"
    assert devices.backend_for([3]) == "nccl"
    assert devices.ddp_device_ids([3]) == [3]
    assert devices.ddp_device_ids([2, 3]) is None  # a split module: no device_ids
    assert devices.devices_for([]) == [torch.device("cpu")]
    assert devices.devices_for([4, 5]) == [torch.device("cuda", 4), torch.device("cuda", 5)]


def test_layers_are_split_in_contiguous_balanced_chunks() -> None:
    assert devices.layer_devices(4, 1) == [0, 0, 0, 0]
    assert devices.layer_devices(4, 2) == [0, 0, 1, 1]
    assert devices.layer_devices(6, 3) == [0, 0, 1, 1, 2, 2]
    assert devices.layer_devices(3, 2) == [0, 0, 1]


def test_env_reads_torchrun_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
                 "TORCHELASTIC_RESTART_COUNT": "2"}.items():
        monkeypatch.setenv(k, v)
    e = devices.Env.read()
    assert (e.rank, e.local_rank, e.world_size, e.local_world_size, e.attempt) == (5, 1, 8, 4, 2)
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "")
    e = devices.Env.read(legacy_local_rank=3)
    assert (e.local_rank, e.attempt) == (3, 0)


# -- data ----------------------------------------------------------------------------------
def test_stdlib_corpus_is_deterministic_and_bounded() -> None:
    files = data.stdlib_files()
    assert files == sorted(files) and files
    a, b = data.stdlib_text(50_000), data.stdlib_text(50_000)
    assert a == b and len(a) == 50_000


def test_missing_and_empty_data_files(tmp_path: Path) -> None:
    with pytest.raises(data.DataError, match="not found"):
        data.read_corpus(str(tmp_path / "nope.txt"), 100)
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(data.DataError, match="empty"):
        data.read_corpus(str(tmp_path / "empty.txt"), 100)


def _shards(tokens: torch.Tensor, rank: int, world: int, seed: int = 1) -> data.Shards:
    return data.Shards(tokens, seq_len=8, batch_size=4, rank=rank, world_size=world, seed=seed)


def test_shards_are_disjoint_deterministic_and_reshuffled_each_epoch() -> None:
    tokens = data.to_tokens(bytes(range(256)) * 4)
    r0, r1 = _shards(tokens, 0, 2), _shards(tokens, 1, 2)
    e0 = [w for b in r0.batches(0) for w in b]
    e1 = [w for b in r1.batches(0) for w in b]
    assert not set(e0) & set(e1)
    assert r0.batches(0) == _shards(tokens, 0, 2).batches(0)
    assert r0.batches(1) != r0.batches(0)
    assert r0.batches(0) != _shards(tokens, 0, 2, seed=2).batches(0)
    assert len(r0.batches(0)) == r0.steps_per_epoch == (1023 // 8) // 2 // 4


def test_batches_are_shifted_windows() -> None:
    tokens = data.to_tokens(bytes(range(100)))
    x, y = _shards(tokens, 0, 1).batch([0, 2])
    assert x[0].tolist() == list(range(8)) and y[0].tolist() == list(range(1, 9))
    assert x[1].tolist() == list(range(16, 24))


def test_held_out_split_and_world_too_large_for_the_data() -> None:
    tokens = data.to_tokens(b"x" * 1000)
    train, held = data.split(tokens, 0.1)
    assert (len(train), len(held)) == (900, 100)
    data.check_fits(_shards(train, 0, 2), _shards(held, 0, 2))  # 12 eval windows: fits
    with pytest.raises(data.DataError, match="world size 4 is larger than the data"):
        data.check_fits(_shards(train, 0, 4), _shards(held, 0, 4))


# -- metric lines --------------------------------------------------------------------------
def _parse(line: str, rank: int = 1) -> Metric:
    events = NodeLogParser("n0").feed(f"[ddptui {rank} {rank}] {line}", 1.0)
    assert len(events) == 1 and isinstance(events[0], Metric), events
    return events[0]


def test_metric_line_is_parsed_by_ddptui() -> None:
    line = metrics.format_metric("metric", 1, 2, {"step": 7, "loss": 1.5, "lr": 1e-3,
                                                  "note": "x"})
    assert line.startswith(METRIC_MARK) and "\n" not in line
    m = _parse(line)
    assert (m.rank, m.kind, m.step, m.attempt) == (1, "metric", 7, 2)
    assert m.values["loss"] == 1.5 and m.extra["note"] == "x"
    assert parse_metric(line[len(METRIC_MARK):])["v"] == 1


def test_non_finite_values_are_not_written() -> None:
    line = metrics.format_metric("metric", 0, 0, {"loss": math.nan, "lr": math.inf, "x": 1.0})
    obj = json.loads(line[len(METRIC_MARK):])  # strict JSON: NaN would still parse, so:
    assert "NaN" not in line and "Infinity" not in line
    assert "loss" not in obj and "lr" not in obj and obj["x"] == 1.0


def test_numbered_lines_are_contiguous_across_both_kinds() -> None:
    out = io.StringIO()
    e = metrics.Emitter(rank=3, attempt=0, number_lines=True, out=out)
    e.line("hello")
    e.metric("eval", step=1, eval_loss=2.0)
    e.line("two\nlines")
    lines = out.getvalue().splitlines()
    assert lines[0] == "[seq 0] hello"
    assert lines[1].startswith(METRIC_MARK) and _parse(lines[1], 3).values["seq"] == 1
    assert lines[2:] == ["[seq 2] two", "[seq 3] lines"]
    plain = NodeLogParser("n0").feed("[ddptui 3 3] " + lines[0], 1.0)[0]
    assert isinstance(plain, LogLine) and plain.rank == 3


def test_unnumbered_lines_are_untouched() -> None:
    out = io.StringIO()
    e = metrics.Emitter(rank=0, attempt=0, out=out)
    e.line("plain")
    e.metric("start", world_size=2)
    lines = out.getvalue().splitlines()
    assert lines[0] == "plain" and '"seq"' not in lines[1]


# -- all-reduce ----------------------------------------------------------------------------
def test_message_sizes_double() -> None:
    assert allreduce.sizes(1024, 8192) == [1024, 2048, 4096, 8192]
    assert allreduce.sizes(1000, 3000) == [1000, 2000]


def test_bus_bandwidth_formula_matches_nccl_tests() -> None:
    assert allreduce.algbw_gbps(2_000_000_000, 2.0) == 1.0
    assert allreduce.busbw_gbps(10.0, 2) == pytest.approx(10.0)
    assert allreduce.busbw_gbps(10.0, 8) == pytest.approx(17.5)
    assert allreduce.busbw_gbps(10.0, 1) == 0.0


# -- schedule, faults, snapshots -----------------------------------------------------------
def test_lr_warms_up_linearly_then_decays() -> None:
    f = [optim.lr_factor(s, 10, 100) for s in range(100)]
    assert f[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert f[10] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(f[10:]))
    assert f[-1] >= optim.MIN_FACTOR and optim.lr_factor(100, 10, 100) == pytest.approx(0.1)
    assert optim.lr_factor(0, 0, 10) == pytest.approx(1.0)


def test_crash_hook_fires_only_on_the_first_attempt() -> None:
    first = Faults(rank=1, attempt=0, crash_rank=1, crash_step=5)
    with pytest.raises(InjectedCrash):
        first.before_step(5)
    first.before_step(4)
    Faults(rank=0, attempt=0, crash_rank=1, crash_step=5).before_step(5)
    Faults(rank=1, attempt=1, crash_rank=1, crash_step=5).before_step(5)


def test_straggler_delay() -> None:
    assert Faults(rank=1, attempt=0, slow_rank=1, slow_ms=200, step_sleep_ms=5).delay_s() \
        == pytest.approx(0.205)
    assert Faults(rank=0, attempt=0, slow_rank=1, slow_ms=200).delay_s() == 0


def test_snapshots_are_atomic_pruned_and_found(tmp_path: Path) -> None:
    for step in (10, 20, 30):
        snapshot.save(tmp_path, step, {"step": step, "rng": snapshot.rng_state()})
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["snapshot-00000020.pt", "snapshot-00000030.pt"]  # no tmp files left
    newest = snapshot.newest(tmp_path)
    assert newest is not None and snapshot.step_of(newest) == 30
    state = snapshot.load(newest, "cpu")
    snapshot.set_rng_state(state["rng"])
    assert state["step"] == 30
    assert snapshot.newest(tmp_path / "missing") is None


# -- the package can be shipped flat -------------------------------------------------------
def test_worker_imports_only_stdlib_torch_and_itself() -> None:
    assert not [p for p in WORKER.iterdir() if p.is_dir() and p.name != "__pycache__"]
    for path in WORKER.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                top = (node.module or "").split(".")[0]
            elif isinstance(node, ast.Import):
                top = node.names[0].name.split(".")[0]
            else:
                continue
            assert top != "ddptui", f"{path.name}: absolute import of ddptui"
            assert top == "torch" or top in _stdlib(), f"{path.name} imports {top}"


# torch does not require numpy, and these go through it: the object collectives turn
# received tensors into bytes with tensor.numpy() (worker/bytecast.py is the replacement).
NEEDS_NUMPY = frozenset({
    "numpy", "from_numpy", "broadcast_object_list", "all_gather_object", "gather_object",
    "scatter_object_list", "send_object_list", "recv_object_list",
})


def test_worker_calls_nothing_that_needs_numpy() -> None:
    for path in WORKER.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else \
                node.id if isinstance(node, ast.Name) else None
            assert name not in NEEDS_NUMPY, f"{path.name}:{node.lineno}: {name} needs numpy"


def test_bytes_and_flags_cross_a_one_rank_group(one_rank_group: None) -> None:
    from ddptui_worker import bytecast

    cpu = torch.device("cpu")
    for payload in (b"", b"\x00\xff snapshot", bytes(range(256)) * 1000):
        assert bytecast.broadcast_bytes(payload, cpu) == payload
    with pytest.raises(ValueError):
        bytecast.broadcast_bytes(None, cpu)
    assert bytecast.all_true(True, cpu) and not bytecast.all_true(False, cpu)


def _stdlib() -> frozenset[str]:
    import sys

    return frozenset(sys.stdlib_module_names) | {"__future__"}


# -- one process, in this process: resume gives the run it interrupted ----------------------
@pytest.fixture
def one_rank_group() -> Iterator[None]:
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _train(tmp: Path, attempt: int, *flags: str) -> list[str]:
    """Every line a one-rank run wrote (metric and plain), also when it raised."""
    import threading

    from ddptui_worker.train import Run

    args = parse_args(["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--seq-len", "16",
                       "--batch-size", "4", "--corpus-bytes", "20000", "--steps", "12",
                       "--log-every", "1", "--eval-every", "12", "--eval-batches", "1",
                       "--snapshot-every", "5", "--snapshot-dir", str(tmp), *flags])
    env = devices.Env(rank=0, local_rank=0, world_size=1, local_world_size=1, attempt=attempt)
    out = io.StringIO()
    try:
        Run(args, env, [], "gloo", metrics.Emitter(0, attempt, out=out), threading.Event()).loop()
    except BaseException as e:
        e.add_note(out.getvalue())
        raise
    return out.getvalue().splitlines()


def _final_eval(tmp: Path, attempt: int, *flags: str) -> tuple[list[dict[str, object]], float]:
    out = _train(tmp, attempt, *flags)
    lines = [json.loads(x[len(METRIC_MARK):]) for x in out if x.startswith(METRIC_MARK)]
    evals = [x["eval_loss"] for x in lines if x["kind"] == "eval"]
    return lines, evals[-1] if evals else math.nan


def test_resumed_run_matches_the_uninterrupted_one(tmp_path: Path, one_rank_group: None) -> None:
    _, straight = _final_eval(tmp_path / "a", 0)
    with pytest.raises(InjectedCrash):
        _final_eval(tmp_path / "b", 0, "--crash-rank", "0", "--crash-step", "8")
    lines, resumed = _final_eval(tmp_path / "b", 1, "--crash-rank", "0", "--crash-step", "8")
    assert lines[0]["start_step"] == 5
    assert [x["step"] for x in lines if x["kind"] == "metric"] == list(range(6, 13))
    assert resumed == straight


def _plain(lines: list[str]) -> list[str]:
    return [x for x in lines if not x.startswith(METRIC_MARK)]


def test_a_resume_says_from_which_step_of_how_many(tmp_path: Path,
                                                    one_rank_group: None) -> None:
    with pytest.raises(InjectedCrash):
        _train(tmp_path, 0, "--crash-rank", "0", "--crash-step", "8")
    lines = _train(tmp_path, 1)
    assert _plain(lines) == [f"resumed from snapshot {tmp_path}/snapshot-00000005.pt "
                             "at step 5 of 12"]


def test_a_second_run_in_a_finished_folder_says_it_has_nothing_to_do(
        tmp_path: Path, one_rank_group: None) -> None:
    assert _plain(_train(tmp_path, 0, "--steps", "10")) == []  # its last step is a snapshot
    again = _train(tmp_path, 0, "--steps", "10")
    assert _plain(again) == [
        f"resumed from snapshot {tmp_path}/snapshot-00000010.pt: the run in this folder is "
        "already complete (step 10 of 10), nothing to train; --fresh starts again from step 0"]
    summary = json.loads(again[-1][len(METRIC_MARK):])
    assert summary["kind"] == "summary" and summary["steps_run"] == 0


def test_fresh_removes_the_old_snapshots_but_a_restart_still_resumes(
        tmp_path: Path, one_rank_group: None) -> None:
    _train(tmp_path, 0)
    (tmp_path / "notes.txt").write_text("kept")
    with pytest.raises(InjectedCrash):
        _train(tmp_path, 0, "--fresh", "--crash-rank", "0", "--crash-step", "8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "snapshot-00000005.pt"]
    lines = _train(tmp_path, 1, "--fresh")  # torchrun's restart repeats the flags
    assert _plain(lines) == [f"resumed from snapshot {tmp_path}/snapshot-00000005.pt "
                             "at step 5 of 12"]
