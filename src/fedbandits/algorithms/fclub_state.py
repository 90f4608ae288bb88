"""Per-run state of the FCLUB family (:mod:`fedbandits.algorithms.fclub`): :class:`FCLUBRunState`.

One :class:`FCLUBRunState` per run holds the users' statistics and the log of arrivals not yet added
to them, the local graphs, the local and global clusters with their statistics and buffers, the
privatizers and the communication counters; :class:`~fedbandits.algorithms.fclub.FCLUBBase`
updates it in place.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedbandits.privacy.cluster_tree import ClusterTreePrivatizer

#: arrivals logged before they are added to the users' statistics (:meth:`FCLUBRunState.flush`)
LOG_CAPACITY = 8192


class FCLUBRunState:
    """The state of one run: users, local/global clusters, buffers, privatizers, counters."""

    # Set by FCLUBBase._renew at the first detection (before arrival 1), then updated in place;
    # c indexes local clusters (n_lc), k global clusters (n_gc).
    gc_sizes: list[int]  # members (local clusters) of global cluster k
    Sg: np.ndarray  # (n_gc, d, d) global Gram S^g_k
    ug: np.ndarray  # (n_gc, d) global bias
    Tg: np.ndarray  # (n_gc,) global counts
    logdet_g: np.ndarray  # (n_gc,) log det S^g_k
    S: np.ndarray  # (n_lc, d, d) local copy S^l_c
    u: np.ndarray  # (n_lc, d) local copy of the bias
    Tl: np.ndarray  # (n_lc,) local copy of the count
    logdet_l: np.ndarray  # (n_lc,) log det S^l_c
    buf: np.ndarray  # (n_lc, d, d + 1) upload buffers [dS | du], updated with one operation per arrival
    bufS: np.ndarray  # (n_lc, d, d) upload buffer dS (a view of buf)
    bufu: np.ndarray  # (n_lc, d) upload buffer of the bias (a view of buf)
    bufT: list[int]  # upload buffer of the count
    hbar_norm: list[float]  # ||h_bar_c|| (0 when non-private)
    Ainv: np.ndarray  # (n_lc, d, d) (S^l + dS)^{-1}
    ratio: list[float]  # log det(S^l + dS) - log det S^l
    proj: np.ndarray  # (n_lc, d, d + 1) float32 [S^l^{-1} | theta]
    beta: list[float]  # confidence radius per local cluster
    # private only: the current and the pre-drawn next noise of every local cluster's tree
    Hbar: np.ndarray  # (n_lc, d, d)
    hbar: np.ndarray  # (n_lc, d)
    Hnext: np.ndarray  # (n_lc, d, d)
    hnext: np.ndarray  # (n_lc, d)
    # synchronous (U = D = 1) only: caches of the global statistics
    ginv: np.ndarray  # (n_gc, d, d) S^g^{-1}
    gproj: np.ndarray  # (n_gc, d, d + 1) float32 [S^g^{-1} | theta^g]
    gbeta: list[float]  # confidence radius per global cluster

    def __init__(self, n: int, dim: int, servers: Sequence[np.ndarray], rng: np.random.Generator) -> None:
        self.rng = rng
        self.V = np.zeros((n, dim, dim))
        self.b = np.zeros((n, dim))
        self.T = np.zeros(n, dtype=np.int64)
        self.log_u = np.zeros(LOG_CAPACITY, dtype=np.int64)
        self.log_xy = np.zeros((LOG_CAPACITY, dim + 1))  # row p: [x_p | y_p]
        self.log_x = self.log_xy[:, :dim]
        self.log_y = self.log_xy[:, dim]
        self.log_n = 0
        self.adj = []
        for members in servers:
            a = np.ones((members.size, members.size), dtype=bool)
            np.fill_diagonal(a, False)
            self.adj.append(a)
        self.started = False
        self.key: frozenset[frozenset[int]] = frozenset()
        self.n_lc = 0
        self.n_gc = 0
        self.lc_of_user = np.zeros(n, dtype=np.int64)
        self.lc_list: list[int] = []
        self.gc_list: list[int] = []
        self.gc_members: list[np.ndarray] = []
        self.trees: list[ClusterTreePrivatizer] = []
        self.compositions = np.zeros(n, dtype=np.int64)
        self.current = 0
        self.uploads_phase = 0
        self.uploads_async = 0
        self.downloads_async = 0
        self.downloads_renewal = 0
        self.renewals = 0
        self.non_pd = 0
        self.ari: list[tuple[int, float]] = []

    def flush(self) -> None:
        """Add the logged arrivals to the users' (V_i, b_i) (Algorithm 1, line 13), grouped by user."""
        n = self.log_n
        if n == 0:
            return
        users = self.log_u[:n]
        order = np.argsort(users, kind="stable")
        us = users[order]
        xs = self.log_x[:n][order]
        ys = self.log_y[:n][order]
        starts = np.flatnonzero(np.concatenate(([True], us[1:] != us[:-1])))
        d = xs.shape[1]
        outer = (xs[:, :, None] * xs[:, None, :]).reshape(n, d * d)
        who = us[starts]
        self.V.reshape(-1, d * d)[who] += np.add.reduceat(outer, starts, axis=0)
        self.b[who] += np.add.reduceat(xs * ys[:, None], starts, axis=0)
        self.log_n = 0
