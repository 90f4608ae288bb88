"""The environment interface every bandit instance implements.

An environment serves a batch of R independent runs (one ``numpy.random.Generator`` per
run, so run r's numbers depend only on its own seed) of M agents with K arms in R^d.
Each round it yields a :class:`Round`: the arms' features, their *expected* rewards (for
pseudo-regret) and one noise variable per agent.  The reward of the arm an algorithm picks
is ``env.rewards(mean_of_chosen_arm, noise)``, so several algorithms can be evaluated on
the very same contexts and noise in one pass (common random numbers).
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedbandits.core.validation import check_int
from fedbandits.plugins import Entry


def require_extra(module: str, extra: str, user: str) -> None:
    """One-line ValueError if the optional ``module`` (installed by ``fedbandits[extra]``) is missing:
    the config is refused before anything runs instead of a worker failing with a traceback."""
    if importlib.util.find_spec(module) is None:
        raise ValueError(f"{user} needs {module}, which is not installed: pip install 'fedbandits[{extra}]'")


@dataclass
class Round:
    """One round of contexts for every (run, agent).

    features (R, M, K, d) float32, means (R, M, K) float32 expected rewards,
    noise (R, M) float64 reward-noise variable (its meaning is the environment's).
    Arrays may be reused by the environment on the next round: copy what you keep.

    Optional, from environments that compute them for many rounds at once (else None):
    arm_rewards (R, M, K) float64, the reward every arm would get, ``rewards(means, noise)`` arm by
    arm; features64 (R, M, K, d), the features as float64.  Policies that play one arm at a time read
    them instead of calling ``rewards`` and casting per arm.

    users (R, M) int64, from environments with returning users (``Environment.n_users > 0``): the id in
    [0, n_users) of the user each silo serves this round; ids are per silo (user 3 of silo 0 and user 3
    of silo 1 are different people).  None: every interaction is its own user.
    """

    features: np.ndarray
    means: np.ndarray
    noise: np.ndarray
    arm_rewards: np.ndarray | None = None
    features64: np.ndarray | None = None
    users: np.ndarray | None = None


class Environment(ABC):
    """Batched, seeded, streaming bandit instance."""

    #: registry name used in configs
    name: str = ""
    #: bound L on every feature vector's Euclidean norm
    feature_bound: float = 1.0
    #: interval that contains every expected reward
    reward_range: tuple[float, float] = (0.0, 1.0)
    #: users per silo whose ids every Round carries (:attr:`Round.users`); 0: no ids, each interaction a user
    n_users: int = 0
    #: standard deviation of the Gaussian reward noise around the expected reward, where the environment
    #: adds such noise (its ``noise_sd`` or ``reward_noise_sd`` parameter); None: it does not (Bernoulli
    #: rewards: gap-instance, clustered-synthetic, movielens)
    noise_sd: float | None = None

    def __init__(self, rngs: Sequence[np.random.Generator], agents: int, arms: int, dim: int) -> None:
        if len(rngs) < 1:
            raise ValueError("an environment needs at least one run (one Generator per run)")
        self.rngs = list(rngs)
        self.n_runs = len(self.rngs)
        self.n_agents = check_int("agents", agents, low=1)
        self.n_arms = check_int("arms", arms, low=1)
        self.dim = check_int("dim", dim, low=1)

    @abstractmethod
    def next_round(self) -> Round:
        """Draw the next round's contexts for every run and agent."""

    @abstractmethod
    def rewards(self, means: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """Sampled rewards ``(R, M)`` of arms with expected rewards ``means`` under ``noise``."""

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "agents": self.n_agents, "arms": self.n_arms, "dim": self.dim}

    def noise_scale(self) -> float:
        """A sub-Gaussian scale of an observed reward around its expectation, for a default that should fit
        the instance: the stated :attr:`noise_sd` when positive, else half the width of :attr:`reward_range`
        (a reward bounded in [a, b] is (b - a) / 2-sub-Gaussian: 0.5 for rewards in [0, 1])."""
        if self.noise_sd:
            return float(self.noise_sd)
        low, high = self.reward_range
        return (high - low) / 2.0


def env_entry(cls: type[Environment], params: type, description: str | None = None) -> Entry:
    """A built-in environment's registry entry, defined beside its class (fedbandits' pyproject.toml
    names it, so naming it in a config imports its module alone): ``cls.name``, the first line of its
    docstring unless ``description`` is given, and a factory building ``cls(rngs, params)``."""

    def build(values: Any, rngs: Sequence[np.random.Generator]) -> Environment:
        return cls(rngs, values)  # type: ignore[call-arg]

    text = description or (cls.__doc__ or "").strip().splitlines()[0]
    return Entry(cls.name, text, params, build)
