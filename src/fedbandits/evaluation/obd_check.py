"""The evaluation of off-policy estimators the Open Bandit Dataset was made for (Saito et al. 2021,
section 5): each logging policy's on-policy value (the mean click of its own log) against its
estimates from the *other* policy's log, as a relative error per estimator.

* **Random from BTS's log**: the uniform policy's probability of every (item, position) is 1/K,
  known exactly.
* **BTS from Random's log**: Bernoulli Thompson sampling ranks the items by a draw of each item's
  Beta posterior and shows the top 3, so its probability of item k at position p is a property of
  its parameters, computed here by Monte Carlo (``draws`` rankings, each probability's standard
  error at most 0.5 / sqrt(draws), stated).  Its logged propensities changed over the logged week,
  so the parameters must be the ones the dataset's authors published for it, given as a file
  (``--bts-prior``: a TOML or JSON table per campaign with lists ``alpha`` and ``beta``, or the
  YAML file of their Pipeline when PyYAML is installed); never rebuilt from its own log.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedbandits.evaluation import fixed
from fedbandits.evaluation.estimators import ESTIMATORS, Estimate
from fedbandits.evaluation.logs import BanditLog
from fedbandits.evaluation.obd import POSITIONS, read_obd


@dataclass(frozen=True)
class CheckRow:
    """One estimate of one policy's value from the other policy's log, beside the truth."""

    policy: str
    estimator: str
    truth: float
    estimate: Estimate

    @property
    def relative_error(self) -> float:
        return abs(self.estimate.value - self.truth) / self.truth if self.truth > 0 else math.nan


def read_prior(path: Path, campaign: str, arms: int) -> tuple[np.ndarray, np.ndarray]:
    """(alpha, beta) of BTS for ``campaign`` from ``path`` (module docstring), checked."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        if path.suffix == ".toml":
            table = tomllib.loads(text)
        elif path.suffix == ".json":
            table = json.loads(text)
        else:
            import yaml  # type: ignore[import-untyped]  # optional: the Pipeline's own file

            table = yaml.safe_load(text)
    except ModuleNotFoundError:
        raise ValueError(
            f"{path}: a YAML prior needs PyYAML (pip install pyyaml), or give it as .toml or .json"
        ) from None
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: not readable ({exc})") from None
    entry = table.get(campaign) if isinstance(table, dict) else None
    if not isinstance(entry, dict):
        raise ValueError(f"{path}: no table for campaign {campaign!r}")
    out = []
    for name in ("alpha", "beta"):
        values = np.asarray(entry.get(name, []), dtype=np.float64)
        if values.shape != (arms,) or not (np.isfinite(values) & (values > 0)).all():
            raise ValueError(f"{path}: {campaign}.{name} must be {arms} positive numbers, got shape {values.shape}")
        out.append(values)
    return out[0], out[1]


def bts_positions(alpha: np.ndarray, beta: np.ndarray, draws: int, seed: int) -> np.ndarray:
    """(K, 3): the probability that Thompson sampling over Beta(alpha, beta) shows item k at position p
    (the p-th highest draw), by ``draws`` seeded rankings in blocks."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((len(alpha), POSITIONS))
    block = 10_000
    for start in range(0, draws, block):
        size = min(block, draws - start)
        theta = rng.beta(alpha, beta, size=(size, len(alpha)))
        top = np.argsort(-theta, axis=1)[:, :POSITIONS]
        for p in range(POSITIONS):
            counts[:, p] += np.bincount(top[:, p], minlength=len(alpha))
    return counts / draws


def _at_positions(log: BanditLog, by_position: np.ndarray) -> np.ndarray:
    """(n, K): each round's distribution over items at the round's logged position."""
    if log.positions is None:
        raise ValueError(f"{log.source}: the log has no positions")
    return by_position[:, log.positions].T


def check(
    folder: Path,
    campaign: str,
    *,
    prior: Path | None = None,
    estimators: Sequence[str] = ESTIMATORS,
    draws: int = 100_000,
    seed: int = 0,
) -> list[CheckRow]:
    """The check's rows: Random from BTS's log always, BTS from Random's log given its ``prior``."""
    random_log, bts_log = read_obd(folder, "random", campaign), read_obd(folder, "bts", campaign)
    rows = []
    truth = fixed.on_policy(random_log).value
    for e in fixed.evaluate(bts_log, fixed.uniform(bts_log), estimators=estimators, seed=seed):
        rows.append(CheckRow("random, from BTS's log", e.estimator, truth, e))
    if prior is not None:
        alpha, beta = read_prior(prior, campaign, random_log.n_arms)
        pi = _at_positions(random_log, bts_positions(alpha, beta, draws, seed))
        truth = fixed.on_policy(bts_log).value
        for e in fixed.evaluate(random_log, pi, estimators=estimators, seed=seed):
            rows.append(CheckRow("BTS, from Random's log", e.estimator, truth, e))
    return rows


def format_check(rows: Sequence[CheckRow], campaign: str, draws: int) -> str:
    lines = [
        f"Open Bandit Dataset, campaign {campaign}: each policy's on-policy value against its estimate from the "
        f"other's log (BTS's distribution from {draws:,} rankings: each probability +-{0.5 / math.sqrt(draws):.4f})",
        f"{'policy':<24} {'estimator':<9} {'truth':>9} {'estimate':>9}  {'95% interval':<21} {'ESS':>7}  rel. error",
    ]
    for r in rows:
        e = r.estimate
        interval = f"[{e.low:.5f}, {e.high:.5f}]"
        lines.append(
            f"{r.policy:<24} {r.estimator:<9} {r.truth:>9.5f} {e.value:>9.5f}  {interval:<21} {e.ess:>7,.0f}  "
            f"{r.relative_error:.3f}"
        )
    return "\n".join(lines)
