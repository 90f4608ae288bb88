"""Throughput of the Ray backend against one Ray worker and against the local process pool.

Grid: the Zhou & Chowdhury (2023) synthetic instance as registered for Figure 2a
(``fedbandits.experiments.get_experiment("zhou-fig2a", "quick")``: gaussian-sphere, M = 100 agents,
K = 100 arms, d = 10, noise sd 0.5; FedLinUCB with B = 25, alpha = 0.01 under silo-level LDP and
SDP (shuffle amplification) at epsilon in {1e-3, 1e-4}, delta = 1e-4 -- four algorithms on common
random numbers), R runs of T rounds, one run per task (the default for M = 100): R tasks.

Measurements (each the best of ``--repeat`` timings, interleaved one, two, pool, one, two, ...):

(a) one_worker: ``run_experiment(config, backend="ray", workers=1)`` -- one task in flight;
(b) two_workers: ``run_experiment(config, backend="ray", workers=2)`` -- two tasks in flight;
(c) local_pool: ``run_experiment(config, workers=2)`` -- the local process pool of two workers.

The Ray cluster is a local instance with 2 CPUs (``ray.init(num_cpus=2)``, token authentication
with a throw-away token), started once before the timings, as a cluster is started once before a
grid; each backend first runs a two-run warm-up of the same grid (Ray workers import fedbandits,
the local fork server starts).  Everything else -- submission, transfer of results, merging -- is
in the time.  Throughput is agent-steps per second summed over the grid's algorithms,
R * M * T * (algorithms) / seconds.  All three give the same numbers bit for bit (checked).

Final line (best timings): ``ray: one_worker=X two_workers=Y local_pool=Z ratio_two_vs_one=A
ratio_vs_local=B`` with A = Y / X (target >= 1.7) and B = Y / Z (target >= 0.9: within 10% of the
local pool); the line before gives the same from the median timings (on a shared machine, compare
both: the spread between repetitions shows how much other load moved the timings).

Usage::

    python benchmarks/ray_throughput.py               # R = 8, T = 1000 (about 2 minutes on 2 cores)
    python benchmarks/ray_throughput.py --quick       # R = 4, T = 200
    python benchmarks/ray_throughput.py --repeat 3    # best of 3 of each
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
import time

import numpy as np

from fedbandits.config import config_from_dict
from fedbandits.experiments import get_experiment
from fedbandits.sim.runner import run_experiment


def _grid(runs: int, horizon: int):  # type: ignore[no-untyped-def]
    data = get_experiment("zhou-fig2a", "quick", runs=runs).config
    data = {**data, "experiment": {**data["experiment"], "horizon": horizon, "runs_per_task": 1}}
    return config_from_dict(data)


def _same(a, b) -> bool:  # type: ignore[no-untyped-def]
    return all(
        np.array_equal(getattr(a.algorithms[lab], f), getattr(b.algorithms[lab], f))
        for lab in a.algorithms
        for f in ("curves", "per_agent", "sync_rounds", "messages", "bytes_sent")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8, help="runs R = tasks (default 8)")
    parser.add_argument("--horizon", type=int, default=1000, help="rounds T (default 1000)")
    parser.add_argument("--repeat", type=int, default=2, help="best of this many timings (default 2)")
    parser.add_argument("--quick", action="store_true", help="R = 4, T = 200, one timing each")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.horizon, args.repeat = 4, 200, 1
    try:
        import ray
    except ImportError:
        print("ray_throughput: needs Ray: pip install 'fedbandits[ray]'", file=sys.stderr)
        return 2

    config = _grid(args.runs, args.horizon)
    env = config.environment.params
    steps = args.runs * env.agents * args.horizon * len(config.algorithms)
    print(
        f"grid: zhou-fig2a instance, M={env.agents} K={env.arms} d={env.dim}, {len(config.algorithms)} algorithms, "
        f"R={args.runs} runs (tasks), T={args.horizon}; {os.cpu_count()} CPUs; ray {ray.__version__}"
    )
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    print(f"ray.init (local, 2 CPUs): {time.perf_counter() - started:.1f} s (not in the timings)")
    try:
        warm = config.with_experiment(runs=2)
        run_experiment(warm, backend="ray", workers=2)
        run_experiment(warm, workers=2)
        cases = {
            "one_worker": {"backend": "ray", "workers": 1},
            "two_workers": {"backend": "ray", "workers": 2},
            "local_pool": {"backend": "local", "workers": 2},
        }
        timings: dict[str, list[float]] = {name: [] for name in cases}
        results = {}
        for rep in range(args.repeat):
            for name, kwargs in cases.items():
                t0 = time.perf_counter()
                results[name] = run_experiment(config, **kwargs)
                seconds = time.perf_counter() - t0
                timings[name].append(seconds)
                print(f"  [{rep + 1}] {name:<12} {seconds:7.2f} s  {steps / seconds:12,.0f} agent-steps/s")
    finally:
        ray.shutdown()
    best = {name: min(t) for name, t in timings.items()}
    median = {name: float(np.median(t)) for name, t in timings.items()}
    print(
        "median: "
        + " ".join(f"{name}={steps / median[name]:.0f}" for name in cases)
        + f" ratio_two_vs_one={median['one_worker'] / median['two_workers']:.3f}"
        + f" ratio_vs_local={median['local_pool'] / median['two_workers']:.3f}"
    )
    identical = _same(results["one_worker"], results["local_pool"]) and _same(
        results["two_workers"], results["local_pool"]
    )
    print(f"results identical bit for bit across the three: {identical}")
    rate = {name: steps / seconds for name, seconds in best.items()}
    two_vs_one = rate["two_workers"] / rate["one_worker"]
    vs_local = rate["two_workers"] / rate["local_pool"]
    print(f"targets: ratio_two_vs_one >= 1.7 ({two_vs_one >= 1.7}), ratio_vs_local >= 0.9 ({vs_local >= 0.9})")
    print(
        f"ray: one_worker={rate['one_worker']:.0f} two_workers={rate['two_workers']:.0f} "
        f"local_pool={rate['local_pool']:.0f} ratio_two_vs_one={two_vs_one:.3f} ratio_vs_local={vs_local:.3f}"
    )
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
