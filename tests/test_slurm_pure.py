"""The Slurm pieces that need no cluster: what ``scontrol`` says (recorded from the test
cluster's real Slurm 22.05, tests/data/slurm/), ddptui's words for a job's states, the
hosts file's `slurm:` section, and the salloc options made of it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from ddptui.config import ConfigError, HostsConfig, parse_config
from ddptui.config.slurm import SlurmConfig
from ddptui.slurm.allocation import request_options
from ddptui.slurm.ending import describe
from ddptui.slurm.jobinfo import (
    ENDED,
    node_addresses,
    not_usable,
    parse_job,
    pending_words,
    time_left,
)

DATA = Path(__file__).parent / "data" / "slurm"


def job(name: str, **changes: object):
    return dataclasses.replace(parse_job((DATA / name).read_text()), **changes)


def test_a_running_allocation_as_scontrol_shows_it() -> None:
    info = job("job-running.txt")
    assert (info.job_id, info.state, info.node_list, info.num_nodes) == ("1", "RUNNING",
                                                                         "sn[1-2]", 2)
    assert (info.user_id, info.partition, info.time_limit) == (0, "debug", "01:00:00")
    assert info.running and not info.pending
    assert info.slots() == 2  # salloc --ntasks-per-node=2


def test_slots_are_gpus_first_then_tasks_then_nothing() -> None:
    # the running record with a GPU request added as 22.05 writes it (TresPerNode=gres:gpu:8)
    text = (DATA / "job-running.txt").read_text().replace(" TRES=", " TresPerNode=gres:gpu:8 TRES=")
    assert parse_job(text).slots() == 8
    per_job = (DATA / "job-running.txt").read_text().replace("billing=4", "billing=4,gres/gpu=8")
    assert parse_job(per_job).slots() == 4  # 8 GPUs over 2 nodes
    plain = (DATA / "job-running.txt").read_text().replace("NumTasks=4", "NumTasks=2").replace(
        "NtasksPerN:B:S:C=2", "NtasksPerN:B:S:C=0")
    assert parse_job(plain).slots() is None  # salloc -N2: the nodes' own count decides


def test_node_addresses_are_slurms_own() -> None:
    assert node_addresses((DATA / "nodes.txt").read_text()) == {"sn1": "10.213.1.2",
                                                                 "sn2": "10.213.1.3"}


def test_why_an_allocation_cannot_be_used_names_it() -> None:
    assert not_usable(job("job-running.txt"), 0) is None
    other = not_usable(job("job-running.txt"), 1000)
    assert other == ("Slurm job 1 belongs to root, not to you; ddptui runs only in your own "
                     "allocations.")
    pending = not_usable(job("job-pending.txt"), 0)
    assert pending is not None and "still waiting for its nodes (PENDING, reason " \
        "PartitionDown)" in pending and "squeue -j 2" in pending
    ended = not_usable(job("job-cancelled.txt"), 0)
    assert ended is not None and ended.startswith("Slurm job 1 was cancelled")
    assert "no nodes to run on" in ended


@pytest.mark.parametrize("state", sorted(ENDED))
def test_every_end_has_words_and_most_an_action(state: str) -> None:
    words = ENDED[state]
    assert words[0].islower() and not words.endswith(".")
    if state not in ("COMPLETED", "FAILED", "CANCELLED"):
        assert "; " in words  # what happened; what to do


def test_pending_reasons_are_said_plainly() -> None:
    assert pending_words("Priority") == "jobs of higher priority are ahead of it"
    assert pending_words("Resources") == "it waits for nodes to become free"
    assert pending_words("SomethingNew") == "Slurm holds it"


def test_time_left_and_the_header_line() -> None:
    info = job("job-running.txt")
    assert time_left(info, "2026-11-25T21:40:20") == "01:00:00"
    assert time_left(info, "2026-11-26T23:00:00") == "00:00:00"
    assert time_left(dataclasses.replace(info, end_time="Unknown"), "2026-11-25T21:40:20") \
        is None
    assert describe(info, "2026-11-25T22:10:00") == "slurm 1 RUNNING 00:30:20 left"
    assert describe(job("job-cancelled.txt"), "2026-11-25T22:10:00") == "slurm 1 CANCELLED"
    long = dataclasses.replace(info, end_time="2026-11-28T00:00:00")
    assert time_left(long, "2026-11-25T21:40:20") == "2-02:19:40"


def parse(text: str) -> HostsConfig:
    return parse_config(text, "/cfg/hosts.yaml")


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse(text)
    return [str(p) for p in e.value.problems]


def test_the_section_makes_a_template_from_defaults() -> None:
    cfg = parse("defaults: {nproc_per_node: 2, env: {A: 1}, python: /v/bin/python}\n"
                "slurm: {job: 4242}\n")
    assert cfg.nodes == () and cfg.slurm is not None and cfg.slurm.job == "4242"
    t = cfg.slurm.template
    assert (t.transport, t.nproc_per_node, t.python, dict(t.env)) == ("srun", 2, "/v/bin/python",
                                                                      {"A": "1"})
    assert HostsConfig.from_dict(cfg.to_dict()) == cfg  # run.json keeps it exactly
    assert parse("slurm: {job: env}\n").slurm.job == "env"  # type: ignore[union-attr]
    ssh = parse("defaults: {transport: ssh}\nslurm: {nodes: 2, partition: gpu, keep: true}\n")
    assert ssh.slurm is not None and ssh.slurm.template.transport == "ssh" and ssh.slurm.asks


def test_options_are_read_each_as_one_word() -> None:
    """The options check once called a method its rule does not have (found by mypy)."""
    cfg = parse("slurm: {nodes: 2, options: ['--qos=high', 3]}\n")
    assert cfg.slurm is not None and cfg.slurm.options == ("--qos=high", "3")
    assert problems("slurm: {nodes: 2, options: [[a]]}\n") == [
        "/cfg/hosts.yaml:1: slurm.options[0]: must be a string (quote values like 'true' or "
        "dates), not a list."]


@pytest.mark.parametrize(("text", "expected"), [
    ("slurm: {job: 12, partition: gpu}\n",
     "/cfg/hosts.yaml:1: slurm.partition: is for an allocation ddptui asks for; with `job:` "
     "the allocation you hold is used as it is. Remove one of them."),
    ("slurm: {time: '1:00:00'}\n",
     "/cfg/hosts.yaml:1: slurm: needs `job:` (an allocation you hold, or `env`) or `nodes:` "
     "(how many to ask for)."),
    ("slurm: {job: 12}\nnodes: [a]\n",
     "/cfg/hosts.yaml:2: nodes: cannot be given with `slurm:`; the nodes come from the "
     "allocation. Remove one of them."),
    ("slurm: {job: 'twelve'}\n",
     "/cfg/hosts.yaml:1: slurm.job: must be a Slurm job id such as 12345, or \"env\" (this "
     "shell's SLURM_JOB_ID), not the string 'twelve'."),
    ("defaults: {transport: local}\nslurm: {job: 1}\n",
     "/cfg/hosts.yaml:1: defaults.transport: `local` cannot reach the nodes of a Slurm "
     "allocation; use `srun` (the default) or `ssh`."),
    ("nodes: [{host: a, transport: srun}]\n",
     "/cfg/hosts.yaml:1: transport: `srun` reaches the nodes of a Slurm allocation; add a "
     "`slurm:` section and leave out `nodes:`."),
    ("slurm: {nodes: 0}\n", "/cfg/hosts.yaml:1: slurm.nodes: must be a whole number of at "
                            "least 1, not the number 0."),
])
def test_mistakes_in_the_section_name_line_and_field(text: str, expected: str) -> None:
    assert expected in problems(text)


def test_salloc_options_from_the_section() -> None:
    s = SlurmConfig(partition="gpu", nodes=4, gpus_per_node=8, time="02:00:00", account="ml",
                    options=("--qos=high", "--constraint=a100"))
    assert request_options(s) == ["--nodes=4", "--partition=gpu", "--gpus-per-node=8",
                                  "--time=02:00:00", "--account=ml", "--qos=high",
                                  "--constraint=a100"]
    assert request_options(SlurmConfig(nodes=1)) == ["--nodes=1"]


def test_run_lists_name_the_allocation(tmp_path: Path) -> None:
    from ddptui.store.runs import summary_of
    from ddptui.tui.screens.run_picker import run_label

    data = {"run_id": "r1", "status": "finished", "nodes": [{"name": "sn1"}, {"name": "sn2"}],
            "config": {"slurm": {"job": "77"}}}
    s = summary_of(tmp_path, data)
    assert s.where == "slurm 77: sn1,sn2" and "slurm 77: sn1,sn2" in run_label(s)
    assert summary_of(tmp_path, {**data, "config": {}}).where == "sn1,sn2"


@pytest.mark.parametrize(("state", "reason", "words"), [
    ("TIMEOUT", "TimeLimit", "reached its time limit and Slurm ended it"),
    ("NODE_FAIL", "NodeDown", "lost a node, which Slurm reported as failed (NODE_FAIL)"),
    ("PREEMPTED", "None", "was preempted by a job of higher priority"),
    ("CANCELLED", "None", "was cancelled (scancel, or an administrator)"),
])
def test_a_job_slurm_ended_is_the_cause_and_the_rest_its_consequences(
        state: str, reason: str, words: str) -> None:
    """The recorded cancelled job with its state as Slurm writes each other end."""
    from ddptui.diagnose.diagnosis import Cause, Diagnosis
    from ddptui.slurm.ending import end_of, ended_diagnosis

    info = end_of(job("job-cancelled.txt", state=state, reason=reason))
    lost = Diagnosis(Cause.NODE_LOST, "node sn1 was lost", "lost", "check it",
                     details={"sn1": ["node sn1 was lost (the cause)"]})
    d = ended_diagnosis(info, lost)
    assert d.cause is Cause.SLURM_JOB_ENDED
    assert d.headline == f"Slurm job 1 {words}: the run could not go on."
    assert d.evidence == [f"[slurm] JobId=1 JobState={state} Reason={reason}"]
    assert d.details == {"sn1": ["node sn1 was lost (a consequence)"]}
    assert d.advice and not d.advice[0].isupper()


def _watch_of(answers: list[object], monkeypatch: pytest.MonkeyPatch, every: float = 30.0
              ) -> tuple[object, list[str], list[float]]:
    """A JobWatch whose looks get ``answers`` in turn (a JobInfo, or an exception to raise);
    what it said when the job ended, and when each look came (seconds after the start)."""
    import threading
    import time

    from ddptui.slurm import client, ending

    t0, looks, said = time.monotonic(), [], []

    def show_job(_job: str) -> object:
        looks.append(time.monotonic() - t0)
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(client, "show_job", show_job)
    monkeypatch.setattr(client, "accounted_end", lambda _job: None)  # no accounting here
    w = ending.JobWatch("1", lambda _s: None, said.append, every=every)
    w.start(threading.Event())
    return w, said, looks


def _until(cond: object, timeout: float = 20.0) -> None:
    import time
    end = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def test_a_job_slurm_forgot_between_two_looks_has_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch's next look found the job purged (MinJobAge): ended, said, not waited on."""
    from ddptui.slurm.client import UnknownJob

    w, said, _ = _watch_of([job("job-cancelled.txt", state="RUNNING"),
                            UnknownJob("Slurm has no job 1")], monkeypatch, every=0.05)
    _until(lambda: said)
    assert said == ["Slurm job 1 has ended, and Slurm no longer keeps its record (it forgets an "
                    "ended job MinJobAge seconds after its end), so why is not known here"]
    assert w.gone and w.end is not None and w.end.state == ""  # type: ignore[attr-defined]


def test_a_poke_looks_at_once_and_completing_is_followed_closely(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A lost connection pokes the watch: it looks now, not at its 30-s tick; a COMPLETING
    job is looked at again within a tenth of a second, so its final state is read before
    Slurm forgets it."""
    w, said, looks = _watch_of([job("job-cancelled.txt", state="COMPLETING"),
                                job("job-cancelled.txt", state="COMPLETING"),
                                job("job-cancelled.txt", state="CANCELLED")], monkeypatch)
    w.poke()  # type: ignore[attr-defined]
    _until(lambda: said)
    assert said == ["Slurm job 1 was cancelled (scancel, or an administrator) "
                    "(JobState=CANCELLED, Reason=None)"]
    assert len(looks) == 3  # all before the 30-s tick: _until gives up at 20 s


def test_the_run_end_uses_the_end_the_watch_saw(monkeypatch: pytest.MonkeyPatch) -> None:
    from ddptui.slurm import client, ending
    from ddptui.slurm.client import UnknownJob
    from ddptui.slurm.jobinfo import JobEnd

    def forgotten(_job: str) -> object:
        raise UnknownJob("Slurm has no job 1")

    monkeypatch.setattr(client, "show_job", forgotten)
    monkeypatch.setattr(client, "accounted_end", lambda _job: None)
    cfg = SimpleNamespace(slurm=SimpleNamespace(job="1"))
    seen = ending.job_ended(cfg, None, JobEnd("1", "TIMEOUT", "TimeLimit"))  # type: ignore[arg-type]
    assert seen is not None and "reached its time limit" in seen.headline
    lost = ending.job_ended(cfg, None)  # type: ignore[arg-type]
    assert lost is not None and "no longer keeps its record" in lost.headline
    assert lost.evidence == ["[slurm] JobId=1: no longer known to Slurm"]
    assert lost.advice.startswith("`sacct -j 1` says why")
