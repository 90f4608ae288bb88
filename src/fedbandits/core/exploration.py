"""Randomized exploration with exact propensities: how a LinUCB-type learner turns its statistics into
a *random* choice, and the probability of the arm it chose.

A deterministic learner (``ucb``, the default) takes the arm of the highest upper confidence bound,
ties to the lowest index: its propensity is 1, which off-policy evaluation cannot reweight.  The
randomized rules read the same statistics (the ridge state V, theta of the learner, which a private
protocol's released prefix feeds; the randomness touches no release):

* ``epsilon-greedy``: with probability ``rate`` an arm uniformly at random, else the UCB arm:
  pi(a) = rate / K + (1 - rate) 1[a = argmax UCB].  Exact.
* ``softmax``: pi(a) = exp(UCB_a / temperature) / sum_b exp(UCB_b / temperature).  Exact.
* ``thompson``: linear Thompson sampling (Agrawal & Goyal 2013, Algorithm 1): draw
  theta~ ~ N(theta, v^2 V^{-1}) and take argmax <x_a, theta~>.  Its propensity
  P(a = argmax) is the probability of an orthant of a (K-1)-variate normal: exact for K = 2
  (Phi of the mean gap over its standard deviation), and for K > 2 estimated from ``samples``
  further draws of the scores, with its standard error sqrt(p (1 - p) / samples) stated
  (:func:`thompson_propensity`).

Every function works on a batch of N learners: ``scores (N, K)``; a choice is drawn from uniforms
``u (N,)`` (the caller's Generator), so a run is reproduced from its seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedbandits.core.ucb import UCBScorer

EXPLORATIONS = ("ucb", "epsilon-greedy", "softmax", "thompson")


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    """Phi, elementwise (math.erfc: scipy.special stays out of the per-message ClientApp processes)."""
    return np.array([0.5 * math.erfc(-v / math.sqrt(2.0)) for v in np.ravel(x)]).reshape(np.shape(x))


def greedy_distribution(scores: np.ndarray, rate: float) -> np.ndarray:
    """epsilon-greedy's pi (N, K) over ``scores`` (N, K): rate / K everywhere, 1 - rate more on the argmax
    (ties to the lowest index, as the UCB choice); a candidate scored -inf (not offered) gets 0, and
    rate / K' goes to each of the K' others."""
    n = scores.shape[0]
    offered = scores > -np.inf
    probs = rate * offered / offered.sum(axis=1, keepdims=True)
    probs[np.arange(n), scores.argmax(axis=1)] += 1.0 - rate
    return probs  # type: ignore[no-any-return]


def softmax_distribution(scores: np.ndarray, temperature: float) -> np.ndarray:
    """softmax's pi (N, K) over ``scores`` at ``temperature`` > 0 (computed stably, in float64)."""
    z = np.asarray(scores, dtype=np.float64) / temperature
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)  # type: ignore[no-any-return]


def closed_form(rule: str, scores: np.ndarray, rate: float, temperature: float) -> np.ndarray:
    """pi (N, K) of a closed-form rule over ``scores`` (N, K): epsilon-greedy at ``rate`` or softmax at
    ``temperature`` (the simulator's learners and the online agent both choose through this)."""
    if rule == "epsilon-greedy":
        return greedy_distribution(scores, rate)
    if rule == "softmax":
        return softmax_distribution(scores, temperature)
    raise ValueError(f"no closed-form distribution for exploration {rule!r}")


def draw(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The arm (N,) each row of ``probs`` (N, K) gives to its uniform ``u`` in [0, 1): the first a with
    u < sum_{b <= a} pi(b) (the last arm if round-off leaves the sum short of u)."""
    cumulative = np.cumsum(probs, axis=1)
    return np.minimum((u[:, None] >= cumulative).sum(axis=1), probs.shape[1] - 1)


def thompson_draw(features: np.ndarray, theta: np.ndarray, chol: np.ndarray, scale: float, z: np.ndarray) -> np.ndarray:
    """Thompson sampling's scores (N, K): <x_a, theta + scale L z> for ``features`` (N, K, d), the
    learners' ``theta`` (N, d), L = ``chol`` (N, d, d) with L L^T = V^{-1}, and normals ``z`` (N, d)."""
    sample = theta + scale * np.einsum("nij,nj->ni", chol, z)
    return np.einsum("nkd,nd->nk", features, sample)  # type: ignore[no-any-return]


def masked(scores: np.ndarray, available: np.ndarray | None) -> np.ndarray:
    """``scores`` (N, K) with the candidates ``available`` (N, K) does not offer at -inf (never chosen)."""
    return scores if available is None else np.where(available, scores, -np.inf)


def thompson_propensity(
    features: np.ndarray,
    theta: np.ndarray,
    chol: np.ndarray,
    scale: float,
    chosen: np.ndarray,
    normals: np.ndarray,
    available: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """P(``chosen`` = argmax) under Thompson sampling, and its standard error, for N learners.

    K = 2: exact, Phi((mu_a - mu_b) / sd(s_a - s_b)), the score gap being normal (error 0).  K > 2:
    the share of ``normals`` (N, S, d) draws whose argmax is the chosen arm, with standard error
    sqrt(max(p (1 - p), 1 / S) / S): never below 1 / S, the resolution of S draws (a share of 0 does
    not mean a probability of 0: the arm was chosen).  ``available`` (N, K): the candidates offered
    (the others never win; the Monte Carlo estimate then, for any K)."""
    n, k, _ = features.shape
    rows = np.arange(n)
    if k == 2 and available is None:
        other = 1 - chosen
        gap = features[rows, chosen] - features[rows, other]  # (N, d)
        mean = np.einsum("nd,nd->n", gap, theta)
        spread = scale * np.linalg.norm(np.einsum("nd,ndj->nj", gap, chol), axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(spread > 0, _normal_cdf(mean / np.where(spread > 0, spread, 1.0)), (mean >= 0).astype(float))
        # a tie (spread 0 and equal means) goes to the lowest index, as argmax does
        tie = (spread == 0) & (mean == 0)
        p = np.where(tie, (chosen < other).astype(float), p)
        return p, np.zeros(n)
    means = masked(np.einsum("nkd,nd->nk", features, theta), available)
    spread = np.matmul(features, chol)  # (N, K, d): the scores' noise is spread @ z
    shifts = scale * np.matmul(normals, np.swapaxes(spread, 1, 2))  # (N, S, K)
    best = (means[:, None, :] + shifts).argmax(axis=2)  # (N, S)
    p = (best == chosen[:, None]).mean(axis=1)
    samples = normals.shape[1]
    return p, np.sqrt(np.maximum(p * (1 - p), 1.0 / samples) / samples)


def cholesky_of_inverse(inv: np.ndarray) -> np.ndarray:
    """L (N, d, d) with L L^T = V^{-1} for the learners' inverses ``inv`` (N, d, d), symmetrized first
    (a ridge inverse kept by rank-one updates drifts from symmetry by round-off)."""
    return np.linalg.cholesky(0.5 * (inv + np.swapaxes(inv, 1, 2)))


def propensity_error_bound(samples: int) -> float:
    """The largest standard error of a Monte Carlo propensity from ``samples`` draws: 0.5 / sqrt(S)."""
    return 0.5 / math.sqrt(samples)


@dataclass(frozen=True)
class Rule:
    """A learner's choice rule and its parameters, read by name from its entry's parameters
    (:class:`fedbandits.algorithms.base.ExplorationParams`; UCB for parameters without them): the one
    reading the simulator's :class:`Explorer` and the online agent's chooser share."""

    name: str = "ucb"
    rate: float = 0.0
    temperature: float = 1.0
    scale: float = 0.0
    samples: int = 1

    @classmethod
    def of(cls, params: object) -> Rule:
        return cls(
            getattr(params, "exploration", "ucb"),
            float(getattr(params, "exploration_rate", 0.0)),
            float(getattr(params, "temperature", 1.0)),
            float(getattr(params, "posterior_scale", 0.0)),
            int(getattr(params, "propensity_samples", 1)),
        )


class Explorer:
    """The random choice of a batch of R x M learners (one per run and agent) and the probability of
    each one's last choice: what every exploring LinUCB-type learner of the simulator shares.

    ``params`` carries the rule (:class:`fedbandits.algorithms.base.ExploringLinUCBParams`'s fields,
    read by name); run r's agents draw, in agent order, from ``choice_rngs[r]`` alone, so a run is
    reproduced from its seed whatever other runs share its task.
    """

    def __init__(self, params: object, n_runs: int, n_agents: int, choice_rngs: Sequence[np.random.Generator] | None):
        rule = Rule.of(params)
        if rule.name != "ucb" and (choice_rngs is None or len(choice_rngs) != n_runs):
            raise ValueError(f"exploration {rule.name!r} needs one choice Generator per run")
        self.rule, self.rate, self.temperature = rule.name, rule.rate, rule.temperature
        self.scale, self.samples = rule.scale, rule.samples
        self.shape = (n_runs, n_agents)
        self.choice_rngs = list(choice_rngs or [])
        self._last: tuple[np.ndarray | None, ...] = ()
        #: (N, K) bool: the candidates offered in the next choice (None: all), set by Policy.select
        self.available: np.ndarray | None = None

    @property
    def randomized(self) -> bool:
        return self.rule != "ucb"

    def uniform(self, n_arms: int) -> None:
        """Record that every learner's choice this round was uniform over its ``n_arms`` candidates (drawn
        by the learner itself: HetoFedBandit's phase of pure exploration): propensity 1 / K each."""
        self._last = (np.full(self.shape[0] * self.shape[1], 1.0 / n_arms),)

    def choose(
        self, scorer: UCBScorer, flat: np.ndarray, inv: np.ndarray, theta: np.ndarray, beta: np.ndarray | float
    ) -> np.ndarray:
        """The arms (R, M) of the learners whose candidates are ``flat`` (N, K, d), N = R M run-major,
        inverses ``inv`` (N, d, d), estimates ``theta`` (N, d) and radius ``beta`` (scalar or (N,))."""
        offered = self.available
        self._last = ()
        if self.rule == "ucb":
            if offered is None:
                return scorer.select(flat, inv, theta, beta).reshape(self.shape)
            return masked(scorer.scores(flat, inv, theta, beta), offered).argmax(axis=1).reshape(self.shape)  # type: ignore[no-any-return]
        m, d = self.shape[1], flat.shape[2]
        if self.rule == "thompson":
            chol = cholesky_of_inverse(inv)
            z = np.concatenate([rng.standard_normal((m, d)) for rng in self.choice_rngs])
            features = flat.astype(np.float64)
            choice = masked(thompson_draw(features, theta, chol, self.scale, z), offered).argmax(axis=1)
            self._last = (features, theta, chol, choice, offered)
            return choice.reshape(self.shape)  # type: ignore[no-any-return]
        scores = masked(scorer.scores(flat, inv, theta, beta), offered)
        probs = closed_form(self.rule, scores, self.rate, self.temperature)
        choice = draw(probs, np.concatenate([rng.random(m) for rng in self.choice_rngs]))
        self._last = (probs[np.arange(len(choice)), choice],)
        return choice.reshape(self.shape)  # type: ignore[no-any-return]

    def propensities(self, rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The probability of every learner's last choice (R, M), and its standard error: 1 and 0 for
        ``ucb``; exact for epsilon-greedy, softmax and Thompson sampling with K = 2; else Thompson's
        Monte Carlo estimate from ``propensity_samples`` draws of ``rng`` (not the choice Generators)."""
        if not self._last:
            return np.ones(self.shape), np.zeros(self.shape)
        if len(self._last) == 1:
            return self._last[0].reshape(self.shape), np.zeros(self.shape)  # type: ignore[union-attr]
        features, theta, chol, choice, offered = self._last
        assert features is not None and theta is not None and chol is not None and choice is not None
        normals = (rng or np.random.default_rng(0)).standard_normal((len(choice), self.samples, theta.shape[1]))
        p, error = thompson_propensity(features, theta, chol, self.scale, choice, normals, offered)
        return p.reshape(self.shape), error.reshape(self.shape)


def projected_scores(features: np.ndarray, proj: np.ndarray, beta: float) -> np.ndarray:
    """One learner's UCB of every candidate (K,), from ``features`` (K, d) float32 and its projection
    ``proj`` = [V^{-1} | theta] (d, d + 1): <x, theta> + beta ||x||_{V^{-1}} (the clustering policies'
    float32 arithmetic, as the papers' code computes it)."""
    d = features.shape[1]
    prod = features @ proj
    width = np.einsum("kd,kd->k", prod[:, :d], features)
    np.maximum(width, 0.0, out=width)
    np.sqrt(width, out=width)
    width *= beta
    width += prod[:, d]
    return width  # type: ignore[no-any-return]


class ArrivalExplorer(Explorer):
    """:class:`Explorer` for learners that choose one arrival at a time (the clustering policies:
    slot j of run r, each with the feedback of the earlier slots): the same rules and propensities,
    run r's slots drawing in order from ``choice_rngs[r]``."""

    def __init__(self, params: object, n_runs: int, n_agents: int, choice_rngs: Sequence[np.random.Generator] | None):
        super().__init__(params, n_runs, n_agents, choice_rngs)
        self._p = np.ones(self.shape)
        self._thompson: dict[tuple[int, int], tuple[np.ndarray, ...]] = {}

    def choose_one(self, r: int, slot: int, features: np.ndarray, proj: np.ndarray, beta: float) -> int:
        """The arm of run r's slot ``slot`` from its learner's projection ``proj`` [V^{-1} | theta]."""
        offered = None if self.available is None else self.available[r * self.shape[1] + slot][None]
        if self.rule == "ucb" and offered is None:
            return int(projected_scores(features, proj, beta).argmax())
        d = features.shape[1]
        if self.rule == "thompson":
            theta = proj[:, d][None].astype(np.float64)
            chol = cholesky_of_inverse(proj[None, :, :d].astype(np.float64))
            x = features[None].astype(np.float64)
            z = self.choice_rngs[r].standard_normal((1, d))
            choice = masked(thompson_draw(x, theta, chol, self.scale, z), offered).argmax(axis=1)
            self._thompson[(r, slot)] = (x, theta, chol, choice, *(() if offered is None else (offered,)))
            return int(choice[0])
        scores = masked(projected_scores(features, proj, beta)[None], offered)
        if self.rule == "ucb":
            return int(scores.argmax())
        probs = closed_form(self.rule, scores, self.rate, self.temperature)
        choice = int(draw(probs, self.choice_rngs[r].random(1))[0])
        self._p[r, slot] = probs[0, choice]
        self._thompson.pop((r, slot), None)
        return choice

    def propensities(self, rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Each slot's last choice's probability (R, M) and its standard error (:meth:`Explorer.propensities`)."""
        p, error = self._p.copy(), np.zeros(self.shape)
        if self.rule != "thompson":
            return p, error
        rng = rng or np.random.default_rng(0)
        for (r, slot), (x, theta, chol, choice, *offered) in sorted(self._thompson.items()):
            normals = rng.standard_normal((1, self.samples, theta.shape[1]))
            one, err = thompson_propensity(x, theta, chol, self.scale, choice, normals, *offered)
            p[r, slot], error[r, slot] = one[0], err[0]
        return p, error
