"""The built-in synchronisation protocols as registry entries, in the order ``fedbandits list`` shows them.

fedbandits' ``pyproject.toml`` declares each entry below in the ``fedbandits.protocols`` entry-point
group, as a plugin declares its own (:mod:`fedbandits.plugins`).  A private entry calibrates its noise
from an algorithm's parameters (``params.privacy_spec()``, ``params.batch``, and for ``distributed-dp``
its own fields) and names what the privacy auditor observes of its transcript.

Nothing here is built at import time beyond the entries; a factory gets the calibration (None if
not private) and a :class:`fedbandits.registry.PolicyContext`.
"""

from __future__ import annotations

from typing import Any

from fedbandits.plugins import NoParams, ProtocolEntry
from fedbandits.privacy.calibration import NoiseCalibration, calibrate
from fedbandits.privacy.distributed_noise import DistributedCalibration, calibrate_distributed
from fedbandits.protocols.distributed_dp import DistributedDPProtocol
from fedbandits.protocols.gaussian_tree import (
    GaussianPrefixProtocol,
    GaussianTreeProtocol,
    ShuffledGaussianTreeProtocol,
)
from fedbandits.protocols.passthrough import NonPrivate
from fedbandits.protocols.vector_sum_tree import VectorSumCalibration, VectorSumTreeProtocol, calibrate_vector_sum


def calibrate_gaussian(params: Any, *, horizon: int, agents: int, dim: int) -> NoiseCalibration:
    """``ldp``, ``ldp-prefix``, ``sdp-amplification``: the Gaussian tree's noise (dim-free)."""
    return calibrate(params.privacy_spec(), agents=agents, horizon=horizon, batch=params.batch)


def calibrate_sum(params: Any, *, horizon: int, agents: int, dim: int) -> VectorSumCalibration:
    """``sdp-vector-sum``: the per-round budget and parameters of the shuffled vector sum."""
    return calibrate_vector_sum(params.privacy_spec(), agents=agents, horizon=horizon, batch=params.batch, dim=dim)


def calibrate_shares(params: Any, *, horizon: int, agents: int, dim: int) -> DistributedCalibration:
    """``distributed-dp``: the discrete Gaussian shares, with the colluders, dropouts and grid asked for."""
    return calibrate_distributed(
        params.privacy_spec(),
        agents=agents,
        horizon=horizon,
        batch=params.batch,
        dim=dim,
        colluders=params.colluders,
        dropouts=params.dropouts,
        bits=params.modulus_bits,
        granularity=params.granularity,
    )


def _private_entry(cls: type[Any], calibrate_fn: Any, view: str, **abilities: Any) -> ProtocolEntry:
    """A built-in private protocol: ``cls(n_runs, n_agents, dim, calibration, rngs, record=...)``."""
    return ProtocolEntry(
        cls.name,
        cls.description,
        NoParams,
        lambda cal, ctx: cls(ctx.n_runs, ctx.n_agents, ctx.dim, cal, ctx.noise_rngs, record=ctx.record_transcript),
        private=True,
        calibrate=calibrate_fn,
        audit_view=view,
        **abilities,
    )


NONE = ProtocolEntry(
    NonPrivate.name,
    NonPrivate.description,
    NoParams,
    lambda cal, ctx: NonPrivate(ctx.n_runs, ctx.n_agents, ctx.dim),
    carried="direct",
)
# silo-level LDP: each silo's noisy p-sums go to the server (deployment, service, online agent)
LDP = _private_entry(GaussianTreeProtocol, calibrate_gaussian, "messages", carried="direct")
LDP_PREFIX = _private_entry(GaussianPrefixProtocol, calibrate_gaussian, "messages")
SDP_AMPLIFICATION = _private_entry(ShuffledGaussianTreeProtocol, calibrate_gaussian, "shuffled", carried="shuffled")
# the vector-sum transcript holds the server's decoded p-sums (the simulator only)
SDP_VECTOR_SUM = _private_entry(VectorSumTreeProtocol, calibrate_sum, "messages")
DISTRIBUTED_DP = _private_entry(DistributedDPProtocol, calibrate_shares, "aggregate", carried="masked")
