"""Names ddptui gives its job steps, by which a stop or a sweep finds them again."""

from __future__ import annotations

#: The agent step that carries a connection's commands (one per node and ddptui process).
AGENT_STEP = "ddptui-agent"


def step_name(run_id: str) -> str:
    """The job-step name of a run's own step on each node."""
    return f"ddptui-{run_id}"
