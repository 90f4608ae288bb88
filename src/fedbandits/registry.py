"""Every name usable in a config: environments, algorithms and protocols.

Each entry pairs a name with a one-line description, a frozen parameter dataclass (whose
``__post_init__`` validates values and whose field metadata ``help`` documents them) and a
factory.  The CLI's ``list`` command, config validation and the simulator all read this table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any

import numpy as np

from fedbandits.algorithms.base import LinUCBParams, Policy
from fedbandits.algorithms.fedlinucb import FedLinUCB, FedLinUCBParams
from fedbandits.algorithms.linucb import IndependentLinUCB, SuperAgentLinUCB
from fedbandits.envs.base import Environment
from fedbandits.envs.synthetic import GapInstance, GapInstanceParams, GaussianSphere, GaussianSphereParams
from fedbandits.protocols.base import Protocol
from fedbandits.protocols.passthrough import NonPrivate


@dataclass(frozen=True)
class Entry:
    name: str
    description: str
    params: type
    factory: Callable[..., Any]

    def parameters(self) -> list[tuple[str, object, str]]:
        """(name, default, help) of every parameter, in declaration order."""
        out = []
        for f in fields(self.params):
            default = f.default if f.default is not MISSING else None
            out.append((f.name, default, str(f.metadata.get("help", ""))))
        return out


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


@dataclass(frozen=True)
class NoParams:
    """A component without parameters."""


def _linucb_factory(cls: type[Policy]) -> Callable[[LinUCBParams, PolicyContext], Policy]:
    def build(params: LinUCBParams, ctx: PolicyContext) -> Policy:
        return cls(ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, params)  # type: ignore[call-arg]

    return build


def _fedlinucb_factory(params: FedLinUCBParams, ctx: PolicyContext) -> Policy:
    protocol = PROTOCOLS[params.protocol].factory(NoParams(), ctx)
    return FedLinUCB(ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, params, params.batch, protocol)


def _env_factory(cls: type[Environment]) -> Callable[[Any, Sequence[np.random.Generator]], Environment]:
    def build(params: Any, rngs: Sequence[np.random.Generator]) -> Environment:
        return cls(rngs, params)  # type: ignore[call-arg]

    return build


def _protocol_factory(cls: type[Protocol]) -> Callable[[Any, PolicyContext], Protocol]:
    def build(params: Any, ctx: PolicyContext) -> Protocol:
        return cls(ctx.n_runs, ctx.n_agents, ctx.dim)

    return build


ENVIRONMENTS: dict[str, Entry] = {
    cls.name: Entry(cls.name, (cls.__doc__ or "").strip().splitlines()[0], params, _env_factory(cls))
    for cls, params in ((GaussianSphere, GaussianSphereParams), (GapInstance, GapInstanceParams))
}

ALGORITHMS: dict[str, Entry] = {
    IndependentLinUCB.name: Entry(
        IndependentLinUCB.name, IndependentLinUCB.description, LinUCBParams, _linucb_factory(IndependentLinUCB)
    ),
    SuperAgentLinUCB.name: Entry(
        SuperAgentLinUCB.name, SuperAgentLinUCB.description, LinUCBParams, _linucb_factory(SuperAgentLinUCB)
    ),
    FedLinUCB.name: Entry(FedLinUCB.name, FedLinUCB.description, FedLinUCBParams, _fedlinucb_factory),
}

PROTOCOLS: dict[str, Entry] = {
    NonPrivate.name: Entry(NonPrivate.name, NonPrivate.description, NoParams, _protocol_factory(NonPrivate)),
}
