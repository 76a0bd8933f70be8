"""The Textual dashboard: reads the store on a timer, drives the session from key bindings."""

import os

#: Textual paints at most this often; it is read once, when Textual is first imported. At its
#: default of 60 a key pressed just after a paint waits up to 17 ms for the next one, and under
#: a flood something has nearly always just been painted. Paints happen only when a widget
#: changed, so a higher cap adds no work when nothing moves. TEXTUAL_FPS, if set, wins.
MAX_FPS = 240

if "TEXTUAL_FPS" not in os.environ:
    os.environ["TEXTUAL_FPS"] = str(MAX_FPS)
    try:
        import textual.constants  # noqa: F401
    finally:
        del os.environ["TEXTUAL_FPS"]  # not for the engine, nor the nodes' torchrun
