"""The version of fedbandits, apart from the package's ``__init__`` so that the simulator's
checkpoints and Ray workers can read it without importing the public API above them."""

__version__ = "0.1.0"
