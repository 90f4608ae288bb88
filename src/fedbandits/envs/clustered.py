"""Synthetic clustered instance of federated online clustering of bandits (Liu et al. 2022, section 2).

Problem setting (section 2 of the paper): n users with m distinct preference vectors (the
clusters), spread over L local servers; each round one user arrives, uniformly at random over
all n users (probability 1/n), and K items are drawn i.i.d. from a fixed distribution rho over
the unit ball; the reward of item x for user i has mean <theta_i, x> and lies in [0, 1].

Instance (:class:`ClusteredSynthetic`, registry name ``clustered-synthetic``)
-----------------------------------------------------------------------------
* **Preference vectors** theta_j = (w_j, 1) / sqrt(2), j = 1..m, with w_j uniform on the unit
  sphere of R^{d-1}, so ||theta_j|| = 1.  The gap (Assumption 1) is *ensured* by rejection:
  the m directions are redrawn (up to 10,000 times) until every pair has
  ||theta_a - theta_b|| = ||w_a - w_b|| / sqrt(2) >= ``gap``; the gap actually realised (the
  minimum pairwise distance, >= ``gap``) is exposed as ``gap``.  ||theta_a - theta_b|| <= sqrt(2),
  so ``gap`` must lie in (0, 1.2] (larger gaps are not reachable for large m).
* **Users**: a fixed permutation of the n users (from ``instance_seed``) is dealt round-robin to
  the m clusters (sizes differ by at most one) and an independent one round-robin to the L
  servers (``agents``), as in ``movielens-clusters``.  The instance (vectors, memberships) is the
  same in every run; only arrivals, items and reward noise differ between runs.
* **Items** (the distribution rho of Assumption 2): x = (g / ||g||, 1) / sqrt(2) with
  g ~ N(0, I_{d-1}), fresh and i.i.d. for every item of every round, so ||x|| = 1 and
  E[x x^T] = diag(I_{d-1} / (2(d-1)), 1/2) (the cross terms vanish by symmetry): full rank with
  lambda_x = 1 / (2(d-1)) (1/18 at d = 10).  The paper's appendix with its exact generator is
  not part of the shared text; this is the construction of the CLUB/SCLUB experiments' code
  (normalised Gaussian directions with a constant 1/sqrt(2) entry).
* **Rewards**: the expected reward <x, theta_j> = (1 + <g/||g||, w_j>) / 2 lies in [0, 1] by
  Cauchy-Schwarz, and the reward is **Bernoulli(<x, theta_j>)** (1 when the round's uniform noise
  is below the mean): exactly in [0, 1], unbiased, 1/2-sub-Gaussian (sigma_0 = 1/2).  A clipped
  Gaussian reward would have a mean different from <x, theta> near 0 and 1, making the
  pseudo-regret inexact, so it is not offered.
* **Arrivals**: ``arrivals = "single"`` (default, the paper's model): one user per round,
  uniform over all n users, M = 1 arrival slot.  ``"per-server"``: every server gets one
  arriving user per round, uniform over its own users, M = L slots (slot l is server l).

Per run and round the run's Generator draws the M arriving users, then the (M, K, d-1)
normals of the items, then M uniforms (reward noise).  Features are float32 and expected
rewards are computed from exactly those float32 numbers.  Rounds are drawn a block of up to 256
at a time (each run's numbers in the same order, so the same numbers as one round at a time) and
their items, means and every arm's reward computed together: per round only the Generator calls
remain.

Clustering policies read ``last_users (R, M)``, ``user_cluster (n,)``, ``user_server (n,)``,
``server_users`` (user indices per server), ``n_users``, ``n_clusters``, ``centres (m, d)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fedbandits.core.validation import check_choice, check_float, check_int
from fedbandits.envs.base import Environment, Round, env_entry

_HALF_SQRT2 = math.sqrt(0.5)
ARRIVALS = ("single", "per-server")
MAX_GAP = 1.2
_MAX_TRIES = 10_000
#: rounds drawn at once: at most _MAX_BLOCK, and about _BLOCK_FLOATS item coordinates per block
_MAX_BLOCK = 256
_BLOCK_FLOATS = 1 << 17


@dataclass(frozen=True)
class ClusteredSyntheticParams:
    users: int = field(default=100, metadata={"help": "number of users n >= clusters and >= agents"})
    clusters: int = field(default=4, metadata={"help": "number of distinct preference vectors m in [1, users]"})
    agents: int = field(default=5, metadata={"help": "number of local servers L in [1, users]"})
    arms: int = field(default=10, metadata={"help": "items per round K >= 1 (fresh i.i.d. draws)"})
    dim: int = field(default=10, metadata={"help": "feature dimension d >= 2"})
    gap: float = field(default=0.5, metadata={"help": "minimum distance gamma between cluster vectors, in (0, 1.2]"})
    arrivals: str = field(
        default="single", metadata={"help": "'single' (one user per round, uniform over all users) or 'per-server'"}
    )
    instance_seed: int = field(default=0, metadata={"help": "seed of the vectors and memberships, >= 0"})

    def __post_init__(self) -> None:
        check_int("users", self.users, low=1)
        check_int("clusters", self.clusters, low=1, high=self.users)
        check_int("agents", self.agents, low=1, high=self.users)
        check_int("arms", self.arms, low=1)
        check_int("dim", self.dim, low=2)
        check_float("gap", self.gap, low=0.0, high=MAX_GAP, low_open=True)
        check_choice("arrivals", self.arrivals, ARRIVALS)
        check_int("instance_seed", self.instance_seed, low=0)
        if self.dim == 2 and self.clusters > 2:
            raise ValueError(f"clusters must be <= 2 when dim = 2 (two unit directions in R^1), got {self.clusters}")

    #: whether rounds carry user ids (what user-level privacy needs): every round serves one of the instance's users
    user_ids = True


def separated_directions(rng: np.random.Generator, m: int, dim: int, gap: float) -> np.ndarray:
    """m cluster vectors theta_j = (w_j, 1)/sqrt(2) with pairwise distance >= gap, (m, dim) float32.

    Rejection sampling of whole configurations (module docstring); ValueError if 10,000 draws fail.
    """
    for _ in range(_MAX_TRIES):
        w = rng.standard_normal((m, dim - 1))
        w /= np.linalg.norm(w, axis=1, keepdims=True)
        theta = np.empty((m, dim))
        theta[:, :-1] = w * _HALF_SQRT2
        theta[:, -1] = _HALF_SQRT2
        theta32 = theta.astype(np.float32)
        t64 = theta32.astype(np.float64)
        dist = np.linalg.norm(t64[:, None] - t64[None], axis=-1)
        if m == 1 or dist[np.triu_indices(m, 1)].min() >= gap:
            return theta32
    raise ValueError(f"gap = {gap}: no {m} directions in dimension {dim} with that separation found; lower gap")


def deal(perm: np.ndarray, groups: int) -> np.ndarray:
    """Group label of every element when ``perm`` is dealt round-robin to ``groups`` groups."""
    out = np.empty(perm.size, dtype=np.int64)
    out[perm] = np.arange(perm.size) % groups
    return out


class ClusteredSynthetic(Environment):
    """Synthetic FCLUB instance: n users in m clusters over L servers (Liu et al. 2022, section 5)."""

    name = "clustered-synthetic"
    reward_range = (0.0, 1.0)

    def __init__(self, rngs: Sequence[np.random.Generator], params: ClusteredSyntheticParams) -> None:
        slots = 1 if params.arrivals == "single" else params.agents
        super().__init__(rngs, slots, params.arms, params.dim)
        self.params = params
        self.n_users = params.users
        self.n_clusters = params.clusters
        self.n_servers = params.agents
        self.arrivals = params.arrivals
        setup = np.random.default_rng(params.instance_seed)
        self.centres = separated_directions(setup, params.clusters, params.dim, params.gap)
        self.centres.flags.writeable = False
        c64 = self.centres.astype(np.float64)
        dist = np.linalg.norm(c64[:, None] - c64[None], axis=-1)
        self.gap = float(dist[np.triu_indices(self.n_clusters, 1)].min()) if self.n_clusters > 1 else math.inf
        self.user_cluster = deal(setup.permutation(self.n_users), self.n_clusters)
        self.user_server = deal(setup.permutation(self.n_users), self.n_servers)
        self.server_users = [np.flatnonzero(self.user_server == s) for s in range(self.n_servers)]
        for a in (self.user_cluster, self.user_server):
            a.flags.writeable = False
        sizes = np.array([u.size for u in self.server_users])
        self._server_sizes = sizes
        self._server_table = np.zeros((self.n_servers, int(sizes.max())), dtype=np.int64)
        for s, members in enumerate(self.server_users):
            self._server_table[s, : members.size] = members
        self._server_index = np.arange(self.n_servers)
        # rounds are drawn and transformed a block at a time (module docstring): (B, R, M, ...)
        per_round = self.n_runs * self.n_agents * self.n_arms * self.dim
        self._block = max(1, min(_MAX_BLOCK, _BLOCK_FLOATS // per_round))
        shape = (self._block, self.n_runs, self.n_agents, self.n_arms)
        #: user arriving in every (run, slot) of the last round
        self.last_users = np.zeros((self.n_runs, self.n_agents), dtype=np.int64)
        self._users = np.zeros(shape[:3], dtype=np.int64)
        self._raw = np.empty((*shape, self.dim - 1))
        self._features = np.empty((*shape, self.dim), dtype=np.float32)
        self._features[..., -1] = _HALF_SQRT2
        self._means = np.empty(shape, dtype=np.float32)
        self._noise = np.empty(shape[:3])
        self._features64 = np.empty((*shape, self.dim))
        self._arm_rewards = np.empty(shape)
        self._user_theta64 = self.centres.astype(np.float64)[self.user_cluster]  # (n, d)
        self._next = self._block  # the round of the block served next; a full block is used up

    def user_theta(self) -> np.ndarray:
        """The true preference vector of every user, (n_users, d)."""
        return self.centres[self.user_cluster]

    def next_round(self) -> Round:
        if self._next == self._block:
            self._draw_block()
            self._next = 0
        b = self._next
        self._next = b + 1
        self.last_users = self._users[b]
        return Round(
            self._features[b], self._means[b], self._noise[b], self._arm_rewards[b], self._features64[b], self._users[b]
        )

    def _draw_block(self) -> None:
        """The next B rounds: each run's draws in round order, then the items and means of all at once."""
        single = self.arrivals == "single"
        for r, rng in enumerate(self.rngs):
            for b in range(self._block):
                if self.n_agents == 1 and single:
                    self._users[b, r, 0] = rng.integers(self.n_users)
                elif single:
                    self._users[b, r] = rng.integers(0, self.n_users, size=self.n_agents)
                else:
                    slot = rng.integers(0, self._server_sizes)
                    self._users[b, r] = self._server_table[self._server_index, slot]
                rng.standard_normal(out=self._raw[b, r])
                rng.random(out=self._noise[b, r])
        raw = self._raw
        # (1 - 2^-22): the float32 item then has norm <= 1 after rounding (no spurious clipping counts)
        scale = (_HALF_SQRT2 * (1.0 - 2.0**-22)) / np.sqrt(np.einsum("...i,...i->...", raw, raw))
        self._features[..., :-1] = raw * scale[..., None]
        theta = self._user_theta64[self._users]  # (B, R, M, d)
        self._features64[...] = self._features
        means = np.matmul(self._features64, theta[..., None])[..., 0]
        # clip to [0, 1], only a guard against float round-off (np.clip's Python wrapper costs more)
        np.maximum(means, 0.0, out=means)
        np.minimum(means, 1.0, out=means)
        self._means[...] = means
        self._arm_rewards[...] = self.rewards(self._means, self._noise[..., None])

    def rewards(self, means: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """Bernoulli(means): 1 when the round's uniform noise falls below the mean."""
        return (noise < means).astype(np.float64)

    def describe(self) -> dict[str, object]:
        p = self.params
        return {
            **super().describe(),
            "users": p.users,
            "clusters": p.clusters,
            "servers": p.agents,
            "gap": self.gap,
            "arrivals": p.arrivals,
            "instance_seed": p.instance_seed,
        }


#: the registry's entry (fedbandits' pyproject.toml names it)
ENTRY = env_entry(
    ClusteredSynthetic,
    ClusteredSyntheticParams,
    "synthetic FCLUB instance: n users in m clusters over L servers (Liu et al. 2022)",
)
