"""Logged bandit feedback (issue #46): the generic .npz log and the Open Bandit Dataset as shipped,
read and checked (bad rows refused in one line naming the file, row and field), and fixed policies
evaluated on them."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from datafixtures import OBD_ARMS, needs_dataset, write_obd_like
from fedbandits.envs.datahome import dataset_path
from fedbandits.evaluation import fixed
from fedbandits.evaluation.csv_log import read_csv_log, write_csv_log
from fedbandits.evaluation.logs import concatenate, read_npz
from fedbandits.evaluation.obd import read_obd


def _npz(path: Path, n: int = 50, arms: int = 4, dim: int = 3, seed: int = 0, **change: np.ndarray) -> Path:
    rng = np.random.default_rng(seed)
    arrays = {
        "features": rng.normal(size=(n, arms, dim)).astype(np.float32),
        "actions": rng.integers(0, arms, size=n),
        "propensities": np.full(n, 1.0 / arms),
        "rewards": rng.random(n),
    }
    arrays.update(change)
    np.savez(path, **arrays)
    return path


def test_an_npz_log_reads_back_and_silos_concatenate(tmp_path: Path) -> None:
    one = read_npz(_npz(tmp_path / "silo-a.npz", seed=1))
    two = read_npz(_npz(tmp_path / "silo-b.npz", n=30, seed=2))
    assert (one.n, one.n_arms, one.dim) == (50, 4, 3)
    rows = np.arange(5)
    assert np.array_equal(one.features(rows)[np.arange(5), one.actions[:5]], one.logged_features(rows))
    both = concatenate([one, two])
    assert both.n == 80 and both.silo_names == ("silo-a", "silo-b")
    assert np.array_equal(np.bincount(both.silos), [50, 30])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"propensities": np.r_[np.full(7, 0.25), 0.0, np.full(42, 0.25)]}, r"round 7: propensity must be in \(0, 1\]"),
        ({"propensities": np.r_[1.5, np.full(49, 0.25)]}, r"round 0: propensity must be in \(0, 1\], got 1.5"),
        ({"actions": np.r_[np.zeros(3, int), 4, np.zeros(46, int)]}, r"round 3: action must be in \[0, 4\), got 4"),
        ({"rewards": np.r_[np.nan, np.zeros(49)]}, r"round 0: reward must be finite, got nan"),
        ({"actions": np.zeros(50)}, r"actions must be integers, got float64"),
        ({"features": np.zeros((50, 4))}, r"features must be a 3-d array of numbers"),
    ],
)
def test_a_bad_npz_log_is_refused_in_one_line_naming_the_file(tmp_path: Path, change: dict, message: str) -> None:
    path = _npz(tmp_path / "log.npz", **change)
    with pytest.raises(ValueError, match=message) as info:
        read_npz(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


def test_an_npz_log_without_an_array_or_with_objects_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "log.npz"
    np.savez(path, features=np.zeros((2, 2, 2)), actions=np.zeros(2, int), rewards=np.zeros(2))
    with pytest.raises(ValueError, match=r"log.npz: missing array 'propensities'"):
        read_npz(path)
    np.savez(
        path,
        features=np.zeros((2, 2, 2)),
        actions=np.array([{}, {}], dtype=object),
        propensities=np.ones(2),
        rewards=np.zeros(2),
    )
    with pytest.raises(ValueError, match=r"log.npz: .*[Oo]bject arrays cannot be loaded"):
        read_npz(path)
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(ValueError, match=r"text.npz: not a readable .npz file"):
        read_npz(tmp_path / "text.npz")


def test_logs_of_different_widths_do_not_concatenate(tmp_path: Path) -> None:
    one = read_npz(_npz(tmp_path / "a.npz"))
    other = read_npz(_npz(tmp_path / "b.npz", dim=4))
    with pytest.raises(ValueError, match=r"b.npz: d = 0 \+ 4 \(static \+ per round\), but .*a.npz has d = 0 \+ 3"):
        concatenate([one, other])


def test_silos_with_catalogues_of_their_own_concatenate(tmp_path: Path) -> None:
    """Silo a offers 4 candidates, silo b 6: one log of K = 6 where a's rounds offer their first 4 (the
    features of each round as its own file has them), the uniform policy is 1/K_s on the candidates
    offered, and an action beyond its silo's candidates is refused in one line."""
    static_a = np.arange(8, dtype=np.float32).reshape(4, 2)
    static_b = -np.arange(12, dtype=np.float32).reshape(6, 2)
    one = read_npz(_npz(tmp_path / "a.npz", arms=4, dim=1, static=static_a))
    two = read_npz(_npz(tmp_path / "b.npz", n=20, arms=6, dim=1, static=static_b, seed=3))
    both = concatenate([one, two])
    assert (both.n_arms, both.dim) == (6, 3) and both.catalogue is not None
    assert np.array_equal(both.arms_of(np.array([0, 49, 50, 69])), [4, 4, 6, 6])
    for log, rows, offset in ((one, np.arange(50), 0), (two, np.arange(20), 50)):
        k = log.n_arms
        assert np.array_equal(both.features(rows + offset)[:, :k], log.features(rows))
        assert np.array_equal(both.logged_features(rows + offset), log.logged_features(rows))
    assert not both.features(np.arange(50))[:, 4:].any()  # silo a's rounds: nothing beyond its 4
    offered = both.available(np.arange(70))
    assert offered is not None and offered[:50, :4].all() and not offered[:50, 4:].any() and offered[50:].all()
    pi = fixed.uniform(both)
    assert np.allclose(pi[:50, :4], 0.25) and not pi[:50, 4:].any() and np.allclose(pi[50:], 1 / 6)
    import dataclasses

    with pytest.raises(ValueError, match=r"round 3: action must be in \[0, 4\) \(silo a's candidates\), got 5"):
        dataclasses.replace(both, actions=np.r_[both.actions[:3], 5, both.actions[4:]])


# -- the Open Bandit Dataset's layout, generated (known answers), so every clone tests the reader ------

ARMS = OBD_ARMS["men"]


def _obd(folder: Path) -> Path:
    return write_obd_like(folder)


def test_the_dataset_layout_reads_into_a_factored_log(tmp_path: Path) -> None:
    log = read_obd(_obd(tmp_path), "random", "men", silo_column="user_feature_0")
    assert (log.n, log.n_arms, log.dim) == (40, ARMS, ARMS + 1)
    assert log.silo_names == ("u0", "u1") and set(log.positions) <= {0, 1, 2}
    x = log.features(np.arange(3))
    assert np.array_equal(x[:, :, :ARMS], np.broadcast_to(np.eye(ARMS), (3, ARMS, ARMS)))
    # a uniform policy on a uniform log: every weight is 1, so IPS is the mean click exactly
    ips = fixed.evaluate(log, fixed.uniform(log), estimators=("ips",))[0]
    assert ips.value == pytest.approx(log.rewards.mean()) and ips.ess == pytest.approx(log.n)
    assert fixed.on_policy(log).value == pytest.approx(log.rewards.mean())


@pytest.mark.parametrize(
    ("row", "column", "value", "message"),
    [
        (3, 4, "2", r"men.csv: row 5: field click must be in \[0, 1\], got '2'"),
        (0, 5, "0", r"men.csv: row 2: field propensity_score must be in \(0, 1\], got '0'"),
        (1, 2, "x", r"men.csv: row 3: field item_id must be a number, got 'x'"),
        (2, 3, "4", r"men.csv: row 4: field position must be in \[1, 3\], got '4'"),
        (5, 12, "nan?", r"men.csv: row 7: a user-item_affinity_\* field is not a number"),
    ],
)
def test_a_bad_dataset_row_is_refused_naming_file_row_and_field(
    tmp_path: Path, row: int, column: int, value: str, message: str
) -> None:
    path = _obd(tmp_path) / "random" / "men" / "men.csv"
    lines = list(csv.reader(path.open()))
    lines[row + 1][column] = value
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(lines)
    with pytest.raises(ValueError, match=message) as info:
        read_obd(tmp_path, "random", "men")
    assert "\n" not in str(info.value)


def test_a_dataset_folder_that_is_not_the_layout_is_refused(tmp_path: Path) -> None:
    _obd(tmp_path)
    (tmp_path / "bts" / "men" / "men.csv").unlink()
    with pytest.raises(ValueError, match=r"bts/men/men.csv: no such file"):
        read_obd(tmp_path, "bts", "men")
    with pytest.raises(ValueError, match=r"behavior must be one of 'random', 'bts', got 'ucb'"):
        read_obd(tmp_path, "ucb", "men")
    path = tmp_path / "random" / "men" / "men.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0].replace("click", "clicks"), *lines[1:]]) + "\n")
    with pytest.raises(
        ValueError, match=r"men.csv: row 1: the header must be the dataset's 14 columns .*got 'clicks' in column 5$"
    ):
        read_obd(tmp_path, "random", "men")


@needs_dataset("open-bandit-dataset-small")
def test_the_shipped_sample_reads_as_documented() -> None:
    """The sample's facts (its README): 10,000 rows per file, 80 / 34 / 46 items, the random logger's
    propensity 1/K on every row, BTS's varying ones."""
    folder = dataset_path("open-bandit-dataset-small")
    for campaign, arms in (("all", 80), ("men", 34), ("women", 46)):
        log = read_obd(folder, "random", campaign)
        assert (log.n, log.n_arms) == (10_000, arms)
        assert np.allclose(log.propensities, 1 / arms)
        bts = read_obd(folder, "bts", campaign)
        assert bts.propensities.min() < 1e-3 < 0.5 < bts.propensities.max()


def test_the_reward_model_has_an_intercept(tmp_path: Path) -> None:
    """Rewards 0.7 + 0.1 <x, e_1> on features centred at 0: DM of the uniform policy is about 0.7 (a model
    without an intercept would say about 0); 2,000 rounds, the model's error is a few 1e-3."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2000, 4, 3)).astype(np.float32)
    a = rng.integers(0, 4, size=2000)
    r = 0.7 + 0.1 * x[np.arange(2000), a, 0]
    path = _npz(tmp_path / "log.npz", n=2000, arms=4, dim=3, features=x, actions=a, rewards=r)
    log = read_npz(path)
    dm = fixed.evaluate(log, fixed.uniform(log), estimators=("dm",))[0]
    assert dm.value == pytest.approx(0.7, abs=0.01)


# -- the generic CSV log ----------------------------------------------------------------------------


def test_a_csv_log_reads_back_what_was_written(tmp_path: Path) -> None:
    """npz -> BanditLog -> CSV -> BanditLog: the same rounds, float32 features exactly (%.9g)."""
    log = read_npz(_npz(tmp_path / "a.npz", n=30, arms=3, dim=2, seed=4))
    write_csv_log(tmp_path / "a.csv", log)
    back = read_csv_log(tmp_path / "a.csv")
    assert np.array_equal(back.actions, log.actions) and np.array_equal(back.rewards, log.rewards)
    assert np.array_equal(back.propensities, log.propensities)
    assert np.array_equal(back.features(np.arange(30)), log.features(np.arange(30)))
    assert back.silo_names == ("a",)


GOOD = (
    "round,arm,chosen,propensity,reward,x0,x1\n"
    "0,0,0,,,0.1,0.2\n0,1,1,0.5,1,0.3,0.4\n"
    "7,0,1,0.25,0,0.5,0.6\n7,1,0,,,0.7,0.8\n"
)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("0,1,1,0.5,1", "0,1,1,0,1", r"line 3: field propensity must be in \(0, 1\], got '0'"),
        ("0,1,1,0.5,1", "0,1,1,0.5,x", r"line 3: field reward must be a number, got 'x'"),
        ("0,1,1,0.5,1", "0,1,0,0.5,1", r"line 3: fields propensity and reward must be empty on a line not chosen"),
        ("0,1,1,0.5,1", "0,1,2,0.5,1", r"line 3: field chosen must be 0 or 1, got '2'"),
        ("7,1,0,,,0.7", "7,2,0,,,0.7", r"line 5: field arm must be 1 \(arms run 0, 1, ... in order\), got '2'"),
        ("0,0,0,,,0.1", "0,0,1,0.5,1,0.1", r"line 3: field chosen: round 0 has a second chosen line"),
        ("7,0,1,0.25,0,0.5", "7,0,0,,,0.5", r"round 7: no line has chosen = 1"),
        ("0.1,0.2", "nan,0.2", r"line 2: field x0 must be a finite decimal number, got 'nan'"),
        ("round,arm", "round,arms", r"line 1: the header must be round,arm,chosen,propensity,reward"),
    ],
)
def test_a_bad_csv_log_line_is_refused_naming_the_line_and_field(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(GOOD.replace(old, new, 1))
    with pytest.raises(ValueError, match=message) as info:
        read_csv_log(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


def test_a_round_split_in_two_blocks_or_of_another_size_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(GOOD + "0,0,1,0.5,1,0.1,0.2\n")
    with pytest.raises(ValueError, match=r"line 6: field round: round '0' appears in two blocks"):
        read_csv_log(path)
    path.write_text(GOOD + "8,0,1,0.5,1,0.1,0.2\n")
    with pytest.raises(ValueError, match=r"round 8: 1 candidates, the first round has 2"):
        read_csv_log(path)
