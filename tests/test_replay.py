"""Replay (issue #46): on a uniformly logged stream, a learning policy's replayed value matches its
online value on the same stream's distribution; rejection sampling does the same on a non-uniform
logger; a federated private config replays in lockstep; what cannot replay is refused in one line."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from fedbandits.cli import main
from fedbandits.config import config_from_dict
from fedbandits.evaluation.logs import BanditLog
from fedbandits.evaluation.replay import replay
from fedbandits.registry import ALGORITHMS, PolicyContext

K, DIM, SILOS = 4, 3, 2
THETA = np.array([0.6, -0.3, 0.4])


def _contexts(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n rounds of K candidates (features on the unit sphere) and their expected rewards 0.5 + <x, theta>/2."""
    x = rng.normal(size=(n, K, DIM))
    x /= np.linalg.norm(x, axis=2, keepdims=True)
    return x.astype(np.float32), 0.5 + 0.5 * (x @ THETA)


def _log(seed: int, n: int, skewed: bool = False) -> BanditLog:
    """n rounds over SILOS silos, logged uniformly, or (``skewed``) by a logger that shows each round's
    best arm with probability 0.07 and each other arm with 0.31; rewards Bernoulli of the expected reward."""
    rng = np.random.default_rng(seed)
    x, mu = _contexts(rng, n)
    p = np.full((n, K), 1 / K)
    if skewed:
        p[:] = 0.31
        p[np.arange(n), mu.argmax(axis=1)] = 0.07
    a = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    rows = np.arange(n)
    r = (rng.random(n) < mu[rows, a]).astype(float)
    silos = rows % SILOS
    return BanditLog(a, p[rows, a], r, np.zeros((K, 0), np.float32), x, silos, ("a", "b"), f"synthetic {seed}")


def _config(name: str, horizon: int, runs: int = 1, **params: object) -> object:
    return config_from_dict(
        {
            "experiment": {"horizon": horizon, "runs": runs, "seed": 3},
            "environment": {"name": "gaussian-sphere"},
            "algorithms": [{"name": name, "label": "x", "reg": 1.0, **params}],
        }
    )


def _online(seed: int, rounds: int) -> float:
    """LinUCB played online for ``rounds`` rounds on SILOS silos of the same stream: its mean reward."""
    rng = np.random.default_rng(10_000 + seed)
    params = _config("linucb-independent", rounds).algorithms[0].params  # type: ignore[attr-defined]
    ctx = PolicyContext(1, SILOS, K, DIM, rounds, [np.random.default_rng(0)])
    policy = ALGORITHMS["linucb-independent"].factory(params, ctx)
    total = 0.0
    for _ in range(rounds):
        x, mu = _contexts(rng, SILOS)
        choice = policy.select(x[None])[0]
        r = (rng.random(SILOS) < mu[np.arange(SILOS), choice]).astype(float)
        policy.observe(x[np.arange(SILOS), choice][None].astype(np.float64), r[None])
        policy.end_round()
        total += r.sum()
    return total / (rounds * SILOS)


ROUNDS, REPS = 150, 12


def _agrees(replayed: list[float], online: list[float]) -> None:
    """The two means differ by at most 4 standard errors of their difference (estimated from the 12 + 12
    values; a false alarm has probability about 6e-5 under normality)."""
    se = math.sqrt(np.var(replayed, ddof=1) / len(replayed) + np.var(online, ddof=1) / len(online))
    assert abs(np.mean(replayed) - np.mean(online)) <= 4 * se, (np.mean(replayed), np.mean(online), se)


def test_replay_on_a_uniform_log_matches_the_online_value() -> None:
    config = _config("linucb-independent", ROUNDS)
    replayed = []
    for seed in range(REPS):
        done = replay(config, 0, _log(seed, ROUNDS * SILOS * K * 2))  # type: ignore[arg-type]
        assert done.rounds == ROUNDS and done.accepted == ROUNDS * SILOS and done.rate == 1.0
        replayed.append(done.value)
    _agrees(replayed, [_online(seed, ROUNDS) for seed in range(REPS)])
    # and learning shows: the mean beats a uniform choice's 0.5 by a margin
    assert np.mean(replayed) > 0.55


def test_rejection_sampled_replay_on_a_skewed_log_matches_too() -> None:
    """A logger that rarely shows the best arm: plain replay would accept a learner's good choices
    rarely and so under-rate it; keeping a match with probability p_min / p_i removes the bias, at
    rate p_min = 0.07 (checked: the same logs replayed as if uniform fall clearly below)."""
    config = _config("linucb-independent", ROUNDS)
    replayed, plain = [], []
    for seed in range(REPS):
        log = _log(100 + seed, ROUNDS * SILOS * 40, skewed=True)
        done = replay(config, 0, log)  # type: ignore[arg-type]
        assert done.rounds == ROUNDS and done.rate == pytest.approx(0.07)
        replayed.append(done.value)
        as_if_uniform = replay(config, 0, dataclasses.replace(log, propensities=np.full(log.n, 0.25)))  # type: ignore[arg-type]
        plain.append(as_if_uniform.value)
    online = [_online(seed, ROUNDS) for seed in range(REPS)]
    _agrees(replayed, online)
    assert np.mean(plain) < np.mean(online) - 0.05, (np.mean(plain), np.mean(online))


def test_a_private_federation_replays_in_lockstep_until_a_silo_runs_out() -> None:
    config = _config("fedlinucb", 400, runs=3, protocol="ldp", epsilon=1.0, delta=1e-5, batch=10)
    log = _log(7, 2 * K * 60)  # about 60 accepted rounds per silo: fewer than the horizon
    done = replay(config, 0, log)  # type: ignore[arg-type]
    assert 0 < done.rounds < 400 and done.accepted == done.rounds * SILOS
    assert len(set(done.values.round(12))) > 1  # each run's own privacy noise steers its own choices
    assert (done.scanned <= log.n).all()


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("fedlinucb-async", {"protocol": "ldp-prefix", "trigger": "period", "batch": 5}),
        ("feducb", {"epsilon": 1.0}),
        ("feducb-decentralized", {"private": False, "exploration": "thompson", "posterior_scale": 0.3}),
        ("hetofedbandit", {"explore": 10, "exploration": "softmax"}),
    ],
)
def test_the_other_federated_learners_replay_in_lockstep(name: str, params: dict[str, object]) -> None:
    """Each replays (its choice leaves its state as it was) and a seed reproduces the replay."""
    from fedbandits.evaluation.replay import check_replayable

    config = _config(name, 50, runs=2, **params)
    check_replayable(config)  # type: ignore[arg-type]
    log = _log(9, 50 * SILOS * K * 3)
    first, again = (replay(config, 0, log) for _ in range(2))  # type: ignore[arg-type]
    assert first.rounds == 50 and first.accepted == 50 * SILOS
    assert (first.values == again.values).all() and (first.scanned == again.scanned).all()


def test_silos_with_catalogues_of_their_own_replay_as_each_alone() -> None:
    """Silo a offers 3 candidates, silo b 4 (a logger uniform within each, so no rejection): independent
    LinUCB replayed on both in lockstep chooses within each silo's own candidates, so each silo accepts
    exactly the rounds it accepts replayed alone, and the joint value is the mean of the two."""
    from fedbandits.evaluation.logs import concatenate

    full = _log(21, 60 * K * 4)
    kept = full.rows((full.actions < 3) & (full.silos == 0))  # silo a: a uniform logger over 3 candidates
    small = BanditLog(
        kept.actions,
        np.full(kept.n, 1 / 3),
        kept.rewards,
        np.zeros((3, 0), np.float32),
        kept.dynamic[:, :3],
        np.zeros(kept.n, np.int64),
        ("a",),
    )
    other = dataclasses.replace(full.rows(full.silos == 1), silos=np.zeros(int((full.silos == 1).sum()), np.int64))
    other = dataclasses.replace(other, silo_names=("b",))
    both = concatenate([small, other])
    assert both.catalogue is not None and both.n_arms == K
    config = _config("linucb-independent", 40)
    joint, alone_a, alone_b = (replay(config, 0, log) for log in (both, small, other))  # type: ignore[arg-type]
    assert joint.rounds == alone_a.rounds == alone_b.rounds == 40 and joint.rate == 1.0
    assert joint.value == pytest.approx((alone_a.value + alone_b.value) / 2, abs=1e-12)
    assert joint.scanned[0] == alone_a.scanned[0] + alone_b.scanned[0]


def test_a_candidate_mask_needs_a_learner_that_takes_one() -> None:
    params = _config("linucb-super", 10).algorithms[0].params  # type: ignore[attr-defined]
    policy = ALGORITHMS["linucb-super"].factory(params, PolicyContext(1, 1, K, DIM, 10, [np.random.default_rng(0)]))
    with pytest.raises(ValueError, match=r"linucb-super chooses among all K candidates"):
        policy.select(np.zeros((1, 1, K, DIM), np.float32), np.ones((1, 1, K), bool))


def test_what_cannot_replay_is_refused_in_one_line() -> None:
    from fedbandits.evaluation.replay import check_replayable

    refused = r"^algorithms entry 'x' \(club\): replay drives linucb-independent, "
    with pytest.raises(ValueError, match=refused):
        check_replayable(_config("club", 100))  # type: ignore[arg-type]


def test_the_evaluate_command_prints_one_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``fedbandits evaluate`` on two generic silo logs: the logging policy, the uniform policy's four
    estimators and each config entry's replay, one line each, and the same rows in the JSON."""
    paths = []
    for m in range(SILOS):
        log = _log(40 + m, 600)
        path = tmp_path / f"silo-{m}.npz"
        np.savez(path, features=log.dynamic, actions=log.actions, propensities=log.propensities, rewards=log.rewards)
        paths.append(str(path))
    config = tmp_path / "eval.toml"
    config.write_text(
        '[experiment]\nhorizon = 100\nruns = 2\n\n[[algorithms]]\nname = "linucb-independent"\nlabel = "alone"\n\n'
        '[[algorithms]]\nname = "fedlinucb"\nlabel = "fed"\nprotocol = "ldp"\nepsilon = 5.0\nbatch = 5\n'
    )
    figure = tmp_path / "out.png"
    assert (
        main(["evaluate", str(config), "--logs", *paths, "--json", str(tmp_path / "out.json"), "--figure", str(figure)])
        == 0
    )
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("evaluated on ") and "1200 rounds, K = 4, d = 3, 2 silo(s)" in lines[0]
    assert len(lines) == 2 + 1 + 4 + 2, lines
    assert lines[-1].startswith("fed (fedlinucb)") and " replay " in lines[-1] and "accepted" in lines[-1]
    rows = json.loads((tmp_path / "out.json").read_text())["rows"]
    assert [r["method"] for r in rows] == ["on-policy mean", "dm", "ips", "snips", "dr", "replay", "replay"]


def test_the_evaluate_command_refuses_bad_options_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "eval.toml"
    config.write_text('[[algorithms]]\nname = "club"\n')
    np.savez(
        tmp_path / "a.npz",
        features=np.zeros((3, 2, 2)),
        actions=np.zeros(3, int),
        propensities=np.ones(3),
        rewards=np.zeros(3),
    )
    for argv, message in (
        ([str(config), "--logs", str(tmp_path / "a.npz")], "replay drives linucb-independent, fedlinucb"),
        ([str(config), "--logs", str(tmp_path / "a.npz"), "--estimators", "ips,xx"], "--estimators: each of"),
        ([str(config), "--logs", str(tmp_path / "a.npz"), "--silos-by", "position"], "--silos-by and --features go"),
        ([str(config), "--logs", str(tmp_path / "b.npz")], "b.npz: not a readable .npz file"),
    ):
        assert main(["evaluate", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("fedbandits: error: ") and message in err and "\n" not in err, err
