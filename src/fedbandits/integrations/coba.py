"""Our online agent as a `coba <https://github.com/coba-team/coba>`_ learner (the ``coba`` extra).

coba 8.1 drives a learner through two calls (``coba.primitives.Learner``):
``predict(context, actions)`` returns the action to take, the probability with which it was
taken and a dict that coba hands back to ``learn(context, action, reward, probability, **kwargs)``.
:class:`CobaLearner` answers ``predict`` with :meth:`Agent.choose` and ``learn`` with
:meth:`Agent.reward`, the decision id riding in that dict, so rewards may come late or out of
order exactly as they may for the agent itself.

Probabilities, honestly: ``predict`` returns the probability with which the agent chose the action
(:attr:`fedbandits.online.Decision.propensity`).  LinUCB's default choice (``exploration = "ucb"``)
is deterministic given its state (the highest upper confidence bound, ties to the lowest index): 1.
With ``exploration`` "epsilon-greedy" or "softmax" it is exact; with "thompson" and more than two
actions, a Monte Carlo estimate (its standard error at most 0.5 / sqrt(propensity_samples)).  Only a
randomized learner gives off-policy estimators that divide by it (IPS) something to reweight.
coba's optional ``score`` (the propensity of an arbitrary action) is not implemented: answering it
would mean a ``choose``, which records a decision that then expires.

Featurization (:func:`featurize`): coba passes a context (None, a number, a dense sequence; a
sparse dict is refused) and a list of actions, each either a dense sequence of numbers (action
features, as in ``Environments.from_linear_synthetic``) or a label (a class of
``Environments.from_supervised``).  The adapter maps them to the agent's ``(K, d)`` features as

    row(a) = vec(phi(a) outer [1, x])

with phi(a) the action's own features, or for labels a one-hot vector over the label set of the
first ``predict``.  We chose this form because it is the linear model of both kinds of coba
environment: for dense actions phi(a) outer [1, x] holds phi(a) and phi(a) x, the
``["a", "xa"]`` reward features of coba's linear synthetic environments; for labels it is the
disjoint model of Li et al. (2010) (one ridge regression per class, with an intercept), which is
what per-class rewards of a classification task need.  d = len(phi) * (1 + len(x)); pass
``dim`` to the agent's config accordingly, or your own ``featurizer``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

try:
    import coba
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError("fedbandits.integrations.coba needs coba: pip install 'fedbandits[coba]'") from error

from fedbandits.online import Agent

Featurizer = Callable[[Any, Sequence[Any]], np.ndarray]


def _dense(value: Any, what: str) -> np.ndarray:
    if value is None:
        return np.zeros(0)
    if isinstance(value, Mapping):
        raise ValueError(f"{what} is sparse (a dict); the coba adapter takes dense features only")
    if isinstance(value, int | float | np.number) and not isinstance(value, bool):
        return np.array([float(value)])
    return np.asarray(value, dtype=np.float64).ravel()


class ActionContextFeatures:
    """The default featurizer: ``row(a) = vec(phi(a) outer [1, x])`` (see the module docstring).

    Labels (non-sequence actions) are one-hot encoded over the label set seen at the first call,
    kept for the learner's life: a later unknown label is an error, since it would change d.
    """

    def __init__(self) -> None:
        self.labels: list[Any] | None = None

    def __call__(self, context: Any, actions: Sequence[Any]) -> np.ndarray:
        if not actions:
            raise ValueError("actions must hold at least one action, got 0")
        x = np.concatenate(([1.0], _dense(context, "context")))
        if all(isinstance(a, Sequence) and not isinstance(a, str) for a in actions):
            phi = np.stack([_dense(a, "action") for a in actions])
        else:
            if self.labels is None:
                self.labels = list(actions)
            index = {label: i for i, label in enumerate(self.labels)}
            unknown = [a for a in actions if a not in index]
            if unknown:
                raise ValueError(f"action {unknown[0]!r} is not one of the labels {self.labels} seen at the first call")
            phi = np.zeros((len(actions), len(self.labels)))
            phi[np.arange(len(actions)), [index[a] for a in actions]] = 1.0
        return (phi[:, :, None] * x[None, None, :]).reshape(len(actions), -1)


def featurize(context: Any, actions: Sequence[Any]) -> np.ndarray:
    """``(K, d)`` features of one coba interaction with a fresh :class:`ActionContextFeatures`."""
    return ActionContextFeatures()(context, actions)


class CobaLearner(coba.Learner):
    """A fedbandits :class:`~fedbandits.online.agent.Agent` behind coba's ``Learner`` interface.

    ``CobaLearner(agent)`` wraps an agent you built; :meth:`from_config` builds one from the
    same config ``fedbandits run`` takes.  ``featurizer`` maps ``(context, actions)`` to the
    agent's ``(K, d)`` features (default: :class:`ActionContextFeatures`).  ``params`` become the
    learner's columns in coba's results.
    """

    def __init__(
        self, agent: Agent, *, featurizer: Featurizer | None = None, params: Mapping[str, Any] | None = None
    ) -> None:
        self.agent = agent
        self.featurizer: Featurizer = featurizer if featurizer is not None else ActionContextFeatures()
        self._params = {"family": "fedbandits", **(params or {})}

    @classmethod
    def from_config(
        cls,
        config: Any,
        *,
        entry: str | None = None,
        seed: int | None = None,
        featurizer: Featurizer | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> CobaLearner:
        agent = Agent.from_config(config, entry=entry, seed=seed)
        return cls(agent, featurizer=featurizer, params=params)

    @property
    def params(self) -> Mapping[str, Any]:
        return dict(self._params)

    def predict(self, context: Any, actions: Sequence[Any]) -> tuple[Any, float, dict[str, str]]:
        decision = self.agent.choose(self.featurizer(context, actions))
        return actions[decision.arm], decision.propensity, {"decision_id": decision.decision_id}

    def learn(self, context: Any, action: Any, reward: float, probability: float, **kwargs: Any) -> None:
        if "decision_id" not in kwargs:
            raise ValueError("learn needs the decision_id that predict returned (coba passes it back as a keyword)")
        self.agent.reward(kwargs["decision_id"], float(reward))
