"""fedbandits' online LinUCB agent beside coba's own learners, in one coba experiment.

Needs the ``coba`` extra (and vowpalwabbit for coba's VW learners, skipped without it)::

    pip install -e '.[coba,data]'       # data: scikit-learn; '.[bakeoff,data]' for coba's VW learners too
    python examples/coba_example.py     # a few seconds; prints each learner's average reward

Two coba environments, no network: ``Environments.from_supervised`` on scikit-learn's bundled wine
data (178 examples, 3 classes, 13 features, standardised; a shuffled order, reward 1 for the right
class), and ``Environments.from_linear_synthetic`` (5 actions with 5 features each, a 5-feature
context, rewards linear in the action and action x context features).

Our agent enters coba through :class:`fedbandits.integrations.coba.CobaLearner`: coba's
``predict(context, actions)`` becomes ``agent.choose(features)`` with
``features[k] = phi(action k) outer [1, context]`` (one-hot phi for class labels: the disjoint
model with one ridge per class; an action's own features when it has them), and coba's ``learn``
becomes ``agent.reward(decision_id, reward)``.  The agent is built from an ordinary fedbandits
config; only its ``dim`` must equal the adapter's feature count, read off the first interaction.

coba's learners use their own defaults except alpha = 0.3 for LinUCB in both (the same radius, so
the two LinUCBs differ only in features: coba's default ``[1, "a", "ax"]`` treats a class label
as a number); no tuning happened here.  For a tuned comparison on common streams, with Vowpal
Wabbit and MABWiser too, see ``benchmarks/bakeoff.py`` and docs/bakeoff.md.
"""

from __future__ import annotations

import importlib.util

import coba
import numpy as np
from coba.pipes import ListSource
from sklearn.datasets import load_wine

from fedbandits.integrations.coba import CobaLearner, featurize


def wine() -> coba.Environments:
    x, y = load_wine(return_X_y=True)
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    # a ListSource rather than from_supervised(X, Y): coba 8.1 wraps X, Y in a one-shot iterator
    # that the experiment's first look at the environment exhausts
    source = ListSource(list(zip(x.tolist(), y.tolist(), strict=True)))
    return coba.Environments.from_supervised(source, label_type="c").shuffle(1)


def linear() -> coba.Environments:
    return coba.Environments.from_linear_synthetic(2000, n_actions=5, n_context_features=5, n_action_features=5, seed=1)


def our_learner(environments: coba.Environments, beta: float = 0.3) -> CobaLearner:
    """A standalone LinUCB agent whose dimension is the adapter's feature count on this environment."""
    (environment,) = list(environments)
    first = next(iter(environment.read()))
    dim = featurize(first["context"], first["actions"]).shape[1]
    horizon = sum(1 for _ in environment.read())
    config = {
        "experiment": {"name": "coba-example", "seed": 1, "runs": 1, "horizon": horizon},
        # an agent's config states the feature dimension (and M) in its environment section
        "environment": {"name": "gaussian-sphere", "agents": 1, "arms": 2, "dim": dim},
        "algorithms": [{"name": "linucb-independent", "radius": "constant", "beta": beta}],
    }
    return CobaLearner.from_config(config, params={"beta": beta, "dim": dim})


def coba_learners() -> list[coba.Learner]:
    """Fresh ones for every experiment: a learner's state outlives the experiment it ran in."""
    learners: list[coba.Learner] = [
        coba.LinUCBLearner(alpha=0.3),
        coba.BanditEpsilonLearner(epsilon=0.1),
        coba.RandomLearner(),
    ]
    if importlib.util.find_spec("vowpalwabbit") is not None:
        learners += [coba.VowpalEpsilonLearner(), coba.VowpalSquarecbLearner()]
    return learners


def main() -> None:
    names = ["fedbandits LinUCB (beta 0.3)", *[type(learner).__name__ for learner in coba_learners()]]
    for title, environments in (("wine (from_supervised)", wine()), ("linear synthetic", linear())):
        # one experiment per environment, since our agent's dimension depends on the environment
        learners = [our_learner(environments), *coba_learners()]
        result = coba.Experiment(environments, learners).run(processes=1, quiet=True)
        rows = list(result.interactions.to_dicts())  # or .to_pandas() with pandas installed
        print(f"\n{title}: average reward over {sum(r['learner_id'] == 0 for r in rows)} interactions")
        for learner_id, name in enumerate(names):
            mean = np.mean([r["reward"] for r in rows if r["learner_id"] == learner_id])
            print(f"  {name:<30} {mean:.3f}")
        # deterministic choices, stated as such
        assert all(r["probability"] == 1.0 for r in rows if r["learner_id"] == 0)
        # coba's own plots work too, e.g. result.plot_learners() (needs matplotlib)


if __name__ == "__main__":
    main()
