"""User-level privacy: returning users, contribution bounding, the user-level calibration, its audit rows."""

import itertools
import math
import warnings

import numpy as np
import pytest

from fedbandits import ConfigError, config_from_dict
from fedbandits.algorithms.fedlinucb import RETURNING_NOT_COVERED, FedLinUCB, FedLinUCBParams
from fedbandits.audit.releases import AuditCase, _fedlinucb, run_case
from fedbandits.envs.base import Environment, Round
from fedbandits.envs.files import DataFiles, DataFilesParams, read_data_file, write_data_file
from fedbandits.envs.synthetic import GaussianSphere, GaussianSphereParams
from fedbandits.privacy.calibration import PrivacySpec, calibrate
from fedbandits.privacy.distributed_noise import calibrate_distributed, composed_epsilon, user_releases
from fedbandits.privacy.factorization import factorize
from fedbandits.privacy.tree import nodes_containing
from fedbandits.registry import ALGORITHMS, PolicyContext
from fedbandits.sim.results import PrivacyUnitWarning
from fedbandits.sim.runner import run_experiment

SPHERE = {"name": "gaussian-sphere", "agents": 3, "arms": 5, "dim": 3}


# -- contribution bounding ------------------------------------------------------------------------


class _Scripted(Environment):
    """One silo, one arm: round t serves user ``users[t]`` with the feature ``x[t]`` and reward 0."""

    name = "scripted"

    def __init__(self, x: np.ndarray, users: list[int], n_users: int) -> None:
        super().__init__([np.random.default_rng(0)], 1, 1, x.shape[1])
        self.x, self.users, self.n_users, self.t = x, users, n_users, 0

    def next_round(self) -> Round:
        t = self.t
        self.t += 1
        features = self.x[t][None, None, None, :].astype(np.float32)
        return Round(
            features, np.zeros((1, 1, 1), dtype=np.float32), np.zeros((1, 1)), users=np.array([[self.users[t]]])
        )

    def rewards(self, means: np.ndarray, noise: np.ndarray) -> np.ndarray:
        return np.asarray(means, dtype=np.float64)


def _fed(env: Environment, horizon: int, **fields: object) -> FedLinUCB:
    params = FedLinUCBParams(protocol="ldp", batch=horizon, epsilon=1.0, delta=1e-5, **fields)
    ctx = PolicyContext(1, 1, 1, env.dim, horizon, [np.random.default_rng(1)], env=env)
    policy = ALGORITHMS["fedlinucb"].factory(params, ctx)
    assert isinstance(policy, FedLinUCB)
    return policy


def test_contribution_bounding_drops_exactly_the_contributions_over_the_cap():
    """Users 0, 1, 0, 2, 0, 1, 0 with m = 2: user 0's third and fourth visits (rounds 5 and 7) are dropped,
    nothing else.  Each round's feature is a distinct basis-like vector, so the batch Gram matrix W shows
    exactly which contributions entered it."""
    users = [0, 1, 0, 2, 0, 1, 0]
    x = np.eye(7)[:, :7] * np.arange(1, 8)[:, None] / 8.0  # round t: (t+1)/8 e_t, norm <= 1 (no clipping)
    env = _Scripted(x, users, n_users=3)
    policy = _fed(env, 7, privacy_unit="user", max_contributions=2)
    for _ in users:
        policy.step(env.next_round(), env)
        if policy.t < 7:
            kept_so_far = policy.local_cov[0, 0].copy()
    kept = [0, 1, 2, 3, 5]  # rounds 1, 2, 3, 4, 6 (0-based 0, 1, 2, 3, 5)
    expected = sum(np.outer(x[t], x[t]) for t in kept)
    np.testing.assert_allclose(kept_so_far, expected)  # after round 6 (the sync empties it at round 7)
    assert policy.dropped_contributions == 2
    report = policy.report()
    assert report["dropped_contributions"] == 2 and report["max_user_visits"] == 4
    assert report["privacy_unit"] == "user, up to 2 contributions"
    # per interaction: nothing dropped, and the report says a returning user is not covered
    env = _Scripted(x, users, n_users=3)
    plain = _fed(env, 7)
    for _ in users:
        plain.step(env.next_round(), env)
    assert plain.dropped_contributions == 0
    assert plain.report()["privacy_unit"] == RETURNING_NOT_COVERED and plain.report()["max_user_visits"] == 4


# -- the calibration ------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["tree", "factorized"])
def test_gaussian_user_level_noise_is_m_times_the_interaction_noise(mechanism):
    """Tight calibration: mu is linear in the sensitivity, so the user-level noise for m contributions is
    exactly m times the interaction-level noise at the same (eps, delta), and spends exactly the target."""
    for m in (2, 5):
        base = calibrate(PrivacySpec("ldp", 1.0, 1e-5, mechanism=mechanism), agents=4, horizon=400, batch=25)
        user = calibrate(
            PrivacySpec("ldp", 1.0, 1e-5, mechanism=mechanism, contributions=m), agents=4, horizon=400, batch=25
        )
        assert user.sigma_cov == pytest.approx(m * base.sigma_cov, rel=1e-12)
        assert user.sigma_bias == pytest.approx(m * base.sigma_bias, rel=1e-12)
        assert user.epsilon_spent == pytest.approx(1.0, rel=1e-6) and user.guarantee == "formal"
        assert user.details["unit"] == f"user, up to {m} contributions" and base.details["unit"] == "interaction"


def _totals(releases):
    """What Prop. 14's bounds grow with, over releases (l2, l1, count): sum l2^2, sum l2, sum l1 and the
    number of releases touched."""
    return [
        sum(c * l2**2 for l2, _, c in releases),
        sum(c * l2 for l2, _, c in releases),
        sum(c * l1 for _, l1, c in releases),
        sum(c for _, _, c in releases),
    ]


def test_distributed_user_releases_dominate_every_placement_of_the_contributions():
    """K = 8 releases (4 tree levels), m = 3 contributions of one user in batches j1 <= j2 <= j3: for every
    placement, the three totals Prop. 14's bounds grow with -- sum l2^2, sum l2, sum l1 -- and the number of
    touched releases are at most those of :func:`user_releases`' profile; all in one batch attains the l2^2
    total.  So the composed epsilon of every placement is at most the profile's."""
    releases, m, width = 8, 3, 5
    a, b, a1, b1 = 7.0, math.sqrt(width), 9.0, float(width)
    nodes = 4
    profile = user_releases(((a + b, a1 + b1, nodes),), width, m)
    bound = _totals(profile)
    attained = False
    for batches in itertools.combinations_with_replacement(range(1, releases + 1), m):
        counts: dict[int, int] = {}
        for j in batches:
            for node in nodes_containing(j, releases):
                counts[node] = counts.get(node, 0) + 1
        placed = tuple((n * a + b, n * a1 + b1, 1) for n in counts.values())
        totals = _totals(placed)
        assert all(t <= bnd * (1 + 1e-12) for t, bnd in zip(totals, bound, strict=True)), batches
        attained |= math.isclose(totals[0], nodes * (m * a + b) ** 2)
        assert composed_epsilon(2.0, 3, placed, width, 1e-5) <= composed_epsilon(2.0, 3, profile, width, 1e-5) + 1e-12
    assert attained
    assert user_releases(((a + b, a1 + b1, nodes),), width, 1) == ((a + b, a1 + b1, nodes),)


@pytest.mark.parametrize("band", [8, 3])
def test_distributed_factorized_user_releases_dominate_every_placement_of_the_contributions(band):
    """The factorized release, K = 8 messages (full and banded to 3), m = 3 contributions in batches
    j1 <= j2 <= j3: message k moves by at most S_k = sum_c a b_{k - j_c} (+ the rounding term where touched),
    and for every placement the three totals of Prop. 14 and the touched count are at most those of the
    :func:`user_releases` profile built from the first batch's messages; all in batch 1 attains the l2^2
    total.  So every placement's composed epsilon is at most the profile's."""
    releases, m, width = 8, 3, 5
    a, b, a1, b1 = 7.0, math.sqrt(width), 9.0, float(width)
    column = factorize(releases, band).encoder[:releases]
    one = tuple((a * c + b, a1 * c + b1, 1) for c in column)
    profile = user_releases(one, width, m)
    bound = _totals(profile)
    attained = False
    for batches in itertools.combinations_with_replacement(range(releases), m):
        s = np.zeros(releases)
        for j in batches:
            entered = column[: releases - j]
            s[j : j + entered.size] += entered
        touched = s[s > 0]
        placed = tuple((a * x + b, a1 * x + b1, 1) for x in touched)
        totals = _totals(placed)
        assert all(t <= bnd * (1 + 1e-12) for t, bnd in zip(totals, bound, strict=True)), batches
        attained |= math.isclose(totals[0], bound[0] - (m - 1) * len(column) * b**2)
        assert composed_epsilon(2.0, 3, placed, width, 1e-5) <= composed_epsilon(2.0, 3, profile, width, 1e-5) + 1e-12
    assert attained


@pytest.mark.parametrize("mechanism", ["tree", "factorized"])
def test_distributed_user_level_calibration_meets_its_target(mechanism):
    base = calibrate_distributed(
        PrivacySpec("distributed-dp", 1.0, 1e-5, mechanism=mechanism), agents=5, horizon=400, batch=25, dim=3
    )
    user = calibrate_distributed(
        PrivacySpec("distributed-dp", 1.0, 1e-5, mechanism=mechanism, contributions=4),
        agents=5,
        horizon=400,
        batch=25,
        dim=3,
    )
    assert user.epsilon_worst <= 1.0 and user.guarantee == "formal" and user.contributions == 4
    # the share grows about m-fold (a bit less: the rounding term is paid once per release, not per visit)
    assert 3.5 < user.share_sigma / base.share_sigma <= 4.0
    assert user.report()["privacy_unit"] == "user, up to 4 contributions"


# -- the audit ------------------------------------------------------------------------------------


@pytest.mark.slow  # about 17 s: CI runs it in its slow audit step
def test_user_level_audit_rows_flag_too_little_noise():
    """The user-history neighbours (one user's 4 visits in the first batch) at eps = 2, delta = 1e-5: the
    user-level calibration with 0.3x its noise is the ldp lazy case of test_audit_privacy.py scaled by
    m = 4 in both the change and the noise, so the same arithmetic applies (mu 1.45, a bound ~2.7 > 2
    over 3000 trials); with its calibrated noise it stays consistent."""
    algorithm = _fedlinucb("ldp", True, epsilon=2.0, privacy_unit="user", max_contributions=4)
    shrunk = run_case(
        AuditCase("x0.3", algorithm, "messages", dataset="user-history", history=4, noise_scale=0.3), 3000
    )
    assert shrunk.guarantee == "formal" and shrunk.verdict == "violated" and shrunk.epsilon_lower_bound > 2.0
    honest = run_case(AuditCase("x1", algorithm, "messages", dataset="user-history", history=4), 3000)
    assert honest.verdict == "consistent"


@pytest.mark.slow  # about 12 s each: CI runs them in its slow audit step
@pytest.mark.parametrize("mechanism", ["tree", "factorized"])
def test_distributed_user_level_audit_flags_too_little_noise(mechanism):
    """distributed-dp, 2 silos, m = 4, eps = 1: with 0.3x the shares the server's sums separate the
    user-history neighbours beyond eps = 1 (measured 1.26 for the tree, 1.39 for the factorized release,
    over 3000 trials; a true (1, 1e-5) mechanism exceeds its claim with probability <= alpha = 5%, and the
    seed is fixed)."""
    algorithm = _fedlinucb("distributed-dp", True, privacy_unit="user", max_contributions=4, mechanism=mechanism)
    case = AuditCase("ddp x0.3", algorithm, "aggregate", dataset="user-history", history=4, agents=2, noise_scale=0.3)
    shrunk = run_case(case, 3000)
    assert shrunk.verdict == "violated" and shrunk.epsilon_lower_bound > 1.0


def test_a_per_interaction_guarantee_does_not_cover_a_returning_user():
    """The same neighbours against the interaction-level calibration (eps = 1): one user's 4 visits move
    the releases 4 times what the noise is calibrated for (mu^2 x 16), and 3000 trials refute eps = 1
    for that user (measured bound 1.66), though the per-interaction label is right."""
    row = run_case(AuditCase("x", _fedlinucb("ldp", True), "messages", dataset="user-history", history=4), 3000)
    assert row.guarantee == "formal" and row.epsilon_lower_bound > 1.0


# -- environments -----------------------------------------------------------------------------------


def test_returning_users_leave_the_instance_unchanged_and_follow_their_visit_law():
    """Same seed with and without returning users: the same contexts and noise, bit for bit (the ids come
    from their own stream).  Uniform over 4 users, 2000 rounds x 3 silos x 2 runs = 12,000 visits: a
    chi-square test of uniformity (3 dof) stays below its 99.9% quantile 16.27.  Zipf s = 1.5: user 0 is
    visited 1 / H(1.5) = 0.52 of the time (3 std of 12,000 draws: 0.014)."""
    rngs = lambda: [np.random.default_rng([5, r]) for r in range(2)]  # noqa: E731
    plain = GaussianSphere(rngs(), GaussianSphereParams(agents=3, arms=4, dim=3))
    uniform = GaussianSphere(rngs(), GaussianSphereParams(agents=3, arms=4, dim=3, returning_users=4))
    zipf = GaussianSphere(
        rngs(), GaussianSphereParams(agents=3, arms=4, dim=3, returning_users=4, visits="zipf", zipf_exponent=1.5)
    )
    seen_u, seen_z = [], []
    for _ in range(2000):
        a, b, c = plain.next_round(), uniform.next_round(), zipf.next_round()
        np.testing.assert_array_equal(a.features, b.features)
        np.testing.assert_array_equal(a.noise, c.noise)
        assert a.users is None
        seen_u.append(b.users.copy())
        seen_z.append(c.users.copy())
    counts = np.bincount(np.concatenate(seen_u).ravel(), minlength=4)
    assert counts.sum() == 12000 and ((counts - 3000) ** 2 / 3000).sum() < 16.27
    share = (np.concatenate(seen_z).ravel() == 0).mean()
    h = sum(1 / u**1.5 for u in range(1, 5))
    assert abs(share - 1 / h) < 0.014


def test_data_files_carry_user_ids(tmp_path):
    x = np.zeros((5, 2, 2), dtype=np.float32)
    mu = np.zeros((5, 2), dtype=np.float32)
    path = write_data_file(tmp_path / "a.npz", x, mu, user_ids=np.array([70, 9, 70, 3, 9]))
    assert read_data_file(path).user_ids.tolist() == [0, 1, 0, 2, 1]  # dense, in order of first appearance
    env = DataFiles([np.random.default_rng(0)], DataFilesParams(paths=(str(path),), order="file"))
    assert env.n_users == 3
    assert [int(env.next_round().users[0, 0]) for _ in range(5)] == [0, 1, 0, 2, 1]
    other = write_data_file(tmp_path / "b.npz", x, mu)
    with pytest.raises(ValueError, match="has no user_ids, but other silos' files have"):
        DataFiles([np.random.default_rng(0)], DataFilesParams(paths=(str(path), str(other)), agents=2))
    for bad, message in ((np.array([1.5] * 5), "integer array"), (np.array([1, -2, 3, 4, 5]), ">= 0")):
        np.savez(tmp_path / "bad.npz", features=x, rewards=mu, user_ids=bad)
        with pytest.raises(ValueError, match=message):
            read_data_file(tmp_path / "bad.npz")


def test_csv_data_files_carry_user_ids_in_a_column_of_their_own(tmp_path):
    """A CSV's ``user_id`` column (after ``reward``) reads back as the npz's ``user_ids`` do, numbers and all;
    a file without it has none; bad ids name the line and the field."""
    rng = np.random.default_rng(1)
    x, mu = rng.random((5, 3, 2)).astype(np.float32), rng.random((5, 3)).astype(np.float32)
    ids = np.array([70, 9, 70, 3, 9])
    csv = read_data_file(write_data_file(tmp_path / "a.csv", x, mu, user_ids=ids))
    npz = read_data_file(write_data_file(tmp_path / "a.npz", x, mu, user_ids=ids))
    assert csv.user_ids.tolist() == npz.user_ids.tolist() == [0, 1, 0, 2, 1]
    assert np.array_equal(csv.features, x) and np.array_equal(csv.rewards, mu)
    lines = (tmp_path / "a.csv").read_text().splitlines()
    assert lines[:2] == ["user,arm,reward,user_id,x0,x1", _line(0, 0, mu, 70, x)]
    assert read_data_file(write_data_file(tmp_path / "b.csv", x, mu)).user_ids is None
    header = "user,arm,reward,user_id,x0\n"
    for body, message in (
        ("u,0,0.5,-1,0.1\n", r"line 2: user_id must be an integer >= 0, got '-1'"),
        ("u,0,0.5,1.5,0.1\n", r"line 2: user_id must be an integer >= 0, got '1.5'"),
        ("u,0,0.5,4,0.1\nu,1,0.5,5,0.1\n", r"line 3: user 'u': user_id 5 differs from 4"),
        ("u,0,0.5,99999999999999999999,0.1\n", r"user_id must be below 2\^63"),
    ):
        (tmp_path / "bad.csv").write_text(header + body)
        with pytest.raises(ValueError, match=message) as err:
            read_data_file(tmp_path / "bad.csv")
        assert "\n" not in str(err.value)
    (tmp_path / "bad.csv").write_text("user,arm,reward,user_id\nu,0,0.5,4\n")
    with pytest.raises(ValueError, match="at least one feature column"):
        read_data_file(tmp_path / "bad.csv")
    with pytest.raises(ValueError, match="nor repeat user, arm, reward, user_id"):
        write_data_file(tmp_path / "c.csv", x, mu, feature_names=["user_id", "z"])


def _line(user: int, arm: int, mu: np.ndarray, person: int, x: np.ndarray) -> str:
    return ",".join([str(user), str(arm), f"{mu[user, arm]:.9g}", str(person), *(f"{v:.9g}" for v in x[user, arm])])


# -- runs and bad input ---------------------------------------------------------------------------


def test_a_run_reports_its_unit_and_warns_when_returning_users_are_not_covered():
    config = config_from_dict(
        {
            "experiment": {"seed": 2, "runs": 2, "horizon": 100},
            "environment": {**SPHERE, "returning_users": 5},
            "algorithms": [
                {"name": "fedlinucb", "label": "per-interaction", "protocol": "ldp", "batch": 10},
                {
                    "name": "fedlinucb",
                    "label": "user",
                    "protocol": "distributed-dp",
                    "batch": 10,
                    "privacy_unit": "user",
                    "max_contributions": 10,
                },
            ],
        }
    )
    results = run_experiment(config)
    per, user = results.algorithms["per-interaction"].report, results.algorithms["user"].report
    assert per["privacy_unit"] == RETURNING_NOT_COVERED and per["dropped_contributions"] == 0
    # 100 rounds over 5 users: 20 visits each on average, so a cap of 10 drops about half
    assert user["privacy_unit"] == "user, up to 10 contributions"
    assert 0 < user["dropped_contributions"] < 2 * 3 * 100 and user["max_user_visits"] >= 20
    (line,) = results.privacy_unit_warnings()
    assert "'per-interaction' protects each interaction" in line and "privacy_unit = 'user'" in line
    import fedbandits

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fedbandits.run(config, runs=1)
    assert any(issubclass(w.category, PrivacyUnitWarning) for w in caught)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"protocol": "ldp", "privacy_unit": "person"}, "privacy_unit must be one of 'interaction', 'user'"),
        ({"protocol": "ldp", "privacy_unit": "user", "max_contributions": 0}, "max_contributions must be"),
        ({"protocol": "ldp", "privacy_unit": "user", "max_contributions": 2.5}, "max_contributions must be"),
        ({"protocol": "ldp", "max_contributions": 3}, "max_contributions applies to privacy_unit 'user' only"),
        ({"privacy_unit": "user"}, "privacy_unit 'user' applies to private protocols"),
        (
            {"protocol": "sdp-amplification", "privacy_unit": "user", "max_contributions": 2},
            "privacy_unit 'user' needs",
        ),
        (
            {"protocol": "ldp", "privacy_unit": "user", "max_contributions": 2, "calibration": "paper"},
            "privacy_unit 'user' needs",
        ),
    ],
)
def test_bad_unit_parameters_are_refused_in_one_line(fields, message):
    with pytest.raises(ValueError, match=message) as err:
        FedLinUCBParams(**fields)
    assert "\n" not in str(err.value)


def test_user_level_without_user_ids_is_refused_before_anything_runs():
    base = {"experiment": {"runs": 1, "horizon": 20}, "environment": SPHERE}
    user = {"name": "fedlinucb", "protocol": "ldp", "batch": 10, "privacy_unit": "user", "max_contributions": 2}
    with pytest.raises(ConfigError, match=r"algorithms\[1\]\.privacy_unit: 'user' needs user ids.*returning_users > 0"):
        config_from_dict({**base, "algorithms": [user]})
    for bad in (0, -1, 1.5):
        with pytest.raises(ConfigError, match="returning_users"):
            config_from_dict({**base, "environment": {**SPHERE, "returning_users": bad}, "algorithms": [user]})
    with pytest.raises(ConfigError, match="visits must be one of 'uniform', 'zipf'"):
        config_from_dict(
            {**base, "environment": {**SPHERE, "returning_users": 3, "visits": "poisson"}, "algorithms": [user]}
        )


def test_the_clustered_instance_serves_its_real_users_and_others_refuse_the_user_unit():
    """clustered-synthetic's rounds carry the arriving user (the ids the FCLUB baselines serve), so FedLinUCB
    bounds per user there; gap-instance has no users per round: refused in one line."""
    env = {"name": "clustered-synthetic", "users": 6, "clusters": 2, "agents": 2, "dim": 3, "arms": 4}
    user = {"name": "fedlinucb", "protocol": "ldp", "batch": 10, "privacy_unit": "user", "max_contributions": 3}
    config = config_from_dict(
        {"experiment": {"seed": 1, "runs": 1, "horizon": 60}, "environment": env, "algorithms": [user]}
    )
    report = next(iter(run_experiment(config).algorithms.values())).report
    # the default 'single' arrivals: one of the 6 users per round, so 60 visits; the cap keeps 3 of each
    # user's visits, and each user's count is read from a second copy of the environment
    from fedbandits.registry import ENVIRONMENTS
    from fedbandits.sim.seeding import env_rngs

    twin = ENVIRONMENTS["clustered-synthetic"].factory(config.environment.params, env_rngs(1, [0]))
    visits = np.bincount(np.concatenate([twin.next_round().users.ravel() for _ in range(60)]), minlength=6)
    assert report["observations"] == 60 == visits.sum()
    assert report["max_user_visits"] == visits.max()
    assert report["dropped_contributions"] == np.maximum(visits - 3, 0).sum()
    with pytest.raises(ConfigError, match="environment 'gap-instance' carries none"):
        config_from_dict(
            {
                "experiment": {"runs": 1, "horizon": 20},
                "environment": {"name": "gap-instance", "agents": 2, "arms": 4, "dim": 2},
                "algorithms": [user],
            }
        )


def test_deployed_silos_bound_the_users_their_data_files_name(tmp_path):
    """Two silos whose .npz files name 5 users, 4 visits each in the first 20 rows; m = 2: each silo drops
    2 visits of each user (10), as the simulator reading the same files does, and the prefixes agree."""
    from fedbandits.federation.parity import compare, reference_run, run_loopback
    from fedbandits.federation.silo import load_silo_results
    from fedbandits.federation.spec import make_spec

    user = {"name": "fedlinucb", "protocol": "ldp", "batch": 10, "privacy_unit": "user", "max_contributions": 2}
    rng = np.random.default_rng(0)
    x, mu = rng.random((30, 2, 2)).astype(np.float32) / 2, rng.random((30, 2)).astype(np.float32)
    paths = [str(write_data_file(tmp_path / f"s{i}.npz", x, mu, user_ids=np.arange(30) % 5)) for i in range(2)]
    files = {"name": "data-files", "paths": paths, "agents": 2}
    spec = make_spec(
        config_from_dict({"experiment": {"runs": 1, "horizon": 20}, "environment": files, "algorithms": [user]})
    )
    coord = run_loopback(spec, tmp_path / "dep")
    dirs = {i: tmp_path / "dep" / f"silo-{i}" for i in range(2)}
    assert compare(spec, reference_run(spec), coord.synced_prefixes(), dirs) == []
    assert [load_silo_results(dirs[i], i).agent.counts["dropped_contributions"] for i in range(2)] == [10, 10]


def test_a_deployed_silo_without_user_ids_refuses_the_user_unit_and_a_per_interaction_report_warns(tmp_path):
    """A user-level silo whose data file names no users stops with one line naming the file; a
    per-interaction deployment over returning users says in its report that they are not covered."""
    from fedbandits.federation.deployment_results import deployment_results
    from fedbandits.federation.parity import run_loopback
    from fedbandits.federation.silo import Silo, SiloError
    from fedbandits.federation.spec import make_spec

    user = {"name": "fedlinucb", "protocol": "ldp", "batch": 10, "privacy_unit": "user", "max_contributions": 2}
    rng = np.random.default_rng(1)
    x, mu = rng.random((30, 2, 2)).astype(np.float32) / 2, rng.random((30, 2)).astype(np.float32)
    bare = str(write_data_file(tmp_path / "bare.npz", x, mu))
    named = str(write_data_file(tmp_path / "named.npz", x, mu, user_ids=np.arange(30) % 5))
    served = {"name": "data-files", "agents": 2, "arms": 2, "dim": 2}
    spec = make_spec(
        config_from_dict({"experiment": {"runs": 1, "horizon": 20}, "environment": served, "algorithms": [user]})
    )
    with pytest.raises(SiloError, match=r"silo 0: privacy_unit 'user' needs user ids in its data \(.*bare\.npz\)"):
        Silo(spec, 0, tmp_path / "s0", "derived", data_file=bare)
    per_interaction = {**user, "privacy_unit": "interaction", "max_contributions": 1}
    files = {"name": "data-files", "paths": [named, named], "agents": 2}
    spec = make_spec(
        config_from_dict(
            {"experiment": {"runs": 1, "horizon": 20}, "environment": files, "algorithms": [per_interaction]}
        )
    )
    coord = run_loopback(spec, tmp_path / "dep")
    report = deployment_results(spec, coord, 0.0).algorithms[spec.label].report
    assert report["privacy_unit"] == RETURNING_NOT_COVERED and report["max_user_visits"] == 4
