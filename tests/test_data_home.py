"""Where the real data sets are found (issue #29): the data home, the one-line message when one is
missing, the pool workers' view of it, and the data-dependent tests on a clone without ../shared."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path

import pytest

import fedbandits
from datafixtures import write_mslr_like
from fedbandits.cli import main
from fedbandits.config import ConfigError, config_from_dict
from fedbandits.envs.datahome import (
    DATA_ENV,
    DATASETS,
    MissingDataSet,
    check_required_data,
    data_home,
    dataset_path,
    require_dataset,
)
from fedbandits.envs.ltr import LearningToRankParams
from fedbandits.envs.ltr_instance import resolve_files
from fedbandits.envs.movielens import MovieLensClustersParams, MovieLensLinearParams, resolve_path
from fedbandits.sim.runner import run_experiment

TESTS = Path(__file__).resolve().parent


def test_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(DATA_ENV, raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert data_home() == tmp_path / "home" / ".local" / "share" / "fedbandits"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/xdg")  # the XDG rules ignore a relative path
    assert data_home() == tmp_path / "home" / ".local" / "share" / "fedbandits"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_home() == tmp_path / "xdg" / "fedbandits"
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "mine"))  # the variable comes first
    assert data_home() == tmp_path / "mine"
    assert dataset_path("mslr-web-fold1-5k") == tmp_path / "mine" / "mslr-web-fold1-5k"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(DATA_ENV, "rel")  # relative to the working directory, made absolute
    assert data_home() == tmp_path / "rel"
    with pytest.raises(ValueError, match="unknown data set 'nope'; valid: movielens-latest-small"):
        dataset_path("nope")


def test_an_explicit_path_comes_before_the_data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = write_mslr_like(tmp_path / "mine").folder
    (tmp_path / "ml").mkdir()
    (tmp_path / "ml" / "ratings.csv").write_text("1,2,4.0,5\n")
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "empty"))
    assert resolve_files(str(mine)) == [mine / "test.txt", mine / "train.txt"]
    assert resolve_path(str(tmp_path / "ml")) == tmp_path / "ml" / "ratings.csv"
    with pytest.raises(MissingDataSet):
        resolve_files("")
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    (tmp_path / "mine").rename(tmp_path / "mslr-web-fold1-5k")
    assert resolve_files("") == [tmp_path / "mslr-web-fold1-5k" / n for n in ("test.txt", "train.txt")]


@pytest.mark.parametrize("name", list(DATASETS))
@pytest.mark.parametrize("variable", [True, False])
def test_missing_data_set_is_one_line_with_origin_and_place(
    name: str, variable: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    if variable:
        monkeypatch.setenv(DATA_ENV, str(tmp_path / "data"))
    else:
        monkeypatch.delenv(DATA_ENV, raising=False)
    folder = (tmp_path / "data" if variable else tmp_path / "home" / ".local" / "share" / "fedbandits") / name
    with pytest.raises(MissingDataSet) as err:
        require_dataset(name)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"data set {name} (")
    assert re.search(r"https://\S+", text), text  # where to get it
    assert f" in {folder}/ " in text  # where to put it
    assert (f"${DATA_ENV}/{name}" in text) == variable and (f"export {DATA_ENV}=DIR" in text) != variable
    assert text.endswith("or set the environment's path to your copy")
    folder.mkdir(parents=True)
    assert require_dataset(name) == folder


def _invoke(argv: list[str]) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("env", "name"), [("movielens", "movielens-latest-small"), ("learning-to-rank", "mslr-web-fold1-5k")]
)
def test_cli_prints_the_missing_data_set_in_one_line(
    env: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "empty"))
    config = tmp_path / "c.toml"
    config.write_text(
        f'[experiment]\nname = "x"\nhorizon = 10\n[environment]\nname = "{env}"\nagents = 2\n'
        '[[algorithms]]\nname = "linucb-independent"\n'
    )
    code, out, err = _invoke(["run", str(config), "--out", str(tmp_path / "out"), "--no-progress", "--workers", "1"])
    assert code == 2 and out == ""
    assert err.startswith(f"fedbandits: error: data set {name} (") and err.count("\n") == 1
    assert str(tmp_path / "empty" / name) in err


def test_reproduce_refuses_a_missing_data_set_before_any_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`reproduce all` checks the data sets of every figure before the first run (zhou-fig2a, the
    first figure, needs none): one line, nothing written."""
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "empty"))
    out = tmp_path / "r"
    code, stdout, err = _invoke(["reproduce", "all", "--scale", "tiny", "--out", str(out), "--no-progress"])
    assert code == 2 and stdout == "" and not out.exists()
    assert err.startswith("fedbandits: error: data set mslr-web-fold1-5k (") and err.count("\n") == 1


def test_required_data_follows_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert LearningToRankParams().required_data() == ("mslr-web-fold1-5k",)
    assert LearningToRankParams(path="mine").required_data() == ()
    assert MovieLensClustersParams().required_data() == ("movielens-latest-small",)
    assert MovieLensLinearParams(path="r.csv").required_data() == ()
    check_required_data(LearningToRankParams(path="mine"))  # an explicit path: nothing to check here
    check_required_data(object())  # an environment without data sets
    with pytest.raises(MissingDataSet, match="data set movielens-latest-small"):
        check_required_data(MovieLensLinearParams())
    (tmp_path / "movielens-latest-small").mkdir()
    check_required_data(MovieLensLinearParams())


def test_pool_workers_read_the_drivers_data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork server keeps the environment it started with: a data folder chosen after it started
    must still reach the workers (the pool's initializer passes the driver's data home)."""
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "empty"))
    raw = {
        "experiment": {"name": "x", "seed": 1, "runs": 2, "horizon": 5, "runs_per_task": 1},
        "environment": {"name": "gaussian-sphere", "agents": 2, "arms": 3, "dim": 2},
        "algorithms": [{"name": "linucb-independent"}],
    }
    run_experiment(config_from_dict(raw), workers=2)  # starts the fork server (if not yet) without the data
    write_mslr_like(tmp_path / "data" / "mslr-web-fold1-5k")
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "data"))
    raw["environment"] = {"name": "learning-to-rank", "agents": 2, "arms": 5, "cache_dir": ""}
    results = run_experiment(config_from_dict(raw), workers=2)
    (result,) = results.algorithms.values()
    assert results.tasks == 2 and result.curves.shape[0] == 2  # both runs, each a task of its own


def test_data_dependent_tests_skip_on_a_clone_without_shared(tmp_path: Path) -> None:
    """The real-data tests of test_ltr.py and test_movielens.py, run in a copy of the test folder
    with no ../shared beside it, no $FEDBANDITS_DATA and an empty user data folder: every one skips
    with the one-line reason naming the data set and where it was looked for; none fails."""
    clone = tmp_path / "clone"
    (clone / "tests").mkdir(parents=True)
    shutil.copy(TESTS.parent / "pyproject.toml", clone)
    for name in ("conftest.py", "datafixtures.py", "test_ltr.py", "test_movielens.py"):
        shutil.copy(TESTS / name, clone / "tests")
    env = {k: v for k, v in os.environ.items() if k not in (DATA_ENV, "XDG_DATA_HOME", "PYTEST_ADDOPTS")}
    env["HOME"] = str(tmp_path / "home")
    src = str(Path(fedbandits.__file__).resolve().parents[1])  # this checkout's package, whatever is installed
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", "real_data", "tests"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    summary = re.search(r"^(\d+) skipped, (\d+) deselected in ", output, re.MULTILINE)
    assert summary and int(summary.group(1)) >= 9, output  # 4 in test_ltr.py, 5 in test_movielens.py
    reasons = re.findall(r"^SKIPPED \[1\] tests/test_\w+\.py:\d+: (.*)$", output, re.MULTILINE)
    assert len(reasons) == int(summary.group(1)), output
    home = tmp_path / "home" / ".local" / "share" / "fedbandits"
    for reason in reasons:
        name = re.match(r"real data set ([\w-]+) absent \(", reason)
        assert name and name.group(1) in DATASETS, reason
        assert f"({home / name.group(1)}; set {DATA_ENV}); tests never download data" in reason


@pytest.mark.parametrize(
    ("environment", "extra"),
    [("learning-to-rank", {}), ("movielens-clusters", {"users": 50, "items": 200, "clusters": 4})],
)
def test_an_environment_that_needs_scikit_learn_is_refused_in_one_line_without_it(
    environment: str, extra: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the [data] extra (the README's first command installs none), the config is refused
    before anything runs, naming the extra -- not a worker's traceback at the first round."""
    import importlib.util

    find_spec = importlib.util.find_spec

    def without_sklearn(name: str, *args: object) -> object:
        return None if name == "sklearn" else find_spec(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", without_sklearn)
    config = {
        "experiment": {"name": "x", "runs": 1, "horizon": 10},
        "environment": {"name": environment, "agents": 2, "arms": 3, **extra},
        "algorithms": [{"name": "linucb-independent"}],
    }
    with pytest.raises(ConfigError, match=r"needs sklearn, which is not installed: pip install 'fedbandits\[data\]'"):
        config_from_dict(config)
