"""``fed-thompson``: federated linear Thompson sampling (Agrawal & Goyal 2013) on FedLinUCB's state.

Everything but the choice of arm is FedLinUCB's (Zhou & Chowdhury 2023, Algorithm 1): clipping,
the local batch statistics, the fixed sync schedule, the protocol, the lazy default and the report.
Instead of the UCB score, every agent samples theta~ ~ N(theta_hat, v^2 V^-1) from its current ridge
state (V, theta_hat) and plays argmax_a x_a . theta~.  The sample uses the agent's own randomness
and the state the agent already acts on, so a private protocol's guarantee is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fedbandits.algorithms.fedlinucb import FedLinUCB, FedLinUCBParams
from fedbandits.core.validation import check_float
from fedbandits.plugins import Entry
from fedbandits.protocols.base import Protocol
from fedbandits.registry import PolicyContext, fedlinucb_protocol


@dataclass(frozen=True)
class FedThompsonParams(FedLinUCBParams):
    """FedLinUCB's parameters (the radius ones are unused) and the posterior scale v."""

    scale: float = field(default=0.1, metadata={"help": "v >= 0: theta~ = theta_hat + v V^-1/2 z, z ~ N(0, I)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("scale", self.scale, low=0.0)


class FedThompson(FedLinUCB):
    """Federated linear Thompson sampling: FedLinUCB with a posterior sample in place of the UCB."""

    name = "fed-thompson"
    description = "federated linear Thompson sampling on FedLinUCB's ridge state and sync (example plugin)"

    def __init__(
        self,
        n_runs: int,
        n_agents: int,
        n_arms: int,
        dim: int,
        horizon: int,
        params: FedThompsonParams,
        protocol: Protocol,
        rngs: Sequence[np.random.Generator],
        reg: float | None = None,
    ) -> None:
        super().__init__(n_runs, n_agents, n_arms, dim, horizon, params, protocol, reg=reg)
        self.scale = params.scale
        self.rngs = list(rngs)  # one per run: the agents' sampling randomness

    def _select(self, features: np.ndarray) -> np.ndarray:
        n = self.n_runs * self.n_agents
        inv = self.state.inv.reshape(n, self.dim, self.dim)  # V^-1 per (run, agent)
        root = np.linalg.cholesky(0.5 * (inv + inv.transpose(0, 2, 1)))
        z = np.stack([rng.standard_normal((self.n_agents, self.dim)) for rng in self.rngs]).reshape(n, self.dim)
        theta = self.state.theta().reshape(n, self.dim) + self.scale * np.einsum("nij,nj->ni", root, z)
        scores = np.einsum("nkd,nd->nk", features.reshape(n, self.n_arms, self.dim), theta)
        return scores.argmax(axis=1).reshape(self.n_runs, self.n_agents)


def build(params: FedThompsonParams, ctx: PolicyContext) -> FedThompson:
    """FedLinUCB's protocol and lambda, then a sampling stream spawned from each run's Generator."""
    protocol, reg = fedlinucb_protocol(params, ctx)
    rngs = [rng.spawn(1)[0] for rng in ctx.noise_rngs]
    return FedThompson(ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, params, protocol, rngs, reg=reg)


ENTRY = Entry(FedThompson.name, FedThompson.description, FedThompsonParams, build, FedThompson)
