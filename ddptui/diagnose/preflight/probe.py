"""What preflight asks a node: one Python program, run by the node's own interpreter
(:mod:`ddptui.nodeprog.preflight`), which prints one JSON line that
:mod:`ddptui.diagnose.preflight.report` reads."""

from __future__ import annotations

from ddptui import nodeprog
from ddptui.nodeprog import preflight

NODE_SRC = nodeprog.source(preflight)
"""The node program; its one argument is the JSON object built by ``launch/precheck.py``."""
