"""ddptui's bundled DDP worker: what torchrun starts on every node.

Uploaded as a flat package (``ddptui_worker``) next to each run, so it imports only the
standard library, torch, and its own modules by relative import.
"""
