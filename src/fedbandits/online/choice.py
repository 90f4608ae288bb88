"""How the online agent turns its UCB scores into a choice, and the probability of that choice.

``ucb`` takes the highest score (first on ties), with propensity 1.  The randomized rules
(:mod:`fedbandits.core.exploration`) draw from the agent's own choice stream exactly as the
simulator's run draws for its M silos: one block of M uniforms (or M normal vectors for Thompson
sampling) per decision, of which silo i takes the i-th, so a seeded agent serving one decision per
round chooses what silo i of the simulated run chooses.  A deployed agent (no seed) draws from OS
entropy; the choice touches no release, so its randomness needs no secrecy for privacy.

Thompson sampling needs a Cholesky factor of V^{-1}: computed when the state changes (with the
agent's other cached quantities), never per decision.  Its propensity for K > 2 is a Monte Carlo
estimate from ``propensity_samples`` draws of a separate Generator (the choices stay those of the
choice stream), returned with its standard error.  That Generator is keyed by the decision (a seeded
agent's instance and the decision's number: the same estimate on every run, after a save and load
too) or, for a deployed agent, drawn from OS entropy.
"""

from __future__ import annotations

import numpy as np

from fedbandits.core.exploration import (
    Rule,
    cholesky_of_inverse,
    closed_form,
    draw,
    thompson_draw,
    thompson_propensity,
)


class Chooser:
    """One silo's choice rule (its entry's ``exploration`` parameters) and its random streams."""

    def __init__(self, params: object, silos: int, silo: int, stream: np.random.Generator | None) -> None:
        rule = Rule.of(params)
        self.exploration, self.rate, self.temperature = rule.name, rule.rate, rule.temperature
        self.scale, self.samples = rule.scale, rule.samples
        self.silos, self.silo = silos, silo
        self.rng = np.random.default_rng() if stream is None else stream
        self.chol = np.zeros((1, 0, 0))

    def refresh(self, inv: np.ndarray) -> None:
        """After a state change: Thompson sampling's factor L L^T = V^{-1} (inv (d, d))."""
        if self.exploration == "thompson":
            self.chol = cholesky_of_inverse(inv[None])

    def choose(
        self, features: np.ndarray, scores: np.ndarray, theta: np.ndarray, key: list[int] | None
    ) -> tuple[int, float, float]:
        """(arm, its propensity, the propensity's standard error) for ``features (K, d)`` float32 with UCB
        ``scores (K,)`` and the model's ``theta (d,)``; ``key`` seeds Thompson sampling's Monte Carlo
        propensity (None: OS entropy)."""
        if self.exploration == "ucb":
            return int(scores.argmax()), 1.0, 0.0
        if self.exploration == "thompson":
            z = self.rng.standard_normal((self.silos, len(theta)))[self.silo]
            x = features.astype(np.float64)[None]
            arm = int(thompson_draw(x, theta[None], self.chol, self.scale, z[None]).argmax(axis=1)[0])
            normals = np.random.default_rng(key).standard_normal((1, self.samples, len(theta)))
            p, error = thompson_propensity(x, theta[None], self.chol, self.scale, np.array([arm]), normals)
            return arm, float(p[0]), float(error[0])
        probs = closed_form(self.exploration, scores[None], self.rate, self.temperature)
        u = self.rng.random(self.silos)[self.silo]
        arm = int(draw(probs, np.array([u]))[0])
        return arm, float(probs[0, arm]), 0.0
