"""A run while it is up: its session, one follower per node, the event bus and the watches
(lost nodes, stalls, samplers, NCCL facts)."""
