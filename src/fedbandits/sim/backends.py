"""Executors of an experiment's tasks: a local process pool (default) or a Ray cluster.

Both execute the same tasks -- :func:`fedbandits.sim.task.simulate_runs` on the run groups of
:func:`fedbandits.sim.task.task_chunks` -- and hand each result back as it arrives.  A task's
result depends only on (config, its runs), so the backend, the number of workers and the order
tasks finish in never change a number.

``open_backend("local", workers)`` or ``open_backend("ray", workers, address=...)`` returns a
backend to use as a context manager; :func:`fedbandits.sim.runner.run_experiment` accepts either
a backend name or an open backend (so several experiments can share one Ray connection).
"""

from __future__ import annotations

import math
import os
import secrets
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import Any

from fedbandits._version import __version__
from fedbandits.config import Config
from fedbandits.envs.datahome import DATA_ENV, data_home
from fedbandits.sim.checkpoint import TaskFailedError
from fedbandits.sim.mainguard import check_main_guard
from fedbandits.sim.task import ChunkResult, simulate_runs
from fedbandits.sim.watchdog import Watchdog

BACKENDS = ("local", "ray")
RAY_MISSING = "the ray backend needs Ray: pip install 'fedbandits[ray]'"
#: seconds to wait for a Ray cluster's address to accept a connection before giving up
#: (environment variable FEDBANDITS_RAY_CONNECT_TIMEOUT)
CONNECT_TIMEOUT = 15.0
#: environment variable marking every process of a local Ray instance a driver starts (its value:
#: the driver's pid and a random token), for the watchdog that stops them when the driver dies
RAY_MARK = "FEDBANDITS_RAY_INSTANCE"


def _connect_timeout() -> float:
    text = os.environ.get("FEDBANDITS_RAY_CONNECT_TIMEOUT")
    if text is None:
        return CONNECT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"FEDBANDITS_RAY_CONNECT_TIMEOUT must be a number of seconds > 0, got {text!r}")
    return value


class Progress:
    """Steps done per task (a task at round t has done t of its ``horizon`` steps), into a tqdm bar."""

    def __init__(self, bar: Any, horizon: int) -> None:
        self.bar = bar
        self.horizon = horizon
        self._steps: dict[int, int] = {}

    @property
    def active(self) -> bool:
        return self.bar is not None and not getattr(self.bar, "disable", False)

    def advance(self, task: int, t: int) -> None:
        old = self._steps.get(task, 0)
        if t > old:
            self._steps[task] = t
            self.bar.update(t - old)

    def finish(self, task: int) -> None:
        self.advance(task, self.horizon)


#: ``workers`` default: 1 local process, or twice the Ray cluster's CPUs in flight
AUTO = "auto"
#: seconds between a shared local pool's checks that it was not closed under a run
SHARED_POLL = 0.5
SHARED_CLOSED = "the shared local pool was closed while this run waited for its tasks"


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform tells it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return max(1, os.cpu_count() or 1)


def _check_workers(workers: int | str) -> int | None:
    """The worker count, or None for the backend's default (``"auto"``)."""
    if isinstance(workers, str) and workers == AUTO:
        return None
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    return workers


# -- local process pool ------------------------------------------------------------------------
def _single_thread_worker(driver: int | None = None, data: str | None = None) -> None:
    """Initializer of a pool worker: one BLAS thread (the workers are the parallelism), the
    driver's data home ``data`` as ``$FEDBANDITS_DATA``, and a watchdog that ends the worker once
    ``driver`` (the process that started the pool) is gone -- killed with SIGKILL, its results
    could never be received.

    A fork server keeps the environment it started with, so without ``data`` a worker would not
    see a data folder the driver chose after its first pool (``os.environ[...] = ...`` in a script).
    """
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    if data is not None:
        os.environ[DATA_ENV] = data
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


class LocalBackend:
    """Tasks in this process (``workers=1``) or in a pool of ``workers`` local processes.

    The pool's workers re-run the caller's main script (:mod:`fedbandits.sim.mainguard`): more than
    one worker from a script's top level outside ``if __name__ == "__main__":`` is refused here, in
    one line, before any process starts -- whether or not the config has tasks enough for a pool,
    so that a script does not start failing when its runs grow.

    ``shared=True``: one pool of ``workers`` processes serves every :meth:`run` until :meth:`close`,
    and every task goes to it (even a config's only task), so several configs can run at once from
    threads of one driver -- their tasks queue for the same ``workers`` processes and the driver
    only merges results (``reproduce`` runs its experiments so).  Otherwise each :meth:`run` opens
    a pool of its own, and a config of one task runs in this process.
    """

    name = "local"

    def __init__(self, workers: int | str = AUTO, *, shared: bool = False) -> None:
        count = _check_workers(workers)
        self.workers = 1 if count is None else count
        check_main_guard(self.workers)
        self.shared = shared
        self._pool: ProcessPoolExecutor | None = None
        self._futures: set[Future[ChunkResult]] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the shared pool: tasks still queued are dropped and running ones stopped (after an error
        or an interruption their results could no longer be recorded)."""
        with self._lock:
            self._closed.set()  # wakes the runs waiting on the pool (see run)
            pool, self._pool = self._pool, None
            unfinished = any(not f.done() for f in self._futures)
            self._futures.clear()
        if pool is not None:
            _stop_pool(pool, unfinished)

    def _shared_pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed.is_set():
                raise RuntimeError(SHARED_CLOSED)
            if self._pool is None:
                self._pool = _new_pool(self.workers)
            return self._pool

    def run(
        self,
        config: Config,
        chunks: Sequence[tuple[int, list[int]]],
        record_transcript: bool = False,
        progress: Progress | None = None,
    ) -> Iterator[tuple[int, ChunkResult]]:
        """Yield ``(task index, result)`` for every ``(task index, runs)`` in ``chunks`` as each finishes."""
        if self.workers == 1 or (len(chunks) <= 1 and not self.shared):
            for index, runs in chunks:
                on_step: Callable[[int], None] | None = None
                if progress is not None and progress.active:
                    on_step = lambda t, i=index: progress.advance(i, t)  # noqa: E731
                yield index, simulate_runs(config, runs, on_step=on_step, record_transcript=record_transcript)
            return
        pool = self._shared_pool() if self.shared else _new_pool(min(self.workers, len(chunks)))
        finished = False
        futures: dict[Future[ChunkResult], int] = {}
        try:
            for index, runs in chunks:
                futures[pool.submit(simulate_runs, config, runs, None, record_transcript)] = index
            if self.shared:
                with self._lock:
                    self._futures.update(futures)
            pending = set(futures)
            while pending:
                # a shared pool's runs wake up now and then: when its owner closes it (an error or an
                # interruption elsewhere) their queued futures are cancelled without waking a waiter
                done, pending = wait(pending, SHARED_POLL if self.shared else None, FIRST_COMPLETED)
                if not done and self._closed.is_set():
                    raise RuntimeError(SHARED_CLOSED)
                for fut in sorted(done, key=futures.__getitem__):
                    index = futures.pop(fut)  # drop the future: it would keep the result alive
                    if self.shared:
                        with self._lock:
                            self._futures.discard(fut)
                    try:
                        result = fut.result()
                    except BrokenProcessPool:
                        raise TaskFailedError(
                            "a worker process ended abruptly (killed, out of memory, or it failed while starting: see "
                            "the lines above); with a checkpoint, --resume (resume=True) skips the tasks that finished"
                        ) from None
                    yield index, result
            finished = True
        finally:
            if self.shared:
                # an error or an interruption: drop this config's queued tasks; the pool's owner
                # stops the running ones when it closes the backend
                for fut in futures:
                    fut.cancel()
            else:
                _stop_pool(pool, not finished)


def _new_pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        workers,
        mp_context=_pool_context(),
        initializer=_single_thread_worker,
        initargs=(os.getpid(), str(data_home())),
    )


def _stop_pool(pool: ProcessPoolExecutor, unfinished: bool) -> None:
    """Shut ``pool`` down; ``unfinished`` (an error or an interruption): drop queued tasks and stop running
    ones (their results could no longer be recorded) instead of waiting for them."""
    if unfinished:
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


# -- Ray ---------------------------------------------------------------------------------------
#: seconds between a Ray task's progress reports (the driver polls every 0.5 s)
PROGRESS_INTERVAL = 0.25


def _ray_task(
    config: Config, runs: list[int], record_transcript: bool, reporter: Any, index: int
) -> tuple[str, ChunkResult]:
    """One task on a Ray worker: one BLAS thread (the workers are the parallelism), as the local pool."""
    from threadpoolctl import threadpool_limits

    on_step = None
    if reporter is not None:
        last = [-math.inf]  # the first round is reported at once, then at most every PROGRESS_INTERVAL s

        def on_step(t: int) -> None:
            now = time.monotonic()
            if now - last[0] >= PROGRESS_INTERVAL:
                last[0] = now
                reporter.report.remote(index, t)

    with threadpool_limits(1):
        result = simulate_runs(config, runs, on_step, record_transcript)
    return __version__, result


class _StepStore:
    """A Ray actor holding each running task's latest round, polled by the driver's progress bar."""

    def __init__(self) -> None:
        self.steps: dict[int, int] = {}

    def report(self, index: int, t: int) -> None:
        self.steps[index] = max(t, self.steps.get(index, 0))

    def snapshot(self) -> dict[int, int]:
        return dict(self.steps)


def _import_ray():  # type: ignore[no-untyped-def]
    try:
        import ray
    except ImportError:
        raise ValueError(RAY_MISSING) from None
    return ray


def check_reachable(address: str, timeout: float | None = None) -> None:
    """A bounded wait for ``host:port`` (or ``ray://host:port``) to accept a TCP connection.

    ``ray.init`` itself may wait a long time for an address that does not answer; this turns an
    unreachable address into a clear error after at most ``timeout`` seconds.  Other address forms
    (``auto``, ``local``) are left to Ray.
    """
    timeout = _connect_timeout() if timeout is None else timeout
    text = address.removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return
    host = host.strip("[]") or "127.0.0.1"
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=max(0.1, min(2.0, deadline - time.monotonic()))):
                return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise ValueError(
                    f"cannot reach a Ray cluster at {address} within {timeout:g} s ({exc.strerror or exc}); "
                    "start one with `ray start --head` or check --address"
                ) from None
            time.sleep(0.25)


class RayBackend:
    """Tasks on a Ray cluster: an existing one at ``address`` or, without one, a local Ray instance.

    ``workers`` caps the tasks in flight (default: twice the cluster's CPUs, re-read as nodes
    join or leave); every task asks for one CPU.  A task whose worker or node is lost is retried
    by Ray up to ``max_retries`` times; an exception raised by the simulation itself is not
    retried (it would fail again) and is raised here.  If Ray was already initialised in this
    process (``ray.init`` by the caller), that connection is used and left open.

    A local instance never outlives its driver.  Ray ties the processes ``ray.init`` starts (GCS,
    raylet, dashboard, monitors) to the driver by PR_SET_PDEATHSIG, but not the raylet's children:
    after a SIGKILLed driver its dashboard and runtime-env agents kept running, and its workers took
    seconds to notice.  So every process of the instance carries the mark :data:`RAY_MARK` in its
    environment, and a :class:`~fedbandits.sim.watchdog.Watchdog` kills whatever still carries it
    once the driver is gone (or after :meth:`close`).  The driver keeps its own SIGTERM handler
    (``ray.init`` replaces it with one of its own): ``fedbandits`` stops on SIGTERM as on SIGINT.
    """

    name = "ray"

    def __init__(
        self,
        workers: int | str = AUTO,
        address: str | None = None,
        max_retries: int = 3,
        connect_timeout: float | None = None,
    ) -> None:
        count = _check_workers(workers)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise ValueError(f"address must be a non-empty string like 'HOST:6379', got {address!r}")
        self.workers = count
        self.address = address
        self.max_retries = max_retries
        ray = _import_ray()
        self._ray = ray
        self._owned = False
        self._watchdog: Watchdog | None = None
        if ray.is_initialized():
            if address is not None:
                raise ValueError(
                    f"Ray is already initialised in this process; cannot also connect to {address} "
                    "(give no address to use the existing connection)"
                )
            return
        import logging

        kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "configure_logging": True}
        if address is not None:
            check_reachable(address, _connect_timeout() if connect_timeout is None else connect_timeout)
            kwargs["address"] = address
        else:
            kwargs.update(include_dashboard=False)
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        main = threading.current_thread() is threading.main_thread()
        handler = signal.getsignal(signal.SIGTERM) if main else None
        local = address is None
        if local:  # a local instance: marked (inherited by all its processes) and watched
            mark = f"{os.getpid()}-{secrets.token_hex(8)}"
            self._watchdog = Watchdog(RAY_MARK, mark)
            os.environ[RAY_MARK] = mark
        try:
            ray.init(**kwargs)
        except Exception as exc:  # ConnectionError, RuntimeError, ...: one clear line
            self._stop_watchdog()
            where = f"the Ray cluster at {address}" if address is not None else "a local Ray instance"
            raise ValueError(f"cannot start or join {where}: {type(exc).__name__}: {exc}".splitlines()[0]) from None
        except BaseException:  # interrupted while starting: what was started goes at once
            self._stop_watchdog()
            raise
        finally:
            if local:  # only the instance's processes carry the mark, not this process's later children
                os.environ.pop(RAY_MARK, None)
            if callable(handler):
                signal.signal(signal.SIGTERM, handler)
        self._owned = True

    def __enter__(self) -> RayBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self._ray.shutdown()
            self._owned = False
        self._stop_watchdog()

    def _stop_watchdog(self) -> None:
        """The watchdog kills whatever of the local instance ``ray.shutdown`` left, and exits."""
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None

    def cluster_cpus(self) -> int:
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def _in_flight(self) -> int:
        return self.workers if self.workers is not None else 2 * self.cluster_cpus()

    def run(
        self,
        config: Config,
        chunks: Sequence[tuple[int, list[int]]],
        record_transcript: bool = False,
        progress: Progress | None = None,
    ) -> Iterator[tuple[int, ChunkResult]]:
        """Yield ``(task index, result)`` as tasks finish; at most ``_in_flight()`` tasks submitted at once."""
        ray = self._ray
        remote = ray.remote(num_cpus=1)(_ray_task).options(
            max_retries=self.max_retries, retry_exceptions=False, name="fedbandits-task"
        )
        reporter = None
        if progress is not None and progress.active:
            reporter = ray.remote(num_cpus=0)(_StepStore).remote()
        config_ref = ray.put(config)
        todo = deque(chunks)
        pending: dict[Any, tuple[int, list[int]]] = {}
        limit, limit_checked = self._in_flight(), time.monotonic()
        try:
            while todo or pending:
                if self.workers is None and time.monotonic() - limit_checked > 10.0:
                    limit, limit_checked = self._in_flight(), time.monotonic()
                while todo and len(pending) < limit:
                    index, runs = todo.popleft()
                    pending[remote.remote(config_ref, runs, record_transcript, reporter, index)] = (index, runs)
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5 if reporter is not None else None)
                for ref in ready:
                    index, runs = pending.pop(ref)
                    version, result = self._get(ref, runs)
                    del ref
                    if version != __version__:
                        raise TaskFailedError(
                            f"a Ray worker runs fedbandits {version}, this driver {__version__}: "
                            "install the same version on every node"
                        )
                    yield index, result
                if reporter is not None and pending:
                    try:
                        steps = ray.get(reporter.snapshot.remote(), timeout=5.0)
                    except Exception:  # progress is best effort
                        steps = {}
                    for index, _ in pending.values():
                        if index in steps:
                            progress.advance(index, steps[index])  # type: ignore[union-attr]
        finally:
            for ref in pending:
                ray.cancel(ref)
            if reporter is not None:
                ray.kill(reporter)

    def _get(self, ref: Any, runs: list[int]) -> tuple[str, ChunkResult]:
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # the simulation raised: same error as the local backend
            cause = exc.cause
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        except ray.exceptions.RayError as exc:
            raise TaskFailedError(
                f"task for runs {runs[0]}-{runs[-1]} failed after {self.max_retries} retries "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                "finished tasks are kept in the checkpoint: rerun with --resume"
            ) from None


Backend = LocalBackend | RayBackend


def open_backend(
    name: str = "local",
    workers: int | str = AUTO,
    address: str | None = None,
    max_retries: int = 3,
    *,
    shared: bool = False,
) -> Backend:
    """A backend by name; ``address`` is only for ``"ray"``; ``workers="auto"``: the backend's default;
    ``shared``: a local pool that serves several configs at once (see :class:`LocalBackend`)."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {name!r}")
    if name == "local":
        if address is not None:
            raise ValueError("an address is only for the ray backend (use backend 'ray', `--backend ray`)")
        return LocalBackend(workers, shared=shared)
    return RayBackend(workers=workers, address=address, max_retries=max_retries)
