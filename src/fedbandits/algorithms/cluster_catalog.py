"""The clustering-of-bandits algorithms as registry entries: FCLUB and its variants (Liu et al. 2022)
and its section 5 baselines (CLUB, Gentile, Li & Zappella 2014; SCLUB, Li, Chen, Li & Leung 2019;
per-user LinUCB), each built on the user and server structure of the environment it plays
(:meth:`UserStructure.from_env`).

fedbandits' ``pyproject.toml`` names each entry below, so a config naming one imports this module,
and no other algorithm's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fedbandits.algorithms.base import Policy, PolicyContext, policy_entry
from fedbandits.algorithms.club import CLUB, SCLUB, CLUBParams, PerUserLinUCB, SCLUBParams
from fedbandits.algorithms.clustering import ClusterUCBParams, UserStructure
from fedbandits.algorithms.fclub import CDPFCLUBDC, FCLUB, FCLUBDC, FCLUBBase, Homo, HomoDC
from fedbandits.algorithms.fclub_params import (
    CDPFCLUBDCParams,
    FCLUBDCParams,
    FCLUBParams,
    HomoDCParams,
    HomoParams,
)


def _fclub(cls: type[FCLUBBase]) -> Callable[[Any, PolicyContext], Policy]:
    def build(params: Any, ctx: PolicyContext) -> Policy:
        users = UserStructure.from_env(ctx.env)
        policy = cls(ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, users, params, ctx.noise_rngs)
        policy.explore_with(params, ctx.choice_rngs)
        return policy

    return build


def _baseline(cls: type[Policy]) -> Callable[[Any, PolicyContext], Policy]:
    def build(params: Any, ctx: PolicyContext) -> Policy:
        users = UserStructure.from_env(ctx.env)
        policy = cls(ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, users, params)  # type: ignore[call-arg]
        policy.explore_with(params, ctx.choice_rngs)  # type: ignore[attr-defined]
        return policy

    return build


CDP_FCLUB_DC = policy_entry(CDPFCLUBDC, CDPFCLUBDCParams, _fclub(CDPFCLUBDC))
FCLUB_DC = policy_entry(FCLUBDC, FCLUBDCParams, _fclub(FCLUBDC))
FCLUB_ENTRY = policy_entry(FCLUB, FCLUBParams, _fclub(FCLUB))
HOMO = policy_entry(Homo, HomoParams, _fclub(Homo))
HOMO_DC = policy_entry(HomoDC, HomoDCParams, _fclub(HomoDC))
CLUB_ENTRY = policy_entry(CLUB, CLUBParams, _baseline(CLUB))
SCLUB_ENTRY = policy_entry(SCLUB, SCLUBParams, _baseline(SCLUB))
PER_USER = policy_entry(PerUserLinUCB, ClusterUCBParams, _baseline(PerUserLinUCB))
