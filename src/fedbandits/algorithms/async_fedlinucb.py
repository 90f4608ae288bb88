"""Asynchronous federated LinUCB (He, Wang, Min & Gu, NeurIPS 2022), private or not.

As published (the algorithm of the paper, here as the authors' public code ``uclaml/FedLinUCB``,
"Our-rare", implements it; this module follows that code where the paper's text was not
available to us):

* agent m acts on the statistics it last *downloaded*, V_m = lambda I + Phi_m and b_m: a decision
  never reads the agent's own data of the current epoch (the code's ``SIGMADOW``, ``BBDOW``);
* it adds each observation to its local increments dPhi_m = sum x x^T, db_m = sum x y;
* its own trigger: if det(V_m + dPhi_m) > (1 + alpha) det(V_m), agent m alone uploads
  (dPhi_m, db_m), the server adds them to its sums and sends them back to m (the download), and m
  resets its increments.  No other agent communicates: one agent's upload never triggers another's
  ("asynchronous", the abstract's definition).  Each trigger costs two messages (the code counts 2).

Where the code and this module differ, and why: the code starts every agent's downloaded matrix at
0 (so the trigger fires at once and the first decision is arbitrary); here it starts at lambda I,
which is what that first download returns.  The paper lets an arbitrary agent arrive each round;
the simulator serves every agent every round, in agent order within a round (agent 0's upload is
in the server's sums before agent 1's), one admissible arrival sequence.  ``sync_rounds`` counts
uploads (one agent-server exchange each), ``messages`` two per upload.

The trigger is evaluated in O(d^2) per observation: log det(V + dPhi + x x^T) - log det(V + dPhi)
= log(1 + x^T (V + dPhi)^{-1} x) (matrix determinant lemma), with (V + dPhi)^{-1} kept by
Sherman-Morrison, so the ratio log det(V + dPhi) - log det(V) is a running sum.  Only a download
inverts a matrix (once per upload).

Privacy (``protocol = "ldp-prefix"``)
------------------------------------
He et al. is not private.  Its private use puts a silo's noisy statistics on the network at times a
*data-dependent* trigger picks, the schedule the seed papers warn about (Zhou & Chowdhury 2023,
section 3, Example 3.1): whether and when a silo uploads is a function of its unreleased data.
Two private variants:

* ``trigger = "determinant"`` (the naive one): every upload is a noisy prefix of the silo's own
  clipped statistics (each silo runs its own Gaussian tree over its uploads, Zhou & Chowdhury's
  Algorithm 4, calibrated for up to T uploads), but the upload *times* are not covered: the report
  says ``guarantee = "no formal guarantee"`` and ``fedbandits audit schedule`` measures the leak.
* ``trigger = "period"``: silo i uploads every ``batch`` rounds at its own fixed offset
  floor(i B / M) (uploads at rounds t with (t + offset_i) mod B = 0): a data-independent schedule
  that is still not lock-step (silos sync at different rounds, each alone).  Each silo releases at
  most ceil(T / B) noisy prefixes; the calibration is the ``ldp-prefix`` one for that many releases,
  and decisions read downloads only (released data), so the guarantee is silo-level LDP per
  interaction, formal, as for lazy FedLinUCB with ``ldp-prefix``.

Either way features are clipped to ||x|| <= L and rewards to [-B, B] before they enter the
increments (counted), and a downloaded noisy Gram matrix is repaired to eigenvalues >= lambda/10
(post-processing, counted).  Other protocols need every silo in the same round (secure aggregation,
a shuffler), which an asynchronous schedule does not have: they are refused.
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
from fedbandits.algorithms.fedlinucb import FedLinUCBParams, calibrated
from fedbandits.core.exploration import Explorer
from fedbandits.core.ridge import spd_inverse
from fedbandits.core.ucb import UCBScorer
from fedbandits.core.validation import check_choice, check_float
from fedbandits.privacy.calibration import NoiseCalibration
from fedbandits.privacy.guarantee import not_covering_adaptivity
from fedbandits.privacy.mechanisms import packed_width, protocol_streams, unpack
from fedbandits.privacy.tree import max_nodes_per_datum
from fedbandits.protocols.base import FLOAT_BYTES

TRIGGERS = ("determinant", "period")
#: the privacy this algorithm implements itself (each silo's own Gaussian tree over its uploads,
#: calibrated as ``ldp-prefix``): a parameter of the algorithm, not a protocol object it syncs through
ASYNC_PROTOCOLS = ("none", "ldp-prefix")

#: why a private run with the determinant trigger has no formal guarantee
SCHEDULE_LEAK = (
    "each silo uploads when its own determinant ratio, a function of its unreleased data, crosses the threshold "
    "(He et al. 2022): the upload times are not covered by the noise (Zhou & Chowdhury 2023, Example 3.1; "
    "measured by `fedbandits audit schedule`); trigger = 'period' is the data-independent variant"
)


@dataclass(frozen=True)
class AsyncFedLinUCBParams(ExploringLinUCBParams):
    """The LinUCB parameters, the per-agent trigger, and (with ``protocol = "ldp-prefix"``) the privacy
    request, validated as FedLinUCB's (:meth:`release_params` builds the equivalent FedLinUCB request)."""

    trigger: str = field(
        default="determinant",
        metadata={
            "help": "'determinant' (He et al.: upload when det(V + dPhi) > (1 + threshold) det(V), data-dependent) "
            "or 'period' (every `batch` rounds at the silo's own offset: data-independent)"
        },
    )
    threshold: float = field(
        default=1.0, metadata={"help": "alpha > 0 of the determinant trigger (He et al.'s code: 1)"}
    )
    batch: int = field(default=25, metadata={"help": "trigger = 'period': rounds between a silo's uploads B >= 1"})
    protocol: str = field(
        default="none", metadata={"help": "'none' or 'ldp-prefix' (each silo's own Gaussian tree over its uploads)"}
    )
    epsilon: float = field(default=1.0, metadata={"help": "privacy budget epsilon > 0 (ldp-prefix)"})
    delta: float = field(default=1e-4, metadata={"help": "privacy budget delta in (0, 1) (ldp-prefix)"})
    calibration: str = field(default="tight", metadata={"help": "'paper' closed form or 'tight' accountant"})
    feature_bound: float = field(default=1.0, metadata={"help": "L: features clipped to ||x|| <= L (private)"})
    reward_bound: float = field(default=1.0, metadata={"help": "B: rewards clipped to [-B, B] (private)"})
    adjacency: str = field(default="replace", metadata={"help": "'replace' one user (paper) or 'add-remove'"})
    regularizer: str = field(
        default="auto",
        metadata={"help": "'fixed' (reg), 'theory' or 'noise' (as fedlinucb); default 'auto': 'noise' if private"},
    )
    radius: str = field(
        default="auto",
        metadata={"help": "'theory' or 'constant' (beta); default 'auto': constant beta (10 if private, else 1)"},
    )

    def __post_init__(self) -> None:
        check_choice("protocol", self.protocol, ASYNC_PROTOCOLS)
        check_choice("trigger", self.trigger, TRIGGERS)
        check_float("threshold", self.threshold, low=0.0, low_open=True, high=1e6)
        check_choice("calibration", self.calibration, ("paper", "tight"))
        sync = self._sync(self.batch)  # validates the shared fields and resolves the 'auto' tuning
        for name in ("regularizer", "radius", "beta"):
            object.__setattr__(self, name, getattr(sync, name))
        super().__post_init__()

    @property
    def private(self) -> bool:
        return self.protocol != "none"

    def _sync(self, batch: int) -> FedLinUCBParams:
        shared = {name: getattr(self, name) for name in FedLinUCBParams.__dataclass_fields__ if hasattr(self, name)}
        shared.update(batch=batch, lazy=True if self.private else None)
        return FedLinUCBParams(**shared)

    def uploads_per_silo(self, horizon: int) -> int:
        """The most uploads one silo can make in T rounds: T (determinant) or ceil(T / B) (period)."""
        return horizon if self.trigger == "determinant" else -(-horizon // self.batch)

    def release_params(self, horizon: int) -> tuple[FedLinUCBParams, int]:
        """(FedLinUCB parameters, horizon) whose ``ldp-prefix`` calibration is this one's: a tree planned for
        :meth:`uploads_per_silo` releases of one silo's clipped statistics."""
        batch = 1 if self.trigger == "determinant" else self.batch
        return self._sync(batch), self.uploads_per_silo(horizon) * batch

    def check_compatible(self, horizon: int, agents: int, dim: int | None) -> None:
        if self.trigger == "period" and self.batch > horizon:
            raise ValueError(f"batch must be an integer in [1, horizon = {horizon}], got {self.batch}")
        sync, releases_horizon = self.release_params(horizon)
        sync.check_compatible(releases_horizon, agents, dim)


class SiloTrees:
    """One Gaussian tree per (run, silo), each with its own release counter and noise stream.

    A silo's k-th upload is release k of its own tree (Zhou & Chowdhury 2023, Algorithm 2 lines
    4-7, each silo alone): it creates the p-sum of level lowest_set_bit(k), draws that node's noise
    once from the silo's stream, and the silo sends its noisy prefix, the sum of the noisy p-sums at
    the one bits of k (Algorithm 4).  ``sigma`` is None for a non-private run: the prefix is exact.
    """

    def __init__(
        self,
        n_runs: int,
        n_silos: int,
        width: int,
        releases: int,
        sigma: np.ndarray | None,
        rngs: Sequence[np.random.Generator],
    ) -> None:
        self.sigma = sigma
        self.releases = releases
        self.levels = max_nodes_per_datum(releases) if sigma is not None else 1
        self.exact = np.zeros((self.levels, n_runs, n_silos, width))
        self.noisy = np.zeros_like(self.exact)
        self.k = np.zeros((n_runs, n_silos), dtype=np.int64)
        # silo i of run r draws from its own stream, as TreeRandomizer's silos do
        self.silo_rngs = [protocol_streams(rng)[0].spawn(n_silos) for rng in rngs] if sigma is not None else []

    def release(self, runs: np.ndarray, silos: np.ndarray, gamma: np.ndarray) -> np.ndarray:
        """The next release of every listed (run, silo) with batch ``gamma (n, P)``: their prefixes ``(n, P)``."""
        k = self.k[runs, silos] + 1
        if self.sigma is None:
            self.exact[0, runs, silos] += gamma
            self.k[runs, silos] = k
            return self.exact[0, runs, silos].copy()
        if (k > self.releases).any():
            raise ValueError(f"a silo's tree was planned for {self.releases} releases; an upload exceeds it")
        level = np.log2(k & -k).astype(np.int64)
        for lvl in np.unique(level):
            sel = level == lvl
            r, i = runs[sel], silos[sel]
            node = gamma[sel] + self.exact[:lvl, r, i].sum(axis=0)
            noise = np.stack([self.silo_rngs[a][b].standard_normal(node.shape[-1]) for a, b in zip(r, i, strict=True)])
            self.exact[lvl, r, i] = node
            self.noisy[lvl, r, i] = node + noise * self.sigma
            self.exact[:lvl, r, i] = 0.0  # absorbed into the new node, never used again
            self.noisy[:lvl, r, i] = 0.0
        self.k[runs, silos] = k
        bits = (k[:, None] >> np.arange(self.levels)) & 1  # (n, levels): the p-sums of each prefix
        return np.einsum("nl,lnp->np", bits.astype(np.float64), self.noisy[:, runs, silos])


class AsyncFedLinUCB(Policy, ClipCounts, Explores):
    """He et al.'s asynchronous FedLinUCB (see the module docstring), batched over runs x agents."""

    name = "fedlinucb-async"
    description = "asynchronous federated LinUCB: each agent syncs alone when its own trigger fires (He et al. 2022)"
    report_merge: ClassVar[Mapping[str, MergeRule]] = {
        "trigger": "same",
        "threshold": "same",
        "batch": "same",
        "reg": "same",
        "protocol": "same",
        "lazy": "same",
        "uploads": "sum",
        **CLIPPING_COUNTS,
    }

    def __init__(
        self,
        n_runs: int,
        n_agents: int,
        n_arms: int,
        dim: int,
        horizon: int,
        params: AsyncFedLinUCBParams,
        noise_rngs: Sequence[np.random.Generator],
        calibration: NoiseCalibration | None = None,
        reg: float | None = None,
        record: bool = False,
        choice_rngs: Sequence[np.random.Generator] | None = None,
    ) -> None:
        super().__init__(n_runs, n_agents, n_arms, dim, horizon)
        self.explorer = Explorer(params, n_runs, n_agents, choice_rngs)
        if params.private and calibration is None:
            raise ValueError("a private fedlinucb-async needs its calibration")
        self.params = params
        self.reward_offset = params.reward_offset
        self.private = params.private
        self.calibration = calibration
        self.reg_value = params.reg if reg is None else reg
        self.radius = params.confidence_radius()
        R, M, d = n_runs, n_agents, dim
        eye = np.eye(d)
        # what each agent acts on: V = lambda I + its last download (repaired if noisy), and b
        self.gram = np.broadcast_to(self.reg_value * eye, (R, M, d, d)).copy()
        self.inv = np.broadcast_to(eye / self.reg_value, (R, M, d, d)).copy()
        self.bias = np.zeros((R, M, d))
        # the trigger's state: (V + dPhi)^{-1} by Sherman-Morrison and log det(V + dPhi) - log det V
        self.full_inv = self.inv.copy()
        self.log_ratio = np.zeros((R, M))
        self.log_threshold = math.log1p(params.threshold)
        width = packed_width(d)
        #: dPhi, db since the last upload, packed as they travel (upper triangle of dPhi, then db)
        self.local = np.zeros((R, M, width))
        self._rows, self._cols = np.triu_indices(d)
        sigma = None
        if calibration is not None:
            n_tri = d * (d + 1) // 2
            sigma = np.concatenate([np.full(n_tri, calibration.sigma_cov), np.full(d, calibration.sigma_bias)])
        releases = params.uploads_per_silo(horizon)
        self.trees = SiloTrees(R, M, width, releases, sigma, noise_rngs)
        #: the server's view: every silo's latest (noisy) prefix, (R, M, P), and their sum, the server's sums
        self.server_view = np.zeros((R, M, width))
        self.server_sum = np.zeros((R, width))
        self.offsets = (np.arange(M) * params.batch) // M  # the period trigger's per-silo offsets
        self.scorer = UCBScorer(R * M, n_arms, d)
        self.payload_bytes = width * FLOAT_BYTES
        self.init_clipping()
        #: with ``record``: per round with an upload, what the server received, ``messages (R, M, P)``
        #: (zero for a silo that did not upload; ``fedbandits run --transcript``, the privacy audit)
        self.transcript: list[dict[str, object]] | None = [] if record else None

    def _select(self, features: np.ndarray) -> np.ndarray:
        n = self.n_runs * self.n_agents
        beta = self.radius(float(self.n_agents * self.t), self.dim, self.reg_value)
        theta = np.einsum("...ij,...j->...i", self.inv, self.bias)
        flat = features.reshape(n, self.n_arms, self.dim)
        inv = self.inv.reshape(n, self.dim, self.dim)
        return self.explorer.choose(self.scorer, flat, inv, theta.reshape(n, self.dim), beta)

    def _observe(self, x: np.ndarray, y: np.ndarray) -> None:
        if self.private:
            x, y = self.clip(x, y, self.params.feature_bound, self.params.reward_bound)
        n_tri = self._rows.size
        self.local[..., :n_tri] += x[..., self._rows] * x[..., self._cols]
        self.local[..., n_tri:] += x * y[..., None]
        if self.params.trigger == "determinant":
            u = np.einsum("...ij,...j->...i", self.full_inv, x)
            q = np.einsum("...i,...i->...", x, u)
            self.log_ratio += np.log1p(q)
            self.full_inv -= (u / (1.0 + q)[..., None])[..., :, None] * u[..., None, :]

    def uploading(self) -> np.ndarray:
        """Which agents upload after round t, ``(R, M)`` bool."""
        if self.params.trigger == "determinant":
            return self.log_ratio > self.log_threshold
        due = (self.t + self.offsets) % self.params.batch == 0
        return np.broadcast_to(due, (self.n_runs, self.n_agents))

    def end_round(self) -> None:
        super().end_round()
        mask = self.uploading()
        if mask.any():
            self.communicate(mask)

    def communicate(self, mask: np.ndarray) -> None:
        """Every masked agent uploads its increments and downloads the server's sums, in agent order."""
        runs, silos = np.nonzero(mask)
        prefixes = self.trees.release(runs, silos, self.local[runs, silos])
        change = prefixes - self.server_view[runs, silos]  # what each upload adds to the server's sums
        self.server_view[runs, silos] = prefixes
        # the server's sums after each agent's turn: before the round plus the changes of its run's agents
        # 0..i (np.nonzero lists the uploads by run, then agent)
        cum = np.cumsum(change, axis=0)
        first = np.searchsorted(runs, runs)  # the first upload of the same run
        earlier = np.where((first > 0)[:, None], cum[np.maximum(first - 1, 0)], 0.0)
        running = self.server_sum[runs] + cum - earlier
        np.add.at(self.server_sum, runs, change)
        if self.transcript is not None:
            received = np.zeros_like(self.server_view)
            received[runs, silos] = prefixes
            self.transcript.append({"round": self.t, "messages": received})
        cov, bias = unpack(running, self.dim)
        gram = self.reg_value * np.eye(self.dim) + cov
        if self.private:
            gram = self.repair(gram, 0.1 * self.reg_value)  # FedLinUCB's floor lambda/10
        inv = spd_inverse(gram)
        self.gram[runs, silos] = gram
        self.inv[runs, silos] = inv
        self.bias[runs, silos] = bias
        self.full_inv[runs, silos] = inv
        self.log_ratio[runs, silos] = 0.0
        self.local[runs, silos] = 0.0
        per_run = np.bincount(runs, minlength=self.n_runs)
        self.sync_rounds += per_run
        self.messages += 2 * per_run
        self.bytes_sent += 2 * per_run * self.payload_bytes

    def report(self) -> dict[str, object]:
        out: dict[str, object] = {
            "trigger": self.params.trigger,
            "threshold": self.params.threshold,
            "batch": self.params.batch,
            "reg": self.reg_value,
            "uploads": int(self.sync_rounds.sum()),
            "protocol": self.params.protocol,
        }
        if self.calibration is None:
            return out
        out.update(self.calibration.report())
        out["protocol"] = self.params.protocol
        if self.params.trigger == "determinant":
            out = not_covering_adaptivity(out, SCHEDULE_LEAK)
        out.update(
            {
                "lazy": True,
                **self.clipping_report(),
            }
        )
        return out


def _build(params: AsyncFedLinUCBParams, ctx: PolicyContext) -> Policy:
    """Each silo's tree is calibrated as ``ldp-prefix`` for the most uploads the trigger allows, and lambda
    follows that noise as a private FedLinUCB's does."""
    sync, horizon = params.release_params(ctx.horizon)
    cal, reg = calibrated(sync, horizon=horizon, agents=ctx.n_agents, dim=ctx.dim)
    if cal is not None and not isinstance(cal, NoiseCalibration):  # ldp-prefix is a Gaussian tree, by construction
        raise TypeError(f"fedlinucb-async expected a Gaussian tree calibration, got {type(cal).__name__}")
    return AsyncFedLinUCB(
        ctx.n_runs,
        ctx.n_agents,
        ctx.n_arms,
        ctx.dim,
        ctx.horizon,
        params,
        ctx.noise_rngs,
        calibration=cal,
        reg=reg,
        record=ctx.record_transcript,
        choice_rngs=ctx.choice_rngs,
    )


#: the registry's entry (fedbandits' pyproject.toml names it)
ENTRY = policy_entry(AsyncFedLinUCB, AsyncFedLinUCBParams, _build)
