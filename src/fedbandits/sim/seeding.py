"""Where every random number of a simulated run comes from: :mod:`fedbandits.core.seeding`.

The derivation lives in core so that the online agent (:mod:`fedbandits.online`, below sim) can
rebuild a silo's noise stream exactly as the simulator draws it; this module keeps the simulator's
name for it.
"""

from __future__ import annotations

from fedbandits.core.seeding import choice_rngs, env_rngs, noise_rngs

__all__ = ["choice_rngs", "env_rngs", "noise_rngs"]
