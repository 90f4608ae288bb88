"""Which noise-aware tuning should private FedLinUCB use by default?  Decided on seeds no report uses.

``regularizer = "noise"`` sets lambda = 2 Lambda, where Lambda bounds the operator norm of every
synced prefix's covariance noise (:func:`fedbandits.algorithms.fedlinucb.noise_norm_bound`: the PSD
shift, fixed by theory, not tuned).  What is tuned, once, is the exploration radius that goes with
it: a constant beta in {1, 3, 10}, or Lemma C.4's radius at that lambda (``theory``, which grows as
sqrt(lambda): it follows the noise).  On Zhou & Chowdhury's synthetic instance (K = 100 arms,
d = 10, T = 10,000, B = 25, epsilon = 1, delta = 1e-5, lazy), **seed 1000** (the benchmarks and docs
report seed 2023, whose run streams are disjoint), 4 runs, M = 20 and M = 100, every private
variant -- ``ldp`` and ``distributed-dp``, each with the tree and factorized -- runs with the papers'
tuning (lambda = 1, Lemma C.4's radius) and with each candidate.

The decision rule, fixed before the run: the candidate with the smallest geometric mean of
(regret / papers' regret) over the 8 (variant, M) cells becomes the default for private protocols
if it beats the papers' tuning in at least 7 of the 8 cells; otherwise the papers' tuning stays.
Printed: every cell's ratio, the geometric means and the verdict.

Usage::

    python benchmarks/noise_tuning.py            # about 20 minutes on 2 cores
    python benchmarks/noise_tuning.py --quick    # T = 1,000, 2 runs (a smoke test, no verdict)
"""

from __future__ import annotations

import argparse
import math

import numpy as np

import fedbandits
from fedbandits.sim.runner import run_experiment

SEED, BATCH = 1000, 25
VARIANTS = {
    "ldp tree": {"protocol": "ldp"},
    "ldp factorized": {"protocol": "ldp", "mechanism": "factorized"},
    "distributed-dp tree": {"protocol": "distributed-dp"},
    "distributed-dp factorized": {"protocol": "distributed-dp", "mechanism": "factorized"},
}
PAPER = {"regularizer": "fixed", "reg": 1.0, "radius": "theory"}
CANDIDATES = {
    "beta=1": {"regularizer": "noise", "radius": "constant", "beta": 1.0},
    "beta=3": {"regularizer": "noise", "radius": "constant", "beta": 3.0},
    "beta=10": {"regularizer": "noise", "radius": "constant", "beta": 10.0},
    "theory": {"regularizer": "noise", "radius": "theory"},
}
SIZES = (20, 100)


def algorithms() -> list[dict[str, object]]:
    base = {"name": "fedlinucb", "batch": BATCH, "epsilon": 1.0, "delta": 1e-5, "calibration": "tight"}
    out: list[dict[str, object]] = [{"name": "linucb-independent", "label": "independent"}]
    for name, variant in VARIANTS.items():
        out.append({**base, **variant, **PAPER, "label": f"{name} paper"})
        for cand, fields in CANDIDATES.items():
            out.append({**base, **variant, **fields, "label": f"{name} {cand}"})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T = 1,000 and 2 runs")
    parser.add_argument("--agents", type=int, nargs="+", default=list(SIZES), help="the sizes M to run")
    args = parser.parse_args()
    runs, horizon = (2, 1000) if args.quick else (4, 10_000)
    ratios: dict[str, list[float]] = {cand: [] for cand in CANDIDATES}
    for agents in args.agents:
        config = fedbandits.config_from_dict(
            {
                "experiment": {"name": f"noise-tuning M={agents}", "seed": SEED, "runs": runs, "horizon": horizon},
                "environment": {"name": "gaussian-sphere", "agents": agents, "arms": 100, "dim": 10},
                "algorithms": algorithms(),
            }
        )
        res = run_experiment(config, workers=2).algorithms
        alone = res["independent"].final_regret.mean()
        print(f"M = {agents}, seed {SEED}, {runs} runs, T = {horizon}; independent agents {alone:.0f}")
        for name in VARIANTS:
            paper = res[f"{name} paper"].final_regret.mean()
            cells = []
            for cand in CANDIDATES:
                regret = res[f"{name} {cand}"].final_regret.mean()
                ratios[cand].append(regret / paper)
                cells.append(f"{cand} {regret:7.0f} ({regret / paper:5.2f})")
            print(f"  {name:<26} paper {paper:7.0f}   " + "   ".join(cells), flush=True)
    means = {cand: float(np.exp(np.mean(np.log(r)))) for cand, r in ratios.items()}
    for cand, r in ratios.items():
        wins = sum(x < 1.0 for x in r)
        print(f"{cand:<8} geometric mean of regret / papers' {means[cand]:.3f}, better in {wins} of {len(r)} cells")
    best = min(means, key=lambda c: means[c])
    wins = sum(x < 1.0 for x in ratios[best])
    cells = len(ratios[best])
    complete = cells == 2 * len(VARIANTS) and not args.quick
    verdict = "adopt as the private default" if complete and wins >= cells - 1 else "keep the papers' tuning"
    print(f"best: {best} ({means[best]:.3f}, better in {wins} of {cells}): {verdict if complete else 'no verdict'}")
    assert math.isfinite(means[best])


if __name__ == "__main__":
    main()
