"""Every name usable in a config: environments, algorithms and protocols.

Each entry pairs a name with a one-line description, a frozen parameter dataclass (whose
``__post_init__`` validates values and whose field metadata ``help`` documents them) and a
factory.  The CLI's ``list`` command, config validation and the simulator all read the tables
:data:`ENVIRONMENTS`, :data:`ALGORITHMS` and :data:`PROTOCOLS`, which load the entry points of the
groups ``fedbandits.environments``, ``fedbandits.algorithms`` and ``fedbandits.protocols``
(:mod:`fedbandits.plugins`): the built-in entries below (and in :mod:`fedbandits.protocols.catalog`)
are declared there by fedbandits' own ``pyproject.toml``, a plugin package's the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from fedbandits.algorithms.async_fedlinucb import AsyncFedLinUCB, AsyncFedLinUCBParams
from fedbandits.algorithms.base import LinUCBParams, Policy
from fedbandits.algorithms.club import CLUB, SCLUB, CLUBParams, PerUserLinUCB, SCLUBParams
from fedbandits.algorithms.clustering import ClusterUCBParams, UserStructure
from fedbandits.algorithms.fclub import CDPFCLUBDC, FCLUB, FCLUBDC, FCLUBBase, Homo, HomoDC
from fedbandits.algorithms.fclub_params import (
    CDPFCLUBDCParams,
    FCLUBDCParams,
    FCLUBParams,
    HomoDCParams,
    HomoParams,
)
from fedbandits.algorithms.fedlinucb import (
    FedLinUCB,
    FedLinUCBParams,
    calibrate_protocol,
    check_noise_level,
    noise_regularizer,
    theory_regularizer,
)
from fedbandits.algorithms.feducb import FedUCB, FedUCBParams
from fedbandits.algorithms.feducb_decentralized import DecentralizedFedUCB, DecentralizedFedUCBParams
from fedbandits.algorithms.hetofedbandit import HetoFedBandit, HetoFedBanditParams
from fedbandits.algorithms.linucb import IndependentLinUCB, SuperAgentLinUCB
from fedbandits.envs.base import Environment
from fedbandits.envs.clustered import ClusteredSynthetic, ClusteredSyntheticParams
from fedbandits.envs.files import DataFiles, DataFilesParams
from fedbandits.envs.heterogeneous import HeterogeneousClients, HeterogeneousClientsParams
from fedbandits.envs.ltr import LearningToRank, LearningToRankParams
from fedbandits.envs.movielens import (
    MovieLensClusters,
    MovieLensClustersParams,
    MovieLensLinear,
    MovieLensLinearParams,
)
from fedbandits.envs.synthetic import (
    GapInstance,
    GapInstanceParams,
    GaussianSphere,
    GaussianSphereParams,
    UniformCube,
    UniformCubeParams,
)
from fedbandits.plugins import ALGORITHMS, ENVIRONMENTS, PROTOCOLS, Entry, NoParams, ProtocolEntry, Table
from fedbandits.privacy.calibration import NoiseCalibration
from fedbandits.privacy.distributed_noise import DistributedCalibration
from fedbandits.protocols.base import Protocol
from fedbandits.protocols.vector_sum_tree import VectorSumCalibration

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


@dataclass(frozen=True)
class PolicyContext:
    """What a policy factory gets besides its parameters."""

    n_runs: int
    n_agents: int
    n_arms: int
    dim: int
    horizon: int
    #: one Generator per run for the policy's own randomness (privacy noise)
    noise_rngs: Sequence[np.random.Generator]
    #: keep every message the silos release (``fedbandits run --transcript``)
    record_transcript: bool = False
    #: the environment the policy will play (read-only use: user/server structure of
    #: clustered instances); None when a policy is built without one
    env: Environment | None = None


def _linucb_factory(cls: type[Policy]) -> Callable[[LinUCBParams, PolicyContext], Policy]:
    def build(params: LinUCBParams, ctx: PolicyContext) -> Policy:
        return cls(ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, params)  # type: ignore[call-arg]

    return build


def prefix_noise_std(cal: NoiseCalibration | VectorSumCalibration | DistributedCalibration, agents: int) -> float:
    """Std of one covariance entry of a synced prefix's noise at its worst release: every silo's noise,
    times the largest number of noisy p-sums in a prefix (or the factorized decoder's row norm^2)."""
    if isinstance(cal, VectorSumCalibration):
        return cal.noise_std() * math.sqrt(cal.nodes)
    return cal.sigma_cov * math.sqrt(agents * cal.prefix_factor)


def private_regularizer(
    params: FedLinUCBParams,
    cal: NoiseCalibration | VectorSumCalibration | DistributedCalibration,
    agents: int,
    dim: int,
    horizon: int,
) -> float:
    """lambda of a private FedLinUCB: Lemma C.4's (``theory``) or the noise shift (``noise``)."""
    check_noise_level(params, cal)
    std = prefix_noise_std(cal, agents)
    if params.regularizer == "theory":
        return theory_regularizer(std, 1, 1.0, dim, horizon, params.batch, params.alpha)
    return noise_regularizer(std, dim, horizon // params.batch, params.alpha)


def calibrated(
    params: FedLinUCBParams, *, horizon: int, agents: int, dim: int
) -> tuple[NoiseCalibration | VectorSumCalibration | DistributedCalibration | None, float]:
    """A FedLinUCB-type request's noise calibration (None if not private) and its lambda: ``reg``, or for a
    private protocol with a regularizer that follows the noise, :func:`private_regularizer`'s."""
    if not params.private:
        return None, params.reg
    cal = calibrate_protocol(params, horizon=horizon, agents=agents, dim=dim)
    reg = params.reg if params.regularizer == "fixed" else private_regularizer(params, cal, agents, dim, horizon)
    return cal, reg


def fedlinucb_protocol(params: FedLinUCBParams, ctx: PolicyContext) -> tuple[Protocol, float]:
    """The protocol a FedLinUCB-type policy syncs through (calibrated if private) and its lambda:
    what a plugin algorithm that reuses FedLinUCB's synchronisation builds first."""
    cal, reg = calibrated(params, horizon=ctx.horizon, agents=ctx.n_agents, dim=ctx.dim)
    protocol: Protocol = PROTOCOLS[params.protocol].factory(cal, ctx)
    return protocol, reg


def _fedlinucb_factory(params: FedLinUCBParams, ctx: PolicyContext) -> Policy:
    protocol, reg = fedlinucb_protocol(params, ctx)
    n_users = ctx.env.n_users if ctx.env is not None else 0
    return FedLinUCB(
        ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, params, protocol, reg=reg, n_users=n_users
    )


def _async_fedlinucb_factory(params: AsyncFedLinUCBParams, ctx: PolicyContext) -> Policy:
    """Each silo's tree is calibrated as ``ldp-prefix`` for the most uploads the trigger allows, and lambda
    follows that noise as a private FedLinUCB's does."""
    sync, horizon = params.release_params(ctx.horizon)
    cal, reg = calibrated(sync, horizon=horizon, agents=ctx.n_agents, dim=ctx.dim)
    if cal is not None and not isinstance(cal, NoiseCalibration):  # ldp-prefix is a Gaussian tree, by construction
        raise TypeError(f"fedlinucb-async expected a Gaussian tree calibration, got {type(cal).__name__}")
    return AsyncFedLinUCB(
        ctx.n_runs,
        ctx.n_agents,
        ctx.n_arms,
        ctx.dim,
        ctx.horizon,
        params,
        ctx.noise_rngs,
        calibration=cal,
        reg=reg,
        record=ctx.record_transcript,
    )


def _feducb_factory(params: FedUCBParams, ctx: PolicyContext) -> Policy:
    return FedUCB(ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, params, list(ctx.noise_rngs))


def _env_factory(cls: type[Environment]) -> Callable[[Any, Sequence[np.random.Generator]], Environment]:
    def build(params: Any, rngs: Sequence[np.random.Generator]) -> Environment:
        return cls(rngs, params)  # type: ignore[call-arg]

    return build


_ENVIRONMENTS: dict[str, Entry] = {
    cls.name: Entry(cls.name, (cls.__doc__ or "").strip().splitlines()[0], params, _env_factory(cls))
    for cls, params in (
        (GaussianSphere, GaussianSphereParams),
        (GapInstance, GapInstanceParams),
        (UniformCube, UniformCubeParams),
        (MovieLensLinear, MovieLensLinearParams),
        (MovieLensClusters, MovieLensClustersParams),
        (LearningToRank, LearningToRankParams),
        (DataFiles, DataFilesParams),
    )
}

_ALGORITHMS: dict[str, Entry] = {
    IndependentLinUCB.name: Entry(
        IndependentLinUCB.name,
        IndependentLinUCB.description,
        LinUCBParams,
        _linucb_factory(IndependentLinUCB),
        IndependentLinUCB,
    ),
    SuperAgentLinUCB.name: Entry(
        SuperAgentLinUCB.name,
        SuperAgentLinUCB.description,
        LinUCBParams,
        _linucb_factory(SuperAgentLinUCB),
        SuperAgentLinUCB,
    ),
    FedLinUCB.name: Entry(FedLinUCB.name, FedLinUCB.description, FedLinUCBParams, _fedlinucb_factory, FedLinUCB),
    AsyncFedLinUCB.name: Entry(
        AsyncFedLinUCB.name, AsyncFedLinUCB.description, AsyncFedLinUCBParams, _async_fedlinucb_factory, AsyncFedLinUCB
    ),
    FedUCB.name: Entry(FedUCB.name, FedUCB.description, FedUCBParams, _feducb_factory, FedUCB),
    DecentralizedFedUCB.name: Entry(
        DecentralizedFedUCB.name,
        DecentralizedFedUCB.description,
        DecentralizedFedUCBParams,
        lambda params, ctx: DecentralizedFedUCB(
            ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, params, list(ctx.noise_rngs)
        ),
        DecentralizedFedUCB,
    ),
}

# --- clustering of bandits (FCLUB, Liu et al. 2022) ---


def _fclub_factory(cls: type[FCLUBBase]) -> Callable[[Any, PolicyContext], Policy]:
    def build(params: Any, ctx: PolicyContext) -> Policy:
        users = UserStructure.from_env(ctx.env)
        return cls(ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, users, params, ctx.noise_rngs)

    return build


def _cluster_baseline_factory(cls: type[Policy]) -> Callable[[Any, PolicyContext], Policy]:
    def build(params: Any, ctx: PolicyContext) -> Policy:
        users = UserStructure.from_env(ctx.env)
        return cls(ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, users, params)  # type: ignore[call-arg]

    return build


_ALGORITHMS.update(
    {
        cls.name: Entry(cls.name, cls.description, params, _fclub_factory(cls), cls)
        for cls, params in (
            (CDPFCLUBDC, CDPFCLUBDCParams),
            (FCLUBDC, FCLUBDCParams),
            (FCLUB, FCLUBParams),
            (Homo, HomoParams),
            (HomoDC, HomoDCParams),
        )
    }
)
_ALGORITHMS.update(
    {
        cls.name: Entry(cls.name, cls.description, params, _cluster_baseline_factory(cls), cls)
        for cls, params in ((CLUB, CLUBParams), (SCLUB, SCLUBParams), (PerUserLinUCB, ClusterUCBParams))
    }
)
_ENVIRONMENTS.update(
    {
        HeterogeneousClients.name: Entry(
            HeterogeneousClients.name,
            "heterogeneous clients in clusters, HetoFedBandit's synthetic instance (Blaser et al. 2024)",
            HeterogeneousClientsParams,
            _env_factory(HeterogeneousClients),
        ),
        ClusteredSynthetic.name: Entry(
            ClusteredSynthetic.name,
            "synthetic FCLUB instance: n users in m clusters over L servers (Liu et al. 2022)",
            ClusteredSyntheticParams,
            _env_factory(ClusteredSynthetic),
        ),
    }
)
_ALGORITHMS[HetoFedBandit.name] = Entry(
    HetoFedBandit.name,
    HetoFedBandit.description,
    HetoFedBanditParams,
    lambda params, ctx: HetoFedBandit(
        ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, params, list(ctx.noise_rngs)
    ),
    HetoFedBandit,
)
# --- end clustering of bandits ---


def carried_protocols(*ways: str) -> tuple[str, ...]:
    """The protocols a real federation carries in one of ``ways`` (:data:`fedbandits.plugins.CARRIERS`:
    "direct", "masked", "shuffled"), in the table's order: read from each entry's ``carried``."""
    return tuple(name for name in PROTOCOLS if PROTOCOLS[name].carried in ways)


def _namespace(entries: dict[str, Entry]) -> SimpleNamespace:
    """The entries as attributes (``-`` spelled ``_``): what the entry points of pyproject.toml name."""
    return SimpleNamespace(**{name.replace("-", "_"): entry for name, entry in entries.items()})


#: the built-in algorithms and environments, declared as entry points by fedbandits' pyproject.toml
#: (``fedlinucb = "fedbandits.registry:BUILTIN_ALGORITHMS.fedlinucb"``); the tables read them from there
BUILTIN_ALGORITHMS = _namespace(_ALGORITHMS)
BUILTIN_ENVIRONMENTS = _namespace(_ENVIRONMENTS)
