"""The privacy-utility frontier: final regret against epsilon (``fedbandits frontier CONFIG``).

For one environment, every private algorithm of the config (an entry with an ``epsilon`` and,
where the algorithm has a protocol, a private one) is run at every epsilon of a grid (default
seven log-spaced values from 0.1 to 10), next to two reference lines that do not depend on
epsilon: *independent agents* (``linucb-independent``: nothing leaves a silo) and the
*non-private federation* (the config's first FedLinUCB entry with ``protocol = "none"`` and the
non-private defaults -- lambda = ``reg``, the constant radius beta = 1 -- or the default FedLinUCB if
it has none).  Everything runs as **one** experiment, so all variants see the
same contexts and rewards (common random numbers) and the differences are the privacy's.

**Tuning.**  Without a grid the frontier tunes nothing: every variant runs with the
hyperparameters its config entry states and the reference lines with the library's defaults, and
every output says the lines are *untuned* -- a gap between two of them may then be the tuning, not
the method.  With a grid (``--grid GRID.toml``, :mod:`fedbandits.experiments.tune`'s format) every
line it draws is tuned by ``fedbandits tune``'s machinery and rule before the report runs: the
grid has one table per line -- each private entry by its config label (the same table at every
epsilon, each epsilon tuned on its own), ``"independent agents"`` and ``"non-private federation"``
-- and must name every line (equal tuning); the tuning runs on a tuning seed disjoint from the
report seeds, then the tuned lines run on the config's seeds, and every output says they are tuned
and with what.

Output (in ``--out``): ``frontier.csv`` and ``frontier.json`` (one row per variant and epsilon,
and one per reference line, each with how it was tuned), ``frontier.png`` (regret against
epsilon, log scale, reference lines dashed, the crossing point marked, the tuning in the title),
``frontier.md`` (the table and the crossing points) and the usual results files of the underlying
experiment; with a grid, the tuning's record in ``tune/`` (``tuned.toml``, ``tune.json``, the
tuning runs' results).  The *crossing point* of a private algorithm is the epsilon from which its
mean final regret is at most the independent agents' (linear interpolation in log epsilon between
the last grid point above and the first at or below; "below the grid" if it already is at the
smallest epsilon, none if it never gets there on the grid).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.config import ComponentConfig, Config, ConfigError, config_from_dict, default_label, is_private
from fedbandits.experiments.tune import DEFAULT_TUNING_RUNS, RULE, Grid, TunePlan, Tuning, describe, tune_plan
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
#: what the outputs say of lines no grid tuned
UNTUNED = "untuned: library defaults and the config's values"
_UNTUNED_PRIVATE = "untuned: the config's values"
_UNTUNED_REFERENCE = "untuned: library defaults"


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
    """The experiment a frontier runs, which of its labels is which variant, and (once tuned) the
    tuning that chose its lines' hyperparameters."""

    config: Config
    epsilons: tuple[float, ...]
    variants: dict[str, tuple[str, float]]  # run label -> (private algorithm's label, epsilon)
    #: the name of the config the frontier was planned from (``config``'s adds "-frontier": its results folder)
    name: str
    tuning: Tuning | None = None

    def lines(self) -> dict[str, tuple[str, ...]]:
        """Every line the frontier draws -> the labels of its entries in the experiment: a private
        algorithm's label -> its variants (one per epsilon); each reference line -> itself."""
        out: dict[str, list[str]] = {}
        for label, (base, _) in self.variants.items():
            out.setdefault(base, []).append(label)
        return {
            **{base: tuple(labels) for base, labels in out.items()},
            NON_PRIVATE: (NON_PRIVATE,),
            INDEPENDENT: (INDEPENDENT,),
        }

    def caption(self) -> str:
        """How the lines were tuned, in one line (the figure's caption, frontier.md, the printout)."""
        if self.tuning is None:
            return UNTUNED
        return f"tuned on seed {self.tuning.plan.seed}, rule: smallest mean final regret"

    def line_tuning(self, label: str) -> str:
        """How the entry ``label`` of the experiment was tuned: its row's ``tuning`` field."""
        if self.tuning is None:
            return _UNTUNED_PRIVATE if label in self.variants else _UNTUNED_REFERENCE
        scored = self.tuning.scores[label]
        return f"tuned on seed {self.tuning.plan.seed}: {describe(scored[self.tuning.chosen[label]].candidate.values)}"


def frontier_plan(config: Config, epsilons: tuple[float, ...] = DEFAULT_EPSILONS) -> FrontierPlan:
    """Expand ``config`` into one experiment: every private entry at every epsilon, plus the two
    reference lines.  Non-private entries of the config other than the references are left out."""
    private = [a for a in config.algorithms if _is_private(a)]
    if not private:
        raise ConfigError(
            "frontier needs at least one private algorithm (an entry with epsilon and a private protocol); "
            f"the config has {', '.join(repr(a.label) for a in config.algorithms)}"
        )
    for alg in private:
        if alg.label in (INDEPENDENT, NON_PRIVATE):
            raise ConfigError(
                f"algorithm label {alg.label!r} is the name of one of the frontier's reference lines: "
                "give the private entry another label"
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
    # the reward offset describes the rewards, not a learner: both reference lines centre them alike
    offset = {"reward_offset": reference["reward_offset"]} if "reward_offset" in reference else {}
    entries.append({"name": "linucb-independent", "label": INDEPENDENT, **offset})
    data = config.to_dict()
    data["algorithms"] = entries
    data["experiment"] = {**data["experiment"], "name": f"{config.experiment.name}-frontier"}
    return FrontierPlan(config_from_dict(data), epsilons, variants, config.experiment.name)


def frontier_tune_plan(
    plan: FrontierPlan,
    grid: Grid,
    *,
    seed: int | None = None,
    runs: int = DEFAULT_TUNING_RUNS,
    horizon: int | None = None,
) -> TunePlan:
    """The tuning of every line of ``plan`` with ``grid`` (nothing runs): ``fedbandits tune``'s
    plan for the frontier's experiment, each grid table applied to every entry of its line.

    One-line ConfigError if the grid names a line the frontier does not draw or leaves one out
    (every line is tuned, or none is); otherwise tune_plan's checks (parameters, values, seeds)."""
    lines = plan.lines()
    names = ", ".join(json.dumps(line) for line in lines)
    for key in grid:
        if key not in lines:
            raise ConfigError(f"grid.{json.dumps(key)}: the frontier draws no line with that label; its lines: {names}")
    missing = [line for line in lines if line not in grid]
    if missing:
        raise ConfigError(
            f"the grid leaves out {', '.join(json.dumps(m) for m in missing)}: a tuned frontier tunes every line it "
            f"draws (equal tuning), so give a table for each of {names}"
        )
    return tune_plan(plan.config, grid, seed=seed, runs=runs, horizon=horizon, targets=lines)


def tuned_frontier(plan: FrontierPlan, tuning: Tuning) -> FrontierPlan:
    """``plan`` with every line's chosen values: what the report runs, on the config's seeds."""
    return FrontierPlan(tuning.config, plan.epsilons, plan.variants, plan.name, tuning)


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
                "tuning": plan.line_tuning(label),
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
    json_path = out / "frontier.json"
    json_path.write_text(
        json.dumps(frontier_record(plan, list(results.algorithms), rows, points), indent=2) + "\n", encoding="utf-8"
    )
    exp, env = plan.config.experiment, plan.config.environment
    lines = [
        f"# Privacy-utility frontier: {plan.name}",
        "",
        f"{env.name}, M = {env.params.agents}, T = {exp.horizon}, {runs_text(exp.runs)}, seed {exp.seed}.",
        "",
        f"**{tuning_statement(plan)}**",
        "",
        "| algorithm | epsilon | final regret | epsilon spent | guarantee | tuning |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        eps = "-" if math.isnan(r["epsilon"]) else f"{r['epsilon']:g}"
        spent = r["epsilon_spent"]
        spent_text = f"{spent:.4g}" if isinstance(spent, int | float) else "-"
        lines.append(
            f"| {r['algorithm']} | {eps} | {r['final_regret_mean']:.0f} ± {r['final_regret_std']:.0f} | "
            f"{spent_text} | {r['guarantee'] or '-'} | {r['tuning']} |"
        )
    lines += ["", "Where federation starts to beat going alone (mean final regret <= independent agents'):", ""]
    lines += [f"* {base}: {describe_crossing(p, plan.epsilons)}" for base, p in points.items()]
    md_path = out / "frontier.md"
    md_path.write_text("\n".join(lines) + "\n")
    title = f"{plan.name}: {env.name}, M = {env.params.agents}, T = {plain_number(exp.horizon)}\n{plan.caption()}"
    png = frontier_figure(rows, points, plan.epsilons, out / "frontier.png", title=title)
    return [csv_path, json_path, md_path, png]


def tuning_statement(plan: FrontierPlan) -> str:
    """One sentence on how the lines were tuned (frontier.md, the printout)."""
    if plan.tuning is None:
        return (
            f"Lines {UNTUNED} (NOT tuned): the private variants run with their config entries' hyperparameters, "
            "the reference lines with the library's defaults, so a gap between two lines may be the tuning, "
            "not the method; `--grid` tunes every line by one rule (docs/tuning.md)."
        )
    exp = plan.tuning.plan.tuning.experiment
    return (
        f"Every line tuned on seed {plan.tuning.plan.seed} ({exp.runs} run(s) of horizon {exp.horizon}; "
        f"report seed {plan.config.experiment.seed}), each private variant at each epsilon on its own; "
        f"rule: {RULE}; the choices are in the tuning column and tune/tune.json."
    )


def frontier_record(
    plan: FrontierPlan, labels: list[str], rows: list[dict[str, Any]], points: dict[str, float | None]
) -> dict[str, Any]:
    """frontier.json: whether and how the lines were tuned, every row (``labels``: their entries in the
    experiment, in order) with its chosen values, and the crossing points."""
    tuning = plan.tuning
    record: dict[str, Any] = {
        "tuned": tuning is not None,
        "caption": plan.caption(),
        "rule": None if tuning is None else RULE,
        "tuning_seed": None if tuning is None else tuning.plan.seed,
        "tuning_runs": None if tuning is None else tuning.plan.tuning.experiment.runs,
        "tuning_horizon": None if tuning is None else tuning.plan.tuning.experiment.horizon,
        "grid": None if tuning is None else tuning.plan.grid,
        "report_seed": plan.config.experiment.seed,
        "epsilons": list(plan.epsilons),
        "rows": [],
        "crossings": points,
    }
    for label, r in zip(labels, rows, strict=True):
        chosen = None if tuning is None else tuning.scores[label][tuning.chosen[label]].candidate.values
        record["rows"].append({**r, "epsilon": None if math.isnan(r["epsilon"]) else r["epsilon"], "chosen": chosen})
    return record
