"""Preflight: what each node says about itself and its way to the rendezvous, judged before
anything starts, so a run that would fail or hang is named and not launched.

``probe`` is the program a node runs, ``report`` reads its answer, ``rules`` judge all the
answers together; all pure. ``ddptui.launch.precheck`` runs the program on the nodes.
"""

from ddptui.diagnose.preflight.report import NodeReport, parse_report
from ddptui.diagnose.preflight.rules import CHECKS, Endpoint, Mark, Result, Verdict, judge

__all__ = ["CHECKS", "Endpoint", "Mark", "NodeReport", "Result", "Verdict", "judge",
           "parse_report"]
