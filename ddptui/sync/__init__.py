"""The user's project on the nodes: what is shipped (excludes, manifest), and how (push).

The pure parts (``ignore``, ``manifest``) decide everything about a sync from file
metadata and hashes, with no I/O, so they are tested without a node; ``walk`` reads the
local tree and ``push`` talks to a node through its transport.
"""
