"""Per-interaction vs user-level privacy when users return: what protecting a whole user costs.

Instance: benchmarks/synthetic.py's (``gaussian-sphere``, K = 100, d = 10, seed 2023, T = 10,000, 4 runs)
at M = 20, with 1,000 returning users per silo, visits uniform (each user visits its silo 10 times on
average, at most about 25).  At epsilon = 1, delta = 1e-5, tight, lazy, the library's noise-aware
defaults (chosen on seed 1000 by benchmarks/noise_tuning.py):

* ``distributed-dp`` per interaction (tree and factorized): a returning user is *not* covered as a whole
  (each visit is protected once; the report and a warning say so);
* ``distributed-dp`` user-level, tree with m in {1, 3, 10, 25} and factorized with m in {3, 10}: one user's
  whole history, up to m visits kept and the rest dropped (counted); the noise grows about m-fold;
* independent agents (no communication, nothing released) as the line to beat.

Printed: final regret (mean +- std over runs), the share of contributions dropped, the noise std per
entry, the ratio to independent agents and the simulator's time relative to the per-interaction tree
(same run).

Usage::

    python benchmarks/user_level.py            # 27 s on 2 cores
    python benchmarks/user_level.py --quick    # T = 1,000, 2 runs
"""

from __future__ import annotations

import argparse
import time

import fedbandits
from fedbandits.sim.runner import run_experiment
from synthetic import scale

USERS = 1000
PRIVATE = {"name": "fedlinucb", "batch": 25, "epsilon": 1.0, "delta": 1e-5, "protocol": "distributed-dp"}
INDEPENDENT = "independent agents"
LINES: list[dict[str, object]] = [
    {"name": "linucb-independent", "label": INDEPENDENT},
    {**PRIVATE, "label": "per interaction, tree"},
    {**PRIVATE, "label": "per interaction, factorized", "mechanism": "factorized"},
    *(
        {**PRIVATE, "label": f"user-level m={m}, tree", "privacy_unit": "user", "max_contributions": m}
        for m in (1, 3, 10, 25)
    ),
    *(
        {
            **PRIVATE,
            "label": f"user-level m={m}, factorized",
            "privacy_unit": "user",
            "max_contributions": m,
            "mechanism": "factorized",
        }
        for m in (3, 10)
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T = 1,000 and 2 runs")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    runs, horizon = scale(args)
    config = fedbandits.config_from_dict(
        {
            "experiment": {"name": "user-level", "seed": 2023, "runs": runs, "horizon": horizon},
            "environment": {"name": "gaussian-sphere", "agents": 20, "arms": 100, "dim": 10, "returning_users": USERS},
            "algorithms": LINES,
        }
    )
    start = time.perf_counter()
    results = run_experiment(config, workers=args.workers)
    print(f"M = 20, {USERS} returning users per silo, T = {horizon}, {runs} runs ({time.perf_counter() - start:.0f} s)")
    base = results.algorithms[INDEPENDENT].final_regret.mean()
    lock_step = results.algorithms["per interaction, tree"].seconds
    for label, res in results.algorithms.items():
        final, report = res.final_regret, res.report
        observations = report.get("observations") or 1
        dropped = report.get("dropped_contributions", 0) / observations
        noise = report.get("noise_std")
        noise_text = f"{noise:8.2f}" if isinstance(noise, float) else "       -"
        print(
            f"  {label:<30} regret {final.mean():>7.0f} +- {final.std(ddof=1) if final.size > 1 else 0:>5.0f}"
            f"   dropped {dropped:6.1%}   noise std {noise_text}   x{final.mean() / base:5.2f}"
            f"   max visits {report.get('max_user_visits', '-')}   time x{res.seconds / lock_step:4.2f}"
        )


if __name__ == "__main__":
    main()
