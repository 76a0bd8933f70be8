"""NCCL facts from the log: what each rank's libnccl chose (version, network, interfaces,
channels, transports, init time) and what it warned about, and ddptui's advice on top.

Pure: ``collect`` parses lines into ``facts``, ``checks`` turns all nodes' facts into
warnings, ``table`` renders them; nothing here reads files or clocks, so each rule is tested
from recorded output.
"""

from ddptui.nccl.checks import SLOW_INIT_FACTOR, SLOW_INIT_MARGIN_S, NcclWarning, nccl_warnings
from ddptui.nccl.collect import NcclFacts
from ddptui.nccl.facts import Communicator, Hca, Interface, NcclWarn, NodeFacts, RankFacts
from ddptui.nccl.table import NO_LINES, rank_detail, render_rank, render_table, table_rows

__all__ = [
    "NO_LINES",
    "SLOW_INIT_FACTOR",
    "SLOW_INIT_MARGIN_S",
    "Communicator",
    "Hca",
    "Interface",
    "NcclFacts",
    "NcclWarn",
    "NcclWarning",
    "NodeFacts",
    "RankFacts",
    "nccl_warnings",
    "rank_detail",
    "render_rank",
    "render_table",
    "table_rows",
]
