"""Bake-off: fedbandits' online LinUCB agent against Vowpal Wabbit, MABWiser and coba, on the same streams.

Needs the ``bakeoff`` extra: ``pip install -e '.[bakeoff]'`` (vowpalwabbit 9.11, mabwiser 2.7, coba 8.1).
No network: the data are scikit-learn's bundled data sets and the synthetic instance.

Streams (every learner sees exactly the same features and rewards, common random numbers):

(a) ``synthetic``: the gaussian-sphere instance of Zhou & Chowdhury (2023) (fedbandits.envs.synthetic),
    d = 10, K = 100 fresh arms per round, reward <x, theta*> + N(0, 0.5^2); one agent, T rounds.  The
    expected rewards are known, so it reports pseudo-regret sum_t (max_k mu_tk - mu_t,a_t) too.
(b) ``digits``, ``breast-cancer`` (``--supervised`` picks others among digits, breast-cancer, wine, iris):
    supervised-to-bandit.  One example per round in a seeded random order, K = the classes, reward 1 for
    the right class and 0 otherwise; the score is the average reward (the accuracy of the choices).
    Each column is standardised over the data set (constant columns left at 0) and z = [1, x] / ||[1, x]||;
    arm k's features are e_k (x) z, so ||row|| = 1 and a linear model on them is the disjoint model of
    Li et al. (2010): one ridge regression per class, with an intercept.

Learners, each in the same loop ``arm = learner.choose(features_t); learner.learn(reward_t[arm])``:

* ``fedbandits``: ``fedbandits.Agent`` built from a ``linucb-independent`` config, constant radius beta
  (``choose`` + ``reward`` with the decision id);
* ``vw-epsilon`` / ``vw-squarecb``: Vowpal Wabbit ``--cb_explore_adf`` with ``--epsilon e`` / with
  ``--squarecb --gamma_scale g``; each arm one line of VW text format with its non-zero features (that
  formatting is part of using VW from numpy features and is in the time); the action is drawn from VW's
  pmf with a seeded generator and VW learns cost = -reward with that probability;
* ``mabwiser``: MABWiser's ``LearningPolicy.LinUCB(alpha, l2_lambda=1)``.  On the supervised streams in
  its own form (arms = the classes, context = z: exactly the disjoint model above).  On the synthetic
  stream the arms are fresh every round, which MABWiser's per-arm models cannot express, so it runs
  one arm whose ridge model scores every candidate row (``predict_expectations``) and learns the
  chosen row (``partial_fit``): the same shared-parameter LinUCB as the others;
* ``coba``: coba's ``LinUCBLearner(alpha, features=["a"])`` with the rows as action features (no
  context), the same linear model; reg is fixed at 1 there, as in every other learner here.

Equal tuning (docs/tuning.md's rule): each learner's main exploration parameter gets the same style of
grid -- 6 values about 3x apart around the library's default -- on a tuning seed (1000; with
``--tuning-runs N`` seeds 1000..1000+N-1, scores summed) that no report run uses; per stream and
learner the value with the largest total reward on the tuning runs wins (= the smallest pseudo-regret
on the synthetic stream, where reward noise is common to all arms), ties to the first in grid order;
the tuned value is then reported on ``--runs`` other seeds (2023, 2024, ...).  A winner on a grid edge
is flagged ``(edge)``.  Nothing else is tuned: every library's defaults otherwise.  On the supervised
streams a tuning run is the same examples in another order (the data sets are small).

Speed: decisions per second = T / wall time of the loop above (choose + reward/learn, in-process, one
thread of BLAS), from the report runs; p50 is the median of per-decision times (perf_counter_ns around
each choose + learn).  CPU time (user + sys of this process) is printed beside the wall time.

Federated rows (the synthetic instance, M silos splitting the stream: user t goes to silo t mod M, as
its round t // M): independent LinUCB agents (no communication), FedLinUCB with protocol ``none``, ``ldp``
and ``distributed-dp`` at epsilon = 1 (delta = 1e-4, batch B), every silo a ``fedbandits.Agent``; every B
rounds each silo's ``sync_payload()`` goes to an in-process aggregator whose prefix every silo adopts with
``apply_sync``; and, for reference, one agent that sees all users in order (the centralised LinUCB).
beta is tuned per line on the tuning seed as above, on the LinUCB grid widened by one value at each end.

The last line: ``ratios: vw-epsilon=X ...``, our agent's decisions per second over each peer's on the
synthetic stream (d = 10, K = 100), measured in the same run.

Usage::

    python benchmarks/bakeoff.py                       # default run, a few minutes
    python benchmarks/bakeoff.py --quick               # smoke run, well under a minute
    python benchmarks/bakeoff.py --out results/bakeoff --figure docs/figures/bakeoff.png
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np

TUNING_SEED = 1000
REPORT_SEED = 2023
SUPERVISED = ("digits", "breast-cancer", "wine", "iris")


# --------------------------------------------------------------------------------------- streams


@dataclass
class Stream:
    """One bandit stream: features (T, K, d) float32, the reward every arm would get (T, K) float64,
    expected rewards (T, K) (pseudo-regret; equal to the rewards on supervised streams), and for
    learners with one model per arm the shared context (T, p) (supervised streams only)."""

    name: str
    features: np.ndarray
    rewards: np.ndarray
    means: np.ndarray
    contexts: np.ndarray | None
    fresh_arms: bool  # True: arm k of round t has nothing to do with arm k of round t + 1

    @property
    def horizon(self) -> int:
        return int(self.features.shape[0])

    @property
    def arms(self) -> int:
        return int(self.features.shape[1])

    @property
    def dim(self) -> int:
        return int(self.features.shape[2])


def synthetic_stream(seed: int, horizon: int, *, agents: int = 1, arms: int = 100, dim: int = 10) -> list[Stream]:
    """The gaussian-sphere instance (one theta*), one stream per agent, drawn with the library's env."""
    from fedbandits.envs.synthetic import GaussianSphere, GaussianSphereParams

    env = GaussianSphere([np.random.default_rng(seed)], GaussianSphereParams(agents=agents, arms=arms, dim=dim))
    features = np.empty((agents, horizon, arms, dim), dtype=np.float32)
    means = np.empty((agents, horizon, arms), dtype=np.float64)
    rewards = np.empty((agents, horizon, arms), dtype=np.float64)
    for t in range(horizon):
        rnd = env.next_round()
        features[:, t] = rnd.features[0]
        means[:, t] = rnd.means[0]
        # the reward of every arm under this round's noise: env.rewards(mean, noise), arm by arm
        rewards[:, t] = env.rewards(rnd.means[0], rnd.noise[0][:, None])
    return [Stream(f"synthetic d={dim} K={arms}", features[m], rewards[m], means[m], None, True) for m in range(agents)]


def _load(name: str) -> tuple[np.ndarray, np.ndarray]:
    from sklearn import datasets  # bundled data only: load_*, never fetch_*

    loader = {
        "digits": datasets.load_digits,
        "breast-cancer": datasets.load_breast_cancer,
        "wine": datasets.load_wine,
        "iris": datasets.load_iris,
    }[name]
    x, y = loader(return_X_y=True)
    x = np.asarray(x, dtype=np.float64)
    if name == "digits":
        # 8 x 8 pixels pooled 2 x 2 to 4 x 4 (a fixed map, nothing fitted): d = 10 x 17 instead of
        # 10 x 65 keeps every learner's d x d work -- and the default run -- small
        x = x.reshape(-1, 4, 2, 4, 2).mean(axis=(2, 4)).reshape(-1, 16)
    return x, np.asarray(y)


def supervised_stream(name: str, seed: int) -> Stream:
    x, y = _load(name)
    std = x.std(axis=0)
    x = (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)
    z = np.hstack([np.ones((len(x), 1)), x])
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    classes, label = np.unique(y, return_inverse=True)
    order = np.random.default_rng(seed).permutation(len(x))
    z, label = z[order], label[order]
    k, p = len(classes), z.shape[1]
    features = np.zeros((len(z), k, k * p), dtype=np.float32)
    for arm in range(k):
        features[:, arm, arm * p : (arm + 1) * p] = z
    rewards = (label[:, None] == np.arange(k)[None, :]).astype(np.float64)
    return Stream(name, features, rewards, rewards, z.astype(np.float64), False)


# -------------------------------------------------------------------------------------- learners


class Learner(Protocol):
    def choose(self, t: int) -> int: ...

    def learn(self, reward: float) -> None: ...


def linucb_config(
    dim: int, horizon: int, beta: float, *, agents: int = 1, algorithm: str = "linucb-independent", **extra: Any
) -> dict[str, Any]:
    """The fedbandits config an agent is built from (the environment section only states M and d)."""
    return {
        "experiment": {"name": "bakeoff", "seed": 0, "runs": 1, "horizon": horizon},
        "environment": {"name": "gaussian-sphere", "agents": agents, "arms": 2, "dim": dim},
        "algorithms": [{"name": algorithm, "label": "agent", "radius": "constant", "beta": beta, **extra}],
    }


class Ours:
    def __init__(self, stream: Stream, beta: float, seed: int) -> None:
        import fedbandits

        self.agent = fedbandits.Agent.from_config(linucb_config(stream.dim, stream.horizon, beta), seed=seed)
        self.features = stream.features
        self.decision = ""

    def choose(self, t: int) -> int:
        decision = self.agent.choose(self.features[t])
        self.decision = decision.decision_id
        return decision.arm

    def learn(self, reward: float) -> None:
        self.agent.reward(self.decision, reward)


class VowpalWabbit:
    def __init__(self, stream: Stream, args: str, seed: int) -> None:
        import vowpalwabbit

        self.ws = vowpalwabbit.Workspace(f"{args} --quiet --random_seed {seed}")
        self.rng = np.random.default_rng(seed)
        self.features = stream.features
        self.lines: list[str] = []
        self.arm, self.prob = 0, 1.0

    def choose(self, t: int) -> int:
        # VW text format, non-zero features only, 5 decimals (|features| <= 1); the fastest of the
        # formattings we tried, about 1/3 of VW's time per decision at K = 100, d = 10
        self.lines = [
            "|a " + " ".join([f"{j}:{v:.5f}" for j, v in enumerate(row) if v]) for row in self.features[t].tolist()
        ]
        pmf = np.asarray(self.ws.predict(self.lines), dtype=np.float64)
        cdf = np.cumsum(pmf)
        self.arm = min(int(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right")), len(pmf) - 1)
        self.prob = float(pmf[self.arm])
        return self.arm

    def learn(self, reward: float) -> None:
        lines = list(self.lines)
        lines[self.arm] = f"0:{-reward:.6g}:{self.prob:.6g} {lines[self.arm]}"
        self.ws.learn(lines)


class MABWiserLinUCB:
    def __init__(self, stream: Stream, alpha: float, seed: int) -> None:
        from mabwiser.mab import MAB, LearningPolicy

        self.shared = stream.fresh_arms
        self.features = stream.features
        self.contexts = stream.contexts
        arms = [0] if self.shared else list(range(stream.arms))
        width = stream.dim if self.shared else stream.contexts.shape[1]  # type: ignore[union-attr]
        self.mab = MAB(arms=arms, learning_policy=LearningPolicy.LinUCB(alpha=alpha, l2_lambda=1.0), seed=seed)
        self.mab.fit(decisions=[], rewards=[], contexts=np.zeros((0, width)))
        self.x = np.zeros((1, width))
        self.arm = 0

    def choose(self, t: int) -> int:
        if self.shared:
            rows = self.features[t]
            scores = [e[0] for e in self.mab.predict_expectations(contexts=rows)]
            self.arm = int(np.argmax(scores))
            self.x = rows[self.arm : self.arm + 1]
        else:
            self.x = self.contexts[t : t + 1]  # type: ignore[index]
            self.arm = int(self.mab.predict(contexts=self.x))
        return self.arm

    def learn(self, reward: float) -> None:
        self.mab.partial_fit(decisions=[0 if self.shared else self.arm], rewards=[reward], contexts=self.x)


class CobaLinUCB:
    def __init__(self, stream: Stream, alpha: float, seed: int) -> None:
        import coba

        self.learner = coba.LinUCBLearner(alpha=alpha, features=["a"], seed=seed)
        self.features = stream.features
        self.actions: list[tuple[float, ...]] = []
        self.arm, self.prob = 0, 1.0

    def choose(self, t: int) -> int:
        self.actions = [tuple(row) for row in self.features[t].tolist()]
        action, self.prob = self.learner.predict(None, self.actions)[:2]
        self.arm = next(i for i, a in enumerate(self.actions) if a is action)
        return self.arm

    def learn(self, reward: float) -> None:
        self.learner.learn(None, self.actions[self.arm], reward, self.prob)


@dataclass(frozen=True)
class Peer:
    name: str
    parameter: str
    grid: tuple[float, ...]
    make: Callable[[Stream, float, int], Learner]


# 6 values about 3x apart around each library's default (LinUCB alpha 1, VW epsilon 0.05, VW SquareCB
# gamma_scale 10); fedbandits' constant radius beta gets the LinUCB grid.  (A first run with 4 values,
# 0.1-3, 0.01-0.3 and 3-100, put 7 of 15 winners on an edge.)
LINUCB_GRID = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
PEERS = (
    Peer("fedbandits", "beta", LINUCB_GRID, lambda s, v, seed: Ours(s, v, seed)),
    Peer(
        "vw-epsilon",
        "epsilon",
        (0.003, 0.01, 0.03, 0.1, 0.3, 1.0),
        lambda s, v, seed: VowpalWabbit(s, f"--cb_explore_adf --epsilon {v:g}", seed),
    ),
    Peer(
        "vw-squarecb",
        "gamma_scale",
        (1.0, 3.0, 10.0, 30.0, 100.0, 300.0),
        lambda s, v, seed: VowpalWabbit(s, f"--cb_explore_adf --squarecb --gamma_scale {v:g}", seed),
    ),
    Peer("mabwiser", "alpha", LINUCB_GRID, lambda s, v, seed: MABWiserLinUCB(s, v, seed)),
    Peer("coba", "alpha", LINUCB_GRID, lambda s, v, seed: CobaLinUCB(s, v, seed)),
)


# ---------------------------------------------------------------------------------------- playing


@dataclass
class Play:
    reward: float  # total reward
    regret: float  # total pseudo-regret
    wall: float  # seconds in the choose + learn loop
    cpu: float  # user + sys seconds of this process in that loop
    p50_us: float
    p99_us: float
    curve: list[float] = field(default_factory=list)  # cumulative pseudo-regret at 50 points


def play(learner: Learner, stream: Stream) -> Play:
    """The one loop every learner runs: choose, then learn the chosen arm's reward."""
    horizon = stream.horizon
    rewards = stream.rewards
    chosen = np.empty(horizon, dtype=np.int64)
    step_ns = np.empty(horizon, dtype=np.int64)
    clock = time.perf_counter_ns
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for t in range(horizon):
        start = clock()
        arm = learner.choose(t)
        learner.learn(float(rewards[t, arm]))
        step_ns[t] = clock() - start
        chosen[t] = arm
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    rows = np.arange(horizon)
    gaps = stream.means.max(axis=1) - stream.means[rows, chosen]
    cumulative = np.cumsum(gaps)
    marks = np.unique(np.linspace(0, horizon - 1, 50).astype(int))
    return Play(
        reward=float(rewards[rows, chosen].sum()),
        regret=float(cumulative[-1]),
        wall=wall,
        cpu=cpu,
        p50_us=float(np.percentile(step_ns, 50) / 1e3),
        p99_us=float(np.percentile(step_ns, 99) / 1e3),
        curve=[float(c) for c in cumulative[marks]],
    )


@dataclass
class Row:
    stream: str
    learner: str
    parameter: str
    value: float
    edge: bool
    tuning_scores: list[float]
    runs: int
    horizon: int
    average_reward: float
    average_reward_sd: float
    regret: float | None
    regret_sd: float | None
    decisions_per_s: float
    cpu_s: float
    wall_s: float
    p50_us: float
    p99_us: float
    curve: list[float]


def tune_and_report(
    peer: Peer,
    kind: str,
    make_stream: Callable[[int], Stream],
    runs: int,
    log: Callable[[str], None],
    tuning_runs: int = 1,
) -> Row:
    # tuning runs on seeds 1000, 1001, ...: none is a report seed (2023, 2024, ...)
    tunings = [make_stream(TUNING_SEED + i) for i in range(tuning_runs)]
    scores = [
        sum(play(peer.make(tuning, value, TUNING_SEED + i), tuning).reward for i, tuning in enumerate(tunings))
        for value in peer.grid
    ]
    best = int(np.argmax(scores))  # first maximum: ties go to the first value in grid order
    value = peer.grid[best]
    plays = []
    for r in range(runs):
        stream = make_stream(REPORT_SEED + r)
        plays.append(play(peer.make(stream, value, REPORT_SEED + r), stream))
    horizon = stream.horizon
    avg = np.array([p.reward / horizon for p in plays])
    reg = np.array([p.regret for p in plays])
    wall = sum(p.wall for p in plays)
    row = Row(
        stream=kind,
        learner=peer.name,
        parameter=peer.parameter,
        value=value,
        edge=best in (0, len(peer.grid) - 1),
        tuning_scores=[float(s) for s in scores],
        runs=runs,
        horizon=horizon,
        average_reward=float(avg.mean()),
        average_reward_sd=float(avg.std(ddof=1)) if runs > 1 else 0.0,
        regret=float(reg.mean()) if stream.fresh_arms else None,
        regret_sd=(float(reg.std(ddof=1)) if runs > 1 else 0.0) if stream.fresh_arms else None,
        decisions_per_s=runs * horizon / wall,
        cpu_s=sum(p.cpu for p in plays),
        wall_s=wall,
        p50_us=float(np.median([p.p50_us for p in plays])),
        p99_us=float(np.median([p.p99_us for p in plays])),
        curve=[float(np.mean(c)) for c in zip(*(p.curve for p in plays), strict=True)],
    )
    log(_format_row(row))
    return row


def _format_row(row: Row) -> str:
    regret = f"{row.regret:9.1f} ±{row.regret_sd:6.1f}" if row.regret is not None else f"{'-':>17}"
    tuned = f"{row.parameter}={row.value:g}{' (edge)' if row.edge else ''}"
    return (
        f"{row.stream:<22} {row.learner:<12} {tuned:<24} {row.average_reward:8.4f} ±{row.average_reward_sd:6.4f} "
        f"{regret} {row.decisions_per_s:12,.0f} {row.p50_us:8.1f} {row.cpu_s:7.1f} {row.wall_s:7.1f}"
    )


HEADER = (
    f"{'stream':<22} {'learner':<12} {'tuned':<24} {'avg reward':>17} {'pseudo-regret':>17} "
    f"{'decisions/s':>12} {'p50 us':>8} {'cpu s':>7} {'wall s':>7}"
)


# ------------------------------------------------------------------------------------- federation

#: (label, algorithm, extra config fields); every line's beta is tuned like the single-machine rows, on a
#: grid two steps wider (the private protocols' noise-aware default radius is 10, at the LinUCB grid's top;
#: with the LinUCB grid, both private lines and the independent agents won on its edges)
FEDERATED_GRID = (0.01, *LINUCB_GRID, 30.0)
FEDERATED_LINES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("centralised (1 agent, all users)", "linucb-independent", {}),
    ("independent (M agents)", "linucb-independent", {}),
    ("fedlinucb none", "fedlinucb", {"protocol": "none"}),
    ("fedlinucb ldp eps=1", "fedlinucb", {"protocol": "ldp", "epsilon": 1.0, "delta": 1e-4}),
    ("fedlinucb distributed-dp eps=1", "fedlinucb", {"protocol": "distributed-dp", "epsilon": 1.0, "delta": 1e-4}),
)


@dataclass
class FedRow:
    line: str
    silos: int
    rounds: int
    batch: int
    beta: float
    edge: bool
    tuning_scores: list[float]
    runs: int
    average_reward: float
    regret: float
    regret_sd: float
    decisions_per_s: float
    cpu_s: float
    wall_s: float
    syncs: int


def federated_play(
    line: tuple[str, str, dict[str, Any]], silos: list[Stream], beta: float, seed: int, batch: int
) -> tuple[float, float, float, float, int]:
    """M silos (one stream each, round t of silo m = user M t + m of the split stream) play T rounds;
    returns total reward, total pseudo-regret, wall and CPU seconds, syncs."""
    import fedbandits
    from fedbandits.online.aggregator import Aggregator

    label, algorithm, extra = line
    m_silos, rounds, dim = len(silos), silos[0].horizon, silos[0].dim
    federated = algorithm == "fedlinucb"
    private = federated and extra.get("protocol", "none") != "none"
    if label.startswith("centralised"):
        config = linucb_config(dim, m_silos * rounds, beta)
        agents = [fedbandits.Agent.from_config(config, seed=seed)] * m_silos
    else:
        fields = {**extra, "batch": batch} if federated else {}
        config = linucb_config(dim, rounds, beta, agents=m_silos, algorithm=algorithm, **fields)
        # a private silo clips a reward outside [-B, B] and counts it, as the simulator does
        agents = [fedbandits.Agent.from_config(config, silo=m, seed=seed, clip_rewards=private) for m in range(m_silos)]
    aggregator = Aggregator.from_config(config) if federated else None
    total = regret = 0.0
    syncs = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for t in range(rounds):
        for agent, stream in zip(agents, silos, strict=True):
            decision = agent.choose(stream.features[t])
            agent.reward(decision.decision_id, float(stream.rewards[t, decision.arm]))
            total += stream.rewards[t, decision.arm]
            regret += stream.means[t].max() - stream.means[t, decision.arm]
        if aggregator is not None and (t + 1) % batch == 0:
            prefix = aggregator.aggregate([agent.sync_payload() for agent in agents])
            for agent in agents:
                agent.apply_sync(prefix)
            syncs += 1
    return float(total), float(regret), time.perf_counter() - wall0, time.process_time() - cpu0, syncs


def federated_rows(
    silos: int,
    rounds: int,
    batch: int,
    runs: int,
    dim: int,
    arms: int,
    log: Callable[[str], None],
    tuning_runs: int = 1,
) -> list[FedRow]:
    rows = []
    tunings = [synthetic_stream(TUNING_SEED + i, rounds, agents=silos, arms=arms, dim=dim) for i in range(tuning_runs)]
    reports = [synthetic_stream(REPORT_SEED + r, rounds, agents=silos, arms=arms, dim=dim) for r in range(runs)]
    for line in FEDERATED_LINES:
        scores = [
            sum(federated_play(line, tuning, beta, TUNING_SEED + i, batch)[0] for i, tuning in enumerate(tunings))
            for beta in FEDERATED_GRID
        ]
        best = int(np.argmax(scores))
        beta = FEDERATED_GRID[best]
        results = [federated_play(line, reports[r], beta, REPORT_SEED + r, batch) for r in range(runs)]
        regrets = np.array([res[1] for res in results])
        wall = sum(res[2] for res in results)
        row = FedRow(
            line=line[0],
            silos=silos,
            rounds=rounds,
            batch=batch,
            beta=beta,
            edge=best in (0, len(FEDERATED_GRID) - 1),
            tuning_scores=[float(s) for s in scores],
            runs=runs,
            average_reward=float(np.mean([res[0] for res in results]) / (silos * rounds)),
            regret=float(regrets.mean()),
            regret_sd=float(regrets.std(ddof=1)) if runs > 1 else 0.0,
            decisions_per_s=runs * silos * rounds / wall,
            cpu_s=sum(res[3] for res in results),
            wall_s=wall,
            syncs=results[0][4],
        )
        tuned = f"beta={row.beta:g}{' (edge)' if row.edge else ''}"
        log(
            f"{row.line:<34} {tuned:<16} {row.average_reward:8.4f} "
            f"{row.regret:9.1f} ±{row.regret_sd:6.1f} {row.decisions_per_s:12,.0f} {row.syncs:5d} "
            f"{row.cpu_s:7.1f} {row.wall_s:7.1f}"
        )
        rows.append(row)
    return rows


FED_HEADER = (
    f"{'line':<34} {'tuned':<16} {'avg rew':>8} {'pseudo-regret':>17} {'decisions/s':>12} {'syncs':>5} "
    f"{'cpu s':>7} {'wall s':>7}"
)


# ----------------------------------------------------------------------------------------- figure


def figure(rows: list[Row], fed: list[FedRow], synthetic: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [peer.name for peer in PEERS]
    colours = dict(zip(names, plt.get_cmap("tab10").colors, strict=False))
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    ax = axes[0, 0]
    for row in rows:
        if row.stream == synthetic:
            t = np.unique(np.linspace(0, row.horizon - 1, 50).astype(int)) + 1
            # coba's and MABWiser's LinUCB coincide when their alpha does: coba's line is dashed
            style = "--" if row.learner == "coba" else "-"
            label = f"{row.learner} ({row.parameter}={row.value:g})"
            ax.plot(t, row.curve, style, label=label, color=colours[row.learner])
    ax.set(title=f"{synthetic}: pseudo-regret", xlabel="round t", ylabel="cumulative pseudo-regret")
    ax.legend(fontsize=8)
    streams = list(dict.fromkeys(row.stream for row in rows))
    supervised = [s for s in streams if s != synthetic]
    width = 0.8 / len(names)
    ax = axes[0, 1]
    for i, name in enumerate(names):
        vals = [next(r.average_reward for r in rows if r.stream == s and r.learner == name) for s in supervised]
        sds = [next(r.average_reward_sd for r in rows if r.stream == s and r.learner == name) for s in supervised]
        ax.bar(np.arange(len(supervised)) + i * width, vals, width, yerr=sds, label=name, color=colours[name])
    ax.set_xticks(np.arange(len(supervised)) + 0.4 - width / 2, supervised)
    ax.set(title="supervised-to-bandit: average reward", ylabel="average reward (accuracy)")
    ax.set_ylim(0, 1)
    ax = axes[1, 0]
    for i, name in enumerate(names):
        vals = [next(r.decisions_per_s for r in rows if r.stream == s and r.learner == name) for s in streams]
        ax.bar(np.arange(len(streams)) + i * width, vals, width, label=name, color=colours[name])
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(streams)) + 0.4 - width / 2, [s.split(" ")[0] for s in streams])
    ax.set(title="choose + learn per second, in-process", ylabel="decisions / s (loaded 2-core machine)")
    ax.legend(fontsize=8)
    ax = axes[1, 1]
    if fed:
        ax.barh([r.line for r in fed][::-1], [r.regret for r in fed][::-1], xerr=[r.regret_sd for r in fed][::-1])
        ax.set(
            title=f"federated: M = {fed[0].silos} silos x {fed[0].rounds} rounds, B = {fed[0].batch}",
            xlabel="total pseudo-regret (all silos)",
        )
        ax.tick_params(axis="y", labelsize=8)
    else:
        ax.set_axis_off()
    fig.suptitle("fedbandits bake-off: tuned on seed 1000, reported on other seeds", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: short streams, 1 report run")
    parser.add_argument("--horizon", type=int, default=None, help="synthetic rounds T (default 2000; quick 200)")
    parser.add_argument(
        "--supervised", default="digits,breast-cancer", help=f"comma-separated, among {', '.join(SUPERVISED)}"
    )
    parser.add_argument("--runs", type=int, default=None, help="report runs per row (default 2; quick 1)")
    parser.add_argument(
        "--tuning-runs", type=int, default=1, help="tuning runs per candidate, seeds 1000, 1001, ... (default 1)"
    )
    parser.add_argument("--silos", type=int, default=None, help="federated M (default 20; quick 4)")
    parser.add_argument("--silo-rounds", type=int, default=None, help="federated rounds per silo (default 1000)")
    parser.add_argument("--batch", type=int, default=25, help="federated sync period B (default 25)")
    parser.add_argument("--no-federated", action="store_true", help="skip the federated rows")
    parser.add_argument("--out", type=Path, default=None, help="write bakeoff.json there")
    parser.add_argument("--figure", type=Path, default=None, help="write the figure (PNG) there")
    args = parser.parse_args(argv)
    quick = args.quick
    horizon = args.horizon or (200 if quick else 2000)
    runs = args.runs or (1 if quick else 2)
    silos = args.silos or (4 if quick else 20)
    silo_rounds = args.silo_rounds or (100 if quick else 1000)
    limit = 200 if quick else None
    supervised = [s.strip() for s in args.supervised.split(",") if s.strip()]
    for name in supervised:
        if name not in SUPERVISED:
            parser.error(f"--supervised: {name!r} is not one of {', '.join(SUPERVISED)}")
    checks = (("--horizon", horizon), ("--runs", runs), ("--tuning-runs", args.tuning_runs), ("--silos", silos))
    for name, value in (*checks, ("--batch", args.batch)):
        if value < 1:
            parser.error(f"{name} must be >= 1, got {value}")

    # the peers, imported here so that --help works without them
    import coba  # noqa: F401
    import mabwiser  # noqa: F401
    import vowpalwabbit  # noqa: F401

    def log(line: str) -> None:
        print(line, flush=True)

    versions = {name: metadata.version(name) for name in ("fedbandits", "vowpalwabbit", "mabwiser", "coba", "numpy")}
    versions["python"] = platform.python_version()
    log(f"bake-off: {' '.join(f'{k} {v}' for k, v in versions.items())}; {os.cpu_count()} CPUs (shared, loaded)")
    tuning_seeds = f"{TUNING_SEED}..{TUNING_SEED + args.tuning_runs - 1}" if args.tuning_runs > 1 else f"{TUNING_SEED}"
    log(f"tuning seed(s) {tuning_seeds}, report seeds {REPORT_SEED}..{REPORT_SEED + runs - 1}")
    log(HEADER)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    synthetic = f"synthetic d=10 K=100 T={horizon}"
    makers: list[tuple[str, Callable[[int], Stream]]] = [
        (synthetic, lambda seed: synthetic_stream(seed, horizon)[0]),
    ]
    for name in supervised:

        def make(seed: int, name: str = name) -> Stream:
            stream = supervised_stream(name, seed)
            if limit is not None:
                stream = Stream(
                    stream.name,
                    stream.features[:limit],
                    stream.rewards[:limit],
                    stream.means[:limit],
                    None if stream.contexts is None else stream.contexts[:limit],
                    stream.fresh_arms,
                )
            return stream

        probe = make(TUNING_SEED)
        makers.append((f"{name} K={probe.arms} d={probe.dim} T={probe.horizon}", make))
    rows = [tune_and_report(peer, kind, make, runs, log, args.tuning_runs) for kind, make in makers for peer in PEERS]

    fed: list[FedRow] = []
    if not args.no_federated:
        log("")
        log(
            f"federated: synthetic d=10 K=100, M = {silos} silos x {silo_rounds} rounds (a stream of "
            f"{silos * silo_rounds} users split round-robin), B = {args.batch}, delta = 1e-4"
        )
        log(FED_HEADER)
        fed = federated_rows(silos, silo_rounds, args.batch, runs, 10, 100, log, args.tuning_runs)
    log(f"total: {time.process_time() - cpu0:.1f} s CPU (user + sys), {time.perf_counter() - wall0:.1f} s wall")

    if args.figure is not None:
        figure(rows, fed, synthetic, args.figure)
        log(f"figure: {args.figure}")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {
            "versions": versions,
            "tuning_seeds": [TUNING_SEED + i for i in range(args.tuning_runs)],
            "report_seeds": [REPORT_SEED + r for r in range(runs)],
            "grids": {peer.name: {peer.parameter: list(peer.grid)} for peer in PEERS},
            "federated_grid": {"beta": list(FEDERATED_GRID)},
            "rows": [asdict(row) for row in rows],
            "federated": [asdict(row) for row in fed],
        }
        (args.out / "bakeoff.json").write_text(json.dumps(record, indent=1) + "\n")
        log(f"results: {args.out / 'bakeoff.json'}")
    ours = next(r.decisions_per_s for r in rows if r.stream == synthetic and r.learner == "fedbandits")
    ratios = " ".join(
        f"{r.learner}={ours / r.decisions_per_s:.2f}"
        for r in rows
        if r.stream == synthetic and r.learner != "fedbandits"
    )
    log(f"ratios: {ratios} (fedbandits decisions/s over each peer's, {synthetic}, same run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
