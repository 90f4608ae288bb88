"""HetoFedBandit (Blaser, Li & Wang, AISTATS 2024): federated LinUCB for heterogeneous clients.

Each agent (client) has its own preference vector; clients whose vectors agree are found by a
statistical test after a phase of pure exploration, and collaborate within the groups found.  The
paper's text was not available to us (only its abstract); this follows the authors' public code
(``blaserethan/HetoFedBandit``, ``lib/HetoFedBandit.py``, class ``HetoFedBandit_Simplified``, which
its README calls HetoFedBandit), batched over runs x agents:

1. **Pure exploration** for ``explore`` rounds (the code: 70): every agent plays a uniformly random
   arm and keeps its own ("clean") statistics A_i = sum x x^T, b_i = sum x y.
2. **Homogeneity test**, once, at the end of exploration (DyClu's test with a noncentral chi-square):
   for every pair (i, j), theta_i = A_i^+ b_i, theta_ij = (A_i + A_j)^+ (b_i + b_j),
   S = [(theta_i - theta_ij)^T A_i (theta_i - theta_ij) + (theta_j - theta_ij)^T A_j (theta_j - theta_ij)] / sigma^2
   (= ||X_i (theta_i - theta_ij)||^2 + ..., without keeping X), df = rank A_i + rank A_j - rank(A_i + A_j),
   p = P(ncx2(df, psi) > S) with psi = 1 / (sigma^2 N^2); i and j are homogeneous iff p > ``test_alpha``
   (the code: 0.01).  The groups are the **maximal cliques** of that graph (the code's
   ``networkx.find_cliques``; here Bron-Kerbosch with pivoting): they may overlap, and a client
   without a homogeneous peer is a group of one.
3. **Collaboration**: every agent runs LinUCB on its collaboration statistics (its own data until a
   sync) with the radius alpha_t = sigma sqrt(d ln(1 + n / (d lambda)) + 2 ln(1 / delta)) + sqrt(lambda)
   (n: the observations in those statistics).  Agent i raises an event when
   n_buf ln(det(A + lambda I) / det(A - A_buf + lambda I)) >= D (A_buf, n_buf: its data since its last sync;
   the buffer fills during exploration too, as in the code, so events follow the clustering at once);
   every group containing it joins the server's FIFO queue (once).  After each round the server serves
   one queued group: its members upload their whole clean statistics, the server adds them and every
   member adopts the sum (2 |C| messages); a client in several groups keeps the last sum it received.

Choices where the code is a script and this is a library: ``threshold`` D is a parameter (the code's
D = T / ((N / M) d ln T) uses the true number of clusters M; at its defaults, T = 3000, N = 30, M = 4,
d = 25, that is 2.0, our default); ``sigma`` defaults to the environment's reward-noise scale
(:meth:`~fedbandits.envs.base.Environment.noise_scale`: its stated noise sd, 0.1 on ``heterogeneous-clients``
as in the code, whose sigma 0.1 matches its Gaussian noise; else half its expected rewards' range, 0.5 for
rewards in [0, 1]; 0.5 without an environment), because the test divides by sigma^2: at 5x the noise
(the former fixed default 0.5 on that instance) every pair passes as homogeneous, one group of all 30
clients, and the final regret is 20x; a member's inverse is refreshed at the download (the code refreshes
it one decision later).  The determinant ratio is a running sum of log(1 + x^T V^{-1} x) with V^{-1} kept
by Sherman-Morrison: O(d^2) per observation.  Non-private.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from fedbandits.algorithms.base import ExplorationParams, Explores, MergeRule, Policy, PolicyContext, policy_entry
from fedbandits.core.exploration import Explorer
from fedbandits.core.ridge import spd_inverse
from fedbandits.core.ucb import UCBScorer
from fedbandits.core.validation import check_choice, check_float, check_int
from fedbandits.protocols.base import FLOAT_BYTES, symmetric_payload_floats

if TYPE_CHECKING:
    from fedbandits.envs.base import Environment

RADII = ("alpha-t", "constant")
#: sigma's default without an environment to state the noise (a policy built alone): rewards in [0, 1]
SIGMA_WITHOUT_ENV = 0.5


@dataclass(frozen=True)
class HetoFedBanditBase:
    """HetoFedBandit's own parameters (the phase, the test, the trigger, the ridge and the radius)."""

    explore: int = field(default=70, metadata={"help": "rounds of pure exploration T0 >= 1 (the code: 70)"})
    test_alpha: float = field(
        default=0.01, metadata={"help": "level of the homogeneity test, in (0, 1): peers iff p > test_alpha"}
    )
    threshold: float = field(
        default=2.0, metadata={"help": "D > 0 of the event trigger n_buf ln(det ratio) >= D (the code's D3: 2.0)"}
    )
    sigma: float | None = field(
        default=None,
        metadata={
            "help": "sub-Gaussian reward-noise scale > 0 of the test and of alpha_t; default: the environment's "
            "reward-noise sd where it states one (heterogeneous-clients: noise_sd), else half its expected "
            "rewards' range (0.5 for rewards in [0, 1])"
        },
    )
    reg: float = field(default=0.1, metadata={"help": "ridge regulariser lambda > 0 (the code: 0.1)"})
    delta: float = field(default=0.1, metadata={"help": "confidence delta in (0, 1) of alpha_t (the code: 0.1)"})
    radius: str = field(default="alpha-t", metadata={"help": "'alpha-t' (the code's) or 'constant' (beta)"})
    beta: float = field(default=1.0, metadata={"help": "constant radius when radius = 'constant', >= 0"})

    def __post_init__(self) -> None:
        check_int("explore", self.explore, low=1)
        check_float("test_alpha", self.test_alpha, low=0.0, high=1.0, low_open=True, high_open=True)
        check_float("threshold", self.threshold, low=0.0, low_open=True)
        if self.sigma is not None:
            check_float("sigma", self.sigma, low=0.0, low_open=True)
        check_float("reg", self.reg, low=0.0, low_open=True)
        check_float("delta", self.delta, low=0.0, high=1.0, low_open=True, high_open=True)
        check_choice("radius", self.radius, RADII)
        check_float("beta", self.beta, low=0.0)

    def check_compatible(self, horizon: int, agents: int, dim: int | None) -> None:
        if self.explore >= horizon:
            raise ValueError(f"explore must be an integer in [1, horizon - 1 = {horizon - 1}], got {self.explore}")


def maximal_cliques(adjacent: np.ndarray) -> list[tuple[int, ...]]:
    """Every maximal clique of the undirected graph ``adjacent (N, N)`` bool (no self loops), each sorted,
    in lexicographic order: Bron-Kerbosch with pivoting."""
    n = adjacent.shape[0]
    neighbours = [set(np.flatnonzero(adjacent[i]).tolist()) - {i} for i in range(n)]
    found: list[tuple[int, ...]] = []

    def expand(clique: set[int], candidates: set[int], excluded: set[int]) -> None:
        if not candidates and not excluded:
            found.append(tuple(sorted(clique)))
            return
        pivot = max(candidates | excluded, key=lambda u: len(candidates & neighbours[u]))
        for v in sorted(candidates - neighbours[pivot]):
            expand(clique | {v}, candidates & neighbours[v], excluded & neighbours[v])
            candidates = candidates - {v}
            excluded = excluded | {v}

    expand(set(), set(range(n)), set())
    return sorted(found)


def homogeneity_pvalues(gram: np.ndarray, bias: np.ndarray, sigma: float) -> np.ndarray:
    """p-values ``(N, N)`` of the test of section 2 for N clients' clean statistics ``gram (N, d, d)``,
    ``bias (N, d)`` (diagonal: 1).  scipy.stats is imported here, not with the module: the registry imports
    every algorithm, and a deployed silo's start-up should not load scipy's solvers (tests/test_lazy.py)."""
    from scipy import stats

    n = gram.shape[0]
    theta = np.einsum("nij,nj->ni", np.linalg.pinv(gram, hermitian=True), bias)
    ranks = np.linalg.matrix_rank(gram, hermitian=True)
    psi = 1.0 / (sigma**2 * n**2)
    out = np.ones((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            pooled = gram[i] + gram[j]
            joint = np.linalg.pinv(pooled, hermitian=True) @ (bias[i] + bias[j])
            di, dj = theta[i] - joint, theta[j] - joint
            s = (di @ gram[i] @ di + dj @ gram[j] @ dj) / sigma**2
            df = int(ranks[i] + ranks[j] - np.linalg.matrix_rank(pooled, hermitian=True))
            out[i, j] = out[j, i] = float(stats.ncx2.sf(s, df, psi)) if df > 0 else 1.0
    return out


@dataclass(frozen=True)
class HetoFedBanditParams(ExplorationParams, HetoFedBanditBase):
    """HetoFedBandit's parameters, then how it chooses after the phase of pure exploration
    (:class:`ExplorationParams`: the code's UCB rule by default)."""


class HetoFedBandit(Policy, Explores):
    """HetoFedBandit (see the module docstring) for R runs x N agents."""

    name = "hetofedbandit"
    description = "heterogeneous clients: explore, test who agrees, LinUCB within the groups found (Blaser et al. 2024)"
    report_merge: ClassVar[Mapping[str, MergeRule]] = {
        "explore": "same",
        "threshold": "same",
        "sigma": "same",
        "groups_found": "mean",
        "largest_group": "max",
        "group_syncs": "sum",
    }

    def __init__(
        self,
        n_runs: int,
        n_agents: int,
        n_arms: int,
        dim: int,
        horizon: int,
        params: HetoFedBanditParams,
        rngs: Sequence[np.random.Generator],
        choice_rngs: Sequence[np.random.Generator] | None = None,
        env: Environment | None = None,
    ) -> None:
        super().__init__(n_runs, n_agents, n_arms, dim, horizon)
        self.params = params
        #: sigma as given, else the noise scale ``env`` states (see the module docstring)
        self.sigma = (
            params.sigma if params.sigma is not None else env.noise_scale() if env is not None else SIGMA_WITHOUT_ENV
        )
        self.rngs = list(rngs)
        self.explorer = Explorer(params, n_runs, n_agents, choice_rngs)
        R, N, d = n_runs, n_agents, dim
        lam = params.reg
        self.clean_gram = np.zeros((R, N, d, d))
        self.clean_bias = np.zeros((R, N, d))
        self.clean_n = np.zeros((R, N))
        self.gram = np.zeros((R, N, d, d))  # collaboration statistics, without lambda I
        self.bias = np.zeros((R, N, d))
        self.n = np.zeros((R, N))
        self.inv = np.broadcast_to(np.eye(d) / lam, (R, N, d, d)).copy()  # (A + lambda I)^{-1}
        self.log_ratio = np.zeros((R, N))  # ln det(A + lambda I) - ln det(A - A_buf + lambda I)
        self.n_buf = np.zeros((R, N))
        self.groups: list[list[tuple[int, ...]]] = [[] for _ in range(R)]
        self.queues: list[list[tuple[int, ...]]] = [[] for _ in range(R)]
        self.scorer = UCBScorer(R * N, n_arms, d)
        self.payload = symmetric_payload_floats(d) * FLOAT_BYTES
        self.group_syncs = 0

    def exploring(self) -> bool:
        return self.t < self.params.explore

    def _radius(self) -> np.ndarray | float:
        p = self.params
        if p.radius == "constant":
            return p.beta
        d = self.dim
        alpha = self.sigma * np.sqrt(d * np.log1p(self.n / (d * p.reg)) + 2.0 * math.log(1.0 / p.delta))
        return (alpha + math.sqrt(p.reg)).reshape(-1)

    def _select(self, features: np.ndarray) -> np.ndarray:
        if self.exploring():  # the phase of uniform choices (the code's, from the noise streams): 1/K each
            if self.explorer.available is not None:
                raise ValueError("hetofedbandit's pure exploration draws among all K candidates: no candidate mask")
            self.explorer.uniform(self.n_arms)
            return np.stack([rng.integers(0, self.n_arms, size=self.n_agents) for rng in self.rngs])
        n = self.n_runs * self.n_agents
        theta = np.einsum("...ij,...j->...i", self.inv, self.bias).reshape(n, self.dim)
        flat = features.reshape(n, self.n_arms, self.dim)
        inv = self.inv.reshape(n, self.dim, self.dim)
        return self.explorer.choose(self.scorer, flat, inv, theta, self._radius())

    def _observe(self, x: np.ndarray, y: np.ndarray) -> None:
        outer, xy = x[..., :, None] * x[..., None, :], x * y[..., None]
        self.clean_gram += outer
        self.clean_bias += xy
        self.clean_n += 1
        self.gram += outer
        self.bias += xy
        self.n += 1
        u = np.einsum("...ij,...j->...i", self.inv, x)
        q = np.einsum("...i,...i->...", x, u)
        self.log_ratio += np.log1p(q)
        self.n_buf += 1
        self.inv -= (u / (1.0 + q)[..., None])[..., :, None] * u[..., None, :]

    def end_round(self) -> None:
        super().end_round()
        if self.t == self.params.explore:
            self.cluster()
        elif self.t > self.params.explore:
            events = self.n_buf * self.log_ratio >= self.params.threshold
            for run in np.flatnonzero(events.any(axis=1)):
                queue = self.queues[run]
                for i in np.flatnonzero(events[run]):
                    queue += [g for g in self.groups[run] if i in g and g not in queue]
            for r in range(self.n_runs):
                if self.queues[r]:
                    self.serve(r, self.queues[r].pop(0))

    def cluster(self) -> None:
        """Section 2 of the module docstring, for every run."""
        for r in range(self.n_runs):
            p = homogeneity_pvalues(self.clean_gram[r], self.clean_bias[r], self.sigma)
            adjacent = p > self.params.test_alpha
            np.fill_diagonal(adjacent, False)
            self.groups[r] = maximal_cliques(adjacent)

    def serve(self, r: int, group: tuple[int, ...]) -> None:
        """The members of ``group`` upload their clean statistics and adopt their sum."""
        members = list(group)
        gram = self.clean_gram[r, members].sum(axis=0)
        bias = self.clean_bias[r, members].sum(axis=0)
        self.gram[r, members] = gram
        self.bias[r, members] = bias
        self.n[r, members] = self.clean_n[r, members].sum()
        self.inv[r, members] = spd_inverse(gram + self.params.reg * np.eye(self.dim))
        self.log_ratio[r, members] = 0.0
        self.n_buf[r, members] = 0.0
        self.sync_rounds[r] += 1
        self.messages[r] += 2 * len(members)
        self.bytes_sent[r] += 2 * len(members) * self.payload
        self.group_syncs += 1

    def report(self) -> dict[str, object]:
        found = [len(g) for g in self.groups]
        return {
            "explore": self.params.explore,
            "threshold": self.params.threshold,
            "sigma": self.sigma,
            "groups_found": float(np.mean(found)) if found else 0.0,
            "largest_group": max((len(c) for g in self.groups for c in g), default=0),
            "group_syncs": self.group_syncs,
        }


def _build(params: HetoFedBanditParams, ctx: PolicyContext) -> Policy:
    return HetoFedBandit(
        ctx.n_runs,
        ctx.n_agents,
        ctx.n_arms,
        ctx.dim,
        ctx.horizon,
        params,
        list(ctx.noise_rngs),
        ctx.choice_rngs,
        env=ctx.env,
    )


#: the registry's entry (fedbandits' pyproject.toml names it)
ENTRY = policy_entry(HetoFedBandit, HetoFedBanditParams, _build)
