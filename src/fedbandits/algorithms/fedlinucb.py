"""FedLinUCB with a fixed batch schedule: Algorithm 1 of Zhou & Chowdhury (2023), private or not."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from fedbandits.algorithms.base import (
    CLIPPING_COUNTS,
    ClipCounts,
    ExploringLinUCBParams,
    MergeRule,
    Policy,
    PolicyContext,
    policy_entry,
)
from fedbandits.algorithms.linucb import IndependentLinUCB
from fedbandits.core.validation import check_choice, check_float, check_int
from fedbandits.envs.base import Environment, Round
from fedbandits.plugins import PROTOCOLS
from fedbandits.privacy.accounting import vector_sum_round_budget
from fedbandits.privacy.calibration import MAX_EPSILON, NoiseCalibration, PrivacySpec
from fedbandits.privacy.distributed_noise import DistributedCalibration
from fedbandits.privacy.guarantee import not_covering_adaptivity
from fedbandits.privacy.streaming import DEFAULT_BUFFERS
from fedbandits.privacy.tree import max_nodes_per_datum
from fedbandits.protocols.base import Protocol
from fedbandits.protocols.vector_sum_tree import VectorSumCalibration

REGULARIZERS = ("auto", "fixed", "theory", "noise")
UNITS = ("interaction", "user")
#: the constant radius of ``radius = "auto"`` with a private protocol (with lambda = 2 Lambda): chosen
#: once by benchmarks/noise_tuning.py on seed 1000, which no report uses (docs/frontier.md)
NOISE_AWARE_BETA = 10.0
DISTRIBUTED = "distributed-dp"


@dataclass(frozen=True)
class FedLinUCBParams(ExploringLinUCBParams):
    batch: int = field(default=25, metadata={"help": "rounds between synchronisations B >= 1"})
    protocol: str = field(
        default="none", metadata={"help": "synchronisation protocol (see the protocol list; plugins add more)"}
    )
    epsilon: float = field(default=1.0, metadata={"help": "privacy budget epsilon > 0 (private protocols)"})
    delta: float = field(default=1e-4, metadata={"help": "privacy budget delta in (0, 1) (private protocols)"})
    calibration: str = field(
        default="tight",
        metadata={
            "help": "'paper' closed form, 'tight' accountant, or 'code': the paper's public code's noise "
            "(ldp, ldp-prefix, sdp-amplification, sdp-vector-sum only)"
        },
    )
    feature_bound: float = field(default=1.0, metadata={"help": "L: features clipped to ||x|| <= L (private)"})
    reward_bound: float = field(default=1.0, metadata={"help": "B: rewards clipped to [-B, B] (private)"})
    adjacency: str = field(default="replace", metadata={"help": "'replace' one user (paper) or 'add-remove'"})
    lazy: bool | None = field(
        default=None,
        metadata={
            "help": "act on released statistics only (Algorithm 8); default: true for private protocols (the "
            "guarantee then holds against adaptive neighbours), false for 'none'"
        },
    )
    regularizer: str = field(
        default="auto",
        metadata={
            "help": "'fixed' (reg), 'theory' (lambda of Lemma C.4 from the noise) or 'noise' (2 x the operator-norm "
            "bound of the synced noise: a PSD shift); default 'auto': 'noise' for private protocols, 'fixed' for "
            "'none'"
        },
    )
    radius: str = field(
        default="auto",
        metadata={
            "help": "'theory' (Lemma C.4 x beta_scale) or 'constant' (beta); default 'auto': constant "
            f"beta (default {NOISE_AWARE_BETA:g}) for private protocols (noise-aware, with regularizer 'noise'), "
            "'constant' (beta, default 1) for 'none'"
        },
    )
    mechanism: str = field(
        default="tree",
        metadata={
            "help": "ldp/ldp-prefix/distributed-dp: 'tree' (noisy p-sums, the papers') or 'factorized' (square-root "
            "factorization of the prefix-sum matrix: less noise for the same guarantee); ldp/ldp-prefix: 'blt' "
            "(streaming factorization: a few buffers of state, a guarantee with no planned horizon); "
            "ldp/ldp-prefix/distributed-dp: 'banded' (the square root banded: the last `band` batches of state, "
            "a guarantee with no planned horizon)"
        },
    )
    buffers: int = field(
        default=DEFAULT_BUFFERS,
        metadata={"help": "mechanism 'blt': the streaming strategy's buffers (state per silo), 1..12"},
    )
    band: int = field(
        default=0,
        metadata={
            "help": "mechanism 'banded': the batches one batch's noise spans (state per silo: band x P floats), "
            "1..65536; 0: the planned releases horizon // batch, at most 4096"
        },
    )
    bias_noise_ratio: float = field(
        default=1.0,
        metadata={
            "help": "ldp/ldp-prefix/distributed-dp (tight): the bias stream's noise multiplier over the covariance "
            "stream's at the same guarantee, 0.01..100 (1: even; > 1 moves noise from the covariance to the bias)"
        },
    )
    colluders: int = field(
        default=0,
        metadata={"help": "distributed-dp: silos that may share their noise with the server (noise provisioned)"},
    )
    dropouts: int = field(
        default=0, metadata={"help": "distributed-dp: silos that may miss a round (noise over-provisioned)"}
    )
    modulus_bits: int | None = field(
        default=None,
        metadata={
            "help": "distributed-dp: messages are integers modulo 2^bits, <= 64; default: the fewest that "
            "cannot overflow"
        },
    )
    granularity: float | None = field(
        default=None,
        metadata={
            "help": "distributed-dp: grid step of covariance entries > 0; default: sensitivity / 2^k with "
            "2^k >= 1000 sqrt(P)"
        },
    )

    privacy_unit: str = field(
        default="interaction",
        metadata={
            "help": "'interaction' (the papers': a returning user is protected once per visit) or 'user' (one "
            "user's whole history, up to max_contributions; needs user ids from the environment)"
        },
    )
    max_contributions: int = field(
        default=1,
        metadata={
            "help": "privacy_unit = 'user': a user's contributions kept per budget epoch (the run), m >= 1; "
            "later ones are dropped and counted"
        },
    )

    def __post_init__(self) -> None:
        if not isinstance(self.protocol, str) or self.protocol not in PROTOCOLS:
            raise ValueError(PROTOCOLS.unknown(self.protocol, "protocol"))
        self._resolve_tuning()
        super().__post_init__()
        check_int("batch", self.batch, low=1)
        if self.lazy is None:  # the sound default, resolved here so the saved config states it
            object.__setattr__(self, "lazy", self.private)
        if not isinstance(self.lazy, bool):
            raise ValueError(f"lazy must be true or false, got {self.lazy!r}")
        check_choice("regularizer", self.regularizer, REGULARIZERS)
        self._check_unit()
        self._check_distributed()
        if self.mechanism != "tree" and not self.private:
            raise ValueError(
                f"mechanism {self.mechanism!r} applies to private protocols only, got protocol {self.protocol!r}"
            )
        if self.private:
            self.privacy_spec()  # validates epsilon, delta, calibration, bounds, adjacency
        else:
            # still reject nonsense so a later switch of protocol cannot surprise
            check_float("epsilon", self.epsilon, low=0.0, high=MAX_EPSILON, low_open=True)
            check_float("delta", self.delta, low=0.0, high=1.0, low_open=True, high_open=True)

    def _resolve_tuning(self) -> None:
        """``auto`` regularizer and radius: the noise-aware tuning for a private protocol (lambda = 2 Lambda,
        constant radius NOISE_AWARE_BETA unless the config gives beta), lambda = reg and the constant radius
        beta (default 1, as every LinUCB's) for 'none'.  Resolved here, so the saved config states what ran;
        the papers' choices (``regularizer = "fixed"``, ``radius = "theory"``) stay available by name.  A beta
        the config gives is never replaced."""
        if self.regularizer == "auto":
            object.__setattr__(self, "regularizer", "noise" if self.private else "fixed")
        if self.radius == "auto":
            object.__setattr__(self, "radius", "constant")
            if self.private and self.beta is None:
                object.__setattr__(self, "beta", NOISE_AWARE_BETA)

    def _check_unit(self) -> None:
        check_choice("privacy_unit", self.privacy_unit, UNITS)
        check_int("max_contributions", self.max_contributions, low=1)
        if self.privacy_unit == "user" and not self.private:
            raise ValueError(f"privacy_unit 'user' applies to private protocols, got protocol {self.protocol!r}")
        if self.privacy_unit == "interaction" and self.max_contributions != 1:
            raise ValueError(
                f"max_contributions applies to privacy_unit 'user' only, got {self.max_contributions} with "
                "privacy_unit 'interaction'"
            )

    @property
    def contributions(self) -> int:
        """m of the unit of privacy: 1 for an interaction, ``max_contributions`` for a user."""
        return self.max_contributions if self.privacy_unit == "user" else 1

    def _check_distributed(self) -> None:
        """The distributed-dp parameters: in range, and set only with that protocol (which is lazy)."""
        check_int("colluders", self.colluders, low=0)
        check_int("dropouts", self.dropouts, low=0)
        if self.modulus_bits is not None:
            check_int("modulus_bits", self.modulus_bits, low=2, high=64)
        if self.granularity is not None:
            check_float("granularity", self.granularity, low=0.0, low_open=True)
        if self.protocol == DISTRIBUTED:
            if not self.lazy:
                raise ValueError(
                    "lazy must be true for protocol 'distributed-dp' (agents act on aggregated statistics only), "
                    "got false"
                )
            return
        for name in ("colluders", "dropouts", "modulus_bits", "granularity"):
            if getattr(self, name) not in (None, 0):
                raise ValueError(f"{name} applies to protocol 'distributed-dp' only, got protocol {self.protocol!r}")

    @property
    def private(self) -> bool:
        return PROTOCOLS[self.protocol].private

    def privacy_spec(self) -> PrivacySpec:
        return PrivacySpec(
            protocol=self.protocol,
            epsilon=self.epsilon,
            delta=self.delta,
            calibration=self.calibration,
            feature_bound=self.feature_bound,
            reward_bound=self.reward_bound,
            adjacency=self.adjacency,
            mechanism=self.mechanism,
            contributions=self.contributions,
            buffers=self.buffers,
            band=self.band,
            bias_noise_ratio=self.bias_noise_ratio,
        )

    def check_compatible(self, horizon: int, agents: int, dim: int | None) -> None:
        """Checks that need the experiment: B <= T, and the privacy request can be met.

        ``dim`` is None when the environment learns its dimension from data; the checks that
        need it (the vector-sum parameters) then run when the environment is built.
        """
        if self.batch > horizon:
            raise ValueError(f"batch must be an integer in [1, horizon = {horizon}], got {self.batch}")
        if not self.private:
            return
        if self.protocol == DISTRIBUTED and self.colluders + self.dropouts > agents - 1:
            raise ValueError(
                f"colluders + dropouts must be <= agents - 1 = {agents - 1} (one honest silo's noise must arrive), "
                f"got {self.colluders} + {self.dropouts}"
            )
        if dim is None and self.protocol == "sdp-vector-sum":
            vector_sum_round_budget(self.epsilon, self.delta, max_nodes_per_datum(horizon // self.batch))
            return
        cal = calibrate_protocol(self, horizon=horizon, agents=agents, dim=dim or 1)
        if self.regularizer != "fixed":
            check_noise_level(self, cal)


class FedLinUCB(IndependentLinUCB, ClipCounts):
    """Private-FedLinUCB (Algorithm 1) with a pluggable protocol P = (R, S, A).

    Agent i acts with V_{t,i} = lambda I + W_syn + W_i and theta = V^{-1}(U_syn + U_i) (line 5),
    accumulates its batch statistics W_i, U_i (line 7), and every B rounds (a fixed,
    data-independent schedule, line 9) hands them to the protocol, receives the synchronised
    (W_syn, U_syn) and resets W_i, U_i (lines 10-17).  With the ``none`` protocol this is the
    non-private FedLinUCB baseline.  The radius uses n = M t samples (Lemma C.4).

    With a private protocol every feature is clipped to ||x|| <= L and every reward to [-B, B]
    *before* it enters W_i, U_i (the released statistics) and the agent's own state; the clipped
    counts are reported.  The noisy synced Gram matrix may be indefinite: lambda I + W_syn is then
    repaired by raising its eigenvalues to at least lambda/10 (post-processing; counted).
    ``lazy`` is Algorithm 8: agents act on lambda I + W_syn only, never on unreleased local data.
    It is the default for private protocols: with ``lazy = false`` (the paper's Algorithm 1) a
    silo's first user steers its later users' actions and so the released batch sums, and the
    report's ``guarantee`` is withdrawn (:mod:`fedbandits.privacy.guarantee`).
    """

    name = "fedlinucb"
    description = "federated LinUCB, sync every `batch` rounds through a protocol (Zhou & Chowdhury Alg. 1)"
    #: the protocol's privacy report (calibration, epsilon_spent, guarantee, noise, privacy_*) is a
    #: function of the config alone: no rule, so it must agree in every task
    report_merge: ClassVar[Mapping[str, MergeRule]] = {
        "batch": "same",
        "reg": "same",
        "protocol": "same",
        "lazy": "same",
        "max_user_visits": "max",
        "dropped_contributions": "sum",
        **CLIPPING_COUNTS,
    }

    def __init__(
        self,
        n_runs: int,
        n_agents: int,
        n_arms: int,
        dim: int,
        horizon: int,
        params: FedLinUCBParams,
        protocol: Protocol,
        reg: float | None = None,
        n_users: int = 0,
        choice_rngs: Sequence[np.random.Generator] | None = None,
    ) -> None:
        self.reg_value = params.reg if reg is None else reg
        super().__init__(n_runs, n_agents, n_arms, dim, horizon, _with_reg(params, self.reg_value), choice_rngs)
        self.batch = params.batch
        self.protocol = protocol
        self.private = params.private
        self.lazy = params.lazy
        self.feature_bound = params.feature_bound
        self.reward_bound = params.reward_bound
        self.local_cov = np.zeros((n_runs, n_agents, dim, dim))  # W_i  (R, M, d, d)
        self.local_bias = np.zeros((n_runs, n_agents, dim))  # U_i  (R, M, d)
        self.synced_cov = np.zeros((n_runs, dim, dim))  # W_syn (R, d, d)
        self.synced_bias = np.zeros((n_runs, dim))  # U_syn (R, d)
        self._needs_points = getattr(protocol, "needs_points", False)
        self.init_clipping()
        self.last_sync_t = 0
        # the unit of privacy: with user ids (an environment with returning users), every user's
        # contributions are counted; privacy_unit = "user" drops those beyond max_contributions
        self.privacy_unit = params.privacy_unit
        self.cap = params.contributions
        if self.privacy_unit == "user" and n_users < 1:
            raise ValueError(
                "privacy_unit 'user' needs an environment whose rounds carry user ids (e.g. gaussian-sphere with "
                "returning_users > 0)"
            )
        self.user_counts = np.zeros((n_runs, n_agents, n_users), dtype=np.int64) if n_users else None
        self._users: np.ndarray | None = None
        self.dropped_contributions = 0

    def radius_samples(self) -> int:
        """Lemma C.4 uses n = M t: the samples of all agents up to round t (up to the last sync if lazy)."""
        return self.n_agents * (self.last_sync_t if self.lazy else self.t)

    def step(self, rnd: Round, env: Environment) -> np.ndarray:
        self._users = rnd.users
        return super().step(rnd, env)

    def _bound_contributions(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Count this round's users' visits; with privacy_unit = "user" a contribution beyond the cap m is
        dropped (zero x and y: nothing of it enters W_i, U_i or the agent's state) and counted."""
        if self.user_counts is None or self._users is None:
            if self.privacy_unit == "user":
                raise ValueError("privacy_unit 'user': this round carries no user ids")
            return x, y
        runs = np.arange(self.n_runs)[:, None]
        silos = np.arange(self.n_agents)[None, :]
        seen = self.user_counts[runs, silos, self._users]  # (R, M): earlier contributions of each user
        self.user_counts[runs, silos, self._users] = seen + 1  # one user per silo and round: no repeats
        self._users = None
        if self.privacy_unit != "user":
            return x, y
        drop = seen >= self.cap
        if drop.any():
            self.dropped_contributions += int(drop.sum())
            x, y = np.where(drop[..., None], 0.0, x), np.where(drop, 0.0, y)
        return x, y

    def _observe(self, x: np.ndarray, y: np.ndarray) -> None:
        x, y = self._bound_contributions(x, y)
        if self.private:
            x, y = self.clip(x, y, self.feature_bound, self.reward_bound)
        if not self.lazy:
            self.state._update_unchecked(x, y)
        self.local_cov += x[..., :, None] * x[..., None, :]
        self.local_bias += x * y[..., None]
        if self._needs_points:
            self.protocol.observe_points(x, y)  # type: ignore[attr-defined]

    def end_round(self) -> None:
        super().end_round()
        if self.t % self.batch == 0:
            self.sync()

    def sync(self) -> None:
        """Lines 10-17: exchange batch statistics through the protocol, adopt the synced ones."""
        cov, bias = self.protocol.sync(self.local_cov, self.local_bias)
        gram = self.reg_value * np.eye(self.dim) + cov
        if self.private:
            gram = self.repair(gram, 0.1 * self.reg_value)  # raise eigenvalues below lambda/10 to it
        self.state.set(gram[:, None], bias[:, None])
        self.synced_cov, self.synced_bias = cov, bias
        self.local_cov[...] = 0.0
        self.local_bias[...] = 0.0
        self.last_sync_t = self.t
        self.sync_rounds += 1
        self.messages[:] = self.protocol.messages
        self.bytes_sent[:] = self.protocol.bytes_sent

    def report(self) -> dict[str, object]:
        out: dict[str, object] = {"batch": self.batch, "reg": self.reg_value, **self.protocol.privacy_report()}
        if self.private and not self.lazy:
            out = not_covering_adaptivity(out)
        if self.private:
            if self.user_counts is not None:
                out.update(self._unit_report())
            out.update(
                {
                    "lazy": self.lazy,
                    **self.clipping_report(),
                }
            )
        return out

    def _unit_report(self) -> dict[str, object]:
        """Returning users: the most visits of one user, and what the unit of privacy covers."""
        assert self.user_counts is not None
        out: dict[str, object] = {
            "max_user_visits": int(self.user_counts.max()),
            "dropped_contributions": self.dropped_contributions,
        }
        if self.privacy_unit == "interaction":
            out["privacy_unit"] = RETURNING_NOT_COVERED
        return out


#: what a per-interaction report says when its users return
RETURNING_NOT_COVERED = (
    "interaction: a returning user is NOT covered as a whole (each visit is protected once; see max_user_visits); "
    "set privacy_unit = 'user'"
)


def _with_reg(params: FedLinUCBParams, reg: float) -> FedLinUCBParams:
    if reg == params.reg:
        return params
    from dataclasses import replace

    return replace(params, reg=reg)


def theory_regularizer(
    sigma_cov: float, agents: int, nodes: float, dim: int, horizon: int, batch: int, alpha: float
) -> float:
    """lambda of Lemma C.4 with constant 1: max(1, sigma_total (sqrt(d) + sqrt(log(T / (B alpha))))).

    sigma_total = sqrt(M * nodes) * sigma_cov bounds the std of one entry of the synced noise
    (M silos, at most ``nodes`` p-sums in a prefix; for a factorized release ``nodes`` is the
    largest prefix variance factor max_k ||A[k, :]||^2).
    """
    sigma_total = math.sqrt(agents * nodes) * sigma_cov
    return max(1.0, sigma_total * (math.sqrt(dim) + math.sqrt(max(0.0, math.log(horizon / (batch * alpha))))))


#: lambda = NOISE_SHIFT x the bound of :func:`noise_norm_bound` (``regularizer = "noise"``): with 2, the
#: synced Gram matrix stays >= Lambda I (FedUCB's 2 Lambda shift, Dubey & Pentland 2020)
NOISE_SHIFT = 2.0


def noise_norm_bound(prefix_std: float, dim: int, releases: int, alpha: float) -> float:
    """Lambda: with probability >= 1 - alpha, the covariance noise N of every one of the K synced
    prefixes has operator norm <= Lambda.  N is symmetric with independent N(0, s^2) entries on and
    above the diagonal (s = ``prefix_std``), so E||N|| <= 2 s sqrt(d) and ||N|| is sqrt(2) s-Lipschitz
    in those entries: P(||N|| > 2 s sqrt(d) + sqrt(2) s t) <= exp(-t^2 / 2) (Gaussian concentration);
    t = sqrt(2 ln(K / alpha)) and a union bound over the K prefixes give
    Lambda = s (2 sqrt(d) + 2 sqrt(ln(K / alpha)))."""
    return prefix_std * (2.0 * math.sqrt(dim) + 2.0 * math.sqrt(math.log(max(releases, 1) / alpha)))


def noise_regularizer(prefix_std: float, dim: int, releases: int, alpha: float) -> float:
    """lambda of ``regularizer = "noise"``: the PSD shift NOISE_SHIFT x Lambda (at least 1).  With
    lambda = 2 Lambda the synced Gram matrix lambda I + sum x x^T + N stays >= Lambda I for every
    release with probability >= 1 - alpha (the eigenvalue floor then never has to act)."""
    return max(1.0, NOISE_SHIFT * noise_norm_bound(prefix_std, dim, releases, alpha))


def check_noise_level(params: FedLinUCBParams, cal: object) -> None:
    """A regularizer that follows the noise needs a calibration that states it: the built-ins' do
    (``sigma_cov`` and ``prefix_factor``, or a vector-sum calibration); a plugin's own may not."""
    if isinstance(cal, VectorSumCalibration) or (hasattr(cal, "sigma_cov") and hasattr(cal, "prefix_factor")):
        return
    raise ValueError(
        f"regularizer {params.regularizer!r} follows the noise, but protocol {params.protocol!r}'s "
        f"calibration ({type(cal).__name__}) states no sigma_cov and prefix_factor: set "
        "regularizer = 'fixed' (and a radius) for it"
    )


def calibrate_protocol(
    params: FedLinUCBParams, *, horizon: int, agents: int, dim: int
) -> NoiseCalibration | VectorSumCalibration | DistributedCalibration:
    """The noise calibration of a private FedLinUCB configuration (raises ValueError if impossible):
    its protocol entry's ``calibrate`` (:mod:`fedbandits.protocols.catalog`, or a plugin's).  A plugin's
    calibration is typed as the built-ins' only by duck typing (``sigma_cov``, ``prefix_factor``)."""
    calibrate = PROTOCOLS[params.protocol].calibrate
    if calibrate is None:
        raise ValueError(f"protocol {params.protocol!r} is not private")
    cal: NoiseCalibration | VectorSumCalibration | DistributedCalibration = calibrate(
        params, horizon=horizon, agents=agents, dim=dim
    )
    return cal


def prefix_noise_std(cal: NoiseCalibration | VectorSumCalibration | DistributedCalibration, agents: int) -> float:
    """Std of one covariance entry of a synced prefix's noise at its worst release: every silo's noise,
    times the largest number of noisy p-sums in a prefix (or the factorized decoder's row norm^2)."""
    if isinstance(cal, VectorSumCalibration):
        return cal.noise_std() * math.sqrt(cal.nodes)
    return cal.sigma_cov * math.sqrt(agents * cal.prefix_factor)


def private_regularizer(
    params: FedLinUCBParams,
    cal: NoiseCalibration | VectorSumCalibration | DistributedCalibration,
    agents: int,
    dim: int,
    horizon: int,
) -> float:
    """lambda of a private FedLinUCB: Lemma C.4's (``theory``) or the noise shift (``noise``)."""
    check_noise_level(params, cal)
    std = prefix_noise_std(cal, agents)
    if params.regularizer == "theory":
        return theory_regularizer(std, 1, 1.0, dim, horizon, params.batch, params.alpha)
    return noise_regularizer(std, dim, horizon // params.batch, params.alpha)


def calibrated(
    params: FedLinUCBParams, *, horizon: int, agents: int, dim: int
) -> tuple[NoiseCalibration | VectorSumCalibration | DistributedCalibration | None, float]:
    """A FedLinUCB-type request's noise calibration (None if not private) and its lambda: ``reg``, or for a
    private protocol with a regularizer that follows the noise, :func:`private_regularizer`'s."""
    if not params.private:
        return None, params.reg
    cal = calibrate_protocol(params, horizon=horizon, agents=agents, dim=dim)
    reg = params.reg if params.regularizer == "fixed" else private_regularizer(params, cal, agents, dim, horizon)
    return cal, reg


def fedlinucb_protocol(params: FedLinUCBParams, ctx: PolicyContext) -> tuple[Protocol, float]:
    """The protocol a FedLinUCB-type policy syncs through (calibrated if private) and its lambda:
    what a plugin algorithm that reuses FedLinUCB's synchronisation builds first."""
    cal, reg = calibrated(params, horizon=ctx.horizon, agents=ctx.n_agents, dim=ctx.dim)
    protocol: Protocol = PROTOCOLS[params.protocol].factory(cal, ctx)
    return protocol, reg


def _build(params: FedLinUCBParams, ctx: PolicyContext) -> Policy:
    protocol, reg = fedlinucb_protocol(params, ctx)
    n_users = ctx.env.n_users if ctx.env is not None else 0
    return FedLinUCB(
        ctx.n_runs,
        ctx.n_agents,
        ctx.n_arms,
        ctx.dim,
        ctx.horizon,
        params,
        protocol,
        reg=reg,
        n_users=n_users,
        choice_rngs=ctx.choice_rngs,
    )


#: the registry's entry (fedbandits' pyproject.toml names it)
ENTRY = policy_entry(FedLinUCB, FedLinUCBParams, _build)
