"""The upload-timing side channel of CDP-FCLUB-DC, measured (Liu et al. 2022, Eq. (5) and Algorithm 3).

Threat model: the global server is honest but curious.  Besides the (tree-privatized) uploads it
sees *when* every local cluster uploads.  A local cluster uploads asynchronously when
det(S^l + dS) / det(S^l) >= U (Eq. 5).  The tree privatizer protects the uploaded numbers; the
timing is not covered by the paper's accounting (nor by the run's ``epsilon_spent``).  The
attacker here uses the timing only, never an uploaded number.

What the trigger reads
----------------------
The buffer dS is not raw data alone: Algorithm 3, line 10 initialises it with
3 rho I + H - H_bar, where H is the *tentative* noise of the next release, drawn in advance.  So
S^l + dS is exactly the matrix the next upload would release, computed on the data so far, and
the trigger compares a noisy statistic with U.  One datum x moves that statistic by
log(1 + x^T (S^l + dS)^{-1} x) ~ ||x||^2 / lambda, while the unreleased noise node moves it by
~ sqrt(2 d) sigma / lambda (sigma: the node noise std, the same for every scale of rho).  The
leak is therefore not FedUCB's deterministic one (Zhou & Chowdhury 2023, Example 3.1): it is a
rare event whose likelihood ratio is infinite.

The experiment (all trials batched as the R runs of one policy, in chunks)
-------------------------------------------------------------------------
The real ``CDPFCLUBDC`` policy on the real ``clustered-synthetic`` user structure (L servers with
two users each, one true cluster, K = 1 item, one arrival per round), driven by hand-built rounds:
all arrivals are at server 0, the victim's local server.

* Arrivals 1-3 ("warm-up", a public user with the zero context): each uploads on the 3 rho I
  shift alone (Algorithm 3's buffer after a renewal or an upload), so before arrival 4 the
  victim's local cluster has S^l = 11 rho I + P_4 and dS = 3 rho I + N_5, where P_4 is the
  released prefix noise of release 4 and N_5 the fresh level-0 node of release 5 (odd release:
  one node, the least noise the trigger can carry; after three uploads the known noise P_4 enters
  with weight 3/11 only, against 5/2 right after the renewal).
* Arrival 4 ("primer", same public user, zero context): a check of the trigger that adds nothing.
* Arrival 5 (the victim): dataset "Alice" has the zero context, dataset "Tracy" a context of norm
  L in a random direction.  Everything else is identical and paired: same arrivals, same reward
  noise, same privacy-noise generators (so the same tree noise), same seeds.

The statistic: the attacker answers "Tracy" iff there was **no** asynchronous upload at the
primer's arrival and there **is** one at the victim's arrival.  Why it is valid and why it
maximises the certified epsilon:

* It reads only the victim's upload times and public parameters.
* Its false-positive rate is exactly 0: without an upload at the primer the trigger statistic was
  below U, and Alice's zero context leaves it unchanged (the policy's own update: q = 0,
  log1p(0) = 0), so an upload at her arrival is impossible.  The bound
  log((TPR_lo - delta) / FPR_hi) is then limited by the number of trials only
  (FPR_hi = 1 - (alpha/2)^(1/n) for 0 false positives of n), and any positive refutes pure DP.
* Among the rules with FPR = 0 its TPR is the largest: an upload at the victim's arrival that
  Alice cannot cause is the only observation with probability 0 under Alice; later observations
  are equally possible under both datasets (their likelihood ratio is bounded), so adding them
  would raise the FPR and lower the bound.

Operating point (public parameters, as the FedUCB audit's threshold D)
----------------------------------------------------------------------
With the paper's U (e.g. 1.5) the 3 rho I shift fires the trigger at every arrival for a long
time and a single user never matters.  The audit sets
U = (14/11)^d (1 + c L^2 / (14 rho)): the det ratio at the noise-free attacked state
(S^l = 11 rho I, dS = 3 rho I) after one user of squared norm c L^2.  So a user of squared norm
above c L^2 fires the trigger when the fresh noise is zero; the three warm-up uploads are far
above U (by ~rho, i.e. dozens of noise standard deviations) and any state after a fourth upload
is far below it.  D = (14/11)^d < U (no downloads happen: the victim's local cluster is its own
global cluster, alpha_2 = 1e-9 links no two servers), so t_c, nu, sigma and rho are those of
min(U, D) = D.  ``threshold_c`` = 1/2 puts the window of noise values in which Tracy's arrival
fires and the primer's does not, [c L^2 - L^2, c L^2), at the mode of the noise: it maximises
the TPR.  This is a choice of operating point, not a weakness of the attack; rho cancels
(signal and noise both scale as 1/rho), sigma does not.

Model.  Linearising log det around the noise-free state, the trigger at the victim's arrival
fires iff tr(N_5) - (3/11) tr(P_4) + ||x||^2 >= c L^2 (up to O(sigma^2 / rho)), with
tr(N_5) - (3/11) tr(P_4) ~ N(0, sigma_eff^2), sigma_eff = sigma sqrt(2 d) sqrt(1 + 9/121)
(diagonal entries of a node have variance 2 sigma^2).  Hence
TPR = Phi(c L^2 / sigma_eff) - Phi((c - 1) L^2 / sigma_eff) ~ 0.4 L^2 / sigma_eff, reported as
``tpr_model``; the test suite checks the measured TPR against it.

Reported: TPR, FPR, the attacker's accuracy with a Clopper-Pearson interval and an exact binomial
test against 1/2, the certified epsilon lower bound (as in :mod:`fedbandits.audit.schedule`),
the claimed per-tree epsilon (the ``epsilon`` the algorithm is configured with) and the epsilon
the runs themselves report as spent (``epsilon_spent`` of ``report()``, the exact accounting of
the uploaded numbers).  The control row moves U out of reach (c = 1 + 8 sigma_eff / L^2: Tracy
would need 8 noise standard deviations): the datasets still differ, the attack must be at chance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from fedbandits.algorithms.clustering import UserStructure
from fedbandits.algorithms.fclub import CDPFCLUBDC
from fedbandits.algorithms.fclub_params import CDPFCLUBDCParams
from fedbandits.audit.schedule import AttackResult, clopper_pearson, epsilon_lower_bound
from fedbandits.core.validation import check_float, check_int
from fedbandits.envs.base import Round
from fedbandits.envs.clustered import ClusteredSynthetic, ClusteredSyntheticParams
from fedbandits.privacy.cluster_tree import composed_epsilon

#: shift-driven uploads before the attacked state (release 5 is odd: its fresh noise is one node)
WARMUP = 3
PRIMER = WARMUP + 1  # 1-based arrival index of the primer's trigger check
VICTIM = WARMUP + 2  # 1-based arrival index of the victim's datum
ARRIVALS = VICTIM
#: the noise-free S^l at the attacked state is S_RHO rho I (2 rho at the renewal + 3 rho per upload)
S_RHO = 2 + 3 * WARMUP
#: the control's threshold: Tracy's arrival would need this many noise standard deviations
CONTROL_SIGMAS = 8.0
#: alpha_2 of the audited runs: no two servers' local clusters are ever linked
NO_MERGE = 1e-9
#: L and B of the audited runs (the paper's noise calibration assumes ||x|| <= 1, y in [0, 1])
FEATURE_BOUND = REWARD_BOUND = 1.0
_CHUNK = 2000  # runs per policy (memory: each run keeps its own statistics and arrival log)
_NORM = 1.0 - 2.0**-22  # Tracy's float32 context has norm <= L after rounding (no clipping)


@dataclass(frozen=True)
class TimingSetup:
    """Parameters of the upload-timing experiment against CDP-FCLUB-DC."""

    trials: int = field(default=2000, metadata={"help": "paired trials (each runs both datasets), >= 10"})
    servers: int = field(default=1, metadata={"help": "local servers L >= 1 (0 = victim, the others idle)"})
    dim: int = field(default=2, metadata={"help": "feature dimension d >= 2 (the clustered environment's minimum)"})
    seed: int = field(default=0, metadata={"help": "seed of the data and the privacy noise, >= 0"})
    epsilon: float = field(default=1.0, metadata={"help": "the per-tree epsilon the algorithm claims, > 0"})
    delta: float = field(default=0.1, metadata={"help": "its delta, in (0, 1)"})
    threshold_c: float = field(default=0.5, metadata={"help": "c in (0, 1): one user of norm^2 > c L^2 triggers"})
    horizon: int = field(default=1000, metadata={"help": "the horizon T the algorithm is configured for, >= 5"})
    alpha: float = field(default=0.05, metadata={"help": "1 - confidence of the intervals, in (0, 1)"})

    def __post_init__(self) -> None:
        check_int("trials", self.trials, low=10)
        check_int("servers", self.servers, low=1)
        check_int("dim", self.dim, low=2)
        check_int("seed", self.seed, low=0)
        check_float("epsilon", self.epsilon, low=0.0, low_open=True)
        check_float("delta", self.delta, low=0.0, high=1.0, low_open=True, high_open=True)
        check_float("threshold_c", self.threshold_c, low=0.0, high=1.0, low_open=True, high_open=True)
        check_int("horizon", self.horizon, low=ARRIVALS)
        check_float("alpha", self.alpha, low=0.0, high=1.0, low_open=True, high_open=True)


@dataclass(frozen=True)
class TimingResult(AttackResult):
    reported_epsilon: float  # epsilon_spent the runs report (the uploaded numbers' exact accounting)
    tpr_model: float  # TPR of the linearised Gaussian model (module docstring)

    def row(self) -> dict[str, object]:
        row = super().row()  # the schedule side channel's columns, plus two, and finer rates
        row["TPR"], row["FPR"] = round(self.tpr, 4), round(self.fpr, 4)
        keys = list(row)
        keys.insert(keys.index("claimed eps") + 1, "eps spent (reported)")
        keys.insert(keys.index("FPR") + 1, "TPR model")
        row["eps spent (reported)"] = round(self.reported_epsilon, 3)
        row["TPR model"] = round(self.tpr_model, 4)
        return {key: row[key] for key in keys}


@dataclass(frozen=True)
class PairedData:
    """The two neighbouring datasets of every trial (identical except the victim's context)."""

    users: np.ndarray  # (A,) the user arriving at every arrival (the same in every trial)
    alice: np.ndarray  # (R, A, d) float32: the context of every arrival under dataset Alice
    tracy: np.ndarray  # (R, A, d) float32: under dataset Tracy
    reward_noise: np.ndarray  # (R, A) uniform noise of the Bernoulli(1/2) rewards


@dataclass(frozen=True)
class OperatingPoint:
    upload: float  # U
    download: float  # D
    rho: float
    noise_std: float  # sigma of every node entry
    sigma_eff: float  # std of the trigger noise in units of ||x||^2 = L^2 = 1 (module docstring)
    threshold_c: float


def _environment(setup: TimingSetup, runs: int) -> ClusteredSynthetic:
    params = ClusteredSyntheticParams(
        users=2 * setup.servers, clusters=1, agents=setup.servers, arms=1, dim=setup.dim, arrivals="single"
    )
    rng = np.random.default_rng(0)  # never drawn from: the rounds are built by hand
    return ClusteredSynthetic([rng] * runs, params)


def _policy(
    setup: TimingSetup, env: ClusteredSynthetic, upload: float, download: float, rngs: list[np.random.Generator]
) -> CDPFCLUBDC:
    params = CDPFCLUBDCParams(
        epsilon=setup.epsilon,
        delta=setup.delta,
        upload=upload,
        download=download,
        alpha2=NO_MERGE,
        feature_bound=FEATURE_BOUND,
        reward_bound=REWARD_BOUND,
    )
    return CDPFCLUBDC(len(rngs), 1, 1, setup.dim, setup.horizon, UserStructure.from_env(env), params, rngs)


def operating_point(setup: TimingSetup, threshold_c: float | None = None) -> OperatingPoint:
    """U, D and the noise scales of the audited runs (module docstring)."""
    c = setup.threshold_c if threshold_c is None else threshold_c
    download = ((S_RHO + 3.0) / S_RHO) ** setup.dim
    # t_c, nu, sigma and rho depend on min(U, D) = D only: read them off a one-run policy
    probe = _policy(setup, _environment(setup, 1), download, download, [np.random.default_rng(0)])
    rho, sigma = probe.rho, probe.noise_std
    sigma_eff = sigma * math.sqrt(2.0 * setup.dim) * math.sqrt(1.0 + (3.0 / S_RHO) ** 2)
    upload = download * (1.0 + c * FEATURE_BOUND**2 / ((S_RHO + 3.0) * rho))
    return OperatingPoint(upload, download, rho, sigma, sigma_eff, c)


def paired_data(setup: TimingSetup) -> PairedData:
    """Arrivals, contexts and reward noise of both datasets (module docstring); Tracy's norm is L = 1."""
    env = _environment(setup, 1)
    primer, victim = (int(u) for u in env.server_users[0][:2])
    users = np.array([primer] * (ARRIVALS - 1) + [victim], dtype=np.int64)
    data_seed, _ = np.random.SeedSequence(setup.seed).spawn(2)
    rng = np.random.default_rng(data_seed)
    R, d = setup.trials, setup.dim
    direction = rng.normal(size=(R, d))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    alice = np.zeros((R, ARRIVALS, d), dtype=np.float32)
    tracy = alice.copy()
    tracy[:, VICTIM - 1] = (direction * _NORM).astype(np.float32)
    return PairedData(users, alice, tracy, rng.random((R, ARRIVALS)))


def upload_flags(
    setup: TimingSetup, point: OperatingPoint, data: PairedData, contexts: np.ndarray
) -> tuple[np.ndarray, float]:
    """Play the arrivals of every trial; (did the victim's local cluster upload at arrival a, (R, A)),
    and the largest epsilon_spent the runs report.

    The privacy noise of trial i comes from the i-th child of the seed's noise SeedSequence, the same
    for every call: two calls with different ``contexts`` are paired.
    """
    _, noise_seed = np.random.SeedSequence(setup.seed).spawn(2)
    children = noise_seed.spawn(setup.trials)
    R, A = contexts.shape[:2]
    flags = np.zeros((R, A), dtype=bool)
    compositions = 0
    noise_std = point.noise_std
    for lo in range(0, R, _CHUNK):
        hi = min(lo + _CHUNK, R)
        env = _environment(setup, hi - lo)
        policy = _policy(setup, env, point.upload, point.download, [np.random.default_rng(s) for s in children[lo:hi]])
        if policy.rho != point.rho or policy.noise_std != noise_std:
            raise RuntimeError("the audited policy's calibration differs from the operating point's")
        means = np.full((hi - lo, 1, 1), 0.5, dtype=np.float32)
        before = policy.sync_rounds.copy()
        for a in range(A):
            env.last_users[:] = data.users[a]
            features = np.ascontiguousarray(contexts[lo:hi, a, None, None, :])
            policy.step(Round(features, means, data.reward_noise[lo:hi, a, None]), env)
            flags[lo:hi, a] = policy.sync_rounds > before
            before = policy.sync_rounds.copy()
        # report()'s epsilon_spent is composed_epsilon of the worst user's compositions, which is
        # monotone in them: the same number without report()'s per-run root finding
        compositions = max(compositions, *(int(policy.privacy_compositions(r).max()) for r in range(hi - lo)))
    spent = composed_epsilon(compositions, noise_std, setup.delta, FEATURE_BOUND, REWARD_BOUND)
    return flags, spent


def _tracy_guess(flags: np.ndarray) -> np.ndarray:
    """The attacker's answer per trial: no upload at the primer's arrival, one at the victim's."""
    return ~flags[:, PRIMER - 1] & flags[:, VICTIM - 1]


def _measure(setup: TimingSetup, data: PairedData, point: OperatingPoint, target: str) -> TimingResult:
    flags_a, spent_a = upload_flags(setup, point, data, data.alice)
    flags_t, spent_t = upload_flags(setup, point, data, data.tracy)
    guess_a, guess_t = _tracy_guess(flags_a), _tracy_guess(flags_t)
    tp, fp, n = int(guess_t.sum()), int(guess_a.sum()), setup.trials
    correct = tp + (n - fp)
    c = point.threshold_c
    tpr_model = float(stats.norm.cdf(c / point.sigma_eff) - stats.norm.cdf((c - 1.0) / point.sigma_eff))
    return TimingResult(
        target=target,
        schedule="det ratio, data + tentative noise",
        claimed_epsilon=setup.epsilon,
        delta=setup.delta,
        trials=n,
        syncs_alice=int(flags_a[:, VICTIM - 1].sum()),
        syncs_tracy=int(flags_t[:, VICTIM - 1].sum()),
        tpr=tp / n,
        fpr=fp / n,
        accuracy=correct / (2 * n),
        accuracy_interval=clopper_pearson(correct, 2 * n, setup.alpha),
        p_value=float(stats.binomtest(correct, 2 * n, 0.5).pvalue),
        epsilon_lower_bound=epsilon_lower_bound(tp, fp, n, setup.delta, setup.alpha),
        reported_epsilon=max(spent_a, spent_t),
        tpr_model=tpr_model,
    )


def run_timing_attack(setup: TimingSetup, control: bool = True) -> list[TimingResult]:
    """The attack at ``setup.threshold_c`` and (``control``) with U out of reach (module docstring)."""
    data = paired_data(setup)
    point = operating_point(setup)
    results = [_measure(setup, data, point, "cdp-fclub-dc")]
    if control:
        # the feature bound L = 1: c is in units of L^2
        c_out = 1.0 + CONTROL_SIGMAS * point.sigma_eff
        results.append(_measure(setup, data, operating_point(setup, c_out), "control: U out of reach"))
    return results
