"""What an online agent reports of itself: its counts, the privacy its releases spend and the noise
in force (:meth:`fedbandits.online.agent.Agent.status`; ``serve`` shows it on its status page).

Budget epochs compose by basic composition: each epoch begun spends what its noise certifies.  A
streaming release (``mechanism = "banded"``) has one epoch, forever: its epsilon never grows, its
prefix noise does (reported).
"""

from __future__ import annotations

import math
from typing import Any

from fedbandits.privacy.discrete_gaussian import SECRET_SHARES_SAMPLER
from fedbandits.privacy.guarantee import not_covering_adaptivity

#: an :class:`~fedbandits.online.agent.Agent` (not imported: the agent imports this module)
Agent = Any


def report(agent: Agent) -> dict[str, object]:
    """An agent's counts and the privacy spent (:meth:`Agent.status`, which expires overdue decisions first)."""
    c = agent.counts
    cal = agent.setup.calibration
    out: dict[str, object] = {
        "algorithm": agent.setup.name,
        "label": agent.setup.label,
        "silo": agent.silo,
        "decisions": c["decisions"],
        "rewarded": c["rewarded"],
        "logged": c["logged"],
        "pending": len(agent.pending),
        "expired": c["expired"],
        "late_rewards": c["late_rewards"],
        "batch_samples": len(agent.completed),
        "syncs": c["syncs"],
        "adopted": c["adopted"],
        "lazy": agent.lazy,
        "private": agent.private,
        "privacy_unit": agent.setup.unit,
        "noise_source": agent.noise_source if agent.private else None,  # None: no noise at all
    }
    if agent.federated:
        out["protocol"] = agent.setup.protocol
    if cal is not None:
        out.update(
            {
                "releases_planned": cal.releases,
                "epsilon": cal.epsilon,
                "delta": cal.delta,
                # the calibration certifies the whole planned schedule; nothing is spent before a release
                "epsilon_spent": cal.epsilon_spent if c["syncs"] > c["epoch_start"] else 0.0,
                "epoch": c["epochs"],
                "observations": c["observations"],
                "feature_norm_max": agent.feature_norm_max,
                "clipped": c["clipped_features"] + c["clipped_rewards"],
                "clipped_features": c["clipped_features"],
                "clipped_rewards": c["clipped_rewards"],
                "psd_repairs": c["psd_repairs"],
                "dropped_contributions": c["dropped_contributions"],
                "guarantee": cal.guarantee,
                "guarantee_reason": cal.guarantee_reason,
            }
        )
        if agent.setup.shuffled:  # what protects one release from whoever sees it with its sender
            out["epsilon_silo"] = cal.epsilon_silo  # type: ignore[union-attr]
        out.update(_noise_report(agent))
        # budget epochs compose by basic composition: each earlier epoch spent what the noise certifies
        per_epoch = _epoch_epsilon(agent)
        begun = c["epochs"] + (1 if c["syncs"] > c["epoch_start"] else 0)
        out["epsilon_lifetime"] = begun * per_epoch
        out["delta_lifetime"] = begun * cal.delta
        out["releases_left"] = cal.releases - (c["syncs"] - c["epoch_start"])
        if agent.setup.streaming:
            out.update(_streaming_report(agent))
        if not agent.lazy:  # decisions act on unreleased data: the simulator withdraws the guarantee too
            out = not_covering_adaptivity(out)
    return out


def _noise_report(agent: Agent) -> dict[str, object]:
    """The noise in force, as the deployment's privacy_report states it: for ``os`` the sampler,
    and for ``ldp`` its grid, per-entry sigma and what it spends of the (epsilon, delta) target by
    the zCDP accounting of what is sampled (its own calibration, slightly above the continuous
    sigma's)."""
    if agent.noise_source == "derived":
        sampler = (
            "discrete Gaussian shares (float acceptance test) from the seeded noise stream"
            if agent.setup.masked
            else "continuous Gaussian from the seeded noise stream"
        )
        return {"noise_sampler": sampler + " (derived: not secret, for tests and parity trials)"}
    if agent.setup.masked:
        return {"noise_sampler": SECRET_SHARES_SAMPLER}
    secret = agent.setup.secret_noise()
    assert secret is not None
    report = secret.report()
    return {
        "noise_sampler": report.pop("secret_noise_sampler"),
        **report,
        # what the secret noise spends (zCDP accounting, meets the target), not the continuous calibration's
        "epsilon_spent": secret.epsilon_spent if agent.counts["syncs"] > agent.counts["epoch_start"] else 0.0,
    }


def _streaming_report(agent: Agent) -> dict[str, object]:
    """A streaming release: one guarantee for every release ever made (the epsilon stays where the first
    release put it), no planned releases, and how its noise grows: the std of one covariance entry's noise
    in the synced prefix (M silos' noise, decoded) now and at 10 times the releases made."""
    setup = agent.setup
    stream = setup.stream
    cal = setup.calibration
    sigma = cal.sigma_cov  # one silo's per-entry std (ldp: the continuous calibration's; ddp: one share's bound)
    secret = setup.secret_noise() if agent.noise_source == "os" else None
    if secret is not None:
        sigma = secret.sigma_cov
    k = max(agent.counts["syncs"], 1)
    return {
        "mechanism": "banded",
        "stream_band": stream.band,
        "horizon_of_guarantee": "unbounded: every release the silo will ever make",
        "releases_planned": None,
        "releases_left": None,
        "prefix_noise_std": math.sqrt(setup.silos * sigma**2 * stream.prefix_variance_at(k)),
        "prefix_noise_std_at_10x": math.sqrt(setup.silos * sigma**2 * stream.prefix_variance_at(10 * k)),
    }


def _epoch_epsilon(agent: Agent) -> float:
    """What one epoch's releases spend: the secret noise's own certificate (``ldp``, ``os``), else the
    calibration's."""
    secret = agent.setup.secret_noise() if agent.noise_source == "os" and not agent.setup.masked else None
    cal = agent.setup.calibration
    assert cal is not None
    return float(secret.epsilon_spent if secret is not None else cal.epsilon_spent)
