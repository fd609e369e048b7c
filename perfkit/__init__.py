"""perfkit: measured performance tools for (distributed) PyTorch training."""
__version__ = "0.1.0"
