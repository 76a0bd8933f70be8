"""Metric charts as runs of text (braille plotting, downsampling), with no Textual, so the
engine can build them where the series are."""
