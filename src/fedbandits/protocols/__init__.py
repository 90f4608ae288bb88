"""Synchronisation protocols P = (R, S, A)."""

from fedbandits.protocols.base import Protocol
from fedbandits.protocols.passthrough import NonPrivate

__all__ = ["NonPrivate", "Protocol"]
