"""Replay: the online value of a policy that learns as it goes, measured on logged data.

Li, Chu, Langford & Wang (2011), Algorithm 1: walk the log in order; on each logged round the policy,
given that round's candidates, chooses; if it chooses the logged action, the round is *accepted*:
the policy sees the logged reward, learns from it, and the reward counts; otherwise the round is
skipped and the policy's state is untouched.  On a log of a uniform logger the accepted rounds are
distributed as rounds the policy would have played online, so the mean accepted reward is an
unbiased estimate of its online value over that many rounds (their Theorem 1).

A non-uniform logger (the propensities vary within a silo): each match is also kept with probability
p_min / p_i, p_min the smallest propensity of the silo's log, so that every round is accepted with
probability p_min whatever the policy chose (the rejection-sampling replay of Dudik, Erhan, Langford
& Li 2012).  A randomized policy (``exploration`` other than "ucb") too: a round is accepted with
probability sum_a pi(a | x) p(a | x) (p_min / p(a | x)) = p_min.  The accepted rounds again follow
the policy's own distribution; the price is a rate p_min, stated with every result.

A federation replays in lockstep, as the simulator plays it: sync round t gives every silo (and
every run) its next accepted round, found by walking that silo's own rows, then the policy observes
the M accepted rewards and syncs.  Replay stops when a silo's rows run out (the rounds completed are
stated) or at the config's horizon, which also fixes every private protocol's calibration and
schedule before any row is read.  The policies are the simulator's, built from the config as it
builds them; those whose choice changes nothing but their state when fed (LinUCB, FedLinUCB under
every protocol, asynchronous FedLinUCB, FedUCB, decentralized FedUCB and HetoFedBandit:
:data:`REPLAYED`) replay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedbandits.config import Config
from fedbandits.evaluation.logs import BanditLog
from fedbandits.registry import ALGORITHMS, PolicyContext
from fedbandits.sim.seeding import choice_rngs, noise_rngs

#: the algorithms replay drives: their ``select`` leaves the learner's state as it is (a randomized one
#: draws from its choice stream, which is not learned state), and they choose through
#: core.exploration.Explorer.  The clustering family serves the environment's arriving users (``bind``),
#: which a log does not name: not replayed.
REPLAYED = ("linucb-independent", "fedlinucb", "fedlinucb-async", "feducb", "feducb-decentralized", "hetofedbandit")


@dataclass(frozen=True)
class Replayed:
    """One config entry replayed on one log, over the config's runs."""

    label: str
    #: mean accepted reward per run, (R,)
    values: np.ndarray
    #: sync rounds completed (each silo one accepted round each)
    rounds: int
    silos: int
    #: logged rows each run walked (accepted or not), (R,)
    scanned: np.ndarray
    #: the rejection-sampling rate p_min, the smallest silo's (1 for a logger uniform within each silo)
    rate: float
    #: the accepted rewards' standard deviation, pooled over runs
    spread: float
    #: every accepted reward was 0 or 1 (clicks): the interval is Wilson's
    binary: bool = False
    #: the silo whose rows ran out first, if replay stopped before the horizon
    stopped_by: str | None = None

    @property
    def accepted(self) -> int:
        """Accepted rounds per run."""
        return self.rounds * self.silos

    @property
    def value(self) -> float:
        return float(self.values.mean())

    def interval(self, z: float = 1.96) -> tuple[float, float]:
        """The interval of one run's mean over its accepted rounds (the replay's sampling error; the spread
        over runs, the privacy noise's and the learner's own randomness, is ``values``): Wilson's score
        interval for 0/1 rewards (a normal one would be [0, 0] when no click was accepted), else normal."""
        n = self.accepted
        if n == 0:
            return math.nan, math.nan
        if self.binary:
            p = self.value
            centre = (p + z * z / (2 * n)) / (1 + z * z / n)
            half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
            return centre - half, centre + half
        half = z * self.spread / math.sqrt(n)
        return self.value - half, self.value + half


def check_replayable(config: Config) -> None:
    """One line if a config entry cannot be replayed (its algorithm)."""
    for alg in config.algorithms:
        if alg.name not in REPLAYED:
            raise ValueError(
                f"algorithms entry {alg.label!r} ({alg.name}): replay drives {', '.join(REPLAYED)}, "
                "whose choice leaves their state unchanged"
            )


def replay(config: Config, index: int, log: BanditLog, *, seed: int = 0) -> Replayed:
    """Replay config entry ``index`` on ``log`` (module docstring), ``seed`` driving the rejection draws."""
    exp = config.experiment
    alg = config.algorithms[index]
    silos = len(log.silo_names)
    runs = list(range(exp.runs))
    noise_seed = exp.seed if exp.noise_seed is None else exp.noise_seed
    stream = config.noise_stream(index)
    ctx = PolicyContext(
        exp.runs,
        silos,
        log.n_arms,
        log.dim,
        exp.horizon,
        noise_rngs(noise_seed, runs, stream),
        choice_rngs=choice_rngs(noise_seed, runs, stream),
    )
    policy = ALGORITHMS[alg.name].factory(alg.params, ctx)
    rows_of = [np.flatnonzero(log.silos == m) for m in range(silos)]
    # each silo's own p_min: a silo's rounds are all accepted at its rate, whatever the policy chose
    rates = np.array([log.propensities[rows].min() if rows.size else 1.0 for rows in rows_of])
    uniform = all(np.allclose(log.propensities[rows], rate) for rows, rate in zip(rows_of, rates, strict=True))
    keep = np.random.default_rng([seed, index])
    cursor = np.zeros((exp.runs, silos), dtype=np.int64)
    sums, squares, rounds = np.zeros(exp.runs), np.zeros(exp.runs), 0
    ends = np.array([len(rows) for rows in rows_of])
    binary, stopped_by = True, None
    for _ in range(exp.horizon):
        chosen = _next_accepted(policy, log, rows_of, cursor, ends, keep, None if uniform else rates)
        if chosen is None:
            stopped_by = log.silo_names[int(np.argmax((cursor >= ends).any(axis=0)))]
            break
        x = log.logged_features(chosen.ravel()).astype(np.float64).reshape(exp.runs, silos, log.dim)
        y = log.rewards[chosen]
        binary &= bool(np.isin(y, (0.0, 1.0)).all())
        policy.observe(x, y)
        policy.end_round()
        sums += y.sum(axis=1)
        squares += (y**2).sum(axis=1)
        rounds += 1
    count = max(rounds * silos, 1)
    values = sums / count if rounds else np.full(exp.runs, np.nan)  # nothing accepted: no value
    variance = float(np.mean(squares / count - values**2)) if rounds else 0.0
    spread = math.sqrt(max(variance, 0.0))
    return Replayed(
        alg.label,
        values,
        rounds,
        silos,
        cursor.sum(axis=1),
        1.0 if uniform else float(rates.min()),
        spread,
        binary,
        stopped_by,
    )


def _next_accepted(
    policy: object,
    log: BanditLog,
    rows_of: list[np.ndarray],
    cursor: np.ndarray,
    ends: np.ndarray,
    keep: np.random.Generator,
    rates: np.ndarray | None,
) -> np.ndarray | None:
    """Each (run, silo)'s next accepted row, (R, M), advancing ``cursor`` past every row walked; None
    when a silo's rows run out first."""
    runs, silos = cursor.shape
    chosen = np.full((runs, silos), -1, dtype=np.int64)
    pending = np.ones((runs, silos), dtype=bool)
    while pending.any():
        if (cursor[pending] >= np.broadcast_to(ends, cursor.shape)[pending]).any():
            return None
        position = np.minimum(cursor, ends - 1)
        rows = np.stack([rows_of[m][position[:, m]] for m in range(silos)], axis=1)
        offered = log.available(rows.ravel())  # None unless the silos have catalogues of their own
        choice = policy.select(  # type: ignore[attr-defined]
            log.features(rows.ravel()).reshape(runs, silos, log.n_arms, log.dim),
            None if offered is None else offered.reshape(runs, silos, log.n_arms),
        )
        match = pending & (choice == log.actions[rows])
        if rates is not None:  # rejection sampling: keep a match with probability p_min / p_i (its silo's p_min)
            match &= keep.random(match.shape) < rates[None, :] / log.propensities[rows]
        chosen[match] = rows[match]
        cursor[pending] += 1
        pending &= ~match
    return chosen
