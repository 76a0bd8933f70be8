"""ddptui's bundled DDP worker: what torchrun starts on every node.

Uploaded as a flat package (``ddptui_worker``) next to each run, so it imports only the
standard library, torch, and its own modules by relative import.
"""

import warnings

# torch warns "Failed to initialize NumPy" on import where numpy is missing; the worker uses
# no numpy (see bytecast.py), so on every rank that line would only alarm.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
