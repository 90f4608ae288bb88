"""The policy interface: what the simulator (and the deployment) drive each round."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from fedbandits.core.clipping import centred, clip_norm, clip_rewards
from fedbandits.core.exploration import EXPLORATIONS, Explorer
from fedbandits.core.ridge import raise_eigenvalues
from fedbandits.core.ucb import ConfidenceRadius
from fedbandits.core.validation import check_array, check_choice, check_float, check_int
from fedbandits.envs.base import Environment, Round
from fedbandits.plugins import Entry

#: the constant radius of a LinUCB-type learner whose config gives no beta (chosen by the tuning rule on
#: seed 1000, docs/tuning.md "The defaults")
DEFAULT_BETA = 1.0


@dataclass(frozen=True)
class LinUCBParams:
    """Parameters every LinUCB-type learner shares.

    reg: ridge regulariser lambda > 0.  radius: "constant" (beta itself, the default: beta = 1 was
    chosen by the tuning rule on seed 1000, docs/tuning.md "The defaults") or "theory" (Lemma C.4 of
    Zhou & Chowdhury 2023, times beta_scale: the papers' tuning, by name).  reward_offset: a public
    constant c the learner subtracts from every reward before anything else (clipping included), so it
    fits E[y] - c = <x, theta>: the same linear model as E[y] = <x, theta> whenever the features hold a
    constant coordinate (an intercept).  Centring the rewards of a range [a, b] at c = (a + b) / 2 lets a
    private learner clip to [-(b - a) / 2, (b - a) / 2] instead of [-max(|a|, |b|), max(|a|, |b|)]: the
    same data, half the bias sensitivity for rewards in [0, b] (docs/bounds.md, "Centring rewards").
    """

    reg: float = field(default=1.0, metadata={"help": "ridge regulariser lambda > 0"})
    radius: str = field(
        default="constant",
        metadata={"help": "'constant' (beta; the default) or 'theory' (Lemma C.4 x beta_scale: the papers' tuning)"},
    )
    beta: float | None = field(
        default=None,
        metadata={
            "help": "constant radius when radius = 'constant', >= 0; default 1 (10 for a private fedlinucb or "
            "fedlinucb-async under radius 'auto'); a value given is always the one used"
        },
    )
    beta_scale: float = field(default=1.0, metadata={"help": "multiplier of the theory radius, >= 0"})
    alpha: float = field(default=0.01, metadata={"help": "confidence level of the theory radius, in (0, 1]"})
    noise_scale: float = field(default=1.0, metadata={"help": "sub-Gaussian reward-noise scale in the theory radius"})
    reward_offset: float = field(
        default=0.0,
        metadata={
            "help": "c: learn from y - c, centred before any clipping (a public constant; the same linear model when "
            "the features hold an intercept)"
        },
    )

    def __post_init__(self) -> None:
        check_float("reg", self.reg, low=0.0, low_open=True)
        check_float("reward_offset", self.reward_offset)
        if self.beta is None:  # not given: the default, resolved here so the saved config states it
            object.__setattr__(self, "beta", DEFAULT_BETA)
        check_float("beta", self.beta, low=0.0)
        check_float("beta_scale", self.beta_scale, low=0.0)
        self.confidence_radius()  # validates the radius fields

    @property
    def constant_beta(self) -> float:
        """beta once resolved (a float after ``__post_init__``)."""
        return DEFAULT_BETA if self.beta is None else float(self.beta)

    def confidence_radius(self) -> ConfidenceRadius:
        scale = self.constant_beta if self.radius == "constant" else self.beta_scale
        return ConfidenceRadius(kind=self.radius, scale=scale, alpha=self.alpha, noise_scale=self.noise_scale)


@dataclass(frozen=True)
class ExplorationParams:
    """How a LinUCB-type learner chooses, with the exact probability of its choice
    (:mod:`fedbandits.core.exploration`): ``exploration`` "ucb" (the highest upper confidence bound,
    deterministic: the default), "epsilon-greedy" (``exploration_rate``), "softmax" (``temperature``)
    over the UCB scores, or "thompson" (linear Thompson sampling, Agrawal & Goyal 2013, posterior
    N(theta, posterior_scale^2 V^{-1}) from the same statistics; its propensity estimated from
    ``propensity_samples`` draws).  The choice's randomness touches no release.  Mixed into a
    learner's parameters after its own (``class P(ExplorationParams, Own)``: Own's fields come first)."""

    exploration: str = field(
        default="ucb",
        metadata={"help": "'ucb' (deterministic), 'epsilon-greedy', 'softmax' (over the UCB scores) or 'thompson'"},
    )
    exploration_rate: float = field(
        default=0.05, metadata={"help": "epsilon-greedy: the probability of a uniformly random arm, in [0, 1]"}
    )
    temperature: float = field(default=0.05, metadata={"help": "softmax: the temperature over UCB scores, > 0"})
    posterior_scale: float = field(
        default=0.1, metadata={"help": "thompson: v, the posterior's scale N(theta, v^2 V^-1), >= 0"}
    )
    propensity_samples: int = field(
        default=1000,
        metadata={"help": "thompson: draws estimating a choice's propensity when K > 2 (error <= 0.5/sqrt), >= 1"},
    )

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        check_choice("exploration", self.exploration, EXPLORATIONS)
        check_float("exploration_rate", self.exploration_rate, low=0.0, high=1.0)
        check_float("temperature", self.temperature, low=0.0, low_open=True)
        check_float("posterior_scale", self.posterior_scale, low=0.0)
        check_int("propensity_samples", self.propensity_samples, low=1)


@dataclass(frozen=True)
class ExploringLinUCBParams(ExplorationParams, LinUCBParams):
    """LinUCB's parameters, then :class:`ExplorationParams`."""


#: How one key of :meth:`Policy.report` combines over the tasks of an experiment (each task
#: reports on its own runs; :func:`fedbandits.sim.reports.merge_reports` applies the rule):
#:
#: * ``"same"`` -- a function of the config alone: equal in every task (checked);
#: * ``"sum"`` -- a count over the task's runs: summed;
#: * ``"mean"`` -- a mean over the task's runs: the mean weighted by each task's number of runs;
#: * ``"max"`` / ``"min"`` -- a maximum / minimum over the task's runs;
#: * ``"max-elementwise"`` -- a (nested) list of maxima over runs, all of one shape: element-wise;
#: * ``"mean-series"`` -- ``[[t, mean], ...]`` at times t that are the same in every run (checked):
#:   the weighted mean per time;
#: * ``"derived"`` -- computed from other merged keys by :meth:`Policy.finish_merged_report`.
MergeRule = Literal["same", "sum", "mean", "max", "min", "max-elementwise", "mean-series", "derived"]

#: the counts every private learner reports (sums over runs): ``observations`` is the number of
#: observations (x, y) checked against the bounds, the denominator of the clipped shares;
#: ``feature_norm_max`` (a maximum) is the largest feature norm seen, the bound that would clip none
CLIPPING_COUNTS: dict[str, MergeRule] = {
    "observations": "sum",
    "feature_norm_max": "max",
    "clipped": "sum",
    "clipped_features": "sum",
    "clipped_rewards": "sum",
    "psd_repairs": "sum",
}


class Explores:
    """A learner that may choose at random (:class:`ExploringLinUCBParams`): its choices go through
    :attr:`explorer`, which states the probability of each one."""

    explorer: Explorer

    def propensities(self, rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The probability of every agent's last choice (R, M) and its standard error
        (:meth:`fedbandits.core.exploration.Explorer.propensities`)."""
        return self.explorer.propensities(rng)


class ClipCounts:
    """The clipping every private learner does before data enters a release, the repair of noisy Gram
    matrices it adopts, and their counts (:data:`CLIPPING_COUNTS`): the learner calls
    :meth:`init_clipping` once, :meth:`clip` on every observation, :meth:`repair` on every noisy matrix,
    and reports :meth:`clipping_report`."""

    observations: int  # (x, y) checked against the bounds: the clipped shares' denominator
    feature_norm_max: float  # the largest norm before clipping
    clipped_features: int
    clipped_rewards: int
    psd_repairs: int

    def init_clipping(self) -> None:
        self.observations = 0
        self.feature_norm_max = 0.0
        self.clipped_features = 0
        self.clipped_rewards = 0
        self.psd_repairs = 0

    def clip(
        self, x: np.ndarray, y: np.ndarray, feature_bound: float, reward_bound: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Features to ||x|| <= L, rewards to [-B, B], counted."""
        self.feature_norm_max = max(self.feature_norm_max, float(np.linalg.norm(x, axis=-1).max()))
        x, n_x = clip_norm(x, feature_bound)
        y, n_y = clip_rewards(y, -reward_bound, reward_bound)
        self.observations += y.size
        self.clipped_features += n_x
        self.clipped_rewards += n_y
        return x, y

    def repair(self, gram: np.ndarray, floor: float | np.ndarray) -> np.ndarray:
        """``gram`` with eigenvalues below ``floor`` raised to it (post-processing), the matrices changed counted."""
        gram, repaired = raise_eigenvalues(gram, floor)
        self.psd_repairs += repaired
        return gram

    def clipping_report(self) -> dict[str, object]:
        return {
            "observations": self.observations,
            "feature_norm_max": self.feature_norm_max,
            "clipped": self.clipped_features + self.clipped_rewards,
            "clipped_features": self.clipped_features,
            "clipped_rewards": self.clipped_rewards,
            "psd_repairs": self.psd_repairs,
        }


class Policy(ABC):
    """A bandit algorithm for R runs x M agents, K arms, dimension d.

    The simulator calls :meth:`step` once per round; the default implementation selects all
    agents' arms (:meth:`select`), draws their rewards and feeds them back (:meth:`observe`),
    then lets the policy communicate (:meth:`end_round`).
    """

    name: str = ""
    description: str = ""
    #: how every key of :meth:`report` merges over tasks (see :data:`MergeRule`).  A key without
    #: a rule must be equal in every task (else the merge raises), except counts named
    #: ``clipped*`` and ``psd_repairs``, which are summed.
    report_merge: ClassVar[Mapping[str, MergeRule]] = {}
    #: c of :attr:`LinUCBParams.reward_offset`: every reward enters :meth:`_observe` as y - c (a policy
    #: built from LinUCBParams sets it from them; 0 leaves rewards as they are)
    reward_offset: float = 0.0

    def __init__(self, n_runs: int, n_agents: int, n_arms: int, dim: int, horizon: int) -> None:
        self.n_runs = n_runs
        self.n_agents = n_agents
        self.n_arms = n_arms
        self.dim = dim
        self.horizon = horizon
        self.t = 0  # rounds completed
        self.sync_rounds = np.zeros(n_runs, dtype=np.int64)
        # float64, as the protocols' counters: exact below 2^53, and a vector sum can exceed int64
        self.messages = np.zeros(n_runs, dtype=np.float64)
        self.bytes_sent = np.zeros(n_runs, dtype=np.float64)

    def select(self, features: np.ndarray, available: np.ndarray | None = None) -> np.ndarray:
        """Chosen arm per (run, agent), shape ``(R, M)``, for ``features (R, M, K, d)``; ``available``
        (R, M, K) bool, when given, the candidates each agent may choose (a silo with fewer than K:
        replay on silos with catalogues of their own), for a learner that :class:`Explores` only."""
        features = self.check_features(features)
        if available is None:
            return self._select(features)
        explorer = getattr(self, "explorer", None)
        if explorer is None:
            raise ValueError(f"{self.name} chooses among all K candidates of a round: it takes no candidate mask")
        available = check_array("available", available, features.shape[:3], dtype=np.bool_)
        if not available.any(axis=2).all():
            raise ValueError("available: every agent needs at least one candidate")
        explorer.available = available.reshape(-1, self.n_arms)
        try:
            return self._select(features)
        finally:
            explorer.available = None

    def observe(self, x: np.ndarray, y: np.ndarray) -> None:
        """Feed back the chosen features ``x (R, M, d)`` and their rewards ``y (R, M)``.

        Inputs are validated first; a rejected observation changes nothing.
        """
        x, y = self.check_observation(x, y)
        self._observe(x, self.centred(y))

    def centred(self, y: np.ndarray) -> np.ndarray:
        """Rewards as the learner sees them: y - :attr:`reward_offset` (y itself when the offset is 0)."""
        return centred(y, self.reward_offset)

    @abstractmethod
    def _select(self, features: np.ndarray) -> np.ndarray:
        """:meth:`select` on already validated float32 features."""

    @abstractmethod
    def _observe(self, x: np.ndarray, y: np.ndarray) -> None:
        """:meth:`observe` on already validated float64 inputs."""

    def end_round(self) -> None:
        """Called after every round's observations; communication happens here."""
        self.t += 1

    def step(self, rnd: Round, env: Environment) -> np.ndarray:
        """Play one round on environment output (valid by construction, so not re-checked)."""
        actions = self._select(rnd.features)
        idx = actions[..., None]
        means = np.take_along_axis(rnd.means, idx, axis=-1)[..., 0]
        x = np.take_along_axis(rnd.features, idx[..., None], axis=-2)[..., 0, :].astype(np.float64)
        self._observe(x, self.centred(env.rewards(means, rnd.noise)))
        self.end_round()
        return actions

    def check_observation(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        shape = (self.n_runs, self.n_agents)
        return (
            check_array("x", x, (*shape, self.dim), dtype=np.float64),
            check_array("y", y, shape, dtype=np.float64),
        )

    def check_features(self, features: np.ndarray) -> np.ndarray:
        return check_array("features", features, (self.n_runs, self.n_agents, self.n_arms, self.dim), dtype=np.float32)

    def report(self) -> dict[str, object]:
        """Extra per-algorithm fields for the summary (privacy, schedule, ...), over this policy's runs.

        Every key needs a rule in :attr:`report_merge` unless it is a function of the config alone.
        """
        return {}

    @classmethod
    def finish_merged_report(cls, report: dict[str, object]) -> dict[str, object]:
        """The ``"derived"`` keys of a report merged over tasks, recomputed from its other keys."""
        return report


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
    #: one Generator per run for a randomized learner's choices (core.seeding.choice_rngs); None: the
    #: policy may not explore at random
    choice_rngs: Sequence[np.random.Generator] | None = None


def policy_entry(
    cls: type[Policy], params: type, factory: Callable[[Any, PolicyContext], Policy] | None = None
) -> Entry:
    """A built-in algorithm's registry entry, defined beside its class (fedbandits' pyproject.toml names
    it, so naming it in a config imports its module alone): ``cls``'s name and description, and
    ``factory``, by default ``cls(runs, agents, arms, dim, horizon, params)``."""

    def build(values: Any, ctx: PolicyContext) -> Policy:
        return cls(ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, values)  # type: ignore[call-arg]

    return Entry(cls.name, cls.description, params, factory or build, cls)
