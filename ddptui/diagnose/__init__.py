"""Why a run failed, in ddptui's own words, from the run's events alone.

Pure (no I/O, no clock): the same events give the same diagnosis whether they come live from
the nodes, from a run directory afterwards, or from a recording in a test. The headline says
what happened, where and what to do; lines copied from torch are its evidence, never its text.
"""

from ddptui.diagnose.diagnosis import Cause, Diagnosis
from ddptui.diagnose.verdict import diagnose

__all__ = ["Cause", "Diagnosis", "diagnose"]
