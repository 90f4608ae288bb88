"""Parity of the online agent with the simulator (issue 30, item 2).

Fed the simulator's stream for each silo -- the same features, the same rewards, posted at once --
standalone agents make the choices of the simulator's ``linucb-independent`` agents, and M agents
plus an :class:`Aggregator` doing the server's part make the choices of the simulator's FedLinUCB
and adopt the same synced statistics, bit for bit, for ``none``, ``ldp`` and ``distributed-dp``
with derived (seeded) noise.  Nothing is compared with a tolerance: one flipped choice or one
different bit of a prefix fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedbandits import Agent, config_from_dict
from fedbandits.core.ridge import RidgeState, rank_one_update
from fedbandits.core.ucb import UCBScorer, projection, score_one
from fedbandits.online import Aggregator
from fedbandits.privacy.mechanisms import pack
from fedbandits.registry import ALGORITHMS, ENVIRONMENTS, PolicyContext
from fedbandits.sim.seeding import choice_rngs, env_rngs, noise_rngs

AGENTS, ARMS, DIM, HORIZON = 3, 6, 4, 48


def _config(algorithm: dict, seed: int = 7, noise_seed: int = 11, horizon: int = HORIZON, users: int = 0):
    return config_from_dict(
        {
            "experiment": {"seed": seed, "noise_seed": noise_seed, "horizon": horizon},
            "environment": {
                "name": "gaussian-sphere",
                "agents": AGENTS,
                "arms": ARMS,
                "dim": DIM,
                "returning_users": users,
            },
            "algorithms": [algorithm],
        }
    )


def simulate(config):
    """The simulator's run 0, as :func:`fedbandits.federation.parity.reference_run` plays it; keeps
    every round (copied: environments reuse their buffers), the actions and the synced prefixes."""
    env_cfg, alg = config.environment, config.algorithms[0]
    env = ENVIRONMENTS[env_cfg.name].factory(env_cfg.params, env_rngs(config.experiment.seed, [0]))
    rngs = noise_rngs(config.experiment.noise_seed, [0], config.noise_stream(0))
    choices = choice_rngs(config.experiment.noise_seed, [0], config.noise_stream(0))
    ctx = PolicyContext(
        1, env.n_agents, env.n_arms, env.dim, config.experiment.horizon, rngs, env=env, choice_rngs=choices
    )
    policy = ALGORITHMS[alg.name].factory(alg.params, ctx)
    rounds, actions, prefixes = [], [], []
    batch = getattr(alg.params, "batch", None)
    for t in range(config.experiment.horizon):
        rnd = env.next_round()
        users = None if rnd.users is None else rnd.users.copy()
        rounds.append((rnd.features.copy(), rnd.means.copy(), rnd.noise.copy(), users))
        actions.append(policy.step(rnd, env)[0].copy())
        if batch and (t + 1) % batch == 0:
            prefixes.append(pack(policy.synced_cov, policy.synced_bias)[0])
    return env, policy, rounds, np.array(actions), prefixes


def play_agents(config, env, rounds, agents, aggregator=None, reload_at=None, folder=None):
    """Every silo's agent on its column of the simulator's rounds; rewards posted at once; every B
    rounds the driver collects the payloads, aggregates them and hands the prefix back.  At round
    ``reload_at`` every agent is saved to ``folder`` and replaced by the agent loaded back."""
    batch = getattr(config.algorithms[0].params, "batch", None)
    actions, prefixes = [], []
    for t, (features, means, noise, users) in enumerate(rounds):
        if t == reload_at:
            for i, agent in enumerate(agents):
                agent.save(folder / f"silo-{i}.npz")
                agents[i] = Agent.load(folder / f"silo-{i}.npz")
        row = []
        for i, agent in enumerate(agents):
            decision = agent.choose(features[0, i], user_id=None if users is None else int(users[0, i]))
            a = decision.arm
            y = env.rewards(means[:, i : i + 1, a], noise[:, i : i + 1])  # the simulator's reward, same dtypes
            agent.reward(decision.decision_id, float(y[0, 0]))
            row.append(a)
        actions.append(row)
        if aggregator is not None and (t + 1) % batch == 0:
            prefix = aggregator.aggregate([agent.sync_payload() for agent in agents])
            for agent in agents:
                agent.apply_sync(prefix)
            prefixes.append(prefix)
    return np.array(actions), prefixes


def test_standalone_agents_choose_as_the_simulators_independent_linucb():
    config = _config({"name": "linucb-independent"})
    env, policy, rounds, sim_actions, _ = simulate(config)
    agents = [Agent.from_config(config, silo=i) for i in range(AGENTS)]
    actions, _ = play_agents(config, env, rounds, agents)
    np.testing.assert_array_equal(actions, sim_actions)
    assert len(set(sim_actions.ravel().tolist())) > 1  # not a degenerate stream: the choices vary
    for i, agent in enumerate(agents):  # and the learned state is the simulator's, bit for bit
        np.testing.assert_array_equal(agent.state.gram[0], policy.state.gram[0, i])
        np.testing.assert_array_equal(agent.state.inv[0], policy.state.inv[0, i])
        np.testing.assert_array_equal(agent.state.bias[0], policy.state.bias[0, i])


DDP = {"name": "fedlinucb", "batch": 4, "protocol": "distributed-dp", "epsilon": 1.0, "delta": 1e-3}
DDP["feature_bound"] = 0.9  # < 1 = ||x||: every feature is clipped, so the clipping path is compared too
LDP = {"name": "fedlinucb", "batch": 4, "protocol": "ldp", "epsilon": 1.0, "delta": 1e-3, "feature_bound": 0.9}
FEDERATED = [
    pytest.param({"name": "fedlinucb", "batch": 4, "protocol": "none"}, id="none"),
    pytest.param({"name": "fedlinucb", "batch": 4, "protocol": "none", "lazy": True}, id="none-lazy"),
    # feature_bound < 1 = ||x||: every feature is clipped, so the clipping path is compared too
    pytest.param(LDP, id="ldp"),
    pytest.param(DDP, id="ddp"),
    # rewards centred (reward_offset) and clipped to [c - B, c + B] = [0, 1]: the agent centres as the simulator does
    pytest.param({**DDP, "reward_offset": 0.5, "reward_bound": 0.5}, id="ddp-centred"),
    # the streaming banded release (issue #49), a band of 3 of the run's 12 releases: the decoders'
    # recursion runs past the band
    pytest.param({**LDP, "mechanism": "banded", "band": 3}, id="ldp-banded"),
    pytest.param({**DDP, "mechanism": "banded", "band": 3}, id="ddp-banded"),
]


@pytest.mark.parametrize("algorithm", FEDERATED)
def test_federated_agents_reproduce_the_simulators_fedlinucb(algorithm):
    config = _config(algorithm)
    env, policy, rounds, sim_actions, sim_prefixes = simulate(config)
    seed = config.experiment.noise_seed
    agents = [Agent.from_config(config, silo=i, seed=seed, clip_rewards=True) for i in range(AGENTS)]
    actions, prefixes = play_agents(config, env, rounds, agents, Aggregator.from_config(config))
    np.testing.assert_array_equal(actions, sim_actions)
    assert len(prefixes) == len(sim_prefixes) == HORIZON // 4
    for k, (ours, theirs) in enumerate(zip(prefixes, sim_prefixes, strict=True)):
        np.testing.assert_array_equal(ours, theirs, err_msg=f"synced prefix {k + 1}")
    for i, agent in enumerate(agents):
        np.testing.assert_array_equal(pack(agent.synced_cov, agent.synced_bias)[0], sim_prefixes[-1])
        np.testing.assert_array_equal(agent.state.inv[0], policy.state.inv[0, i])
    if policy.private:
        report = policy.report()
        status = [agent.status() for agent in agents]
        assert sum(s["clipped_features"] for s in status) == report["clipped_features"] > 0
        assert sum(s["clipped_rewards"] for s in status) == report["clipped_rewards"]
        assert sum(s["observations"] for s in status) == report["observations"] == AGENTS * HORIZON
        assert sum(s["psd_repairs"] for s in status) == report["psd_repairs"] * AGENTS


USER_LEVEL = [
    pytest.param({**FEDERATED[2].values[0], "privacy_unit": "user", "max_contributions": 3}, id="ldp-user"),
    pytest.param({**FEDERATED[3].values[0], "privacy_unit": "user", "max_contributions": 3}, id="ddp-user"),
    pytest.param({**FEDERATED[6].values[0], "privacy_unit": "user", "max_contributions": 3}, id="ddp-banded-user"),
    # Lemma C.4's radius grows with n = M t, the dropped rounds included: the agents must count them too
    pytest.param(
        {**FEDERATED[2].values[0], "privacy_unit": "user", "max_contributions": 3, "radius": "theory"},
        id="ldp-user-theory-radius",
    ),
    pytest.param(
        {**FEDERATED[2].values[0], "privacy_unit": "user", "max_contributions": 3, "lazy": False, "radius": "theory"},
        id="ldp-user-eager-theory-radius",
    ),
]


@pytest.mark.parametrize("algorithm", USER_LEVEL)
def test_user_level_agents_drop_what_the_simulator_drops(algorithm, tmp_path):
    """5 returning users per silo over 48 rounds, at most 3 contributions each: the agents, told each
    decision's user, keep and drop exactly the contributions the simulator does (its prefixes, bit for
    bit, through a save and load at round 18), and count the same drops."""
    config = _config(algorithm, users=5)
    env, policy, rounds, sim_actions, sim_prefixes = simulate(config)
    agents = [Agent.from_config(config, silo=i, seed=11, clip_rewards=True) for i in range(AGENTS)]
    actions, prefixes = play_agents(
        config, env, rounds, agents, Aggregator.from_config(config), reload_at=18, folder=tmp_path
    )
    np.testing.assert_array_equal(actions, sim_actions)
    for ours, theirs in zip(prefixes, sim_prefixes, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    dropped = policy.report()["dropped_contributions"]
    assert dropped == sum(a.status()["dropped_contributions"] for a in agents) == AGENTS * (HORIZON - 5 * 3)
    # the radius's n: M t for the simulator, the dropped rounds included (the agents count them too)
    assert all(a._radius_samples() == policy.radius_samples() for a in agents)
    assert all(a.status()["privacy_unit"].startswith("user, up to 3") for a in agents)


RANDOMIZED = [
    pytest.param({"exploration": "epsilon-greedy", "exploration_rate": 0.3}, id="epsilon-greedy"),
    pytest.param({"exploration": "softmax", "temperature": 0.2}, id="softmax"),
    pytest.param({"exploration": "thompson", "posterior_scale": 0.5, "propensity_samples": 50}, id="thompson"),
]


@pytest.mark.parametrize("exploration", RANDOMIZED)
@pytest.mark.parametrize("algorithm", [{"name": "linucb-independent"}, FEDERATED[2].values[0]], ids=["alone", "ldp"])
def test_randomized_agents_choose_as_the_simulator_and_state_its_propensity(algorithm, exploration, tmp_path):
    """Seeded agents draw their choices from the simulator's choice stream (silo i the i-th of each
    round's M draws): the same random choices and prefixes, through a save and load at round 20; and
    the choices are not UCB's (the same config with exploration 'ucb' chooses otherwise)."""
    config = _config({**algorithm, **exploration})
    env, _, rounds, sim_actions, sim_prefixes = simulate(config)
    seed = config.experiment.noise_seed
    agents = [Agent.from_config(config, silo=i, seed=seed, clip_rewards=True) for i in range(AGENTS)]
    aggregator = Aggregator.from_config(config) if algorithm["name"] == "fedlinucb" else None
    actions, prefixes = play_agents(config, env, rounds, agents, aggregator, reload_at=20, folder=tmp_path)
    np.testing.assert_array_equal(actions, sim_actions)
    for ours, theirs in zip(prefixes, sim_prefixes, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    assert not np.array_equal(sim_actions, simulate(_config(algorithm))[3])


def test_a_different_noise_seed_breaks_parity():
    """The parity above is not vacuous: another seed's noise gives other prefixes."""
    config = _config(FEDERATED[2].values[0])
    env, _, rounds, _, sim_prefixes = simulate(config)
    agents = [Agent.from_config(config, silo=i, seed=12, clip_rewards=True) for i in range(AGENTS)]
    _, prefixes = play_agents(config, env, rounds, agents, Aggregator.from_config(config))
    assert not np.array_equal(prefixes[0], sim_prefixes[0])


def test_one_learner_scoring_and_update_are_the_batched_arithmetic_bit_for_bit():
    """The agent's fast paths (no batch axis) against the simulator's batched pieces, on random states:
    every score and every entry of V, V^-1 and u equal exactly."""
    rng = np.random.default_rng(0)
    d = 10
    state = RidgeState((1, 1), d, 0.7)
    gram, inv, bias = state.gram[0, 0].copy(), state.inv[0, 0].copy(), state.bias[0, 0].copy()
    for step in range(300):
        x = rng.standard_normal(d) / 3
        y = float(rng.standard_normal())
        state._update_unchecked(x[None, None], np.array([[y]]))
        rank_one_update(gram, inv, bias, x, y)
        if step % 30 == 0:
            k = int(rng.integers(1, 120))
            feats = rng.standard_normal((k, d)).astype(np.float32)
            theta = state.theta()
            beta = float(rng.uniform(0.1, 3))
            batched = UCBScorer(1, k, d).scores(feats[None], state.inv[0], theta[0], beta)[0]
            np.testing.assert_array_equal(score_one(feats, projection(inv, theta[0, 0]), beta), batched)
    np.testing.assert_array_equal(gram, state.gram[0, 0])
    np.testing.assert_array_equal(inv, state.inv[0, 0])
    np.testing.assert_array_equal(bias, state.bias[0, 0])


@pytest.mark.parametrize("algorithm", [FEDERATED[2], FEDERATED[3], FEDERATED[5], FEDERATED[6]])
def test_parity_survives_a_save_and_load_mid_batch(algorithm, tmp_path):
    """Every silo saved and loaded at round 18 (mid-batch, after 4 releases): the loaded agents
    continue their noise streams where they stopped, so the run stays the simulator's bit for bit."""
    config = _config(algorithm)
    env, _, rounds, sim_actions, sim_prefixes = simulate(config)
    agents = [Agent.from_config(config, silo=i, seed=11, clip_rewards=True) for i in range(AGENTS)]
    aggregator = Aggregator.from_config(config)
    actions, prefixes = play_agents(config, env, rounds, agents, aggregator, reload_at=18, folder=tmp_path)
    np.testing.assert_array_equal(actions, sim_actions)
    for ours, theirs in zip(prefixes, sim_prefixes, strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_the_aggregator_refuses_a_wrong_round():
    config = _config(FEDERATED[2].values[0])
    aggregator = Aggregator.from_config(config)
    width = DIM * (DIM + 1) // 2 + DIM
    with pytest.raises(ValueError, match=r"payloads must hold one release per silo \(3\), got 2"):
        aggregator.aggregate([np.zeros(width)] * 2)
    with pytest.raises(ValueError, match="payloads must be 3 finite vectors of 14"):
        aggregator.aggregate([np.zeros(width), np.zeros(width), np.full(width, np.nan)])
    assert aggregator.rounds == 0
    ddp = Aggregator.from_config(_config(FEDERATED[3].values[0]))
    with pytest.raises(ValueError, match="uint64 residue vectors"):
        ddp.aggregate([np.zeros(width)] * 3)
    with pytest.raises(ValueError, match="does not synchronise"):
        Aggregator.from_config(_config({"name": "linucb-independent"}))


@pytest.mark.parametrize("renew", [False, True])
def test_the_rounds_ledger_numbers_closes_and_renews_as_the_budget_says(renew):
    """K = T // B = 48 // 4 = 12 releases per budget epoch.  ``stop``: after the 12th round nothing
    closes again; ``renew``: round 12 opens epoch 1 on a fresh tree, whose prefixes add to epoch 0's
    last one (so epoch 1's first prefix is epoch 0's final prefix plus the new tree's first node)."""
    from fedbandits.online import AgentSetup
    from fedbandits.online.rounds import Rounds

    setup = AgentSetup.from_config(_config(FEDERATED[2].values[0]))
    assert setup.releases == 12
    ledger, fresh = Rounds(setup, renew=renew), Aggregator(setup)
    rng = np.random.default_rng(5)
    rows = [rng.standard_normal((AGENTS, setup.width)) for _ in range(13)]
    for k in range(12):
        assert (ledger.epoch, ledger.round, ledger.closed) == (0, k, k)
        prefix = ledger.close(list(rows[k]))
    np.testing.assert_array_equal(ledger.prefix, prefix)
    if not renew:
        assert ledger.finished and (ledger.epoch, ledger.round) == (0, 12)
        with pytest.raises(ValueError, match="the noise covers 12 releases, all synced"):
            ledger.close(list(rows[12]))
        assert ledger.closed == 12
        return
    assert not ledger.finished and (ledger.epoch, ledger.round, ledger.closed) == (1, 0, 12)
    np.testing.assert_array_equal(ledger.base, prefix)
    np.testing.assert_array_equal(ledger.close(list(rows[12])), prefix + fresh.aggregate(list(rows[12])))


def test_a_shuffled_batch_closes_as_its_rows_with_zeros_for_the_messages_it_lacks():
    """The shuffler's batch holds n <= M rows in its own order: both coordinators close it through
    ``Rounds.close_batch``, which adds exactly what M payloads with zero rows for the missing add."""
    from fedbandits.online import AgentSetup
    from fedbandits.online.rounds import Rounds

    setup = AgentSetup.from_config(_config(FEDERATED[2].values[0]))
    batched, padded = Rounds(setup), Rounds(setup)
    rng = np.random.default_rng(8)
    for n in (3, 2, 0):
        batch = rng.standard_normal((n, setup.width))
        rows = list(np.concatenate([batch, np.zeros((AGENTS - n, setup.width))]))
        np.testing.assert_array_equal(batched.close_batch(batch), padded.close(rows))
    for bad in (np.zeros((AGENTS + 1, setup.width)), np.full((1, setup.width), np.inf), np.zeros((1, 3))):
        with pytest.raises(ValueError, match=f"a shuffled batch is at most {AGENTS} finite rows of {setup.width}"):
            batched.close_batch(bad)
    assert batched.closed == 3
