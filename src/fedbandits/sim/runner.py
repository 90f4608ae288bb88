"""The time loop: environments and policies batched over (runs, agents), loop over time only.

:func:`simulate_runs` plays every configured algorithm on the *same* contexts and reward
noise (common random numbers) for a group of runs; :func:`run_experiment` splits the runs into
tasks of ``runs_per_task`` runs (a function of the config alone), executes them in this
process, a local process pool or on a Ray cluster (:mod:`fedbandits.sim.backends`), optionally
checkpointing each finished task (:mod:`fedbandits.sim.checkpoint`), and merges the results in
run order as they arrive -- so results are identical bit for bit whatever the backend, the number
of workers or the order tasks finish in.  The policies' reports are merged over tasks by each
policy class's rules (:mod:`fedbandits.sim.reports`): the same whatever the grouping of runs into
tasks, up to float rounding in means.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

import numpy as np

from fedbandits.algorithms.base import Policy
from fedbandits.config import Config
from fedbandits.registry import ALGORITHMS, ENVIRONMENTS, PolicyContext
from fedbandits.sim.memory import check_memory
from fedbandits.sim.reports import merge_reports
from fedbandits.sim.results import TRANSCRIPT_EXTRAS, AlgorithmResult, Results, TranscriptArrays
from fedbandits.sim.seeding import env_rngs, noise_rngs


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
            lab: transcript
            for lab, p in zip(labels, policies, strict=True)
            if (transcript := getattr(getattr(p, "protocol", None), "transcript", None)) is not None
        },
    )


def task_chunks(config: Config) -> list[list[int]]:
    """Runs grouped into tasks; depends on the config only (never on the worker count)."""
    size = config.runs_per_task()
    runs = list(range(config.experiment.runs))
    return [runs[i : i + size] for i in range(0, len(runs), size)]


def _single_thread_worker(driver: int | None = None) -> None:
    """Initializer of a pool worker: one BLAS thread (the workers are the parallelism), and a
    watchdog that ends the worker once ``driver`` (the process that started the pool) is gone --
    killed with SIGKILL, its results could never be received."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    if driver is not None:
        threading.Thread(target=_exit_when_gone, args=(driver,), name="fedbandits-watchdog", daemon=True).start()


#: seconds between a worker's checks that its driver still runs
WATCHDOG_INTERVAL = 0.25


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie -- dead, not yet reaped by its parent -- does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[-1].split()[0]
        return state not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (not Linux): ask the kernel whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _exit_when_gone(driver: int) -> None:
    while process_alive(driver):
        time.sleep(WATCHDOG_INTERVAL)
    os._exit(1)  # nobody can receive this worker's result: stop at once, without clean-up


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
    config: Config,
    workers: int | str = "auto",
    progress: bool = False,
    record_transcript: bool = False,
    *,
    backend: str | Any = "local",
    address: str | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    resume: bool = False,
    max_retries: int = 3,
    log: Callable[[str], None] | None = None,
    max_memory: int | None = None,
) -> Results:
    """Run every run of ``config`` and gather the results (identical whatever executes them).

    ``backend`` is ``"local"`` (this process with ``workers=1`` -- what ``"auto"`` means here --
    or a pool of ``workers`` processes), ``"ray"`` (a Ray cluster at ``address``, or a local Ray
    instance without one; ``workers`` caps the tasks in flight, ``"auto"``: twice the cluster's
    CPUs) or an open backend from :func:`fedbandits.sim.backends.open_backend` (several
    experiments can share one).  ``max_retries``: times Ray retries a task whose worker was lost.

    ``checkpoint`` is a folder where every finished task is written as it arrives (see
    :mod:`fedbandits.sim.checkpoint`); with ``resume=True`` tasks already there are loaded
    instead of re-run.  ``log`` receives one line saying what a resume skipped.

    Before anything is allocated, the memory the tasks running at once will hold is estimated
    (:mod:`fedbandits.sim.memory`) and a config above ``max_memory`` bytes (default: the memory
    available on this machine) is refused with a ValueError.
    """
    from fedbandits.sim.backends import BACKENDS, open_backend

    if resume and checkpoint is None:
        raise ValueError("resume needs a checkpoint folder")
    if isinstance(backend, str):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
        if backend == "local" and address is not None:
            raise ValueError("an address is only for the ray backend (use backend 'ray', `--backend ray`)")
    elif address is not None or workers != "auto":
        raise ValueError("with an open backend, give workers and address to open_backend instead")
    parallel = workers if isinstance(workers, int) and (backend == "local" or backend is None) else 1
    check_memory(config, min(parallel, len(task_chunks(config))), max_memory)
    started = time.perf_counter()
    # open first: a missing Ray or an unreachable cluster is reported before anything runs
    opened = open_backend(backend, workers, address, max_retries) if isinstance(backend, str) else None
    executor = opened if opened is not None else backend
    try:
        return _execute(config, executor, progress, record_transcript, checkpoint, resume, log, started)
    finally:
        if opened is not None:
            opened.close()


def _execute(
    config: Config,
    executor: Any,
    progress: bool,
    record_transcript: bool,
    checkpoint: str | os.PathLike[str] | None,
    resume: bool,
    log: Callable[[str], None] | None,
    started: float,
) -> Results:
    from fedbandits.sim.backends import Progress

    chunks = task_chunks(config)
    merger = _Merger(config)
    store = None
    todo = list(enumerate(chunks))
    if checkpoint is not None:
        from fedbandits.sim.checkpoint import Checkpoint

        store = Checkpoint(checkpoint, config, record_transcript)
        if resume:
            remaining = []
            for index, runs in todo:
                stored = store.load(runs)
                if stored is None:
                    remaining.append((index, runs))
                else:
                    merger.add(index, stored)
            if log is not None:
                done = len(todo) - len(remaining)
                log(
                    f"resume: {done} of {len(todo)} task(s) already finished in {store.folder}, {len(remaining)} to run"
                )
            todo = remaining
    bar = _progress_bar(progress and bool(todo), total=config.experiment.horizon * len(todo))
    steps = Progress(bar, config.experiment.horizon) if bar is not None else None
    try:
        if todo:
            for index, result in executor.run(config, todo, record_transcript, steps):
                if store is not None:
                    store.save(result)
                merger.add(index, result)
                if steps is not None:
                    steps.finish(index)
    finally:
        if bar is not None:
            bar.close()
    return merger.results(time.perf_counter() - started)


def _progress_bar(enabled: bool, total: int):  # type: ignore[no-untyped-def]
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="step", leave=False, disable=None, mininterval=0.5)


class _Merger:
    """Task results into run-ordered arrays as they arrive, in any order; each run exactly once.

    Holds only the per-run outputs (what :class:`Results` holds anyway), not the task results.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.chunks = task_chunks(config)
        self.runs = config.experiment.runs
        self.filled = np.zeros(self.runs, dtype=bool)
        self.arrays: dict[str, dict[str, np.ndarray]] = {}
        self.reports: dict[int, dict[str, dict[str, object]]] = {}
        self.seconds: dict[int, dict[str, float]] = {}
        self.env_seconds: dict[int, float] = {}
        self.transcripts: dict[str, dict[int, TranscriptArrays]] = {}

    def add(self, index: int, chunk: ChunkResult) -> None:
        runs = list(chunk.runs)
        if runs != self.chunks[index]:
            raise RuntimeError(f"task {index} returned runs {runs}, expected {self.chunks[index]}")
        if index in self.reports or self.filled[runs].any():
            raise RuntimeError(f"task {index} (runs {runs[0]}-{runs[-1]}) delivered twice")
        rows = slice(runs[0], runs[-1] + 1)
        for alg in self.config.algorithms:
            lab = alg.label
            target = self.arrays.setdefault(lab, {})
            for name in ("curves", "per_agent", "sync_rounds", "messages", "bytes_sent"):
                part = np.asarray(getattr(chunk, name)[lab])
                if name not in target:
                    target[name] = np.zeros((self.runs, *part.shape[1:]), dtype=part.dtype)
                target[name][rows] = part
            for run, data in _split_transcript(chunk, lab):
                self.transcripts.setdefault(lab, {})[run] = data
        self.filled[rows] = True
        self.reports[index] = chunk.reports
        self.seconds[index] = chunk.seconds
        self.env_seconds[index] = chunk.env_seconds

    def results(self, wall: float) -> Results:
        if not self.filled.all():
            missing = np.flatnonzero(~self.filled)
            raise RuntimeError(f"{missing.size} run(s) have no result, first {int(missing[0])}")
        order = sorted(self.reports)
        algorithms = {}
        for alg in self.config.algorithms:
            lab = alg.label
            arrays = self.arrays[lab]
            transcripts = self.transcripts.get(lab, {})
            algorithms[lab] = AlgorithmResult(
                name=alg.name,
                label=lab,
                curves=arrays["curves"],
                per_agent=arrays["per_agent"],
                sync_rounds=arrays["sync_rounds"],
                messages=arrays["messages"],
                bytes_sent=arrays["bytes_sent"],
                seconds=float(sum(self.seconds[i][lab] for i in order)),
                report=merge_reports(
                    [self.reports[i][lab] for i in order],
                    [len(self.chunks[i]) for i in order],
                    ALGORITHMS[alg.name].policy or Policy,
                    lab,
                ),
                transcripts=[(run, transcripts[run]) for run in sorted(transcripts)],
            )
        return Results(
            config=self.config,
            grid=time_grid(self.config.experiment.horizon, self.config.experiment.grid_points),
            algorithms=algorithms,
            wall_seconds=wall,
            env_seconds=float(sum(self.env_seconds[i] for i in order)),
            workers_cpu=os.cpu_count() or 1,
        )


def _merge(config: Config, chunks: list[ChunkResult], wall: float) -> Results:
    """Merge task results of ``config`` (all of its tasks, in any order) into :class:`Results`."""
    index = {tuple(runs): i for i, runs in enumerate(task_chunks(config))}
    merger = _Merger(config)
    for chunk in chunks:
        merger.add(index[tuple(chunk.runs)], chunk)
    return merger.results(wall)


def _split_transcript(chunk: ChunkResult, label: str) -> list[tuple[int, TranscriptArrays]]:
    """One transcript per run: sync index (K,), messages (K, M, P), noise std sigma (P,), and for
    ``distributed-dp`` the server's decoded sums (K, P) and which silos' messages arrived (K, M)."""
    records = chunk.transcripts.get(label)
    if not records:
        return []
    syncs = np.array([rec["sync"] for rec in records])
    sigma = np.asarray(records[0]["sigma"])
    per_run = {
        key: np.stack([np.asarray(rec[key]) for rec in records])  # (K, r, ...)
        for key in ("messages", *TRANSCRIPT_EXTRAS)
        if key in records[0]
    }
    return [
        (run, {"sync": syncs, "sigma": sigma, **{key: arr[:, i] for key, arr in per_run.items()}})  # type: ignore[typeddict-item]
        for i, run in enumerate(chunk.runs)
    ]
