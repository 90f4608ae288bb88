"""Heterogeneous clients in clusters: HetoFedBandit's synthetic instance (Blaser, Li & Wang 2024).

As the authors' public code builds it (``blaserethan/HetoFedBandit``: ``Simulation.py``,
``Users/ClusteredUsers.py``, ``Articles.py``), with its defaults:

* **Cluster centres**: M unit vectors (normalised Gaussians) in R^d, redrawn until every pair is at
  least ``gap`` + 2 ``spread`` apart (the code: gap 0.85, spread 1 / (N sqrt(T)) = 6.1e-4 at N = 30,
  T = 3000).
* **Clients**: each of the N clients (agents) picks a centre uniformly at random; its own vector is
  the centre plus a uniformly random direction times U(0, ``spread``).
* **Items**: a fixed pool of ``pool`` articles (the code: 1000) whose coordinate i is N(0, (d - i) / d),
  normalised to unit norm; every client is offered K of them each round, drawn with replacement here
  (the code draws without; at K = 25 of 1000 a repeat is rare and changes no expectation that matters).
* **Rewards**: <x, theta_i> + N(0, ``noise_sd``^2) (the code: 0.1).
* **Arrivals**: every client acts every round, in client order (the code's round-robin).

The instance (centres, clients, pool) comes from ``instance_seed`` and is the same in every run; runs
differ in the items offered and the noise.  For the clustering baselines every client is its own
local server with one user (``user_server``, ``server_users``, ``user_cluster``, ``last_users``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fedbandits.core.validation import check_float, check_int
from fedbandits.envs.base import Environment, Round, env_entry

_MAX_TRIES = 10_000


@dataclass(frozen=True)
class HeterogeneousClientsParams:
    agents: int = field(default=30, metadata={"help": "clients N >= 2, each with its own vector (the code: 30)"})
    clusters: int = field(default=4, metadata={"help": "cluster centres M in [1, agents] (the code: 4)"})
    dim: int = field(default=25, metadata={"help": "feature dimension d >= 2 (the code: 25)"})
    arms: int = field(default=25, metadata={"help": "items offered per client and round K >= 1 (the code: 25)"})
    pool: int = field(default=1000, metadata={"help": "articles in the fixed pool >= arms (the code: 1000)"})
    noise_sd: float = field(default=0.1, metadata={"help": "Gaussian reward noise sd >= 0 (the code: 0.1)"})
    gap: float = field(default=0.85, metadata={"help": "least distance between centres, in (0, 1.4] (the code: 0.85)"})
    spread: float = field(
        default=6.1e-4, metadata={"help": "largest distance of a client from its centre, >= 0 (the code: 1/(N sqrt T))"}
    )
    instance_seed: int = field(default=0, metadata={"help": "seed of the centres, clients and pool, >= 0"})

    def __post_init__(self) -> None:
        check_int("agents", self.agents, low=2)
        check_int("clusters", self.clusters, low=1, high=self.agents)
        check_int("dim", self.dim, low=2)
        check_int("arms", self.arms, low=1)
        check_int("pool", self.pool, low=self.arms)
        check_float("noise_sd", self.noise_sd, low=0.0)
        check_float("gap", self.gap, low=0.0, high=1.4, low_open=True)
        check_float("spread", self.spread, low=0.0, high=0.5)
        check_int("instance_seed", self.instance_seed, low=0)

    #: whether rounds carry user ids (what user-level privacy needs): every client is one user
    user_ids = True


class HeterogeneousClients(Environment):
    """HetoFedBandit's synthetic instance: N clients whose vectors form M clusters (Blaser et al. 2024)."""

    name = "heterogeneous-clients"
    reward_range = (-1.0, 1.0)

    def __init__(self, rngs: Sequence[np.random.Generator], params: HeterogeneousClientsParams) -> None:
        super().__init__(rngs, params.agents, params.arms, params.dim)
        self.noise_sd: float = params.noise_sd
        setup = np.random.default_rng(params.instance_seed)
        self.centres = _centres(setup, params.clusters, params.dim, params.gap + 2.0 * params.spread)
        self.user_cluster = setup.integers(0, params.clusters, size=params.agents)
        direction = setup.standard_normal((params.agents, params.dim))
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        offset = direction * setup.uniform(0.0, params.spread, size=(params.agents, 1))
        self.theta = (self.centres[self.user_cluster] + offset).astype(np.float32)  # (N, d)
        scale = np.sqrt((params.dim - np.arange(params.dim)) / params.dim)
        articles = setup.standard_normal((params.pool, params.dim)) * scale
        self.pool = (articles / np.linalg.norm(articles, axis=1, keepdims=True)).astype(np.float32)
        # the clustering baselines' view: client i is user i, alone on local server i
        self.n_users = params.agents
        self.n_clusters = params.clusters
        self.user_server = np.arange(params.agents)
        self.server_users = tuple(np.array([i]) for i in range(params.agents))
        self.last_users = np.broadcast_to(np.arange(params.agents), (self.n_runs, params.agents))
        self._features = np.empty((self.n_runs, self.n_agents, self.n_arms, self.dim), dtype=np.float32)
        self._means = np.empty((self.n_runs, self.n_agents, self.n_arms), dtype=np.float32)
        self._noise = np.empty((self.n_runs, self.n_agents))

    def next_round(self) -> Round:
        for r, rng in enumerate(self.rngs):
            items = rng.integers(0, self.pool.shape[0], size=(self.n_agents, self.n_arms))
            self._features[r] = self.pool[items]
            rng.standard_normal(out=self._noise[r])
        np.einsum("rnkd,nd->rnk", self._features, self.theta, out=self._means)
        return Round(self._features, self._means, self._noise, users=self.last_users)

    def rewards(self, means: np.ndarray, noise: np.ndarray) -> np.ndarray:
        return np.asarray(means, dtype=np.float64) + self.noise_sd * noise

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "clusters": self.n_clusters, "noise_sd": self.noise_sd}


def _centres(rng: np.random.Generator, m: int, dim: int, least: float) -> np.ndarray:
    """m unit vectors with pairwise distance >= ``least`` (rejection sampling); ValueError if none found."""
    for _ in range(_MAX_TRIES):
        c = rng.standard_normal((m, dim))
        c /= np.linalg.norm(c, axis=1, keepdims=True)
        dist = np.linalg.norm(c[:, None] - c[None], axis=-1)
        if m == 1 or dist[np.triu_indices(m, 1)].min() >= least:
            return c
    raise ValueError(f"gap: no {m} unit vectors in dimension {dim} at least {least:g} apart were found; lower gap")


#: the registry's entry (fedbandits' pyproject.toml names it)
ENTRY = env_entry(
    HeterogeneousClients,
    HeterogeneousClientsParams,
    "heterogeneous clients in clusters, HetoFedBandit's synthetic instance (Blaser et al. 2024)",
)
