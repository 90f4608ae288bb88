"""``reward_offset`` (LinUCBParams): every LinUCB-type learner fits y - c, centred before any clipping.

A learner with offset c fed rewards y must choose exactly as the same learner with offset 0 fed y - c
(same seeds, same noise), and differently from one fed y itself: the offset is applied once, at the
one place rewards enter, in every algorithm that takes the parameter.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedbandits import Agent, config_from_dict
from fedbandits.online import AgentError
from fedbandits.registry import ALGORITHMS, PolicyContext
from fedbandits.sim.results import Results
from fedbandits.sim.runner import run_experiment
from fedbandits.sim.seeding import noise_rngs

AGENTS, ARMS, DIM, ROUNDS, OFFSET = 3, 8, 4, 60, 0.7

PRIVATE = {"epsilon": 1.0, "delta": 1e-3}
LEARNERS = [
    pytest.param({"name": "linucb-independent"}, id="independent"),
    pytest.param({"name": "linucb-super"}, id="super"),
    pytest.param({"name": "fedlinucb", "batch": 5}, id="fedlinucb"),
    pytest.param({"name": "fedlinucb", "batch": 5, "protocol": "distributed-dp", **PRIVATE}, id="fedlinucb-ddp"),
    pytest.param({"name": "fedlinucb", "batch": 5, "protocol": "ldp", **PRIVATE}, id="fedlinucb-ldp"),
    pytest.param({"name": "feducb"}, id="feducb"),
    pytest.param({"name": "feducb", "private": True, **PRIVATE}, id="feducb-private"),
    pytest.param({"name": "feducb-decentralized"}, id="feducb-decentralized"),
    pytest.param({"name": "fedlinucb-async"}, id="async"),
]


def _config(algorithm: dict):
    return config_from_dict(
        {
            "experiment": {"seed": 3, "noise_seed": 5, "horizon": ROUNDS},
            "environment": {"name": "gaussian-sphere", "agents": AGENTS, "arms": ARMS, "dim": DIM},
            "algorithms": [algorithm],
        }
    )


def _policy(algorithm: dict, offset: float):
    config = _config({**algorithm, "reward_offset": offset})
    alg = config.algorithms[0]
    rngs = noise_rngs(config.experiment.noise_seed, [0], config.noise_stream(0))
    ctx = PolicyContext(1, AGENTS, ARMS, DIM, ROUNDS, rngs)
    return ALGORITHMS[alg.name].factory(alg.params, ctx)


def _play(policies, shifts):
    """Every policy on the same feature stream; policy i is fed y - shifts[i] for the rewards y of the
    arm the *first* policy chose (so the streams stay comparable); returns each policy's choices."""
    rng = np.random.default_rng(0)
    theta = rng.normal(size=DIM)
    chosen = [[] for _ in policies]
    for _ in range(ROUNDS):
        features = rng.normal(size=(1, AGENTS, ARMS, DIM)).astype(np.float32)
        features /= np.linalg.norm(features, axis=-1, keepdims=True)
        for i, policy in enumerate(policies):
            chosen[i].append(policy.select(features)[0].copy())
        a = chosen[0][-1]
        x = features[0, np.arange(AGENTS), a].astype(np.float64)[None]  # (1, M, d)
        y = x @ theta + 1.5 + rng.normal(scale=0.1, size=(1, AGENTS))  # rewards far from 0
        for policy, shift in zip(policies, shifts, strict=True):
            policy.observe(x, y - shift)
            policy.end_round()
    return [np.array(c) for c in chosen]


@pytest.mark.parametrize("algorithm", LEARNERS)
def test_an_offset_learner_is_the_plain_learner_on_shifted_rewards(algorithm):
    centred, shifted, plain = _policy(algorithm, OFFSET), _policy(algorithm, 0.0), _policy(algorithm, 0.0)
    ours, theirs, uncentred = _play([centred, shifted, plain], [0.0, OFFSET, 0.0])
    np.testing.assert_array_equal(ours, theirs)
    # the offset matters: fed y itself, the same learner chooses differently at least once
    assert (ours != uncentred).any()


def test_a_private_learner_clips_the_centred_reward():
    """c = 0.5, B = 0.5 keeps rewards in [0, 1]: 1.2 is clipped to 0.5 (= 1 - c), 0.9 enters as 0.4
    and -0.2 as -0.5; with c = 0 and the same B, 0.9 would be clipped too."""
    algorithm = {"name": "fedlinucb", "batch": 50, "protocol": "distributed-dp", **PRIVATE, "reward_bound": 0.5}
    policy = _policy(algorithm, 0.5)
    x = np.zeros((1, AGENTS, DIM))
    x[..., 0] = 1.0
    policy.observe(x, np.array([[1.2, 0.9, -0.2]]))
    np.testing.assert_allclose(policy.local_bias[0, :, 0], [0.5, 0.4, -0.5])
    assert policy.clipped_rewards == 2
    uncentred = _policy(algorithm, 0.0)
    uncentred.observe(x, np.array([[1.2, 0.9, -0.2]]))
    assert uncentred.clipped_rewards == 2 and uncentred.local_bias[0, 1, 0] == 0.5


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "0.5", True])
def test_a_bad_offset_is_one_line_naming_it(bad):
    with pytest.raises(ValueError, match="reward_offset must be a finite number") as info:
        _policy({"name": "fedlinucb"}, bad)
    assert "\n" not in str(info.value)


def _agent_config(offset: float):
    algorithm = {"name": "fedlinucb", "batch": 4, "protocol": "distributed-dp", **PRIVATE, "reward_bound": 0.5}
    return _config({**algorithm, "reward_offset": offset})


def test_the_online_agent_checks_rewards_against_the_centred_range():
    agent = Agent.from_config(_agent_config(0.5), silo=0, seed=1)
    features = np.eye(DIM, dtype=np.float32)
    decision = agent.choose(features)
    with pytest.raises(AgentError, match=r"must be in \[0, 1\] \(the config's reward_offset \+- reward_bound\)"):
        agent.reward(decision.decision_id, 1.2)
    assert agent.status()["rewarded"] == 0  # refused: nothing changed
    agent.reward(decision.decision_id, 0.9)
    np.testing.assert_allclose(agent.completed[0][1], [0.4])  # learned as y - c
    plain = Agent.from_config(_agent_config(0.0), silo=0, seed=1)
    with pytest.raises(AgentError, match=r"must be in \[-0.5, 0.5\] \(the config's reward_bound\)"):
        plain.reward(plain.choose(features).decision_id, 0.9)


def test_the_online_agent_reports_scores_on_the_rewards_scale():
    features = np.eye(DIM, dtype=np.float32)
    centred = Agent.from_config(_agent_config(0.5), silo=0, seed=1).choose(features)
    plain = Agent.from_config(_agent_config(0.0), silo=0, seed=1).choose(features)
    assert centred.arm == plain.arm
    np.testing.assert_allclose(centred.scores, plain.scores + 0.5, rtol=1e-6)


def test_the_clipping_warning_names_the_offset():
    config = config_from_dict(
        {
            "experiment": {"seed": 3, "horizon": 40},
            "environment": {"name": "gaussian-sphere", "agents": 2, "arms": 5, "dim": 4},
            "algorithms": [
                {"name": "fedlinucb", "protocol": "ldp", **PRIVATE, "reward_bound": 0.05, "reward_offset": 0.5}
            ],
        }
    )
    results: Results = run_experiment(config)
    (line,) = results.clipping_warnings()
    assert "(reward_bound = 0.05, after reward_offset = 0.5)" in line
