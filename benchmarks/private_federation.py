"""Does private federation pay off?  Every private variant, with the papers' tuning and the noise-aware one.

Instance: Zhou & Chowdhury's synthetic ``gaussian-sphere`` (K = 100 arms, d = 10), T = 10,000, B = 25,
4 runs, seed 2023, M = 20 and M = 100, epsilon = 1, delta = 1e-5, tight, lazy.  In one experiment per M (same contexts
and rewards): independent agents, the non-private federation, and ``ldp`` with the tree, ``ldp``
factorized and ``distributed-dp`` with the tree and factorized, each with

* the papers' tuning: lambda = 1 and Lemma C.4's radius (``regularizer = "fixed"``, ``radius = "theory"``);
* noise-aware, the library default: lambda = 2 Lambda (``regularizer = "noise"``) and a constant
  radius 10, chosen on seed 1000 by benchmarks/noise_tuning.py.

Printed: final regret (mean +- std over runs) and its ratio to independent agents.

Usage::

    python benchmarks/private_federation.py            # about 13 minutes on 2 cores
    python benchmarks/private_federation.py --quick    # T = 1,000, 2 runs
"""

from __future__ import annotations

import argparse
import itertools

from synthetic import experiments, print_regrets, scale

PRIVATE = {"name": "fedlinucb", "batch": 25, "epsilon": 1.0, "delta": 1e-5}
VARIANTS = {
    "ldp tree": {"protocol": "ldp"},
    "ldp factorized": {"protocol": "ldp", "mechanism": "factorized"},
    "distributed-dp": {"protocol": "distributed-dp"},
    "distributed-dp factorized": {"protocol": "distributed-dp", "mechanism": "factorized"},
}
TUNINGS = {
    "paper tuning": {"regularizer": "fixed", "reg": 1.0, "radius": "theory"},  # lambda = 1, Lemma C.4's radius
    "noise-aware": {},  # the library default for private protocols: lambda = 2 Lambda, constant radius 10
}


def algorithms() -> list[dict[str, object]]:
    out: list[dict[str, object]] = [
        {"name": "linucb-independent", "label": "independent agents"},
        {"name": "fedlinucb", "label": "non-private federation", "batch": 25},
    ]
    for (name, variant), (tuning, fields) in itertools.product(VARIANTS.items(), TUNINGS.items()):
        out.append({**PRIVATE, **variant, **fields, "label": f"{name}, {tuning}"})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T = 1,000 and 2 runs")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    runs, horizon = scale(args)
    for _, results in experiments("private", algorithms(), runs, horizon, args.workers):
        print_regrets(results, reference="independent agents")


if __name__ == "__main__":
    main()
