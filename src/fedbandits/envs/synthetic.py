"""Synthetic instances of the papers' experiments."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fedbandits.core.random import NormalSampler
from fedbandits.core.validation import check_choice, check_float, check_int
from fedbandits.envs.base import Environment, Round, env_entry

_HALF_SQRT2 = math.sqrt(0.5)


@dataclass(frozen=True)
class GaussianSphereParams:
    agents: int = field(default=10, metadata={"help": "number of agents (silos) M >= 1"})
    arms: int = field(default=100, metadata={"help": "fresh arms per agent per round K >= 1"})
    dim: int = field(default=10, metadata={"help": "feature dimension d >= 2"})
    noise_sd: float = field(default=0.5, metadata={"help": "reward noise standard deviation >= 0 (paper: 0.5)"})
    returning_users: int = field(
        default=0,
        metadata={
            "help": "users per silo who return, >= 0: each round's user is one of them, drawn by `visits` "
            "(0 = every interaction a new user, the paper's)"
        },
    )
    visits: str = field(
        default="uniform",
        metadata={"help": "returning users' visit distribution: 'uniform' or 'zipf' (P(user u) ~ 1 / u^s)"},
    )
    zipf_exponent: float = field(default=1.0, metadata={"help": "s of visits = 'zipf', in (0, 10]"})

    def __post_init__(self) -> None:
        check_int("agents", self.agents, low=1)
        check_int("arms", self.arms, low=1)
        check_int("dim", self.dim, low=2)
        check_float("noise_sd", self.noise_sd, low=0.0)
        check_int("returning_users", self.returning_users, low=0)
        check_choice("visits", self.visits, VISITS)
        check_float("zipf_exponent", self.zipf_exponent, low=0.0, high=10.0, low_open=True)

    @property
    def user_ids(self) -> bool:
        """Whether its rounds carry user ids (what user-level privacy needs)."""
        return self.returning_users > 0


VISITS = ("uniform", "zipf")


def visit_probabilities(users: int, visits: str, exponent: float) -> np.ndarray:
    """P(user u), u = 0..users-1: uniform, or Zipf's 1/(u+1)^s normalised (user 0 visits the most)."""
    if visits == "uniform":
        return np.full(users, 1.0 / users)
    weights = 1.0 / np.arange(1, users + 1, dtype=np.float64) ** exponent
    return weights / weights.sum()


class UserStream:
    """Which returning user each silo serves each round: ids drawn i.i.d. from ``probabilities``, from a
    stream of their own (spawned from the run's environment Generator, so the contexts and rewards are
    those of the same run without returning users)."""

    def __init__(self, rngs: Sequence[np.random.Generator], agents: int, probabilities: np.ndarray) -> None:
        self.rngs = [rng.spawn(1)[0] for rng in rngs]
        self.cdf = np.cumsum(probabilities)
        self.cdf[-1] = 1.0
        self.users = np.empty((len(self.rngs), agents), dtype=np.int64)

    def next(self) -> np.ndarray:
        for r, rng in enumerate(self.rngs):
            self.users[r] = np.searchsorted(self.cdf, rng.random(self.users.shape[1]), side="right")
        return self.users


class GaussianSphere(Environment):
    """Zhou & Chowdhury (2023), section 6 (after Vaswani et al. 2020).

    theta* and every arm's feature vector are a (d-1)-dimensional vector of norm 1/sqrt(2),
    uniform on that sphere, with an entry 1/sqrt(2) appended (so ||x|| = 1).  Every agent gets
    K fresh arms each round.  Rewards are <x, theta*> + N(0, noise_sd^2) with noise_sd = 0.5
    (variance 0.25) by default.  theta* is drawn once per run.

    Returning users (``returning_users = U > 0``, not in the paper): each silo has U users and each
    round's user is drawn from them by ``visits`` (uniform, or Zipf with exponent s), from a stream of
    its own; the user is an id only (every user has the same theta*), so the contexts and rewards are
    exactly those without returning users.  Rounds then carry the ids (:attr:`Round.users`), which
    user-level privacy bounds contributions by.

    Features and theta* are float32: the instance is *defined* in float32, and expected
    rewards are computed from exactly those numbers, so pseudo-regret is exact for it.  The
    context normals come from the vectorised ziggurat of :mod:`fedbandits.core.random`.
    """

    name = "gaussian-sphere"
    reward_range = (-1.0, 1.0)

    def __init__(self, rngs: Sequence[np.random.Generator], params: GaussianSphereParams) -> None:
        super().__init__(rngs, params.agents, params.arms, params.dim)
        self.noise_sd: float = params.noise_sd
        shape = (self.n_runs, self.n_agents, self.n_arms, self.dim)
        self._raw = np.empty((*shape[:-1], self.dim - 1), dtype=np.float32)
        self._features = np.empty(shape, dtype=np.float32)
        self._features[..., -1] = _HALF_SQRT2
        self._sampler = NormalSampler(self._raw[0].size)
        self._square = np.empty_like(self._raw)
        self._ones = np.ones(self.dim - 1, dtype=np.float32)
        self._sqnorm = np.empty(shape[:-1], dtype=np.float32)
        self._means = np.empty(shape[:-1], dtype=np.float32)
        self._noise = np.empty((self.n_runs, self.n_agents))
        theta = np.stack([self._sphere_point(rng) for rng in self.rngs])
        self.theta = theta.astype(np.float32)  # (R, d)
        self.n_users = params.returning_users
        self._users = (
            UserStream(self.rngs, self.n_agents, visit_probabilities(self.n_users, params.visits, params.zipf_exponent))
            if self.n_users
            else None
        )

    def _sphere_point(self, rng: np.random.Generator) -> np.ndarray:
        g = rng.standard_normal(self.dim - 1)
        return np.append(_HALF_SQRT2 * g / np.linalg.norm(g), _HALF_SQRT2)

    def next_round(self) -> Round:
        raw = self._raw
        for r, rng in enumerate(self.rngs):
            self._sampler.fill(rng, raw[r])
            rng.standard_normal(out=self._noise[r])
        # squared norms as an elementwise square and a matrix-vector product: twice as fast as
        # einsum over a last axis of length d-1
        np.multiply(raw, raw, out=self._square)
        np.matmul(self._square, self._ones, out=self._sqnorm)
        np.sqrt(self._sqnorm, out=self._sqnorm)
        np.divide(np.float32(_HALF_SQRT2), self._sqnorm, out=self._sqnorm)
        np.multiply(raw, self._sqnorm[..., None], out=self._features[..., :-1])
        n_runs = self.n_runs
        flat = self._features.reshape(n_runs, -1, self.dim)
        np.matmul(flat, self.theta[:, :, None], out=self._means.reshape(n_runs, -1, 1))
        users = self._users.next() if self._users is not None else None
        return Round(self._features, self._means, self._noise, users=users)

    def rewards(self, means: np.ndarray, noise: np.ndarray) -> np.ndarray:
        return means + self.noise_sd * noise

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {**super().describe(), "noise_sd": self.noise_sd}
        if self.n_users:
            out["returning_users"] = self.n_users
        return out


@dataclass(frozen=True)
class GapInstanceParams:
    agents: int = field(default=10, metadata={"help": "number of agents M >= 1"})
    arms: int = field(default=10, metadata={"help": "arms per round K in [2, dim^2]"})
    dim: int = field(default=10, metadata={"help": "feature dimension d >= 2"})
    gap: float = field(default=0.1, metadata={"help": "gap between best and other arms, in (0, 0.3]"})

    def __post_init__(self) -> None:
        check_int("agents", self.agents, low=1)
        check_int("dim", self.dim, low=2)
        check_int("arms", self.arms, low=2, high=self.dim**2)
        check_float("gap", self.gap, low=0.0, high=0.3, low_open=True)

    #: whether rounds carry user ids (what user-level privacy needs): every interaction is its own user
    user_ids = False


class GapInstance(Environment):
    """Dubey & Pentland (2020), section 4.4: a fixed gap between the best arm and the rest.

    theta* has a uniformly random direction and norm uniform in [0.7 + gap, 1] (the paper
    says only "theta* in the unit ball"; the best arm's mean 0.7 + gap must be reachable with
    ||x|| <= 1, which needs ||theta*|| >= 0.7 + gap).  Each round every agent gets K <= d^2
    arms: K-1 with expected reward uniform in [0.5, 0.6] and one, at a uniformly random
    position, uniform in [0.6 + gap, 0.7 + gap] (the paper's [0.7, 0.8] for gap = 0.1).  An
    arm of mean m is x = m theta*/||theta*||^2 + rho w with w a uniformly random unit vector
    orthogonal to theta* and rho uniform in [0, sqrt(1 - m^2/||theta*||^2)], so ||x|| <= 1.
    Rewards are Bernoulli(<x, theta*>).
    """

    name = "gap-instance"
    reward_range = (0.0, 1.0)

    def __init__(self, rngs: Sequence[np.random.Generator], params: GapInstanceParams) -> None:
        super().__init__(rngs, params.agents, params.arms, params.dim)
        self.gap = params.gap
        best_high = 0.7 + self.gap
        thetas = []
        for rng in self.rngs:
            direction = rng.standard_normal(self.dim)
            direction /= np.linalg.norm(direction)
            thetas.append(direction * rng.uniform(best_high, 1.0))
        self.theta = np.asarray(thetas).astype(np.float32)  # (R, d)
        self._noise = np.empty((self.n_runs, self.n_agents))
        self._features = np.empty((self.n_runs, self.n_agents, self.n_arms, self.dim), dtype=np.float32)
        self._means = np.empty((self.n_runs, self.n_agents, self.n_arms), dtype=np.float32)

    def next_round(self) -> Round:
        m, k, d = self.n_agents, self.n_arms, self.dim
        for r, rng in enumerate(self.rngs):
            theta = self.theta[r].astype(np.float64)
            sq = float(theta @ theta)
            unit = theta / math.sqrt(sq)
            target = rng.uniform(0.5, 0.6, size=(m, k))
            best = rng.integers(0, k, size=m)
            target[np.arange(m), best] = rng.uniform(0.6 + self.gap, 0.7 + self.gap, size=m)
            w = rng.standard_normal((m, k, d))
            w -= (w @ unit)[..., None] * unit
            w /= np.linalg.norm(w, axis=-1, keepdims=True)
            rho = rng.uniform(size=(m, k)) * np.sqrt(np.clip(1.0 - target**2 / sq, 0.0, None))
            x = (target / sq)[..., None] * theta + rho[..., None] * w
            self._features[r] = x
            self._means[r] = self._features[r] @ self.theta[r]
            self._noise[r] = rng.uniform(size=m)
        return Round(self._features, self._means, self._noise)

    def rewards(self, means: np.ndarray, noise: np.ndarray) -> np.ndarray:
        return (noise < means).astype(np.float64)

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "gap": self.gap}


@dataclass(frozen=True)
class UniformCubeParams:
    agents: int = field(default=50, metadata={"help": "number of agents M >= 1"})
    arms: int = field(default=25, metadata={"help": "fresh arms per agent per round K >= 1"})
    dim: int = field(default=15, metadata={"help": "feature dimension d >= 1"})
    noise_sd: float = field(default=0.3, metadata={"help": "reward noise standard deviation >= 0"})

    def __post_init__(self) -> None:
        check_int("agents", self.agents, low=1)
        check_int("arms", self.arms, low=1)
        check_int("dim", self.dim, low=1)
        check_float("noise_sd", self.noise_sd, low=0.0)

    #: whether rounds carry user ids (what user-level privacy needs): every interaction is its own user
    user_ids = False


class UniformCube(Environment):
    """He et al. (2022)'s synthetic instance, as their public code builds it (uclaml/FedLinUCB).

    theta* = (1, ..., 1) / sqrt(d), the same in every run; every arm's entries are uniform in
    [-1/sqrt(d), 1/sqrt(d)] (so ||x|| <= 1 and |<x, theta*>| <= 1), K fresh arms per agent and round;
    rewards are <x, theta*> + N(0, noise_sd^2) with noise_sd = 0.3.  Features are float32 and the
    expected rewards are computed from exactly those numbers (exact pseudo-regret).
    """

    name = "uniform-cube"
    reward_range = (-1.0, 1.0)

    def __init__(self, rngs: Sequence[np.random.Generator], params: UniformCubeParams) -> None:
        super().__init__(rngs, params.agents, params.arms, params.dim)
        self.noise_sd: float = params.noise_sd
        self.scale = 1.0 / math.sqrt(self.dim)
        self.theta = np.full(self.dim, self.scale, dtype=np.float32)
        shape = (self.n_runs, self.n_agents, self.n_arms, self.dim)
        self._features = np.empty(shape, dtype=np.float32)
        self._means = np.empty(shape[:-1], dtype=np.float32)
        self._noise = np.empty((self.n_runs, self.n_agents))

    def next_round(self) -> Round:
        for r, rng in enumerate(self.rngs):
            self._features[r] = rng.uniform(-self.scale, self.scale, size=self._features.shape[1:])
            rng.standard_normal(out=self._noise[r])
        np.matmul(self._features, self.theta, out=self._means)
        return Round(self._features, self._means, self._noise)

    def rewards(self, means: np.ndarray, noise: np.ndarray) -> np.ndarray:
        return means + self.noise_sd * noise

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "noise_sd": self.noise_sd}


#: the registry's entries (fedbandits' pyproject.toml names them)
GAUSSIAN_SPHERE = env_entry(GaussianSphere, GaussianSphereParams)
GAP_INSTANCE = env_entry(GapInstance, GapInstanceParams)
UNIFORM_CUBE = env_entry(UniformCube, UniformCubeParams)
