"""The online agent's promises (issue 30, item 1): decisions now, rewards later and at most once,
expiry, the release of completed decisions only, save/load bit for bit, and bad input refused
with one error naming the field while the state stays exactly as it was (compared by digest).
"""

from __future__ import annotations

import json
import pickle
import random

import numpy as np
import pytest

from fedbandits import Agent, ConfigError, Decision, config_from_dict
from fedbandits.online import AgentError, Aggregator, StateFileError
from fedbandits.online import state as statefile
from fedbandits.privacy import discrete_gaussian as dg
from fedbandits.privacy.mechanisms import pack

DIM = 4


class FakeClock:
    """A clock the test moves by hand (the agent's clock is injectable)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def config(algorithm: dict | None = None, agents: int = 2, horizon: int = 200):
    return config_from_dict(
        {
            "experiment": {"seed": 1, "horizon": horizon},
            "environment": {"name": "gaussian-sphere", "agents": agents, "arms": 5, "dim": DIM},
            "algorithms": [algorithm or {"name": "linucb-independent"}],
        }
    )


LDP = {"name": "fedlinucb", "batch": 10, "protocol": "ldp", "epsilon": 1.0, "delta": 1e-3}
NONE = {"name": "fedlinucb", "batch": 10, "protocol": "none"}


def features(rng, k=5):
    x = rng.standard_normal((k, DIM))
    return x / np.linalg.norm(x, axis=1, keepdims=True)  # ||x|| = 1 = the default feature_bound


def test_choose_scores_every_arm_and_k_may_change():
    agent = Agent.from_config(config(), seed=0)
    rng = np.random.default_rng(0)
    ids = set()
    for k in (1, 3, 100, 3):
        d = agent.choose(features(rng, k))
        assert isinstance(d, Decision)
        assert d.scores.shape == (k,) and d.arm == int(np.argmax(d.scores))
        ids.add(d.decision_id)
    assert len(ids) == 4
    assert agent.status()["pending"] == 4


def test_a_reward_is_learned_once_and_changes_the_choice_state():
    agent = Agent.from_config(config(), seed=0)
    x = features(np.random.default_rng(1))
    d = agent.choose(x)
    agent.reward(d.decision_id, 0.5)
    chosen = x[d.arm].astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(agent.state.gram[0], np.eye(DIM) + np.outer(chosen, chosen), rtol=1e-15)
    np.testing.assert_allclose(agent.state.bias[0], 0.5 * chosen, rtol=1e-15)
    np.testing.assert_allclose(agent.state.inv[0] @ agent.state.gram[0], np.eye(DIM), atol=1e-12)
    before = agent.state_digest()
    with pytest.raises(AgentError, match=r"decision_id .* already rewarded"):
        agent.reward(d.decision_id, 0.5)
    assert agent.state_digest() == before


def test_unknown_ids_change_nothing():
    agent = Agent.from_config(config(), seed=0)
    agent.choose(features(np.random.default_rng(2)))
    other = Agent.from_config(config(), seed=1)
    foreign = other.choose(features(np.random.default_rng(2))).decision_id
    before = agent.state_digest()
    for bad in (
        foreign,
        "nonsense",
        "",
        17,
        None,
        agent.instance + "-5",
        agent.instance + "-00",
        agent.instance + "-0x",
    ):
        with pytest.raises(AgentError, match=r"decision_id .* unknown"):
            agent.reward(bad, 0.1)  # type: ignore[arg-type]
    assert agent.state_digest() == before


def _drive(agent, rng, batches, batch, deliver):
    """``batches`` rounds of ``batch`` decisions; ``deliver(list of (id, value))`` posts the rewards
    of a batch before its sync.  Returns the payloads, digests before each sync and the arms."""
    payloads, digests, arms = [], [], []
    for _ in range(batches):
        owed = []
        for _ in range(batch):
            x = features(rng)
            d = agent.choose(x)
            arms.append(d.arm)
            owed.append((d.decision_id, float(np.clip(x[d.arm] @ np.ones(DIM) / 2, -1, 1))))
        deliver(agent, owed)
        digests.append(agent.state_digest())
        payload = agent.sync_payload()
        payloads.append(payload)
        agent.apply_sync(payload * 2)  # the prefix of two silos that released the same: valid, noisy
    return payloads, digests, arms


def test_delayed_and_shuffled_rewards_give_the_state_of_in_order_ones():
    """A lazy agent: the same completed decisions at each sync give the same state and release,
    bit for bit, whatever the order and delay of the rewards (W_i, U_i are summed in decision order)."""
    order = np.random.default_rng(5)

    def shuffled(agent, owed):
        for i in order.permutation(len(owed)):
            agent.reward(*owed[i])

    in_order = Agent.from_config(config(LDP), seed=3)
    late = Agent.from_config(config(LDP), seed=3)

    def immediately(agent, owed):
        for item in owed:
            agent.reward(*item)

    a = _drive(in_order, np.random.default_rng(9), 4, 10, immediately)
    b = _drive(late, np.random.default_rng(9), 4, 10, shuffled)
    assert a[2] == b[2]  # lazy: the same arms, whatever the rewards did meanwhile
    assert a[1] == b[1]  # the same state before every sync
    for pa, pb in zip(a[0], b[0], strict=True):
        np.testing.assert_array_equal(pa, pb)
    assert in_order.state_digest() == late.state_digest()
    # and the check can fail: one reward fewer is another state
    third = Agent.from_config(config(LDP), seed=3)
    c = _drive(third, np.random.default_rng(9), 1, 10, lambda agent, owed: immediately(agent, owed[:-1]))
    assert c[1][0] != a[1][0]


def test_an_expired_decision_is_never_learned_from_and_its_late_reward_is_refused():
    clock = FakeClock()
    agent = Agent.from_config(config(NONE), seed=0, expiry_seconds=60.0, clock=clock)
    rng = np.random.default_rng(4)
    xs = [features(rng) for _ in range(3)]
    ds = [agent.choose(x) for x in xs]
    agent.reward(ds[0].decision_id, 0.25)
    clock.now += 59.0
    agent.reward(ds[1].decision_id, -0.5)  # in time
    clock.now += 2.0  # ds[2] is now 61 s old
    with pytest.raises(AgentError, match="expired"):
        agent.reward(ds[2].decision_id, 1.0)
    status = agent.status()
    assert (status["expired"], status["late_rewards"], status["pending"], status["rewarded"]) == (1, 1, 0, 2)
    # the release holds exactly the two rewarded decisions (protocol none: exact statistics)
    x0, x1 = (xs[i][ds[i].arm].astype(np.float32).astype(np.float64) for i in (0, 1))
    cov = np.outer(x0, x0) + np.outer(x1, x1)
    expected = pack(cov[None], (0.25 * x0 - 0.5 * x1)[None])[0]
    np.testing.assert_allclose(agent.sync_payload(), expected, rtol=1e-14, atol=1e-15)


def test_the_decisions_a_snapshot_left_out_are_recalled_in_one_pass_as_one_by_one():
    """A service re-enters the pending decisions a snapshot saved without them (its log holds them):
    :meth:`Agent.recall_left_out` gives, in one pass, the state :meth:`Agent.recall` one by one gives --
    the serving agent's, pending decisions and their deadlines included -- and refuses a decision the
    state does not count, or one it holds already, as recall does."""
    clock = FakeClock()
    agent = Agent.from_config(config(NONE), seed=0, expiry_seconds=60.0, clock=clock)
    rng = np.random.default_rng(5)
    made = []
    for i in range(12):
        clock.now += 1.0
        x = features(rng)
        decision = agent.choose(x)
        made.append((int(decision.decision_id.rsplit("-", 1)[1]), x[decision.arm], clock.now + 60.0))
        if i % 3 == 0:
            agent.reward(decision.decision_id, 0.5)
    left = [m for m in made if m[0] in agent.pending]
    snapshot = agent.snapshot(pending=False)
    one, many = Agent.load(snapshot, clock=clock), Agent.load(snapshot, clock=clock)
    for number, x, deadline in left:
        one.recall(number, x, deadline, counted=True)
    many.recall_left_out([m[0] for m in left], np.array([m[1] for m in left]), [m[2] for m in left], [None] * len(left))
    assert len(left) == 8 and one.state_digest() == many.state_digest() == agent.state_digest()
    with pytest.raises(AgentError, match="not one the loaded state left out"):
        many.recall_left_out([left[0][0]], left[0][1][None], [left[0][2]], [None])  # held already
    with pytest.raises(AgentError, match="not one the loaded state left out"):
        many.recall_left_out([12], left[0][1][None], [left[0][2]], [None])  # not counted
    assert many.state_digest() == agent.state_digest()
    clock.now = left[3][2] + 0.5  # the first four recalled decisions are past their deadlines: both expire them
    x = features(rng)
    for a in (one, many, agent):
        a.choose(x)
    assert one.counts["expired"] == many.counts["expired"] == 4
    assert one.state_digest() == many.state_digest() == agent.state_digest()


def test_the_release_holds_completed_decisions_only():
    agent = Agent.from_config(config(NONE), seed=0)
    rng = np.random.default_rng(6)
    x = features(rng)
    d = agent.choose(x)
    agent.choose(features(rng))  # pending: not in this release
    agent.reward(d.decision_id, 1.0)
    chosen = x[d.arm].astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(agent.sync_payload(), pack(np.outer(chosen, chosen)[None], chosen[None])[0], rtol=1e-15)
    assert agent.status()["pending"] == 1
    np.testing.assert_array_equal(agent.sync_payload(), np.zeros(DIM * (DIM + 1) // 2 + DIM))  # nothing new


def test_private_inputs_are_clipped_and_counted_and_rewards_out_of_bound_refused():
    agent = Agent.from_config(config({**LDP, "feature_bound": 0.5, "reward_bound": 1.0}), seed=0)
    d = agent.choose(features(np.random.default_rng(7)))  # norms 1 > 0.5
    before = agent.state_digest()
    with pytest.raises(AgentError, match=r"value must be in \[-1, 1\] \(the config's reward_bound\)"):
        agent.reward(d.decision_id, 1.5)
    assert agent.state_digest() == before
    agent.reward(d.decision_id, 1.0)
    status = agent.status()
    assert (status["clipped_features"], status["clipped_rewards"], status["observations"]) == (1, 0, 1)
    assert status["feature_norm_max"] == pytest.approx(1.0)
    clipping = Agent.from_config(config(LDP), seed=0, clip_rewards=True)
    d = clipping.choose(features(np.random.default_rng(7)))
    clipping.reward(d.decision_id, -3.0)  # the simulator's behaviour: clipped to -1 and counted
    assert clipping.status()["clipped_rewards"] == 1


def test_partial_fit_takes_both_shapes_alike():
    rng = np.random.default_rng(8)
    logged = np.stack([features(rng) for _ in range(6)])  # (n, K, d)
    arms = np.array([0, 4, 2, 2, 1, 3])
    rewards = np.linspace(-1, 1, 6)
    a = Agent.from_config(config(NONE), seed=0)
    b = Agent.from_config(config(NONE), seed=0)
    a.partial_fit(logged, arms, rewards)
    b.partial_fit(logged[np.arange(6), arms], None, rewards)
    assert a.state_digest() == b.state_digest()
    chosen = logged[np.arange(6), arms]
    np.testing.assert_allclose(a.state.gram[0], np.eye(DIM) + chosen.T @ chosen, rtol=1e-13)
    assert a.status()["logged"] == 6 and a.status()["batch_samples"] == 6


def test_sync_is_refused_without_federation_and_beyond_the_calibrated_releases():
    agent = Agent.from_config(config(), seed=0)
    with pytest.raises(AgentError, match="does not synchronise"):
        agent.sync_payload()
    fed = Agent.from_config(config(LDP, horizon=20), seed=0)  # K = 20 // 10 = 2 releases
    fed.sync_payload()
    fed.sync_payload()
    before = fed.state_digest()
    with pytest.raises(AgentError, match="calibrated for K = horizon // batch = 2 releases"):
        fed.sync_payload()
    assert fed.state_digest() == before


def test_distributed_dp_payloads_are_residues_the_aggregator_decodes():
    cfg = config({"name": "fedlinucb", "batch": 10, "protocol": "distributed-dp", "epsilon": 1.0, "delta": 1e-3})
    agents = [Agent.from_config(cfg, silo=i, seed=2) for i in range(2)]
    payloads = [a.sync_payload() for a in agents]
    assert all(p.dtype == np.uint64 for p in payloads)
    prefix = Aggregator.from_config(cfg).aggregate(payloads)
    assert prefix.dtype == np.float64 and np.isfinite(prefix).all() and np.abs(prefix).max() > 0  # noise only


# -- save / load -------------------------------------------------------------------------------
def _busy_agent(clock):
    """An agent with something in every part of its state: syncs made, pending, completed, expired."""
    agent = Agent.from_config(config(LDP), seed=4, expiry_seconds=30.0, clock=clock)
    rng = np.random.default_rng(10)
    for step in range(25):
        d = agent.choose(features(rng))
        if step % 5 != 4:
            agent.reward(d.decision_id, 0.3)
        if step == 11:
            agent.apply_sync(agent.sync_payload() * 2)
    clock.now += 31.0  # the 5 unrewarded decisions so far (steps 4, 9, ..., 24) expire
    agent.choose(features(rng))  # pending
    d = agent.choose(features(rng))
    agent.reward(d.decision_id, -0.2)  # completed, not yet released
    return agent


def _continue(agent, seed):
    rng = np.random.default_rng(seed)
    arms = []
    for _ in range(8):
        d = agent.choose(features(rng))
        agent.reward(d.decision_id, 0.1)
        arms.append(d.arm)
    payload = agent.sync_payload()
    return arms, payload


def test_save_and_load_round_trip_bit_for_bit_and_continue_the_noise(tmp_path):
    clock = FakeClock()
    agent = _busy_agent(clock)
    twin = _busy_agent(FakeClock())  # never saved: what the agent would have done
    status = agent.status()
    assert status["expired"] == 5 and status["pending"] == 1 and status["batch_samples"] > 0 and status["syncs"] == 1
    path = tmp_path / "agent.npz"
    agent.save(path)
    loaded = Agent.load(path, clock=clock)
    assert loaded.state_digest() == agent.state_digest()
    assert loaded.status() == agent.status()
    np.testing.assert_array_equal(loaded.state.inv, agent.state.inv)
    # a second save of the loaded agent holds the same state
    loaded.save(tmp_path / "again.npz")
    assert statefile.digest(*statefile.read(tmp_path / "again.npz")) == statefile.digest(*statefile.read(path))
    # the loaded agent continues exactly as the one never saved: same choices, same next noise
    arms, payload = _continue(loaded, 11)
    twin_arms, twin_payload = _continue(twin, 11)
    assert arms == twin_arms
    np.testing.assert_array_equal(payload, twin_payload)
    assert loaded.state_digest() == twin.state_digest()


def test_loaded_pending_decisions_keep_their_remaining_time(tmp_path):
    clock = FakeClock()
    agent = Agent.from_config(config(), seed=0, expiry_seconds=10.0, clock=clock)
    d = agent.choose(features(np.random.default_rng(0)))
    clock.now += 6.0
    agent.save(tmp_path / "a.npz")
    later = FakeClock()
    later.now = 5.0  # a new process: its monotonic clock starts elsewhere
    loaded = Agent.load(tmp_path / "a.npz", clock=later)
    later.now += 3.0  # 9 s of the decision's 10
    loaded.reward(d.decision_id, 0.0)
    assert loaded.status()["rewarded"] == 1


def test_corrupt_truncated_and_other_version_files_are_refused(tmp_path):
    path = tmp_path / "agent.npz"
    agent = _busy_agent(FakeClock())
    agent.save(path)
    data = path.read_bytes()
    at = data.index(b"\x93NUMPY", data.index(b"gram.npy")) + 140  # a byte of gram's values (past its .npy header)
    cases = {
        "truncated": data[: len(data) // 2],
        "empty": b"",
        "text": b"hello, not an agent\n",
        "flipped": data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :],
    }
    for name, blob in cases.items():
        bad = tmp_path / f"{name}.npz"
        bad.write_bytes(blob)
        with pytest.raises(StateFileError, match=r"is not an agent state file \(corrupt or truncated\)$"):
            Agent.load(bad)
    header, arrays = statefile.read(path)
    header = {k: v for k, v in header.items() if k not in ("sha256", "clock")}
    other = tmp_path / "other.npz"
    statefile.write(other, {**header, "format": 99}, arrays, 0.0)
    with pytest.raises(StateFileError, match=r"was written by agent format 99; this is 2$"):
        Agent.load(other)
    tampered = dict(arrays, gram=arrays["gram"] * 2)  # checksum of the original header: refused
    blob = json.dumps({**header, "clock": 0.0, "sha256": statefile.digest(header, arrays)}).encode()
    np.savez(tmp_path / "tampered.npz", header=np.frombuffer(blob, dtype=np.uint8), **tampered)
    with pytest.raises(StateFileError, match="corrupt or truncated"):
        Agent.load(tmp_path / "tampered.npz")
    header_only = {k: v for k, v in header.items() if k != "counts"}  # checksum right, content wrong
    statefile.write(tmp_path / "short.npz", header_only, arrays, 0.0)
    with pytest.raises(StateFileError, match="corrupt or truncated"):
        Agent.load(tmp_path / "short.npz")
    with pytest.raises(StateFileError, match="no such state file"):
        Agent.load(tmp_path / "missing.npz")
    assert issubclass(StateFileError, ValueError)


# -- bad input ---------------------------------------------------------------------------------
BAD_FEATURES = [
    (np.ones((5, DIM + 1)), r"features must have shape \(K, d = 4\)"),
    (np.ones(DIM), r"features must have shape"),
    (np.ones((2, 5, DIM)), r"features must have shape"),
    (np.ones((0, DIM)), r"K >= 1"),
    (np.full((5, DIM), np.nan), "features must be finite"),
    (np.full((5, DIM), np.inf), "features must be finite"),
    (np.full((5, DIM), 1e39), "features must be finite"),  # beyond float32
    ("abc", "features must be"),
    ([[1, 2], [3]], "features must be"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_FEATURES)
def test_bad_features_are_refused_and_change_nothing(bad, message):
    agent = _busy_agent(FakeClock())
    before = agent.state_digest()
    with pytest.raises(AgentError, match=message):
        agent.choose(bad)
    assert agent.state_digest() == before


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), "1.0", None, True, 1.01, -7])
def test_bad_rewards_are_refused_and_change_nothing(value):
    agent = _busy_agent(FakeClock())
    d = agent.choose(features(np.random.default_rng(3)))
    before = agent.state_digest()
    with pytest.raises(AgentError, match="value must"):
        agent.reward(d.decision_id, value)
    assert agent.state_digest() == before
    agent.reward(d.decision_id, 0.5)  # the decision is still pending and takes a good reward


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((np.ones((3, 5, DIM)), [0, 1], [0, 0, 0]), "arms must be 3 integers in"),
        ((np.ones((3, 5, DIM)), [0, 1, 5], [0, 0, 0]), r"arms must be 3 integers in \[0, K = 5\)"),
        ((np.ones((3, 5, DIM)), [0.5, 1, 2], [0, 0, 0]), "arms must be"),
        ((np.ones((3, DIM)), None, [0, 0]), "rewards must be 3 numbers"),
        ((np.ones((3, DIM)), None, [0, np.nan, 0]), r"rewards\[1\] must be a finite number"),
        ((np.ones((3, DIM)), None, [0, 2.0, 0]), r"rewards\[1\] must be in \[-1, 1\]"),
        ((np.ones((3, DIM + 1)), None, [0, 0, 0]), "features must be a numeric array"),
        ((np.full((3, DIM), np.inf), None, [0, 0, 0]), "features must be finite"),
    ],
)
def test_bad_logs_are_refused_and_change_nothing(args, message):
    agent = _busy_agent(FakeClock())
    before = agent.state_digest()
    with pytest.raises(AgentError, match=message):
        agent.partial_fit(*args)
    assert agent.state_digest() == before


@pytest.mark.parametrize(
    "prefix",
    [np.zeros(3), np.full(DIM * (DIM + 1) // 2 + DIM, np.nan), "x", -1e6 * np.ones(DIM * (DIM + 1) // 2 + DIM)],
)
def test_bad_prefixes_are_refused_and_change_nothing(prefix):
    agent = Agent.from_config(config(NONE), seed=0)  # non-private: an indefinite prefix is not repaired
    before = agent.state_digest()
    with pytest.raises(AgentError, match="prefix"):
        agent.apply_sync(prefix)
    assert agent.state_digest() == before


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"algorithms\[1\]\.name: an agent runs"):
        Agent.from_config(config({"name": "linucb-super"}))
    with pytest.raises(ConfigError, match=r"algorithms\[1\]\.protocol: an agent synchronises through"):
        Agent.from_config(config({**LDP, "protocol": "sdp-vector-sum", "calibration": "paper"}))
    with pytest.raises(ConfigError, match=r"algorithms\[1\]\.protocol: 'sdp-amplification' needs a shuffler"):
        Agent.from_config(config({**LDP, "protocol": "sdp-amplification", "calibration": "paper"}))
    with pytest.raises(ConfigError, match=r"entry: no \[\[algorithms\]\] entry labelled 'x'"):
        Agent.from_config(config(), entry="x")
    with pytest.raises(ConfigError, match=r"algorithms\[1\] \(fedlinucb\): batch must be"):  # as `run` says it
        Agent.from_config(config({**NONE, "batch": 500}))
    with pytest.raises(ConfigError, match="cannot read config"):
        Agent.from_config("/nonexistent/agent.toml")
    with pytest.raises(AgentError, match=r"silo must be an integer in \[0, 2\)"):
        Agent.from_config(config(), silo=2)
    with pytest.raises(AgentError, match="expiry_seconds must be a number > 0"):
        Agent.from_config(config(), expiry_seconds=0)


def test_entry_picks_the_labelled_algorithm_and_the_toml_path_works(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text(
        '[experiment]\nhorizon = 100\n[environment]\nname = "gaussian-sphere"\nagents = 3\ndim = 4\n'
        '[[algorithms]]\nname = "linucb-independent"\n'
        '[[algorithms]]\nname = "fedlinucb"\nlabel = "fed"\nprotocol = "ldp"\nbatch = 5\n'
    )
    agent = Agent.from_config(toml, entry="fed", silo=2)
    status = agent.status()
    assert (status["algorithm"], status["protocol"], status["lazy"], status["silo"]) == ("fedlinucb", "ldp", True, 2)
    assert status["releases_planned"] == 20 and status["epsilon_spent"] == 0.0
    agent.sync_payload()
    assert 0 < agent.status()["epsilon_spent"] <= 1.0
    assert Agent.from_config(toml).status()["algorithm"] == "linucb-independent"


def test_a_non_lazy_agent_keeps_acting_on_decisions_completed_after_its_release():
    """FedLinUCB with ``none`` (lazy false): after apply_sync the state is lambda I + the prefix + the
    decisions completed since the release -- none lost, none counted twice."""
    agent = Agent.from_config(config(NONE), seed=0)
    rng = np.random.default_rng(12)
    rows = []
    for step in range(4):
        x = features(rng)
        d = agent.choose(x)
        agent.reward(d.decision_id, 0.1 * step)
        rows.append(x[d.arm].astype(np.float32).astype(np.float64))
        if step == 2:
            payload = agent.sync_payload()  # the first three
    agent.apply_sync(payload)  # a federation of this silo alone
    chosen = np.array(rows)
    np.testing.assert_allclose(agent.state.gram[0], np.eye(DIM) + chosen.T @ chosen, rtol=1e-13)
    np.testing.assert_allclose(agent.state.bias[0], chosen.T @ (0.1 * np.arange(4)), rtol=1e-13, atol=1e-15)
    assert agent.status()["batch_samples"] == 1  # the fourth waits for the next release


def test_status_of_a_distributed_dp_agent_and_unbounded_non_private_rewards():
    cfg = config({"name": "fedlinucb", "batch": 10, "protocol": "distributed-dp", "epsilon": 1.0, "delta": 1e-3})
    agent = Agent.from_config(cfg, seed=0)
    status = agent.status()
    assert (status["protocol"], status["private"], status["lazy"], status["guarantee"]) == (
        "distributed-dp",
        True,
        True,
        "formal",
    )
    agent.sync_payload()
    assert 0 < agent.status()["epsilon_spent"] <= 1.0
    plain = Agent.from_config(config(NONE), seed=0)  # non-private: any finite reward is learned as given
    d = plain.choose(features(np.random.default_rng(13)))
    plain.reward(d.decision_id, 250.0)
    assert plain.status()["rewarded"] == 1 and "clipped" not in plain.status()
    unsafe = Agent.from_config(config({**LDP, "lazy": False}), seed=0)
    assert unsafe.status()["guarantee"] == "no formal guarantee"


# -- noise sources: secret ("os", the default) and derived (seed=s) ------------------------------
DDP = {"name": "fedlinucb", "batch": 10, "protocol": "distributed-dp", "epsilon": 1.0, "delta": 1e-3}


def test_without_a_seed_the_noise_is_the_deployed_silos_secret_noise():
    """seed=None draws the deployed silo's samplers from the OS CSPRNG: no pseudo-random stream at all,
    and two agents built alike and fed alike release different noise; seed=s is the simulator's class."""
    from fedbandits.federation.spec import make_spec
    from fedbandits.privacy.discrete_gaussian import SecretTreeRandomizer
    from fedbandits.privacy.mechanisms import TreeRandomizer
    from fedbandits.protocols.distributed_dp import DistributedRandomizer, SecretDistributedRandomizer

    cfg = config(LDP)
    secret = [Agent.from_config(cfg) for _ in range(2)]
    for agent in secret:
        assert type(agent.randomizer) is SecretTreeRandomizer and agent.randomizer.silo_rngs == []
        assert agent.noise_source == "os" and agent.status()["noise_source"] == "os"
    # the calibration is the deployment's own (shared code), not a copy of it
    assert secret[0].setup.secret_noise() == make_spec(cfg).secret_noise()
    noise = secret[0].setup.secret_noise()
    np.testing.assert_array_equal(
        secret[0].randomizer.sigma, [noise.sigma_cov] * (DIM * (DIM + 1) // 2) + [noise.sigma_bias] * DIM
    )
    assert secret[0].randomizer.grid == noise.grid
    rng = [np.random.default_rng(3), np.random.default_rng(3)]
    for agent, r in zip(secret, rng, strict=True):
        for _ in range(4):
            agent.reward(agent.choose(features(r)).decision_id, 0.5)
    first, second = (agent.sync_payload() for agent in secret)
    assert not np.array_equal(first, second)
    assert type(Agent.from_config(cfg, seed=5).randomizer) is TreeRandomizer
    assert Agent.from_config(cfg, seed=5).status()["noise_source"] == "derived"

    masked = [Agent.from_config(config(DDP)) for _ in range(2)]
    assert all(type(a.randomizer) is SecretDistributedRandomizer for a in masked)
    assert not np.array_equal(masked[0].sync_payload(), masked[1].sync_payload())
    assert type(Agent.from_config(config(DDP), seed=5).randomizer) is DistributedRandomizer


def test_secret_noise_has_the_calibrated_scale(monkeypatch):
    """The secret noise of every released node, divided by the deployment's secret sigma of its entry,
    must be standard normal.  d = 10 (P = 65 entries), K = 80 releases, each node with a few rewarded
    decisions; node k's exact value is summed here from the chosen features (independently of the
    agent), and the release is g * (round(node / g) + Z), so payload - node = g Z up to g / 2 =
    sigma / 8192 at most (negligible).  The agent's own exact sampler draws from a fixed-seed
    ``random.Random`` here in place of the OS CSPRNG, so the test is reproducible; its thresholds are
    set for both error rates.  n = 80 x 65 = 5200 values; m = mean(z^2) has mean
    (sigma_true / sigma)^2 and sd sqrt(2 / n) (sigma_true / sigma)^2 = 0.0196 at the right scale: it
    leaves [0.905, 1.1] with probability < 1e-6 (4.8 and 5.1 sd).  At 0.9 sigma m is about 0.81 with
    sd 0.016 (below 0.905 except with probability 2e-9); at 1.1 sigma about 1.21 with sd 0.024 (above
    1.1 except with probability 3e-6); the simulator's continuous sigma (1 / 1.13 of the secret one
    here) gives about 0.78.  The mean of z is within 5 standard errors of 0 (fails with p < 6e-7)."""
    from fedbandits.federation.spec import make_spec
    from fedbandits.privacy.tree import lowest_set_bit

    d = 10
    cfg = config_from_dict(
        {
            "experiment": {"seed": 1, "horizon": 800},
            "environment": {"name": "gaussian-sphere", "agents": 2, "arms": 5, "dim": d},
            "algorithms": [LDP],
        }
    )
    secret = make_spec(cfg).secret_noise()
    assert secret is not None and secret.scale > 1.05 and secret.epsilon_spent <= 1.0
    n_tri = d * (d + 1) // 2
    sigma = np.concatenate([np.full(n_tri, secret.sigma_cov), np.full(d, secret.sigma_bias)])
    exact_release, seeded = dg.discrete_gaussian_release, random.Random(516).randrange
    monkeypatch.setattr(
        dg, "discrete_gaussian_release", lambda v, s, g, drawn=(): exact_release(v, s, g, seeded, drawn)
    )
    agent = Agent.from_config(cfg)
    assert agent.setup.releases == 80
    rng = np.random.default_rng(21)
    gammas, z = [], []
    for k in range(1, 81):
        gamma = np.zeros(n_tri + d)
        for _ in range(3):
            x = rng.standard_normal((5, d))
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            decision = agent.choose(x)
            y = float(rng.uniform(-1, 1))
            agent.reward(decision.decision_id, y)
            chosen = x[decision.arm].astype(np.float32).astype(np.float64)
            norm = np.linalg.norm(chosen)
            chosen = chosen / norm if norm > 1 else chosen  # clipped to the feature bound 1, as the agent does
            gamma += pack(np.outer(chosen, chosen)[None, None], (chosen * y)[None, None])[0, 0]
        gammas.append(gamma)
        node = np.sum(gammas[k - (1 << lowest_set_bit(k)) :], axis=0)  # the tree node released at k
        payload = agent.sync_payload()
        assert np.array_equal(payload / secret.grid, np.rint(payload / secret.grid))  # on the grid
        z.append((payload - node) / sigma)
    z = np.concatenate(z)
    assert z.size == 5200
    m = float(np.mean(z**2))
    assert 0.905 < m < 1.1, m
    assert abs(z.mean()) < 5 / np.sqrt(z.size)


@pytest.mark.parametrize("algorithm", [LDP, DDP], ids=["ldp", "distributed-dp"])
def test_save_and_load_with_secret_noise_never_redraws_a_released_node(tmp_path, algorithm):
    """Saved mid-batch after 2 releases (ldp: the level-1 node holds releases 1-2 with its noise): the
    file holds no noise stream, the state round-trips bit for bit, and the loaded agent re-uses the
    released node's noise when the tree goes on (release 3 is a new level-0 node, drawn fresh: it
    differs from the never-saved agent's), while its own new nodes sit on the secret grid."""
    clock = FakeClock()
    agent = Agent.from_config(config(algorithm), expiry_seconds=30.0, clock=clock)
    rng = np.random.default_rng(8)
    for step in range(25):
        d = agent.choose(features(rng))
        if step % 4:
            agent.reward(d.decision_id, 0.25)
        if step in (9, 19):
            agent.apply_sync(agent.sync_payload())
    assert agent.status()["pending"] > 0 and agent.status()["batch_samples"] > 0  # mid-batch
    path = tmp_path / "secret.npz"
    agent.save(path)
    header, arrays = statefile.read(path)
    assert header["noise_source"] == "os" and header["noise"] is None and header["releases_made"] == 2
    loaded = Agent.load(path, clock=clock)
    assert type(loaded.randomizer) is type(agent.randomizer) and loaded.noise_source == "os"
    assert loaded.state_digest() == agent.state_digest() and loaded.status() == agent.status()
    loaded.save(tmp_path / "again.npz")
    assert statefile.digest(*statefile.read(tmp_path / "again.npz")) == statefile.digest(header, arrays)
    np.testing.assert_array_equal(loaded.randomizer.exact, agent.randomizer.exact)
    if algorithm is LDP:
        released = agent.randomizer.noisy[1, 0, 0].copy()  # node of releases 1-2, sent at release 2
        assert np.abs(released).max() > 0
        np.testing.assert_array_equal(loaded.randomizer.noisy[1, 0, 0], released)
    for twin in (agent, loaded):
        d = twin.choose(features(np.random.default_rng(9)))
        twin.reward(d.decision_id, 0.5)
    third = [twin.sync_payload() for twin in (agent, loaded)]
    assert not np.array_equal(*third)  # release 3: a new node, fresh secret noise in each
    np.testing.assert_array_equal(loaded.randomizer.exact, agent.randomizer.exact)  # same data
    if algorithm is LDP:
        np.testing.assert_array_equal(loaded.randomizer.noisy[1, 0, 0], released)  # never redrawn
        np.testing.assert_array_equal(loaded.randomizer.prefix()[0, 0], released + third[1])
        grid = loaded.setup.secret_noise().grid
        assert np.array_equal(third[1] / grid, np.rint(third[1] / grid))


def test_status_states_the_noise_source_and_the_secret_noise_report():
    """os: the sampler, its grid and sigmas and what it spends (the deployment's report, meeting the
    target); derived: says it is not secret; non-lazy: the guarantee is withdrawn as for the deployment."""
    from fedbandits.federation.spec import make_spec

    cfg = config(LDP)
    agent = Agent.from_config(cfg)
    report = make_spec(cfg).privacy_report()
    status = agent.status()
    assert status["epsilon_spent"] == 0.0
    for key in ("grid", "sigma_cov", "sigma_bias", "rho", "epsilon_spent", "scale"):
        assert status[f"secret_noise_{key}"] == report[f"secret_noise_{key}"], key
    assert status["noise_sampler"] == report["secret_noise_sampler"]
    assert status["guarantee"] == report["guarantee"] == "formal"
    agent.sync_payload()
    assert agent.status()["epsilon_spent"] == report["secret_noise_epsilon_spent"] <= 1.0
    derived = Agent.from_config(cfg, seed=1).status()
    assert derived["noise_source"] == "derived" and "not secret" in str(derived["noise_sampler"])
    assert "secret_noise_sigma_cov" not in derived
    masked = Agent.from_config(config(DDP)).status()
    assert masked["noise_source"] == "os" and "shares" in str(masked["noise_sampler"])
    eager_cfg = config({**LDP, "lazy": False})
    eager = Agent.from_config(eager_cfg).status()
    eager_report = make_spec(eager_cfg).privacy_report()
    assert eager["guarantee"] == eager_report["guarantee"] == "no formal guarantee"
    assert eager["guarantee_reason"] == eager_report["guarantee_reason"]


def test_a_skipped_release_absorbs_like_an_empty_batch_and_draws_no_noise():
    """A deployed silo that was down for releases 2 and 3 (``skip_release``): its tree holds exactly
    what a silo that released two empty batches holds (release 4's node is gamma_1 + gamma_4), no noise
    is drawn for the skipped releases, and their rounds count in the radius's n = M t as the
    simulator's clock counts them."""
    rng = np.random.default_rng(5)
    skipping, releasing = (Agent.from_config(config(LDP), seed=3) for _ in range(2))
    batches = [[features(rng) for _ in range(10)] for _ in range(2)]

    def play(agent, batch):
        for x in batch:
            agent.reward(agent.choose(x).decision_id, 0.5)

    for agent in (skipping, releasing):
        play(agent, batches[0])
        agent.sync_payload()
    stream = pickle.dumps(skipping.randomizer.silo_rngs[0][0])
    skipping.skip_release(10)
    skipping.skip_release(10)
    assert pickle.dumps(skipping.randomizer.silo_rngs[0][0]) == stream  # nothing drawn
    releasing.sync_payload()
    releasing.sync_payload()
    for agent in (skipping, releasing):
        play(agent, batches[1])
        agent.sync_payload()
    np.testing.assert_array_equal(skipping.randomizer.exact, releasing.randomizer.exact)
    assert skipping.counts["skipped_releases"] == 2 and skipping.counts["syncs"] == 4
    assert skipping._radius_samples() == 2 * 40  # M = 2 silos, 40 rounds: the skipped 20 counted
    with pytest.raises(AgentError, match="skip_release: this batch has decisions"):
        skipping.choose(features(rng))
        skipping.skip_release(10)


def test_a_decision_rewarded_at_once_leaves_no_deadline_behind():
    """The expiry queue keeps only what can expire: an agent whose rewards come at once (a deployed
    silo serving T users) holds no queue that grows with T."""
    agent = Agent.from_config(config(NONE), seed=0)
    rng = np.random.default_rng(1)
    for _ in range(50):
        agent.reward(agent.choose(features(rng)).decision_id, 0.1)
    assert len(agent._queue) <= 1
