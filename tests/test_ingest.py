"""The follower's fast path for plain rank lines makes exactly the events the parser makes."""

from __future__ import annotations

import random

from ddptui.ingest import parse_chunk
from ddptui.nodelog import NodeLogParser

LINES = [
    "[ddptui 3 1] hello", "[ddptui 12 0] step 5 loss 0.25",
    '[ddptui 3 1] @ddptui {"v": 1, "kind": "metric", "step": 3, "loss": 1.5}',
    "[ddptui 12 0] node1:1:1 [0] NCCL INFO Bootstrap",
    "[ddptui 1 1] Traceback (most recent call last):", "[ddptui 1 1] UserWarning: careful",
    "[ddptui x 1] not a prefix", "[ddptui 1 1]x", "[ddptui 1 1] ", "[ddptui 1 1] \r",
    "[ddptui 2 0] r\r", "\r", "[ddptui 01 2] leading zero", "[ddptui ] empty",
    "[ddptui 3 1] \r 45%|####5     | 45/100 [00:09<00:11, 5.0it/s, loss=0.31]",
    "[ddptui 3 1] \rValueError: in a bar", "[ddptui 12 0] \r\rtwo marks",
    "[ddptui 2 0] a line with ] inside] ", "[ddptui \u0661 0] arabic-indic digit",
    "[ddptui 1 1 1] three", "plain agent line", "W1122 20:16:43.507000 123 api.py:1] a warning",
    "[WARNING] Worker group FAILED. 2/3 attempts left; will restart worker group",
    "Root Cause (first observed failure):", "[0]:", "  time      : 2024-01-01_00:00:00",
    "  rank      : 1 (local_rank: 1)", "  exitcode  : 1 (pid: 12)", "  traceback : boom",
    "============================================================",
]


def test_parse_chunk_equals_feed_line_by_line() -> None:
    rnd = random.Random(7)
    text = "\n".join(rnd.choice(LINES) for _ in range(5000)) + "\n"
    by_feed, by_chunk = NodeLogParser("n1"), NodeLogParser("n1")
    want = [e for line in text.split("\n") if line for e in by_feed.feed(line, 1.0)]
    got = parse_chunk(by_chunk, text.encode(), 1.0)
    assert got == want
    assert by_chunk.attempt == by_feed.attempt > 0  # the restart line counted in both


#: Lines a read of nothing but rank lines may hold: the bulk path's cases.
RANK_LINES = [
    "[ddptui 3 1] hello", "[ddptui 12 0] step 5 loss 0.25 tokens/s 51234",
    '[ddptui 3 1] @ddptui {"v": 1, "kind": "metric", "step": 3, "loss": 1.5}',
    "[ddptui 3 1] @ddptui {not json", "[ddptui 12 0] node1:1:1 [0] NCCL INFO Bootstrap",
    "[ddptui 12 0] NCCL mentioned, not a NCCL line", "[ddptui 1 1] ",
    "[ddptui 2 0] a line with ] inside] ", "[ddptui \u0661 0] arabic-indic digit",
    "[ddptui 01 2] leading zero", "[ddptui 2 0] I1122 20:16:43.507000 123 api.py:1] glog info",
    "[ddptui 3 1] \rEpoch 0:  12%|█▏  | 12/100 [00:01<00:08, v_num=0, train_loss=0.12]",
]
HINTED = ["[ddptui 1 1] Traceback (most recent call last):", "[ddptui 1 1] UserWarning: careful",
          "[ddptui 4 0] ValueError: bad", "[ddptui 4 0] learning rate 0.1", "[ddptui 4 0] FAILED",
          "[ddptui 5 1] W1122 20:16:43.507000 123 api.py:1] glog warning"]


def test_reads_of_rank_lines_only_make_the_events_feed_makes() -> None:
    """Reads holding only rank lines take the bulk path: with and without lines whose level
    is not INFO, records, NCCL lines, and a last line without its newline."""
    rnd = random.Random(11)
    for trial in range(200):
        pool = RANK_LINES + (HINTED if trial % 2 else [])
        lines = [rnd.choice(pool) for _ in range(rnd.randint(1, 60))]
        text = "\n".join(lines) + ("\n" if trial % 3 else "")
        by_feed, by_chunk = NodeLogParser("n1", attempt=trial % 4), \
            NodeLogParser("n1", attempt=trial % 4)
        want = [e for line in text.split("\n") if line for e in by_feed.feed(line, 2.0)]
        assert parse_chunk(by_chunk, text.encode(), 2.0) == want, text
