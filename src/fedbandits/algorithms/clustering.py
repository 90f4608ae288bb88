"""Shared pieces of the clustering-of-bandits policies (FCLUB family and its baselines).

* :class:`ClusterUCBParams` -- radius / regulariser parameters every clustering policy shares, and
  how it chooses (:class:`~fedbandits.algorithms.base.ExplorationParams`: UCB by default);
* :func:`confidence_width_f` -- F(T) = sqrt((1 + ln(1 + T)) / (1 + T)) of Eqs. (3)-(4) of
  Liu et al. (2022) (the CB(T) of Gentile et al. 2014 without its alpha);
* :func:`components` -- connected components of a boolean adjacency matrix (numbered as scipy's);
* :func:`adjusted_rand_index` -- agreement of detected with true clusters;
* :class:`UserStructure` -- users, servers and true clusters read from a clustered environment;
* :class:`ClusteredPolicy` -- the per-arrival driver: slot j of a round is the user
  ``env.last_users[:, j]``; slots are played in order, each with the feedback of the earlier ones,
  and each choice goes through a :class:`~fedbandits.core.exploration.ArrivalExplorer`.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np

from fedbandits.algorithms.base import ExplorationParams, Explores, Policy
from fedbandits.core.exploration import ArrivalExplorer
from fedbandits.core.ucb import ConfidenceRadius
from fedbandits.core.validation import check_float
from fedbandits.envs.base import Environment, Round


@dataclass(frozen=True)
class ClusterRidgeParams:
    """Ridge and confidence-radius parameters shared by the clustering policies.

    ``radius = "theory"``: the policy's own confidence radius (Lemma 1 of Liu et al. 2022 for
    the FCLUB family, the self-normalised bound of Abbasi-Yadkori et al. 2011 for the
    baselines) times ``beta_scale``; ``"constant"``: ``beta`` for every learner, as in the
    papers' experiments.
    """

    reg: float = field(default=1.0, metadata={"help": "ridge regulariser lambda > 0 (user estimates, non-private)"})
    radius: str = field(default="constant", metadata={"help": "'theory' (x beta_scale) or 'constant' (beta)"})
    beta: float = field(default=0.3, metadata={"help": "constant radius when radius = 'constant', >= 0"})
    beta_scale: float = field(default=1.0, metadata={"help": "multiplier of the theory radius, >= 0"})
    alpha: float = field(default=0.01, metadata={"help": "failure probability of the theory radius, in (0, 1]"})
    noise_scale: float = field(default=0.5, metadata={"help": "sub-Gaussian reward-noise scale sigma_0 >= 0"})

    def __post_init__(self) -> None:
        check_float("reg", self.reg, low=0.0, low_open=True)
        check_float("beta", self.beta, low=0.0)
        check_float("beta_scale", self.beta_scale, low=0.0)
        self.confidence_radius()  # validates radius, alpha, noise_scale

    def confidence_radius(self) -> ConfidenceRadius:
        scale = self.beta if self.radius == "constant" else self.beta_scale
        return ConfidenceRadius(kind=self.radius, scale=scale, alpha=self.alpha, noise_scale=self.noise_scale)


@dataclass(frozen=True)
class ClusterUCBParams(ExplorationParams, ClusterRidgeParams):
    """The clustering policies' ridge and radius parameters, then how they choose
    (:class:`ExplorationParams`: the papers' UCB rule by default)."""


@overload
def confidence_width_f(count: np.ndarray) -> np.ndarray: ...
@overload
def confidence_width_f(count: float) -> float: ...
def confidence_width_f(count: np.ndarray | float) -> np.ndarray | float:
    """F(T) = sqrt((1 + ln(1 + T)) / (1 + T)) (Liu et al. 2022, after Eq. (3))."""
    if np.isscalar(count):
        c = float(count)  # type: ignore[arg-type]
        return math.sqrt((1.0 + math.log1p(c)) / (1.0 + c))
    counts = np.asarray(count, dtype=np.float64)
    return np.sqrt((1.0 + np.log1p(counts)) / (1.0 + counts))


def components(adjacency: np.ndarray) -> tuple[int, np.ndarray]:
    """(number, labels) of the connected components of a boolean adjacency matrix (edges undirected).

    Components are numbered in the order of their smallest vertex, as scipy's
    ``connected_components`` numbers them.  Minimum-label propagation on the dense matrix: every
    vertex takes the smallest root among itself and its neighbours, then its root's root, until
    nothing changes (each vertex's root is then the smallest vertex of its component); for the
    few dozen users of a server graph this is ~10x faster than building a sparse matrix.
    """
    linked = np.asarray(adjacency, dtype=bool)
    n = linked.shape[0]
    linked = linked | linked.T
    root = np.arange(n)
    while True:
        new = np.minimum(root, np.where(linked, root, n).min(axis=1, initial=n))
        new = new[new]
        if np.array_equal(new, root):
            break
        root = new
    _, labels = np.unique(root, return_inverse=True)
    return int(labels.max(initial=-1)) + 1, labels.astype(np.int64)


def adjusted_rand_index(truth: np.ndarray, detected: np.ndarray) -> float:
    """Adjusted Rand index (Hubert & Arabie 1985) of two labelings of the same items; 1 = identical."""
    truth = np.asarray(truth)
    detected = np.asarray(detected)
    _, a = np.unique(truth, return_inverse=True)
    _, b = np.unique(detected, return_inverse=True)
    table = np.zeros((a.max() + 1, b.max() + 1), dtype=np.int64)
    np.add.at(table, (a, b), 1)

    def pairs(v: np.ndarray) -> float:
        v = v.astype(np.float64)
        return float((v * (v - 1.0) / 2.0).sum())

    n = truth.size
    total = n * (n - 1) / 2.0
    index = pairs(table)
    rows, cols = pairs(table.sum(axis=1)), pairs(table.sum(axis=0))
    expected = rows * cols / total if total > 0 else 0.0
    top = (rows + cols) / 2.0
    if top == expected:  # both labelings trivial (one cluster each, or all singletons)
        return 1.0
    return (index - expected) / (top - expected)


@dataclass(frozen=True)
class UserStructure:
    """Users, local servers and (for evaluation only) true clusters of a clustered environment."""

    n_users: int
    n_servers: int
    user_server: np.ndarray  # (n,)
    server_users: tuple[np.ndarray, ...]
    user_cluster: np.ndarray  # (n,) true cluster: read only by the metrics, never by the algorithms
    n_clusters: int

    @classmethod
    def from_env(cls, env: Environment | None) -> UserStructure:
        needed = ("n_users", "user_server", "server_users", "user_cluster", "n_clusters", "last_users")
        if env is None or any(not hasattr(env, a) for a in needed):
            name = getattr(env, "name", None)
            raise ValueError(
                "clustering policies need a clustered environment (users, servers, last_users), e.g. "
                f"'clustered-synthetic' or 'movielens-clusters'; got {name!r}"
            )
        server = np.asarray(env.user_server, dtype=np.int64)  # type: ignore[attr-defined]
        return cls(
            n_users=int(env.n_users),  # type: ignore[attr-defined]
            n_servers=int(server.max()) + 1,
            user_server=server,
            server_users=tuple(np.asarray(u, dtype=np.int64) for u in env.server_users),  # type: ignore[attr-defined]
            user_cluster=np.asarray(env.user_cluster, dtype=np.int64),  # type: ignore[attr-defined]
            n_clusters=int(env.n_clusters),  # type: ignore[attr-defined]
        )


class ClusteredPolicy(Policy, Explores):
    """A policy that serves one arriving user at a time (Algorithm 1, lines 10-13 of Liu et al.).

    The simulator's M agents are arrival *slots*: slot j of a round serves user
    ``env.last_users[:, j]``.  Slots are played in order; the policy sees the reward of slot j
    before choosing for slot j + 1.  ``arrivals`` counts user arrivals (the paper's time t).
    """

    def __init__(self, n_runs: int, n_agents: int, n_arms: int, dim: int, horizon: int, users: UserStructure) -> None:
        super().__init__(n_runs, n_agents, n_arms, dim, horizon)
        self.users = users
        self.arrivals = 0
        self.total_arrivals = horizon * n_agents
        self._env: Environment | None = None
        self.explorer: ArrivalExplorer = ArrivalExplorer(None, n_runs, n_agents, None)  # UCB until explore_with
        self.slot = 0  # the arrival slot j being served

    def explore_with(self, params: object, choice_rngs: Sequence[np.random.Generator] | None) -> None:
        """Choose by ``params``' rule (:class:`ExplorationParams`), run r drawing from ``choice_rngs[r]``."""
        self.explorer = ArrivalExplorer(params, self.n_runs, self.n_agents, choice_rngs)

    def pick(self, r: int, features: np.ndarray, proj: np.ndarray, beta: float) -> int:
        """The arm for run r's current slot from its learner's projection [V^{-1} | theta] and radius."""
        return self.explorer.choose_one(r, self.slot, features, proj, beta)

    # -- per-arrival hooks -------------------------------------------------------------------
    def before_arrival(self, t: int) -> None:
        """Called before arrival t (1-based) is served, for every run at once."""

    @abstractmethod
    def choose(self, r: int, user: int, features: np.ndarray) -> int:
        """Arm for ``user`` in run r given its items ``features (K, d)`` float32."""

    @abstractmethod
    def update(self, r: int, user: int, x: np.ndarray, y: float) -> None:
        """Feedback of run r's current arrival: chosen features ``x (d,)`` float64, reward y."""

    # -- the driver --------------------------------------------------------------------------
    def step(self, rnd: Round, env: Environment) -> np.ndarray:
        users = env.last_users.tolist()  # type: ignore[attr-defined]
        actions = np.empty((self.n_runs, self.n_agents), dtype=np.int64)
        feats, means, noise = rnd.features, rnd.means, rnd.noise
        arm_rewards, feats64 = rnd.arm_rewards, rnd.features64
        for j in range(self.n_agents):
            self.arrivals += 1
            self.before_arrival(self.arrivals)
            self.slot = j
            for r in range(self.n_runs):
                u = users[r][j]
                a = self.choose(r, u, feats[r, j])
                actions[r, j] = a
                if arm_rewards is None or feats64 is None:
                    y = float(env.rewards(means[r, j, a], noise[r, j]))
                    self.update(r, u, feats[r, j, a].astype(np.float64), y)
                else:  # the same numbers, computed by the environment for a block of rounds
                    self.update(r, u, feats64[r, j, a], float(arm_rewards[r, j, a]))
        self.end_round()
        return actions

    def _select(self, features: np.ndarray) -> np.ndarray:
        """Arms for every slot of a round without feedback in between (the env gives the users).

        Advances the arrival counter (phase hooks run here); :meth:`observe` then feeds back.
        """
        if self._env is None:
            raise RuntimeError("call bind(env) before select(): clustering policies need the arriving users")
        users = self._env.last_users  # type: ignore[attr-defined]
        out = np.empty((self.n_runs, self.n_agents), dtype=np.int64)
        for j in range(self.n_agents):
            self.arrivals += 1
            self.before_arrival(self.arrivals)
            self.slot = j
            for r in range(self.n_runs):
                out[r, j] = self.choose(r, int(users[r, j]), features[r, j])
        return out

    def _observe(self, x: np.ndarray, y: np.ndarray) -> None:
        if self._env is None:
            raise RuntimeError("call bind(env) before observe(): clustering policies need the arriving users")
        users = self._env.last_users  # type: ignore[attr-defined]
        for j in range(self.n_agents):
            for r in range(self.n_runs):
                self.update(r, int(users[r, j]), x[r, j], float(y[r, j]))

    def bind(self, env: Environment) -> None:
        """Remember the environment whose ``last_users`` the select/observe interface reads."""
        self._env = env
