"""The privacy-utility frontier: final regret against epsilon (``fedbandits frontier CONFIG``).

For one environment, every private algorithm of the config (an entry with an ``epsilon`` and,
where the algorithm has a protocol, a private one) is run at every epsilon of a grid (default
seven log-spaced values from 0.1 to 10), next to two reference lines that do not depend on
epsilon: *independent agents* (``linucb-independent``: nothing leaves a silo) and the
*non-private federation* (the config's first FedLinUCB entry with ``protocol = "none"`` and the
non-private tuning -- lambda = ``reg``, Lemma C.4's radius -- or the default FedLinUCB if it has
none).  Everything runs as **one** experiment, so all variants see the
same contexts and rewards (common random numbers) and the differences are the privacy's.

The frontier tunes nothing: every variant runs with the hyperparameters its config entry states,
on the config's seeds, so no selection can leak into what it reports.

Output (in ``--out``): ``frontier.csv`` (one row per variant and epsilon, and one per reference
line), ``frontier.png`` (regret against epsilon, log scale, reference lines dashed, the crossing
point marked), ``frontier.md`` (the table and the crossing points) and the usual results files of
the underlying experiment.  The *crossing point* of a private algorithm is the epsilon from which
its mean final regret is at most the independent agents' (linear interpolation in log epsilon
between the last grid point above and the first at or below; "below the grid" if it already is at
the smallest epsilon, none if it never gets there on the grid).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.config import ComponentConfig, Config, ConfigError, config_from_dict, default_label, is_private
from fedbandits.plots import frontier_figure, plain_number, runs_text
from fedbandits.privacy.calibration import MAX_EPSILON
from fedbandits.sim.results import Results

#: 0.1 ... 10, seven points, log-spaced (rounded to three significant digits)
DEFAULT_EPSILONS = tuple(float(f"{e:.3g}") for e in np.logspace(-1, 1, 7))
INDEPENDENT = "independent agents"
NON_PRIVATE = "non-private federation"
#: FedLinUCB fields that only a private protocol takes
_PRIVATE_ONLY = ("mechanism", "colluders", "dropouts", "modulus_bits", "granularity", "lazy")
#: the tuning FedLinUCB resolves from the protocol (``auto``): the reference takes the non-private one
_TUNING = ("regularizer", "radius", "beta")


def parse_epsilons(text: str) -> tuple[float, ...]:
    """``--epsilons``: comma-separated, each in (0, MAX_EPSILON], at least two distinct values."""
    values = []
    for item in str(text).split(","):
        try:
            value = float(item)
        except ValueError:
            raise ValueError(f"--epsilons must be numbers separated by commas, got {item.strip()!r}") from None
        if not 0.0 < value <= MAX_EPSILON or math.isnan(value):
            raise ValueError(f"--epsilons: every epsilon must be in (0, {MAX_EPSILON:g}], got {value:g}")
        values.append(value)
    grid = tuple(sorted(set(values)))
    if len(grid) < 2:
        raise ValueError(f"--epsilons needs at least two distinct values, got {text!r}")
    return grid


def _is_private(alg: ComponentConfig) -> bool:
    return is_private(alg.params)


def _line_names(private: list[ComponentConfig]) -> list[str]:
    """Each private entry's line: its label, or for an entry labelled by default ("fedlinucb ldp
    eps=1") that label without the epsilon the frontier replaces ("fedlinucb ldp"), unless two
    entries would then share a name."""
    names = [
        default_label(a.name, a.params, epsilon=False) if a.label == default_label(a.name, a.params) else a.label
        for a in private
    ]
    return names if len(set(names)) == len(names) else [a.label for a in private]


def _without_stream(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "noise_stream"}


def _label(base: str, epsilon: float) -> str:
    return f"{base} @ eps={epsilon:g}"


@dataclass(frozen=True)
class FrontierPlan:
    """The experiment a frontier runs, and which of its labels is which variant."""

    config: Config
    epsilons: tuple[float, ...]
    variants: dict[str, tuple[str, float]]  # run label -> (private algorithm's label, epsilon)
    #: the name of the config the frontier was planned from (``config``'s adds "-frontier": its results folder)
    name: str


def frontier_plan(config: Config, epsilons: tuple[float, ...] = DEFAULT_EPSILONS) -> FrontierPlan:
    """Expand ``config`` into one experiment: every private entry at every epsilon, plus the two
    reference lines.  Non-private entries of the config other than the references are left out."""
    private = [a for a in config.algorithms if _is_private(a)]
    if not private:
        raise ConfigError(
            "frontier needs at least one private algorithm (an entry with epsilon and a private protocol); "
            f"the config has {', '.join(repr(a.label) for a in config.algorithms)}"
        )
    entries: list[dict[str, Any]] = []
    variants: dict[str, tuple[str, float]] = {}
    for alg, base in zip(private, _line_names(private), strict=True):
        for eps in epsilons:
            # the variants are new entries: each draws the noise of its own position, not the original's stream
            entry = {**_without_stream(alg.to_dict()), "epsilon": eps, "label": _label(base, eps)}
            entries.append(entry)
            variants[entry["label"]] = (base, eps)
    federated = next((a for a in config.algorithms if a.name == "fedlinucb"), None)
    reference = {"name": "fedlinucb"}
    if federated is not None:
        reference = {k: v for k, v in _without_stream(federated.to_dict()).items() if k not in _PRIVATE_ONLY + _TUNING}
    entries.append({**reference, "protocol": "none", "label": NON_PRIVATE})
    entries.append({"name": "linucb-independent", "label": INDEPENDENT})
    data = config.to_dict()
    data["algorithms"] = entries
    data["experiment"] = {**data["experiment"], "name": f"{config.experiment.name}-frontier"}
    return FrontierPlan(config_from_dict(data), epsilons, variants, config.experiment.name)


def crossing(epsilons: tuple[float, ...], regrets: list[float], alone: float) -> float | None:
    """The epsilon from which ``regrets`` (one per grid point) are at most ``alone``: 0.0 if already at
    the smallest, the log-linear interpolation between the last point above and the first at or
    below otherwise, None if no grid point gets there."""
    for i, value in enumerate(regrets):
        if value <= alone:
            if i == 0:
                return 0.0
            lo, hi = math.log(epsilons[i - 1]), math.log(epsilons[i])
            before = regrets[i - 1]
            share = (before - alone) / (before - value)  # before > alone >= value
            return math.exp(lo + share * (hi - lo))
    return None


def describe_crossing(point: float | None, epsilons: tuple[float, ...]) -> str:
    if point is None:
        return f"never on [{epsilons[0]:g}, {epsilons[-1]:g}]"
    if point == 0.0:
        return f"already at eps = {epsilons[0]:g}"
    return f"eps ~ {point:.3g}"


def frontier_rows(plan: FrontierPlan, results: Results) -> list[dict[str, Any]]:
    rows = []
    for label, res in results.algorithms.items():
        final = res.final_regret
        base, eps = plan.variants.get(label, (label, math.nan))
        rows.append(
            {
                "algorithm": base,
                "epsilon": eps,
                "final_regret_mean": float(final.mean()),
                "final_regret_std": float(final.std(ddof=1)) if final.size > 1 else 0.0,
                "runs": int(final.size),
                "epsilon_spent": res.report.get("epsilon_spent", ""),
                "guarantee": res.report.get("guarantee", ""),
            }
        )
    return rows


def crossings(plan: FrontierPlan, rows: list[dict[str, Any]]) -> dict[str, float | None]:
    alone = next(r["final_regret_mean"] for r in rows if r["algorithm"] == INDEPENDENT)
    out = {}
    for base in dict.fromkeys(b for b, _ in plan.variants.values()):
        curve = {r["epsilon"]: r["final_regret_mean"] for r in rows if r["algorithm"] == base}
        out[base] = crossing(plan.epsilons, [curve[e] for e in plan.epsilons], alone)
    return out


def write_frontier(plan: FrontierPlan, results: Results, out: Path) -> list[Path]:
    """frontier.csv, frontier.md and frontier.png in ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    rows = frontier_rows(plan, results)
    points = crossings(plan, rows)
    csv_path = out / "frontier.csv"
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    exp, env = plan.config.experiment, plan.config.environment
    lines = [
        f"# Privacy-utility frontier: {plan.name}",
        "",
        f"{env.name}, M = {env.params.agents}, T = {exp.horizon}, "
        f"{runs_text(exp.runs)}, seed {exp.seed}; no tuning (every variant runs with its config's hyperparameters).",
        "",
        "| algorithm | epsilon | final regret | epsilon spent | guarantee |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        eps = "-" if math.isnan(r["epsilon"]) else f"{r['epsilon']:g}"
        spent = r["epsilon_spent"]
        spent_text = f"{spent:.4g}" if isinstance(spent, int | float) else "-"
        lines.append(
            f"| {r['algorithm']} | {eps} | {r['final_regret_mean']:.0f} ± {r['final_regret_std']:.0f} | "
            f"{spent_text} | {r['guarantee'] or '-'} |"
        )
    lines += ["", "Where federation starts to beat going alone (mean final regret <= independent agents'):", ""]
    lines += [f"* {base}: {describe_crossing(p, plan.epsilons)}" for base, p in points.items()]
    md_path = out / "frontier.md"
    md_path.write_text("\n".join(lines) + "\n")
    title = f"{plan.name}: {env.name}, M = {env.params.agents}, T = {plain_number(exp.horizon)}"
    png = frontier_figure(rows, points, plan.epsilons, out / "frontier.png", title=title)
    return [csv_path, md_path, png]
