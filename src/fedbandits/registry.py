"""Every name usable in a config: environments, algorithms and protocols.

Each entry pairs a name with a one-line description, a frozen parameter dataclass (whose
``__post_init__`` validates values and whose field metadata ``help`` documents them) and a
factory.  The CLI's ``list`` command, config validation and the simulator all read the tables
:data:`ENVIRONMENTS`, :data:`ALGORITHMS` and :data:`PROTOCOLS`, which load the entry points of the
groups ``fedbandits.environments``, ``fedbandits.algorithms`` and ``fedbandits.protocols``
(:mod:`fedbandits.plugins`).

The built-in entries are defined beside their classes (``ENTRY`` at the end of
:mod:`fedbandits.algorithms.fedlinucb`, :mod:`fedbandits.envs.synthetic`'s ``GAUSSIAN_SPHERE``, the
clustering algorithms in :mod:`fedbandits.algorithms.cluster_catalog`, the protocols in
:mod:`fedbandits.protocols.catalog`) and declared by fedbandits' own ``pyproject.toml``, a plugin
package's the same way: naming one built-in imports its own module and no other's (a Flower
ClientApp, started for every message, pays for the algorithm and environment it runs only).

This module gathers what a FedLinUCB-type learner's set-up reads (its calibration and lambda) with
the tables, under the names callers have always imported.
"""

from __future__ import annotations

from fedbandits.algorithms.base import PolicyContext
from fedbandits.algorithms.fedlinucb import (
    calibrate_protocol,
    calibrated,
    fedlinucb_protocol,
    prefix_noise_std,
    private_regularizer,
)
from fedbandits.plugins import ALGORITHMS, ENVIRONMENTS, PROTOCOLS, Entry, NoParams, ProtocolEntry, Table

__all__ = [
    "ALGORITHMS",
    "ENVIRONMENTS",
    "PROTOCOLS",
    "Entry",
    "NoParams",
    "PolicyContext",
    "ProtocolEntry",
    "Table",
    "calibrate_protocol",
    "calibrated",
    "carried_protocols",
    "fedlinucb_protocol",
    "prefix_noise_std",
    "private_regularizer",
]


def carried_protocols(*ways: str) -> tuple[str, ...]:
    """The protocols a real federation carries in one of ``ways`` (:data:`fedbandits.plugins.CARRIERS`:
    "direct", "masked", "shuffled"), in the table's order: read from each entry's ``carried``."""
    return tuple(name for name in PROTOCOLS if PROTOCOLS[name].carried in ways)
