"""Shuffle DP by the vector-sum protocol: Algorithm 5 of Zhou & Chowdhury (2023).

At release k every silo expands its p-sum into the individual data points it sums (one
covariance x x^T and one bias x y per user of the batches in the node's span) and runs the
vector-sum randomizer of Cheu et al. (2021) (Algorithms 6-7) on each point; the shuffler mixes
all M silos' messages and the server's analyzer estimates their total, which becomes the
synchronised p-sum; prefix sums are released as in Algorithm 2.

The simulator uses the *fast form* (:func:`fedbandits.privacy.vector_sum.vector_sum_fast`),
which samples the analyzer's output from exactly the distribution of the message-level form
(tested in ``tests/test_vector_sum.py``).  Coordinates are scaled into [-1, 1] before
randomizing (covariance entries by 1/L^2, bias entries by 1/(L B)) and scaled back after.

Budget: one user lies in ``nodes`` runs of P_Vec per stream, two streams; each run is
(eps0, delta0)-SDP with (eps0, delta0) from :func:`accounting.vector_sum_round_budget`
(advanced composition), and (g, b, p) follow appendix F.2 for the n points of each run
(``calibration = "paper"`` or ``"tight"``: F.2 is the only analysis, so they coincide).

``calibration = "code"`` takes (g, b, p) from the paper's public code instead
(:func:`accounting.vector_sum_parameters_code`: far fewer noise bits, and the code's grid, so
that its encoding, decoding and noise are reproduced).  What that spends is computed, not
assumed: the smallest eps0 Cheu et al.'s lemma certifies for each run's (g, b, n)
(:func:`accounting.vector_sum_epsilon0`), composed as above; at Figure 2b's settings the lemma
certifies nothing (eps0 far above its range 15), so no guarantee is computed and the report says
so.  The code's total (epsilon, delta) need not admit the paper's per-run split; then only
delta0 = delta / (2 k) is kept, for the certification.
Communication is counted as the protocol sends it: n * D * (g + b) one-bit messages per silo.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedbandits.core.validation import check_int
from fedbandits.privacy import accounting
from fedbandits.privacy.calibration import PrivacySpec
from fedbandits.privacy.guarantee import certified
from fedbandits.privacy.mechanisms import TreeAnalyzer, packed_width, unpack
from fedbandits.privacy.tree import lowest_set_bit, max_nodes_per_datum, node_span, nodes_containing
from fedbandits.privacy.vector_sum import vector_sum_fast, vector_sum_variance
from fedbandits.protocols.base import FLOAT_BYTES, Protocol


@dataclass(frozen=True)
class VectorSumCalibration:
    protocol: str
    calibration: str
    epsilon: float
    delta: float
    releases: int
    nodes: int
    epsilon0: float
    delta0: float
    batch: int
    agents: int
    dim: int
    feature_bound: float
    reward_bound: float

    def parameters(self, level: int) -> tuple[int, int, float]:
        """(g, b, p) for a p-sum of level ``level`` (2^level batches of B users from M silos)."""
        n = (1 << level) * self.batch * self.agents
        if self.calibration == "code":
            return accounting.vector_sum_parameters_code(self.epsilon, self.delta, n, self.dim)
        return accounting.vector_sum_parameters(self.epsilon0, self.delta0, n, packed_width(self.dim))

    def run_epsilon0(self) -> float:
        """The largest per-run epsilon0 any level's (g, b) is certified for (``inf``: no theorem applies);
        the planned ``epsilon0`` for F.2's parameters, computed from the lemma for the code's."""
        if self.calibration != "code":
            return self.epsilon0
        worst = 0.0
        for level in range(self.nodes):
            g, b, _ = self.parameters(level)
            n = (1 << level) * self.batch * self.agents
            worst = max(worst, accounting.vector_sum_epsilon0(g, b, n, packed_width(self.dim), self.delta0))
        return worst

    def noise_std(self, level: int = 0) -> float:
        """Worst-case std of one synced covariance entry of a level-``level`` p-sum (units of x x^T)."""
        g, b, p = self.parameters(level)
        n = (1 << level) * self.batch * self.agents
        return math.sqrt(float(vector_sum_variance(n, g, b, p, 1.0))) * self.feature_bound**2

    def epsilon_spent(self) -> float:
        """Advanced composition (Dwork & Roth 2014, Thm 3.20) of the 2 * nodes runs of P_Vec one
        user takes part in, each (epsilon0, delta0)-SDP, at delta' = delta / 2 (total delta
        2 nodes delta0 + delta / 2 = delta): sqrt(2 k ln(2/delta)) eps0 + k eps0 (e^eps0 - 1)."""
        k = 2 * self.nodes
        eps0 = self.run_epsilon0()
        if math.isinf(eps0):
            return math.inf
        return math.sqrt(2.0 * k * math.log(2.0 / self.delta)) * eps0 + k * eps0 * math.expm1(eps0)

    def report(self) -> dict[str, object]:
        g, b, p = self.parameters(0)
        spent = self.epsilon_spent()
        certificate = (
            "P_Vec (Cheu et al. 2021): the lemma does not certify the public code's (g, b) (its grid, or an "
            "epsilon0 <= 15); no guarantee is computed"
            if math.isinf(spent)
            else f"P_Vec (Cheu et al. 2021) + advanced composition of {2 * self.nodes} runs"
        )
        guarantee, reason = certified(spent, self.epsilon, self.delta, certificate)
        return {
            # appendix F.2's parameters are the only analysis of this protocol: "tight" = "paper"
            "calibration": "code" if self.calibration == "code" else "paper",
            "epsilon": self.epsilon,
            "delta": self.delta,
            "epsilon_spent": spent,
            "guarantee": guarantee,
            "guarantee_reason": reason,
            "releases": self.releases,
            "nodes": self.nodes,
            "noise_std": self.noise_std(0),
            "privacy_epsilon0": self.run_epsilon0(),
            "privacy_delta0": self.delta0,
            "privacy_g_level0": g,
            "privacy_b_level0": b,
            "privacy_p": p,
        }


@functools.lru_cache(maxsize=256)
def calibrate_vector_sum(spec: PrivacySpec, *, agents: int, horizon: int, batch: int, dim: int) -> VectorSumCalibration:
    """Per-run budget and parameters of the vector-sum protocol (raises ValueError if out of range)."""
    check_int("agents", agents, low=1)
    check_int("batch", batch, low=1, high=horizon)
    releases = horizon // batch
    nodes = max_nodes_per_datum(releases)
    try:
        eps0, delta0 = accounting.vector_sum_round_budget(spec.epsilon, spec.delta, nodes)
    except ValueError:
        if spec.calibration != "code":
            raise
        # the code's constants use the total (epsilon, delta): only delta0 is needed, to certify them
        eps0, delta0 = math.nan, spec.delta / (4.0 * nodes)
    cal = VectorSumCalibration(
        protocol="sdp-vector-sum",
        calibration=spec.calibration,
        epsilon=spec.epsilon,
        delta=spec.delta,
        releases=releases,
        nodes=nodes,
        epsilon0=eps0,
        delta0=delta0,
        batch=batch,
        agents=agents,
        dim=dim,
        feature_bound=spec.feature_bound,
        reward_bound=spec.reward_bound,
    )
    cal.parameters(nodes - 1)  # validates the largest run too
    return cal


class VectorSumTreeProtocol(Protocol):
    """``sdp-vector-sum``: shuffled vector-sum protocol over the tree's p-sums (Algorithm 5)."""

    name = "sdp-vector-sum"
    description = "shuffle DP by the vector-sum protocol of Cheu et al. on every p-sum's points (Alg. 5-7)"
    needs_points = True

    def __init__(
        self,
        n_runs: int,
        n_agents: int,
        dim: int,
        calibration: VectorSumCalibration,
        rngs: Sequence[np.random.Generator],
        record: bool = False,
    ) -> None:
        super().__init__(n_runs, n_agents, dim)
        self.calibration = calibration
        self.rngs = [rng.spawn(1)[0] for rng in rngs]
        self.analyzer = TreeAnalyzer(n_runs, packed_width(dim), calibration.releases)
        self.rows, self.cols = np.triu_indices(dim)
        self.scale = np.concatenate(
            [
                np.full(self.rows.size, calibration.feature_bound**2),
                np.full(dim, calibration.feature_bound * calibration.reward_bound),
            ]
        )
        self._batch_x: list[np.ndarray] = []  # current batch: per round (R, M, d)
        self._batch_y: list[np.ndarray] = []
        self._kept: dict[int, np.ndarray] = {}  # batch index -> packed points (R, M, B, P)
        self.k = 0
        self.transcript: list[dict[str, object]] | None = [] if record else None

    def observe_points(self, x: np.ndarray, y: np.ndarray) -> None:
        """The (clipped) features ``(R, M, d)`` and rewards ``(R, M)`` of one round."""
        self._batch_x.append(x.copy())
        self._batch_y.append(y.copy())

    def _packed_points(self) -> np.ndarray:
        x = np.stack(self._batch_x, axis=2)  # (R, M, B, d)
        y = np.stack(self._batch_y, axis=2)  # (R, M, B)
        cov = x[..., self.rows] * x[..., self.cols]
        return np.concatenate([cov, x * y[..., None]], axis=-1) / self.scale

    def sync(self, cov: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = self.k + 1
        if k > self.calibration.releases:
            raise ValueError(f"the tree was planned for {self.calibration.releases} releases")
        self._kept[k] = self._packed_points()
        self._batch_x, self._batch_y = [], []
        level = lowest_set_bit(k)
        first, last = node_span(k)
        points = np.concatenate([self._kept[j] for j in range(first, last + 1)], axis=2)  # (R, M, n_b, P)
        g, b, p = self.calibration.parameters(level)
        n_runs, n_silos, per_silo, width = points.shape
        psum = np.stack(
            [
                vector_sum_fast(points[r].reshape(-1, width), g, b, p, 1.0, self.rngs[r]) * self.scale
                for r in range(n_runs)
            ]
        )
        if self.transcript is not None:
            self.transcript.append({"sync": k, "messages": psum[:, None, :].copy(), "sigma": np.zeros(width)})
        prefix = self.analyzer.release_sum(psum)
        # batches that no later node contains are dropped (the largest node keeps all of its own)
        for j in list(self._kept):
            containing = nodes_containing(j, self.calibration.releases)
            if not containing or containing[-1] <= k:
                del self._kept[j]
        self.k = k
        self.syncs += 1
        bits = per_silo * width * (g + b)
        self.messages += n_silos * bits + n_silos  # one-bit uplink messages + one downlink each
        self.bytes_sent += n_silos * (-(-bits // 8)) + n_silos * width * FLOAT_BYTES
        return unpack(prefix, self.dim)

    def privacy_report(self) -> dict[str, object]:
        return {"protocol": self.name, **self.calibration.report()}
