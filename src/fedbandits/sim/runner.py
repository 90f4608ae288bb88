"""The time loop: environments and policies batched over (runs, agents), loop over time only.

:func:`simulate_runs` plays every configured algorithm on the *same* contexts and reward
noise (common random numbers) for a group of runs; :func:`run_experiment` splits the runs into
tasks of ``runs_per_task`` runs (a function of the config alone), executes them in a local
process pool, and merges the results in run order -- so results are identical bit for bit
whatever the number of workers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context

import numpy as np

from fedbandits.config import Config
from fedbandits.registry import ALGORITHMS, ENVIRONMENTS, PolicyContext
from fedbandits.sim.results import AlgorithmResult, Results
from fedbandits.sim.seeding import env_rngs, noise_rngs


def time_grid(horizon: int, points: int) -> np.ndarray:
    """Rounds (1-based) at which cumulative regret is recorded; always ends at ``horizon``."""
    return np.unique(np.linspace(1, horizon, min(points, horizon)).round().astype(np.int64))


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
    noise_seed = exp.seed if exp.noise_seed is None else exp.noise_seed
    policies = []
    for a, alg in enumerate(config.algorithms):
        ctx = PolicyContext(
            len(runs),
            env.n_agents,
            env.n_arms,
            env.dim,
            exp.horizon,
            noise_rngs(noise_seed, runs, a),
            record_transcript=record_transcript,
            env=env,
        )
        policies.append(ALGORITHMS[alg.name].factory(alg.params, ctx))

    grid = time_grid(exp.horizon, exp.grid_points)
    labels = [alg.label for alg in config.algorithms]
    per_agent = {lab: np.zeros((len(runs), env.n_agents)) for lab in labels}
    curves = {lab: np.zeros((len(runs), grid.size)) for lab in labels}
    seconds = dict.fromkeys(labels, 0.0)
    env_seconds = 0.0
    g = 0
    for t in range(1, exp.horizon + 1):
        start = time.perf_counter()
        rnd = env.next_round()
        best = rnd.means.max(axis=-1)
        env_seconds += time.perf_counter() - start
        for lab, policy in zip(labels, policies, strict=True):
            start = time.perf_counter()
            actions = policy.step(rnd, env)
            seconds[lab] += time.perf_counter() - start
            chosen = np.take_along_axis(rnd.means, actions[..., None], axis=-1)[..., 0]
            per_agent[lab] += best - chosen
        if t == grid[g]:
            for lab in labels:
                curves[lab][:, g] = per_agent[lab].sum(axis=1)
            g += 1
        if on_step is not None:
            on_step(t)
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
            lab: t
            for lab, p in zip(labels, policies, strict=True)
            if (t := getattr(getattr(p, "protocol", None), "transcript", None)) is not None
        },
    )


def task_chunks(config: Config) -> list[list[int]]:
    """Runs grouped into tasks; depends on the config only (never on the worker count)."""
    size = config.runs_per_task()
    runs = list(range(config.experiment.runs))
    return [runs[i : i + size] for i in range(0, len(runs), size)]


def _single_thread_worker() -> None:
    # one BLAS thread per worker: the workers are the parallelism
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


def _pool_context():  # type: ignore[no-untyped-def]
    """Worker processes come from a fork server that has already imported fedbandits.

    Starting workers by ``spawn`` re-imports numpy and fedbandits in each of them (about 0.4 s
    apiece here); a fork server pays that once per parent process and then forks ready workers.
    Forking from the server (not from the caller) avoids forking a process that has threads.
    Falls back to ``spawn`` where fork servers do not exist (Windows, macOS defaults).
    """
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return get_context("spawn")
    ctx = get_context("forkserver")
    ctx.set_forkserver_preload(["fedbandits.sim.runner"])
    return ctx


def run_experiment(
    config: Config, workers: int = 1, progress: bool = False, record_transcript: bool = False
) -> Results:
    """Run every run of ``config`` (in ``workers`` processes) and gather the results."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    chunks = task_chunks(config)
    started = time.perf_counter()
    results: list[ChunkResult] = []
    bar = _progress_bar(progress, total=config.experiment.horizon * len(chunks) if workers == 1 else len(chunks))
    try:
        if workers == 1 or len(chunks) == 1:
            for chunk in chunks:
                on_step = (lambda _t: bar.update(1)) if bar else None
                results.append(simulate_runs(config, chunk, on_step=on_step, record_transcript=record_transcript))
        else:
            ctx = _pool_context()
            with ProcessPoolExecutor(
                min(workers, len(chunks)), mp_context=ctx, initializer=_single_thread_worker
            ) as pool:
                futures = [pool.submit(simulate_runs, config, chunk, None, record_transcript) for chunk in chunks]
                for fut in as_completed(futures):
                    results.append(fut.result())
                    if bar:
                        bar.update(1)
    finally:
        if bar:
            bar.close()
    results.sort(key=lambda c: c.runs[0])
    return _merge(config, results, time.perf_counter() - started)


def _progress_bar(enabled: bool, total: int):  # type: ignore[no-untyped-def]
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="step" if total > 1 else "task", leave=False, disable=None, mininterval=0.5)


def _merge(config: Config, chunks: list[ChunkResult], wall: float) -> Results:
    grid = time_grid(config.experiment.horizon, config.experiment.grid_points)
    algorithms = {}
    for alg in config.algorithms:
        lab = alg.label
        algorithms[lab] = AlgorithmResult(
            name=alg.name,
            label=lab,
            curves=np.concatenate([c.curves[lab] for c in chunks]),
            per_agent=np.concatenate([c.per_agent[lab] for c in chunks]),
            sync_rounds=np.concatenate([c.sync_rounds[lab] for c in chunks]),
            messages=np.concatenate([c.messages[lab] for c in chunks]),
            bytes_sent=np.concatenate([c.bytes_sent[lab] for c in chunks]),
            seconds=float(sum(c.seconds[lab] for c in chunks)),
            report=_merge_reports([c.reports[lab] for c in chunks]),
            transcripts=[(run, t) for c in chunks for run, t in _split_transcript(c, lab)],
        )
    return Results(
        config=config,
        grid=grid,
        algorithms=algorithms,
        wall_seconds=wall,
        env_seconds=float(sum(c.env_seconds for c in chunks)),
        workers_cpu=os.cpu_count() or 1,
    )


def _merge_reports(reports: list[dict[str, object]]) -> dict[str, object]:
    """Counts (clipped values, repairs) add up over tasks; everything else is per-config."""
    merged = dict(reports[0])
    for key in merged:
        if key.startswith("clipped") or key == "psd_repairs":
            merged[key] = sum(int(r[key]) for r in reports)  # type: ignore[call-overload]
    return merged


def _split_transcript(chunk: ChunkResult, label: str) -> list[tuple[int, dict[str, np.ndarray]]]:
    """One transcript per run: sync index (K,), messages (K, M, P), noise std sigma (P,)."""
    records = chunk.transcripts.get(label)
    if not records:
        return []
    syncs = np.array([rec["sync"] for rec in records])
    messages = np.stack([rec["messages"] for rec in records])  # (K, r, M, P)
    sigma = np.asarray(records[0]["sigma"])
    return [(run, {"sync": syncs, "messages": messages[:, i], "sigma": sigma}) for i, run in enumerate(chunk.runs)]
