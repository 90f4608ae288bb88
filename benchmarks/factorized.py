"""Factorized continual release against the tree: noise, regret and simulator cost.

Instance: Zhou & Chowdhury's synthetic ``gaussian-sphere`` (K = 100 arms, d = 10), T = 10,000,
B = 25 (400 releases), 4 runs, seed 2023, M = 20 and M = 100 silos, epsilon = 1, delta = 1e-5,
tight, lazy; library defaults otherwise.  Four algorithms in one experiment (same contexts and
rewards, timings interleaved round by round):

* independent agents (nothing leaves a silo);
* ``ldp`` with the tree (``mechanism = "tree"``, the papers' release);
* ``ldp`` with ``mechanism = "factorized"``;
* non-private FedLinUCB.

Printed: the largest prefix-noise std of one covariance entry at the server (sqrt(M) silos'
noise), tree over factorized; final regret (mean +- std over runs); simulator seconds of
factorized over tree (target <= 1.2); the one-off factorization time at K = 4,000.

Usage::

    python benchmarks/factorized.py            # about 4 minutes on 2 cores
    python benchmarks/factorized.py --quick    # T = 1,000, 2 runs
"""

from __future__ import annotations

import argparse
import math
import time

from fedbandits.privacy.calibration import PrivacySpec, calibrate
from fedbandits.privacy.factorization import factorize, tree_prefix_variance
from synthetic import experiments, print_regrets, scale

EPSILON, DELTA, BATCH = 1.0, 1e-5, 25
LDP = {"name": "fedlinucb", "protocol": "ldp", "epsilon": EPSILON, "delta": DELTA, "batch": BATCH}
ALGORITHMS = [
    # the reference lines with the papers' tuning (Lemma C.4's radius), as the docs' tables were measured
    {"name": "linucb-independent", "label": "independent agents", "radius": "theory"},
    {**LDP, "label": "ldp tree"},
    {**LDP, "label": "ldp factorized", "mechanism": "factorized"},
    {"name": "fedlinucb", "label": "non-private FedLinUCB", "protocol": "none", "batch": BATCH, "radius": "theory"},
]


def prefix_std_ratio(horizon: int) -> float:
    """Largest prefix-noise std, tree over factorized, at the same (epsilon, delta)."""
    releases = horizon // BATCH
    tree = calibrate(PrivacySpec("ldp", EPSILON, DELTA), agents=1, horizon=horizon, batch=BATCH)
    fact = calibrate(PrivacySpec("ldp", EPSILON, DELTA, mechanism="factorized"), agents=1, horizon=horizon, batch=BATCH)
    tree_var = tree.sigma_cov**2 * tree_prefix_variance(releases).max()
    return math.sqrt(tree_var / (fact.sigma_cov**2 * fact.prefix_factor))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T = 1,000 and 2 runs")
    args = parser.parse_args()
    runs, horizon = scale(args)
    factorize.cache_clear()
    start = time.perf_counter()
    factorize(4000)
    print(f"one-off factorization at K = 4,000: {1e3 * (time.perf_counter() - start):.2f} ms")
    print(f"largest prefix-noise std, tree / factorized (K = {horizon // BATCH}): {prefix_std_ratio(horizon):.2f}")
    for _, results in experiments("factorized", ALGORITHMS, runs, horizon):
        print_regrets(results)
        fact, tree = results.algorithms["ldp factorized"], results.algorithms["ldp tree"]
        print(f"  cost: factorized / tree simulator seconds = {fact.seconds / tree.seconds:.2f}")


if __name__ == "__main__":
    main()
