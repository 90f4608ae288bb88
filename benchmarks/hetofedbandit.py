"""HetoFedBandit on its own synthetic instance: regret, communication and simulator speed, tuned alike.

Instance: ``heterogeneous-clients`` with the authors' code's defaults (N = 30 clients, 4 clusters, d = 25,
K = 25 of a pool of 1000, noise 0.1), T = 3,000, 4 runs, seed 2023.  Lines, in one experiment:

* HetoFedBandit as the code runs it (its alpha_t radius, sigma = 0.1, lambda = 0.1, 70 rounds of
  exploration, D = 2);
* HetoFedBandit and independent agents (lambda = 0.1) with a constant radius tuned by the same rule
  (``fedbandits.tune``: smallest mean final regret over 4 runs on seed 1000; beta in {0.03, 0.1, 0.3, 1});
* one global model (lock-step FedLinUCB, B = 25: every client pooled, the wrong model here) and
  FCLUB-DC (library defaults).

Printed: the choices; final regret, messages and the simulator's time relative to FedLinUCB (same run).

Usage::

    python benchmarks/hetofedbandit.py            # about a minute on 2 cores
"""

from __future__ import annotations

import argparse
import time

import fedbandits
from fedbandits.sim.runner import run_experiment

CODE = {"name": "hetofedbandit", "label": "HetoFedBandit (the code's radius)", "sigma": 0.1}
LINES: list[dict[str, object]] = [
    CODE,
    {**CODE, "label": "HetoFedBandit, tuned", "radius": "constant"},
    {"name": "linucb-independent", "label": "independent agents, tuned", "reg": 0.1},
    {"name": "fedlinucb", "label": "one global model (FedLinUCB B=25)", "batch": 25},
    {"name": "fclub-dc", "label": "FCLUB-DC"},
]
TUNED = ("HetoFedBandit, tuned", "independent agents, tuned")
GRID = {"grid": {label: {"beta": [0.03, 0.1, 0.3, 1]} for label in TUNED}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    config = fedbandits.config_from_dict(
        {
            "experiment": {"name": "hetofedbandit", "seed": 2023, "runs": 4, "horizon": 3000},
            "environment": {"name": "heterogeneous-clients"},
            "algorithms": LINES,
        }
    )
    start = time.perf_counter()
    tuning = fedbandits.tune(config, GRID, tuning_runs=4, workers=args.workers)
    tuned = time.perf_counter() - start
    results = run_experiment(tuning.config, workers=args.workers)
    print(
        f"N = 30 clients, T = 3000, 4 runs (tuning {tuned:.0f} s, report {time.perf_counter() - start - tuned:.0f} s)"
    )
    for label, i in tuning.chosen.items():
        print(f"  tuned on seed 1000: {label}: beta = {tuning.scores[label][i].candidate.values['beta']:g}")
    base = results.algorithms["one global model (FedLinUCB B=25)"].seconds
    for label, res in results.algorithms.items():
        final = res.final_regret
        groups = res.report.get("groups_found")
        extra = f"   groups {groups:.1f}" if isinstance(groups, float) else ""
        print(
            f"  {label:<36} regret {final.mean():>7.0f} +- {final.std(ddof=1):>5.0f}   messages "
            f"{res.messages.mean():>7.0f}   time x{res.seconds / base:4.2f}{extra}"
        )


if __name__ == "__main__":
    main()
