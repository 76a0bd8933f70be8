"""Launching and following a run: the pure plan, the commands run on nodes, the session
that drives every node, and one follower per node."""
