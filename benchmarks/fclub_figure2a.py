"""Time of the Figure 2a experiment of Liu et al. (2022), the config of CI's slow ``test_figure_2a_ordering``.

Instance: ``clustered-synthetic`` with n = 100 users, m = 4 clusters, L = 5 local servers, d = K = 10,
one arrival per round; the seven algorithms of the test in one task, so they share the rounds
(common random numbers) exactly as in CI: ``fclub``, ``fclub-dc``, ``cdp-fclub-dc`` (epsilon = 300,
rho_scale = 0.01), ``club``, ``sclub``, ``linucb-per-user``, ``homo`` (alpha1 = alpha2 = 1.5).

One run of T rounds (default 20,000), seed 1, ``workers = 1``, timed with both the wall clock and the
process's CPU time (``time.process_time``: on a loaded machine the wall clock mostly measures the
wait for a core).  Printed: per algorithm the seconds spent in its ``step`` (the simulator's own
timing) and its rounds per second; the environment's seconds; the whole run's CPU and wall seconds;
and the whole run extrapolated to CI's T = 500,000 x 3 runs on 2 workers (linearly in T: the
per-round cost is nearly constant after the first phases; 3 runs on 2 workers take two runs' time).

``--alone`` additionally runs every algorithm in an experiment of its own (its own environment),
which is what "seconds per algorithm" means when comparing with a single-algorithm benchmark.

Usage::

    python benchmarks/fclub_figure2a.py                 # about 10 s
    python benchmarks/fclub_figure2a.py --horizon 5000  # a few seconds
    python benchmarks/fclub_figure2a.py --alone

The last line is ``figure2a: cpu_s=X wall_s=Y ci_estimate_s=Z`` (X, Y for the T-round run).
"""

from __future__ import annotations

import argparse
import time

from fedbandits import config_from_dict
from fedbandits.sim.runner import run_experiment

ENV = {"name": "clustered-synthetic", "users": 100, "clusters": 4, "agents": 5, "dim": 10, "arms": 10}
COMMON = {"alpha1": 1.5, "alpha2": 1.5}
ALGORITHMS = [
    {"name": "fclub", **COMMON},
    {"name": "fclub-dc", **COMMON},
    {"name": "cdp-fclub-dc", "epsilon": 300.0, "rho_scale": 0.01, **COMMON},
    {"name": "club", "alpha1": 1.5},
    {"name": "sclub", "alpha1": 1.5},
    {"name": "linucb-per-user"},
    {"name": "homo"},
]
CI_HORIZON, CI_RUNS, CI_WORKERS = 500_000, 3, 2


def timed(algorithms: list[dict[str, object]], horizon: int) -> tuple[float, float, dict[str, float], float]:
    """(CPU seconds, wall seconds, seconds per algorithm label, environment seconds) of one run."""
    config = config_from_dict(
        {
            "experiment": {"seed": 1, "runs": 1, "horizon": horizon},
            "environment": ENV,
            "algorithms": algorithms,
        }
    )
    cpu, wall = time.process_time(), time.perf_counter()
    res = run_experiment(config, workers=1)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu, wall, {lab: a.seconds for lab, a in res.algorithms.items()}, res.env_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=20_000, help="rounds T of the timed run")
    parser.add_argument("--alone", action="store_true", help="also time every algorithm on its own")
    args = parser.parse_args()
    T = args.horizon
    cpu, wall, seconds, env_s = timed(ALGORITHMS, T)
    print(f"Figure 2a config, one run, T = {T:,}: cpu {cpu:.2f} s, wall {wall:.2f} s, environment {env_s:.2f} s")
    for lab, s in seconds.items():
        print(f"  {lab:16s} {s:6.2f} s in step, {T / s:8,.0f} rounds/s")
    scale = CI_HORIZON / T * -(-CI_RUNS // CI_WORKERS)
    print(f"CI estimate (T = {CI_HORIZON:,}, {CI_RUNS} runs, {CI_WORKERS} workers, this machine): {cpu * scale:.0f} s")
    if args.alone:
        for alg in ALGORITHMS:
            a_cpu, a_wall, _, a_env = timed([alg], T)
            print(
                f"  alone: {alg['name']:16s} cpu {a_cpu:5.2f} s, wall {a_wall:5.2f} s "
                f"(environment {a_env:.2f} s), {a_cpu / T * 1e4:.3f} cpu s per 10,000 rounds"
            )
    print(f"figure2a: cpu_s={cpu:.2f} wall_s={wall:.2f} ci_estimate_s={cpu * scale:.0f}")


if __name__ == "__main__":
    main()
