"""Empirical privacy audit of every private mode: ``fedbandits audit privacy``.

For each audited mode the *real* algorithm (built from a validated config through the registry,
on the ``data-files`` environment) plays two neighbouring datasets from :mod:`~.crafted`, many
times with independent privacy noise (one run per trial, batched).  The adversary's view of a
run is everything the mode releases:

* ``messages``: every silo's released p-sums / prefixes (``ldp``, ``ldp-prefix``: what the server
  receives);
* ``shuffled``: the server's view of ``sdp-amplification`` -- each release's shuffled batch,
  reduced to permutation-invariant features (sum, maximum and minimum over silos of every entry);
* ``aggregate``: the server's view of ``distributed-dp`` -- the decoded modular sum of every
  release (the masked messages around it are uniform given that sum, so it is all the server learns);
* ``privatizer``: every release of FedUCB's tree Privatizer(s) -- message tree and, with the
  private schedule, the schedule tree -- round by round, with which streams released (the
  schedule is part of the view).

Half of the trials fit a linear test and its threshold; the other half count true and false
positives, and :func:`fedbandits.audit.stats.epsilon_lower_bound` turns them into a
Clopper-Pearson lower bound on epsilon at the claimed delta.  A mode is *violated* when that
bound exceeds the epsilon its report certifies (``epsilon_spent``, or the target when the report
certifies nothing finite).

The schedule side channels measured by :mod:`fedbandits.audit.schedule` (FedUCB's adaptive
schedule) and :mod:`fedbandits.audit.upload_timing` (CDP-FCLUB-DC's upload timing) are added as
rows of the same table by :func:`audit_all`.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.algorithms.base import Policy
from fedbandits.audit.crafted import write_neighbours
from fedbandits.audit.schedule import AttackSetup, run_attack
from fedbandits.audit.stats import apply_test, epsilon_estimate, epsilon_lower_bound, fit_test
from fedbandits.audit.upload_timing import TimingSetup, run_timing_attack
from fedbandits.config import config_from_dict
from fedbandits.plugins import BUILTIN
from fedbandits.privacy.privatizer import TreePrivatizer
from fedbandits.registry import ALGORITHMS, ENVIRONMENTS, PROTOCOLS, PolicyContext
from fedbandits.sim.seeding import choice_rngs, env_rngs, noise_rngs

VIEWS = ("messages", "shuffled", "privatizer", "aggregate")
#: the user-level rows' returning victim: its visits, and the cap m the user-level calibration is for
USER_HISTORY = 4
#: every audited learner acts greedily on its estimate (a small constant radius): the claims must
#: hold for every hyperparameter, and this one lets one user steer the most
GREEDY = {"radius": "constant", "beta": 0.01}


@dataclass(frozen=True)
class AuditCase:
    """One audited mode: an ``[[algorithms]]`` table played on crafted neighbouring data files."""

    label: str
    algorithm: dict[str, Any]
    view: str
    dataset: str = "steering"
    agents: int = 1  # silos: the victim and agents - 1 clones of its dataset D
    batch_users: int = 25  # users per synchronisation batch (the horizon is ``batches`` of them)
    batches: int = 4
    #: test-only: multiply the calibrated noise by this factor after the policy is built
    noise_scale: float = 1.0
    #: ``user-history``: the returning victim's visits (its whole history differs between D and D')
    history: int = 1

    def __post_init__(self) -> None:
        if self.view not in VIEWS:
            raise ValueError(f"view must be one of {', '.join(map(repr, VIEWS))}, got {self.view!r}")
        if not self.noise_scale > 0:
            raise ValueError(f"noise_scale must be > 0, got {self.noise_scale!r}")

    @property
    def horizon(self) -> int:
        return self.batch_users * self.batches


@dataclass(frozen=True)
class AuditRow:
    """One row of the audit table."""

    mode: str
    algorithm: str
    protocol: str
    lazy: str
    claimed_epsilon: float
    epsilon_spent: float
    delta: float
    guarantee: str
    trials: int  # counted trials per dataset (as many again fitted the test)
    true_positives: int
    false_positives: int
    epsilon_estimate: float  # from the raw rates
    epsilon_lower_bound: float  # Clopper-Pearson, confidence 1 - alpha
    attack: str = "release distinguisher"
    notes: str = ""

    @property
    def certified_epsilon(self) -> float:
        """What the report certifies: epsilon_spent if finite, else the target."""
        return self.epsilon_spent if math.isfinite(self.epsilon_spent) else self.claimed_epsilon

    @property
    def verdict(self) -> str:
        return "violated" if self.epsilon_lower_bound > self.certified_epsilon else "consistent"

    def row(self) -> dict[str, object]:
        spent = "inf" if math.isinf(self.epsilon_spent) else f"{self.epsilon_spent:.3g}"
        est = "inf" if math.isinf(self.epsilon_estimate) else f"{self.epsilon_estimate:.2f}"
        return {
            "mode": self.mode,
            "protocol": self.protocol,
            "lazy": self.lazy,
            "claimed eps": f"{self.claimed_epsilon:g}",
            "eps spent": spent,
            "delta": f"{self.delta:g}",
            "guarantee": self.guarantee,
            "attack": self.attack,
            "TP/FP of n": f"{self.true_positives}/{self.false_positives} of {self.trials}",
            "eps lower bound [estimate]": f"{self.epsilon_lower_bound:.2f} [{est}]",
            "verdict": self.verdict,
        }


def _config(case: AuditCase, paths: Sequence[Path], runs: int, seed: int) -> Any:
    return config_from_dict(
        {
            "experiment": {"name": "audit", "seed": seed, "runs": runs, "horizon": case.horizon},
            "environment": {"name": "data-files", "paths": [str(p) for p in paths], "order": "file"},
            "algorithms": [case.algorithm],
        }
    )


def _under_noise(policy: Policy, scale: float) -> None:
    """The test-only hook: shrink the calibrated noise of a Gaussian tree protocol (or of the silos' own
    trees of fedlinucb-async)."""
    randomizer = getattr(getattr(policy, "protocol", None), "randomizer", None) or getattr(policy, "trees", None)
    if randomizer is None or randomizer.sigma is None:
        raise ValueError(
            f"noise_scale is implemented for the Gaussian tree protocols only, not {type(policy).__name__}"
        )
    randomizer.sigma = randomizer.sigma * scale


def _privatizers(policy: Policy) -> list[TreePrivatizer]:
    found = [getattr(policy, name, None) for name in ("privatizer", "schedule_tree")]
    trees = [tree for tree in found if isinstance(tree, TreePrivatizer)]
    if not trees:
        raise ValueError(f"{type(policy).__name__} has no tree Privatizer to observe")
    for tree in trees:
        tree.log = []
    return trees


def play(case: AuditCase, paths: Sequence[Path], runs: int, seed: int) -> tuple[np.ndarray, dict[str, object]]:
    """Play ``runs`` trials of the case on the silos' files; returns the views (runs, F) and the report."""
    config = _config(case, paths, runs, seed)
    exp, alg = config.experiment, config.algorithms[0]
    run_ids = list(range(runs))
    env = ENVIRONMENTS[config.environment.name].factory(config.environment.params, env_rngs(exp.seed, run_ids))
    ctx = PolicyContext(
        runs,
        env.n_agents,
        env.n_arms,
        env.dim,
        exp.horizon,
        noise_rngs(seed, run_ids, 0),
        True,
        env,
        choice_rngs(seed, run_ids, 0),
    )
    policy = ALGORITHMS[alg.name].factory(alg.params, ctx)
    if case.noise_scale != 1.0:
        _under_noise(policy, case.noise_scale)
    trees = _privatizers(policy) if case.view == "privatizer" else []
    rounds: list[np.ndarray] = []
    for _ in range(exp.horizon):
        policy.step(env.next_round(), env)
        if trees:
            rounds.append(_round_view(trees, runs))
    return _views(case, policy, rounds), policy.report()


def _round_view(trees: Sequence[TreePrivatizer], runs: int) -> np.ndarray:
    """This round's releases of every tree, (runs, F): released prefixes and which streams released."""
    parts = []
    for tree in trees:
        assert tree.log is not None
        if tree.log:
            masks = np.sum([m for m, _ in tree.log], axis=0)
            outs = np.sum([o for _, o in tree.log], axis=0)
        else:
            masks = np.zeros(tree.k.shape)
            size = tree.dim + 1
            outs = np.zeros((*tree.k.shape, size, size))
        tree.log.clear()
        parts += [masks.reshape(runs, -1).astype(np.float64), outs.reshape(runs, -1)]
    return np.concatenate(parts, axis=1)


def _views(case: AuditCase, policy: Policy, rounds: list[np.ndarray]) -> np.ndarray:
    if case.view == "privatizer":
        return np.concatenate(rounds, axis=1)
    transcript = getattr(getattr(policy, "protocol", None), "transcript", None) or getattr(policy, "transcript", None)
    if not transcript:
        raise ValueError(f"{case.label}: the protocol recorded no releases")
    if case.view == "messages":
        msgs = np.stack([np.asarray(rec["messages"]) for rec in transcript], axis=1)  # (R, K, M, P)
        return msgs.reshape(msgs.shape[0], -1)
    if case.view == "aggregate":
        sums = np.stack([np.asarray(rec["sum"]) for rec in transcript], axis=1)  # (R, K, P)
        return sums.reshape(sums.shape[0], -1)
    batches = np.stack([np.asarray(rec["server_view"]) for rec in transcript], axis=1)  # (R, K, M, P) shuffled
    invariant = np.concatenate([batches.sum(axis=2), batches.max(axis=2), batches.min(axis=2)], axis=-1)
    return invariant.reshape(invariant.shape[0], -1)


def run_case(case: AuditCase, trials: int, seed: int = 0, alpha: float = 0.05) -> AuditRow:
    """Audit one mode with ``trials`` counted trials per dataset (and as many to fit the test)."""
    if trials < 10:
        raise ValueError(f"trials must be >= 10, got {trials}")
    with tempfile.TemporaryDirectory(prefix="fedbandits-audit-") as tmp:
        d_path, d2_path = write_neighbours(tmp, case.dataset, case.horizon, case.history)
        clones = [d_path] * (case.agents - 1)
        # paired trials: the same noise seeds on both datasets; fit on runs [0, n), count on [n, 2n)
        views_d, report = play(case, [d_path, *clones], 2 * trials, seed)
        views_d2, _ = play(case, [d2_path, *clones], 2 * trials, seed)
    spec = case.algorithm
    delta = float(spec.get("delta", 1e-4))
    test = fit_test(views_d[:trials], views_d2[:trials], delta, alpha)
    tp, fp = apply_test(test, views_d[trials:], views_d2[trials:])
    spent = report.get("epsilon_spent", math.inf)
    return AuditRow(
        mode=case.label,
        algorithm=str(spec["name"]),
        protocol=str(report.get("protocol", spec.get("protocol", "-"))),
        lazy=str(report.get("lazy", "-")).lower(),
        claimed_epsilon=float(spec.get("epsilon", 1.0)),
        epsilon_spent=float(spent) if spent is not None else math.inf,  # type: ignore[arg-type]
        delta=delta,
        guarantee=str(report.get("guarantee", "-")),
        trials=trials,
        true_positives=tp,
        false_positives=fp,
        epsilon_estimate=epsilon_estimate(tp, fp, trials, delta),
        epsilon_lower_bound=epsilon_lower_bound(tp, fp, trials, delta, alpha),
        notes=f"dataset {case.dataset}, view {case.view}, M = {case.agents}, T = {case.horizon}",
    )


def _fedlinucb(protocol: str, lazy: bool, epsilon: float = 1.0, **extra: object) -> dict[str, Any]:
    return {
        "name": "fedlinucb",
        "label": f"fedlinucb {protocol} lazy={lazy}",
        "batch": 25,
        "protocol": protocol,
        "epsilon": epsilon,
        "delta": 1e-5,
        "calibration": "tight",
        "lazy": lazy,
        "regularizer": "fixed",  # lambda = 1: a single user moves the estimate the most
        **GREEDY,
        **extra,
    }


def _async_fedlinucb(**extra: object) -> dict[str, Any]:
    """fedlinucb-async with every silo's own ldp-prefix tree, as greedy as the FedLinUCB rows (its
    decisions read downloads only: lazy by construction)."""
    fields = {k: v for k, v in _fedlinucb("ldp-prefix", True).items() if k != "lazy"}
    return {**fields, "name": "fedlinucb-async", "label": "fedlinucb-async ldp-prefix", **extra}


def _feducb(name: str, **extra: object) -> dict[str, Any]:
    return {"name": name, "epsilon": 1.0, "delta": 1e-5, "calibration": "tight", **GREEDY, **extra}


def default_cases() -> list[AuditCase]:
    """Every private mode, lazy and not: FedLinUCB's five private protocols (distributed-dp is lazy
    only) and the factorized release of ldp and distributed-dp, FedUCB's Privatizer
    with the private schedule, decentralized FedUCB (epsilon = 1, delta = 1e-5, tight); and every
    private plugin protocol (:func:`plugin_cases`)."""
    cases = [*_fedlinucb_cases(), *_distributed_cases(), *_user_level_cases(), *_other_learner_cases()]
    return cases + plugin_cases()


def _fedlinucb_cases() -> list[AuditCase]:
    """FedLinUCB's private protocols, lazy and not; ldp's encoded releases and Thompson sampling."""
    cases = []
    fedlinucb_modes = (
        ("ldp", "messages", 1),
        ("ldp-prefix", "messages", 1),
        ("sdp-amplification", "shuffled", 13),  # Lemma F.2 needs more than 11.09 silos
        ("sdp-vector-sum", "messages", 2),  # the transcript holds the server's decoded p-sum
    )
    for protocol, view, agents in fedlinucb_modes:
        for lazy in (True, False):
            cases.append(
                AuditCase(
                    f"FedLinUCB {protocol} {'lazy' if lazy else 'non-lazy (Alg. 1)'}",
                    _fedlinucb(protocol, lazy),
                    view,
                    dataset="full-sensitivity" if lazy else "steering",
                    agents=agents,
                )
            )
    cases.append(
        AuditCase(
            "FedLinUCB ldp lazy, factorized release",
            _fedlinucb("ldp", True, mechanism="factorized"),
            "messages",
            dataset="full-sensitivity",
        )
    )
    cases.append(
        AuditCase(
            "FedLinUCB ldp lazy, streaming release (BLT)",
            _fedlinucb("ldp", True, mechanism="blt"),
            "messages",
            dataset="full-sensitivity",
        )
    )
    cases.append(  # band 2 of the run's 4 releases: the decoder's recursion runs past the band
        AuditCase(
            "FedLinUCB ldp lazy, streaming release (banded, band 2)",
            _fedlinucb("ldp", True, mechanism="banded", band=2),
            "messages",
            dataset="full-sensitivity",
        )
    )
    # a random choice reads released statistics only and touches no release (issue #46): on the steering
    # dataset (two arms per user) Thompson sampling's random choices cannot carry the first user's data
    # into the later users' choices of a lazy learner
    for lazy in (True, False):  # non-lazy: its own unreleased data steers the draws, and the audit sees it
        cases.append(
            AuditCase(
                f"FedLinUCB ldp {'lazy' if lazy else 'non-lazy (Alg. 1)'}, Thompson sampling",
                _fedlinucb("ldp", lazy, exploration="thompson"),
                "messages",
                dataset="steering",
            )
        )
    return cases


def _distributed_cases() -> list[AuditCase]:
    """distributed-dp (lazy by construction): the tree, the factorized and the streaming banded release."""
    cases = []
    cases.append(
        AuditCase(
            "FedLinUCB distributed-dp (lazy by construction)",
            _fedlinucb("distributed-dp", True),
            "aggregate",
            dataset="full-sensitivity",
            agents=2,  # the victim's silo and one more honest share
        )
    )
    cases.append(
        AuditCase(
            "FedLinUCB distributed-dp lazy, factorized release",
            _fedlinucb("distributed-dp", True, mechanism="factorized"),
            "aggregate",
            dataset="full-sensitivity",
            agents=2,
        )
    )
    cases.append(  # the split of the noise the centred-rewards pay-off uses (docs/comparisons.md)
        AuditCase(
            "FedLinUCB distributed-dp lazy, factorized release, bias_noise_ratio 0.5",
            _fedlinucb("distributed-dp", True, mechanism="factorized", bias_noise_ratio=0.5),
            "aggregate",
            dataset="full-sensitivity",
            agents=2,
        )
    )
    cases.append(
        AuditCase(
            "FedLinUCB distributed-dp lazy, streaming release (banded, band 2)",
            _fedlinucb("distributed-dp", True, mechanism="banded", band=2),
            "aggregate",
            dataset="full-sensitivity",
            agents=2,
        )
    )
    return cases


def _user_level_cases() -> list[AuditCase]:
    """FedLinUCB's user-level rows: a returning victim with ``USER_HISTORY`` visits, lazy."""
    cases = []
    for protocol, view, agents, mechanism in (
        ("ldp", "messages", 1, "tree"),
        ("distributed-dp", "aggregate", 2, "tree"),
        ("distributed-dp", "aggregate", 2, "factorized"),
        ("distributed-dp", "aggregate", 2, "banded"),
    ):
        release = {"tree": "", "factorized": ", factorized release", "banded": ", streaming release (banded, band 2)"}
        band = {"band": 2} if mechanism == "banded" else {}
        cases.append(
            AuditCase(
                f"FedLinUCB {protocol} lazy{release[mechanism]}, user-level (m = {USER_HISTORY})",
                _fedlinucb(
                    protocol, True, privacy_unit="user", max_contributions=USER_HISTORY, mechanism=mechanism, **band
                ),
                view,
                dataset="user-history",
                agents=agents,
                history=USER_HISTORY,
            )
        )
    return cases


def _other_learner_cases() -> list[AuditCase]:
    """FedLinUCB-async's own ldp-prefix trees, FedUCB's Privatizer with the private schedule and
    decentralized FedUCB's."""
    return [
        AuditCase(
            "FedLinUCB-async ldp-prefix lazy, period trigger",
            _async_fedlinucb(trigger="period"),
            "messages",
            dataset="full-sensitivity",
        ),
        # its random choices read its downloads only: on the steering pair they cannot carry the first
        # user's data into the later users' choices either (issue #46: every LinUCB-type learner explores)
        AuditCase(
            "FedLinUCB-async ldp-prefix lazy, period trigger, Thompson sampling",
            _async_fedlinucb(trigger="period", exploration="thompson"),
            "messages",
            dataset="steering",
        ),
        AuditCase(
            "FedUCB Privatizer, private schedule",
            _feducb("feducb", schedule="private", threshold=1.0),
            "privatizer",
            agents=2,
            batches=1,
        ),
        AuditCase(
            "FedUCB decentralized Privatizer",
            _feducb("feducb-decentralized", threshold=0.1),
            "privatizer",
            agents=2,
            batches=1,
        ),
    ]


#: silos of an audited plugin protocol, by the view its entry declares (as the built-ins of that view:
#: the shuffle amplification lemma needs more than 11.09 silos, a sum hides a lone silo's share)
VIEW_AGENTS = {"messages": 1, "shuffled": 13, "aggregate": 2}


def plugin_cases() -> list[AuditCase]:
    """One lazy row per private plugin protocol (:mod:`fedbandits.plugins`): FedLinUCB syncing through
    it, observed through the ``audit_view`` of its entry, on the full-sensitivity neighbours."""
    cases = []
    for name, entry in PROTOCOLS.items():
        origin = PROTOCOLS.origin(name)
        if origin == BUILTIN or not entry.private or entry.audit_view is None:
            continue
        cases.append(
            AuditCase(
                f"FedLinUCB {name} lazy (plugin {origin})",
                _fedlinucb(name, True),
                entry.audit_view,
                dataset="full-sensitivity",
                agents=VIEW_AGENTS[entry.audit_view],
            )
        )
    return cases


@dataclass(frozen=True)
class AuditPlan:
    """How many trials each part of ``audit privacy`` runs."""

    trials: int = field(default=500, metadata={"help": "counted trials per dataset of each release audit"})
    schedule_trials: int = field(default=2000, metadata={"help": "paired trials of the FedUCB schedule attack"})
    timing_trials: int = field(default=4000, metadata={"help": "paired trials of the CDP-FCLUB-DC timing attack"})
    seed: int = 0
    alpha: float = 0.05

    @classmethod
    def quick(cls) -> AuditPlan:
        return cls()

    @classmethod
    def full(cls) -> AuditPlan:
        return cls(trials=5000, schedule_trials=20000, timing_trials=50000)


def schedule_rows(plan: AuditPlan) -> list[AuditRow]:
    """The schedule side channels as audit rows (their own datasets and tests)."""
    rows = []
    feducb = {r.target: r for r in run_attack(AttackSetup(trials=plan.schedule_trials, seed=plan.seed))}
    r = feducb["feducb (Privatizer)"]
    rows.append(
        AuditRow(
            "FedUCB Privatizer, adaptive schedule", "feducb", "feducb-privatizer", "-", r.claimed_epsilon, math.inf,
            r.delta, "no formal guarantee", r.trials, round(r.tpr * r.trials), round(r.fpr * r.trials),
            epsilon_estimate(round(r.tpr * r.trials), round(r.fpr * r.trials), r.trials, r.delta),
            r.epsilon_lower_bound, attack="sync after round 1 (audit schedule)",
        )
    )  # fmt: skip
    r = feducb["fedlinucb-async ldp-prefix"]
    tp, fp = round(r.tpr * r.trials), round(r.fpr * r.trials)
    rows.append(
        AuditRow(
            "FedLinUCB-async ldp-prefix, determinant trigger", "fedlinucb-async", "ldp-prefix", "true",
            r.claimed_epsilon, math.inf, r.delta, "no formal guarantee", r.trials, tp, fp,
            epsilon_estimate(tp, fp, r.trials, r.delta), r.epsilon_lower_bound,
            attack="upload after round 1 (audit schedule)",
        )
    )  # fmt: skip
    (t,) = run_timing_attack(TimingSetup(trials=plan.timing_trials, epsilon=8.0, delta=1e-5, seed=plan.seed), False)
    tp, fp = round(t.tpr * t.trials), round(t.fpr * t.trials)
    rows.append(
        AuditRow(
            "CDP-FCLUB-DC", "cdp-fclub-dc", "cdp-tree", "-", t.claimed_epsilon, t.reported_epsilon, t.delta,
            "no formal guarantee", t.trials, tp, fp, epsilon_estimate(tp, fp, t.trials, t.delta),
            t.epsilon_lower_bound, attack="upload timing (audit schedule)",
        )
    )  # fmt: skip
    return rows


def audit_all(plan: AuditPlan, cases: Sequence[AuditCase] | None = None) -> list[AuditRow]:
    """Every row of ``fedbandits audit privacy``."""
    rows = [run_case(c, plan.trials, plan.seed, plan.alpha) for c in (cases or default_cases())]
    return rows + schedule_rows(plan)
