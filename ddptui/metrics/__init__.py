"""Metric lines of real training stacks, read from the ranks' own output (see recognizers)."""
