"""``fedbandits evaluate``'s table: every entry of a config replayed on a log, beside the logging
policy's own value and the uniform policy's off-policy estimates, each with its interval.

Rows (:class:`Row`): the logging policy on its own log (the mean reward: no estimator involved);
the uniform policy (DM, IPS, SNIPS, DR: :mod:`fedbandits.evaluation.fixed`); each config entry
(replay: :mod:`fedbandits.evaluation.replay`), with the rounds it accepted.  The config's
``[environment]`` is not read: the log is the environment (its silos, K and d).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from fedbandits.config import Config
from fedbandits.evaluation import fixed
from fedbandits.evaluation.estimators import ESTIMATORS
from fedbandits.evaluation.logs import BanditLog
from fedbandits.evaluation.replay import check_replayable, replay

#: replay's intervals (the normal quantile of 95%)
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Row:
    policy: str
    method: str
    value: float
    low: float
    high: float
    #: what the value rests on: rounds used, effective sample size, or rounds accepted
    basis: str


def evaluate_config(
    config: Config,
    log: BanditLog,
    *,
    estimators: Sequence[str] = ESTIMATORS,
    interval: str = "normal",
    resamples: int = 1000,
    seed: int = 0,
) -> list[Row]:
    """The table's rows (module docstring)."""
    check_replayable(config)
    truth = fixed.on_policy(log)
    rows = [Row("logging policy", "on-policy mean", truth.value, truth.low, truth.high, f"{log.n} rounds")]
    for e in fixed.evaluate(
        log, fixed.uniform(log), estimators=estimators, interval=interval, resamples=resamples, seed=seed
    ):
        rows.append(Row("uniform", e.estimator, e.value, e.low, e.high, f"ESS {e.ess:,.0f} of {e.n}"))
    for index, alg in enumerate(config.algorithms):
        done = replay(config, index, log, seed=seed)
        low, high = done.interval(Z95)
        rate = "" if done.rate == 1.0 else f", kept at rate {done.rate:.3g}"
        stop = "" if done.stopped_by is None else f"; silo {done.stopped_by[:12]} ran out of rows"
        basis = (
            f"{done.accepted} accepted of {int(done.scanned.mean())} rows ({done.silos} silos x {done.rounds} "
            f"rounds, {len(done.values)} runs{rate}{stop})"
        )
        rows.append(Row(f"{alg.label} ({alg.name})", "replay", done.value, low, high, basis))
    return rows


def format_table(rows: Sequence[Row], log: BanditLog) -> str:
    head = (
        f"evaluated on {log.source}: {log.n} rounds, K = {log.n_arms}, d = {log.dim}, "
        f"{len(log.silo_names)} silo(s); intervals 95%"
    )
    width = max(len(r.policy) for r in rows)
    lines = [head, f"{'policy':<{width}}  {'method':<15} {'value':>9}  {'interval':<21}  basis"]
    for r in rows:
        interval = f"[{_num(r.low)}, {_num(r.high)}]"
        lines.append(f"{r.policy:<{width}}  {r.method:<15} {_num(r.value):>9}  {interval:<21}  {r.basis}")
    return "\n".join(lines)


def _num(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.5f}"


def write_json(path: Path, rows: Sequence[Row], log: BanditLog) -> None:
    document = {
        "log": {"source": log.source, "rounds": log.n, "arms": log.n_arms, "dim": log.dim, "silos": log.silo_names},
        "rows": [asdict(r) for r in rows],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
