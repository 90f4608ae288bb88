"""Phase-based federated clustering of bandits: CDP-FCLUB-DC, FCLUB-DC, FCLUB, Homo, Homo-DC.

Liu, Zhang, Wang, Li & Lui (2022), "Federated online clustering of bandits", Algorithms 1-5.
Line numbers below refer to those algorithms.  This module holds the policies (:class:`FCLUBBase`
and its variants); their parameters and the guarantee label are in
:mod:`fedbandits.algorithms.fclub_params`, the state of one run in :mod:`fedbandits.algorithms.fclub_state`,
the report's merge rules, counts and privacy spent in :mod:`fedbandits.algorithms.fclub_report`.

Time and phases
---------------
t counts user arrivals (Algorithm 1, line 8).  Phase s = 1, 2, ... covers t = 2^s - 1, ...,
2^(s+1) - 2; cluster detection (Algorithm 2) runs *before* arrival t = 2^s - 1, i.e. before
arrivals 1, 3, 7, 15, ...  (the paper's "t = 2^s - 1", Algorithm 2 line 1).

Cluster detection (Algorithm 2)
-------------------------------
* Local graphs (line 3): server l keeps an undirected graph over its users, initially complete;
  edge (i1, i2) is deleted (for good) when ||theta_i1 - theta_i2|| > alpha1 (F(T_i1) + F(T_i2))
  with theta_i = (lambda I + V_i)^{-1} b_i (Eq. 3).  Local clusters = connected components.
* Phase-start upload (lines 4-5): every local cluster c uploads (V~_c, b~_c, T~_c) =
  (shift I + H_c + sum_{i in c} V_i, h_c + sum b_i, sum T_i) with shift = 2 rho (private) or
  lambda (non-private, where H = h = 0).
* Global merge (line 7): local clusters of different servers are linked when
  ||theta~_c1 - theta~_c2|| < alpha2 (F(T~_c1) + F(T~_c2)) (Eq. 4), theta~ = V~^{-1} b~; global
  clusters are the connected components of these links (so the merge is transitive).
* Renewal (lines 8-19) happens in the first phase and whenever the partition changed (as sets of
  user sets): S^g_k = sum of the members' uploads, every member's local copy S^l = S^g, upload
  buffers restart at 3 rho I + H_next - H_bar (private) or 0, download buffers at 0.

Asynchronous communication (Algorithms 3, 4)
--------------------------------------------
Upload when det(S^l + dS) / det(S^l) >= U (Eq. 5), tracked incrementally: (S^l + dS)^{-1} by
Sherman-Morrison and log det(S^l + dS) - log det(S^l) by the matrix determinant lemma, so a round
costs O(d^2).  Download of member (l, j) when det(S^g_k) / det(S^l_j) >= D (Eq. 6).  Algorithm 4
checks this every round, but S^g_k and S^l_j change only at uploads into k and at downloads, and
a download sets S^l_j = S^g_k (ratio 1 < D); so checking the members of k right after each upload
into k gives exactly the same downloads at a fraction of the cost.  The download buffer of
(l, j) is therefore S^g_k - S^l_j and is not stored separately.

FCLUB (synchronous) is the same algorithm with U = D = 1 (every observation uploaded at once and
every member's copy equal to the global statistics at all times); Homo / Homo-DC treat all users
as one cluster (one local cluster per server, one global cluster; the setup before arrival 1 is the
only "detection", so they have no phase uploads after it).

Privacy (CDP-FCLUB-DC; see :mod:`fedbandits.privacy.cluster_tree`)
-----------------------------------------------------------------
Every datum is clipped (||x|| <= ``feature_bound``, y in [0, ``reward_bound``], counted) before it
enters any statistic.  Each local cluster has a tree privatizer PVT(l, j) whose leaf 1 is the
phase-start sum and leaf k + 1 the k-th upload buffer; an upload message is
(prefix_{k+1} + noise_{k+1}) - (prefix_k + noise_k) + 3 rho I, a function of two released noisy
prefix sums (lines 8-10 of Algorithm 3 telescope the noise).  The phase-start upload is release 1
of a *fresh* privatizer; if the partition does not change (no renewal), the running privatizers
continue and that phase-start upload is an extra Gaussian release, accounted as such.

The run reports the privacy actually spent: per user, an upper bound on the number of Gaussian
node releases any of its data lies in (every tree it was part of adds ``max_nodes_per_datum`` of
that tree's releases, every extra phase-start release adds 1), converted to epsilon at ``delta``
exactly; per (server, true cluster) the maximum over its users (Definition 1's (l', j')).  This
is larger than the per-tree target ``epsilon`` of the paper's analysis, which accounts for one
tree only.  Not covered by any accounting (as in the paper): the uploaded *membership* of local
clusters (computed from raw data) and the *timing* of uploads (raw data plus the tentative noise of
the next release; downloads follow from the uploads and their times), measured by
:mod:`fedbandits.audit.upload_timing`.

Choices where the paper is silent
---------------------------------
* t_c (Algorithm 5's number of uploads, needed for nu) is the paper's a-priori bound
  ceil(d ln T / ln min(U, D)), T = total arrivals.
* rho (Eq. 7) uses m = n (the number of users bounds the unknown number of clusters), L servers.
* Lemma 1's beta uses m = the number of global clusters currently detected, L' = members of the
  local cluster's global cluster, rho_min = rho, rho_max = 3 rho + 3 rho d ln T / ln min(U, D)
  (section 4), kappa = ||h_bar|| / sqrt(rho) (the local cluster's current h_bar); non-private:
  rho_min = rho_max = lambda, kappa = 0.
* Communication (section 2: one upload or download = one round): every phase-start upload of a
  local cluster counts one upload, every renewal broadcast one download per local cluster, plus
  the asynchronous uploads and downloads (FCLUB: one upload and L'-1 downloads per arrival).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from fedbandits.algorithms.base import MergeRule
from fedbandits.algorithms.clustering import (
    ClusteredPolicy,
    ClusterUCBParams,
    UserStructure,
    adjusted_rand_index,
    components,
    confidence_width_f,
)
from fedbandits.algorithms.fclub_params import CDPFCLUBDCParams, privacy_guarantee
from fedbandits.algorithms.fclub_report import REPORT_MERGE, communication_report, epsilon_per_server_cluster
from fedbandits.algorithms.fclub_state import LOG_CAPACITY, FCLUBRunState
from fedbandits.core.clipping import ROUNDING
from fedbandits.privacy.cluster_tree import (
    ClusterTreePrivatizer,
    composed_epsilon,
    node_variance,
    rho_bound,
    tree_nodes,
)


def _logdet(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sign, value = np.linalg.slogdet(a)
    return sign, value


class FCLUBBase(ClusteredPolicy):
    """Algorithm 1 of Liu et al. (2022) and its variants (module docstring).

    ``sync``: U = D = 1 (FCLUB, Homo); ``clustering``: detect clusters (else one cluster,
    Homo); ``private``: tree privatizers (CDP-FCLUB-DC).
    """

    sync = False
    clustering = True
    private = False
    report_merge: ClassVar[Mapping[str, MergeRule]] = REPORT_MERGE

    def __init__(
        self,
        n_runs: int,
        n_agents: int,
        n_arms: int,
        dim: int,
        horizon: int,
        users: UserStructure,
        params: ClusterUCBParams,
        noise_rngs: Sequence[np.random.Generator],
    ) -> None:
        super().__init__(n_runs, n_agents, n_arms, dim, horizon, users)
        self.params = params
        self.reg = params.reg
        self.alpha1 = float(getattr(params, "alpha1", 1.0))
        self.alpha2 = float(getattr(params, "alpha2", 1.0))
        self.upload_threshold = 1.0 if self.sync else float(params.upload)  # type: ignore[attr-defined]
        self.download_threshold = 1.0 if self.sync else float(params.download)  # type: ignore[attr-defined]
        self.log_upload = math.log(self.upload_threshold)
        self.log_download = math.log(self.download_threshold)
        self.eye = np.eye(dim)
        self.total = max(self.total_arrivals, 2)
        self.theory = params.radius == "theory"
        self.beta_const = params.beta
        self.stat_floats = dim * (dim + 1) // 2 + dim + 1
        self.feature_bound = math.inf
        self.reward_bound = math.inf
        self.observations = 0  # (x, y) checked against the bounds: the clipped shares' denominator
        self.feature_norm_max = 0.0  # the largest norm before clipping
        self.clipped_features = 0
        self.clipped_rewards = 0
        if self.private:
            p: CDPFCLUBDCParams = params  # type: ignore[assignment]
            threshold = min(p.upload, p.download)
            self.tc = math.ceil(dim * math.log(self.total) / math.log(threshold))
            self.nu = tree_nodes(self.tc, p.calibration)
            self.noise_var = node_variance(p.epsilon, p.delta, self.nu)
            self.noise_std = math.sqrt(self.noise_var)
            self.rho = p.rho_scale * rho_bound(
                p.epsilon, p.delta, self.nu, dim, users.n_users, users.n_servers, p.alpha
            )
            self.shift = 2.0 * self.rho
            self.rho_min = self.rho
            self.rho_max = 3.0 * self.rho + 3.0 * self.rho * dim * math.log(self.total) / math.log(threshold)
            self.feature_bound = p.feature_bound
            self.reward_bound = p.reward_bound
        else:
            self.shift = self.reg
            self.rho_min = self.rho_max = self.reg
        self.states = [FCLUBRunState(users.n_users, dim, users.server_users, rng) for rng in noise_rngs[:n_runs]]

    # -- confidence radius ------------------------------------------------------------------
    def _beta(self, count: float, members: int, clusters: int, hbar_norm: float) -> float:
        """beta of Lemma 1 (x beta_scale), or the constant radius."""
        if not self.theory:
            return self.beta_const
        p = self.params
        log_term = 2.0 * math.log(max(clusters, 1) * self.users.n_servers / p.alpha) + self.dim * math.log(
            self.rho_max / self.rho_min + count / (self.dim * members * self.rho_min)
        )
        kappa = hbar_norm / math.sqrt(self.rho_min) if self.private else 0.0
        beta = p.noise_scale * math.sqrt(max(log_term, 0.0)) + math.sqrt(members * self.rho_max)
        return p.beta_scale * (beta + math.sqrt(members) * kappa)

    # -- phases (Algorithm 2) ----------------------------------------------------------------
    def before_arrival(self, t: int) -> None:
        # t = 2^s - 1; without clustering (Homo) there is nothing to detect after the initial setup
        if (t + 1) & t == 0 and (self.clustering or t == 1):
            for r, st in enumerate(self.states):
                self._detect(r, st, t)

    def _local_clusters(self, st: FCLUBRunState) -> tuple[int, np.ndarray]:
        """Algorithm 2, line 3: edge deletion by Eq. (3) on every server graph, then components."""
        n = self.users.n_users
        if not self.clustering:
            return self.users.n_servers, self.users.user_server.copy()
        theta = np.linalg.solve(st.V + self.reg * self.eye, st.b[..., None])[..., 0]
        width = confidence_width_f(st.T)
        labels = np.empty(n, dtype=np.int64)
        offset = 0
        for server, members in enumerate(self.users.server_users):
            th = theta[members]
            sq = np.einsum("id,id->i", th, th)
            dist2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * th @ th.T, 0.0)
            w = width[members]
            threshold = self.alpha1 * (w[:, None] + w[None, :])
            st.adj[server] &= dist2 <= threshold * threshold
            count, lab = components(st.adj[server])
            labels[members] = lab + offset
            offset += count
        return offset, labels

    def _detect(self, r: int, st: FCLUBRunState, t: int) -> None:
        st.flush()
        d, n = self.dim, self.users.n_users
        n_lc, labels = self._local_clusters(st)
        local_changed = not st.started or n_lc != st.n_lc
        onehot = np.zeros((n_lc, n))
        onehot[labels, np.arange(n)] = 1.0
        v_sum = (onehot @ st.V.reshape(n, d * d)).reshape(n_lc, d, d)
        b_sum = onehot @ st.b
        t_sum = np.bincount(labels, weights=st.T, minlength=n_lc)
        lc_server = np.zeros(n_lc, dtype=np.int64)
        lc_server[labels] = self.users.user_server
        # phase-start upload (lines 4-5): release 1 of a fresh privatizer per local cluster
        fresh: list[ClusterTreePrivatizer] = []
        v_up = v_sum + self.shift * self.eye
        b_up = b_sum.copy()
        h_first = np.zeros((n_lc, d, d))
        hv_first = np.zeros((n_lc, d))
        if self.private:
            for c in range(n_lc):
                tree = ClusterTreePrivatizer(d, self.noise_std, st.rng)
                h_first[c], hv_first[c] = tree.next_noise()
                fresh.append(tree)
            v_up += h_first
            b_up += hv_first
        st.uploads_phase += n_lc
        self.messages[r] += n_lc
        self.bytes_sent[r] += 8 * (n_lc * self.stat_floats + n)
        # global merge (line 7)
        if self.clustering and n_lc > 1:
            theta = np.linalg.solve(v_up, b_up[..., None])[..., 0]
            width = confidence_width_f(t_sum)
            dist = np.linalg.norm(theta[:, None] - theta[None], axis=-1)
            link = (dist < self.alpha2 * (width[:, None] + width[None, :])) & (lc_server[:, None] != lc_server[None])
            n_gc, gc_of_lc = components(link)
        else:
            n_gc, gc_of_lc = 1, np.zeros(n_lc, dtype=np.int64)
        first_user = np.full(n_lc, n, dtype=np.int64)
        np.minimum.at(first_user, labels, np.arange(n))
        key = frozenset(frozenset(first_user[gc_of_lc == k].tolist()) for k in range(n_gc))
        renew = local_changed or key != st.key
        has_data = st.T > 0
        if self.private:
            if renew and st.started:  # the running privatizers end: account their releases
                nodes = np.array([tree.nodes_per_datum() for tree in st.trees], dtype=np.int64)
                st.compositions += np.where(has_data, nodes[st.lc_of_user], 0)
            elif not renew:  # the phase-start upload was an extra release outside the trees
                st.compositions += has_data
        st.ari.append((t, adjusted_rand_index(self.users.user_cluster, gc_of_lc[labels])))
        if renew:
            self._renew(r, st, n_lc, labels, n_gc, gc_of_lc, v_up, b_up, t_sum, fresh, h_first, hv_first, key)

    def _renew(
        self,
        r: int,
        st: FCLUBRunState,
        n_lc: int,
        labels: np.ndarray,
        n_gc: int,
        gc_of_lc: np.ndarray,
        v_up: np.ndarray,
        b_up: np.ndarray,
        t_sum: np.ndarray,
        fresh: list[ClusterTreePrivatizer],
        h_first: np.ndarray,
        hv_first: np.ndarray,
        key: frozenset[frozenset[int]],
    ) -> None:
        """Algorithm 2, lines 10-17: new global statistics, local copies, buffers, privatizers."""
        d = self.dim
        st.started = True
        st.key = key
        st.renewals += 1
        st.n_lc, st.n_gc = n_lc, n_gc
        st.lc_of_user = labels
        st.lc_list = labels.tolist()
        st.gc_list = gc_of_lc.tolist()
        st.gc_members = [np.flatnonzero(gc_of_lc == k) for k in range(n_gc)]
        st.gc_sizes = [m.size for m in st.gc_members]
        st.Sg = np.zeros((n_gc, d, d))
        st.ug = np.zeros((n_gc, d))
        st.Tg = np.zeros(n_gc)
        np.add.at(st.Sg, gc_of_lc, v_up)
        np.add.at(st.ug, gc_of_lc, b_up)
        np.add.at(st.Tg, gc_of_lc, t_sum)
        sign, st.logdet_g = _logdet(st.Sg)
        st.non_pd += int((sign <= 0).sum())
        st.S = st.Sg[gc_of_lc].copy()
        st.u = st.ug[gc_of_lc].copy()
        st.Tl = st.Tg[gc_of_lc].copy()
        st.logdet_l = st.logdet_g[gc_of_lc].copy()
        st.buf = np.zeros((n_lc, d, d + 1))
        st.bufS, st.bufu = st.buf[:, :, :d], st.buf[:, :, d]
        st.bufT = [0] * n_lc
        st.hbar_norm = [0.0] * n_lc
        if self.private:
            st.trees = fresh
            st.Hbar, st.hbar = h_first, hv_first
            st.Hnext = np.empty((n_lc, d, d))
            st.hnext = np.empty((n_lc, d))
            for c, tree in enumerate(fresh):
                st.Hnext[c], st.hnext[c] = tree.next_noise()  # pre-drawn noise of release 2 (line 14)
            st.bufS[:] = 3.0 * self.rho * self.eye + st.Hnext - st.Hbar  # line 15
            st.bufu[:] = st.hnext - st.hbar
            st.hbar_norm = np.linalg.norm(st.hbar, axis=1).tolist()
        st.downloads_renewal += n_lc
        self.messages[r] += n_lc
        self.bytes_sent[r] += 8 * n_lc * self.stat_floats
        # cached inverses, det ratios, UCB projections and radii
        st.Ainv = np.linalg.inv(st.S + st.bufS)
        sign_a, logdet_a = _logdet(st.S + st.bufS)
        st.non_pd += int((sign_a <= 0).sum())
        st.ratio = (logdet_a - st.logdet_l).tolist()
        sinv = np.linalg.inv(st.S)
        st.proj = np.empty((n_lc, d, d + 1), dtype=np.float32)
        st.proj[:, :, :d] = sinv
        st.proj[:, :, d] = np.einsum("cij,cj->ci", sinv, st.u)
        st.beta = [self._beta(float(st.Tl[c]), st.gc_sizes[st.gc_list[c]], n_gc, st.hbar_norm[c]) for c in range(n_lc)]
        if self.sync:
            st.ginv = np.linalg.inv(st.Sg)
            st.gproj = np.empty((n_gc, d, d + 1), dtype=np.float32)
            st.gproj[:, :, :d] = st.ginv
            st.gproj[:, :, d] = np.einsum("cij,cj->ci", st.ginv, st.ug)
            st.gbeta = [self._beta(float(st.Tg[k]), st.gc_sizes[k], n_gc, 0.0) for k in range(n_gc)]

    # -- one arrival (Algorithm 1, lines 10-15) ----------------------------------------------
    def choose(self, r: int, user: int, features: np.ndarray) -> int:
        st = self.states[r]
        c = st.lc_list[user]
        st.current = c
        if self.sync:
            k = st.gc_list[c]
            proj, beta = st.gproj[k], st.gbeta[k]
        else:
            proj, beta = st.proj[c], st.beta[c]
        return self.pick(r, features, proj, beta)

    def update(self, r: int, user: int, x: np.ndarray, y: float) -> None:
        st = self.states[r]
        if self.private:
            self.observations += 1
            sq = float(x @ x)
            self.feature_norm_max = max(self.feature_norm_max, math.sqrt(sq))
            if sq > self.feature_bound**2:
                x = x * (self.feature_bound / math.sqrt(sq))
                self.clipped_features += int(sq > (self.feature_bound * (1 + ROUNDING)) ** 2)
            if not 0.0 <= y <= self.reward_bound:
                y = min(max(y, 0.0), self.reward_bound)
                self.clipped_rewards += 1
        p = st.log_n
        st.log_u[p] = user
        xy = st.log_xy[p]
        xy[: self.dim] = x
        xy[self.dim] = y
        st.log_n = p + 1
        if p + 1 == LOG_CAPACITY:
            st.flush()
        st.T[user] += 1
        c = st.current
        if self.sync:
            self._sync_update(r, st, c, x, y)
            return
        st.buf[c] += x[:, None] * xy  # [x x^T | x y]: dS and du at once
        st.bufT[c] += 1
        inv = st.Ainv[c]
        w = inv @ x
        q = float(x @ w)
        if q > -0.5:
            inv -= np.multiply.outer(w, w * (1.0 / (1.0 + q)))
            ratio = st.ratio[c] + math.log1p(q)
        else:  # S^l + dS is not positive definite (privacy noise beyond rho): recompute directly
            a = st.S[c] + st.bufS[c]
            st.Ainv[c] = np.linalg.inv(a)
            sign, logdet = _logdet(a)
            st.non_pd += int(sign <= 0)
            ratio = float(logdet) - float(st.logdet_l[c])
        st.ratio[c] = ratio
        if ratio >= self.log_upload:
            self._upload(r, st, c)

    def _sync_update(self, r: int, st: FCLUBRunState, c: int, x: np.ndarray, y: float) -> None:
        """U = D = 1: the observation reaches S^g and every member copy at once (FCLUB, Homo)."""
        k = st.gc_list[c]
        inv = st.ginv[k]
        w = inv @ x
        q = float(x @ w)
        inv -= np.multiply.outer(w, w * (1.0 / (1.0 + q)))
        st.ug[k] += y * x
        st.Tg[k] += 1.0
        proj = st.gproj[k]
        proj[:, : self.dim] = inv
        proj[:, self.dim] = inv @ st.ug[k]
        if self.theory:
            st.gbeta[k] = self._beta(float(st.Tg[k]), st.gc_sizes[k], st.n_gc, 0.0)
        others = st.gc_sizes[k] - 1
        st.uploads_async += 1
        st.downloads_async += others
        self.messages[r] += 1 + others
        self.sync_rounds[r] += 1
        self.bytes_sent[r] += 8 * (1 + others) * (self.dim + 2)  # one (x, y) pair per message

    def _refresh(self, st: FCLUBRunState, c: int) -> None:
        """Recompute the caches of local cluster c after its S^l or buffer was replaced."""
        a = st.S[c] + st.bufS[c]
        st.Ainv[c] = np.linalg.inv(a)
        sign_a, logdet_a = _logdet(a)
        st.non_pd += int(sign_a <= 0)
        st.ratio[c] = float(logdet_a) - float(st.logdet_l[c])
        sinv = np.linalg.inv(st.S[c])
        st.proj[c, :, : self.dim] = sinv
        st.proj[c, :, self.dim] = sinv @ st.u[c]
        st.beta[c] = self._beta(float(st.Tl[c]), st.gc_sizes[st.gc_list[c]], st.n_gc, st.hbar_norm[c])

    def _upload(self, r: int, st: FCLUBRunState, c: int) -> None:
        """Algorithm 3, lines 3-10, then Algorithm 4 for the members of the global cluster."""
        k = st.gc_list[c]
        buf_s, buf_u, buf_t = st.bufS[c], st.bufu[c], st.bufT[c]
        st.Sg[k] += buf_s
        st.ug[k] += buf_u
        st.Tg[k] += buf_t
        sign, st.logdet_g[k] = _logdet(st.Sg[k])
        st.non_pd += int(sign <= 0)
        st.S[c] += buf_s
        st.u[c] += buf_u
        st.Tl[c] += buf_t
        sign, st.logdet_l[c] = _logdet(st.S[c])
        st.non_pd += int(sign <= 0)
        if self.private:  # lines 9-10: telescoping noise of the next release
            st.Hbar[c] = st.Hnext[c]
            st.hbar[c] = st.hnext[c]
            st.Hnext[c], st.hnext[c] = st.trees[c].next_noise()
            buf_s[...] = 3.0 * self.rho * self.eye + st.Hnext[c] - st.Hbar[c]
            buf_u[...] = st.hnext[c] - st.hbar[c]
            st.hbar_norm[c] = float(np.linalg.norm(st.hbar[c]))
        else:
            buf_s[...] = 0.0
            buf_u[...] = 0.0
        st.bufT[c] = 0
        st.uploads_async += 1
        self.messages[r] += 1
        self.sync_rounds[r] += 1
        self.bytes_sent[r] += 8 * self.stat_floats
        self._refresh(st, c)
        g = float(st.logdet_g[k])
        for member in st.gc_members[k].tolist():
            if g - float(st.logdet_l[member]) >= self.log_download:
                st.S[member] = st.Sg[k]
                st.u[member] = st.ug[k]
                st.Tl[member] = st.Tg[k]
                st.logdet_l[member] = g
                st.downloads_async += 1
                self.messages[r] += 1
                self.bytes_sent[r] += 8 * self.stat_floats
                self._refresh(st, member)

    # -- reporting ----------------------------------------------------------------------------
    def detected_clusters(self, r: int = 0) -> np.ndarray:
        """Global cluster of every user in run r at the last detection, (n,)."""
        st = self.states[r]
        return np.asarray(st.gc_list, dtype=np.int64)[st.lc_of_user]

    def privacy_compositions(self, r: int = 0) -> np.ndarray:
        """Upper bound on the node releases containing any datum of each user so far, (n,)."""
        st = self.states[r]
        out = st.compositions.copy()
        if self.private and st.trees:
            nodes = np.array([tree.nodes_per_datum() for tree in st.trees], dtype=np.int64)
            out += np.where(st.T > 0, nodes[st.lc_of_user], 0)
        return out

    def privacy_spent(self, r: int = 0) -> np.ndarray:
        """Exact epsilon at delta per (server, true cluster), (L, m): Definition 1's (l', j')."""
        p: CDPFCLUBDCParams = self.params  # type: ignore[assignment]
        return epsilon_per_server_cluster(self.privacy_compositions(r), self.users, self.noise_std, p)

    def report(self) -> dict[str, object]:
        sts = self.states
        out = communication_report(self.name, sts)
        if self.private:
            p: CDPFCLUBDCParams = self.params  # type: ignore[assignment]
            eps = np.max([self.privacy_spent(r) for r in range(self.n_runs)], axis=0)
            comp = max(int(self.privacy_compositions(r).max()) for r in range(self.n_runs))
            spent = float(eps.max())
            out.update(
                {
                    "protocol": "cdp-tree",
                    "epsilon": p.epsilon,
                    "epsilon_spent": spent,
                    **dict(zip(("guarantee", "guarantee_reason"), privacy_guarantee(spent, p.epsilon), strict=True)),
                    "epsilon_target_per_tree": p.epsilon,
                    "delta": p.delta,
                    "calibration": p.calibration,
                    "nu": self.nu,
                    "uploads_per_tree_bound": self.tc,
                    "noise_std": self.noise_std,
                    "rho": self.rho,
                    "epsilon_per_tree_exact": composed_epsilon(
                        self.nu, self.noise_std, p.delta, p.feature_bound, p.reward_bound
                    ),
                    "epsilon_spent_max": float(eps.max()),
                    "epsilon_spent_per_server_cluster": eps.round(6).tolist(),
                    "compositions_max": comp,
                    "observations": self.observations,
                    "feature_norm_max": self.feature_norm_max,
                    "clipped_features": self.clipped_features,
                    "clipped_rewards": self.clipped_rewards,
                    "non_pd": sum(s.non_pd for s in sts),
                }
            )
        return out

    @classmethod
    def finish_merged_report(cls, report: dict[str, object]) -> dict[str, object]:
        if "epsilon_spent" in report:
            spent, target = report["epsilon_spent"], report["epsilon"]
            label, reason = privacy_guarantee(float(spent), float(target))  # type: ignore[arg-type]
            report["guarantee"], report["guarantee_reason"] = label, reason
        return report


class FCLUB(FCLUBBase):
    """FCLUB: non-private, synchronous (every observation shared at once inside its global cluster)."""

    name = "fclub"
    description = "FCLUB (Liu et al. 2022): phase-based cluster detection, instant sharing, non-private"
    sync = True


class FCLUBDC(FCLUBBase):
    """FCLUB-DC: non-private Algorithm 1 with det-ratio triggered uploads and downloads."""

    name = "fclub-dc"
    description = "FCLUB-DC (Liu et al. 2022): cluster detection, delayed communication, non-private"


class CDPFCLUBDC(FCLUBBase):
    """CDP-FCLUB-DC: Algorithm 1 with tree-privatized uploads (cluster-level DP, Definition 1)."""

    name = "cdp-fclub-dc"
    description = "CDP-FCLUB-DC (Liu et al. 2022): FCLUB-DC with cluster-level DP tree privatizers"
    private = True


class Homo(FCLUBBase):
    """Homo: Algorithm 1 with all users one cluster, synchronous, non-private."""

    name = "homo"
    description = "Homo (Liu et al. 2022 baseline): all users one cluster, synchronous sharing"
    sync = True
    clustering = False


class HomoDC(FCLUBBase):
    """Homo-DC: Algorithm 1 with all users one cluster, delayed communication, non-private."""

    name = "homo-dc"
    description = "Homo-DC (Liu et al. 2022 baseline): all users one cluster, delayed communication"
    clustering = False
