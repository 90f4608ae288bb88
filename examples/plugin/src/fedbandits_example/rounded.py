"""``ldp-rounded``: the ``ldp`` tree protocol with every released message rounded to a grid.

Each silo runs the built-in ``ldp`` randomizer (Zhou & Chowdhury 2023, Algorithm 2: Gaussian noise on
every p-sum of its batch statistics) and then rounds each entry of the noisy message to a multiple of
``GRID`` times that entry's noise std before it leaves the silo.  Rounding is a fixed function of the
already private message (post-processing), so the silo-level guarantee is exactly ``ldp``'s: the
calibration is ``ldp``'s, reused unchanged (only relabelled).  The server sums and prefix-releases the
rounded messages as ``ldp``'s analyzer does.  The rounding error (at most half a step per entry, a
variance of step^2 / 12 = sigma^2 / 192 at GRID = 1/4) is small next to the noise.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from fedbandits.plugins import NoParams, ProtocolEntry
from fedbandits.privacy.calibration import NoiseCalibration, calibrate
from fedbandits.protocols.gaussian_tree import GaussianTreeProtocol
from fedbandits.registry import PolicyContext

#: the grid step, in units of each entry's noise std
GRID = 0.25


class RoundedLDPProtocol(GaussianTreeProtocol):
    """``ldp`` (Algorithm 2, S = identity) whose messages are rounded to a grid of GRID noise stds."""

    name = "ldp-rounded"
    description = "ldp with every message rounded to a grid of 1/4 noise std (post-processing: ldp's guarantee)"

    def _messages(self, gamma: np.ndarray) -> np.ndarray:
        messages = super()._messages(gamma)  # (R, M, P) noisy p-sums, P packed entries
        step = GRID * self.sigma  # (P,)
        return np.round(messages / step) * step


def calibrate_rounded(params: Any, *, horizon: int, agents: int, dim: int) -> NoiseCalibration:
    """``ldp``'s calibration for the same request, relabelled: post-processing keeps its guarantee."""
    cal = calibrate(replace(params.privacy_spec(), protocol="ldp"), agents=agents, horizon=horizon, batch=params.batch)
    details = {**cal.details, "calibrated_as": "ldp (rounding is post-processing)", "grid": f"{GRID} noise std"}
    return replace(cal, protocol=RoundedLDPProtocol.name, details=details)


def build(cal: NoiseCalibration, ctx: PolicyContext) -> RoundedLDPProtocol:
    return RoundedLDPProtocol(ctx.n_runs, ctx.n_agents, ctx.dim, cal, ctx.noise_rngs, record=ctx.record_transcript)


ENTRY = ProtocolEntry(
    RoundedLDPProtocol.name,
    RoundedLDPProtocol.description,
    NoParams,
    build,
    private=True,
    calibrate=calibrate_rounded,
    audit_view="messages",  # the transcript's "messages": every silo's rounded release
)
