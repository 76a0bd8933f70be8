"""What a run's curves tell across its ranks: a rank that diverges, the straggler, NaN and
spikes. Pure: the run's points in, findings out (:mod:`ddptui.insight.judge`)."""
