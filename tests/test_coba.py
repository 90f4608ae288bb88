"""The coba adapter (fedbandits.integrations.coba): our agent runs tiny coba experiments as a coba learner.

Skipped without coba (the ``coba`` extra); CI installs it in a later step and runs this file.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

coba = pytest.importorskip("coba")

from coba.pipes import ListSource  # noqa: E402
from sklearn.datasets import load_iris  # noqa: E402

from fedbandits import Agent  # noqa: E402
from fedbandits.integrations.coba import ActionContextFeatures, CobaLearner, featurize  # noqa: E402


def linucb_config(dim: int, horizon: int, beta: float = 1.0) -> dict[str, object]:
    return {
        "experiment": {"name": "coba", "seed": 1, "runs": 1, "horizon": horizon},
        "environment": {"name": "gaussian-sphere", "agents": 1, "arms": 2, "dim": dim},
        "algorithms": [{"name": "linucb-independent", "radius": "constant", "beta": beta}],
    }


def iris_environment(take: int) -> coba.Environments:
    # a ListSource, not from_supervised(X, Y): coba wraps X, Y in a one-shot zip that its
    # experiment's peek at the environment would exhaust (the experiment then has no interactions)
    x, y = load_iris(return_X_y=True)
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    source = ListSource(list(zip(x.tolist(), y.tolist(), strict=True)))
    return coba.Environments.from_supervised(source, label_type="c").shuffle(3).take(take)


def interactions(environments: coba.Environments) -> list[dict]:
    (environment,) = list(environments)
    return list(environment.read())


def logged(result: object, column: str) -> list:
    """One column of a coba result's interactions, in order (to_dicts: coba alone, without pandas)."""
    return [row[column] for row in result.interactions.to_dicts()]  # type: ignore[attr-defined]


def test_importing_fedbandits_does_not_import_coba() -> None:
    code = "import sys, fedbandits; assert 'coba' not in sys.modules, 'fedbandits imported coba'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_features_of_dense_actions_are_phi_outer_one_and_context() -> None:
    context, actions = [2.0, -1.0], [(1.0, 0.5), (0.0, 3.0), (-2.0, 1.0)]
    rows = featurize(context, actions)
    assert rows.shape == (3, 2 * 3)
    for row, action in zip(rows, actions, strict=True):
        expected = np.outer(action, [1.0, 2.0, -1.0]).ravel()
        np.testing.assert_array_equal(row, expected)
    # no context: phi(a) itself
    np.testing.assert_array_equal(featurize(None, actions), np.asarray(actions))


def test_labels_are_one_hot_over_the_first_label_set() -> None:
    featurizer = ActionContextFeatures()
    rows = featurizer([0.5, 4.0], ["b", "a", "c"])
    assert rows.shape == (3, 3 * 3)
    np.testing.assert_array_equal(rows[1], [0, 0, 0, 1, 0.5, 4.0, 0, 0, 0])
    # a later call keeps the first call's order, whatever order coba lists the actions in
    np.testing.assert_array_equal(
        featurizer([1.0, 1.0], ["c", "b"]), [[0, 0, 0, 0, 0, 0, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0, 0, 0]]
    )
    with pytest.raises(ValueError, match=r"action 'z' is not one of the labels \['b', 'a', 'c'\]"):
        featurizer([1.0, 1.0], ["a", "z"])


def test_sparse_or_empty_input_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="context is sparse"):
        featurize({"x": 1.0}, [(1.0,), (2.0,)])
    with pytest.raises(ValueError, match="actions must hold at least one action, got 0"):
        featurize([1.0], [])


def test_coba_experiment_probabilities_and_choices_are_the_agents() -> None:
    """A tiny coba experiment on iris: every logged probability is 1 (LinUCB is deterministic),
    and the logged actions are exactly those a twin agent makes on the same features and rewards."""
    environments = iris_environment(take=60)
    stream = interactions(environments)
    dim = featurize(stream[0]["context"], stream[0]["actions"]).shape[1]
    assert dim == 3 * 5  # 3 classes x (1 + 4 features)
    config = linucb_config(dim, horizon=60, beta=0.3)
    learner = CobaLearner.from_config(config, params={"beta": 0.3})
    result = coba.Experiment(environments, [learner]).run(processes=1, quiet=True)
    probabilities = logged(result, "probability")
    assert len(probabilities) == 60
    assert all(p == 1.0 for p in probabilities)
    assert [row["family"] for row in result.learners.to_dicts()] == ["fedbandits"]

    twin = Agent.from_config(config)
    featurizer = ActionContextFeatures()
    chosen = []
    for interaction in stream:
        actions = interaction["actions"]
        decision = twin.choose(featurizer(interaction["context"], actions))
        chosen.append(actions[decision.arm])
        twin.reward(decision.decision_id, float(interaction["rewards"](actions[decision.arm])))
    assert logged(result, "action") == chosen
    # the twin's choices are not one constant action (else the comparison shows little)
    assert len(set(chosen)) == 3


def test_the_adapter_learns_on_iris_and_on_a_linear_synthetic_environment() -> None:
    """Deterministic given the seeds; the thresholds are far from chance.

    iris, 150 interactions: uniform random choices score 1/3 (sd sqrt(2/9/150) = 0.038 over 150);
    0.6 is 7 sd above (measured: 0.91).  Linear synthetic (coba's, rewards linear in a and xa,
    5 actions, seed 7, 1000 interactions): over the second half, the regret of the adapter relative
    to the regret of uniform random choices, sum(best - ours) / sum(best - mean over actions), is 1
    in expectation for a learner that ignores the features; we require < 0.5 (measured: 0.09).
    """
    environments = iris_environment(take=150)
    stream = interactions(environments)
    dim = featurize(stream[0]["context"], stream[0]["actions"]).shape[1]
    result = coba.Experiment(environments, [CobaLearner.from_config(linucb_config(dim, 150, 0.3))]).run(
        processes=1, quiet=True
    )
    assert np.mean(logged(result, "reward")) > 0.6

    synthetic = coba.Environments.from_linear_synthetic(
        1000, n_actions=5, n_context_features=5, n_action_features=5, seed=7
    )
    stream = interactions(synthetic)
    dim = featurize(stream[0]["context"], stream[0]["actions"]).shape[1]
    assert dim == 5 * 6
    result = coba.Experiment(synthetic, [CobaLearner.from_config(linucb_config(dim, 1000))]).run(
        processes=1, quiet=True
    )
    ours = np.array(logged(result, "reward"))[500:]
    rewards = np.array([[s["rewards"](a) for a in s["actions"]] for s in stream])[500:]
    best, uniform = rewards.max(axis=1), rewards.mean(axis=1)
    assert ((best - ours).sum() / (best - uniform).sum()) < 0.5


def test_learn_without_the_decision_id_is_refused() -> None:
    learner = CobaLearner(Agent.from_config(linucb_config(2, 10)))
    action, probability, info = learner.predict(None, [(1.0, 0.0), (0.0, 1.0)])
    assert probability == 1.0 and set(info) == {"decision_id"}
    with pytest.raises(ValueError, match="learn needs the decision_id"):
        learner.learn(None, action, 1.0, probability)
    learner.learn(None, action, 1.0, probability, **info)
    assert learner.agent.status()["rewarded"] == 1


def test_a_randomized_agent_logs_its_real_probabilities_in_coba() -> None:
    """With exploration "epsilon-greedy" (rate 0.3, 3 actions) coba logs each choice's real probability:
    0.1 for an exploring choice or 0.8 for the greedy one, and a seeded twin agent (the same choice
    stream) makes the same choices with the same probabilities."""
    environments = iris_environment(take=60)
    stream = interactions(environments)
    dim = featurize(stream[0]["context"], stream[0]["actions"]).shape[1]
    config = linucb_config(dim, horizon=60, beta=0.3)
    config["algorithms"][0].update({"exploration": "epsilon-greedy", "exploration_rate": 0.3})  # type: ignore[index]
    learner = CobaLearner.from_config(config, seed=5, params={"exploration": "epsilon-greedy"})
    result = coba.Experiment(environments, [learner]).run(processes=1, quiet=True)
    probabilities = logged(result, "probability")
    assert set(np.round(probabilities, 12)) == {0.1, 0.8}
    twin = Agent.from_config(config, seed=5)
    featurizer = ActionContextFeatures()
    seen = []
    for interaction in stream:
        actions = interaction["actions"]
        decision = twin.choose(featurizer(interaction["context"], actions))
        seen.append((actions[decision.arm], decision.propensity))
        twin.reward(decision.decision_id, float(interaction["rewards"](actions[decision.arm])))
    assert [(a, round(p, 12)) for a, p in seen] == list(
        zip(logged(result, "action"), np.round(probabilities, 12), strict=True)
    )
