"""The Open Bandit Dataset's campaigns as silos and tuning on logged rounds the report does not use
(issue #46): the campaigns keep their own items and share features of one meaning; a grid is tuned by
replay on every silo's first rounds and the tuned config reported on the rest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from datafixtures import OBD_ARMS, needs_dataset, write_obd_like
from fedbandits.cli import main
from fedbandits.config import config_from_dict
from fedbandits.envs.datahome import dataset_path
from fedbandits.evaluation.logs import BanditLog
from fedbandits.evaluation.obd import CAMPAIGNS, read_obd, read_obd_campaigns
from fedbandits.evaluation.tuned import tune_on_log


def test_the_campaigns_are_silos_with_their_own_items_and_shared_features(tmp_path: Path) -> None:
    write_obd_like(tmp_path)
    log = read_obd_campaigns(tmp_path, "random")
    assert log.silo_names == CAMPAIGNS and log.dim == 3 and log.n_arms == max(OBD_ARMS.values())
    offset = 0
    for s, campaign in enumerate(CAMPAIGNS):
        alone = read_obd(tmp_path, "random", campaign, features="shared")
        rows = np.arange(alone.n)
        k = OBD_ARMS[campaign]
        assert np.array_equal(log.arms_of(rows + offset), np.full(alone.n, k))
        assert np.array_equal(log.features(rows + offset)[:, :k], alone.features(rows))
        # the shared features: a constant, the item's numeric attribute (from item_context.csv), the affinity
        items = np.loadtxt(tmp_path / "random" / campaign / "item_context.csv", delimiter=",", skiprows=1, usecols=2)
        assert np.allclose(alone.static, np.column_stack([np.ones(k), items]), atol=1e-6)
        assert (log.silos[rows + offset] == s).all()
        offset += alone.n


def _log(seed: int, n: int) -> BanditLog:
    """A uniform logger over 4 candidates on 2 silos; reward 1 exactly when the candidate's first feature
    is the round's largest (so a learner that exploits wins, a uniformly random one earns 1/4)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4, 2)).astype(np.float32)
    a = rng.integers(0, 4, size=n)
    r = (a == x[:, :, 0].argmax(axis=1)).astype(float)
    return BanditLog(a, np.full(n, 0.25), r, np.zeros((4, 0), np.float32), x, np.arange(n) % 2, ("a", "b"))


CONFIG = {
    "experiment": {"horizon": 100, "runs": 2, "seed": 3},
    "environment": {"name": "gaussian-sphere"},
    "algorithms": [{"name": "linucb-independent", "label": "greedy", "exploration": "epsilon-greedy"}],
}


def test_tuning_chooses_on_the_first_rounds_and_reports_on_the_rest() -> None:
    """epsilon-greedy at rate 1 is a uniform choice (about 1/4), at rate 0 it exploits the features (well
    above): the tuning must choose rate 0 on the first half, and the report replays only the second."""
    config = config_from_dict(CONFIG)
    log = _log(4, 2000)
    tuning = tune_on_log(config, {"greedy": {"exploration_rate": [1.0, 0.0]}}, log, share=0.5)
    uniform, exploiting = tuning.candidates
    assert exploiting.chosen and not uniform.chosen and exploiting.value > uniform.value + 0.2
    assert tuning.config.algorithms[0].params.exploration_rate == 0.0  # type: ignore[attr-defined]
    assert tuning.tuning_rounds == tuning.report.n == 1000
    assert np.array_equal(tuning.report.rewards, log.rewards[1000:])  # the rounds after every tuning one
    assert tuning.seed not in (config.experiment.seed,)  # the tuning's noise: never a report seed
    # the other order of the grid: the same choice (the rule reads values, not positions)
    again = tune_on_log(config, {"greedy": {"exploration_rate": [0.0, 1.0]}}, log, share=0.5)
    assert again.config.algorithms[0].params.exploration_rate == 0.0  # type: ignore[attr-defined]


def test_the_evaluate_command_tunes_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, grid = tmp_path / "eval.toml", tmp_path / "grid.toml"
    config.write_text(
        '[experiment]\nhorizon = 50\nruns = 2\nseed = 3\n[[algorithms]]\nname = "linucb-independent"\n'
        'label = "LinTS"\nexploration = "thompson"\n',
        encoding="utf-8",
    )
    grid.write_text('[grid."LinTS"]\nposterior_scale = [0.05, 0.5]\n', encoding="utf-8")
    write_obd_like(tmp_path / "obd", rows=200)
    argv = [str(config), "--obd", str(tmp_path / "obd"), "--silos-by", "campaign", "--tune", str(grid)]
    assert main(["evaluate", *argv, "--json", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("tuned on the first 300 of 600 rounds (tuning seed 1000;")
    assert sum(line.startswith(" * LinTS [posterior_scale=") for line in out[1:3]) == 1
    assert "300 rounds, K = 8/4/5, d = 3, 3 silo(s)" in out[3]
    document = json.loads((tmp_path / "out.json").read_text())
    assert document["tuning"]["tuning_rounds"] == 300 and len(document["tuning"]["candidates"]) == 2
    for extra, message in (
        (["--features", "items"], "the campaigns share no item"),
        (["--tune-share", "1.5"], "--tune-share must be in (0, 1), got 1.5"),
    ):
        assert main(["evaluate", *argv, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err
    bad = tmp_path / "bad.toml"
    bad.write_text('[grid."nobody"]\nbeta = [1]\n', encoding="utf-8")
    assert main(["evaluate", str(config), "--obd", str(tmp_path / "obd"), "--tune", str(bad)]) == 2
    assert 'grid."nobody": no algorithm entry has that label' in capsys.readouterr().err


@needs_dataset("open-bandit-dataset-small")
def test_the_shipped_campaigns_read_as_silos() -> None:
    log = read_obd_campaigns(dataset_path("open-bandit-dataset-small"), "random")
    assert log.n == 30_000 and np.array_equal(np.bincount(log.silos), [10_000] * 3)
    assert log.catalogue is not None and list((log.catalogue >= 0).sum(axis=1)) == [80, 34, 46]
