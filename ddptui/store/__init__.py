"""What a run leaves behind: the bounded in-memory store, its exactly-once disk mirror, and
the local run directories."""
