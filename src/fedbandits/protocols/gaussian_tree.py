"""Private protocols built on the Gaussian tree mechanism (Zhou & Chowdhury 2023).

* ``ldp``: Algorithm 2 with S = identity -- silo-level LDP (Theorem 5.1);
* ``ldp-prefix``: Algorithm 4 -- each silo releases its own noisy prefix sum; same privacy;
* either of the first two with ``mechanism = "factorized"``: the silos release B gamma + noise and
  the server decodes with A, for a factorization C = A B of the prefix-sum matrix
  (:mod:`fedbandits.privacy.factorization`) -- less noise than the tree for the same guarantee;
  or ``mechanism = "blt"`` / ``"banded"``: the same with a streaming B (a few buffers, or the last
  ``band`` batches, of state) and a guarantee with no planned horizon
  (:mod:`fedbandits.privacy.streaming`);
* ``sdp-amplification``: Algorithm 2 with a real shuffler S permuting the M messages of each
  release; the guarantee comes from the amplification Lemma F.2 (computed numerically) or, if
  the user asks for the paper's heuristic noise, carries the label "no formal guarantee".

Every protocol clips nothing itself: the algorithm hands it statistics of clipped data (see
:class:`fedbandits.algorithms.fedlinucb.FedLinUCB`), and the calibration's sensitivities are
derived from those clipping bounds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedbandits.privacy.calibration import NoiseCalibration
from fedbandits.privacy.factorization import FactorizedAnalyzer, FactorizedRandomizer, factorize
from fedbandits.privacy.mechanisms import (
    TreeAnalyzer,
    TreeRandomizer,
    pack,
    packed_width,
    protocol_streams,
    shuffle_messages,
    unpack,
)
from fedbandits.privacy.streaming import STREAMING, StreamingAnalyzer, StreamingRandomizer, calibrated_stream
from fedbandits.protocols.base import Protocol


class GaussianTreeProtocol(Protocol):
    """Algorithm 2: noisy p-sums from every silo, summed and prefix-released by the server."""

    name = "ldp"
    description = "silo-level LDP: tree-based noisy p-sums, no shuffler (Zhou & Chowdhury Alg. 2, Thm 5.1)"
    shuffled = False

    def __init__(
        self,
        n_runs: int,
        n_agents: int,
        dim: int,
        calibration: NoiseCalibration,
        rngs: Sequence[np.random.Generator],
        record: bool = False,
    ) -> None:
        super().__init__(n_runs, n_agents, dim)
        self.calibration = calibration
        n_tri = dim * (dim + 1) // 2
        sigma = np.concatenate([np.full(n_tri, calibration.sigma_cov), np.full(dim, calibration.sigma_bias)])
        self.sigma = sigma
        # independent streams for the silos' noise and for the shuffler's permutations
        streams = [protocol_streams(rng) for rng in rngs]
        noise_rngs = [noise for noise, _ in streams]
        self.shuffle_rngs = [shuffle for _, shuffle in streams]
        self.randomizer: TreeRandomizer | FactorizedRandomizer | StreamingRandomizer
        self.analyzer: TreeAnalyzer | FactorizedAnalyzer | StreamingAnalyzer
        if calibration.mechanism in STREAMING:
            stream = calibrated_stream(calibration.mechanism, calibration.details, calibration.releases)
            silo_rngs = [rng.spawn(n_agents) for rng in noise_rngs]  # as TreeRandomizer: one stream per silo
            self.randomizer = StreamingRandomizer(n_runs, n_agents, sigma, silo_rngs, stream, self.name == "ldp-prefix")
            self.analyzer = StreamingAnalyzer((n_runs, packed_width(dim)), stream)
        elif calibration.mechanism == "factorized":
            factor = factorize(calibration.releases)
            silo_rngs = [rng.spawn(n_agents) for rng in noise_rngs]  # as TreeRandomizer: one stream per silo
            keep_prefix = self.name == "ldp-prefix"
            self.randomizer = FactorizedRandomizer(n_runs, n_agents, sigma, silo_rngs, factor, keep_prefix)
            self.analyzer = FactorizedAnalyzer((n_runs, packed_width(dim)), factor)
        else:
            self.randomizer = TreeRandomizer(n_runs, n_agents, sigma, noise_rngs, calibration.releases)
            self.analyzer = TreeAnalyzer(n_runs, packed_width(dim), calibration.releases)
        self.transcript: list[dict[str, object]] | None = [] if record else None

    def _messages(self, gamma: np.ndarray) -> np.ndarray:
        return self.randomizer.release(gamma)

    def sync(self, cov: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        messages = self._messages(pack(cov, bias))
        if self.transcript is not None:
            self.transcript.append({"sync": self.randomizer.k, "messages": messages.copy(), "sigma": self.sigma})
        if self.shuffled:
            messages = shuffle_messages(messages, self.shuffle_rngs)
            if self.transcript is not None:
                self.transcript[-1]["server_view"] = messages.copy()  # what the server sees: the shuffled batch
        prefix = self._analyze(messages)
        self._count_round()
        return unpack(prefix, self.dim)

    def _analyze(self, messages: np.ndarray) -> np.ndarray:
        return self.analyzer.release(messages)

    def privacy_report(self) -> dict[str, object]:
        return {"protocol": self.name, **self.calibration.report()}


class GaussianPrefixProtocol(GaussianTreeProtocol):
    """Algorithm 4: every silo releases its own noisy prefix sum; the server adds them."""

    name = "ldp-prefix"
    description = "silo-level LDP, prefix-sum alternative: each silo releases its noisy prefix (Alg. 4)"

    def _messages(self, gamma: np.ndarray) -> np.ndarray:
        self.randomizer.release(gamma)
        return self.randomizer.prefix()

    def _analyze(self, messages: np.ndarray) -> np.ndarray:
        return messages.sum(axis=1)


class ShuffledGaussianTreeProtocol(GaussianTreeProtocol):
    """Algorithm 2 with a shuffler between the silos and the server (SDP via amplification)."""

    name = "sdp-amplification"
    description = "shuffle DP by amplification: noisy p-sums shuffled before the server (Lemma F.2, Thm 5.3)"
    shuffled = True
