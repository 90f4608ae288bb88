"""Decentralized (peer-to-peer) FedUCB: Dubey & Pentland (2020), section 4.2 and Algorithm 3.

The M agents talk only to their neighbours in a connected, undirected communication graph G
(no controller).  Every message is *flooded*: its source sends it to all neighbours, and every
agent that receives it for the first time forwards it one hop per round, until it has travelled
gamma hops (the time-to-live / delay gamma); then it is dropped.  On top of this transport each
agent runs gamma independent copies of centralized FedUCB ("subsampling", Weinberger & Ordentlich):

* **Round robin.**  At round t (1-based) every agent uses parameter set g = t mod gamma
  (Alg. 3 line 4): it acts on V^(g) = S^(g) + U^(g), u~^(g) = s^(g) + u^(g) and adds its
  observation to set g only.  Each set is therefore used at most ceil(T/gamma) times.
* **Cliques.**  Only agents of the same clique of the gamma-th power graph G^gamma (edge i-j iff
  1 <= dist_G(i, j) <= gamma) use each other's messages (lines 14 and 19); every other agent
  merely relays them.  The cliques are a *clique cover* of G^gamma (a partition of the agents
  into cliques), built greedily: take the lowest-numbered unassigned agent, then add every
  unassigned agent, in increasing order, that is adjacent in G^gamma to all members so far.
  A minimum clique cover is NP-hard; the greedy cover is optimal on lines (blocks of gamma + 1
  consecutive agents) and complete graphs (one clique), and its size (an upper bound on the
  chi-bar(G^gamma) of Theorem 2) is reported.  The graphs and the cover are built in
  :mod:`fedbandits.algorithms.communication_graph`.  Members of a clique are at most gamma hops apart,
  so every message between them arrives before it is dropped.
* **Trigger (line 6).**  After its observation, agent i tests the set g it just used.  With
  n = Delta t_{i,g} + 1 = the number of uses of set g since agent i last released it (this
  use included, so n >= 1; with gamma = 1 it is the centralized t - t_last):
    - ``rule = "original"`` (as printed):
      log det(V^(g) + x x^T + M (rho_max - rho_min) I) - log det S^(g) >= D / (n (1 + L^2));
    - ``rule = "restated"`` (default): the restatement of Zhou & Chowdhury (2023) used by
      :mod:`fedbandits.algorithms.feducb`, with the decentralized factor (1 + L^2):
      n (1 + L^2) [log det(V^(g) + x x^T) - log det S^(g)] > D.
  S^(g) is the agent's current synchronised matrix (it changes whenever statistics arrive).
  L = ``feature_bound``, also without privacy.  D = ``threshold``; ``"theorem-1"`` uses
  Theorem 1's D for one subsequence, i.e. with horizon ceil(T/gamma) (section C.2 analyses
  every (clique, set) pair as a centralized instance of T/gamma rounds).
* **Synchronisation (lines 9-20).**  A firing agent floods Synchronize(i, g, t).  An agent of
  the same clique that receives it sends its batch Q-hat^(g) (its set-g data since its last
  release of g) to its own PRIVATIZER stream (i, g) and floods the returned noisy *prefix* sum
  (U-hat^(g), u-hat^(g)).  The requester answers its own request at once (it is in its own
  clique, at distance 0).  An agent answers at most once per set and round, and only if it has
  used set g since its last release of g: otherwise everything it holds is already released
  (re-releasing would only spend privacy), and the request is dropped.  This also bounds the
  releases of a stream by the number of uses of its set, ceil(T/gamma): the capacity of its tree.
* **S from prefixes.**  Each agent keeps the latest prefix received from every agent of its
  clique (its own included, adopted when released) and sets
  S^(g)_i = sum_{j in C(i)} U-hat^(g)_j + |C(i)| * shift * I,  s^(g)_i = sum_j u-hat^(g)_j,
  with shift = 2 Lambda (private) or ``reg`` (non-private) as in the centralized algorithm, and
  an agent that has not released yet contributing 0.  So S^(g) starts at |C(i)| shift I (Alg. 3
  line 1 prints S = 0, which is singular; Alg. 1 line 1 uses M rho_min I) and, without privacy,
  S^(g)_i = |C(i)| reg I + sum of the set-g data its clique has released and that has reached i.
  Because messages between clique members are never dropped and arrive in order (the delay of
  a pair is fixed), keeping the latest prefix per sender equals adding each sender's
  prefix *increments*; the simulation transports the increments.
* **Radius.**  ``"proposition-2"`` with M replaced by |C(i)| (S^(g) sums |C(i)| shifted noisy
  prefixes); the privacy calibration keeps M (Discussion, section C.2).  ``"theory"`` uses
  |C(i)| ceil(t/gamma) samples.

Timing convention (matches Alg. 3, where agent v at time t receives the messages
m_{v', t - d(v, v')} after acting): round t = select, observe, then :meth:`end_round`, which

1. evaluates the trigger on the state before this round's deliveries (line 6 precedes line 12),
2. moves every in-flight message one hop: a message sent at the end of round t' by agent v
   reaches the agents at distance h at the end of round t' + h (h <= gamma) and is used from
   round t' + h + 1 on,
3. answers the requests (own and received) by releases, adopts the agent's own release at
   once, and sends the new requests and statistics (first hop at the end of round t + 1).

Flooding and counts: the source sends to all its neighbours; an agent reached at hop h < gamma
forwards to all neighbours except those it received the message from (in that same round);
copies reaching an agent that already has the message are dropped.  Every transmission over an
edge is one message: symmetric_payload_floats(d) * 8 bytes for statistics, 1 byte for a sync
request.  ``sync_rounds`` counts the rounds with at least one release in the run.

Privacy (Remark 5/6): one tree stream per (agent, set), M gamma streams, each of capacity
ceil(T/gamma): depth m = 1 + ceil(log2(T/gamma)); Lambda and kappa take n = gamma ceil(T/gamma)
releases per agent (the extra log gamma) and keep M.  One datum enters exactly one stream, so an
agent's privacy loss is that of one stream (``epsilon_messages``).  As in the centralized
algorithm the schedule reads non-private data (``guarantee = "no formal guarantee"``); ``schedule = "private"``
is not available here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from fedbandits.algorithms.base import (
    CLIPPING_COUNTS,
    ClipCounts,
    Explores,
    MergeRule,
    Policy,
    PolicyContext,
    policy_entry,
)
from fedbandits.algorithms.communication_graph import (
    GRAPHS,
    Graph,
    build_graph,
    greedy_clique_cover,
    normalize_edges,
)
from fedbandits.algorithms.feducb import (
    NOISE_REPORT_MERGE,
    SIGNAL_BYTES,
    FedUCBParams,
    calibrate_feducb,
    proposition2_radius,
    theorem1_threshold,
)
from fedbandits.core.exploration import Explorer
from fedbandits.core.ridge import spd_inverse
from fedbandits.core.ucb import UCBScorer
from fedbandits.core.validation import check_choice, check_float, check_int
from fedbandits.privacy.privatizer import TreePrivatizer
from fedbandits.protocols.base import FLOAT_BYTES, symmetric_payload_floats

_PARAM_GRAPHS = ("grid", "erdos-renyi", "geometric")


# -- parameters --------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecentralizedFedUCBParams(FedUCBParams):
    graph: str = field(
        default="complete",
        metadata={"help": "'complete', 'line', 'ring', 'star', 'grid', 'erdos-renyi', 'geometric' or 'edges'"},
    )
    graph_param: float = field(
        default=0.0,
        metadata={
            "help": "erdos-renyi: edge probability in (0, 1]; geometric: radius > 0 (unit square); "
            "grid: rows; 0 = default (2 ln M / M, 2 sqrt(ln M / (pi M)), most square)"
        },
    )
    graph_seed: int = field(default=0, metadata={"help": "seed of a random graph (the same graph for every run), >= 0"})
    edges: tuple[tuple[int, int], ...] = field(
        default=(), metadata={"help": "graph = 'edges': list of [i, j] agent pairs (undirected)"}
    )
    gamma: int = field(
        default=1, metadata={"help": "time-to-live / delay gamma in [1, diameter]: hops and parameter sets"}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("graph", self.graph, GRAPHS)
        check_int("gamma", self.gamma, low=1)
        check_int("graph_seed", self.graph_seed, low=0)
        check_float("graph_param", self.graph_param, low=0.0)
        if self.graph == "erdos-renyi":
            check_float("graph_param (edge probability)", self.graph_param, low=0.0, high=1.0)
        elif self.graph == "grid" and self.graph_param != int(self.graph_param):
            raise ValueError(
                f"graph_param (grid rows) must be an integer >= 0 (0: most square), got {self.graph_param}"
            )
        elif self.graph not in _PARAM_GRAPHS and self.graph_param != 0.0:
            raise ValueError(
                f"graph_param is only used by {', '.join(map(repr, _PARAM_GRAPHS))}; "
                f"it must be 0 for graph = {self.graph!r}, got {self.graph_param}"
            )
        object.__setattr__(self, "edges", normalize_edges(self.edges))
        if self.graph != "edges" and self.edges:
            raise ValueError(f"edges is only used with graph = 'edges'; it must be empty for graph = {self.graph!r}")
        if self.schedule == "private":
            raise ValueError("schedule must be 'adaptive' for feducb-decentralized ('private' is centralized only)")

    def build_graph(self, n_agents: int) -> Graph:
        return build_graph(self.graph, n_agents, self.graph_param, self.graph_seed, self.edges)


# -- messages in flight ------------------------------------------------------------------------


class _Floods:
    """Messages being flooded, one row each: run, source, parameter set, send round, hop state."""

    def __init__(self, n_nodes: int, payload_shape: tuple[int, ...] | None) -> None:
        self.run = np.zeros(0, dtype=np.int64)
        self.src = np.zeros(0, dtype=np.int64)
        self.set = np.zeros(0, dtype=np.int64)
        self.sent = np.zeros(0, dtype=np.int64)
        self.front = np.zeros((0, n_nodes), dtype=bool)  # reached at the last hop (forward next)
        self.prev = np.zeros((0, n_nodes), dtype=bool)  # reached at the hop before (senders of front)
        self.seen = np.zeros((0, n_nodes), dtype=bool)
        self.hops = np.zeros(0, dtype=np.int64)
        self.payload = None if payload_shape is None else np.zeros((0, *payload_shape))

    def __len__(self) -> int:
        return self.run.size

    def add(self, run: np.ndarray, src: np.ndarray, sets: np.ndarray, t: int, payload: np.ndarray | None) -> None:
        n, m = run.size, self.front.shape[1]
        start = np.zeros((n, m), dtype=bool)
        start[np.arange(n), src] = True
        self.run = np.concatenate([self.run, run])
        self.src = np.concatenate([self.src, src])
        self.set = np.concatenate([self.set, sets])
        self.sent = np.concatenate([self.sent, np.full(n, t, dtype=np.int64)])
        self.front = np.concatenate([self.front, start])
        self.prev = np.concatenate([self.prev, np.zeros((n, m), dtype=bool)])
        self.seen = np.concatenate([self.seen, start])
        self.hops = np.concatenate([self.hops, np.zeros(n, dtype=np.int64)])
        if self.payload is not None and payload is not None:
            self.payload = np.concatenate([self.payload, payload])

    def hop(self, adjacency: np.ndarray, degrees: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Move every message one hop; returns (transmissions per message, newly reached (N, M))."""
        front = self.front.astype(np.float64)
        from_prev = self.prev.astype(np.float64) @ adjacency  # per node: neighbours it received from
        sends = front @ degrees - (front * from_prev).sum(axis=1)
        reached = ((front @ adjacency) > 0) & ~self.seen
        self.seen |= reached
        self.prev = self.front
        self.front = reached
        self.hops += 1
        return sends.round().astype(np.int64), reached

    def drop_finished(self, ttl: int) -> None:
        """Drop the messages that have made ``ttl`` hops or reached nobody new at the last hop."""
        keep = (self.hops < ttl) & self.front.any(axis=1)
        if keep.all():
            return
        for name in ("run", "src", "set", "sent", "front", "prev", "seen", "hops"):
            setattr(self, name, getattr(self, name)[keep])
        if self.payload is not None:
            self.payload = self.payload[keep]


# -- the policy --------------------------------------------------------------------------------


class DecentralizedFedUCB(Policy, ClipCounts, Explores):
    """Decentralized FedUCB for R runs x M agents (see the module docstring)."""

    name = "feducb-decentralized"
    description = "FedUCB peer-to-peer: flooding with TTL gamma, gamma round-robin sets, clique sync (D&P Alg. 3)"
    #: the graph (seeded by graph_seed, the same in every run) and the calibration come from the config
    report_merge: ClassVar[Mapping[str, MergeRule]] = {
        "graph": "same",
        "graph_edges": "same",
        "graph_diameter": "same",
        "gamma": "same",
        "clique_cover_size": "same",
        "clique_sizes": "same",
        "rule": "same",
        "threshold_D": "same",
        "rho_min": "same",
        "rho_max": "same",
        "sync_signals": "sum",
        "releases": "sum",
        "request_transmissions": "sum",
        "stats_transmissions": "sum",
        "protocol": "same",
        "calibration": "same",
        "epsilon": "same",
        "delta": "same",
        "privacy_streams": "same",
        "stream_capacity": "same",
        **NOISE_REPORT_MERGE,
        **CLIPPING_COUNTS,
    }

    def __init__(
        self,
        n_runs: int,
        n_agents: int,
        n_arms: int,
        dim: int,
        horizon: int,
        params: DecentralizedFedUCBParams,
        noise_rngs: Sequence[np.random.Generator] | None = None,
        choice_rngs: Sequence[np.random.Generator] | None = None,
    ) -> None:
        super().__init__(n_runs, n_agents, n_arms, dim, horizon)
        self.explorer = Explorer(params, n_runs, n_agents, choice_rngs)
        self.params = params
        self.reward_offset = params.reward_offset
        self.private = params.private
        M, d, G = n_agents, dim, params.gamma
        R = n_runs
        self.gamma = G

        self._init_graph(params, M, G)  # graph, delay bound, cliques of G^gamma

        # privacy: one stream per (agent, set), at most ceil(T/gamma) releases each
        self.stream_capacity = math.ceil(horizon / G)
        self._init_privacy(params, horizon, R, M, d, G, noise_rngs)
        if isinstance(params.threshold, str):
            self.threshold = theorem1_threshold(
                self.stream_capacity, d, self.rho_min, self.rho_max, params.feature_bound
            )
        else:
            self.threshold = float(params.threshold)
        self.radius = params.confidence_radius()
        self.scorer = UCBScorer(R * M, n_arms, d)

        self._init_statistics(R, M, d, G)

        # transport and counters
        self._requests = _Floods(M, None)
        self._stats = _Floods(M, (d + 1, d + 1))
        self._stats_bytes = symmetric_payload_floats(d) * FLOAT_BYTES
        self.signals = np.zeros(R, dtype=np.int64)  # sync requests issued
        self.releases = np.zeros(R, dtype=np.int64)  # statistics released (privatizer calls)
        self.request_transmissions = np.zeros(R, dtype=np.int64)
        self.stats_transmissions = np.zeros(R, dtype=np.int64)
        self.delivered = np.zeros((R, M, M), dtype=np.int64)  # statistics messages [run, source, holder]
        self.init_clipping()

    def _init_graph(self, params: DecentralizedFedUCBParams, M: int, G: int) -> None:
        """The graph, its delay bound and distances, the cliques of G^gamma (refused if unusable)."""
        self.graph = params.build_graph(M)
        parts = self.graph.components()
        if parts > 1:
            raise ValueError(
                f"graph must be connected: the {params.graph!r} graph on {M} agents has {parts} components"
                + ("; use a larger graph_param or another graph_seed" if params.graph in _PARAM_GRAPHS else "")
            )
        self.diameter = self.graph.diameter()
        if G > max(self.diameter, 1):
            raise ValueError(
                f"gamma must be an integer in [1, {max(self.diameter, 1)}] (the diameter of the {params.graph!r} "
                f"graph on {M} agents; a time-to-live beyond the diameter adds nothing), got {G}"
            )
        self.distances = self.graph.distances()
        self.cliques = greedy_clique_cover(self.graph.power(G))
        self.same_clique = self.cliques[:, None] == self.cliques[None, :]
        self.clique_size = np.bincount(self.cliques)[self.cliques]  # |C(i)| per agent
        self._adjacency = self.graph.adjacency.astype(np.float64)
        self._degrees = self.graph.degrees.astype(np.float64)

    def _init_privacy(
        self,
        params: DecentralizedFedUCBParams,
        horizon: int,
        R: int,
        M: int,
        d: int,
        G: int,
        noise_rngs: Sequence[np.random.Generator] | None,
    ) -> None:
        """The calibration, shifts and tree privatizer of the M gamma streams (private), or the
        ridge regulariser's shift (non-private)."""
        if self.private:
            if noise_rngs is None:
                raise ValueError("a private feducb-decentralized needs one noise Generator per run")
            self.noise = calibrate_feducb(
                params, horizon=horizon, agents=M, dim=d, releases=self.stream_capacity, syncs=G * self.stream_capacity
            )
            self.rho_min, self.rho_max = self.noise.shift, 3.0 * self.noise.shift
            self.per_agent_shift = 2.0 * self.noise.shift
            self.kappa = self.noise.kappa
            msg_rngs = [rng.spawn(1)[0] for rng in noise_rngs]
            self.privatizer: TreePrivatizer | None = TreePrivatizer(
                R, M * G, d, self.noise.sigma, msg_rngs, self.stream_capacity
            )
        else:
            self.noise = None  # type: ignore[assignment]
            self.rho_min = self.rho_max = params.reg
            self.per_agent_shift = params.reg
            self.kappa = 0.0
            self.privatizer = None

    def _init_statistics(self, R: int, M: int, d: int, G: int) -> None:
        """The per (run, agent, set) statistics before any round."""
        # per (run, agent, set): synced S (raw sum + shift, and the PSD-repaired one in use), local
        # batch Q-hat, the acting V = S + U and its inverse, log-dets, uses since the last release
        base = (self.clique_size * self.per_agent_shift)[None, :, None, None, None] * np.eye(d)
        shape = (R, M, G)
        self.synced_raw = np.broadcast_to(base, (*shape, d, d)).copy()
        self.synced_cov = self.synced_raw.copy()
        self.synced_bias = np.zeros((*shape, d))
        self.local_q = np.zeros((*shape, d + 1, d + 1))
        self.gram = self.synced_cov.copy()
        self.inv = np.broadcast_to(np.linalg.inv(base), (*shape, d, d)).copy()
        self.bias = np.zeros((*shape, d))
        logdet0 = np.broadcast_to(d * np.log(self.clique_size * self.per_agent_shift)[None, :, None], shape)
        self.logdet_agent = logdet0.copy()
        self.logdet_synced = logdet0.copy()
        self.uses = np.zeros(shape, dtype=np.int64)
        self.own_prefix = np.zeros((*shape, d + 1, d + 1))  # last prefix released by the stream
        self.pending = np.zeros(shape, dtype=bool)

    # -- acting -----------------------------------------------------------------------------
    def current_set(self) -> int:
        """The parameter set g = t mod gamma of the round being played (t = self.t + 1)."""
        return (self.t + 1) % self.gamma

    def confidence(self, g: int) -> np.ndarray:
        """beta^(g)_{i,t} per (run, agent), shape (R*M,)."""
        if self.params.radius == "proposition-2":
            beta = proposition2_radius(
                self.params,
                self.logdet_agent[:, :, g],
                self.dim,
                self.clique_size[None, :].astype(np.float64),
                self.rho_min,
                self.rho_max,
                self.kappa,
            )
            return beta.reshape(-1)
        samples = self.clique_size * math.ceil(self.t / self.gamma)
        beta = np.asarray(self.radius(samples.astype(np.float64), self.dim, self.params.reg))
        return np.broadcast_to(beta, (self.n_runs, self.n_agents)).reshape(-1)

    def _select(self, features: np.ndarray) -> np.ndarray:
        g = self.current_set()
        n, d = self.n_runs * self.n_agents, self.dim
        inv = self.inv[:, :, g]
        theta = np.einsum("rmij,rmj->rmi", inv, self.bias[:, :, g])
        flat = features.reshape(n, self.n_arms, d)
        return self.explorer.choose(self.scorer, flat, inv.reshape(n, d, d), theta.reshape(n, d), self.confidence(g))

    def _observe(self, x: np.ndarray, y: np.ndarray) -> None:
        if self.private:
            x, y = self.clip(x, y, self.params.feature_bound, self.params.reward_bound)
        g = self.current_set()
        inv = self.inv[:, :, g]  # views: updated in place
        u = np.einsum("...ij,...j->...i", inv, x)
        quad = np.einsum("...i,...i->...", x, u)
        self.logdet_agent[:, :, g] += np.log1p(quad)
        inv -= (u / (1.0 + quad)[..., None])[..., :, None] * u[..., None, :]
        self.gram[:, :, g] += x[..., :, None] * x[..., None, :]
        self.bias[:, :, g] += x * y[..., None]
        z = np.concatenate([x, y[..., None]], axis=-1)
        self.local_q[:, :, g] += z[..., :, None] * z[..., None, :]
        self.uses[:, :, g] += 1

    # -- communication ----------------------------------------------------------------------
    def end_round(self) -> None:
        g = self.current_set()
        super().end_round()
        t = self.t  # the round just played
        fire = self.trigger(g)  # line 6, on the state before this round's deliveries
        touched = np.zeros((self.n_runs, self.n_agents, self.gamma), dtype=bool)
        self._deliver(t, touched)
        # own requests: flooded, and answered by the requester itself at once
        runs, agents = np.nonzero(fire)
        self.signals += fire.sum(axis=1)
        self.pending[:, :, g] |= fire
        answer = self.pending & (self.uses > 0)  # no new data for the set: nothing to release
        self.pending[:] = False
        released = self._release(answer, t) if answer.any() else None
        touched |= answer
        if touched.any():
            self._refresh(touched)
        if runs.size:
            self._requests.add(runs, agents, np.full(runs.size, g, dtype=np.int64), t, None)
        if released is not None:
            r, a, sets, delta = released
            self._stats.add(r, a, sets, t, delta)

    def trigger(self, g: int) -> np.ndarray:
        """Which agents request a sync of set ``g`` after this round's observation, (R, M) bool."""
        factor = self.uses[:, :, g].astype(np.float64) * (1.0 + self.params.feature_bound**2)
        base = self.logdet_synced[:, :, g]
        if self.params.rule == "restated":
            return (self.logdet_agent[:, :, g] - base) * factor > self.threshold
        extra = self.n_agents * (self.rho_max - self.rho_min)
        if extra == 0.0:
            logdet = self.logdet_agent[:, :, g]
        else:
            logdet = _logdet(self.gram[:, :, g] + extra * np.eye(self.dim))
        return (logdet - base) * factor >= self.threshold

    def _deliver(self, t: int, touched: np.ndarray) -> None:
        """One hop of every in-flight message; same-clique receivers act on them (lines 12-22)."""
        G = self.gamma
        for floods, counter, size in (
            (self._requests, self.request_transmissions, SIGNAL_BYTES),
            (self._stats, self.stats_transmissions, self._stats_bytes),
        ):
            if not len(floods):
                continue
            sends, reached = floods.hop(self._adjacency, self._degrees)
            per_run = np.bincount(floods.run, weights=sends, minlength=self.n_runs).astype(np.int64)
            counter += per_run
            self.messages += per_run
            self.bytes_sent += per_run * size
            msg, holder = np.nonzero(reached)
            src = floods.src[msg]
            use = self.same_clique[src, holder] & (floods.sent[msg] >= t - G)  # lines 14 / 19
            run, sets = floods.run[msg], floods.set[msg]
            if floods is self._requests:
                self.pending[run[use], holder[use], sets[use]] = True
            else:
                np.add.at(self.delivered, (run, src, holder), 1)
                r, h, s = run[use], holder[use], sets[use]
                payload = floods.payload[msg[use]]  # type: ignore[index]
                np.add.at(self.synced_raw, (r, h, s), payload[:, : self.dim, : self.dim])
                np.add.at(self.synced_bias, (r, h, s), payload[:, : self.dim, self.dim])
                touched[r, h, s] = True
            floods.drop_finished(G)

    def _release(self, mask: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Lines 15-16 for every (run, agent, set) in ``mask``: privatize Q-hat and adopt it.

        Returns (runs, agents, sets, increments of the released prefixes) for flooding.
        """
        d, G = self.dim, self.gamma
        runs, agents, sets = np.nonzero(mask)
        q = self.local_q[runs, agents, sets]
        if self.privatizer is not None:
            streams = agents * G + sets
            smask = np.zeros((self.n_runs, self.n_agents * G), dtype=bool)
            smask[runs, streams] = True
            batch = np.zeros((self.n_runs, self.n_agents * G, d + 1, d + 1))
            batch[runs, streams] = q
            prefix = self.privatizer.release(smask, batch)[runs, streams]
            delta = prefix - self.own_prefix[runs, agents, sets]
            self.own_prefix[runs, agents, sets] = prefix
        else:
            delta = q.copy()
            self.own_prefix[runs, agents, sets] += q
        delta[:, d, d] = 0.0  # the sum of y^2 is never released
        self.synced_raw[runs, agents, sets] += delta[:, :d, :d]
        self.synced_bias[runs, agents, sets] += delta[:, :d, d]
        self.local_q[runs, agents, sets] = 0.0
        self.uses[runs, agents, sets] = 0
        self.releases += np.bincount(runs, minlength=self.n_runs)
        self.sync_rounds += np.bincount(runs, minlength=self.n_runs) > 0
        return runs, agents, sets, delta

    def _refresh(self, touched: np.ndarray) -> None:
        """Recompute S (repaired), V = S + U, V^{-1} and the log-dets where S changed."""
        d = self.dim
        idx = np.nonzero(touched)
        raw = self.synced_raw[idx]
        raw = 0.5 * (raw + np.swapaxes(raw, -1, -2))
        if self.private:
            floor = 0.1 * self.clique_size[idx[1]] * self.rho_min
            raw = self.repair(raw, floor)
        local = self.local_q[idx]
        gram = raw + local[:, :d, :d]
        self.synced_cov[idx] = raw
        self.gram[idx] = gram
        self.bias[idx] = self.synced_bias[idx] + local[:, :d, d]
        self.inv[idx] = spd_inverse(gram)
        self.logdet_synced[idx] = _logdet(raw)
        self.logdet_agent[idx] = _logdet(gram)

    # -- reporting ---------------------------------------------------------------------------
    def report(self) -> dict[str, object]:
        sizes = np.bincount(self.cliques)
        out: dict[str, object] = {
            "graph": self.params.graph,
            "graph_edges": self.graph.n_edges,
            "graph_diameter": self.diameter,
            "gamma": self.gamma,
            "clique_cover_size": int(sizes.size),
            "clique_sizes": [int(s) for s in sizes],
            "rule": self.params.rule,
            "threshold_D": self.threshold,
            "rho_min": self.rho_min,
            "rho_max": self.rho_max,
            "sync_signals": int(self.signals.sum()),
            "releases": int(self.releases.sum()),
            "request_transmissions": int(self.request_transmissions.sum()),
            "stats_transmissions": int(self.stats_transmissions.sum()),
        }
        if self.private:
            out.update(
                {
                    "protocol": "feducb-privatizer",
                    "calibration": self.params.calibration,
                    "epsilon": self.params.epsilon,
                    "delta": self.params.delta,
                    "privacy_streams": self.n_agents * self.gamma,
                    "stream_capacity": self.stream_capacity,
                    **self.noise.report(),
                    **self.clipping_report(),
                }
            )
        else:
            out.update({"protocol": "none"})
        return out


def _logdet(gram: np.ndarray) -> np.ndarray:
    return 2.0 * np.log(np.diagonal(np.linalg.cholesky(gram), axis1=-2, axis2=-1)).sum(axis=-1)


def _build(params: DecentralizedFedUCBParams, ctx: PolicyContext) -> Policy:
    return DecentralizedFedUCB(
        ctx.n_runs, ctx.n_agents, ctx.n_arms, ctx.dim, ctx.horizon, params, list(ctx.noise_rngs), ctx.choice_rngs
    )


#: the registry's entry (fedbandits' pyproject.toml names it)
ENTRY = policy_entry(DecentralizedFedUCB, DecentralizedFedUCBParams, _build)
