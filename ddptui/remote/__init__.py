"""Acting on every node of a run at once: reaching them, the commands run there, stopping
them, their stacks."""
