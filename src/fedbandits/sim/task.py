"""One task: a group of runs of a config simulated together in one process.

:func:`simulate_runs` plays every configured algorithm on the *same* contexts and reward noise
(common random numbers) for the runs of one task, batched over (runs, agents) with a Python loop
over time only; :func:`task_chunks` groups the runs into tasks (a function of the config alone).
Every backend (:mod:`fedbandits.sim.backends`) executes these tasks, the checkpoints
(:mod:`fedbandits.sim.checkpoint`) store their :class:`ChunkResult`, and
:func:`fedbandits.sim.runner.run_experiment` merges them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedbandits.config import Config
from fedbandits.registry import ALGORITHMS, ENVIRONMENTS, PolicyContext
from fedbandits.sim.seeding import choice_rngs, env_rngs, noise_rngs

#: rounds the regret ledger stores between flushes: at most this many, about _LEDGER_FLOATS means
_LEDGER_ROUNDS = 256
_LEDGER_FLOATS = 1 << 16


def time_grid(horizon: int, points: int) -> np.ndarray:
    """Rounds (1-based) at which cumulative regret is recorded; always ends at ``horizon``."""
    return np.unique(np.linspace(1, horizon, min(points, horizon)).round().astype(np.int64))


def check_rounds_available(env: Any, name: str, horizon: int) -> None:
    """Raise ValueError if ``env`` serves fewer than ``horizon`` rounds (a finite ``rounds_available``)."""
    available = getattr(env, "rounds_available", None)
    if available is not None and available < horizon:
        raise ValueError(
            f"environment {name} has {available} rounds available, but the horizon is T = {horizon} "
            "(lower the horizon or let the environment cycle)"
        )


@dataclass
class ChunkResult:
    runs: list[int]
    #: per algorithm label: cumulative group regret (r, G), per-agent final regret (r, M),
    #: sync rounds, messages, bytes (r,), seconds spent in the algorithm, its report
    curves: dict[str, np.ndarray]
    per_agent: dict[str, np.ndarray]
    sync_rounds: dict[str, np.ndarray]
    messages: dict[str, np.ndarray]
    bytes_sent: dict[str, np.ndarray]
    seconds: dict[str, float]
    reports: dict[str, dict[str, object]]
    env_seconds: float
    #: per algorithm label: the released messages, if recorded (see :mod:`fedbandits.sim.results`)
    transcripts: dict[str, list[dict[str, object]]] = field(default_factory=dict)


def simulate_runs(
    config: Config,
    runs: Sequence[int],
    on_step: Callable[[int], None] | None = None,
    record_transcript: bool = False,
) -> ChunkResult:
    """Simulate the runs ``runs`` of ``config`` together, batched over runs and agents.

    ``record_transcript`` keeps every message each silo's protocol released (private protocols).
    """
    runs = list(runs)
    exp = config.experiment
    env = ENVIRONMENTS[config.environment.name].factory(config.environment.params, env_rngs(exp.seed, runs))
    check_rounds_available(env, config.environment.name, exp.horizon)
    noise_seed = exp.seed if exp.noise_seed is None else exp.noise_seed
    policies = []
    for a, alg in enumerate(config.algorithms):
        ctx = PolicyContext(
            len(runs),
            env.n_agents,
            env.n_arms,
            env.dim,
            exp.horizon,
            noise_rngs(noise_seed, runs, config.noise_stream(a)),
            record_transcript=record_transcript,
            env=env,
            choice_rngs=choice_rngs(noise_seed, runs, config.noise_stream(a)),
        )
        policies.append(ALGORITHMS[alg.name].factory(alg.params, ctx))

    grid = time_grid(exp.horizon, exp.grid_points)
    labels = [alg.label for alg in config.algorithms]
    regret = _RegretLedger(labels, len(runs), env.n_agents, env.n_arms)
    curves = {lab: np.zeros((len(runs), grid.size)) for lab in labels}
    seconds = dict.fromkeys(labels, 0.0)
    env_seconds = 0.0
    g = 0
    for t in range(1, exp.horizon + 1):
        start = time.perf_counter()
        rnd = env.next_round()
        env_seconds += time.perf_counter() - start
        i = regret.record_means(rnd.means)
        for lab, policy in zip(labels, policies, strict=True):
            start = time.perf_counter()
            regret.actions[lab][i] = policy.step(rnd, env)
            seconds[lab] += time.perf_counter() - start
        if t == grid[g] or regret.full():
            regret.flush()
        if t == grid[g]:
            for lab in labels:
                curves[lab][:, g] = regret.per_agent[lab].sum(axis=1)
            g += 1
        if on_step is not None:
            on_step(t)
    per_agent = regret.per_agent
    return ChunkResult(
        runs=runs,
        curves=curves,
        per_agent=per_agent,
        sync_rounds={lab: p.sync_rounds.copy() for lab, p in zip(labels, policies, strict=True)},
        messages={lab: p.messages.copy() for lab, p in zip(labels, policies, strict=True)},
        bytes_sent={lab: p.bytes_sent.copy() for lab, p in zip(labels, policies, strict=True)},
        seconds=seconds,
        reports={lab: p.report() for lab, p in zip(labels, policies, strict=True)},
        env_seconds=env_seconds,
        transcripts={
            lab: transcript
            for lab, p in zip(labels, policies, strict=True)
            if (transcript := getattr(getattr(p, "protocol", None), "transcript", None)) is not None
        },
    )


class _RegretLedger:
    """Per-agent cumulative pseudo-regret of every algorithm, (R, M) each, added a block of rounds at a time.

    Each round only stores the expected rewards (R, M, K) and every algorithm's actions (R, M);
    :meth:`flush` adds the rounds' regrets best - chosen (float32) to the float64 sums one round
    after the other (np.cumsum accumulates in order), so the sums are exactly those of adding
    every round as it is played.  Flush before reading :attr:`per_agent`.
    """

    def __init__(self, labels: Sequence[str], runs: int, agents: int, arms: int) -> None:
        block = max(1, min(_LEDGER_ROUNDS, _LEDGER_FLOATS // (runs * agents * arms)))
        self.means = np.empty((block, runs, agents, arms), dtype=np.float32)
        self.actions = {lab: np.zeros((block, runs, agents), dtype=np.int64) for lab in labels}
        self.per_agent = {lab: np.zeros((runs, agents)) for lab in labels}
        self.rounds = 0  # rounds stored since the last flush

    def record_means(self, means: np.ndarray) -> int:
        """Store a round's expected rewards; returns its row for the algorithms' actions."""
        i = self.rounds
        self.means[i] = means
        self.rounds = i + 1
        return i

    def full(self) -> bool:
        return self.rounds == len(self.means)

    def flush(self) -> None:
        n = self.rounds
        means = self.means[:n]
        best = means.max(axis=-1)
        for lab, actions in self.actions.items():
            chosen = np.take_along_axis(means, actions[:n, ..., None], axis=-1)[..., 0]
            steps = np.concatenate((self.per_agent[lab][None], best - chosen))
            self.per_agent[lab] = np.cumsum(steps, axis=0)[-1]
        self.rounds = 0


def task_chunks(config: Config) -> list[list[int]]:
    """Runs grouped into tasks; depends on the config only (never on the worker count)."""
    size = config.runs_per_task()
    runs = list(range(config.experiment.runs))
    return [runs[i : i + size] for i in range(0, len(runs), size)]
