"""Is there a noise-aware tuning of private FedLinUCB that beats the papers' tuning?  Measured on seeds no report uses.

``regularizer = "noise"`` sets lambda = c x Lambda, where Lambda bounds the operator norm of every
synced prefix's covariance noise (:func:`fedbandits.algorithms.fedlinucb.noise_norm_bound`; the
library's rule takes c = 2, the PSD shift), and explores with a constant radius beta.  On Zhou &
Chowdhury's synthetic instance (M = 20, K = 100 arms, d = 10, T = 10,000, B = 25, epsilon = 1,
delta = 1e-5, lazy) with **seed 1000** (the benchmarks and docs report seed 2023, whose run streams
are disjoint), 4 runs, every private variant -- ``ldp`` with the tree, ``ldp`` factorized,
``distributed-dp`` -- runs with the papers' tuning (lambda = 1, Lemma C.4's radius) and at
lambda = c x Lambda for c in {0.5, 1, 2} and beta in {1, 3, 10}; printed: each setting's regret
relative to independent agents, per variant, and the geometric mean over the variants.  The library
keeps the papers' tuning as its default (docs/privacy.md says why).

Usage::

    python benchmarks/noise_tuning.py     # about 7 minutes on 2 cores
"""

from __future__ import annotations

import itertools
import math

import numpy as np

import fedbandits
from fedbandits.algorithms.fedlinucb import FedLinUCBParams, noise_norm_bound
from fedbandits.registry import calibrate_protocol, prefix_noise_std
from fedbandits.sim.runner import run_experiment

SEED, RUNS, AGENTS, HORIZON, BATCH, DIM = 1000, 4, 20, 10_000, 25, 10
SHIFTS = (0.5, 1.0, 2.0)
BETAS = (1.0, 3.0, 10.0)
VARIANTS = {
    "ldp tree": {"protocol": "ldp"},
    "ldp factorized": {"protocol": "ldp", "mechanism": "factorized"},
    "distributed-dp": {"protocol": "distributed-dp"},
}


def noise_bound(variant: dict[str, str]) -> float:
    params = FedLinUCBParams(batch=BATCH, epsilon=1.0, delta=1e-5, **variant)  # type: ignore[arg-type]
    cal = calibrate_protocol(params, horizon=HORIZON, agents=AGENTS, dim=DIM)
    return noise_norm_bound(prefix_noise_std(cal, AGENTS), DIM, HORIZON // BATCH, params.alpha)


def main() -> None:
    algorithms: list[dict[str, object]] = [{"name": "linucb-independent", "label": "independent"}]
    for name, variant in VARIANTS.items():
        algorithms.append(
            {"name": "fedlinucb", "label": f"{name} paper", "batch": BATCH, "epsilon": 1.0, "delta": 1e-5, **variant}
        )
    for (name, variant), shift, beta in itertools.product(VARIANTS.items(), SHIFTS, BETAS):
        reg = shift * noise_bound(variant)
        algorithms.append(
            {
                "name": "fedlinucb",
                "label": f"{name} c={shift:g} beta={beta:g}",
                "batch": BATCH,
                "epsilon": 1.0,
                "delta": 1e-5,
                "regularizer": "fixed",
                "reg": reg,
                "radius": "constant",
                "beta": beta,
                **variant,
            }
        )
    config = fedbandits.config_from_dict(
        {
            "experiment": {"name": "noise-tuning", "seed": SEED, "runs": RUNS, "horizon": HORIZON},
            "environment": {"name": "gaussian-sphere", "agents": AGENTS, "arms": 100, "dim": DIM},
            "algorithms": algorithms,
        }
    )
    results = run_experiment(config, workers=2)
    alone = results.algorithms["independent"].final_regret.mean()
    print(f"seed {SEED}, {RUNS} runs, M = {AGENTS}; independent agents: {alone:.0f}")
    print("Lambda: " + ", ".join(f"{name} {noise_bound(v):.0f}" for name, v in VARIANTS.items()))
    paper = [results.algorithms[f"{name} paper"].final_regret.mean() / alone for name in VARIANTS]
    print("papers' tuning (lambda = 1, theory radius): " + "  ".join(f"{r:6.3f}" for r in paper))
    print(f"  geometric mean {float(np.exp(np.mean(np.log(paper)))):.3f}")
    scores = {}
    for shift, beta in itertools.product(SHIFTS, BETAS):
        ratios = [
            results.algorithms[f"{name} c={shift:g} beta={beta:g}"].final_regret.mean() / alone for name in VARIANTS
        ]
        scores[(shift, beta)] = float(np.exp(np.mean(np.log(ratios))))
        print(f"c = {shift:<5g} beta = {beta:<4g} regret / independent: " + "  ".join(f"{r:6.3f}" for r in ratios))
    best = min(scores, key=lambda k: scores[k])
    print(f"best (geometric mean over the variants): c = {best[0]:g}, beta = {best[1]:g} ({scores[best]:.3f})")
    assert math.isfinite(scores[best])


if __name__ == "__main__":
    main()
