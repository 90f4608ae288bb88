"""The data-files environment: file formats, per-agent streams, exports and the CLI."""

from __future__ import annotations

import io
import json
import math
import zipfile
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

import fedbandits
from fedbandits.cli import main
from fedbandits.config import ConfigError, config_from_dict, load_config, loads_config
from fedbandits.envs.files import BLOCK, DataFiles, DataFilesParams, read_data_file, write_data_file
from fedbandits.registry import ENVIRONMENTS
from fedbandits.sim.export import export_partition
from fedbandits.sim.seeding import env_rngs

KNOWN_CSV = """user,arm,reward,a,b
u1,0,0.25,1,0
u1,1,0.75,0,1
u2,0,0.5,0.5,0.5
u2,1,0,-0.5,0.25
"""
KNOWN_FEATURES = np.array([[[1, 0], [0, 1]], [[0.5, 0.5], [-0.5, 0.25]]], dtype=np.float32)
KNOWN_REWARDS = np.array([[0.25, 0.75], [0.5, 0.0]], dtype=np.float32)


def make_files(folder: Path, sizes=(3, 5, 2), arms=4, dim=3, seed=0, suffix=".npz") -> list[str]:
    """One random file per agent with sizes[i] users."""
    rng = np.random.default_rng(seed)
    paths = []
    for i, n in enumerate(sizes):
        x = rng.normal(size=(n, arms, dim)) / math.sqrt(dim)
        paths.append(str(write_data_file(folder / f"agent-{i}{suffix}", x, rng.uniform(size=(n, arms)))))
    return paths


def play(env: DataFiles, rounds: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """features (T, R, M, K, d), means (T, R, M, K), noise (T, R, M) of the next ``rounds`` rounds."""
    f, m, n = [], [], []
    for _ in range(rounds):
        rnd = env.next_round()
        f.append(rnd.features.copy())
        m.append(rnd.means.copy())
        n.append(rnd.noise.copy())
    return np.stack(f), np.stack(m), np.stack(n)


# --------------------------------------------------------------------------------------------
# known answer
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".csv", ".npz"])
def test_file_order_reproduces_the_file(tmp_path, suffix):
    if suffix == ".csv":
        path = tmp_path / "silo.csv"
        path.write_text(KNOWN_CSV, encoding="utf-8")
    else:
        path = write_data_file(tmp_path / "silo.npz", KNOWN_FEATURES, KNOWN_REWARDS)
    env = DataFiles(env_rngs(0, [0]), DataFilesParams(paths=[str(path)]))
    assert (env.n_agents, env.n_arms, env.dim, env.rounds_available) == (1, 2, 2, 2)
    for n in range(2):
        rnd = env.next_round()
        assert rnd.features.shape == (1, 1, 2, 2) and rnd.features.dtype == np.float32
        assert rnd.means.dtype == np.float32 and rnd.noise.dtype == np.float64
        np.testing.assert_array_equal(rnd.features[0, 0], KNOWN_FEATURES[n])
        np.testing.assert_array_equal(rnd.means[0, 0], KNOWN_REWARDS[n])
        np.testing.assert_array_equal(rnd.noise, 0.0)
        y = env.rewards(rnd.means[..., 1], rnd.noise)
        assert y.dtype == np.float64 and y.shape == (1, 1)
        assert y[0, 0] == KNOWN_REWARDS[n, 1]
    with pytest.raises(ValueError, match=r"silo\.(csv|npz) has 2 users, but round 3 was asked for"):
        env.next_round()


def test_cycle_in_file_order_starts_over(tmp_path):
    path = write_data_file(tmp_path / "silo.npz", KNOWN_FEATURES, KNOWN_REWARDS)
    env = DataFiles(env_rngs(0, [0]), DataFilesParams(paths=[str(path)], cycle=True))
    assert env.rounds_available is None
    _, means, _ = play(env, 2 * BLOCK + 3)
    np.testing.assert_array_equal(means[:, 0, 0], np.tile(KNOWN_REWARDS, (BLOCK + 2, 1))[: 2 * BLOCK + 3])


def test_shuffle_serves_a_permutation_of_the_rows(tmp_path):
    paths = make_files(tmp_path, sizes=(7, 11))
    env = DataFiles(env_rngs(3, [0, 1]), DataFilesParams(paths=paths, order="shuffle", cycle=True))
    _, means, _ = play(env, 22)
    for i, path in enumerate(paths):
        rows = read_data_file(path).rewards
        n = rows.shape[0]
        for r in range(2):
            for epoch in range(2):  # every epoch serves each user exactly once
                served = means[epoch * n : (epoch + 1) * n, r, i]
                assert sorted(map(tuple, served.tolist())) == sorted(map(tuple, rows.tolist()))
    # two runs draw different permutations (probability of a clash 1/7! * 1/11!)
    assert not np.array_equal(means[:, 0], means[:, 1])


# --------------------------------------------------------------------------------------------
# per-agent streams: the one-agent environment is agent i's slice of the full one
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["file", "shuffle"])
@pytest.mark.parametrize("noise", [0.0, 0.3])
@pytest.mark.parametrize("cycle", [False, True])
def test_for_agent_is_bit_identical_to_the_full_environment(tmp_path, order, noise, cycle):
    sizes = (3, 300, 1) if cycle else (2 * BLOCK + 5, BLOCK + 7, 300)
    paths = make_files(tmp_path, sizes=sizes, arms=3, dim=2)
    params = DataFilesParams(paths=paths, order=order, reward_noise_sd=noise, cycle=cycle)
    rounds = 2 * BLOCK + 40 if cycle else min(sizes)  # cycle: past every N, across block refills
    full = DataFiles(env_rngs(5, [0, 1, 2]), params)
    f_full, m_full, n_full = play(full, rounds)
    assert np.count_nonzero(n_full) == (n_full.size if noise else 0)
    for i in range(len(paths)):
        one = DataFiles.for_agent(env_rngs(5, [0, 1, 2]), params, i)
        assert one.n_agents == 1 and one.agent_ids == (i,) and one.federation_agents == 3
        f, m, n = play(one, rounds)
        assert np.array_equal(f[:, :, 0], f_full[:, :, i])
        assert np.array_equal(m[:, :, 0], m_full[:, :, i])
        assert np.array_equal(n[:, :, 0], n_full[:, :, i])
        chosen = m[:, :, 0, 1]
        assert np.array_equal(one.rewards(chosen, n[:, :, 0]), full.rewards(m_full[:, :, i, 1], n_full[:, :, i]))


def test_deployed_silo_without_paths_in_the_config(tmp_path):
    """The deployment's config knows M, K, d only; each silo passes its own file."""
    paths = make_files(tmp_path, sizes=(4, 6))
    sim = DataFilesParams(paths=paths, order="shuffle", reward_noise_sd=0.1, cycle=True)
    deployed = DataFilesParams(agents=2, arms=4, dim=3, order="shuffle", reward_noise_sd=0.1, cycle=True)
    _, m_full, n_full = play(DataFiles(env_rngs(8, [0]), sim), 20)
    for i, path in enumerate(paths):
        _, m, n = play(DataFiles.for_agent(env_rngs(8, [0]), deployed, i, path=path), 20)
        assert np.array_equal(m[:, :, 0], m_full[:, :, i]) and np.array_equal(n[:, :, 0], n_full[:, :, i])
    with pytest.raises(ValueError, match=r"agent 1 needs its data file: pass `path`"):
        DataFiles.for_agent(env_rngs(8, [0]), deployed, 1)
    with pytest.raises(ValueError, match=r"agent must be an integer in \[0, 1\], got 2"):
        DataFiles.for_agent(env_rngs(8, [0]), deployed, 2, path=paths[0])
    wrong = DataFilesParams(agents=2, arms=5, dim=3)
    with pytest.raises(ValueError, match=r"agent-0\.npz has arms = 4, but the config says arms = 5"):
        DataFiles.for_agent(env_rngs(8, [0]), wrong, 0, path=paths[0])


def test_runs_do_not_depend_on_the_batch(tmp_path):
    params = DataFilesParams(paths=make_files(tmp_path), order="shuffle", reward_noise_sd=0.2, cycle=True)
    f2, m2, n2 = play(DataFiles(env_rngs(4, [0, 1]), params), 30)
    f1, m1, n1 = play(DataFiles(env_rngs(4, [1]), params), 30)
    assert np.array_equal(f1[:, 0], f2[:, 1]) and np.array_equal(m1[:, 0], m2[:, 1])
    assert np.array_equal(n1[:, 0], n2[:, 1])


# --------------------------------------------------------------------------------------------
# formats
# --------------------------------------------------------------------------------------------
def test_csv_round_trips_float32_exactly(tmp_path):
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(50, 3, 4)) * 10.0 ** rng.integers(-30, 30, size=(50, 3, 4))).astype(np.float32)
    x[0, 0] = [np.finfo(np.float32).max, np.finfo(np.float32).tiny, -0.0, 1e-45]  # extremes, a subnormal
    mu = rng.uniform(-1, 2, size=(50, 3)).astype(np.float32)
    back = read_data_file(write_data_file(tmp_path / "a.csv", x, mu))
    assert back.features.dtype == np.float32
    assert np.array_equal(back.features, x) and np.array_equal(back.rewards, mu)
    assert np.array_equal(np.signbit(back.features), np.signbit(x))


def test_npz_and_csv_give_identical_environments(tmp_path):
    npz = make_files(tmp_path, suffix=".npz")
    csv = [str(write_data_file(Path(p).with_suffix(".csv"), *_arrays(p))) for p in npz]
    runs = [0, 1]
    for order in ("file", "shuffle"):
        a = play(DataFiles(env_rngs(2, runs), DataFilesParams(paths=npz, order=order, reward_noise_sd=0.5)), 2)
        b = play(DataFiles(env_rngs(2, runs), DataFilesParams(paths=csv, order=order, reward_noise_sd=0.5)), 2)
        for u, v in zip(a, b, strict=True):
            assert np.array_equal(u, v)


def _arrays(path: str) -> tuple[np.ndarray, np.ndarray]:
    data = read_data_file(path)
    return data.features, data.rewards


def test_csv_accepts_bom_crlf_spaces_and_no_final_newline(tmp_path):
    path = tmp_path / "w.csv"
    text = "\ufeff" + KNOWN_CSV.replace("\n", "\r\n").replace(",0.5,", ", 0.5 ,").rstrip("\r\n")
    path.write_bytes(text.encode("utf-8"))
    data = read_data_file(path)
    assert np.array_equal(data.features, KNOWN_FEATURES) and np.array_equal(data.rewards, KNOWN_REWARDS)


def test_out_of_bound_rows_are_counted_not_refused(tmp_path):
    x = np.array([[[2.0, 0.0], [0.0, 1.0]], [[0.0, 0.5], [3.0, 4.0]]])  # norms 2, 1, 0.5, 5
    mu = np.array([[1.5, -0.25], [0.5, 0.0]])
    env = DataFiles(env_rngs(0, [0]), DataFilesParams(paths=[str(write_data_file(tmp_path / "o.npz", x, mu))]))
    info = env.describe()
    assert info["features_above_norm_1"] == 2 and info["rewards_outside_0_1"] == 2
    assert env.feature_bound == pytest.approx(5.0) and env.reward_range == (-0.25, 1.5)
    json.dumps(info)  # plain data
    inside_path = str(write_data_file(tmp_path / "i.npz", x / 8, mu.clip(0, 1)))
    inside = DataFiles(env_rngs(0, [0]), DataFilesParams(paths=[inside_path]))
    assert inside.feature_bound == 1.0 and inside.reward_range == (0.0, 1.0)


# --------------------------------------------------------------------------------------------
# malformed files: ValueError naming the file (and the line for CSV)
# --------------------------------------------------------------------------------------------
def _npz(**arrays: object):
    def write(path: Path) -> None:
        with open(path, "wb") as fh:
            np.savez(fh, **arrays)

    return write


def _npy_bytes(arr: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, arr)
    return buffer.getvalue()


GOOD_X, GOOD_MU = np.zeros((2, 3, 2)), np.zeros((2, 3))
NPZ_CASES = {
    "missing rewards": (_npz(features=GOOD_X), r"missing array\(s\) \['rewards'\]"),
    "features 2-D": (_npz(features=np.zeros((2, 3)), rewards=GOOD_MU), r"features must have shape \(N, K, d\)"),
    "no users": (_npz(features=np.zeros((0, 3, 2)), rewards=np.zeros((0, 3))), r"N, K, d >= 1, got \(0, 3, 2\)"),
    "rewards shape": (_npz(features=GOOD_X, rewards=np.zeros((2, 4))), r"rewards must have shape \(N, K\) = \(2, 3\)"),
    "NaN feature": (_npz(features=np.where(GOOD_X == 0, np.nan, 0), rewards=GOOD_MU), r"features must be finite"),
    "inf reward": (_npz(features=GOOD_X, rewards=np.full((2, 3), np.inf)), r"rewards must be finite"),
    "too large for float32": (_npz(features=GOOD_X + 1e300, rewards=GOOD_MU), r"beyond the float32 range"),
    "strings": (_npz(features=np.full((2, 3, 2), "a"), rewards=GOOD_MU), r"features must be real numbers"),
    "complex": (_npz(features=GOOD_X + 1j, rewards=GOOD_MU), r"features must be real numbers"),
    "pickled objects": (
        _npz(features=np.array([None] * 12, dtype=object).reshape(2, 3, 2), rewards=GOOD_MU),
        r"array 'features': Object arrays cannot be loaded .*only numeric arrays are read",
    ),
    "not a zip": (lambda p: p.write_bytes(b"hello"), r"bad\.npz: not an \.npz archive"),
    "a single .npy": (lambda p: p.write_bytes(_npy_bytes(GOOD_X)), r"bad\.npz: not an \.npz archive"),
    "truncated zip": (
        lambda p: (_npz(features=GOOD_X, rewards=GOOD_MU)(p), p.write_bytes(p.read_bytes()[:40])),
        r"data file .*bad\.npz: ",
    ),
}


@pytest.mark.parametrize(("write", "pattern"), NPZ_CASES.values(), ids=NPZ_CASES.keys())
def test_malformed_npz(tmp_path, write, pattern):
    path = tmp_path / "bad.npz"
    write(path)
    with pytest.raises(ValueError, match=pattern) as info:
        read_data_file(path)
    assert str(path) in str(info.value)


CSV_CASES = {
    "empty file": ("", r"empty file"),
    "header only": ("user,arm,reward,a\n", r"no data lines"),
    "wrong header": ("user,arm,score,a\n0,0,1,1\n", r"line 1: the header must be 'user,arm,reward'"),
    "no feature column": ("user,arm,reward\n0,0,1\n", r"line 1: the header must be"),
    "repeated feature name": ("user,arm,reward,a,a\n0,0,1,1,1\n", r"line 1: feature column names must be"),
    "field count": ("user,arm,reward,a,b\n0,0,1,1\n", r"line 2: expected 5 comma-separated fields .* got 4"),
    "blank line": ("user,arm,reward,a\n0,0,1,1\n\n1,0,1,1\n", r"line 3: .*got empty line"),
    "non-number": ("user,arm,reward,a\n0,0,1,x1\n", r"line 2: a must be a decimal number, got 'x1'"),
    "nan": ("user,arm,reward,a\n0,0,nan,1\n", r"line 2: reward must be a decimal number, got 'nan'"),
    "inf": ("user,arm,reward,a\n0,0,1,-inf\n", r"line 2: a must be a decimal number, got '-inf'"),
    "non-integer arm": ("user,arm,reward,a\n0,0.0,1,1\n", r"line 2: arm must be an integer >= 0, got '0.0'"),
    "empty user": ("user,arm,reward,a\n,0,1,1\n", r"line 2: empty user id"),
    "non-contiguous user": (
        "user,arm,reward,a\n7,0,1,1\n7,1,1,1\n8,0,1,1\n8,1,1,1\n7,0,1,1\n7,1,1,1\n",
        r"line 6: user '7' appears again \(its block started at line 2\)",
    ),
    "wrong arm order": ("user,arm,reward,a\n0,1,1,1\n0,0,1,1\n", r"line 2: user '0': expected arm 0, got 1"),
    "skipped arm": ("user,arm,reward,a\n0,0,1,1\n0,2,1,1\n", r"line 3: user '0': expected arm 1, got 2"),
    "missing arm line": (
        "user,arm,reward,a\n0,0,1,1\n0,1,1,1\n1,0,1,1\n2,0,1,1\n2,1,1,1\n",
        r"line 4: user '1' has 1 arm line\(s\), expected K = 2",
    ),
    "overflow": ("user,arm,reward,a\n0,0,1,1e39\n", r"beyond the float32 range"),
}


@pytest.mark.parametrize(("text", "pattern"), CSV_CASES.values(), ids=CSV_CASES.keys())
def test_malformed_csv(tmp_path, text, pattern):
    path = tmp_path / "bad.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=pattern) as info:
        read_data_file(path)
    assert str(path) in str(info.value)


def test_csv_not_utf8(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes(b"user,arm,reward,a\n\xff,0,1,1\n")
    with pytest.raises(ValueError, match=r"bad\.csv: not UTF-8"):
        read_data_file(path)


@pytest.mark.parametrize("name", ["silo.txt", "silo", "silo.npy"])
def test_unsupported_suffix(tmp_path, name):
    path = tmp_path / name
    path.write_text("x", encoding="utf-8")
    with pytest.raises(ValueError, match=r"unsupported suffix .*supported: \.npz, \.csv") as info:
        read_data_file(path)
    assert str(path) in str(info.value)
    with pytest.raises(ValueError, match=r"unsupported suffix"):
        write_data_file(path, GOOD_X, GOOD_MU)


def test_missing_file(tmp_path):
    with pytest.raises(ValueError, match=r"nope\.npz: cannot read it"):
        read_data_file(tmp_path / "nope.npz")


def test_agents_must_agree_on_k_and_d(tmp_path):
    a = str(write_data_file(tmp_path / "a.npz", np.zeros((2, 3, 2)), np.zeros((2, 3))))
    b = str(write_data_file(tmp_path / "b.npz", np.zeros((2, 4, 2)), np.zeros((2, 4))))
    c = str(write_data_file(tmp_path / "c.csv", np.zeros((2, 3, 5)), np.zeros((2, 3))))
    with pytest.raises(ValueError, match=r"b\.npz has K = 4 arms and d = 2 .* but .*a\.npz has K = 3, d = 2"):
        DataFiles(env_rngs(0, [0]), DataFilesParams(paths=[a, b]))
    with pytest.raises(ValueError, match=r"c\.csv has K = 3 arms and d = 5"):
        DataFiles(env_rngs(0, [0]), DataFilesParams(paths=[a, c]))
    with pytest.raises(ValueError, match=r"a\.npz has dim = 2, but the config says dim = 3"):
        DataFiles(env_rngs(0, [0]), DataFilesParams(paths=[a, a], dim=3))
    assert DataFiles(env_rngs(0, [0]), DataFilesParams(paths=[a, a], arms=3, dim=2)).n_agents == 2


def test_write_validates_its_input(tmp_path):
    with pytest.raises(ValueError, match=r"features must have shape \(N, K, d\)"):
        write_data_file(tmp_path / "a.npz", np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"rewards must have shape \(N, K\) = \(2, 3\)"):
        write_data_file(tmp_path / "a.npz", GOOD_X, np.zeros(2))
    with pytest.raises(ValueError, match=r"features must be finite"):
        write_data_file(tmp_path / "a.csv", GOOD_X + np.nan, GOOD_MU)
    with pytest.raises(ValueError, match=r"feature_names must be 2 unique"):
        write_data_file(tmp_path / "a.csv", GOOD_X, GOOD_MU, feature_names=["a"])
    with pytest.raises(ValueError, match=r"must not contain commas"):
        write_data_file(tmp_path / "a.csv", GOOD_X, GOOD_MU, feature_names=["a,b", "c"])
    assert not list(tmp_path.iterdir())  # nothing half-written


# --------------------------------------------------------------------------------------------
# parameters and configs
# --------------------------------------------------------------------------------------------
PARAM_CASES = {
    "no paths, no sizes": ({}, r"without `paths` .* needs agents, arms and dim >= 1; missing: agents, arms, dim"),
    "no paths, no dim": ({"agents": 2, "arms": 3}, r"missing: dim"),
    "agents disagree": ({"paths": ["a.npz", "b.npz"], "agents": 3}, r"agents = 3 disagrees with the 2 file"),
    "bytes": ({"paths": b"a.npz"}, r"paths must be a list of file paths \(one per agent\), a folder or a glob"),
    "a dict": ({"paths": {"a": 1}}, r"paths must be a list of file paths"),
    "empty string": ({"paths": ""}, r"paths must be a folder, a glob pattern or a list of file paths"),
    "empty path": ({"paths": ["a.npz", ""]}, r"paths\[1\] must be a non-empty file path"),
    "non-string path": ({"paths": [3]}, r"paths\[0\] must be a non-empty file path, got 3"),
    "bad order": ({"paths": ["a.npz"], "order": "random"}, r"order must be one of 'file', 'shuffle', got 'random'"),
    "negative noise": ({"paths": ["a.npz"], "reward_noise_sd": -0.1}, r"reward_noise_sd must be >= 0.0"),
    "negative arms": ({"paths": ["a.npz"], "arms": -1}, r"arms must be an integer >= 0"),
    "cycle not bool": ({"paths": ["a.npz"], "cycle": 1}, r"cycle must be true or false, got 1"),
}


@pytest.mark.parametrize(("kwargs", "pattern"), PARAM_CASES.values(), ids=PARAM_CASES.keys())
def test_bad_params(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        DataFilesParams(**kwargs)


def test_simulating_without_paths_is_a_clear_error():
    params = DataFilesParams(agents=2, arms=3, dim=2)
    with pytest.raises(ValueError, match=r"needs `paths` \(one file per agent\) to be simulated; in a deployment"):
        ENVIRONMENTS["data-files"].factory(params, env_rngs(0, [0]))


def _config(paths: list[str], horizon: int = 40, **env: object) -> dict[str, object]:
    return {
        "experiment": {"name": "files", "seed": 3, "runs": 2, "horizon": horizon},
        "environment": {"name": "data-files", "paths": paths, **env},
        "algorithms": [
            {"name": "fedlinucb", "batch": 5},
            {"name": "linucb-independent"},
        ],
    }


def test_config_round_trips_and_fills_agents():
    config = loads_config(
        '[environment]\nname = "data-files"\npaths = ["a.npz", "b.csv"]\n[[algorithms]]\nname = "fedlinucb"\n'
    )
    params = config.environment.params
    assert params.paths == ("a.npz", "b.csv") and params.agents == 2 and hash(params)
    again = config_from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert asdict(again.environment.params) == asdict(params)
    with pytest.raises(ConfigError, match=r"environment \(data-files\): agents = 1 disagrees"):
        config_from_dict(_config(["a.npz", "b.npz"], agents=1))


# --------------------------------------------------------------------------------------------
# paths as one folder or one glob pattern
# --------------------------------------------------------------------------------------------
def _silos(folder: Path, n: int, suffix: str = ".npz", users: int = 3) -> list[str]:
    """silo-0 .. silo-<n-1>, each with its own random users (K = 2, d = 2)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(n)
    paths = []
    for i in range(n):
        x, mu = rng.uniform(size=(users, 2, 2)), rng.uniform(size=(users, 2))
        paths.append(str(write_data_file(folder / f"silo-{i}{suffix}", x, mu)))
    return paths


def test_folder_form_reads_its_data_files_in_name_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative, like a listed path: to the working directory
    _silos(tmp_path / "silos", 12)
    (tmp_path / "silos" / "README.txt").write_text("not data\n", encoding="utf-8")
    write_data_file(tmp_path / "silos" / ".hidden.npz", np.zeros((3, 2, 2)), np.zeros((3, 2)))
    (tmp_path / "silos" / "old.npz").mkdir()  # a folder, whatever its name
    config = config_from_dict(_config("silos"))  # type: ignore[arg-type]
    params = config.environment.params
    # silo-2 before silo-10: agent i reads the silo-<i> file `fedbandits data export` writes
    listed = tuple(str(Path("silos") / f"silo-{i}.npz") for i in range(12))
    assert params.paths == listed and params.agents == 12
    assert config_from_dict(_config(list(listed))) == config  # exactly the listed form
    assert tuple(config.to_dict()["environment"]["paths"]) == listed  # the saved config names the files
    assert DataFilesParams(paths=Path("silos"), agents=12).paths == listed  # a PathLike works too


def test_glob_form_reads_the_files_it_matches_in_name_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    npz = _silos(tmp_path / "silos", 3)
    csv = _silos(tmp_path / "silos", 3, suffix=".csv")
    _silos(tmp_path / "other", 2)
    assert DataFilesParams(paths="silos/*.csv").paths == tuple(str(Path(p).relative_to(tmp_path)) for p in csv)
    assert DataFilesParams(paths=str(tmp_path / "silos" / "silo-[12].npz"), agents=2).paths == tuple(npz[1:])
    both = DataFilesParams(paths="*/silo-0.*").paths
    assert both == ("other/silo-0.npz", "silos/silo-0.csv", "silos/silo-0.npz")
    # the files a pattern finds play exactly as the same files listed
    globbed = DataFilesParams(paths=str(tmp_path / "silos" / "*.npz"), order="shuffle", reward_noise_sd=0.2)
    listed = DataFilesParams(paths=npz, order="shuffle", reward_noise_sd=0.2)
    played = play(DataFiles(env_rngs(5, [0, 1]), globbed), 3)
    expected = play(DataFiles(env_rngs(5, [0, 1]), listed), 3)
    assert all(np.array_equal(a, b) for a, b in zip(played, expected, strict=True))


def test_folder_or_pattern_count_must_match_agents(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _silos(tmp_path / "silos", 3)
    _silos(tmp_path / "silos", 1, suffix=".csv")  # a stray export in the other format
    with pytest.raises(
        ConfigError,
        match=r"^environment \(data-files\): paths = 'silos': 4 data file\(s\) in that folder \(silo-0\.csv, "
        r"silo-0\.npz, silo-1\.npz, silo-2\.npz\), but agents = 3 \(one file per agent\)$",
    ):
        config_from_dict(_config("silos", agents=3))  # type: ignore[arg-type]
    with pytest.raises(
        ConfigError, match=r"paths = 'silos/\*\.npz': 3 data file\(s\) match that pattern \(silos/silo-0\.npz, "
    ):
        config_from_dict(_config("silos/*.npz", agents=2))  # type: ignore[arg-type]
    many = _silos(tmp_path / "many", 6)
    shown = r"\(silo-0\.npz, silo-1\.npz, silo-2\.npz, silo-3\.npz, \.\.\.\)"  # the first 4 names
    with pytest.raises(ValueError, match=rf"6 data file\(s\) in that folder {shown}, but agents = 5"):
        DataFilesParams(paths="many", agents=5)
    assert DataFilesParams(paths="many", agents=6).paths == tuple(str(Path(p).relative_to(tmp_path)) for p in many)
    # the CLI: one line naming the field, nothing run, nothing written
    config = tmp_path / "c.toml"
    config.write_text(
        '[experiment]\nhorizon = 3\n[environment]\nname = "data-files"\npaths = "silos"\nagents = 3\n'
        '[[algorithms]]\nname = "fedlinucb"\n',
        encoding="utf-8",
    )
    assert _exit_code(["run", str(config), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedbandits: error: ") and err.count("\n") == 1
    assert "paths = 'silos': 4 data file(s) in that folder" in err and "but agents = 3" in err
    assert not (tmp_path / "out").exists()


EMPTY_CASES = {
    "empty folder": ("empty", r"^paths = 'empty': no data file \(\.npz, \.csv\) in that folder \(relative to the "),
    "folder of other files": ("notes", r"^paths = 'notes': no data file \(\.npz, \.csv\) in that folder"),
    "pattern without match": ("silos/*.csv", r"^paths = 'silos/\*\.csv': no data file .* matches that pattern"),
    "pattern of non-data files": ("notes/*", r"^paths = 'notes/\*': no data file .* matches that pattern"),
    "no such folder": ("nope", r"^paths = 'nope': no such folder or file \(relative to the working directory "),
    "a file of another kind": ("notes/a.txt", r"^paths = 'notes/a\.txt': not a data file \(supported: \.npz, \.csv\)$"),
}


@pytest.mark.parametrize(("source", "pattern"), EMPTY_CASES.values(), ids=EMPTY_CASES.keys())
def test_folder_or_pattern_that_finds_nothing(tmp_path, monkeypatch, source, pattern):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x\n", encoding="utf-8")
    write_data_file(tmp_path / "notes" / ".hidden.npz", np.zeros((1, 2, 2)), np.zeros((1, 2)))
    _silos(tmp_path / "silos", 2)
    with pytest.raises(ValueError, match=pattern) as info:
        DataFilesParams(paths=source)
    assert "\n" not in str(info.value)
    if "relative to" in pattern:
        assert f"working directory {tmp_path}" in str(info.value)
    with pytest.raises(ConfigError, match=r"^environment \(data-files\): paths = "):
        config_from_dict(_config(source))  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# simulation: horizon vs rounds available, end to end
# --------------------------------------------------------------------------------------------
def test_horizon_beyond_the_files_fails_before_playing(tmp_path, monkeypatch):
    paths = make_files(tmp_path, sizes=(30, 25))

    def never(self):
        raise AssertionError("a round was played")

    monkeypatch.setattr(DataFiles, "next_round", never)
    with pytest.raises(ValueError, match=r"environment data-files has 25 rounds available, but the horizon is T = 40"):
        fedbandits.run(_config(paths, horizon=40))


def test_end_to_end_run(tmp_path):
    paths = make_files(tmp_path, sizes=(30, 25, 40))
    results = fedbandits.run(_config(paths, horizon=25, order="shuffle", reward_noise_sd=0.1), out=tmp_path / "out")
    for res in results.algorithms.values():
        assert res.curves.shape[0] == 2 and np.isfinite(res.curves).all() and (res.per_agent >= 0).all()
    assert results.algorithms["fedlinucb"].sync_rounds.tolist() == [5, 5]
    cycled = fedbandits.run(_config(paths, horizon=60, cycle=True))  # longer than every file
    assert (cycled.algorithms["fedlinucb"].curves[:, -1] > 0).all()
    # the saved config re-runs to the same numbers
    again = fedbandits.run(tmp_path / "out" / "config.toml")
    assert np.array_equal(again.algorithms["fedlinucb"].curves, results.algorithms["fedlinucb"].curves)


def test_reward_noise_has_the_configured_mean_and_sd(tmp_path):
    # n = rounds x runs x agents draws of s N(0,1): the sample mean has standard error s/sqrt(n),
    # the sample variance relative standard error sqrt(2/(n-1)); both checked at 5 standard errors
    s, rounds = 0.7, 2000
    params = DataFilesParams(paths=make_files(tmp_path, sizes=(20, 30)), reward_noise_sd=s, cycle=True)
    env = DataFiles(env_rngs(6, [0, 1, 2]), params)
    diffs = []
    for _ in range(rounds):
        rnd = env.next_round()
        diffs.append(env.rewards(rnd.means[..., 0], rnd.noise) - rnd.means[..., 0])
    d = np.stack(diffs).ravel()
    n = d.size
    assert abs(d.mean()) < 5 * s / math.sqrt(n)
    assert abs(d.var(ddof=1) / s**2 - 1) < 5 * math.sqrt(2 / (n - 1))


# --------------------------------------------------------------------------------------------
# export_partition and the CLI
# --------------------------------------------------------------------------------------------
SOURCE = """
[experiment]
name = "source"
seed = 17
runs = 3
horizon = 50

[environment]
name = "gaussian-sphere"
agents = 3
arms = 4
dim = 3

[[algorithms]]
name = "fedlinucb"
batch = 5
"""


@pytest.mark.parametrize("fmt", ["npz", "csv"])
def test_export_partition_reproduces_the_source_run(tmp_path, fmt):
    config = loads_config(SOURCE)
    rounds, run = 2 * BLOCK + 1, 2
    paths = export_partition(config, tmp_path / "silos", rounds, run=run, fmt=fmt)
    assert [p.name for p in paths] == [f"silo-{i}.{fmt}" for i in range(3)]
    source = ENVIRONMENTS["gaussian-sphere"].factory(config.environment.params, env_rngs(17, [run]))
    f_src, m_src = [], []
    for _ in range(rounds):
        rnd = source.next_round()
        f_src.append(rnd.features[0].copy())
        m_src.append(rnd.means[0].copy())
    env = DataFiles(env_rngs(0, [0]), DataFilesParams(paths=[str(p) for p in paths]))
    f, m, _ = play(env, rounds)
    assert np.array_equal(f[:, 0], np.stack(f_src)) and np.array_equal(m[:, 0], np.stack(m_src))
    with pytest.raises(ValueError, match=r"run must be an integer in \[0, 2\], got 3"):
        export_partition(config, tmp_path, 5, run=3)


def test_export_respects_rounds_available(tmp_path):
    paths = make_files(tmp_path, sizes=(4, 6))
    config = config_from_dict(_config(paths, horizon=10))
    with pytest.raises(ValueError, match=r"environment data-files has 4 rounds available, 5 asked for"):
        export_partition(config, tmp_path / "out", 5)


def test_cli_data_export(tmp_path, capsys):
    config = tmp_path / "source.toml"
    config.write_text(SOURCE, encoding="utf-8")
    out = tmp_path / "silos"
    export = ["data", "export", "--config", str(config), "--rounds", "20", "--out", str(out)]
    assert main([*export, "--run", "1"]) == 0
    assert "wrote 3 data file(s) of 20 users each" in capsys.readouterr().out
    first = read_data_file(out / "silo-0.npz")
    assert first.features.shape == (20, 4, 3)
    assert main([*export, "--format", "csv"]) == 0
    assert read_data_file(out / "silo-2.csv").rewards.shape == (20, 4)
    assert with_zip_members(out / "silo-0.npz") == {"features.npy", "rewards.npy"}


def with_zip_members(path: Path) -> set[str]:
    with zipfile.ZipFile(path) as z:
        return set(z.namelist())


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--rounds", "0"], "expected an integer >= 1, got 0"),
        (["--rounds", "x"], "expected an integer >= 1, got 'x'"),
        (["--rounds", "5", "--run", "-1"], "expected an integer >= 0, got -1"),
        (["--rounds", "5", "--run", "3"], "run must be an integer in [0, 2], got 3"),
        (["--rounds", "5", "--format", "parquet"], "invalid choice: 'parquet'"),
        ([], "the following arguments are required: --rounds"),
    ],
)
def test_cli_data_export_rejects_bad_arguments(tmp_path, capsys, extra, words):
    config = tmp_path / "source.toml"
    config.write_text(SOURCE, encoding="utf-8")
    assert _exit_code(["data", "export", "--config", str(config), "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedbandits: error:") and words in err and err.count("\n") == 1


def test_cli_data_export_rejects_bad_paths(tmp_path, capsys):
    config = tmp_path / "source.toml"
    config.write_text(SOURCE, encoding="utf-8")
    a_file = tmp_path / "file"
    a_file.write_text("", encoding="utf-8")
    assert _exit_code(["data", "export", "--config", str(config), "--rounds", "2", "--out", str(a_file)]) == 2
    assert "exists and is not a folder" in capsys.readouterr().err
    missing = str(tmp_path / "nope.toml")
    assert _exit_code(["data", "export", "--config", missing, "--rounds", "2", "--out", str(tmp_path)]) == 2
    assert "cannot read config" in capsys.readouterr().err
    assert _exit_code(["data"]) == 2
    assert "required: ACTION" in capsys.readouterr().err


def test_example_configs_fit_together(tmp_path, monkeypatch):
    """examples/data-files.toml runs on the folder its comment tells to export from data-files-source.toml:
    the export, then the folder form, from the project root (here: a copy of its layout)."""
    examples = Path(__file__).resolve().parents[1] / "examples"
    source = load_config(examples / "data-files-source.toml")
    text = (examples / "data-files.toml").read_text(encoding="utf-8")
    assert "--rounds 1000 --out examples/data-files\n" in text
    monkeypatch.chdir(tmp_path)
    paths = export_partition(source, Path("examples/data-files"), 1000)
    target = load_config(examples / "data-files.toml")
    params = target.environment.params
    assert params.paths == tuple(str(p) for p in paths) == tuple(f"examples/data-files/silo-{i}.npz" for i in range(3))
    assert params.agents == source.environment.params.agents
    assert target.experiment.horizon <= 1000  # the users per file the comment exports
    results = fedbandits.run(target.with_experiment(runs=1, horizon=30))
    assert list(results.algorithms) == [a.label for a in target.algorithms]
    assert all(r.curves.shape[0] == 1 and np.isfinite(r.curves).all() for r in results.algorithms.values())
