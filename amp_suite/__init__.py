"""amp-suite: measure whether PyTorch automatic mixed precision pays off on this GPU."""

__version__ = "0.1.0"
