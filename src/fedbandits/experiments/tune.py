"""Hyperparameter tuning on seeds no report uses (``fedbandits tune CONFIG --grid GRID``).

The grid is a TOML file with one table per algorithm entry of the config, named by the entry's
label, each parameter a list of candidate values; the candidates are the Cartesian product of the
lists (the last parameter varying fastest)::

    [grid."FedLinUCB B=25"]
    radius = ["constant"]
    beta = [0.3, 1, 3]
    reg = [1, 2]

Every candidate is the config's entry with those values, validated exactly as ``run`` validates
a config (and against the tuning horizon).  All candidates of all entries run as **one**
experiment, so they see the same contexts and rewards (common random numbers) and the memory
estimate counts every one of them.

**Seeds.**  Run r of a config draws its environment from ``SeedSequence(seed, spawn_key=(r, 0))``
and entry a's privacy noise from ``SeedSequence(noise_seed, spawn_key=(r, 1, a))``
(:mod:`fedbandits.sim.seeding`): the config's *report seeds* are ``seed`` and ``noise_seed`` (when
given).  The tuning experiment uses one *tuning seed* S for both (its noise_seed is unset), so its
runs draw from ``SeedSequence(S, ...)`` only.  S must differ from every report seed: SeedSequences
of different entropy give independent streams whatever the spawn keys, so no tuning run shares a
random number with a report run, whatever their run indices.  A tuning seed equal to a report seed
is refused.  The default is 1000 (the seed the library's own noise-aware defaults were tuned on,
which no report uses), or the first of 1001, 1002, ... that is no report seed -- so the tuned
choice does not depend on the report seed unless the report seed is 1000.

**Rule** (stated before the run, recorded with the result): per entry, the candidate with the
smallest mean final pseudo-regret over the tuning runs; ties go to the first candidate in grid
order.  Default: 4 tuning runs at the config's horizon.

Output (in ``--out``): ``tuned.toml`` (the config with each tuned entry's chosen values, runnable
by ``fedbandits run``; a comment header states the grid, seed, runs, horizon and rule),
``tune.json`` (the same, and every candidate's mean, std and per-run final regret), and the
tuning experiment's results in ``tuning/``.
"""

from __future__ import annotations

import itertools
import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from fedbandits._version import __version__
from fedbandits.config import Config, ConfigError, config_from_dict
from fedbandits.core.validation import check_int
from fedbandits.registry import ALGORITHMS
from fedbandits.sim.results import Results
from fedbandits.sim.runner import run_experiment

DEFAULT_TUNING_SEED = 1000
DEFAULT_TUNING_RUNS = 4
RULE = (
    "per entry, the candidate with the smallest mean final pseudo-regret over the tuning runs; "
    "ties: the first candidate in grid order"
)
#: entry keys that name an entry rather than parameterise it
_NOT_TUNABLE = ("name", "label", "noise_stream")

Grid = dict[str, dict[str, list[Any]]]


def _where(label: str, param: str | None = None) -> str:
    head = f"grid.{json.dumps(label)}"
    return head if param is None else f"{head}.{param}"


def parse_grid(data: Any, source: str = "the grid") -> Grid:
    """Check the shape of a grid (``{"grid": {label: {parameter: [values, ...]}}}``, as the TOML file
    reads) and return its ``grid`` table; ConfigError in one line naming the bad key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source} must be a table with a [grid] table, got {type(data).__name__}")
    unknown = sorted(set(data) - {"grid"})
    if unknown:
        raise ConfigError(f"{source}: unknown top-level key(s) {unknown}; valid: 'grid'")
    grid = data.get("grid")
    if grid is None or grid == {}:
        raise ConfigError(
            f'{source} is empty: give at least one [grid."LABEL"] table with a list of candidate values per parameter'
        )
    if not isinstance(grid, dict):
        raise ConfigError(f'{source}: grid must be a table of [grid."LABEL"] tables, got {type(grid).__name__}')
    out: Grid = {}
    for label, entry in grid.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"{_where(label)} must be a table of parameter = [values], got {type(entry).__name__}")
        if not entry:
            raise ConfigError(f"{_where(label)} is empty: give at least one parameter = [values]")
        params: dict[str, list[Any]] = {}
        for param, values in entry.items():
            if param in _NOT_TUNABLE:
                raise ConfigError(f"{_where(label, param)}: an entry's {param} is not a parameter and cannot be tuned")
            if not isinstance(values, list) or not values:
                raise ConfigError(
                    f"{_where(label, param)} must be a non-empty list of candidate values, got {values!r}"
                )
            repeated = [v for i, v in enumerate(values) if v in values[:i]]
            if repeated:
                raise ConfigError(f"{_where(label, param)} repeats {repeated[0]!r}: every candidate value once")
            params[param] = list(values)
        out[label] = params
    return out


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid TOML file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read grid {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"malformed TOML in grid {path}: {exc}") from None
    return parse_grid(data, source=f"grid {path}")


def report_seeds(config: Config) -> tuple[int, ...]:
    """The entropies the config's own runs draw from: ``seed`` and ``noise_seed`` (when given)."""
    exp = config.experiment
    return (exp.seed,) if exp.noise_seed is None or exp.noise_seed == exp.seed else (exp.seed, exp.noise_seed)


def tuning_seed(config: Config, seed: int | None = None) -> int:
    """``seed`` if it is no report seed of ``config`` (ValueError in one line otherwise); None: the
    default, DEFAULT_TUNING_SEED or the first integer above it that is no report seed."""
    used = report_seeds(config)
    if seed is None:
        seed = DEFAULT_TUNING_SEED
        while seed in used:
            seed += 1
        return seed
    check_int("tuning seed", seed, low=0)
    if seed in used:
        names = f"seed = {config.experiment.seed}" + (
            "" if config.experiment.noise_seed is None else f", noise_seed = {config.experiment.noise_seed}"
        )
        raise ValueError(
            f"tuning seed {seed} overlaps the report seeds ({names}): tune on a seed the config's runs do not use"
        )
    return seed


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.12g}"
    return str(value)


def describe(values: dict[str, Any]) -> str:
    """``beta=0.3, reg=1``: a candidate's grid values."""
    return ", ".join(f"{k}={_value_text(v)}" for k, v in values.items())


@dataclass(frozen=True)
class Candidate:
    """One point of an entry's grid: the entry's label, its grid values, its label in the tuning run."""

    entry: str
    values: dict[str, Any]
    label: str


@dataclass(frozen=True)
class TunePlan:
    """The config to tune, its grid, and the one experiment that runs every candidate."""

    config: Config
    grid: Grid
    seed: int
    tuning: Config
    candidates: tuple[Candidate, ...]
    keys: dict[str, str]  # tuned entry's label -> the grid label whose table it was tuned with


def tune_plan(
    config: Config,
    grid: Grid,
    *,
    seed: int | None = None,
    runs: int = DEFAULT_TUNING_RUNS,
    horizon: int | None = None,
    targets: Mapping[str, Sequence[str]] | None = None,
) -> TunePlan:
    """Check the grid against ``config`` and expand it into the tuning experiment (nothing runs).

    ``targets`` maps each label a grid may name to the labels of the config entries its table
    tunes, each entry on its own (default: every entry's label to itself); a derived config such as
    a frontier's tunes all the epsilon variants of one entry with one table this way.

    Every error is one line: an unknown label, a parameter the algorithm does not have, a value
    the config validation refuses, a tuning seed that is a report seed, runs or horizon out of range.
    """
    check_int("tuning runs", runs, low=1)
    if horizon is not None:
        check_int("tuning horizon", horizon, low=1, high=config.experiment.horizon)
    seed = tuning_seed(config, seed)
    labels = [a.label for a in config.algorithms]
    if targets is None:
        targets = {label: (label,) for label in labels}
    data = config.to_dict()
    entries: list[dict[str, Any]] = []
    candidates: list[Candidate] = []
    for key, params in grid.items():
        if key not in targets:
            raise ConfigError(
                f"{_where(key)}: no algorithm entry has that label; the config's labels: "
                f"{', '.join(json.dumps(lab) for lab in targets)}"
            )
        for label in targets[key]:
            where = _where(key) if label == key else f"{_where(key)} (for {json.dumps(label)})"
            index = labels.index(label)
            alg = config.algorithms[index]
            valid = [f.name for f in fields(ALGORITHMS[alg.name].params)]
            for param in params:
                if param not in valid:
                    raise ConfigError(
                        f"{_where(key, param)}: algorithm {alg.name!r} has no parameter {param!r}; "
                        f"its parameters: {', '.join(valid)}"
                    )
            base = data["algorithms"][index]
            for combo in itertools.product(*params.values()):
                values = dict(zip(params, combo, strict=True))
                # the same validation as `run`: the config with this entry replaced
                trial = {
                    **data,
                    "algorithms": [*data["algorithms"][:index], {**base, **values}, *data["algorithms"][index + 1 :]],
                }
                try:
                    config_from_dict(trial)
                except ConfigError as exc:
                    raise ConfigError(f"{where} candidate {describe(values)}: {exc}") from None
                candidate = Candidate(label, values, f"{label} [{describe(values)}]")
                # a new entry of the tuning run: it draws the noise of its own position there
                entries.append(
                    {**{k: v for k, v in base.items() if k != "noise_stream"}, **values, "label": candidate.label}
                )
                candidates.append(candidate)
    exp = {k: v for k, v in data["experiment"].items() if k != "noise_seed"}
    exp.update(
        seed=seed,
        runs=runs,
        horizon=config.experiment.horizon if horizon is None else horizon,
        name=f"{config.experiment.name}-tuning",
    )
    try:
        tuning = config_from_dict({**data, "experiment": exp, "algorithms": entries})
    except ConfigError as exc:
        raise ConfigError(f"the tuning experiment (horizon {exp['horizon']}): {exc}") from None
    keys = {label: key for key in grid for label in targets[key]}
    return TunePlan(config, grid, seed, tuning, tuple(candidates), keys)


def with_values(config: Config, chosen: Mapping[str, Mapping[str, Any]]) -> Config:
    """``config`` with each entry named in ``chosen`` (by label) given those values, named "-tuned"."""
    data = config.to_dict()
    labels = [a.label for a in config.algorithms]
    for entry, values in chosen.items():
        i = labels.index(entry)
        data["algorithms"][i] = {**data["algorithms"][i], **values}
    data["experiment"] = {**data["experiment"], "name": f"{config.experiment.name}-tuned"}
    return config_from_dict(data)


@dataclass(frozen=True)
class Scored:
    candidate: Candidate
    final_regret: tuple[float, ...]  # one per tuning run

    @property
    def mean(self) -> float:
        return float(np.mean(self.final_regret))

    @property
    def std(self) -> float:
        return float(np.std(self.final_regret, ddof=1)) if len(self.final_regret) > 1 else 0.0


def choose(scored: list[Scored]) -> int:
    """The rule: the index of the smallest mean final regret, the first on ties (NaN never wins)."""
    means = [s.mean if math.isfinite(s.mean) else math.inf for s in scored]
    return min(range(len(means)), key=means.__getitem__)


@dataclass(frozen=True)
class Tuning:
    """What a tuning run found: every candidate's scores, the choice per entry and the tuned config."""

    plan: TunePlan
    results: Results
    scores: dict[str, list[Scored]]  # entry label -> its candidates in grid order
    chosen: dict[str, int]  # entry label -> index of the chosen candidate

    @property
    def config(self) -> Config:
        """The config with each tuned entry's chosen values (its other entries unchanged)."""
        chosen = {entry: self.scores[entry][index].candidate.values for entry, index in self.chosen.items()}
        return with_values(self.plan.config, chosen)

    def task_seconds(self) -> float:
        """Wall-clock seconds inside the tuning's tasks, summed over tasks (environment and every candidate):
        the cost on one core whatever ran the tasks in parallel; on a loaded machine it overstates CPU time."""
        return self.results.env_seconds + sum(r.seconds for r in self.results.algorithms.values())

    def record(self) -> dict[str, Any]:
        exp = self.plan.tuning.experiment
        return {
            "fedbandits": __version__,
            "rule": RULE,
            "grid": self.plan.grid,
            "tuning_seed": self.plan.seed,
            "report_seeds": list(report_seeds(self.plan.config)),
            "seeding": f"run r of the tuning draws from SeedSequence({self.plan.seed}, spawn_key=(r, ...)), "
            "environment and privacy noise alike; the report's runs from its seed and noise_seed",
            "runs": exp.runs,
            "horizon": exp.horizon,
            "report_horizon": self.plan.config.experiment.horizon,
            "wall_seconds": self.results.wall_seconds,
            "task_seconds": self.task_seconds(),
            "entries": {
                entry: {
                    "grid_label": self.plan.keys[entry],
                    "candidates": [
                        {
                            "values": s.candidate.values,
                            "final_regret_mean": s.mean,
                            "final_regret_std": s.std,
                            "final_regret": list(s.final_regret),
                        }
                        for s in scored
                    ],
                    "chosen": scored[self.chosen[entry]].candidate.values,
                    "all_alike": entry in self.inert(),
                }
                for entry, scored in self.scores.items()
            },
        }

    def inert(self) -> list[str]:
        """Entries whose candidates all ended with the same final regret in every run: the grid changed
        nothing they do (e.g. ``beta`` with ``radius = "theory"``), and the rule fell back on grid order."""
        return [
            entry
            for entry, scored in self.scores.items()
            if len(scored) > 1 and all(s.final_regret == scored[0].final_regret for s in scored)
        ]

    def table(self) -> str:
        """Per entry, every candidate's mean ± std final regret; ``*`` marks the choice."""
        lines = []
        for entry, scored in self.scores.items():
            lines.append(entry)
            width = max(len(describe(s.candidate.values)) for s in scored)
            for i, s in enumerate(scored):
                mark = "*" if i == self.chosen[entry] else " "
                lines.append(f"  {mark} {describe(s.candidate.values):<{width}}  {s.mean:10.1f} ± {s.std:.1f}")
            if entry in self.inert():
                lines.append("    every candidate ended alike in every run: the grid changes nothing this entry does")
        return "\n".join(lines)

    def header(self, config_source: str = "the config", grid_source: str = "the grid") -> list[str]:
        exp = self.plan.tuning.experiment
        seeds = ", ".join(map(str, report_seeds(self.plan.config)))
        lines = [
            f"Tuned by `fedbandits tune` (fedbandits {__version__}) from {config_source} with {grid_source}; "
            "every candidate's scores are in tune.json beside this file.",
            f"Rule (stated before the run): {RULE}.",
            f"Tuning: {exp.runs} run(s) of horizon {exp.horizon} on tuning seed {self.plan.seed} "
            f"(this config's report seeds: {seeds}; report on seeds other than {self.plan.seed}).",
        ]
        for entry, scored in self.scores.items():
            best = scored[self.chosen[entry]]
            lines.append(
                f"{entry}: {describe(best.candidate.values)} of {len(scored)} candidate(s) "
                f"(grid {json.dumps(self.plan.grid[self.plan.keys[entry]])}; "
                f"mean final regret {best.mean:.1f} ± {best.std:.1f})"
            )
        return lines


def score(plan: TunePlan, results: Results) -> Tuning:
    """Apply the rule to the tuning experiment's results."""
    scores: dict[str, list[Scored]] = {}
    for c in plan.candidates:
        finals = results.algorithms[c.label].final_regret
        scores.setdefault(c.entry, []).append(Scored(c, tuple(float(v) for v in finals)))
    return Tuning(plan, results, scores, {entry: choose(s) for entry, s in scores.items()})


def run_tuning(plan: TunePlan, *, checkpoint: str | Path | None = None, **execution: Any) -> Tuning:
    """Run the tuning experiment (``execution``: run_experiment's workers, backend, address,
    max_retries, resume, log, progress, max_memory) and apply the rule."""
    results = run_experiment(plan.tuning, checkpoint=checkpoint, **execution)
    return score(plan, results)


def write_tuning(
    tuning: Tuning, out: str | Path, config_source: str = "the config", grid_source: str = "the grid"
) -> list[Path]:
    """``tuned.toml``, ``tune.json`` and the tuning results (``tuning/``) in ``out``; returns the two files."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tuning.results.save(out / "tuning")
    toml_path = out / "tuned.toml"
    header = "".join(f"# {line}\n" for line in tuning.header(config_source, grid_source))
    toml_path.write_text(header + "\n" + tomli_w.dumps(tuning.config.to_dict()), encoding="utf-8")
    record = {"config": config_source, "grid_file": grid_source, **tuning.record()}
    json_path = out / "tune.json"
    json_path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return [toml_path, json_path]
