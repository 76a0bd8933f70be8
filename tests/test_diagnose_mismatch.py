"""Collective mismatches told from what ranks print without any debug flag: gloo's size check
(recorded with torchrun on the CPU) and NCCL's watchdog lines compared across ranks
(composed from the public format: tests/data/diagnose/nccl-watchdog-mismatch-composed.txt
says so in its header), beside the TORCH_DISTRIBUTED_DEBUG=DETAIL form test_diagnose.py tests.
"""

from __future__ import annotations

import itertools

import pytest
from replay import T0, node_events
from test_diagnose import HERE, check, node_log

from ddptui.diagnose import Cause, diagnose
from ddptui.diagnose import signatures as sig
from ddptui.diagnose.collectives import odd_one
from ddptui.events import Event, NodeState, NodeStatus

ENFORCE = ("[enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
           "pair.cc:456] op.preamble.length <= op.nbytes. 500 vs 4. Received data size doesn't "
           "match expected size. Is there a distributed collective mismatch in your code?")
COMPOSED = HERE / "nccl-watchdog-mismatch-composed.txt"
ADVICE = ("make every rank call the same collectives in the same order with the same sizes; "
          "look at what ")


# -- gloo: the size check on a received message ------------------------------------------

def test_gloo_size_check_recorded_is_a_mismatch_not_a_crash() -> None:
    """Rank 2 of 4 all-reduced 1,000 elements where the others reduced 1: rank 1 received the
    larger message, gloo aborted it, and the others lost their peer or were stopped."""
    d = check(diagnose(node_log("a", "gloo-mismatch-size.log")), Cause.COLLECTIVE_MISMATCH,
              "a", 1)
    assert d.what.startswith(
        "collective mismatch between ranks: rank 1 (node a) received 500 bytes from another "
        "rank where its own collective expected 4, and gloo's size check aborted it (SIGABRT); "
        "another rank had called a different collective, or the same one with a larger tensor")
    assert "native code aborted" not in "\n".join(d.report())
    assert d.advice.startswith(ADVICE + "each rank ") and "rank-dependent branch" in d.advice
    assert "uneven last batch" in d.advice and "differs on one rank" in d.advice
    assert d.evidence[0] == f"[a r1]   what():  {ENFORCE}"
    assert any("(SIGABRT)" in e and "exitcode  : -6" in e for e in d.evidence)  # kept, as evidence
    assert "rank 0 (node a) lost its connection to another rank: after rank 1 (node a) " \
        "failed, most likely a consequence" in d.details["a"]
    assert sum("(the cause)" in s for s in d.details["a"]) == 1


def _ranks(lines: dict[tuple[str, int], list[str]], codes: dict[str, int]) -> list[Event]:
    """Each rank's lines behind ddptui's prefix (one local rank a node), then each node's end."""
    out: list[Event] = []
    for node in sorted({n for n, _ in lines}):
        raw = [f"[ddptui {r} 0] {t}" for (n, r), ts in sorted(lines.items()) if n == node
               for t in ts]
        out += [NodeState(node, NodeStatus.RUNNING, T0), *node_events(node, raw),
                NodeState(node, NodeStatus.FAILED, T0 + 100, exit_code=codes.get(node, 1))]
    return out


@pytest.mark.parametrize(("line", "sent", "expected"), [
    (f"  what():  {ENFORCE}", 500, 4),
    # gloo before the "Received data size" sentence was added, at another line of pair.cc
    ("  what():  [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] "
     "op.preamble.length <= op.nbytes. 6232 vs 4", 6232, 4),
    (f"[rank3]: RuntimeError: {ENFORCE.replace('500 vs 4', '1716224 vs 128')}", 1716224, 128),
])
def test_gloo_size_check_in_each_wording(line: str, sent: int, expected: int) -> None:
    d = check(diagnose(_ranks({("b", 3): [line]}, {})), Cause.COLLECTIVE_MISMATCH, "b", 3)
    assert (f"rank 3 (node b) received {sent} bytes from another rank where its own collective "
            f"expected {expected}, and gloo's size check aborted it;") in d.what  # no signal known


def test_two_ranks_aborted_by_gloo_are_one_finding() -> None:
    d = check(diagnose(_ranks({("a", 1): [f"  what():  {ENFORCE}"],
                               ("b", 3): ["x", f"  what():  {ENFORCE}"]}, {})),
              Cause.COLLECTIVE_MISMATCH, "a", 1)
    assert "aborted it, and rank 3 (node b) too;" in d.what
    assert [s for ss in d.details.values() for s in ss if "consequence" in s] == []


def test_a_size_line_that_is_not_gloos_check_is_no_mismatch() -> None:
    assert sig.GLOO_SIZE.search("op.preamble.length <= op.nbytes") is None
    d = diagnose(_ranks({("a", 0): ["ValueError: 500 vs 4"]}, {}))
    assert d is not None and d.cause is Cause.RANK_ERROR


# -- NCCL: the watchdogs' WorkNCCL compared across ranks ----------------------------------

def composed(case: str) -> list[Event]:
    """One case of the composed fixture as the nodes' logs, each node then failed."""
    text = COMPOSED.read_text(encoding="utf-8")
    by_node: dict[str, list[str]] = {}
    for block in text.split("\n## ")[1:]:
        head, *body = block.rstrip("\n").split("\n")
        name, node, who = head.split(" | ")
        if name != case:
            continue
        rank, local = who.removeprefix("rank ").removesuffix(")").split(" (local ")
        by_node.setdefault(node, []).extend(f"[ddptui {rank} {local}] {ln}" for ln in body if ln)
    assert by_node, case
    return [ev for node, raw in by_node.items() for ev in (
        NodeState(node, NodeStatus.RUNNING, T0), *node_events(node, raw),
        NodeState(node, NodeStatus.FAILED, T0 + 1000, exit_code=1))]


def test_nccl_watchdogs_that_disagree_on_the_element_count_name_the_odd_rank() -> None:
    """The mistake the gloo test makes, as NCCL would show it: every rank waits out its
    watchdog at collective #4, rank 2's with 1,000 elements, the others' with 1."""
    d = check(diagnose(composed("numel"), world_size=4), Cause.COLLECTIVE_MISMATCH, "b", 2)
    assert d.what == ("collective mismatch at NCCL collective #4: rank 2 (node b) ran ALLREDUCE "
                      "of 1000 elements while ranks 0, 1 and 3 ran ALLREDUCE of 1 element; NCCL "
                      "does not check that they agree, so they waited until torch's watchdog "
                      "timed out (600 s)")
    assert d.advice.startswith(ADVICE + "rank 2 ran at that point")
    assert "NumelIn=1000" in d.evidence[0] and len(d.evidence) == 4
    assert not any("timed out waiting" in s for ss in d.details.values() for s in ss)


def test_the_gloo_and_nccl_forms_of_one_mistake_get_one_verdict() -> None:
    gloo = diagnose(node_log("a", "gloo-mismatch-size.log"))
    nccl = diagnose(composed("numel"), world_size=4)
    assert gloo is not None and nccl is not None
    assert gloo.cause is nccl.cause is Cause.COLLECTIVE_MISMATCH
    assert gloo.what.startswith("collective mismatch") and nccl.what.startswith("collective "
                                                                                "mismatch")
    assert gloo.advice.split("; look at")[0] == nccl.advice.split("; look at")[0]


@pytest.mark.parametrize(("case", "node", "rank", "said"), [
    ("op", "b", 2, "rank 2 (node b) ran BROADCAST of 1 element while ranks 0, 1 and 3 ran "
     "ALLREDUCE of 1 element"),
    ("two-ranks", "a", 0, "#9: ALLREDUCE of 1 element on rank 0; ALLREDUCE of 1000 elements "
     "on rank 1;"),
    ("old-op", "a", 1, "#77: rank 1 (node a) ran ALLGATHER while ranks 0 and 2 ran ALLREDUCE; "),
])
def test_nccl_watchdogs_that_disagree(case: str, node: str, rank: int, said: str) -> None:
    """With two ranks either may be the odd one: both are said, the finding on the rank
    whose watchdog was heard first (the lower on a tie); the older WorkNCCL (no counts)
    still differs by op."""
    d = check(diagnose(composed(case)), Cause.COLLECTIVE_MISMATCH, node, rank)
    assert said in d.what
    if case == "two-ranks":
        assert d.advice.startswith(ADVICE + "each of these ranks ran at that point")


@pytest.mark.parametrize("case", ["agree", "apart", "old-same"])
def test_nccl_watchdogs_with_nothing_to_compare_stay_a_timeout(case: str) -> None:
    """The same op and count everywhere (a rank that never came), different sequence
    numbers, or the older format with one op: a hang, judged as before."""
    d = diagnose(composed(case), world_size=4)
    assert d is not None and d.cause is Cause.COLLECTIVE_TIMEOUT, d and d.headline


_WD = ("[rank{r}]:[E1127 17:31:10.100000000 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog "
       "caught collective operation timeout: WorkNCCL(SeqNum=7, OpType={op}, NumelIn={n}, "
       "NumelOut={n}, Timeout(ms)=1800000) ran for 1800001 milliseconds before timing out.")


@pytest.mark.parametrize(("world", "odd", "op"), [
    (w, o, op) for w in (3, 4, 5) for o in range(w) for op in ("ALLREDUCE", "BROADCAST")])
def test_the_odd_rank_is_named_wherever_it_is(world: int, odd: int, op: str) -> None:
    lines = {("ab"[r % 2], r): [_WD.format(r=r, op=op if r == odd else "ALLREDUCE",
                                           n=8 if r == odd and op == "ALLREDUCE" else 4)]
             for r in range(world)}
    d = check(diagnose(_ranks(lines, {})), Cause.COLLECTIVE_MISMATCH, "ab"[odd % 2], odd)
    assert f"rank {odd} (node {'ab'[odd % 2]}) ran {op} of " in d.what
    assert "(1800 s)" in d.what


def test_odd_one_is_the_only_rank_unlike_all_the_others() -> None:
    """Every way of giving 2 to 5 ranks one of three collectives."""
    works = [("ALLREDUCE", 1), ("ALLREDUCE", 1000), ("BROADCAST", 1)]
    for world in range(2, 6):
        for pick in itertools.product(range(3), repeat=world):
            groups: dict[tuple[str, int | None], list[int]] = {}
            for r, w in enumerate(pick):
                groups.setdefault(works[w], []).append(r)
            alone = [r for r, w in enumerate(pick) if pick.count(w) == 1]
            others_agree = len(set(pick)) == 2
            want = alone[0] if world >= 3 and len(alone) == 1 and others_agree else None
            assert odd_one(groups) == want, (pick, groups)


def test_the_watchdog_fields_are_read_in_both_formats() -> None:
    new = sig.NCCL_WORK.search(_WD.format(r=0, op="ALLREDUCE", n=9801523))
    assert new is not None and new.groups() == ("7", "ALLREDUCE", "9801523", "9801523", "1800000")
    old = sig.NCCL_WORK.search("WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000)")
    assert old is not None and old.groups() == ("469508", "ALLREDUCE", None, None, "1800000")


def test_the_detail_form_comes_first_when_both_are_there() -> None:
    """DETAIL names both ranks and both collectives: it is preferred to gloo's one line."""
    evs = node_log("a", "gloo-mismatch-op.log")
    evs[1:1] = node_events("a", [f"[ddptui 1 1]   what():  {ENFORCE}"])
    d = check(diagnose(evs), Cause.COLLECTIVE_MISMATCH, "a", 0)
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL stopped them" in d.what
