"""The time loop: environments and policies batched over (runs, agents), loop over time only.

:func:`fedbandits.sim.task.simulate_runs` plays every configured algorithm on the *same*
contexts and reward noise (common random numbers) for a group of runs (a task);
:func:`run_experiment` splits the runs into
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
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fedbandits.algorithms.base import Policy
from fedbandits.config import Config
from fedbandits.registry import ALGORITHMS
from fedbandits.sim.backends import BACKENDS, LocalBackend, Progress, open_backend
from fedbandits.sim.checkpoint import Checkpoint
from fedbandits.sim.memory import check_memory
from fedbandits.sim.reports import merge_reports
from fedbandits.sim.results import TRANSCRIPT_EXTRAS, AlgorithmResult, Results, TranscriptArrays
from fedbandits.sim.task import ChunkResult, task_chunks, time_grid


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
    if resume and checkpoint is None:
        raise ValueError("resume needs a checkpoint folder")
    if isinstance(backend, str):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
        if backend == "local" and address is not None:
            raise ValueError("an address is only for the ray backend (use backend 'ray', `--backend ray`)")
    elif address is not None or workers != "auto":
        raise ValueError("with an open backend, give workers and address to open_backend instead")
    check_run_memory(config, workers, backend, max_memory)
    started = time.perf_counter()
    # open first: a missing Ray or an unreachable cluster is reported before anything runs
    opened = open_backend(backend, workers, address, max_retries) if isinstance(backend, str) else None
    executor = opened if opened is not None else backend
    try:
        return _execute(config, executor, progress, record_transcript, checkpoint, resume, log, started)
    finally:
        if opened is not None:
            opened.close()


def check_run_memory(
    config: Config, workers: int | str = "auto", backend: str | Any = "local", max_memory: int | None = None
) -> int:
    """:func:`fedbandits.sim.memory.check_memory` for the tasks of ``config`` that run at once on
    this machine: ``workers`` local processes (an open local backend: its own), else one (Ray
    places each task on a node of its own choosing).  ValueError in one line above ``max_memory``."""
    if isinstance(backend, LocalBackend):
        parallel = backend.workers
    else:
        parallel = workers if isinstance(workers, int) and backend in ("local", None) else 1
    return check_memory(config, min(parallel, len(task_chunks(config))), max_memory)


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
    chunks = task_chunks(config)
    merger = _Merger(config)
    store = None
    todo = list(enumerate(chunks))
    if checkpoint is not None:
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
    resumed = sorted(set(range(len(chunks))) - {index for index, _ in todo})
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
    return merger.results(time.perf_counter() - started, resumed)


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

    def results(self, wall: float, resumed: Sequence[int] = ()) -> Results:
        """The merged results; ``resumed``: the indices of the tasks loaded from a checkpoint."""
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
            tasks=len(self.chunks),
            resumed_tasks=len(resumed),
            resumed_seconds=float(sum(self.env_seconds[i] + sum(self.seconds[i].values()) for i in resumed)),
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
