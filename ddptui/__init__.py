"""ddptui: launch, follow and stop multi-node PyTorch DDP jobs from one terminal."""

__version__ = "0.1.0"
