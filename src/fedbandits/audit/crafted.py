"""Neighbouring datasets built to be worst cases, written as ``data-files`` silos.

Every audit dataset has d = 2 and two arms per user, users served in file order and rewards equal
to the file's expected rewards (``reward_noise_sd = 0``): a run's releases then depend only on
the data and on the privacy noise.  Silo 0 is the victim; the other silos are clones of the
victim's dataset D (the same users in both datasets), so that a shuffler has the most to hide
among.  D and D' differ in the victim's first user only.

``steering`` (the within-batch attack): later users offer the arms e1 and e2 with expected
reward 1 on both.  The first user offers the same two arms, with rewards (1, -1) in D and
(-1, 1) in D'.  A learner with a small confidence radius plays e1 for the first user (a tie
broken to the first arm), observes +1 (D) or -1 (D'), and -- if it acts on its own unreleased
data -- keeps playing e1 (D) or switches to e2 for *every later user* (D'): the released batch
sums differ by (B - 1)(e1 e1^T - e2 e2^T) and more, whatever one user's sensitivity.  A lazy
learner plays e1 for the whole first batch in both, and the sums differ by one user's bias.

``full-sensitivity``: the first user offers only e1 with reward 1 (D), or only e2 with reward -1
(D'); every later user offers only e1 with reward 1 (no choice, so the later statistics do not
depend on the noise).  Every release containing the first user then differs by
e1 e1^T - e2 e2^T (Frobenius norm sqrt(2), the covariance sensitivity) and e1 + e2 (norm
sqrt(2)): a Gaussian privacy loss of 3/4 of the calibration's worst case in mu^2
(nodes (2 / sigma_cov^2 + 2 / sigma_bias^2) against nodes (2 / sigma_cov^2 + 4 / sigma_bias^2)
with sigma_cov / sigma_bias = sqrt(2) / 2).  It gives the audit the most power against a
mechanism that does not steer.

``user-history`` (user-level privacy): ``full-sensitivity`` for a *returning* user.  The victim's
first m rows are one user's m visits (``user_ids`` 0, then every later row its own user), and D'
replaces that user's whole history: all m visits offer e2 with reward -1 instead of e1 with reward 1.
The m visits fall in the first batch (m <= B), so every release containing them differs by m times
the full-sensitivity difference: the worst case of the user-level calibration (all of a user's
contributions in one p-sum), and m^2 times the privacy loss an interaction-level calibration assumes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedbandits.envs.files import write_data_file

DATASETS = ("steering", "full-sensitivity", "user-history")
_E1 = np.array([1.0, 0.0])
_E2 = np.array([0.0, 1.0])


def victim_users(kind: str, users: int, neighbour: bool, history: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Features (N, 2, 2) and expected rewards (N, 2) of the victim under D (or D' if ``neighbour``);
    ``history``: the returning user's visits (``user-history``: rows 0 .. history - 1)."""
    if kind not in DATASETS:
        raise ValueError(f"dataset must be one of {', '.join(map(repr, DATASETS))}, got {kind!r}")
    if users < 1:
        raise ValueError(f"users must be >= 1, got {users}")
    features = np.broadcast_to(np.stack([_E1, _E2]), (users, 2, 2)).copy()
    rewards = np.ones((users, 2))
    if kind == "steering":
        rewards[0] = (-1.0, 1.0) if neighbour else (1.0, -1.0)
    else:
        visits = history if kind == "user-history" else 1
        if not 1 <= visits <= users:
            raise ValueError(f"history must be in [1, users = {users}], got {visits}")
        features[visits:] = _E1  # later users have no choice to make: their statistics do not vary with noise
        arm, reward = (_E2, -1.0) if neighbour else (_E1, 1.0)
        features[:visits] = arm
        rewards[:visits] = reward
    return features, rewards


def write_neighbours(folder: str | Path, kind: str, users: int, history: int = 1) -> tuple[Path, Path]:
    """Write the victim's files of D and D' into ``folder``; returns their paths.  ``user-history``
    files carry ``user_ids`` (the returning user 0 for the first ``history`` rows, then 1, 2, ...)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    ids = np.concatenate([np.zeros(history, dtype=np.int64), np.arange(1, users - history + 1)])
    for name, neighbour in (("D", False), ("D-prime", True)):
        features, rewards = victim_users(kind, users, neighbour, history)
        user_ids = ids if kind == "user-history" else None
        paths.append(write_data_file(out / f"{kind}-{name}.npz", features, rewards, user_ids=user_ids))
    return paths[0], paths[1]
