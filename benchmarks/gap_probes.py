"""Where the private federation's regret comes from at M = 20, epsilon = 1, and a sync schedule that did not help.

Instance: benchmarks/synthetic.py's (``gaussian-sphere``, K = 100, d = 10, T = 10,000) at M = 20, on the
tuning seed 1000 (4 runs): these are probes of the issue's "close the gap" item, read on the seed the
choices are made on, never on the report seed.

1. **Decomposition.**  Regret by stretch of time, R(t2) - R(t1), of ``distributed-dp`` factorized at
   epsilon = 1 (B = 25, beta = 3 and B = 100, beta = 1: the rule's choices) beside the *non-private lazy*
   federation with the same B (``protocol = "none"``, ``lazy = true``: the same schedule, no noise) and
   tuned independent agents.  What the private line pays beyond the non-private lazy one is the noise's.
   Then the same with centred rewards (``reward_offset = 0.5``, ``reward_bound = 0.5``: the rule's choice
   of ``examples/centred-rewards-grid.toml``).
2. **A denser-early sync schedule** (a probe, not a library option: ``FedLinUCB.end_round`` is replaced
   in this process only).  K releases at t_k = ceil(T (k / K)^p), k = 1..K: p = 1 is B = T / K; p > 1
   syncs often early and rarely late.  The noise is calibrated for the K releases (``batch = T // K``
   gives the calibration K; each release is one batch's sum whatever its length, so the calibration
   holds).  Each (K, p) with beta in {0.3, 1, 3}; printed: the best beta's final regret.

Usage::

    python benchmarks/gap_probes.py            # about 2.5 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

import numpy as np

import fedbandits
from fedbandits.algorithms import fedlinucb
from fedbandits.sim.runner import run_experiment

HORIZON, AGENTS, SEED, RUNS = 10_000, 20, 1000, 4
PRIVATE = {"name": "fedlinucb", "epsilon": 1.0, "delta": 1e-5, "protocol": "distributed-dp", "mechanism": "factorized"}
CENTRED = {"reward_offset": 0.5, "reward_bound": 0.5}  # rewards kept in [0, 1], centred
STRETCHES = (0, 25, 100, 500, 2000, HORIZON)
SCHEDULES = ((100, 1.0), (50, 2.0), (25, 2.0), (25, 3.0), (12, 3.0))


def _config(algorithms: list[dict[str, object]]) -> fedbandits.Config:
    return fedbandits.config_from_dict(
        {
            "experiment": {"name": "gap-probes", "seed": SEED, "runs": RUNS, "horizon": HORIZON},
            "environment": {"name": "gaussian-sphere", "agents": AGENTS, "arms": 100, "dim": 10},
            "algorithms": algorithms,
        }
    )


def decomposition(workers: int) -> None:
    lines: list[dict[str, object]] = [
        {**PRIVATE, "label": "distributed-dp factorized B=25", "batch": 25, "beta": 3.0},
        {"name": "fedlinucb", "label": "non-private lazy B=25", "batch": 25, "protocol": "none", "lazy": True},
        {**PRIVATE, "label": "distributed-dp factorized B=100", "batch": 100, "beta": 1.0},
        {"name": "fedlinucb", "label": "non-private lazy B=100", "batch": 100, "protocol": "none", "lazy": True},
        {"name": "linucb-independent", "label": "independent agents (beta = 1)", "radius": "constant", "beta": 1.0},
        # the rule's choice with centred rewards (docs/privacy.md, "Closed: centred rewards")
        {**PRIVATE, "label": "ddp factorized B=25 centred", "batch": 25, "beta": 0.3, **CENTRED},
        {"name": "fedlinucb", "label": "non-private lazy B=25 centred", "batch": 25, "protocol": "none", "lazy": True}
        | {"reward_offset": CENTRED["reward_offset"]},
    ]
    results = run_experiment(_config(lines), workers=workers)
    grid = np.concatenate([[0.0], results.grid.astype(float)])
    heads = "  ".join(f"({a}, {b}]" for a, b in itertools.pairwise(STRETCHES))
    print(f"regret by stretch of t, mean of {RUNS} runs on seed {SEED}:  {heads}   final   lambda")
    for label, res in results.algorithms.items():
        at = np.interp(STRETCHES, grid, np.concatenate([[0.0], res.curves.mean(axis=0)]))
        parts = "  ".join(f"{v:>9.0f}" for v in np.diff(at))
        lam = res.report.get("reg")
        lam_text = f"{lam:7.0f}" if isinstance(lam, float) else "      -"
        print(f"  {label:<34} {parts}   {at[-1]:6.0f}  {lam_text}")


def _schedule(releases: int, power: float) -> frozenset[int]:
    times = {math.ceil(HORIZON * (k / releases) ** power) for k in range(1, releases + 1)}
    if len(times) != releases:
        raise ValueError(f"K = {releases}, p = {power:g}: two releases fall in one round")
    return frozenset(times)


def schedules() -> None:
    """In this process only (workers = 1): the replaced ``end_round`` is not in a worker process."""
    original = fedlinucb.FedLinUCB.end_round
    print("sync schedule t_k = ceil(T (k/K)^p): best of beta in {0.3, 1, 3}")
    try:
        for releases, power in SCHEDULES:
            syncs = _schedule(releases, power)

            def end_round(self: fedlinucb.FedLinUCB, syncs: frozenset[int] = syncs) -> None:
                super(fedlinucb.FedLinUCB, self).end_round()
                if self.t in syncs:
                    self.sync()

            fedlinucb.FedLinUCB.end_round = end_round  # type: ignore[method-assign]
            lines = [
                {**PRIVATE, "label": f"beta={beta:g}", "batch": HORIZON // releases, "beta": beta}
                for beta in (0.3, 1.0, 3.0)
            ]
            results = run_experiment(_config(lines), workers=1)
            assert all(res.sync_rounds.min() == releases for res in results.algorithms.values())
            best = min(results.algorithms.items(), key=lambda kv: kv[1].final_regret.mean())
            first = min(syncs)
            print(
                f"  K = {releases:3d}, p = {power:g} (first sync at t = {first:4d}): {best[0]}: "
                f"{best[1].final_regret.mean():6.0f} +- {best[1].final_regret.std(ddof=1):4.0f}"
            )
    finally:
        fedlinucb.FedLinUCB.end_round = original  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    start = time.perf_counter()
    decomposition(args.workers)
    schedules()
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
