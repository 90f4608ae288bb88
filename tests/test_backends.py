"""Backends and checkpoints without Ray: the configuration key, resuming, exactly-once merging, options.

The Ray backend itself is tested in tests/test_ray.py (skipped where Ray is not installed).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path

import numpy as np
import pytest

import fedbandits
from fedbandits import config_from_dict
from fedbandits.cli import main
from fedbandits.sim import backends
from fedbandits.sim.backends import check_reachable, open_backend
from fedbandits.sim.checkpoint import Checkpoint, config_key
from fedbandits.sim.runner import _merge, run_experiment
from fedbandits.sim.task import simulate_runs, task_chunks

FIELDS = ("curves", "per_agent", "sync_rounds", "messages", "bytes_sent")


def _dict(**experiment):
    return {
        "experiment": {"seed": 5, "runs": 5, "horizon": 80, "runs_per_task": 2, "name": "grid", **experiment},
        "environment": {"name": "gaussian-sphere", "agents": 4, "arms": 8, "dim": 3},
        "algorithms": [
            {"name": "fedlinucb", "label": "fed", "batch": 8},
            {"name": "fedlinucb", "label": "ldp", "batch": 8, "protocol": "ldp", "epsilon": 1.0, "delta": 1e-4},
        ],
    }


def _config(**experiment):
    return config_from_dict(_dict(**experiment))


def assert_identical(a, b):
    """Same runs, same numbers bit for bit, same reports (clipped counts included), same transcripts."""
    assert a.algorithms.keys() == b.algorithms.keys()
    np.testing.assert_array_equal(a.grid, b.grid)
    for lab in a.algorithms:
        x, y = a.algorithms[lab], b.algorithms[lab]
        for field in FIELDS:
            u, v = getattr(x, field), getattr(y, field)
            assert u.dtype == v.dtype and u.shape == v.shape, f"{lab}.{field}"
            np.testing.assert_array_equal(u, v, err_msg=f"{lab}.{field}")
        assert x.report == y.report, lab
        assert [r for r, _ in x.transcripts] == [r for r, _ in y.transcripts]
        for (_, s), (_, t) in zip(x.transcripts, y.transcripts, strict=True):
            assert s.keys() == t.keys()
            for k in s:
                np.testing.assert_array_equal(s[k], t[k])


@pytest.fixture(scope="module")
def reference():
    return run_experiment(_config())


# -- the configuration key ------------------------------------------------------------------
def test_key_ignores_what_does_not_change_a_run():
    base = config_key(_config())
    assert len(base) == 64 and int(base, 16) >= 0
    assert config_key(_config(name="other", runs=9, runs_per_task=1)) == base
    assert config_key(_config(noise_seed=5)) == base  # the effective noise seed is the seed


@pytest.mark.parametrize(
    "change",
    [
        {"experiment": {"seed": 6}},
        {"experiment": {"noise_seed": 7}},
        {"experiment": {"horizon": 81}},
        {"experiment": {"grid_points": 10}},
        {"environment": {"arms": 9}},
        {"algorithms": {0: {"batch": 9}}},
        {"algorithms": {1: {"epsilon": 2.0}}},
        {"algorithms": {0: {"label": "fed2"}}},
        {"algorithms": "reversed"},
    ],
    ids=lambda c: json.dumps(c),
)
def test_key_changes_with_what_changes_a_run(change):
    data = _dict()
    for part, value in change.items():
        if value == "reversed":
            data[part] = data[part][::-1]
        elif isinstance(data[part], list):
            for i, fields in value.items():
                data[part][i].update(fields)
        else:
            data[part].update(value)
    assert config_key(config_from_dict(data)) != config_key(_config())


def test_key_depends_on_transcripts_and_is_the_same_in_another_process():
    config = _config()
    assert config_key(config, record_transcript=True) != config_key(config)
    code = (
        "from fedbandits import config_from_dict; from fedbandits.sim.checkpoint import config_key; "
        f"print(config_key(config_from_dict({_dict()!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == config_key(config)


# -- merging: any arrival order, every run exactly once ---------------------------------------
def test_merge_any_order_is_identical(reference):
    config = _config()
    chunks = [simulate_runs(config, runs) for runs in task_chunks(config)]
    shuffled = chunks[:]
    random.Random(1).shuffle(shuffled)
    assert [c.runs for c in shuffled] != [c.runs for c in chunks]
    assert_identical(_merge(config, shuffled, 0.0), reference)


def test_merge_rejects_duplicates_and_gaps():
    config = _config()
    chunks = [simulate_runs(config, runs) for runs in task_chunks(config)]
    with pytest.raises(RuntimeError, match="delivered twice"):
        _merge(config, [*chunks, chunks[1]], 0.0)
    with pytest.raises(RuntimeError, match="no result"):
        _merge(config, chunks[:-1], 0.0)


# -- checkpoint and resume (local backend) ----------------------------------------------------
class _Counting:
    """simulate_runs that records which runs it computed, optionally raising at the n-th call."""

    def __init__(self, fail_at: int | None = None, error: type[BaseException] = KeyboardInterrupt) -> None:
        self.calls: list[list[int]] = []
        self.fail_at = fail_at
        self.error = error

    def __call__(self, config, runs, on_step=None, record_transcript=False):
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise self.error("interrupted")
        self.calls.append(list(runs))
        return simulate_runs(config, runs, on_step, record_transcript)


def test_interrupted_run_resumes_without_redoing_finished_tasks(tmp_path, monkeypatch, reference):
    config = _config()
    first = _Counting(fail_at=2)
    monkeypatch.setattr(backends, "simulate_runs", first)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, checkpoint=tmp_path)
    assert first.calls == [[0, 1], [2, 3]]
    store = Checkpoint(tmp_path, config)
    assert sorted(p.name for p in store.folder.glob("*.pkl")) == ["runs-000000-000001.pkl", "runs-000002-000003.pkl"]
    assert not list(store.folder.glob("*.tmp"))
    assert json.loads((store.folder / "key.json").read_text())["sha256"] == config_key(config)

    second = _Counting()
    monkeypatch.setattr(backends, "simulate_runs", second)
    messages: list[str] = []
    resumed = run_experiment(config, checkpoint=tmp_path, resume=True, log=messages.append)
    assert second.calls == [[4]]  # only the unfinished task
    assert messages == [f"resume: 2 of 3 task(s) already finished in {store.folder}, 1 to run"]
    assert_identical(resumed, reference)
    assert len(list(store.folder.glob("*.pkl"))) == 3

    third = _Counting()
    monkeypatch.setattr(backends, "simulate_runs", third)
    assert_identical(run_experiment(config, checkpoint=tmp_path, resume=True), reference)
    assert third.calls == []  # everything was finished


def test_without_resume_the_checkpoint_is_written_but_not_read(tmp_path, monkeypatch):
    config = _config()
    run_experiment(config, checkpoint=tmp_path)
    counting = _Counting()
    monkeypatch.setattr(backends, "simulate_runs", counting)
    run_experiment(config, checkpoint=tmp_path)
    assert counting.calls == task_chunks(config)


def test_resume_with_more_runs_and_other_grouping(tmp_path, monkeypatch):
    run_experiment(_config(runs=4), checkpoint=tmp_path)
    counting = _Counting()
    monkeypatch.setattr(backends, "simulate_runs", counting)
    more = run_experiment(_config(runs=7), checkpoint=tmp_path, resume=True)
    assert counting.calls == [[4, 5], [6]]  # runs 0-3 reused: run r does not depend on how many runs there are
    monkeypatch.undo()
    assert_identical(more, run_experiment(_config(runs=7)))
    # another grouping is another set of tasks: recomputed (but task [6] exists already), same numbers
    counting = _Counting()
    monkeypatch.setattr(backends, "simulate_runs", counting)
    regrouped = run_experiment(_config(runs=7, runs_per_task=3), checkpoint=tmp_path, resume=True)
    assert counting.calls == [[0, 1, 2], [3, 4, 5]]
    assert_identical(regrouped, more)


def test_damaged_or_foreign_checkpoint_files_are_recomputed(tmp_path, monkeypatch, reference):
    config = _config()
    run_experiment(config, checkpoint=tmp_path)
    store = Checkpoint(tmp_path, config)
    store.path([0, 1]).write_bytes(b"not a pickle")
    # a file of another config (other seed) copied over runs 2-3: its key does not match
    other = Checkpoint(tmp_path, _config(seed=99))
    other.save(simulate_runs(_config(seed=99), [2, 3]))
    store.path([2, 3]).write_bytes(other.path([2, 3]).read_bytes())
    counting = _Counting()
    monkeypatch.setattr(backends, "simulate_runs", counting)
    assert_identical(run_experiment(config, checkpoint=tmp_path, resume=True), reference)
    assert counting.calls == [[0, 1], [2, 3]]
    assert store.load([0, 1]) is not None  # rewritten


def test_resume_with_a_pool_and_transcripts(tmp_path):
    config = _config(runs=4, runs_per_task=1)
    full = run_experiment(config, record_transcript=True)
    assert full.algorithms["ldp"].transcripts
    run_experiment(config.with_experiment(runs=2), record_transcript=True, checkpoint=tmp_path)
    resumed = run_experiment(config, workers=2, record_transcript=True, checkpoint=tmp_path, resume=True)
    assert_identical(resumed, full)
    # without transcripts the key differs: nothing is reused, and nothing recorded
    plain = Checkpoint(tmp_path, config)
    assert not plain.folder.exists()


def test_a_shared_local_pool_runs_every_task_in_its_workers():
    # shared=True (reproduce with --workers > 1): one pool serves every config, even a config of one
    # task runs in a worker (the driver only merges), and the numbers are those of one process
    config = _config(runs=2)  # one task of runs_per_task = 2
    assert len(task_chunks(config)) == 1
    with open_backend("local", 2, shared=True) as backend:
        results = run_experiment(config, backend=backend)
        pool = backend._pool
        assert pool is not None and pool._processes  # not run in this process
        again = run_experiment(config, backend=backend)
        assert backend._pool is pool
    assert backend._pool is None  # closed with the backend
    assert_identical(results, run_experiment(config))
    assert_identical(again, results)


def test_closing_a_shared_pool_wakes_the_runs_waiting_on_it():
    # reproduce's experiments wait on one shared pool from threads; after an error or an interruption
    # its owner closes it, and every waiting run must end (a queued future cancelled by the pool's
    # shutdown wakes no waiter: without the check the threads, and the process, would hang)
    config = _config(horizon=100_000, runs=4)  # two tasks of many seconds each: still running when closed
    backend = open_backend("local", 2, shared=True)
    errors: list[BaseException] = []

    def one() -> None:
        try:
            run_experiment(config, backend=backend)
        except Exception as exc:  # which error depends on the moment of the close
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(3)
    started = time.monotonic()
    backend.close()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert len(errors) == 3 and all(isinstance(e, RuntimeError) for e in errors), errors
    assert time.monotonic() - started < 30
    with pytest.raises(RuntimeError, match="closed"):  # a closed shared pool takes no new run
        run_experiment(config, backend=backend)


def test_resume_needs_a_checkpoint():
    with pytest.raises(ValueError, match="checkpoint"):
        run_experiment(_config(), resume=True)
    with pytest.raises(ValueError, match="out= or checkpoint="):
        fedbandits.run(_config(), resume=True)


def test_api_run_checkpoints_into_out(tmp_path, reference):
    out = tmp_path / "res"
    first = fedbandits.run(_dict(), out=out)
    assert_identical(first, reference)
    assert len(list((out / "checkpoint").glob("*/runs-*.pkl"))) == len(task_chunks(_config()))
    assert_identical(fedbandits.run(_dict(), out=out, resume=True), reference)


# -- options ----------------------------------------------------------------------------------
def test_open_backend_validation():
    with pytest.raises(ValueError, match="backend must be one of 'local', 'ray'"):
        open_backend("spark")
    with pytest.raises(ValueError, match="only for the ray backend"):
        open_backend("local", address="127.0.0.1:6379")
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        open_backend("local", workers=0)
    with pytest.raises(ValueError, match="only for the ray backend"):
        run_experiment(_config(), address="127.0.0.1:6379")
    with pytest.raises(ValueError, match="backend must be one of"):
        run_experiment(_config(), backend="dask")


def test_unreachable_address_fails_within_the_timeout():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ValueError, match=f"cannot reach a Ray cluster at 127.0.0.1:{port} within 1 s"):
        check_reachable(f"127.0.0.1:{port}", timeout=1.0)
    assert time.monotonic() - started < 5.0


def _invoke(argv):
    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


TOML = """
[experiment]
name = "tiny"
seed = 4
runs = 3
horizon = 40
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


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--address", "127.0.0.1:6379"], "--address is only for --backend ray"),
        (["--retries", "2"], "--retries is only for --backend ray"),
        (["--backend", "spark"], "invalid choice: 'spark'"),
        (["--retries", "-1"], "--retries"),
    ],
)
def test_cli_backend_option_errors(tmp_path, extra, needle):
    config = tmp_path / "c.toml"
    config.write_text(TOML)
    code, out, err = _invoke(["run", str(config), "--out", str(tmp_path / "o"), "--no-progress", *extra])
    assert code == 2 and out == ""
    assert err.startswith("fedbandits: error: ") and err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "o").exists()


def test_cli_ray_backend_without_ray_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    config = tmp_path / "c.toml"
    config.write_text(TOML)
    for argv in (
        ["run", str(config), "--out", str(tmp_path / "o"), "--backend", "ray", "--no-progress"],
        ["reproduce", "zhou-fig2a", "--scale", "tiny", "--out", str(tmp_path / "o"), "--backend", "ray"],
    ):
        code, out, err = _invoke(argv)
        assert (code, out) == (2, "")
        assert err == "fedbandits: error: the ray backend needs Ray: pip install 'fedbandits[ray]'\n"
    assert not (tmp_path / "o").exists()


def test_cli_run_resume(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(TOML)
    out = tmp_path / "o"
    code, _, err = _invoke(["run", str(config), "--out", str(out), "--no-progress", "--workers", "2"])
    assert code == 0 and err == ""
    first = (out / "regret_curves.csv").read_bytes()
    stored = sorted(p.name for p in (out / "checkpoint").glob("*/*.pkl"))
    assert stored == [f"runs-{r:06d}-{r:06d}.pkl" for r in range(3)]
    (out / "regret_curves.csv").unlink()
    code, _, err = _invoke(["run", str(config), "--out", str(out), "--no-progress", "--resume"])
    assert code == 0
    assert err.startswith("fedbandits: resume: 3 of 3 task(s) already finished in ") and err.endswith(", 0 to run\n")
    assert (out / "regret_curves.csv").read_bytes() == first


def test_cli_reproduce_resume(tmp_path):
    out = tmp_path / "r"
    argv = ["reproduce", "zhou-fig2a", "--scale", "tiny", "--out", str(out), "--no-progress"]
    code, _, err = _invoke(argv)
    assert code == 0, err
    first = (out / "zhou-fig2a" / "runs.csv").read_bytes()
    report = (out / "report.md").read_text()
    assert "`--resume` continues an interrupted reproduction" in report
    code, stdout, err = _invoke([*argv, "--resume"])
    assert code == 0
    assert "zhou-fig2a (Figure 2a)" in stdout
    assert err.startswith("fedbandits: resume: ") and ", 0 to run" in err
    assert (out / "zhou-fig2a" / "runs.csv").read_bytes() == first
    assert Path(out / "checkpoint").is_dir()
