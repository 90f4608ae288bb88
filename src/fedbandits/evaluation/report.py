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

import numpy as np

from fedbandits.config import Config
from fedbandits.evaluation import fixed
from fedbandits.evaluation.estimators import ESTIMATORS
from fedbandits.evaluation.logs import BanditLog
from fedbandits.evaluation.replay import check_replayable, replay
from fedbandits.plots import _pyplot as pyplot
from fedbandits.plots import plain_number

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
        f"evaluated on {log.source}: {log.n} rounds, K = {_arms(log)}, d = {log.dim}, "
        f"{len(log.silo_names)} silo(s); intervals 95%"
    )
    width = max(len(r.policy) for r in rows)
    lines = [head, f"{'policy':<{width}}  {'method':<15} {'value':>9}  {'interval':<21}  basis"]
    for r in rows:
        interval = f"[{_num(r.low)}, {_num(r.high)}]"
        lines.append(f"{r.policy:<{width}}  {r.method:<15} {_num(r.value):>9}  {interval:<21}  {r.basis}")
    return "\n".join(lines)


def _arms(log: BanditLog) -> str:
    """K, or each silo's K_s when the silos have catalogues of their own."""
    if log.catalogue is None:
        return str(log.n_arms)
    return "/".join(str(int(k)) for k in log.silo_arms)


def _num(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.5f}"


def write_json(path: Path, rows: Sequence[Row], log: BanditLog, tuning: dict[str, object] | None = None) -> None:
    document: dict[str, object] = {
        "log": {"source": log.source, "rounds": log.n, "arms": log.n_arms, "dim": log.dim, "silos": log.silo_names},
        "rows": [asdict(r) for r in rows],
    }
    if tuning is not None:
        document["tuning"] = tuning
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def write_figure(path: Path, rows: Sequence[Row], log: BanditLog) -> None:
    """One point per row with its 95% interval, on one value axis, the logging policy's value a line."""
    from matplotlib.ticker import FuncFormatter

    plt = pyplot()
    shown = [r for r in rows if not math.isnan(r.value)]
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(shown) + 1.6))
    ys = np.arange(len(shown))[::-1]
    kinds = {"on-policy mean": ("black", "logging policy, on its own log"), "replay": ("C0", "config entry, replay")}
    labelled = set()
    for y, r in zip(ys, shown, strict=True):
        colour, text = kinds.get(r.method, ("C1", "uniform policy, off-policy estimate"))
        label = None if text in labelled else text
        labelled.add(text)
        errors = [[max(r.value - r.low, 0.0)], [max(r.high - r.value, 0.0)]]
        ax.errorbar(r.value, y, xerr=errors, fmt="o", color=colour, capsize=3, label=label)
    ax.axvline(shown[0].value, color="0.6", linestyle=":", linewidth=1)
    ax.set_yticks(ys, [f"{r.policy}: {r.method}" for r in shown])
    ax.set_xlabel("value (mean reward per round), 95% intervals")
    ax.set_title(f"{Path(log.source).name}: {log.n:,} rounds, K = {log.n_arms}, {len(log.silo_names)} silo(s)")
    ax.xaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
