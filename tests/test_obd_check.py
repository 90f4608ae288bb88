"""The Open Bandit Dataset's evaluation of the estimators (issue #46): Thompson sampling's position
probabilities against their exact form, the check's rows in both directions on the dataset's
layout, and its refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats

from datafixtures import OBD_ARMS, write_obd_like
from fedbandits.cli import main
from fedbandits.evaluation.obd_check import bts_positions, check, read_prior


def test_thompson_sampling_position_probabilities_match_their_exact_form() -> None:
    """P(item k is drawn highest) = integral of f_k(t) prod_{j != k} F_j(t) dt, exactly; the Monte Carlo
    estimate from 200,000 rankings is within 4 of its standard errors (at most 0.5 / sqrt(2e5) = 0.0011)."""
    alpha, beta = np.array([3.0, 5.0, 2.0, 8.0]), np.array([40.0, 50.0, 30.0, 60.0])
    got = bts_positions(alpha, beta, 200_000, seed=1)
    dists = [stats.beta(a, b) for a, b in zip(alpha, beta, strict=True)]
    for k in range(4):
        others = [d for j, d in enumerate(dists) if j != k]
        exact, _ = integrate.quad(
            lambda t, k=k, others=others: dists[k].pdf(t) * np.prod([d.cdf(t) for d in others]), 0, 1
        )
        assert got[k, 0] == pytest.approx(exact, abs=4 * 0.5 / np.sqrt(200_000)), k
    assert np.allclose(got.sum(axis=0), 1.0)  # each position shows exactly one item
    assert (got.sum(axis=1) <= 1.0 + 1e-12).all()  # an item is shown at most once per ranking


def _prior(path: Path, arms: dict[str, int]) -> Path:
    lines = []
    for campaign, k in arms.items():
        lines += [f"[{campaign}]", f"alpha = {[float(2 + j) for j in range(k)]}", f"beta = {[200.0] * k}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_check_estimates_each_policy_from_the_others_log(tmp_path: Path) -> None:
    folder = write_obd_like(tmp_path / "obd")
    prior = _prior(tmp_path / "prior.toml", OBD_ARMS)
    rows = check(folder, "men", prior=prior, estimators=("ips", "dr"), draws=2000)
    assert [(r.policy, r.estimator) for r in rows] == [
        ("random, from BTS's log", "ips"),
        ("random, from BTS's log", "dr"),
        ("BTS, from Random's log", "ips"),
        ("BTS, from Random's log", "dr"),
    ]
    for r in rows:
        assert r.truth > 0 and r.relative_error == pytest.approx(abs(r.estimate.value - r.truth) / r.truth)


def test_a_bad_prior_is_refused_in_one_line(tmp_path: Path) -> None:
    path = _prior(tmp_path / "prior.toml", {"men": 3})
    with pytest.raises(ValueError, match=r"prior.toml: men.alpha must be 4 positive numbers, got shape \(3,\)"):
        read_prior(path, "men", 4)
    with pytest.raises(ValueError, match=r"prior.toml: no table for campaign 'women'"):
        read_prior(path, "women", 4)


def test_the_check_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_obd_like(tmp_path / "obd")
    assert main(["evaluate", "--check-estimators", "--obd", str(folder), "--campaign", "women"]) == 0
    out = capsys.readouterr().out
    assert out.count("random, from BTS's log") == 4 and "needs --bts-prior" in out
    assert main(["evaluate", "--obd", str(folder)]) == 2
    assert "give CONFIG.toml (its entries are replayed), or --check-estimators" in capsys.readouterr().err
