"""Centralized FedUCB (Dubey & Pentland 2020, Algorithm 1 with the PRIVATIZER of Algorithm 2).

Every agent i acts on V_{i,t} = S_t + U_{i,t} and u~_{i,t} = s_t + u_{i,t} (line 4, eq. (2)): the
synchronised (privatised) statistics S_t, s_t plus its own statistics since the last sync.  After
each observation the agent checks a log-det trigger; if any agent of a run fires, *all* agents
of that run synchronise (lines 15-21): each sends its batch statistic Q-hat to its PRIVATIZER
(a tree over its sync rounds), the controller adds the M noisy prefix sums and every agent
adopts them.

Trigger rules (``rule``):

* ``"restated"`` (default): Zhou & Chowdhury (2023), Algorithm 3 line 9, which fixes the form
  of the published rule:  (t - t_last) * [log det(V_{i,t} + x x^T) - log det(V_last)] > D,
  with V_last = S_{t_last} the matrix adopted at the last sync.
* ``"original"``: Dubey & Pentland's line 12 as printed:
  log det(V_{i,t} + x x^T + M (rho_max - rho_min) I) - log det(S_{i,t}) >= D / Delta t_i.
  The differences: the extra M (rho_max - rho_min) I = 2 M Lambda I in the numerator (with
  privacy on it alone can exceed the threshold, so the rule may fire on every round without
  any data), ">=" instead of ">", and the paper's Delta t_i, whose reset is printed in the
  wrong branch (line 24) and which is undefined at t = 1; we read Delta t_i = t - t_last
  (rounds since the last sync, 1 at the first round), the same as the restatement.

Both rules read the agents' *non-private* data, so the schedule itself leaks (Zhou & Chowdhury
2023, section 3, Example 3.1): the report says ``guarantee = "no formal guarantee"`` and
:mod:`fedbandits.audit.schedule` measures the leak.  ``schedule = "private"`` is the variant of
Zhou & Chowdhury's appendix D.2: the trigger reads each agent's local Gram matrix through a
second tree mechanism (one release per round), so the schedule is a post-processing of private
releases.  It has **no proven regret bound** (appendix D.2 explains why) and is labelled so.

Privacy (``private = true``): features are clipped to ||x|| <= L and rewards to [-B, B] before
they enter Q-hat or the agent's own state (clipped counts reported).  Noise per tree node as in
:mod:`fedbandits.privacy.privatizer`; each released Gram matrix is shifted by 2 Lambda I so that
rho_min = Lambda, rho_max = 3 Lambda (Proposition 4); S starts at M rho_min I (line 1).  With
``private = false`` there is no noise and rho_min = rho_max = ``reg``: S = M reg I + sum of all
synced x x^T, exactly.

Confidence radius ``radius = "proposition-2"``:
beta_{i,t} = sigma sqrt(2 log(2/alpha) + log det V_{i,t} - d log(M rho_min)) + S sqrt(M rho_max) + kappa sqrt(M).
Both versions of the paper print "d log det(V)" and "d log(M rho_min)"; the first d is a typo
(it would make beta grow like d^2 log, against Abbasi-Yadkori et al. / Shariff & Sheffet, whose
term is log(det V / det(M rho_min I))), so we use log det V - d log(M rho_min).  ``"constant"``
and ``"theory"`` (Zhou & Chowdhury's Lemma C.4) are available as for every LinUCB learner.

``threshold = "theorem-1"``: D = 2 T d / (log(rho_max/rho_min + T L^2 / (d rho_min)) + 1)
(Theorem 1, which by Proposition 1 gives O(M log T) communication without privacy noise).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from fedbandits.algorithms.base import (
    CLIPPING_COUNTS,
    ClipCounts,
    Explores,
    ExploringLinUCBParams,
    MergeRule,
    Policy,
    PolicyContext,
    policy_entry,
)
from fedbandits.core.exploration import Explorer
from fedbandits.core.ridge import RidgeState, spd_inverse
from fedbandits.core.ucb import ConfidenceRadius, UCBScorer
from fedbandits.core.validation import check_choice, check_float
from fedbandits.privacy.accounting import gaussian_epsilon, tight_noise_multiplier
from fedbandits.privacy.calibration import MAX_EPSILON
from fedbandits.privacy.guarantee import NOT_FORMAL, STEERING
from fedbandits.privacy.privatizer import (
    TreePrivatizer,
    message_mu,
    paper_depth,
    paper_kappa,
    paper_shift,
    paper_sigma,
    sigma_shift,
)
from fedbandits.privacy.sensitivity import ADJACENCIES, stream_sensitivity
from fedbandits.privacy.tree import max_nodes_per_datum
from fedbandits.protocols.base import FLOAT_BYTES, symmetric_payload_floats

RULES = ("restated", "original")
SCHEDULES = ("adaptive", "private")
FEDUCB_RADII = ("proposition-2", "theory", "constant")
FEDUCB_CALIBRATIONS = ("paper", "tight")
SIGNAL_BYTES = 1
#: why the adaptive schedule has no guarantee (measured by ``fedbandits audit schedule``)
ADAPTIVE_SCHEDULE_LEAK = "the adaptive sync schedule reads non-private data (Zhou & Chowdhury 2023, sec. 3)"


@dataclass(frozen=True)
class FedUCBParams(ExploringLinUCBParams):
    radius: str = field(default="proposition-2", metadata={"help": "'proposition-2', 'theory' or 'constant'"})
    threshold: float | str = field(
        default="theorem-1", metadata={"help": "sync threshold D > 0, or 'theorem-1' (D of Theorem 1)"}
    )
    rule: str = field(default="restated", metadata={"help": "'restated' (Zhou & Chowdhury Alg. 3) or 'original'"})
    schedule: str = field(
        default="adaptive", metadata={"help": "'adaptive' (trigger on raw data: leaks) or 'private' (App. D.2)"}
    )
    private: bool = field(default=True, metadata={"help": "privatize the synced statistics (Algorithm 2)"})
    epsilon: float = field(default=1.0, metadata={"help": "privacy budget epsilon > 0"})
    delta: float = field(default=0.1, metadata={"help": "privacy budget delta in (0, 1)"})
    calibration: str = field(
        default="paper", metadata={"help": "'paper' (sigma_N of Alg. 2) or 'tight' (exact Gaussian-DP)"}
    )
    feature_bound: float = field(default=1.0, metadata={"help": "L: features clipped to ||x|| <= L (private)"})
    reward_bound: float = field(default=1.0, metadata={"help": "B: rewards clipped to [-B, B] (private)"})
    theta_bound: float = field(default=1.0, metadata={"help": "S >= ||theta*|| in the radius of Proposition 2"})
    adjacency: str = field(default="replace", metadata={"help": "'replace' one user or 'add-remove' (accounting)"})
    schedule_share: float = field(
        default=0.5, metadata={"help": "share of the privacy budget (in mu^2) spent on a private schedule, (0, 1)"}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.threshold, str):
            if self.threshold != "theorem-1":
                raise ValueError(f"threshold must be a number > 0 or 'theorem-1', got {self.threshold!r}")
        else:
            check_float("threshold", self.threshold, low=0.0, low_open=True)
        check_choice("rule", self.rule, RULES)
        check_choice("schedule", self.schedule, SCHEDULES)
        if not isinstance(self.private, bool):
            raise ValueError(f"private must be true or false, got {self.private!r}")
        check_float("epsilon", self.epsilon, low=0.0, high=MAX_EPSILON, low_open=True)
        check_float("delta", self.delta, low=0.0, high=1.0, low_open=True, high_open=True)
        check_choice("calibration", self.calibration, FEDUCB_CALIBRATIONS)
        check_float("feature_bound", self.feature_bound, low=0.0, low_open=True)
        check_float("reward_bound", self.reward_bound, low=0.0, low_open=True)
        check_float("theta_bound", self.theta_bound, low=0.0)
        check_choice("adjacency", self.adjacency, ADJACENCIES)
        check_float("schedule_share", self.schedule_share, low=0.0, high=1.0, low_open=True, high_open=True)
        if self.schedule == "private":
            if not self.private:
                raise ValueError("schedule = 'private' needs private = true (it privatizes the trigger's input)")
            if self.calibration != "tight":
                raise ValueError(
                    "schedule = 'private' needs calibration = 'tight': the budget is split between the schedule "
                    "and the messages, which the paper's sigma_N cannot express"
                )

    def confidence_radius(self) -> ConfidenceRadius:
        kind = "constant" if self.radius in ("constant", "proposition-2") else self.radius
        check_choice("radius", self.radius, FEDUCB_RADII)
        scale = self.constant_beta if kind == "constant" else self.beta_scale
        return ConfidenceRadius(kind=kind, scale=scale, alpha=self.alpha, noise_scale=self.noise_scale)


def theorem1_threshold(horizon: int, dim: int, rho_min: float, rho_max: float, feature_bound: float = 1.0) -> float:
    """D = 2 T d (log(rho_max/rho_min + T L^2 / (d rho_min)) + 1)^{-1} (Theorem 1)."""
    log_term = math.log(rho_max / rho_min + horizon * feature_bound**2 / (dim * rho_min))
    return 2.0 * horizon * dim / (log_term + 1.0)


def proposition1_bound(
    horizon: int, dim: int, threshold: float, rho_min: float, rho_max: float, feature_bound: float = 1.0
) -> float:
    """Proposition 1: n <= 2 sqrt((d T / D) log(rho_max/rho_min + T L^2 / (d rho_min))) + 4 sync rounds."""
    log_term = math.log(rho_max / rho_min + horizon * feature_bound**2 / (dim * rho_min))
    return 2.0 * math.sqrt(dim * horizon / threshold * log_term) + 4.0


@dataclass(frozen=True)
class FedUCBNoise:
    """The privacy calibration of one FedUCB configuration (all std's per N-hat entry)."""

    depth: int  # paper's m
    nodes: int  # exact nodes per datum in the message tree (floor(log2 T) + 1)
    sigma: float  # message-tree node std
    shift: float  # Lambda
    kappa: float
    schedule_sigma: float  # schedule-tree node std (0 unless schedule = 'private')
    schedule_nodes: int
    epsilon_messages: float  # exact epsilon (at delta) of one agent's messages alone
    epsilon_spent: float  # exact epsilon (at delta) of everything the agent releases, or inf
    guarantee: str  # privacy.guarantee label: never "formal" (agents act on unreleased local data)
    guarantee_reason: str

    def report(self) -> dict[str, object]:
        return {
            "privacy_depth_m": self.depth,
            "privacy_nodes": self.nodes,
            "noise_std": self.sigma,
            "privacy_shift_lambda": self.shift,
            "privacy_kappa": self.kappa,
            "schedule_noise_std": self.schedule_sigma,
            "epsilon_messages": self.epsilon_messages,
            "epsilon_spent": self.epsilon_spent,
            "guarantee": self.guarantee,
            "guarantee_reason": self.guarantee_reason,
        }


#: merge rules of :meth:`FedUCBNoise.report`: the calibration is a function of the config alone
NOISE_REPORT_MERGE: dict[str, MergeRule] = {
    "privacy_depth_m": "same",
    "privacy_nodes": "same",
    "noise_std": "same",
    "privacy_shift_lambda": "same",
    "privacy_kappa": "same",
    "schedule_noise_std": "same",
    "epsilon_messages": "same",
    "epsilon_spent": "same",
    "guarantee": "same",
    "guarantee_reason": "same",
}


def calibrate_feducb(
    params: FedUCBParams,
    *,
    horizon: int,
    agents: int,
    dim: int,
    releases: int | None = None,
    syncs: int | None = None,
) -> FedUCBNoise:
    """Noise of the message tree (and of the schedule tree for ``schedule = 'private'``).

    Every round may sync, so a stream makes at most T releases: the paper's depth is
    m = 1 + ceil(log2 T) and the exact node count floor(log2 T) + 1.

    ``releases`` (default T): the most releases one stream makes (sets m and the node count);
    ``syncs`` (default T): the n of the union bound in Lambda and kappa (log(2 n M / alpha)).
    The decentralized algorithm passes ceil(T/gamma) and gamma ceil(T/gamma) (Remark 5).
    """
    sens = stream_sensitivity(params.feature_bound, params.reward_bound, params.adjacency)
    releases = horizon if releases is None else releases
    syncs = horizon if syncs is None else syncs
    depth = paper_depth(releases)
    nodes = max_nodes_per_datum(releases)
    if params.calibration == "paper":
        sigma = paper_sigma(params.epsilon, params.delta, depth, params.feature_bound)
        shift = paper_shift(params.epsilon, params.delta, depth, dim, syncs, agents, params.alpha, params.feature_bound)
        mu_msg = message_mu(sigma, nodes, sens)
        eps_msg = gaussian_epsilon(mu_msg, params.delta)
        return FedUCBNoise(
            depth=depth,
            nodes=nodes,
            sigma=sigma,
            shift=shift,
            kappa=paper_kappa(params.epsilon, depth, dim, syncs, agents, params.alpha, params.feature_bound),
            schedule_sigma=0.0,
            schedule_nodes=0,
            epsilon_messages=eps_msg,
            epsilon_spent=math.inf,
            guarantee=NOT_FORMAL,
            guarantee_reason=f"{ADAPTIVE_SCHEDULE_LEAK}; {STEERING}",
        )
    # tight: the whole budget as one Gaussian-DP mu, split (in mu^2) between schedule and messages
    mu_total = 1.0 / tight_noise_multiplier(params.epsilon, params.delta, 1)
    share = params.schedule_share if params.schedule == "private" else 0.0
    mu_msg = mu_total * math.sqrt(1.0 - share)
    per_node = math.sqrt((sens.cov**2 / 2.0 + sens.bias**2) * nodes)  # message_mu(sigma=1)
    sigma = per_node / mu_msg
    schedule_sigma, schedule_nodes = 0.0, 0
    if share > 0.0:
        schedule_nodes = nodes  # one release per round: T releases, same tree shape
        mu_sched = mu_total * math.sqrt(share)
        # the schedule tree releases only the d x d Gram block: loss ||dW||_F^2 / (2 sigma^2) per node
        schedule_sigma = math.sqrt(sens.cov**2 / 2.0 * schedule_nodes) / mu_sched
    eps_msg = gaussian_epsilon(message_mu(sigma, nodes, sens), params.delta)
    spent_mu = math.hypot(message_mu(sigma, nodes, sens), _schedule_mu(schedule_sigma, schedule_nodes, sens.cov))
    private_schedule = params.schedule == "private"
    return FedUCBNoise(
        depth=depth,
        nodes=nodes,
        sigma=sigma,
        shift=sigma_shift(sigma, nodes, dim, syncs, agents, params.alpha),
        kappa=paper_kappa(params.epsilon, depth, dim, syncs, agents, params.alpha, params.feature_bound),
        schedule_sigma=schedule_sigma,
        schedule_nodes=schedule_nodes,
        epsilon_messages=eps_msg,
        epsilon_spent=gaussian_epsilon(spent_mu, params.delta) if private_schedule else math.inf,
        guarantee=NOT_FORMAL,
        guarantee_reason=(
            f"{STEERING}; the releases alone (messages and the private schedule) are silo-level (epsilon, delta)-DP "
            "against non-adaptive neighbours (exact Gaussian composition); no proven regret bound (App. D.2)"
            if private_schedule
            else f"{ADAPTIVE_SCHEDULE_LEAK}; {STEERING}"
        ),
    )


def proposition2_radius(
    params: FedUCBParams,
    logdet: np.ndarray,
    dim: int,
    agents: float | np.ndarray,
    rho_min: float,
    rho_max: float,
    kappa: float,
) -> np.ndarray:
    """beta of Proposition 2 (see the module docstring), times ``beta_scale``, for every ``logdet``.

    ``agents``: the M of the formula (a scalar, or an array broadcasting against ``logdet``).
    """
    log_floor: float | np.ndarray
    if isinstance(agents, np.ndarray):
        log_floor = np.log(agents.astype(np.float64) * rho_min)
    else:
        log_floor = math.log(agents * rho_min)  # math.log: bit-identical to the scalar formula
    inner = 2.0 * math.log(2.0 / params.alpha) + logdet - dim * log_floor
    beta = (
        params.noise_scale * np.sqrt(np.maximum(inner, 0.0))
        + params.theta_bound * np.sqrt(agents * rho_max)
        + kappa * np.sqrt(agents)
    )
    return params.beta_scale * beta


def _schedule_mu(sigma: float, nodes: int, cov_sensitivity: float) -> float:
    if nodes == 0:
        return 0.0
    return math.sqrt(nodes * cov_sensitivity**2 / 2.0) / sigma


class FedUCB(Policy, ClipCounts, Explores):
    """Centralized FedUCB for R runs x M agents (see the module docstring)."""

    name = "feducb"
    description = "FedUCB with a controller: adaptive log-det sync + tree Privatizer (Dubey & Pentland Alg. 1-2)"
    report_merge: ClassVar[Mapping[str, MergeRule]] = {
        "rule": "same",
        "schedule": "same",
        "threshold_D": "same",
        "rho_min": "same",
        "rho_max": "same",
        "sync_signals": "sum",
        "protocol": "same",
        "calibration": "same",
        "epsilon": "same",
        "delta": "same",
        **NOISE_REPORT_MERGE,
        **CLIPPING_COUNTS,
    }

    def __init__(
        self,
        n_runs: int,
        n_agents: int,
        n_arms: int,
        dim: int,
        horizon: int,
        params: FedUCBParams,
        noise_rngs: list[np.random.Generator] | None = None,
        choice_rngs: Sequence[np.random.Generator] | None = None,
    ) -> None:
        super().__init__(n_runs, n_agents, n_arms, dim, horizon)
        self.explorer = Explorer(params, n_runs, n_agents, choice_rngs)
        self.params = params
        self.reward_offset = params.reward_offset
        self.private = params.private
        M = n_agents
        if self.private:
            if noise_rngs is None:
                raise ValueError("a private FedUCB needs one noise Generator per run")
            self.noise = calibrate_feducb(params, horizon=horizon, agents=M, dim=dim)
            self.rho_min, self.rho_max = self.noise.shift, 3.0 * self.noise.shift
            self.per_agent_shift = 2.0 * self.noise.shift
            self.kappa = self.noise.kappa
            msg_rngs = [rng.spawn(1)[0] for rng in noise_rngs]
            sched_rngs = [rng.spawn(1)[0] for rng in noise_rngs]
            self.privatizer: TreePrivatizer | None = TreePrivatizer(n_runs, M, dim, self.noise.sigma, msg_rngs, horizon)
            self.schedule_tree: TreePrivatizer | None = (
                TreePrivatizer(n_runs, M, dim, self.noise.schedule_sigma, sched_rngs, horizon)
                if params.schedule == "private"
                else None
            )
        else:
            self.noise = None  # type: ignore[assignment]
            self.rho_min = self.rho_max = params.reg
            self.per_agent_shift = params.reg
            self.kappa = 0.0
            self.privatizer = None
            self.schedule_tree = None
        if isinstance(params.threshold, str):
            self.threshold = theorem1_threshold(horizon, dim, self.rho_min, self.rho_max, params.feature_bound)
        else:
            self.threshold = float(params.threshold)
        self.radius = params.confidence_radius()
        s0 = M * self.rho_min
        self.state = RidgeState((n_runs, M), dim, s0)  # V = S + U, S_1 = M rho_min I (line 1)
        self.scorer = UCBScorer(n_runs * M, n_arms, dim)
        self.synced_cov = np.broadcast_to(s0 * np.eye(dim), (n_runs, dim, dim)).copy()  # S
        self.synced_bias = np.zeros((n_runs, dim))  # s
        self.local_q = np.zeros((n_runs, M, dim + 1, dim + 1))  # Q-hat since the last sync
        self.logdet_agent = np.full((n_runs, M), dim * math.log(s0))  # log det V_{i,t}
        self.logdet_synced = np.full(n_runs, dim * math.log(s0))  # log det S (= V_last)
        self.t_last = np.zeros(n_runs, dtype=np.int64)
        self.signals = np.zeros(n_runs, dtype=np.int64)
        self.init_clipping()
        self._sched_last = np.zeros((n_runs, M, dim, dim)) if self.schedule_tree is not None else None
        self._sched_prefix = np.zeros((n_runs, M, dim, dim)) if self.schedule_tree is not None else None
        self._last_x = np.zeros((n_runs, M, dim))
        payload = symmetric_payload_floats(dim) * FLOAT_BYTES
        self._sync_bytes = 2 * M * payload

    # -- acting -----------------------------------------------------------------------------
    def confidence(self) -> np.ndarray:
        """beta_{i,t} per (run, agent), shape (R*M,) or a scalar."""
        M = self.n_agents
        if self.params.radius == "proposition-2":
            beta = proposition2_radius(
                self.params, self.logdet_agent, self.dim, M, self.rho_min, self.rho_max, self.kappa
            )
            return beta.reshape(-1)
        return np.asarray(self.radius(float(M * self.t), self.dim, self.params.reg))

    def _select(self, features: np.ndarray) -> np.ndarray:
        n = self.n_runs * self.n_agents
        flat = features.reshape(n, self.n_arms, self.dim)
        inv = self.state.inv.reshape(n, self.dim, self.dim)
        theta = self.state.theta().reshape(n, self.dim)
        return self.explorer.choose(self.scorer, flat, inv, theta, self.confidence())

    def _observe(self, x: np.ndarray, y: np.ndarray) -> None:
        if self.private:
            x, y = self.clip(x, y, self.params.feature_bound, self.params.reward_bound)
        # log det(V + x x^T) = log det V + log(1 + x^T V^{-1} x) (matrix determinant lemma)
        quad = np.einsum("...i,...ij,...j->...", x, self.state.inv, x)
        self.logdet_agent += np.log1p(quad)
        self.state._update_unchecked(x, y)
        z = np.concatenate([x, y[..., None]], axis=-1)
        self.local_q += z[..., :, None] * z[..., None, :]
        self._last_x = x

    def end_round(self) -> None:
        super().end_round()
        fire = self.trigger()  # (R, M)
        runs = fire.any(axis=1)
        assert isinstance(runs, np.ndarray)  # fire is 2-D, so this is (R,), never a numpy scalar
        if runs.any():
            self.signals += fire.sum(axis=1)
            self.sync(runs)

    # -- the schedule -----------------------------------------------------------------------
    def trigger(self) -> np.ndarray:
        """Which agents request a sync after this round's observation, (R, M) bool."""
        elapsed = (self.t - self.t_last)[:, None].astype(np.float64)  # >= 1
        base = self.logdet_synced[:, None]
        if self.schedule_tree is not None:
            assert self._sched_last is not None  # allocated together with schedule_tree
            # App. D.2: log det(V_last + noisy local Gram since t_last) - log det(V_last) > D / (t - t_last)
            q = np.zeros((self.n_runs, self.n_agents, self.dim + 1, self.dim + 1))
            q[..., : self.dim, : self.dim] = self._last_x[..., :, None] * self._last_x[..., None, :]
            prefix = self.schedule_tree.release(np.ones((self.n_runs, self.n_agents), dtype=bool), q)
            self._sched_prefix = prefix[..., : self.dim, : self.dim]
            noisy_local = self._sched_prefix - self._sched_last
            sign, logdet = np.linalg.slogdet(self.synced_cov[:, None] + noisy_local)
            ratio = np.where(sign > 0, logdet - base, -np.inf)  # an indefinite noisy matrix never fires
            return ratio * elapsed > self.threshold
        if self.params.rule == "restated":
            return (self.logdet_agent - base) * elapsed > self.threshold
        extra = self.n_agents * (self.rho_max - self.rho_min)
        if extra == 0.0:
            logdet = self.logdet_agent
        else:
            gram = self.state.gram + extra * np.eye(self.dim)
            logdet = 2.0 * np.log(np.diagonal(np.linalg.cholesky(gram), axis1=-2, axis2=-1)).sum(axis=-1)
        return (logdet - base) * elapsed >= self.threshold

    def sync(self, runs: np.ndarray) -> None:
        """Lines 15-21 for the runs in the boolean mask ``runs``: all their agents synchronise."""
        idx = np.flatnonzero(runs)
        M, d = self.n_agents, self.dim
        if self.privatizer is not None:
            mask = np.zeros((self.n_runs, M), dtype=bool)
            mask[idx] = True
            released = self.privatizer.release(mask, self.local_q)[idx]  # noisy prefixes (r, M, d+1, d+1)
            cov = released[..., :d, :d].sum(axis=1)
            bias = released[..., :d, d].sum(axis=1)
        else:
            cov = self.synced_cov[idx] - M * self.rho_min * np.eye(d) + self.local_q[idx, :, :d, :d].sum(axis=1)
            bias = self.synced_bias[idx] + self.local_q[idx, :, :d, d].sum(axis=1)
        gram = cov + M * self.per_agent_shift * np.eye(d)  # sum_i (U-hat_i + shift I)
        gram = 0.5 * (gram + np.swapaxes(gram, -1, -2))
        gram = self.repair(gram, 0.1 * self.n_agents * self.rho_min)  # a noisy S beyond Lambda (prob. <= alpha)
        inv = spd_inverse(gram)
        self.synced_cov[idx] = gram
        self.synced_bias[idx] = bias
        self.state.gram[idx] = gram[:, None]
        self.state.inv[idx] = inv[:, None]
        self.state.bias[idx] = bias[:, None]
        logdet = 2.0 * np.log(np.diagonal(np.linalg.cholesky(gram), axis1=-2, axis2=-1)).sum(axis=-1)
        self.logdet_synced[idx] = logdet
        self.logdet_agent[idx] = logdet[:, None]
        self.local_q[idx] = 0.0
        self.t_last[idx] = self.t
        if self._sched_last is not None and self._sched_prefix is not None:
            self._sched_last[idx] = self._sched_prefix[idx]
        self.sync_rounds[idx] += 1
        self.messages[idx] += 2 * M
        self.bytes_sent[idx] += self._sync_bytes  # sync requests are counted in ``signals``

    def report(self) -> dict[str, object]:
        out: dict[str, object] = {
            "rule": self.params.rule,
            "schedule": self.params.schedule,
            "threshold_D": self.threshold,
            "rho_min": self.rho_min,
            "rho_max": self.rho_max,
            "sync_signals": int(self.signals.sum()),
        }
        if self.private:
            out.update(
                {
                    "protocol": "feducb-privatizer",
                    "calibration": self.params.calibration,
                    "epsilon": self.params.epsilon,
                    "delta": self.params.delta,
                    **self.noise.report(),
                    **self.clipping_report(),
                }
            )
        else:
            out.update({"protocol": "none"})
        return out


def _build(params: FedUCBParams, ctx: PolicyContext) -> Policy:
    return FedUCB(
        ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, params, list(ctx.noise_rngs), ctx.choice_rngs
    )


#: the registry's entry (fedbandits' pyproject.toml names it)
ENTRY = policy_entry(FedUCB, FedUCBParams, _build)
