"""The side channel of an adaptive sync schedule, measured (Zhou & Chowdhury 2023, Example 3.1, App. B.1).

Threat model: silo j is honest but curious.  It sees its own first user and *whether* a
synchronisation happened after round 1 -- nothing the server sends, no noisy statistic.  Under
FedUCB's rule a sync after round 1 happens iff some silo's first user has
log det(S + x x^T) - log det(S) > D, i.e. ||x||^2 > C = M rho_min (e^D - 1) (S = M rho_min I at
t = 1), with C public.  If silo j's own user has ||x_j||^2 <= C, a sync reveals that another
silo's first user has ||x||^2 > C.

The experiment: two neighbouring datasets differing only in the first user of victim silo 0 --
"Alice" (||x||^2 = C / 2, no trigger) or "Tracy" (||x||^2 = (C + L^2) / 2, a trigger).  All other
silos' first users are random (direction uniform, norm uniform in [0, L]); silo 1 is the attacker.
Every trial runs the *real* algorithm for one round on both datasets with identical everything
else (paired: same other users, same privacy noise).  The attacker answers "Tracy" iff it saw a
sync and its own user cannot have triggered it (||x_1||^2 <= C), and "Alice" otherwise (this
keeps its false-positive rate at the chance that a *third* silo triggered, which maximises the
epsilon the experiment can certify).
All trials run batched as the R runs of one policy.

The asynchronous FedLinUCB rows (He et al. 2022, :mod:`fedbandits.algorithms.async_fedlinucb`, with
each silo's ldp-prefix noise) use the same users and statistic with the trigger threshold alpha = C
(lambda = 1), so silo 0 uploads after round 1 iff ||x||^2 > C.  There a silo's upload does not make
the others sync, so the observer is the server, which sees each silo's upload times: more than
whether some silo synced, so the statistic (with silo 1's user known, e.g. silo 1 colluding) bounds
what it learns from below.

Reported: true/false positive rates with Clopper-Pearson intervals, the attacker's accuracy with
an exact binomial test against 1/2, and the empirical epsilon lower bound any (epsilon, delta)-DP
claim must satisfy: with TPR <= e^eps FPR + delta and 1 - FPR <= e^eps (1 - TPR) + delta,

    eps >= max( log((TPR_lo - delta) / FPR_hi), log((1 - FPR_hi - delta) / (1 - TPR_lo)) )

with one-sided (1 - alpha/2) Clopper-Pearson bounds, so the bound holds with confidence 1 - alpha.
A claimed epsilon below it is refuted by the experiment.

The rule only fires at round 1 if a single user can cross C < L^2; with FedUCB's Theorem-1 D and
privacy on, C is astronomically large and the side channel opens only later (when accumulated
data crosses the threshold).  The audit therefore sets D so that C = ``threshold_c`` L^2 (public
knowledge, as in Example 3.1); this is a choice of operating point, not a weakness of the attack.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
from scipy import stats

from fedbandits.algorithms.async_fedlinucb import AsyncFedLinUCBParams
from fedbandits.algorithms.base import Policy
from fedbandits.algorithms.fedlinucb import FedLinUCBParams
from fedbandits.algorithms.feducb import FedUCB, FedUCBParams, calibrate_feducb
from fedbandits.audit.stats import clopper_pearson, epsilon_lower_bound
from fedbandits.core.validation import check_float, check_int
from fedbandits.registry import ALGORITHMS, PolicyContext


@dataclass(frozen=True)
class AttackSetup:
    """Parameters of the schedule side-channel experiment."""

    trials: int = field(default=2000, metadata={"help": "paired trials (each runs both datasets), >= 10"})
    agents: int = field(default=2, metadata={"help": "silos M >= 2 (0 = victim, 1 = attacker, others random)"})
    dim: int = field(default=5, metadata={"help": "feature dimension d >= 1"})
    seed: int = field(default=0, metadata={"help": "seed of the users and the privacy noise, >= 0"})
    epsilon: float = field(default=1.0, metadata={"help": "the privacy budget the algorithms claim, > 0"})
    delta: float = field(default=0.1, metadata={"help": "its delta, in (0, 1)"})
    threshold_c: float = field(default=0.5, metadata={"help": "C / L^2 in (0, 1): where one user triggers a sync"})
    horizon: int = field(default=1000, metadata={"help": "the horizon the algorithms are configured for, >= 2"})
    alpha: float = field(default=0.05, metadata={"help": "1 - confidence of the intervals, in (0, 1)"})

    def __post_init__(self) -> None:
        check_int("trials", self.trials, low=10)
        check_int("agents", self.agents, low=2)
        check_int("dim", self.dim, low=1)
        check_int("seed", self.seed, low=0)
        check_float("epsilon", self.epsilon, low=0.0, low_open=True)
        check_float("delta", self.delta, low=0.0, high=1.0, low_open=True, high_open=True)
        check_float("threshold_c", self.threshold_c, low=0.0, high=1.0, low_open=True, high_open=True)
        check_int("horizon", self.horizon, low=2)
        check_float("alpha", self.alpha, low=0.0, high=1.0, low_open=True, high_open=True)


@dataclass(frozen=True)
class AttackResult:
    target: str
    schedule: str
    claimed_epsilon: float
    delta: float
    trials: int
    syncs_alice: int  # trials with a sync after round 1, dataset "Alice"
    syncs_tracy: int
    tpr: float
    fpr: float
    accuracy: float
    accuracy_interval: tuple[float, float]
    p_value: float  # exact two-sided binomial test of accuracy = 1/2
    epsilon_lower_bound: float  # with confidence 1 - alpha; 0 if nothing is refuted

    def row(self) -> dict[str, object]:
        return {
            "target": self.target,
            "schedule": self.schedule,
            "claimed eps": "none" if math.isinf(self.claimed_epsilon) else self.claimed_epsilon,
            "syncs (Alice/Tracy)": f"{self.syncs_alice}/{self.syncs_tracy}",
            "TPR": round(self.tpr, 3),
            "FPR": round(self.fpr, 3),
            "accuracy": f"{self.accuracy:.3f} [{self.accuracy_interval[0]:.3f}, {self.accuracy_interval[1]:.3f}]",
            "p (acc = 1/2)": f"{self.p_value:.2g}",
            "eps lower bound": round(self.epsilon_lower_bound, 2),
        }


def _users(setup: AttackSetup, rng: np.random.Generator, c: float) -> tuple[np.ndarray, np.ndarray]:
    """First users of every (trial, silo) under both datasets, (R, M, d) each; L = 1."""
    R, M, d = setup.trials, setup.agents, setup.dim
    direction = rng.normal(size=(R, M, d))
    direction /= np.linalg.norm(direction, axis=-1, keepdims=True)
    norms = rng.uniform(0.0, 1.0, size=(R, M))
    base = direction * norms[..., None]
    alice, tracy = base.copy(), base.copy()
    alice[:, 0] = direction[:, 0] * math.sqrt(c / 2.0)
    tracy[:, 0] = direction[:, 0] * math.sqrt((c + 1.0) / 2.0)
    return alice, tracy


def _one_round_syncs(policy: Policy, x: np.ndarray) -> np.ndarray:
    """Play round 1 with one arm per silo (the user's own context); did each run sync?"""
    features = x[:, :, None, :].astype(np.float32)
    policy.select(features)
    x64 = features[:, :, 0, :].astype(np.float64)
    policy.observe(x64, np.full(x.shape[:2], 0.5))
    policy.end_round()
    return policy.sync_rounds > 0


def feducb_threshold(setup: AttackSetup, rho_min: float) -> float:
    """D with C = M rho_min (e^D - 1) = threshold_c * L^2."""
    return math.log1p(setup.threshold_c / (setup.agents * rho_min))


def _builders(setup: AttackSetup) -> list[tuple[str, str, object]]:
    """(target, schedule, factory(noise_rngs) -> Policy) of every audited algorithm."""

    R, M, d, T = setup.trials, setup.agents, setup.dim, setup.horizon
    common = {"epsilon": setup.epsilon, "delta": setup.delta, "radius": "constant"}

    def feducb(**kw: object):  # type: ignore[no-untyped-def]
        def build(rngs):  # type: ignore[no-untyped-def]
            params = FedUCBParams(**common, **kw)  # type: ignore[arg-type]
            rho_min = calibrate_feducb(params, horizon=T, agents=M, dim=d).shift if params.private else params.reg
            params = replace(params, threshold=feducb_threshold(setup, rho_min))
            return FedUCB(R, M, 1, d, T, params, rngs)

        return build

    def async_fedlinucb(**kw: object):  # type: ignore[no-untyped-def]
        # lambda = 1 and alpha = C / L^2: a first user triggers its silo's upload iff ||x||^2 > C
        def build(rngs):  # type: ignore[no-untyped-def]
            params = AsyncFedLinUCBParams(
                **common, protocol="ldp-prefix", regularizer="fixed", threshold=setup.threshold_c, **kw
            )  # type: ignore[arg-type]
            return ALGORITHMS["fedlinucb-async"].factory(params, PolicyContext(R, M, 1, d, T, rngs))

        return build

    def fedlinucb(rngs):  # type: ignore[no-untyped-def]
        params = FedLinUCBParams(
            batch=1, protocol="ldp", epsilon=setup.epsilon, delta=setup.delta, radius="constant", calibration="tight"
        )
        ctx = PolicyContext(R, M, 1, d, T, rngs)
        return ALGORITHMS["fedlinucb"].factory(params, ctx)

    return [
        ("feducb (non-private)", "adaptive, raw data", feducb(private=False)),
        ("feducb (Privatizer)", "adaptive, raw data", feducb()),
        ("feducb private schedule", "adaptive, noisy data", feducb(calibration="tight", schedule="private")),
        ("fedlinucb ldp (B=1)", "fixed batch", fedlinucb),
        ("fedlinucb-async ldp-prefix", "per-silo trigger, raw data", async_fedlinucb(trigger="determinant")),
        ("fedlinucb-async ldp-prefix (period)", "per-silo fixed period", async_fedlinucb(trigger="period", batch=1)),
    ]


def run_attack(setup: AttackSetup) -> list[AttackResult]:
    """The side-channel experiment against every audited algorithm (see the module docstring)."""
    seq = np.random.SeedSequence(setup.seed)
    user_seed, noise_seed = seq.spawn(2)
    results = []
    for target, schedule, build in _builders(setup):
        rng = np.random.default_rng(user_seed)
        outcomes = {}
        for name in ("alice", "tracy"):
            # identical privacy noise under both datasets (paired trials)
            fresh = np.random.SeedSequence(noise_seed.entropy, spawn_key=noise_seed.spawn_key)
            noise_rngs = [np.random.default_rng(s) for s in fresh.spawn(setup.trials)]
            outcomes[name] = build(noise_rngs)  # type: ignore[operator]
        c = setup.threshold_c  # C / L^2 with L = 1
        alice, tracy = _users(setup, rng, c)
        synced_a = _one_round_syncs(outcomes["alice"], alice)
        synced_t = _one_round_syncs(outcomes["tracy"], tracy)
        own_small = (alice[:, 1] ** 2).sum(axis=-1) <= c  # attacker's own user (identical in both)
        guess_a = own_small & synced_a
        guess_t = own_small & synced_t
        tp, fp, n = int(guess_t.sum()), int(guess_a.sum()), setup.trials
        correct = tp + (n - fp)
        test = stats.binomtest(correct, 2 * n, 0.5)
        results.append(
            AttackResult(
                target=target,
                schedule=schedule,
                claimed_epsilon=setup.epsilon if "non-private" not in target else math.inf,
                delta=setup.delta,
                trials=n,
                syncs_alice=int(synced_a.sum()),
                syncs_tracy=int(synced_t.sum()),
                tpr=tp / n,
                fpr=fp / n,
                accuracy=correct / (2 * n),
                accuracy_interval=clopper_pearson(correct, 2 * n, setup.alpha),
                p_value=float(test.pvalue),
                epsilon_lower_bound=epsilon_lower_bound(tp, fp, n, setup.delta, setup.alpha),
            )
        )
    return results


class _Row(Protocol):
    def row(self) -> dict[str, object]: ...


def format_table(results: Sequence[_Row]) -> str:
    """One aligned text table of the results' rows (attack results or privacy-audit rows)."""
    rows = [r.row() for r in results]
    keys = list(rows[0])
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in keys}
    lines = ["  ".join(k.ljust(widths[k]) for k in keys).rstrip()]
    lines += ["  ".join(str(r[k]).ljust(widths[k]) for k in keys).rstrip() for r in rows]
    return "\n".join(lines)
