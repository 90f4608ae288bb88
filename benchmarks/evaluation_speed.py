"""How fast ``fedbandits evaluate`` is (issue #46, item 6; docs/evaluation.md).

* **A fixed policy over 1,000,000 logged rows** (K = 10, d = 10): the uniform policy's DM, IPS,
  SNIPS and DR with normal intervals, the ridge reward model cross-fitted on 2 folds; the target
  is at most 10 s on one core.
* **Replay of a learning LinUCB** on a uniform log of the same shape (3 silos), per accepted
  round, against the simulator's own time per round of the same policy (``linucb-independent``,
  3 silos, K = 10, d = 10): both drive the same ``select``/``observe``; replay walks about K rows
  per accepted round.

Usage::

    OPENBLAS_NUM_THREADS=1 python benchmarks/evaluation_speed.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fedbandits.config import config_from_dict
from fedbandits.evaluation import fixed
from fedbandits.evaluation.logs import BanditLog
from fedbandits.evaluation.replay import replay
from fedbandits.sim.runner import run_experiment

K, D, SILOS = 10, 10, 3


def synthetic_log(rows: int, seed: int = 0) -> BanditLog:
    """``rows`` uniformly logged rounds of K candidates on the unit sphere, Bernoulli rewards."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, K, D), dtype=np.float32)
    x /= np.linalg.norm(x, axis=2, keepdims=True)
    theta = rng.standard_normal(D)
    theta /= np.linalg.norm(theta)
    a = rng.integers(0, K, size=rows)
    mean = 0.5 + 0.5 * (x[np.arange(rows), a] @ theta)
    r = (rng.random(rows) < mean).astype(np.float64)
    silos = np.arange(rows) % SILOS
    names = tuple(str(m) for m in range(SILOS))
    return BanditLog(a, np.full(rows, 1 / K), r, np.zeros((K, 0), np.float32), x, silos, names, "synthetic")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    log = synthetic_log(args.rows)
    start = time.perf_counter()
    estimates = fixed.evaluate(log, fixed.uniform(log))
    seconds = time.perf_counter() - start
    print(f"fixed policy, {log.n:,} rows, K = {K}, d = {D}: DM, IPS, SNIPS, DR with intervals in {seconds:.2f} s")
    for e in estimates:
        print(f"  {e.estimator:<6} {e.value:.5f}  [{e.low:.5f}, {e.high:.5f}]")

    horizon = 2000
    table = {
        "experiment": {"horizon": horizon, "runs": 1, "seed": 1},
        "environment": {"name": "gaussian-sphere", "agents": SILOS, "arms": K, "dim": D},
        "algorithms": [{"name": "linucb-independent"}],
    }
    config = config_from_dict(table)
    small = synthetic_log(horizon * SILOS * K * 2, seed=1)
    start = time.perf_counter()
    done = replay(config, 0, small)
    replay_seconds = time.perf_counter() - start
    start = time.perf_counter()
    run_experiment(config, workers=1, progress=False)
    sim_seconds = time.perf_counter() - start
    print(
        f"replay: {done.rounds} sync rounds ({done.accepted} accepted of {int(done.scanned.mean()):,} rows) in "
        f"{replay_seconds:.2f} s = {1e3 * replay_seconds / done.rounds:.2f} ms per round; the simulator: "
        f"{horizon} rounds in {sim_seconds:.2f} s = {1e3 * sim_seconds / horizon:.2f} ms per round"
    )


if __name__ == "__main__":
    main()
