"""What the FCLUB family (:mod:`fedbandits.algorithms.fclub`) reports: merge rules, counts, privacy spent.

:data:`REPORT_MERGE` is how each key of :meth:`~fedbandits.algorithms.fclub.FCLUBBase.report`
combines over the tasks of an experiment; :func:`communication_report` gives the communication
counts and the detection's outcome over a policy's runs; :func:`epsilon_per_server_cluster`
converts the node releases per user into the epsilon spent per (server, true cluster), Definition
1's (l', j') of Liu et al. (2022).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fedbandits.algorithms.base import MergeRule
from fedbandits.algorithms.clustering import UserStructure
from fedbandits.algorithms.fclub_params import CDPFCLUBDCParams
from fedbandits.algorithms.fclub_state import FCLUBRunState
from fedbandits.privacy.cluster_tree import composed_epsilon

REPORT_MERGE: Mapping[str, MergeRule] = {
    # means over runs of per-run counts and of the detection's outcome
    "uploads": "mean",
    "downloads": "mean",
    "phase_uploads": "mean",
    "async_uploads": "mean",
    "async_downloads": "mean",
    "renewal_downloads": "mean",
    "clusters_detected": "mean",
    "ari_final": "mean",
    # detections happen before arrivals 2^s - 1: the same times in every run
    "ari_by_phase": "mean-series",
    # privacy (cdp-fclub-dc): the calibration comes from the config, the spending is a max over runs
    "protocol": "same",
    "epsilon": "same",
    "epsilon_spent": "max",
    "guarantee": "derived",
    "guarantee_reason": "derived",
    "epsilon_target_per_tree": "same",
    "delta": "same",
    "calibration": "same",
    "nu": "same",
    "uploads_per_tree_bound": "same",
    "noise_std": "same",
    "rho": "same",
    "epsilon_per_tree_exact": "same",
    "epsilon_spent_max": "max",
    "epsilon_spent_per_server_cluster": "max-elementwise",
    "compositions_max": "max",
    "observations": "sum",
    "feature_norm_max": "max",
    "clipped_features": "sum",
    "clipped_rewards": "sum",
    "non_pd": "sum",
}


def communication_report(name: str, states: Sequence[FCLUBRunState]) -> dict[str, object]:
    """The communication counts and the detection's outcome of policy ``name``, means over its runs."""
    mean = lambda vals: float(np.mean(vals))  # noqa: E731
    times = [t for t, _ in states[0].ari]
    if any([t for t, _ in s.ari] != times for s in states):  # detections depend on the arrival count only
        raise RuntimeError(f"{name}: the runs detected clusters at different times")
    return {
        "uploads": mean([s.uploads_phase + s.uploads_async for s in states]),
        "downloads": mean([s.downloads_async + s.downloads_renewal for s in states]),
        "phase_uploads": mean([s.uploads_phase for s in states]),
        "async_uploads": mean([s.uploads_async for s in states]),
        "async_downloads": mean([s.downloads_async for s in states]),
        "renewal_downloads": mean([s.downloads_renewal for s in states]),
        "clusters_detected": mean([s.n_gc for s in states]),
        "ari_final": mean([s.ari[-1][1] for s in states]) if times else float("nan"),
        "ari_by_phase": [[t, mean([s.ari[i][1] for s in states])] for i, t in enumerate(times)],
    }


def epsilon_per_server_cluster(
    compositions: np.ndarray, users: UserStructure, noise_std: float, p: CDPFCLUBDCParams
) -> np.ndarray:
    """Exact epsilon at delta per (server, true cluster), (L, m), from each user's node releases ``compositions``."""
    s, m = users.n_servers, users.n_clusters
    worst = np.zeros((s, m), dtype=np.int64)
    np.maximum.at(worst, (users.user_server, users.user_cluster), compositions)
    eps = np.zeros((s, m))
    cache: dict[int, float] = {}
    for idx, c in np.ndenumerate(worst):
        if int(c) not in cache:
            cache[int(c)] = composed_epsilon(int(c), noise_std, p.delta, p.feature_bound, p.reward_bound)
        eps[idx] = cache[int(c)]
    return eps
