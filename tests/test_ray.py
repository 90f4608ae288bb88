"""The Ray backend on a local cluster: bit-for-bit equality with the local backend, lost workers, resume.

Skipped where Ray is not installed (``pip install 'fedbandits[ray]'``); deselect with ``-m 'not ray'``.
Every cluster here is local (2 CPUs, this machine only), uses token authentication with a
throw-away token (nothing is written to ~/.ray), and is stopped by the test that started it:
``ray.shutdown()`` for the in-process one, SIGTERM then SIGKILL of exactly the processes of
the ``ray start`` one (found by its private temp folder, its address and its raylet's children).
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from fedbandits import config_from_dict  # noqa: E402
from fedbandits.sim.checkpoint import Checkpoint, TaskFailedError  # noqa: E402
from fedbandits.sim.runner import run_experiment  # noqa: E402
from fedbandits.sim.task import task_chunks  # noqa: E402
from proctree import LONG_RUN_TOML, descendants, is_descendant  # noqa: E402

pytestmark = pytest.mark.ray

TASK_TITLE = "ray::fedbandits-task"  # the process title of a Ray worker running one of our tasks
FIELDS = ("curves", "per_agent", "sync_rounds", "messages", "bytes_sent")
_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED")


def _config(runs=6, horizon=120, runs_per_task=2, **experiment):
    return config_from_dict(
        {
            "experiment": {"seed": 8, "runs": runs, "horizon": horizon, "runs_per_task": runs_per_task, **experiment},
            "environment": {"name": "gaussian-sphere", "agents": 5, "arms": 10, "dim": 4},
            "algorithms": [
                {"name": "fedlinucb", "label": "fed", "batch": 10},
                {"name": "fedlinucb", "label": "ldp", "batch": 10, "protocol": "ldp", "epsilon": 1.0, "delta": 1e-4},
            ],
        }
    )


def assert_identical(a, b):
    assert a.algorithms.keys() == b.algorithms.keys()
    for lab in a.algorithms:
        x, y = a.algorithms[lab], b.algorithms[lab]
        for field in FIELDS:
            u, v = getattr(x, field), getattr(y, field)
            assert u.dtype == v.dtype and u.shape == v.shape
            np.testing.assert_array_equal(u, v, err_msg=f"{lab}.{field}")
        assert x.report == y.report
        assert [r for r, _ in x.transcripts] == [r for r, _ in y.transcripts]
        for (_, s), (_, t) in zip(x.transcripts, y.transcripts, strict=True):
            for k in s:
                np.testing.assert_array_equal(s[k], t[k])


class _Deadline:
    """Fail a test that takes longer than ``seconds`` instead of hanging CI (SIGALRM, main thread)."""

    def __init__(self, seconds: int) -> None:
        self.seconds = seconds

    def __enter__(self):
        def expire(*_):
            raise TimeoutError(f"Ray test took longer than {self.seconds} s")

        self.previous = signal.signal(signal.SIGALRM, expire)
        signal.alarm(self.seconds)
        return self

    def __exit__(self, *exc):
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.previous)


def _set_env(values):
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ.update(values)
    return saved


def _restore_env(saved):
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def cluster():
    """Ray in this process: a local instance with 2 CPUs, shut down after the module."""
    if ray.is_initialized():
        pytest.skip("Ray is already initialised in this process")
    # a throw-away token: Ray enables token authentication and finds it in the environment
    saved = _set_env({"RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_USAGE_STATS_ENABLED": "0"})
    try:
        with _Deadline(120):
            ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
        assert ray.cluster_resources()["CPU"] == 2
        yield
    finally:
        ray.shutdown()
        _restore_env(saved)


def _task_processes() -> list[int]:
    """PIDs of this machine's Ray workers currently running a fedbandits task, children of our raylet."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if title.startswith(TASK_TITLE) and is_descendant(int(entry.name), os.getpid()):
            pids.append(int(entry.name))
    return pids


class _Killer(threading.Thread):
    """SIGKILL the worker of the first running task (once ``after`` seconds into it), ``count`` times."""

    def __init__(self, count: int = 1, after: float = 0.2, deadline: float = 60.0) -> None:
        super().__init__(daemon=True)
        self.count, self.after, self.deadline = count, after, deadline
        self.killed: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        end = time.monotonic() + self.deadline
        while len(self.killed) < self.count and time.monotonic() < end and not self.stop.is_set():
            pids = [p for p in _task_processes() if p not in self.killed]
            if pids:
                time.sleep(self.after)
                if pids[0] in _task_processes():  # still running our task: kill it mid-task
                    os.kill(pids[0], signal.SIGKILL)
                    self.killed.append(pids[0])
            time.sleep(0.02)


# -- bit for bit -----------------------------------------------------------------------------
def test_ray_matches_local_bit_for_bit(cluster, tmp_path):
    config = _config()
    with _Deadline(180):
        local = run_experiment(config, record_transcript=True)
        pool = run_experiment(config, workers=2, record_transcript=True)
        one = run_experiment(config, backend="ray", workers=1, record_transcript=True)
        two = run_experiment(config, backend="ray", record_transcript=True, checkpoint=tmp_path, progress=True)
        regrouped = run_experiment(config.with_experiment(runs_per_task=1), backend="ray", record_transcript=True)
    for other in (pool, one, two, regrouped):
        assert_identical(other, local)
    # a checkpoint written by Ray is resumed by the local backend (and vice versa): same key, same bits
    store = Checkpoint(tmp_path, config, record_transcript=True)
    assert len(list(store.folder.glob("*.pkl"))) == len(task_chunks(config))
    assert_identical(run_experiment(config, record_transcript=True, checkpoint=tmp_path, resume=True), local)


class _Bar:
    """A stand-in for an enabled tqdm bar: records every update."""

    disable = False

    def __init__(self) -> None:
        self.updates: list[int] = []

    def update(self, n: int) -> None:
        self.updates.append(n)


def test_progress_counts_every_round_of_every_task_once(cluster):
    from fedbandits.sim.backends import Progress, open_backend

    # tasks of ~2 s (4 x 0.5 s per 2500 rounds here), reported every 0.25 s, polled every 0.5 s: each
    # task is seen partly done several times (at 2500 rounds, 0.5 s, a task could end unseen)
    config = _config(runs=4, horizon=10000, runs_per_task=1)
    chunks = list(enumerate(task_chunks(config)))
    bar = _Bar()
    progress = Progress(bar, config.experiment.horizon)
    with _Deadline(120), open_backend("ray", workers=2) as backend:
        done = []
        for index, _ in backend.run(config, chunks, progress=progress):
            progress.finish(index)
            done.append(index)
    assert sorted(done) == [0, 1, 2, 3]
    assert all(n > 0 for n in bar.updates)
    assert sum(bar.updates) == 4 * config.experiment.horizon
    assert len(bar.updates) > 4, "no partial progress arrived from the workers"


def test_reproduce_on_ray_matches_local(cluster, tmp_path):
    from fedbandits.experiments import reproduce

    with _Deadline(120):
        reproduce("zhou-fig2a", "tiny", out=tmp_path / "local")
        reproduce("zhou-fig2a", "tiny", out=tmp_path / "ray", backend="ray")
    for name in ("regret_curves.csv", "per_agent_regret.csv", "runs.csv"):
        local = (tmp_path / "local" / "zhou-fig2a" / name).read_bytes()
        assert (tmp_path / "ray" / "zhou-fig2a" / name).read_bytes() == local


# -- lost workers ------------------------------------------------------------------------------
def test_killed_worker_is_retried_and_every_run_counted_once(cluster, tmp_path):
    config = _config(runs=6, horizon=3000, runs_per_task=1)  # tasks of about half a second
    reference = run_experiment(config, workers=2)
    killer = _Killer(count=1)
    killer.start()
    try:
        with _Deadline(180):
            results = run_experiment(config, backend="ray", workers=2, checkpoint=tmp_path, max_retries=2)
    finally:
        killer.stop.set()
        killer.join()
    assert len(killer.killed) == 1, "no task was running to be killed"
    assert_identical(results, reference)  # includes every run 0..5, in order, with its own numbers
    files = sorted(p.name for p in Checkpoint(tmp_path, config).folder.glob("runs-*"))
    assert files == [f"runs-{r:06d}-{r:06d}.pkl" for r in range(6)]  # one file per task, no temp files left


def test_lost_task_without_retries_fails_and_the_grid_resumes(cluster, tmp_path):
    config = _config(runs=6, horizon=3000, runs_per_task=1)
    reference = run_experiment(config, workers=2)
    killer = _Killer(count=1)
    killer.start()
    try:
        with _Deadline(180), pytest.raises(TaskFailedError, match=r"failed .*0 retries.*--resume"):
            run_experiment(config, backend="ray", workers=1, checkpoint=tmp_path, max_retries=0)
    finally:
        killer.stop.set()
        killer.join()
    assert len(killer.killed) == 1
    store = Checkpoint(tmp_path, config)
    finished = len(list(store.folder.glob("runs-*.pkl"))) if store.folder.exists() else 0
    assert finished < 6
    messages = []
    with _Deadline(180):
        resumed = run_experiment(config, backend="ray", checkpoint=tmp_path, resume=True, log=messages.append)
    assert messages == [f"resume: {finished} of 6 task(s) already finished in {store.folder}, {6 - finished} to run"]
    assert_identical(resumed, reference)


def test_simulation_errors_are_raised_like_the_local_backend(cluster):
    """An exception inside a task is the simulation's own error: raised as is (not a Ray wrapper)."""
    broken = _config(runs=2, horizon=10, runs_per_task=1)
    object.__setattr__(broken.experiment, "grid_points", 0)  # bypasses validation: an empty time grid
    with _Deadline(120):
        with pytest.raises(IndexError) as local:
            run_experiment(broken)
        with pytest.raises(IndexError) as remote:
            run_experiment(broken, backend="ray")
    assert str(remote.value) == str(local.value)


# -- a cluster started with `ray start --head`, joined with --address ---------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cluster_pids(temp_dir: str, address: str) -> set[int]:
    """The processes of the cluster whose temp folder is ``temp_dir`` (and their descendants)."""
    roots = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            port = address.rsplit(":", 1)[1]
            if temp_dir in cmd or any(a.startswith("--address=") and a.endswith(f":{port}") for a in cmd.split()):
                roots.add(int(entry.name))
    everything = set(roots)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and any(is_descendant(int(entry.name), r) for r in roots):
            everything.add(int(entry.name))
    return everything


def _stop_cluster(temp_dir: str, address: str) -> None:
    pids = _cluster_pids(temp_dir, address) - {os.getpid()}
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait
        while time.monotonic() < end:
            alive = {p for p in pids if _alive(p)}
            if not alive:
                return
            time.sleep(0.2)
        pids = alive


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has exited (its parent may be an init that does not reap)


TOML = """
[experiment]
name = "tiny"
seed = 4
runs = 4
horizon = 60
runs_per_task = 1

[environment]
name = "gaussian-sphere"
agents = 3
arms = 5
dim = 3

[[algorithms]]
name = "fedlinucb"
batch = 5
"""


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedbandits.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_on_a_cluster_started_with_ray_start(tmp_path):
    """`ray start --head` (2 CPUs), then `fedbandits run --backend ray --address` from another process."""
    ray_cli = shutil.which("ray", path=os.path.dirname(sys.executable))
    if ray_cli is None:
        pytest.skip("the `ray` command is not installed beside this Python")
    config = str(tmp_path / "c.toml")
    Path(config).write_text(TOML)
    temp_dir = tempfile.mkdtemp(prefix="fbray", dir="/tmp")  # short: Ray puts sockets in it
    port = _free_port()
    address = f"127.0.0.1:{port}"
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    head = [ray_cli, "start", "--head", f"--port={port}", "--num-cpus=2", "--node-ip-address=127.0.0.1"]
    head += ["--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp_dir}"]
    try:
        start = subprocess.run(head, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert start.returncode == 0, start.stderr[-2000:]
        local = _cli("run", config, "--out", str(tmp_path / "local"), "--no-progress")
        assert local.returncode == 0, local.stderr
        remote = _cli(
            "run", config, "--out", str(tmp_path / "ray"), "--no-progress", "--backend", "ray", "--address", address,
            env=env,
        )  # fmt: skip
        assert remote.returncode == 0, remote.stderr[-2000:]
        for name in ("regret_curves.csv", "per_agent_regret.csv", "runs.csv"):
            assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
        # without the token the cluster refuses the driver: a one-line error, not a hang
        refused = _cli(
            "run", config, "--out", str(tmp_path / "x"), "--no-progress", "--backend", "ray", "--address", address,
            env={**env, "RAY_AUTH_TOKEN": "0" * 64},
        )  # fmt: skip
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines()[-1].startswith("fedbandits: error: cannot start or join")
        assert not (tmp_path / "x").exists()
    finally:
        _stop_cluster(temp_dir, address)
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert not {p for p in _cluster_pids(temp_dir, address) if _alive(p)}


def test_cli_unreachable_address_is_a_bounded_error(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(TOML)
    started = time.monotonic()
    proc = _cli(
        "run", str(config), "--out", str(tmp_path / "o"), "--backend", "ray", "--address", f"127.0.0.1:{_free_port()}",
        env={**os.environ, "FEDBANDITS_RAY_CONNECT_TIMEOUT": "2"},
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("fedbandits: error: cannot reach a Ray cluster at 127.0.0.1:")
    assert "within 2 s" in proc.stderr and proc.stderr.count("\n") == 1
    assert time.monotonic() - started < 60
    assert not (tmp_path / "o").exists()


# -- a killed driver leaves nothing of its local Ray instance running --------------------------
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_driver_leaves_no_process_of_its_local_ray_instance(tmp_path, sig):
    """`fedbandits run --backend ray --workers 2` starts a local instance (GCS, raylet, dashboard,
    monitors; under the raylet its agents and two workers running 20-s tasks).  Its driver is killed
    mid-run; then every process that was below it is gone within 5 s.  With SIGKILL the driver runs
    no clean-up: Ray's PR_SET_PDEATHSIG stops the processes the driver started itself, and the
    watchdog, woken at once by its pipe closing, SIGKILLs the raylet's children in one /proc walk
    (well under a second; 5 s is room for a loaded 2-core machine -- without the watchdog the
    dashboard and runtime-env agents were still running after 30 s).  With SIGTERM the driver stops
    the instance itself and exits 130, like the local backend."""
    config = tmp_path / "c.toml"
    config.write_text(LONG_RUN_TOML)
    env = {**os.environ, "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [sys.executable, "-m", "fedbandits.cli", "run", str(config), "--backend", "ray", "--workers", "2"]
    cmd += ["--no-progress", "--out", str(tmp_path / "out")]
    driver = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pids: set[int] = set()
    try:
        with _Deadline(240):
            while len(_task_processes_of(driver.pid)) < 2:  # both tasks running
                assert driver.poll() is None, driver.stderr.read().decode()[-2000:] if driver.stderr else ""
                time.sleep(0.3)
            time.sleep(1.0)
            pids = descendants(driver.pid)
            os.kill(driver.pid, sig)
            code = driver.wait(timeout=60)
        assert code == (130 if sig == signal.SIGTERM else -signal.SIGKILL)
        assert len(pids) >= 5, pids  # GCS, raylet, agents, two workers, ...: the instance was seen
        end = time.monotonic() + 5.0
        left = {p for p in pids if _alive(p)}
        while left and time.monotonic() < end:
            time.sleep(0.1)
            left = {p for p in left if _alive(p)}
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        survivors = {p: _command(p) for p in pids if _alive(p)}
        for pid in survivors:  # clean up before failing, by PID
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of the Ray instance survived their driver: {survivors}"


def _command(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:80]
    except OSError:
        return "?"


def _task_processes_of(driver: int) -> list[int]:
    """PIDs of Ray workers below ``driver`` running one of our tasks."""
    pids = []
    for pid in descendants(driver):
        try:
            title = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if title.startswith(TASK_TITLE):
            pids.append(pid)
    return pids
