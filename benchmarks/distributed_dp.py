"""Does private federation pay off?  distributed-dp against independent agents, ldp and no privacy.

Instance: Zhou & Chowdhury's synthetic ``gaussian-sphere`` (K = 100 fresh arms per agent and round,
d = 10), T = 10,000 rounds, 4 runs, seed 2023, for M = 20 and M = 100 silos.  Four algorithms in
one experiment (so they see the same contexts and rewards, and their timings are interleaved
round by round on the same machine state):

* independent agents (``linucb-independent``: no federation, nothing leaves a silo);
* ``fedlinucb`` with ``protocol = "ldp"`` (lazy, the default), epsilon = 1, delta = 1e-5, tight;
* ``fedlinucb`` with ``protocol = "distributed-dp"`` at the same budget (no colluders, no dropouts);
* non-private ``fedlinucb`` (protocol ``none``).

All four use the library defaults otherwise (batch 25, reg 1), the two non-private lines Lemma C.4's
radius (the papers' tuning; the library's non-private default is now a constant radius 1).  Printed per M:

* ``noise``: server-side noise std of one covariance entry of a node sum, distributed-dp over
  ldp / sqrt(M) (from the calibrations; target <= 1.1);
* final regret (mean and std over runs) of the four algorithms;
* ``cost``: simulator seconds of distributed-dp over ldp in the same run (target <= 1.3).

Usage::

    python benchmarks/distributed_dp.py            # both M, about 3 minutes on 2 cores
    python benchmarks/distributed_dp.py --quick    # M = 20 and 100 at T = 1,000, 2 runs
"""

from __future__ import annotations

import argparse
import math

from fedbandits.privacy.calibration import PrivacySpec, calibrate
from fedbandits.privacy.distributed_noise import calibrate_distributed
from synthetic import experiments, print_regrets, scale

EPSILON, DELTA, BATCH = 1.0, 1e-5, 25
PRIVATE = {"epsilon": EPSILON, "delta": DELTA, "calibration": "tight"}
ALGORITHMS = [
    {"name": "linucb-independent", "label": "independent agents", "radius": "theory"},
    {"name": "fedlinucb", "label": "ldp (lazy)", "protocol": "ldp", **PRIVATE},
    {"name": "fedlinucb", "label": "distributed-dp", "protocol": "distributed-dp", **PRIVATE},
    {"name": "fedlinucb", "label": "non-private FedLinUCB", "protocol": "none", "radius": "theory"},
]


def noise_ratio(agents: int, horizon: int) -> float:
    ldp = calibrate(PrivacySpec("ldp", EPSILON, DELTA), agents=agents, horizon=horizon, batch=BATCH)
    ddp = calibrate_distributed(
        PrivacySpec("distributed-dp", EPSILON, DELTA), agents=agents, horizon=horizon, batch=BATCH, dim=10
    )
    return math.sqrt(agents) * ddp.sigma_cov / ldp.sigma_cov


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T = 1,000 and 2 runs")
    parser.add_argument("--workers", type=int, default=1, help="simulator workers (timings stay per algorithm)")
    args = parser.parse_args()
    runs, horizon = scale(args)
    for agents, results in experiments("distributed-dp", ALGORITHMS, runs, horizon, args.workers):
        print(f"  noise: distributed-dp server std / (ldp server std / sqrt(M)) = {noise_ratio(agents, horizon):.3f}")
        print_regrets(results)
        ddp, ldp = results.algorithms["distributed-dp"], results.algorithms["ldp (lazy)"]
        alone = results.algorithms["independent agents"].final_regret.mean()
        print(f"  cost: distributed-dp / ldp simulator seconds = {ddp.seconds / ldp.seconds:.2f}")
        print(f"  distributed-dp / independent agents regret = {ddp.final_regret.mean() / alone:.2f}")


if __name__ == "__main__":
    main()
