"""Tuning on logged data the report does not use (``fedbandits evaluate CONFIG --tune GRID.toml``).

Every line of an evaluation table gets the same effort: one grid per entry (the format of
``fedbandits tune``, :mod:`fedbandits.experiments.tune`), every candidate replayed on the **first**
``share`` of every silo's rounds (in log order: the earlier days), and the entry's candidate of the
highest mean replayed reward chosen (ties: the first in grid order; a candidate that accepted
nothing never wins).  The table is then the tuned config replayed on the **rest** of the rounds,
which no candidate saw.  The tuning's privacy noise and random choices draw from the tuning seed of
``fedbandits tune`` (never a report seed), so no random number is shared either.

What the tuning rests on is stated with it: each candidate's value and the rounds it accepted.  On
a log with rare rewards (the Open Bandit Dataset's clicks, about 0.4%) a few hundred accepted rounds
hold a handful of clicks, and the choice among candidates is mostly noise: the rows say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fedbandits.config import Config
from fedbandits.evaluation.logs import BanditLog
from fedbandits.evaluation.replay import check_replayable, replay
from fedbandits.experiments.tune import Grid, describe, tune_plan, with_values

RULE = (
    "per entry, the candidate with the highest mean replayed reward on the tuning rounds (the first share of "
    "every silo's rounds); ties: the first in grid order; a candidate that accepted nothing never wins"
)


@dataclass(frozen=True)
class TunedCandidate:
    entry: str
    values: dict[str, Any]
    value: float
    accepted: int
    chosen: bool


@dataclass(frozen=True)
class LogTuning:
    config: Config
    candidates: tuple[TunedCandidate, ...]
    seed: int
    tuning_rounds: int
    report: BanditLog

    def lines(self) -> list[str]:
        """The tuning, one line per candidate (the chosen one starred)."""
        head = (
            f"tuned on the first {self.tuning_rounds} of {self.tuning_rounds + self.report.n} rounds "
            f"(tuning seed {self.seed}; {RULE})"
        )
        out = [head]
        for c in self.candidates:
            mark = "*" if c.chosen else " "
            out.append(f" {mark} {c.entry} [{describe(c.values)}]: {c.value:.5f} on {c.accepted} accepted rounds")
        return out

    def record(self) -> dict[str, Any]:
        return {
            "rule": RULE,
            "tuning_seed": self.seed,
            "tuning_rounds": self.tuning_rounds,
            "report_rounds": self.report.n,
            # a candidate that accepted nothing has no value: null, not -Infinity (not JSON)
            "candidates": [
                {**c.__dict__, "value": c.value if math.isfinite(c.value) else None} for c in self.candidates
            ],
        }


def tune_on_log(config: Config, grid: Grid, log: BanditLog, *, share: float = 0.5, seed: int = 0) -> LogTuning:
    """Tune every entry ``grid`` names on the first ``share`` of ``log``'s rounds (module docstring)."""
    if not 0 < share < 1:
        raise ValueError(f"--tune-share must be in (0, 1), got {share}")
    check_replayable(config)
    tuning_log, report = log.split(share)
    plan = tune_plan(config, grid, runs=config.experiment.runs)
    values: dict[str, list[tuple[float, int, dict[str, Any]]]] = {}
    for index, candidate in enumerate(plan.candidates):
        done = replay(plan.tuning, index, tuning_log, seed=seed)
        value = done.value if done.accepted and math.isfinite(done.value) else -math.inf
        values.setdefault(candidate.entry, []).append((value, done.accepted, candidate.values))
    chosen = {entry: _first_best([value for value, _, _ in rows]) for entry, rows in values.items()}
    out = [
        TunedCandidate(entry, params, value, accepted, i == chosen[entry])
        for entry, rows in values.items()
        for i, (value, accepted, params) in enumerate(rows)
    ]
    tuned = with_values(config, {entry: rows[chosen[entry]][2] for entry, rows in values.items()})
    return LogTuning(tuned, tuple(out), plan.seed, tuning_log.n, report)


def _first_best(values: list[float]) -> int:
    """The index of the highest value, the first on ties."""
    return max(range(len(values)), key=values.__getitem__)
