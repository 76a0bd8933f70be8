"""Node telemetry: the sampler's shell text, its output parsed into samples, and the alert
rules. Pure: no I/O, no clock of its own (``ddptui.live.samplers`` runs the sampler)."""
