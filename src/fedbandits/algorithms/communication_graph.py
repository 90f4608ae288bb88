"""Communication graphs of decentralized FedUCB (Dubey & Pentland 2020, section 4.2): the graph kinds
and their builder, hop distances and power graphs, and the greedy clique cover of G^gamma.

The clique cover partitions the agents into cliques of the gamma-th power graph G^gamma (edge
i-j iff 1 <= dist_G(i, j) <= gamma), built greedily: take the lowest-numbered unassigned agent,
then add every unassigned agent, in increasing order, that is adjacent in G^gamma to all members
so far.  A minimum clique cover is NP-hard; the greedy cover is optimal on lines (blocks of
gamma + 1 consecutive agents) and complete graphs (one clique).  The policy that floods messages
over these graphs is :mod:`fedbandits.algorithms.feducb_decentralized`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fedbandits.core.lazy import lazy_module
from fedbandits.core.validation import check_choice, check_int

sparse = lazy_module("scipy.sparse")  # loaded when a graph is first built (core/lazy.py says why)

GRAPHS = ("complete", "line", "ring", "star", "grid", "erdos-renyi", "geometric", "edges")


class Graph:
    """An undirected simple graph on nodes 0..n-1, stored as a boolean adjacency matrix."""

    def __init__(self, name: str, adjacency: np.ndarray) -> None:
        adjacency = np.asarray(adjacency, dtype=bool)
        if adjacency.ndim != 2 or adjacency.shape[0] != adjacency.shape[1]:
            raise ValueError(f"adjacency must be a square matrix, got shape {adjacency.shape}")
        if (adjacency != adjacency.T).any() or adjacency.diagonal().any():
            raise ValueError("adjacency must be symmetric without self-loops")
        self.name = name
        self.adjacency = adjacency
        self.n_nodes = adjacency.shape[0]
        self._dist: np.ndarray | None = None

    @property
    def degrees(self) -> np.ndarray:
        return self.adjacency.sum(axis=1)

    @property
    def n_edges(self) -> int:
        return int(self.adjacency.sum()) // 2

    def edges(self) -> np.ndarray:
        """Edges (i, j) with i < j, shape (E, 2)."""
        return np.argwhere(np.triu(self.adjacency, 1))

    def components(self) -> int:
        count, _ = sparse.csgraph.connected_components(sparse.csr_matrix(self.adjacency), directed=False)
        return int(count)

    def distances(self) -> np.ndarray:
        """Hop distances (n, n), int64; -1 between disconnected nodes."""
        if self._dist is None:
            dist = sparse.csgraph.shortest_path(
                sparse.csr_matrix(self.adjacency.astype(np.float64)), directed=False, unweighted=True
            )
            self._dist = np.where(np.isfinite(dist), dist, -1).astype(np.int64)
        return self._dist

    def diameter(self) -> int:
        dist = self.distances()
        if (dist < 0).any():
            raise ValueError("the diameter of a disconnected graph is infinite")
        return int(dist.max(initial=0))

    def power(self, gamma: int) -> np.ndarray:
        """Adjacency of the gamma-th power graph: i ~ j iff 1 <= dist(i, j) <= gamma."""
        dist = self.distances()
        return (dist >= 1) & (dist <= gamma)


def _from_pairs(name: str, n: int, pairs: Sequence[tuple[int, int]]) -> Graph:
    adjacency = np.zeros((n, n), dtype=bool)
    for i, j in pairs:
        adjacency[i, j] = adjacency[j, i] = True
    return Graph(name, adjacency)


def normalize_edges(edges: object) -> tuple[tuple[int, int], ...]:
    """Validate a user edge list (pairs of agent indices): no self-loops, no duplicates."""
    if isinstance(edges, (str, bytes)) or not isinstance(edges, Sequence):
        raise ValueError(f"edges must be a list of [i, j] pairs of agent indices, got {edges!r}")
    out: list[tuple[int, int]] = []
    seen: set[frozenset[int]] = set()
    for pair in edges:
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise ValueError(f"edges must be a list of [i, j] pairs of agent indices, got the entry {pair!r}")
        i = check_int("edges entry index", pair[0], low=0)
        j = check_int("edges entry index", pair[1], low=0)
        if i == j:
            raise ValueError(f"edges must not contain self-loops, got [{i}, {j}]")
        key = frozenset((i, j))
        if key in seen:
            raise ValueError(f"edges must not contain duplicates (in either direction), got [{i}, {j}] twice")
        seen.add(key)
        out.append((i, j))
    return tuple(out)


def grid_shape(n: int, rows: int = 0) -> tuple[int, int]:
    """(rows, cols) of a grid of n nodes: ``rows`` given, or the most square factorisation."""
    if rows:
        if n % rows:
            raise ValueError(f"graph_param (grid rows) must divide the number of agents {n}, got {rows}")
        return rows, n // rows
    rows = max(r for r in range(1, math.isqrt(n) + 1) if n % r == 0)
    if rows == 1 and n > 1:
        raise ValueError(
            f"graph = 'grid' needs agents M = rows x cols with rows, cols >= 2, but M = {n} has no such "
            "factorisation; use graph = 'line', another M, or graph_param = 1 for a 1 x M grid"
        )
    return rows, n // rows


def build_graph(kind: str, n: int, param: float = 0.0, seed: int = 0, edges: Sequence[tuple[int, int]] = ()) -> Graph:
    """The communication graph ``kind`` on n agents (see :class:`DecentralizedFedUCBParams`).

    Random graphs are drawn from ``np.random.default_rng(seed)`` and are the same for every run.
    Connectivity is *not* checked here.
    """
    check_choice("graph", kind, GRAPHS)
    n = check_int("agents", n, low=1)
    if kind == "complete":
        return Graph(kind, ~np.eye(n, dtype=bool))
    if kind == "line":
        return _from_pairs(kind, n, [(i, i + 1) for i in range(n - 1)])
    if kind == "ring":  # a ring of 2 agents is their single edge
        pairs = [(i, i + 1) for i in range(n - 1)] + ([(n - 1, 0)] if n >= 3 else [])
        return _from_pairs(kind, n, pairs)
    if kind == "star":
        return _from_pairs(kind, n, [(0, i) for i in range(1, n)])
    if kind == "grid":
        if param != int(param):
            raise ValueError(f"graph_param (grid rows) must be an integer >= 0 (0: most square), got {param}")
        rows, cols = grid_shape(n, int(param))
        pairs = [(r * cols + c, r * cols + c + 1) for r in range(rows) for c in range(cols - 1)]
        pairs += [(r * cols + c, (r + 1) * cols + c) for r in range(rows - 1) for c in range(cols)]
        return _from_pairs(kind, n, pairs)
    rng = np.random.default_rng(seed)
    if kind == "erdos-renyi":
        p = param if param > 0 else (min(1.0, 2.0 * math.log(n) / n) if n > 2 else 1.0)
        upper = np.triu(rng.random((n, n)) < p, 1)
        return Graph(kind, upper | upper.T)
    if kind == "geometric":
        radius = (
            param
            if param > 0
            else (min(math.sqrt(2.0), 2.0 * math.sqrt(math.log(n) / (math.pi * n))) if n > 2 else 2.0)
        )
        points = rng.random((n, 2))
        dist = np.linalg.norm(points[:, None, :] - points[None, :, :], axis=-1)
        return Graph(kind, (dist <= radius) & ~np.eye(n, dtype=bool))
    # kind == "edges"
    for i, j in edges:
        if i >= n or j >= n:
            raise ValueError(f"edges entries must be agent indices in [0, {n - 1}], got [{i}, {j}]")
    return _from_pairs(kind, n, list(edges))


def greedy_clique_cover(adjacency: np.ndarray) -> np.ndarray:
    """Clique label per node (0, 1, ...): the greedy first-fit cover described in the module docstring."""
    n = adjacency.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    label = 0
    for v in range(n):
        if labels[v] >= 0:
            continue
        members = [v]
        labels[v] = label
        for u in range(v + 1, n):
            if labels[u] < 0 and adjacency[u, members].all():
                members.append(u)
                labels[u] = label
        label += 1
    return labels


def is_clique_cover(adjacency: np.ndarray, labels: np.ndarray) -> bool:
    """True iff ``labels`` partitions the nodes into cliques of ``adjacency``."""
    labels = np.asarray(labels)
    if labels.shape != (adjacency.shape[0],) or (labels < 0).any():
        return False
    same = labels[:, None] == labels[None, :]
    return bool((adjacency | np.eye(labels.size, dtype=bool))[same].all())
