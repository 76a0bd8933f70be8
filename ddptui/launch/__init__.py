"""Launching and following a run: the pure plan, the commands run on nodes, the controller
that drives every node, and one follower per node."""
