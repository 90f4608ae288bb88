"""Baselines of the FCLUB experiments (Liu et al. 2022, section 5): CLUB, SCLUB, per-user LinUCB.

* :class:`CLUB` -- Gentile, Li & Zappella (2014), run separately on every local server: a graph
  over the server's users, initially complete; after each arrival of user i, every edge (i, j)
  with ||theta_i - theta_j|| > alpha1 (F(T_i) + F(T_j)) is deleted (F of
  :func:`~fedbandits.algorithms.clustering.confidence_width_f`, the paper's CB without its
  alpha), and the arriving user is served from the statistics of its connected component
  (M = lambda I + sum of the members' V_i, b = sum of their b_i).  The complete initial graph is
  used instead of the paper's random Erdos-Renyi graph (the servers hold at most a few hundred
  users, so the dense graph is cheap).
* :class:`SCLUB` -- Li, Chen, Li & Leung (2019), run separately on every local server, with
  sets instead of graphs: each server starts with one cluster of all its users.  Phases start
  at arrivals t = 2^s (s = 0, 1, ...), when every user becomes *unchecked*.  On the first arrival
  of user i in a phase, i is *split* off into a singleton cluster if
  ||theta_i - theta_c|| > alpha1 (F(T_i) + F(T_c)) (theta_c, T_c: its cluster's estimate and
  count); i is then checked.  When every member of i's cluster is checked, the cluster is
  *merged* with every other fully checked cluster c' of the server with
  ||theta_c - theta_c'|| < alpha1 / 2 (F(T_c) + F(T_c')).  The frequency conditions of SCLUB
  (for non-uniform user frequencies) are left out: users arrive uniformly here, the FCLUB model.
* :class:`PerUserLinUCB` -- one LinUCB (Abbasi-Yadkori et al. 2011) per user, no sharing.
* Homo and Homo-DC (all users one cluster) are Algorithm 1 without detection:
  :class:`~fedbandits.algorithms.fclub.Homo`, :class:`~fedbandits.algorithms.fclub.HomoDC`.

The radius is the constant ``beta`` or the self-normalised bound of
:class:`~fedbandits.core.ucb.ConfidenceRadius` for the cluster's (user's) sample count.  None of
these baselines communicates; they report the ARI of their clusters against the true ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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
from fedbandits.core.validation import check_float

__all__ = ["CLUB", "SCLUB", "CLUBParams", "PerUserLinUCB", "SCLUBParams"]


@dataclass(frozen=True)
class CLUBParams(ClusterUCBParams):
    alpha1: float = field(default=1.5, metadata={"help": "edge-deletion parameter alpha > 0 (CB scale)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("alpha1", self.alpha1, low=0.0, low_open=True)


@dataclass(frozen=True)
class SCLUBParams(ClusterUCBParams):
    alpha1: float = field(default=1.5, metadata={"help": "split parameter alpha_1 > 0 (merge uses alpha_1 / 2)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float("alpha1", self.alpha1, low=0.0, low_open=True)


class _RidgeStats:
    """N ridge learners of one run: inverse Gram (Sherman-Morrison), moment, count."""

    def __init__(self, size: int, dim: int, reg: float) -> None:
        self.dim = dim
        self.reg = reg
        self.inv = np.broadcast_to(np.eye(dim) / reg, (size, dim, dim)).copy()
        self.b = np.zeros((size, dim))
        self.count = np.zeros(size)

    def add(self, i: int, x: np.ndarray, y: float) -> None:
        inv = self.inv[i]
        w = inv @ x
        inv -= np.multiply.outer(w, w * (1.0 / (1.0 + float(x @ w))))
        self.b[i] += y * x
        self.count[i] += 1.0

    def set(self, i: int, gram: np.ndarray, b: np.ndarray, count: float) -> None:
        """Replace learner i's statistics (Gram matrix including the regulariser)."""
        self.inv[i] = np.linalg.inv(gram)
        self.b[i] = b
        self.count[i] = count

    def theta(self, i: int) -> np.ndarray:
        return self.inv[i] @ self.b[i]


class _RidgeBank(_RidgeStats):
    """:class:`_RidgeStats` that also keep the UCB projection [V^-1 | theta] (float32) of every learner.

    Only learners that choose arms need it: CLUB's and SCLUB's per-user statistics are
    :class:`_RidgeStats` (two fewer array operations per arrival).
    """

    def __init__(self, size: int, dim: int, reg: float) -> None:
        super().__init__(size, dim, reg)
        self.proj = np.zeros((size, dim, dim + 1), dtype=np.float32)
        self.proj[:, :, :dim] = self.inv

    def add(self, i: int, x: np.ndarray, y: float) -> None:
        super().add(i, x, y)
        inv = self.inv[i]
        self.proj[i, :, : self.dim] = inv
        self.proj[i, :, self.dim] = inv @ self.b[i]

    def set(self, i: int, gram: np.ndarray, b: np.ndarray, count: float) -> None:
        super().set(i, gram, b, count)
        self.proj[i, :, : self.dim] = self.inv[i]
        self.proj[i, :, self.dim] = self.inv[i] @ b


class _Baseline(ClusteredPolicy):
    report_merge: ClassVar[Mapping[str, MergeRule]] = {"ari_final": "mean", "clusters_detected": "mean"}

    def __init__(
        self,
        n_runs: int,
        n_agents: int,
        n_arms: int,
        dim: int,
        horizon: int,
        users: UserStructure,
        params: ClusterUCBParams,
    ) -> None:
        super().__init__(n_runs, n_agents, n_arms, dim, horizon, users)
        self.params = params
        self.radius = params.confidence_radius()
        self.constant = params.radius == "constant"

    def beta(self, count: float) -> float:
        if self.constant:
            return self.params.beta
        return float(self.radius(count, self.dim, self.params.reg))

    def cluster_labels(self, r: int) -> np.ndarray:
        """Detected cluster of every user in run r, (n,)."""
        raise NotImplementedError

    def report(self) -> dict[str, object]:
        truth = self.users.user_cluster
        aris = [adjusted_rand_index(truth, self.cluster_labels(r)) for r in range(self.n_runs)]
        sizes = [np.unique(self.cluster_labels(r)).size for r in range(self.n_runs)]
        return {"ari_final": float(np.mean(aris)), "clusters_detected": float(np.mean(sizes))}


class PerUserLinUCB(_Baseline):
    """One LinUCB per user (Abbasi-Yadkori et al. 2011); users never share data."""

    name = "linucb-per-user"
    description = "one LinUCB per user, no sharing (FCLUB baseline)"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.banks = [_RidgeBank(self.users.n_users, self.dim, self.params.reg) for _ in range(self.n_runs)]

    def choose(self, r: int, user: int, features: np.ndarray) -> int:
        bank = self.banks[r]
        return self.pick(r, features, bank.proj[user], self.beta(bank.count[user]))

    def update(self, r: int, user: int, x: np.ndarray, y: float) -> None:
        self.banks[r].add(user, x, y)

    def cluster_labels(self, r: int) -> np.ndarray:
        return np.arange(self.users.n_users)


class _GraphRun:
    """Per-run state of CLUB / SCLUB: user learners, cluster learners, labels."""

    def __init__(self, users: UserStructure, dim: int, reg: float) -> None:
        n = users.n_users
        self.user = _RidgeStats(n, dim, reg)
        self.V = np.zeros((n, dim, dim))
        self.cluster = _RidgeBank(n, dim, reg)  # indexed by cluster id (< n)
        self.label = np.zeros(n, dtype=np.int64)
        self.pos = np.zeros(n, dtype=np.int64)
        for members in users.server_users:
            self.pos[members] = np.arange(members.size)
            self.label[members] = members[0]


class _SplitMergeRun(_GraphRun):
    """Per-run state of SCLUB: :class:`_GraphRun` and every cluster's Gram matrix, which its split
    and merge update (CLUB rebuilds a changed cluster from its members' V instead)."""

    def __init__(self, users: UserStructure, dim: int, reg: float) -> None:
        super().__init__(users, dim, reg)
        self.gram = np.broadcast_to(reg * np.eye(dim), (users.n_users, dim, dim)).copy()  # incl. lambda I


class CLUB(_Baseline):
    """CLUB (Gentile et al. 2014) on every local server separately (module docstring)."""

    name = "club"
    description = "CLUB (Gentile et al. 2014) on each local server, graph-based clustering"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.alpha1 = float(self.params.alpha1)  # type: ignore[attr-defined]
        self.runs: list[_GraphRun] = []
        self.adj: list[list[np.ndarray]] = []
        # per run: user -> (positions, user ids) of its neighbours, dropped when one of its edges goes
        self.neighbours: list[dict[int, tuple[np.ndarray, np.ndarray]]] = [{} for _ in range(self.n_runs)]
        for _ in range(self.n_runs):
            self.runs.append(_GraphRun(self.users, self.dim, self.params.reg))
            graphs = []
            for members in self.users.server_users:
                a = np.ones((members.size, members.size), dtype=bool)
                np.fill_diagonal(a, False)
                graphs.append(a)
            self.adj.append(graphs)

    def choose(self, r: int, user: int, features: np.ndarray) -> int:
        st = self.runs[r]
        c = st.label[user]
        return self.pick(r, features, st.cluster.proj[c], self.beta(st.cluster.count[c]))

    def update(self, r: int, user: int, x: np.ndarray, y: float) -> None:
        st = self.runs[r]
        c = st.label[user]
        xx = np.multiply.outer(x, x)
        st.user.add(user, x, y)
        st.V[user] += xx
        st.cluster.add(c, x, y)
        server = int(self.users.user_server[user])
        cached = self.neighbours[r].get(user)
        if cached is None:
            nbrs = np.flatnonzero(self.adj[r][server][st.pos[user]])
            cached = self.neighbours[r][user] = (nbrs, self.users.server_users[server][nbrs])
        nbrs, others = cached
        if nbrs.size == 0:
            return
        theta_u = st.user.theta(user)
        theta_o = np.einsum("nij,nj->ni", st.user.inv[others], st.user.b[others])
        dist = np.sqrt(((theta_o - theta_u) ** 2).sum(axis=1))
        count = st.user.count
        threshold = self.alpha1 * (confidence_width_f(count[user]) + confidence_width_f(count[others]))
        cut = dist > threshold
        if cut.any():
            graph = self.adj[r][server]
            gone = nbrs[cut]
            graph[st.pos[user], gone] = False
            graph[gone, st.pos[user]] = False
            for i in (user, *others[cut].tolist()):
                self.neighbours[r].pop(i, None)
            self._recluster(r, st, server)

    def _recluster(self, r: int, st: _GraphRun, server: int) -> None:
        """Connected components of one server's graph; rebuild the statistics of changed clusters."""
        members = self.users.server_users[server]
        _, lab = components(self.adj[r][server])
        first = np.full(lab.max() + 1, members.size)
        np.minimum.at(first, lab, np.arange(members.size))
        new = members[first[lab]]
        changed = np.flatnonzero(new != st.label[members])
        if changed.size == 0:
            return
        affected = np.unique(np.concatenate((st.label[members[changed]], new[changed])))
        st.label[members] = new
        reg_eye = self.params.reg * np.eye(self.dim)
        for cid in affected.tolist():
            mine = members[new == cid]
            if mine.size == 0:
                continue
            gram = reg_eye + st.V[mine].sum(axis=0)
            st.cluster.set(cid, gram, st.user.b[mine].sum(axis=0), float(st.user.count[mine].sum()))

    def cluster_labels(self, r: int) -> np.ndarray:
        return self.runs[r].label.copy()


class SCLUB(_Baseline):
    """SCLUB (Li et al. 2019) on every local server separately: split users, merge clusters."""

    name = "sclub"
    description = "SCLUB (Li et al. 2019) on each local server, set-based split and merge"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.alpha1 = float(self.params.alpha1)  # type: ignore[attr-defined]
        n = self.users.n_users
        self.runs = [_SplitMergeRun(self.users, self.dim, self.params.reg) for _ in range(self.n_runs)]
        self.checked = [np.zeros(n, dtype=bool) for _ in range(self.n_runs)]
        self.unchecked = []
        self.active: list[list[set[int]]] = []
        self.free: list[list[int]] = []
        for _ in range(self.n_runs):
            counts = np.zeros(n, dtype=np.int64)
            for members in self.users.server_users:
                counts[members[0]] = members.size
            self.unchecked.append(counts)
            self.active.append([{int(m[0])} for m in self.users.server_users])
            used = {int(m[0]) for m in self.users.server_users}
            self.free.append([i for i in range(n - 1, -1, -1) if i not in used])
        self.size = [u.copy() for u in self.unchecked]

    def before_arrival(self, t: int) -> None:
        if t & (t - 1) == 0:  # t = 2^s: a new phase, every user unchecked
            for r in range(self.n_runs):
                self.checked[r][:] = False
                self.unchecked[r][:] = self.size[r]

    def choose(self, r: int, user: int, features: np.ndarray) -> int:
        st = self.runs[r]
        c = st.label[user]
        return self.pick(r, features, st.cluster.proj[c], self.beta(st.cluster.count[c]))

    def update(self, r: int, user: int, x: np.ndarray, y: float) -> None:
        st = self.runs[r]
        c = int(st.label[user])
        xx = np.multiply.outer(x, x)
        st.user.add(user, x, y)
        st.V[user] += xx
        st.cluster.add(c, x, y)
        st.gram[c] += xx
        if self.checked[r][user]:
            return
        self.checked[r][user] = True
        self.unchecked[r][c] -= 1
        width = confidence_width_f
        if self.size[r][c] > 1:
            gap = np.linalg.norm(st.user.theta(user) - st.cluster.theta(c))
            if gap > self.alpha1 * (width(st.user.count[user]) + width(st.cluster.count[c])):
                c = self._split(r, st, user, c)
        if self.unchecked[r][c] == 0:
            self._merge(r, st, user, c)

    def _split(self, r: int, st: _SplitMergeRun, user: int, c: int) -> int:
        new = self.free[r].pop()
        server = int(self.users.user_server[user])
        reg_eye = self.params.reg * np.eye(self.dim)
        st.gram[c] -= st.V[user]
        st.cluster.set(c, st.gram[c], st.cluster.b[c] - st.user.b[user], st.cluster.count[c] - st.user.count[user])
        st.gram[new] = reg_eye + st.V[user]
        st.cluster.set(new, st.gram[new], st.user.b[user], st.user.count[user])
        st.label[user] = new
        self.size[r][c] -= 1
        self.size[r][new] = 1
        self.unchecked[r][new] = 0
        self.active[r][server].add(new)
        return new

    def _merge(self, r: int, st: _SplitMergeRun, user: int, c: int) -> None:
        server = int(self.users.user_server[user])
        ids = np.array([i for i in self.active[r][server] if i != c and self.unchecked[r][i] == 0], dtype=np.int64)
        if ids.size == 0:
            return
        theta_c = st.cluster.theta(c)
        theta_o = np.einsum("nij,nj->ni", st.cluster.inv[ids], st.cluster.b[ids])
        dist = np.sqrt(((theta_o - theta_c) ** 2).sum(axis=1))
        width = confidence_width_f
        threshold = 0.5 * self.alpha1 * (width(st.cluster.count[c]) + width(st.cluster.count[ids]))
        close = ids[dist < threshold]
        if close.size == 0:
            return
        reg = self.params.reg * np.eye(self.dim)
        gram, b, count = st.gram[c].copy(), st.cluster.b[c].copy(), float(st.cluster.count[c])
        members = self.users.server_users[server]
        for other in close.tolist():
            gram += st.gram[other] - reg
            b += st.cluster.b[other]
            count += float(st.cluster.count[other])
            st.label[members[st.label[members] == other]] = c
            self.size[r][c] += self.size[r][other]
            self.size[r][other] = 0
            self.active[r][server].discard(other)
            self.free[r].append(other)
        st.gram[c] = gram
        st.cluster.set(c, gram, b, count)

    def cluster_labels(self, r: int) -> np.ndarray:
        return self.runs[r].label.copy()
