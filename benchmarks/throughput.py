"""Throughput of fedbandits' simulator on the GaussianSphere instance: reference, floor, private protocols.

Instance: environment ``gaussian-sphere`` with d = 10, K = 100 fresh arms per agent and round, M = 100
agents; algorithm non-private FedLinUCB (``fedlinucb``, protocol ``none``, batch B = 25, theory radius
with reg = 1, alpha = 0.01, n = M t samples).  Every measurement reports agent-steps per second,
R * M * T / seconds (one agent-step = one agent choosing one arm in one round).

(a) fedbandits: ``fedbandits.sim.runner.run_experiment(config, workers=1)`` in this process, R runs of
    T rounds (``runs_per_task = 1``); timed with ``time.perf_counter`` around the call.
(b) reference: a plain per-agent loop like the papers' public code.  For every run and round a Python
    loop over the M agents; each agent draws its K contexts from its own ``np.random.default_rng``
    (K x (d-1) standard normals, rows scaled to norm 1/sqrt(2), a 1/sqrt(2) entry appended), computes
    ``A_inv = np.linalg.inv(A)`` every round, theta = A_inv b, the UCBs
    X theta + beta sqrt(rowsum((X A_inv) * X)), takes the argmax, draws the reward
    x.theta* + 0.5 N(0, 1), records its pseudo-regret and updates A_i, b_i and its batch statistics;
    every B rounds all agents' batch statistics are summed into the shared W_syn, U_syn and every
    agent restarts from A = I + W_syn, b = U_syn (Algorithm 1 of Zhou & Chowdhury 2023).  beta is
    fedbandits' theory radius.  It is slow, so it runs fewer runs/rounds and is converted to a rate
    (its per-step cost does not depend on t: it inverts a d x d matrix every step either way).
(c) floor: only the environment's random numbers, drawn with numpy's default Generator
    (``np.random.default_rng``, PCG64, float64): per run and round ``standard_normal((M, K, d-1))``
    for the contexts and ``standard_normal(M)`` for the reward noise, nothing else.
(d) (a) with ``workers=2``: a process pool of two workers (one BLAS thread each, forked from a fork
    server that has imported fedbandits; the server starts once per process, about 0.7 s) running the
    same R runs; pool start-up is included in the time.  R must be even so both get equal work.
(e) LDP-FedLinUCB: (a) with ``protocol = "ldp"``, epsilon = 1, delta = 1e-4, calibration ``tight``
    (same instance, B, radius, R and T; clipping, calibration and the release noise all in the time).
(f) SDP-FedLinUCB by the vector-sum protocol: (a) with ``protocol = "sdp-vector-sum"``, epsilon = 1,
    delta = 0.1 (the fast form of the protocol, as the simulator always uses).
(a), (e) and (f) are timed interleaved, a, e, f, a, e, f, ... (``--repeat`` rounds), keeping the best
of each, so that slow phases of a noisy machine hit all three alike.  If fedbandits refuses (e) or (f)
with a ValueError, its line says FAILED with the error, it is not retried, and its ratios print as nan.

Printed ratios (per agent-step), on the last line:
``ratios: vs_reference=X vs_floor=Y two_workers=Z ldp_vs_nonprivate=U vecsum_vs_ldp=V`` with
X = time(b)/time(a), Y = time(a)/time(c), Z = time(a)/time(d), U = time(e)/time(a),
V = time(f)/time(e).  Targets: (a) >= 10x faster than (b) (X >= 10); (a) at most 1.2x the time of
(c) (Y <= 1.2); two workers >= 1.7x one worker (Z >= 1.7); LDP at most 1.15x the time of the
non-private run (U <= 1.15); vector-sum at most 1.5x the time of LDP (V <= 1.5).

Usage::

    python benchmarks/throughput.py            # full benchmark, (a), (e), (f) take roughly 10-20 s each
    python benchmarks/throughput.py --quick    # a few seconds in all
    python benchmarks/throughput.py --repeat 3 # best of 3 timings of each measurement (on a busy machine)
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
from threadpoolctl import threadpool_info

import fedbandits
from fedbandits.core.ucb import ConfidenceRadius
from fedbandits.sim.runner import run_experiment
from fedbandits.sim.seeding import env_rngs

DIM = 10
ARMS = 100
AGENTS = 100
BATCH = 25
REG = 1.0
ALPHA = 0.01
NOISE_SD = 0.5
SEED = 2024
HALF_SQRT2 = math.sqrt(0.5)

FULL = {"runs": 4, "horizon": 2000, "reference_horizon": 500}
QUICK = {"runs": 2, "horizon": 100, "reference_horizon": 25}

# protocol settings of fedlinucb per measurement: (a) and (d) non-private, (e) LDP, (f) SDP by vector sum
NONPRIVATE: dict[str, object] = {"protocol": "none"}
LDP: dict[str, object] = {"protocol": "ldp", "epsilon": 1.0, "delta": 1e-4, "calibration": "tight"}
VECSUM: dict[str, object] = {"protocol": "sdp-vector-sum", "epsilon": 1.0, "delta": 0.1}


def make_config(runs: int, horizon: int, privacy: dict[str, object] = NONPRIVATE) -> fedbandits.Config:
    return fedbandits.config_from_dict(
        {
            "experiment": {"seed": SEED, "runs": runs, "horizon": horizon, "runs_per_task": 1, "name": "throughput"},
            "environment": {"name": "gaussian-sphere", "agents": AGENTS, "arms": ARMS, "dim": DIM},
            "algorithms": [
                {"name": "fedlinucb", "batch": BATCH, "reg": REG, "alpha": ALPHA, "radius": "theory", **privacy},
            ],
        }
    )


def time_fedbandits(
    runs: int, horizon: int, workers: int, privacy: dict[str, object] = NONPRIVATE
) -> tuple[float, fedbandits.Results]:
    """(a), (d), (e), (f): wall time of run_experiment, including (for workers > 1) the pool start-up."""
    config = make_config(runs, horizon, privacy)
    start = time.perf_counter()
    results = run_experiment(config, workers=workers)
    return time.perf_counter() - start, results


def theory_beta(n: int, dim: int) -> float:
    """Lemma C.4 of Zhou & Chowdhury (2023) with sigma = S = L = 1, as fedbandits' theory radius."""
    return math.sqrt(2.0 * math.log(2.0 / ALPHA) + dim * math.log1p(n / (dim * REG))) + math.sqrt(REG)


def reference_run(run: int, horizon: int) -> np.ndarray:
    """(b) one run of non-private FedLinUCB, agent by agent; returns each agent's cumulative pseudo-regret."""
    m, k, d = AGENTS, ARMS, DIM
    run_rng = np.random.default_rng([SEED, run])
    g = run_rng.standard_normal(d - 1)
    theta_star = np.append(HALF_SQRT2 * g / np.linalg.norm(g), HALF_SQRT2)
    rngs = [np.random.default_rng([SEED, run, i]) for i in range(m)]

    eye = REG * np.eye(d)
    w_syn = np.zeros((d, d))  # synced sum of x x^T over all agents
    u_syn = np.zeros(d)  # synced sum of x y
    a_mat = np.tile(eye, (m, 1, 1))  # A_i = I + W_syn + W_i
    b_vec = np.zeros((m, d))  # b_i = U_syn + U_i
    w_loc = np.zeros((m, d, d))  # W_i: agent i's statistics since the last sync
    u_loc = np.zeros((m, d))
    regret = np.zeros(m)
    x_all = np.empty((k, d))
    x_all[:, -1] = HALF_SQRT2
    for t in range(1, horizon + 1):
        beta = theory_beta(m * (t - 1), d)  # n = all agents' samples so far, as FedLinUCB.radius_samples()
        for i in range(m):
            raw = rngs[i].standard_normal((k, d - 1))
            x_all[:, :-1] = HALF_SQRT2 * raw / np.linalg.norm(raw, axis=1, keepdims=True)
            a_inv = np.linalg.inv(a_mat[i])
            theta = a_inv @ b_vec[i]
            ucb = x_all @ theta + beta * np.sqrt(np.sum((x_all @ a_inv) * x_all, axis=1))
            arm = int(np.argmax(ucb))
            means = x_all @ theta_star
            regret[i] += means.max() - means[arm]
            x = x_all[arm]
            y = means[arm] + NOISE_SD * rngs[i].standard_normal()
            xx = np.outer(x, x)
            a_mat[i] += xx
            b_vec[i] += y * x
            w_loc[i] += xx
            u_loc[i] += y * x
        if t % BATCH == 0:
            w_syn += w_loc.sum(axis=0)
            u_syn += u_loc.sum(axis=0)
            a_mat[:] = eye + w_syn
            b_vec[:] = u_syn
            w_loc[:] = 0.0
            u_loc[:] = 0.0
    return regret


def time_reference(runs: int, horizon: int) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    regret = np.stack([reference_run(r, horizon) for r in range(runs)])
    return time.perf_counter() - start, regret


def time_floor(runs: int, horizon: int) -> float:
    """(c) only the environment's random numbers, with numpy's default Generator in float64."""
    rngs = [np.random.default_rng([SEED, r]) for r in range(runs)]
    start = time.perf_counter()
    for rng in rngs:
        for _ in range(horizon):
            rng.standard_normal((AGENTS, ARMS, DIM - 1))
            rng.standard_normal(AGENTS)
    return time.perf_counter() - start


_T = TypeVar("_T")


def best_of(repeat: int, measure: Callable[[], tuple[float, _T]]) -> tuple[float, _T]:
    """The fastest of ``repeat`` timings (and its result): the least disturbed by other load."""
    return min((measure() for _ in range(repeat)), key=lambda timed: timed[0])


@dataclass(frozen=True)
class Refused:
    """A measurement that fedbandits refused with a ValueError after ``seconds`` (not retried)."""

    error: ValueError
    seconds: float


def best_of_interleaved(
    repeat: int, measures: list[Callable[[], tuple[float, _T]]]
) -> list[tuple[float, _T] | Refused]:
    """The fastest of ``repeat`` timings of each measurement, timed in turn (m1, m2, ..., m1, m2, ...).

    A measurement that raises ValueError (a request the library cannot serve) is returned as
    :class:`Refused` and left out of the later repeats; the others go on.
    """
    timings: list[list[tuple[float, _T]]] = [[] for _ in measures]
    refused: list[Refused | None] = [None for _ in measures]
    for _ in range(repeat):
        for i, measure in enumerate(measures):
            if refused[i] is not None:
                continue
            start = time.perf_counter()
            try:
                timings[i].append(measure())
            except ValueError as exc:
                refused[i] = Refused(exc, time.perf_counter() - start)
    return [r if r is not None else min(timed, key=lambda t: t[0]) for r, timed in zip(refused, timings, strict=True)]


def report_private(label: str, outcome: tuple[float, fedbandits.Results] | Refused, steps: int) -> float:
    """Prints (e) or (f); returns its time, nan if fedbandits refused the run."""
    if isinstance(outcome, Refused):
        print(
            f"{label} FAILED after {outcome.seconds:.2f} s: {type(outcome.error).__name__}: {outcome.error} "
            "(a refusal of fedbandits on this instance; not timed)"
        )
        return math.nan
    seconds, results = outcome
    (alg,) = results.algorithms.values()  # labelled "fedlinucb ldp eps=1", ...: the one entry
    print(
        f"{label}{seconds:8.2f} s  {steps / seconds:12,.0f} agent-steps/s  "
        f"(inside: environment {results.env_seconds:.2f} s, policy {alg.seconds:.2f} s)"
    )
    return seconds


def target(value: float, ok: bool) -> str:
    return "not measured" if math.isnan(value) else ("met" if ok else "NOT met")


def source_version() -> str:
    """Git commit of the fedbandits sources measured (and whether they differ from it)."""
    src = Path(fedbandits.__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=src, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "."], cwd=src, capture_output=True, text=True)
    except OSError:
        return "unknown"
    if head.returncode:
        return "not a git checkout"
    return head.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


def blas_setting() -> str:
    parts = [
        f"{info.get('internal_api', info.get('user_api'))} {info.get('version')} num_threads={info.get('num_threads')}"
        for info in threadpool_info()
        if info.get("user_api") == "blas"
    ]
    env = [
        f"{v}={os.environ[v]}"
        for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
        if v in os.environ
    ]
    return "; ".join(parts or ["no BLAS found by threadpoolctl"]) + (f" ({', '.join(env)})" if env else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: the whole script runs in a few seconds")
    parser.add_argument("--runs", type=int, help="runs R for (a), (c)-(f); even, >= 2 (default 4, quick 2)")
    parser.add_argument("--horizon", type=int, help="rounds T >= 25 for (a), (c)-(f) (default 2000, quick 100)")
    parser.add_argument(
        "--reference-horizon", type=int, help="rounds of the single reference run (b) (default 500, quick 25)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="time each measurement this many times, keep the best")
    args = parser.parse_args(argv)
    sizes = dict(QUICK if args.quick else FULL)
    for key in sizes:
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    runs, horizon, ref_horizon = sizes["runs"], sizes["horizon"], sizes["reference_horizon"]
    if runs < 2 or runs % 2:
        parser.error(f"--runs must be even and >= 2 so both workers get equal work, got {runs}")
    if horizon < BATCH:
        parser.error(f"--horizon must be >= the batch B = {BATCH}, got {horizon}")
    if ref_horizon < 1 or args.repeat < 1:
        parser.error("--reference-horizon and --repeat must be >= 1")
    repeat = args.repeat
    ref_runs = 1

    # the reference's radius must be fedbandits' theory radius (same exploration, same work)
    radius: ConfidenceRadius = make_config(2, BATCH).algorithms[0].params.confidence_radius()
    for n in (0, AGENTS, AGENTS * horizon):
        assert math.isclose(theory_beta(n, DIM), radius(float(n), DIM, REG), rel_tol=1e-12), n

    steps = runs * AGENTS * horizon
    ref_steps = ref_runs * AGENTS * ref_horizon
    print(
        f"fedbandits {fedbandits.__version__} (source {source_version()}), numpy {np.__version__}, "
        f"python {platform.python_version()}"
    )
    print(f"CPUs: {os.cpu_count()}; BLAS: {blas_setting()}")
    print(
        f"bit generators: fedbandits env {type(env_rngs(SEED, [0])[0].bit_generator).__name__} (float32 contexts); "
        f"reference and floor np.random.default_rng = {type(np.random.default_rng().bit_generator).__name__} (float64)"
    )
    print(f"instance: gaussian-sphere d={DIM} K={ARMS} M={AGENTS}, fedlinucb protocol=none B={BATCH}")
    print(
        "(e): protocol=ldp epsilon=1 delta=1e-4 calibration=tight; (f): protocol=sdp-vector-sum epsilon=1 delta=0.1; "
        "(a), (e), (f) timed interleaved"
    )
    print(f"(a), (c)-(f): R={runs} runs x T={horizon} rounds x M={AGENTS} agents = {steps:,} agent-steps")
    print(
        f"(b): R={ref_runs} run x T={ref_horizon} rounds x M={AGENTS} agents = {ref_steps:,} agent-steps "
        "(fewer than (a): it is slow; converted to a per-agent-step rate)"
    )
    print()

    # warm-up (imports, first-call allocations, privacy accounting libraries), not timed
    for privacy in (NONPRIVATE, LDP, VECSUM):
        time_fedbandits(1, BATCH, workers=1, privacy=privacy)
    reference_run(0, 2)

    # (a), (e), (f) interleaved within each repeat: a, e, f, a, e, f, ...
    out_a, out_e, out_f = best_of_interleaved(
        repeat,
        [
            lambda: time_fedbandits(runs, horizon, workers=1),
            lambda: time_fedbandits(runs, horizon, workers=1, privacy=LDP),
            lambda: time_fedbandits(runs, horizon, workers=1, privacy=VECSUM),
        ],
    )
    if isinstance(out_a, Refused):
        raise out_a.error
    t_a, res_a = out_a
    rate_a = steps / t_a
    alg = res_a.algorithms["fedlinucb"]
    print(
        f"(a) fedbandits, 1 process:    {t_a:8.2f} s  {rate_a:12,.0f} agent-steps/s  "
        f"(inside: environment {res_a.env_seconds:.2f} s, policy {alg.seconds:.2f} s)"
    )

    t_b, ref_regret = best_of(repeat, lambda: time_reference(ref_runs, ref_horizon))
    rate_b = ref_steps / t_b
    print(
        f"(b) reference per-agent loop: {t_b:8.2f} s  {rate_b:12,.0f} agent-steps/s  "
        f"(on {ref_steps:,} agent-steps; {steps / rate_b:.1f} s projected for (a)'s work)"
    )

    t_c, _ = best_of(repeat, lambda: (time_floor(runs, horizon), None))
    rate_c = steps / t_c
    print(f"(c) floor, RNG draws only:    {t_c:8.2f} s  {rate_c:12,.0f} agent-steps/s")

    t_d, res_d = best_of(repeat, lambda: time_fedbandits(runs, horizon, workers=2))
    rate_d = steps / t_d
    print(
        f"(d) fedbandits, 2 workers:    {t_d:8.2f} s  {rate_d:12,.0f} agent-steps/s"
        "  (pool start-up included; best of --repeat)"
    )
    t_e = report_private("(e) LDP-FedLinUCB, 1 process: ", out_e, steps)
    t_f = report_private("(f) SDP vector-sum, 1 process:", out_f, steps)

    same = np.array_equal(alg.curves, res_d.algorithms["fedlinucb"].curves)
    print()
    hint = "" if same else " (the spawned workers import fedbandits afresh: were its sources edited meanwhile?)"
    print(f"check: 1-worker and 2-worker results identical: {same}{hint}")
    if ref_horizon <= horizon:
        fb_regret = np.interp(ref_horizon, res_a.grid, alg.curves.mean(axis=0)) / AGENTS
        print(
            f"check: mean per-agent pseudo-regret after {ref_horizon} rounds: reference {ref_regret.mean():.2f}, "
            f"fedbandits {fb_regret:.2f} (same algorithm, different random numbers)"
        )

    vs_reference = rate_a / rate_b  # time(b)/time(a) per agent-step
    vs_floor = rate_c / rate_a  # time(a)/time(c) per agent-step
    two_workers = rate_d / rate_a  # time(1 worker)/time(2 workers) per agent-step
    ldp_vs_nonprivate = t_e / t_a  # same work: time(e)/time(a); nan if (e) was refused
    vecsum_vs_ldp = t_f / t_e  # same work: time(f)/time(e); nan if (e) or (f) was refused
    print(
        f"note: vs_reference * vs_floor = time(b)/time(c) = {rate_c / rate_b:.2f} (fixed by numpy and the reference), "
        f"so vs_reference >= 10 needs vs_floor <= {rate_c / rate_b / 10:.2f} here"
    )
    print(
        f"targets: vs_reference >= 10 [{'met' if vs_reference >= 10 else 'NOT met'}], "
        f"vs_floor <= 1.2 [{'met' if vs_floor <= 1.2 else 'NOT met'}], "
        f"two_workers >= 1.7 [{'met' if two_workers >= 1.7 else 'NOT met'}], "
        f"ldp_vs_nonprivate <= 1.15 [{target(ldp_vs_nonprivate, ldp_vs_nonprivate <= 1.15)}], "
        f"vecsum_vs_ldp <= 1.5 [{target(vecsum_vs_ldp, vecsum_vs_ldp <= 1.5)}]"
    )
    print(
        f"ratios: vs_reference={vs_reference:.2f} vs_floor={vs_floor:.2f} two_workers={two_workers:.2f} "
        f"ldp_vs_nonprivate={ldp_vs_nonprivate:.2f} vecsum_vs_ldp={vecsum_vs_ldp:.2f}"
    )


if __name__ == "__main__":
    main()
