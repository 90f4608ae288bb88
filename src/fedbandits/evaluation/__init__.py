"""Logged bandit feedback: its formats (:mod:`~fedbandits.evaluation.logs`, the Open Bandit Dataset in
:mod:`~fedbandits.evaluation.obd`), off-policy estimators of a fixed policy
(:mod:`~fedbandits.evaluation.estimators`, :mod:`~fedbandits.evaluation.fixed`) and replay of a
config's learning policies (:mod:`~fedbandits.evaluation.replay`): ``fedbandits evaluate``
(docs/evaluation.md)."""
