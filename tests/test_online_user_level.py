"""User-level privacy in the online agent (issue 33, item 1): user ids with every decision, at most m
contributions per user and budget epoch (the rest dropped and counted), the epoch a contribution
belongs to, the secret noise's user-level accounting, and bad ids refused with the state unchanged.
Parity with the simulator's user-level runs is in tests/test_online_parity.py."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fedbandits import Agent, config_from_dict
from fedbandits.online import AgentError
from fedbandits.privacy.discrete_gaussian import release_rho
from fedbandits.privacy.tree import nodes_containing

DIM = 3
USER = {
    "name": "fedlinucb",
    "batch": 4,
    "protocol": "ldp",
    "epsilon": 1.0,
    "delta": 1e-3,
    "privacy_unit": "user",
    "max_contributions": 2,
}


def _config(algorithm: dict, horizon: int = 16):
    return config_from_dict(
        {
            "experiment": {"seed": 1, "horizon": horizon},
            "environment": {"name": "gaussian-sphere", "agents": 2, "arms": 3, "dim": DIM, "returning_users": 10},
            "algorithms": [algorithm],
        }
    )


def _x(rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((3, DIM))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _serve(agent: Agent, rng: np.random.Generator, user: object, reward: float = 0.5) -> None:
    agent.reward(agent.choose(_x(rng), user_id=user).decision_id, reward)  # type: ignore[arg-type]


def test_a_users_third_contribution_is_served_but_dropped_and_counted():
    """m = 2: user "a" served 3 times, "b" once: 3 contributions enter the release, 1 is dropped; 7 and
    "7" are one user (ids are compared as text)."""
    agent = Agent.from_config(_config(USER), seed=0)
    rng = np.random.default_rng(0)
    for user in ("a", "b", "a", "a", 7, "7", 7):
        _serve(agent, rng, user)
    status = agent.status()
    assert status["decisions"] == status["rewarded"] == 7
    assert status["dropped_contributions"] == 2 and status["observations"] == 5
    assert len(agent.completed) == 5
    assert status["privacy_unit"] == "user, up to 2 contribution(s) per budget epoch"
    assert all(len(k) == 32 and k != "a" for k in agent.contributions)  # digests, never the ids


def test_an_interaction_agent_ignores_user_ids():
    agent = Agent.from_config(_config({**USER, "privacy_unit": "interaction", "max_contributions": 1}), seed=0)
    rng = np.random.default_rng(1)
    for _ in range(4):
        _serve(agent, rng, "a")
    assert agent.status()["dropped_contributions"] == 0 and agent.status()["privacy_unit"] == "interaction"
    assert agent.contributions == {}


def test_a_contribution_counts_in_the_epoch_of_the_release_it_enters():
    """K = 16 // 4 = 4 releases per epoch, m = 2.  User "a" contributes twice, the 4 releases are made, and a
    decision made before them is rewarded after: it enters the next epoch's first release, so it counts
    there (and a third one of that epoch is dropped), while its epoch's count is over."""
    agent = Agent.from_config(_config(USER), seed=None)
    rng = np.random.default_rng(2)
    _serve(agent, rng, "a")
    _serve(agent, rng, "a")
    late = agent.choose(_x(rng), user_id="a")  # a third decision: rewarded only after the epoch's releases
    for _ in range(4):
        agent.sync_payload()
    assert agent.budget_spent()
    agent.reward(late.decision_id, 0.5)  # next epoch's first contribution of "a": kept
    _serve(agent, rng, "a")  # its second: kept
    _serve(agent, rng, "a")  # its third: dropped
    assert agent.status()["dropped_contributions"] == 1 and len(agent.completed) == 2
    agent.new_epoch()
    assert list(agent.contributions.values()) == [(1, 2)]  # the over epoch's counts are pruned


def test_save_and_load_keep_the_counts_and_the_pending_users(tmp_path):
    agent = Agent.from_config(_config(USER), seed=0, clock=lambda: 1000.0)  # a still clock: equal deadlines
    rng = np.random.default_rng(3)
    _serve(agent, rng, "a")
    _serve(agent, rng, "a")
    pending = agent.choose(_x(rng), user_id="a")
    agent.save(tmp_path / "s.npz")
    loaded = Agent.load(tmp_path / "s.npz", clock=lambda: 1000.0)
    assert loaded.state_digest() == agent.state_digest()
    loaded.reward(pending.decision_id, 0.5)
    assert loaded.status()["dropped_contributions"] == 1


def test_decisions_a_snapshot_left_out_are_recalled_in_one_pass_with_their_users():
    """A replica's reload re-enters the pending decisions in one pass (:meth:`Agent.recall_left_out`):
    with user-level privacy their user keys too, so a late reward is capped as the serving agent caps
    it -- the state equals the serving agent's, digest for digest."""
    agent = Agent.from_config(_config(USER), seed=0, clock=lambda: 1000.0)
    rng = np.random.default_rng(4)
    _serve(agent, rng, "a")
    _serve(agent, rng, "a")
    left = [agent.choose(_x(rng), user_id=u) for u in ("a", "b", "a")]
    snapshot = agent.snapshot(pending=False)
    numbers = [agent.decision_number(d.decision_id) for d in left]
    many = Agent.load(snapshot, clock=lambda: 1000.0)
    many.recall_left_out(
        numbers,
        np.array([agent.pending[n][0] for n in numbers]),
        [agent.pending[n][1] for n in numbers],
        [agent.pending_users[n] for n in numbers],
    )
    assert many.state_digest() == agent.state_digest()
    for a in (agent, many):
        a.reward(left[0].decision_id, 0.5)  # user "a"'s third: dropped, counted
    assert many.status()["dropped_contributions"] == agent.status()["dropped_contributions"] == 1


@pytest.mark.parametrize(
    ("user", "message"),
    [
        (None, 'user_id: required with privacy_unit = "user"'),
        (-1, "user_id must be an integer >= 0 or a string"),
        (True, "user_id must be an integer >= 0 or a string"),
        (1.5, "user_id must be an integer >= 0 or a string"),
        ("", "user_id must be 1 to 256 characters long, got 0"),
        ("x" * 257, "user_id must be 1 to 256 characters long, got 257"),
    ],
)
def test_bad_user_ids_are_refused_and_change_nothing(user, message):
    agent = Agent.from_config(_config(USER), seed=0)
    rng = np.random.default_rng(4)
    _serve(agent, rng, "a")
    before = agent.state_digest()
    with pytest.raises(AgentError, match=message) as err:
        agent.choose(_x(rng), user_id=user)
    assert "\n" not in str(err.value) and agent.state_digest() == before


def test_user_ids_are_kept_only_as_keyed_digests(tmp_path):
    """The state file holds neither the id nor its plain (unkeyed) digest, and two agents' secrets differ,
    so a digest cannot be matched to an id by hashing candidate ids; a loaded agent keeps its secret."""
    import hashlib

    agent = Agent.from_config(_config(USER), seed=0)  # seeded: a derived secret, so the file's bytes are fixed
    other = Agent.from_config(_config(USER), seed=1)
    assert Agent.from_config(_config(USER)).user_secret != Agent.from_config(_config(USER)).user_secret  # os
    _serve(agent, np.random.default_rng(5), 123456)
    plain = hashlib.blake2b(b"123456", digest_size=16).hexdigest()
    (key,) = agent.contributions
    assert key != plain and key == agent.user_key("123456") != other.user_key(123456)
    agent.save(tmp_path / "s.npz")
    raw = (tmp_path / "s.npz").read_bytes()
    assert plain.encode() not in raw and b"123456" not in raw
    assert Agent.load(tmp_path / "s.npz").user_key(123456) == key


def test_logged_rows_need_their_users_at_the_user_level():
    agent = Agent.from_config(_config(USER), seed=0)
    x = np.tile(np.eye(DIM)[0], (3, 1))
    with pytest.raises(AgentError, match="user_ids: required"):
        agent.partial_fit(x, None, [0.1, 0.2, 0.3])
    with pytest.raises(AgentError, match=r"user_ids must have one id per row \(3\), got 2"):
        agent.partial_fit(x, None, [0.1, 0.2, 0.3], user_ids=["a", "b"])
    with pytest.raises(AgentError, match=r"user_ids\[1\] must be an integer >= 0"):
        agent.partial_fit(x, None, [0.1, 0.2, 0.3], user_ids=["a", -3, "b"])
    with pytest.raises(AgentError, match="user_ids must be a sequence"):
        agent.partial_fit(x, None, [0.1, 0.2, 0.3], user_ids=5)
    with pytest.raises(AgentError, match=r"user_ids\[0\] must be 1 to 256 characters"):
        agent.partial_fit(x, None, [0.1, 0.2, 0.3], user_ids=[10**5000, "a", "b"])
    assert agent.status()["logged"] == 0
    agent.partial_fit(x, None, [0.1, 0.2, 0.3], user_ids=["a", "a", "a"])
    assert agent.status()["dropped_contributions"] == 1 and len(agent.completed) == 2


def test_the_secret_noise_covers_a_whole_user():
    """The deployed (os) noise of a user-level agent meets its target, and is about m times the
    per-interaction agent's (its continuous calibration is m times; the rounding term is paid per p-sum)."""
    one = Agent.from_config(_config({**USER, "privacy_unit": "interaction", "max_contributions": 1}))
    four = Agent.from_config(_config({**USER, "max_contributions": 4}))
    s1, s4 = one.setup.secret_noise(), four.setup.secret_noise()
    assert s1 is not None and s4 is not None
    assert s4.epsilon_spent <= 1.0 and four.status()["epsilon"] == 1.0
    assert 3.5 < s4.sigma_cov / s1.sigma_cov < 4.5


@pytest.mark.parametrize("sens", [1.3, 0.01])
def test_the_user_level_rounding_term_bounds_every_placement(sens):
    """release_rho with m = 3 bounds, for every placement of 3 contributions over K = 8 batches, the sum
    over the touched p-sums of ((n_k a + r) / s)^2 (a: the sensitivity on the grid, r: the rounding term)
    that the discrete release's zCDP adds up.  With a small sensitivity (a = 0.1 < r) the rounding terms
    of 12 touched p-sums dominate: without its (m - 1) nodes r^2 term the bound would fail there."""
    grid, sigma, dim, m, releases = 0.1, 2.0, 2, 3, 8
    entries = dim * (dim + 1) // 2
    nodes = 4  # of K = 8
    a, r, s = sens / grid, math.sqrt(entries), sigma / grid
    worst = 0.0
    bound = release_rho(sigma, sigma, grid, sens, sens, dim, nodes, m)
    bias_part = ((m * a + math.sqrt(dim)) / s) ** 2 + (m - 1) * (math.sqrt(dim) / s) ** 2
    for batches in itertools.combinations_with_replacement(range(1, releases + 1), m):
        counts: dict[int, int] = {}
        for j in batches:
            for node in nodes_containing(j, releases):
                counts[node] = counts.get(node, 0) + 1
        placed = sum(((n * a + r) / s) ** 2 for n in counts.values())
        assert 0.5 * (placed + nodes * bias_part) <= bound * (1 + 1e-12), batches
        worst = max(worst, placed)
    # without the (m - 1) nodes r^2 term the bound of the covariance part is nodes ((m a + r) / s)^2
    assert (worst > nodes * ((m * a + r) / s) ** 2) == (sens == 0.01)
    assert release_rho(sigma, sigma, grid, sens, sens, dim, nodes, 1) == release_rho(
        sigma, sigma, grid, sens, sens, dim, nodes
    )
