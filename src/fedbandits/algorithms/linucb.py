"""Non-communicating LinUCB baselines: independent agents and the super-agent."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedbandits.algorithms.base import (
    Explores,
    ExploringLinUCBParams,
    LinUCBParams,
    Policy,
    PolicyContext,
    policy_entry,
)
from fedbandits.core.exploration import Explorer
from fedbandits.core.ridge import RidgeState
from fedbandits.core.ucb import UCBScorer
from fedbandits.envs.base import Environment, Round


class IndependentLinUCB(Policy, Explores):
    """Every agent runs its own LinUCB (Abbasi-Yadkori et al. 2011) and never communicates.

    With ``agents = 1`` this is single-agent LinUCB.  With ``exploration`` other than "ucb" every agent
    chooses at random from the same statistics (:class:`ExploringLinUCBParams`), drawing from its run's
    choice Generator, and :meth:`propensities` gives the probability of each agent's last choice.
    """

    name = "linucb-independent"
    description = "one LinUCB per agent, no communication (single-agent LinUCB when agents = 1)"

    def __init__(
        self,
        n_runs: int,
        n_agents: int,
        n_arms: int,
        dim: int,
        horizon: int,
        params: LinUCBParams,
        choice_rngs: Sequence[np.random.Generator] | None = None,
    ) -> None:
        super().__init__(n_runs, n_agents, n_arms, dim, horizon)
        self.params = params
        self.reward_offset = params.reward_offset
        self.radius = params.confidence_radius()
        self.state = RidgeState((n_runs, n_agents), dim, params.reg)
        self.scorer = UCBScorer(n_runs * n_agents, n_arms, dim)
        self.explorer = Explorer(params, n_runs, n_agents, choice_rngs)

    def radius_samples(self) -> int:
        """Number of samples n the radius beta(n) accounts for: an agent's own t rounds."""
        return self.t

    def _select(self, features: np.ndarray) -> np.ndarray:
        n = self.n_runs * self.n_agents
        beta = self.radius(float(self.radius_samples()), self.dim, self.params.reg)
        flat = features.reshape(n, self.n_arms, self.dim)
        inv = self.state.inv.reshape(n, self.dim, self.dim)
        theta = self.state.theta().reshape(n, self.dim)
        return self.explorer.choose(self.scorer, flat, inv, theta, beta)

    def _observe(self, x: np.ndarray, y: np.ndarray) -> None:
        self.state._update_unchecked(x, y)


class SuperAgentLinUCB(Policy):
    """One LinUCB learner that sees all M*T samples, one at a time, as they arrive.

    In round t it serves agent 1's user, observes the reward, then agent 2's with the
    updated state, and so on: the centralised benchmark a federated algorithm is compared
    with (it has strictly more information than any batched-sync scheme).  The loop over
    agents inside a round is inherent to this sequential learner; it is vectorised over runs.
    """

    name = "linucb-super"
    description = "single LinUCB learner serving all agents' users sequentially (centralised benchmark)"

    def __init__(self, n_runs: int, n_agents: int, n_arms: int, dim: int, horizon: int, params: LinUCBParams) -> None:
        super().__init__(n_runs, n_agents, n_arms, dim, horizon)
        self.params = params
        self.reward_offset = params.reward_offset
        self.radius = params.confidence_radius()
        self.state = RidgeState((n_runs,), dim, params.reg)
        self.scorer = UCBScorer(n_runs, n_arms, dim)
        self.samples = 0

    def _select_one(self, features: np.ndarray) -> np.ndarray:
        beta = self.radius(float(self.samples), self.dim, self.params.reg)
        return self.scorer.select(np.ascontiguousarray(features), self.state.inv, self.state.theta(), beta)

    def _select(self, features: np.ndarray) -> np.ndarray:
        """Arms the learner would pick for every agent *without* intermediate feedback."""
        return np.stack([self._select_one(features[:, j]) for j in range(self.n_agents)], axis=1)

    def _observe(self, x: np.ndarray, y: np.ndarray) -> None:
        for j in range(self.n_agents):
            self.state._update_unchecked(x[:, j], y[:, j])
            self.samples += 1

    def step(self, rnd: Round, env: Environment) -> np.ndarray:
        actions = np.empty((self.n_runs, self.n_agents), dtype=np.int64)
        runs = np.arange(self.n_runs)
        for j in range(self.n_agents):
            a = self._select_one(rnd.features[:, j])
            actions[:, j] = a
            y = self.centred(env.rewards(rnd.means[runs, j, a], rnd.noise[:, j]))
            self.state._update_unchecked(rnd.features[runs, j, a].astype(np.float64), y)
            self.samples += 1
        self.end_round()
        return actions


def _independent(params: ExploringLinUCBParams, ctx: PolicyContext) -> Policy:
    return IndependentLinUCB(
        ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, params, choice_rngs=ctx.choice_rngs
    )


#: the registry's entries (fedbandits' pyproject.toml names them)
INDEPENDENT = policy_entry(IndependentLinUCB, ExploringLinUCBParams, _independent)
SUPER_AGENT = policy_entry(SuperAgentLinUCB, LinUCBParams)
