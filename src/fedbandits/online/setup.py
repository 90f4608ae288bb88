"""What an online agent derives from a config, with exactly the code the simulator uses.

One ``[[algorithms]]`` entry of an ordinary, validated fedbandits config (the same names and the
same errors as ``fedbandits run``) fixes everything: the ridge regulariser lambda, the confidence
radius, the federation size M (``[environment] agents``), the dimension d, the number of releases
K = T // B the noise is calibrated for, the calibration itself and each silo's noise stream.
:class:`AgentSetup` computes them once; :class:`fedbandits.online.agent.Agent` (a silo) and
:class:`fedbandits.online.aggregator.Aggregator` (the server's analyzer) are built from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.algorithms.base import LinUCBParams
from fedbandits.algorithms.fedlinucb import FedLinUCBParams
from fedbandits.config import Config, ConfigError, as_config
from fedbandits.core.seeding import choice_rngs, noise_rngs
from fedbandits.core.ucb import ConfidenceRadius
from fedbandits.privacy.calibration import NoiseCalibration
from fedbandits.privacy.discrete_gaussian import (
    SecretNoise,
    SecretStreamRandomizer,
    SecretTreeRandomizer,
    secret_noise_for,
)
from fedbandits.privacy.distributed_noise import DistributedCalibration
from fedbandits.privacy.mechanisms import TreeRandomizer, packed_width, protocol_streams, silo_noise_rng
from fedbandits.privacy.streaming import BandedStream, StreamingRandomizer, calibrated_stream
from fedbandits.protocols.distributed_dp import DistributedRandomizer, SecretDistributedRandomizer
from fedbandits.registry import PROTOCOLS, calibrated, carried_protocols

#: a silo's local randomizer R, as :meth:`AgentSetup.randomizer` builds it
Randomizer = TreeRandomizer | DistributedRandomizer | StreamingRandomizer | SecretStreamRandomizer

#: the algorithms an agent runs: a standalone LinUCB silo, or one silo of a FedLinUCB federation
AGENT_ALGORITHMS = ("linucb-independent", "fedlinucb")
#: the release mechanisms an agent runs: the tree, and the streaming banded release (no planned horizon)
AGENT_MECHANISMS = ("tree", "banded")
_WHY_NOT = {
    "factorized": " ('factorized' is planned for K releases; 'banded' is the same square root with no horizon)",
    "blt": (
        " (a silo's secret noise is exact discrete Gaussian on a grid, and a BLT's rounded release would touch "
        "every later message: an unbounded sensitivity; 'banded' touches `band` of them)"
    ),
}


def agent_protocols() -> tuple[str, ...]:
    """The protocols a FedLinUCB agent synchronises through (tree mechanism): those whose catalog
    entry is ``carried`` "direct" or "masked", plugins' included.  A "shuffled" protocol's releases
    must reach the analyzer only through a shuffler party (Zhou & Chowdhury 2023, Algorithm 2 with
    S = shuffle): an agent releases for it only when its transport has one (``fedbandits serve silo
    --shuffler``); in process, nothing would shuffle."""
    return carried_protocols("direct", "masked")


def __getattr__(name: str) -> tuple[str, ...]:
    """``AGENT_PROTOCOLS``, read on use: computing it at import would scan the plugins' entry points
    in every process that imports this module (the deployment's ClientApp, once per message)."""
    if name == "AGENT_PROTOCOLS":
        return agent_protocols()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class AgentSetup:
    """The chosen entry of a config and every constant derived from it."""

    config: Config
    index: int  # the entry's position in [[algorithms]]
    dim: int
    silos: int  # M: the federation's size (1 silo for a standalone LinUCB is fine)
    reg: float  # lambda, as the simulator's factory chooses it
    calibration: NoiseCalibration | DistributedCalibration | None

    @classmethod
    def from_config(
        cls, source: Config | dict[str, Any] | str | Path, entry: str | None = None, *, shuffler: bool = False
    ) -> AgentSetup:
        """``shuffler``: the agent's releases go through a shuffler party (then ``sdp-amplification``
        is accepted too)."""
        config = as_config(source)
        index = _entry_index(config, entry)
        dim = getattr(config.environment.params, "dim", 0) or 0
        if not isinstance(dim, int) or dim < 1:
            raise ConfigError(
                f"environment.dim: an agent needs the feature dimension stated as an integer >= 1, got {dim!r}"
            )
        return cls.for_entry(config, index, dim, shuffler=shuffler)

    @classmethod
    def for_entry(cls, config: Config, index: int, dim: int, *, shuffler: bool = False) -> AgentSetup:
        """The set-up of entry ``index`` with feature dimension ``dim`` (a deployment learns it from a
        silo's data file): every runtime's one set-up object, calibrated through
        :func:`fedbandits.registry.calibrated` only (issue #45)."""
        alg = config.algorithms[index]
        where = f"algorithms[{index + 1}]"
        if alg.name not in AGENT_ALGORITHMS:
            raise ConfigError(
                f"{where}.name: an agent runs {' or '.join(map(repr, AGENT_ALGORITHMS))}, got {alg.name!r}"
            )
        silos = int(getattr(config.environment.params, "agents", 1))
        params = alg.params
        reg = float(params.reg)
        calibration = None
        if isinstance(params, FedLinUCBParams):
            carried = PROTOCOLS[params.protocol].carried  # the catalog entry's ability
            if carried == "shuffled" and not shuffler:
                raise ConfigError(
                    f"{where}.protocol: {params.protocol!r} needs a shuffler between the silos and the server: "
                    "an agent releases for it only behind `fedbandits serve silo --shuffler` (docs/serving.md)"
                )
            if carried is None:
                raise ConfigError(
                    f"{where}.protocol: an agent synchronises through {', '.join(map(repr, agent_protocols()))}, "
                    f"got {params.protocol!r}"
                )
            if params.mechanism not in AGENT_MECHANISMS:
                raise ConfigError(
                    f"{where}.mechanism: an agent releases tree p-sums ('tree') or a streaming banded release "
                    f"('banded'), got {params.mechanism!r}{_WHY_NOT.get(params.mechanism, '')}"
                )
            horizon = config.experiment.horizon
            if params.private:
                try:
                    cal, reg = calibrated(params, horizon=horizon, agents=silos, dim=dim)
                    assert isinstance(cal, NoiseCalibration | DistributedCalibration)
                    calibration = cal
                except ValueError as exc:
                    raise ConfigError(f"{where} ({alg.name}): {exc}") from None
        return cls(config, index, dim, silos, reg, calibration)

    # -- the entry ---------------------------------------------------------------------------
    @property
    def label(self) -> str:
        return str(self.config.algorithms[self.index].label)

    @property
    def name(self) -> str:
        return str(self.config.algorithms[self.index].name)

    @property
    def params(self) -> LinUCBParams:
        return self.config.algorithms[self.index].params  # type: ignore[no-any-return]

    @property
    def federated(self) -> bool:
        return isinstance(self.params, FedLinUCBParams)

    @property
    def fed_params(self) -> FedLinUCBParams:
        params = self.params
        assert isinstance(params, FedLinUCBParams)
        return params

    @property
    def private(self) -> bool:
        return self.calibration is not None

    @property
    def lazy(self) -> bool:
        return self.federated and bool(self.fed_params.lazy)

    @property
    def protocol(self) -> str | None:
        return self.fed_params.protocol if self.federated else None

    @property
    def user_level(self) -> bool:
        """Whether the unit of privacy is a user (``privacy_unit = "user"``): decisions then carry user ids."""
        return self.federated and self.fed_params.privacy_unit == "user"

    @property
    def contributions(self) -> int:
        """m: the contributions one user may make per budget epoch (1 per interaction)."""
        return self.fed_params.contributions if self.federated else 1

    @property
    def unit(self) -> str:
        """The unit of privacy, as the status states it."""
        if self.user_level:
            return f"user, up to {self.contributions} contribution(s) per budget epoch"
        return "interaction"

    @property
    def masked(self) -> bool:
        return isinstance(self.calibration, DistributedCalibration)

    @property
    def shuffled(self) -> bool:
        """Whether the releases reach the analyzer only as a shuffled batch (``sdp-amplification``)."""
        return self.federated and PROTOCOLS[self.fed_params.protocol].carried == "shuffled"

    @property
    def horizon(self) -> int:
        return self.config.experiment.horizon

    @property
    def streaming(self) -> bool:
        """Whether the releases are a streaming one (``mechanism = "banded"``): one guarantee covers every
        release the silo will ever make, and no budget is ever spent."""
        return self.private and self.fed_params.mechanism == "banded"

    @property
    def stream(self) -> BandedStream:
        """The streaming strategy of ``mechanism = "banded"``."""
        cal = self.calibration
        assert cal is not None and self.streaming
        if isinstance(cal, DistributedCalibration):
            return cal.stream
        stream = calibrated_stream(cal.mechanism, cal.details, cal.releases)
        assert isinstance(stream, BandedStream)
        return stream

    @property
    def releases(self) -> int | None:
        """K = T // B: the releases the noise is calibrated for (None: unlimited -- non-private, or a
        streaming release, whose guarantee has no horizon)."""
        return self.horizon // self.fed_params.batch if self.private and not self.streaming else None

    @property
    def width(self) -> int:
        """P: the packed width of one release (upper triangle of W, then U)."""
        return packed_width(self.dim)

    def radius(self) -> ConfidenceRadius:
        return self.params.confidence_radius()

    def sigma(self) -> np.ndarray:
        """The noise std of every packed entry, as :class:`GaussianTreeProtocol` sets it (ldp)."""
        cal = self.calibration
        assert isinstance(cal, NoiseCalibration)
        return self.packed(cal.sigma_cov, cal.sigma_bias)

    def packed(self, cov: float, bias: float) -> np.ndarray:
        """One value per packed entry: ``cov`` for the d(d+1)/2 covariance entries, ``bias`` for the d bias ones."""
        n_tri = self.dim * (self.dim + 1) // 2
        return np.concatenate([np.full(n_tri, cov), np.full(self.dim, bias)])

    def secret_noise(self) -> SecretNoise | None:
        """``ldp``'s secret noise: an exact discrete Gaussian on a grid, calibrated on its own to meet
        (epsilon, delta) by zCDP accounting of what is sampled -- the deployed silo's
        (:func:`fedbandits.privacy.discrete_gaussian.secret_noise_for`, computed once).  None for
        ``none`` and ``distributed-dp`` (its shares are exact discrete Gaussians by design)."""
        return self._secret_noise

    @cached_property
    def _secret_noise(self) -> SecretNoise | None:
        cal = self.calibration
        if not isinstance(cal, NoiseCalibration):
            return None
        return secret_noise_for(cal, self.fed_params.privacy_spec().sensitivity(), self.dim, self.contributions)

    # -- noise -------------------------------------------------------------------------------
    def noise_stream(self, silo: int, seed: int, run: int = 0) -> np.random.Generator:
        """Silo ``silo``'s ``derived`` noise stream: the stream the simulator gives silo ``silo`` in
        run ``run`` of a config whose ``noise_seed`` (or ``seed``) is ``seed``, as the deployment's
        ``derived`` noise source draws it (tests, parity trials: whoever knows the seed knows the noise)."""
        run_rng = noise_rngs(seed, [run], self.config.noise_stream(self.index))[0]
        return silo_noise_rng(protocol_streams(run_rng)[0], self.silos, silo)

    def choice_stream(self, seed: int, run: int = 0) -> np.random.Generator:
        """The ``derived`` choice stream of a randomized learner: run ``run``'s, as the simulator draws it
        for every silo of a config whose ``noise_seed`` (or ``seed``) is ``seed``."""
        return choice_rngs(seed, [run], self.config.noise_stream(self.index))[0]

    def randomizer(self, stream: np.random.Generator | None) -> Randomizer | None:
        """The silo's local randomizer R (None without privacy), as the deployment's silo builds it.

        ``stream=None`` (noise source ``os``, the default): the secret samplers of a deployed silo --
        :class:`SecretTreeRandomizer` (an exact discrete Gaussian with :meth:`secret_noise`'s sigma and
        grid) for ``ldp``, :class:`SecretDistributedRandomizer` (exact discrete Gaussian shares) for
        ``distributed-dp``, both drawing from the OS CSPRNG.  A stream (noise source ``derived``): the
        simulator's own classes for one silo, drawing from it."""
        cal = self.calibration
        placeholder = [np.random.Generator(np.random.SFC64(0))]  # replaced by the silo's stream below
        banded = self.stream if self.streaming else None
        if isinstance(cal, DistributedCalibration):
            kind = DistributedRandomizer if stream is not None else SecretDistributedRandomizer
            dist = kind(1, 1, cal.codec(self.dim), cal.share_sigma, placeholder, cal.releases, banded)
            # derived: the silo's stream; os: none, the shares come from the OS CSPRNG
            dist.silo_rngs = [[stream]] if stream is not None else []
            return dist
        if isinstance(cal, NoiseCalibration):
            if stream is None:
                noise = self.secret_noise()
                assert noise is not None
                sigma = self.packed(noise.sigma_cov, noise.sigma_bias)
                if banded is not None:
                    return SecretStreamRandomizer(sigma, noise.grid, banded)
                return SecretTreeRandomizer(sigma, noise.grid, cal.releases)
            if banded is not None:
                return StreamingRandomizer(1, 1, self.sigma(), [[stream]], banded)
            tree = TreeRandomizer(1, 1, self.sigma(), placeholder, cal.releases)
            tree.silo_rngs = [[stream]]
            return tree
        return None


def _entry_index(config: Config, entry: str | None) -> int:
    if entry is None:
        return 0
    labels = [a.label for a in config.algorithms]
    if entry not in labels:
        raise ConfigError(f"entry: no [[algorithms]] entry labelled {entry!r}; labels: {labels}")
    return labels.index(entry)
