"""Speed of the online agent in process: ``choose`` and ``reward`` one decision at a time.

Instance: d = 10, K = 100 candidate arms per decision, features uniform on the unit sphere (drawn
before timing), rewards <x, theta*> + N(0, 0.1^2) clipped to [-1, 1].  Agents (one each):

* ``linucb``: ``linucb-independent`` (the state learns at every reward: one Sherman-Morrison update);
* ``fedlinucb-ldp``: ``fedlinucb`` with ``protocol = "ldp"``, epsilon = 1, batch 100, lazy (the
  default): rewards are clipped and kept for the next release; a ``sync_payload`` + ``apply_sync``
  every 100 decisions (its time is in the throughput, not in the per-call percentiles).

Each agent first makes ``--warmup`` decisions, then ``--decisions`` timed ones: every call to
``choose`` and to ``reward`` is timed alone with ``time.perf_counter_ns`` (p50 and p99 printed), and
the whole loop (choose + reward + syncs, without the per-call timer reads) is timed for decisions/s.
CPU time (user + sys) is printed beside the wall time: on a shared machine wall time includes the
waits for a core.  Target (issue 30): choose + reward p50 <= 50 us and >= 20,000 decisions/s.

    python benchmarks/agent_speed.py [--decisions 20000] [--warmup 2000]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from fedbandits import Agent, config_from_dict

DIM, ARMS = 10, 100
CONFIGS = {
    "linucb": {"name": "linucb-independent"},
    "fedlinucb-ldp": {"name": "fedlinucb", "protocol": "ldp", "epsilon": 1.0, "delta": 1e-4, "batch": 100},
}


def stream(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, ARMS, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    theta = rng.standard_normal(DIM)
    theta /= np.linalg.norm(theta)
    noise = 0.1 * rng.standard_normal((n, ARMS))
    return x, np.clip(x @ theta.astype(np.float32) + noise, -1.0, 1.0)


def build(name: str, horizon: int) -> Agent:
    config = config_from_dict(
        {
            "experiment": {"horizon": horizon},
            "environment": {"name": "gaussian-sphere", "agents": 10, "arms": ARMS, "dim": DIM},
            "algorithms": [CONFIGS[name]],
        }
    )
    return Agent.from_config(config, seed=0)


def measure(name: str, decisions: int, warmup: int) -> dict[str, float]:
    n = warmup + decisions
    x, r = stream(n)
    agent = build(name, horizon=2 * n)
    sync_every = CONFIGS[name].get("batch")

    def sync(i: int) -> None:
        if sync_every and (i + 1) % sync_every == 0:
            agent.apply_sync(agent.sync_payload() * 10)  # ten silos' worth of the same release

    for i in range(warmup):
        d = agent.choose(x[i])
        agent.reward(d.decision_id, float(r[i, d.arm]))
        sync(i)
    choose_ns = np.empty(decisions, dtype=np.int64)
    reward_ns = np.empty(decisions, dtype=np.int64)
    clock = time.perf_counter_ns
    for j, i in enumerate(range(warmup, n)):
        t0 = clock()
        d = agent.choose(x[i])
        t1 = clock()
        agent.reward(d.decision_id, float(r[i, d.arm]))
        t2 = clock()
        choose_ns[j], reward_ns[j] = t1 - t0, t2 - t1
        sync(i)
    # throughput: a fresh agent, the same decisions, no per-call timer
    agent = build(name, horizon=2 * n)
    cpu0, wall0 = os.times(), time.perf_counter()
    for i in range(n):
        d = agent.choose(x[i])
        agent.reward(d.decision_id, float(r[i, d.arm]))
        sync(i)
    wall = time.perf_counter() - wall0
    cpu1 = os.times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    both = choose_ns + reward_ns
    return {
        "choose_p50": np.percentile(choose_ns, 50) / 1e3,
        "choose_p99": np.percentile(choose_ns, 99) / 1e3,
        "reward_p50": np.percentile(reward_ns, 50) / 1e3,
        "reward_p99": np.percentile(reward_ns, 99) / 1e3,
        "both_p50": np.percentile(both, 50) / 1e3,
        "per_s_wall": n / wall,
        "per_s_cpu": n / cpu if cpu > 0 else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=20000)
    parser.add_argument("--warmup", type=int, default=2000)
    args = parser.parse_args()
    print(f"online agent, d = {DIM}, K = {ARMS}, {args.decisions} timed decisions after {args.warmup} warm-up")
    results = {}
    for name in CONFIGS:
        m = measure(name, args.decisions, args.warmup)
        results[name] = m
        print(
            f"{name:>14}: choose p50 {m['choose_p50']:6.1f} us p99 {m['choose_p99']:6.1f} us | "
            f"reward p50 {m['reward_p50']:6.1f} us p99 {m['reward_p99']:6.1f} us | "
            f"choose+reward p50 {m['both_p50']:6.1f} us | {m['per_s_wall']:8.0f} decisions/s wall, "
            f"{m['per_s_cpu']:8.0f} per CPU-s"
        )
    worst = max(m["both_p50"] for m in results.values())
    slowest = min(m["per_s_wall"] for m in results.values())
    print(f"targets: choose+reward p50 {worst:.1f} us (<= 50), {slowest:.0f} decisions/s wall (>= 20000)")


if __name__ == "__main__":
    main()
