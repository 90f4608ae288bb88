"""Bandit instances built from MovieLens ratings: clustered users (FCLUB) and one linear model.

One pipeline -- ratings file -> factors -> clusters -> the two environments.  Reading and
validating the ratings file is :mod:`fedbandits.envs.movielens_ratings` (its public names are
importable from here too); the rest stays here, held together by private plumbing: per-process
caches keyed stage by stage (each on the key of the stage before) and emptied together by
:func:`clear_cache`, and the float32 unit-ball rounding that the items, the users, the cluster
centres and the linear instance's theta* share.  This docstring, which docs/data.md points to,
describes the whole preprocessing, the file format included, in one place.

Data
----
:func:`load_ratings` streams a MovieLens ratings file line by line and validates every line:

* ``ratings.csv`` (ml-latest, ml-latest-small, ml-20m/25m): ``userId,movieId,rating,timestamp``,
  with or without that header line (the header must name exactly those four columns);
* ``ratings.dat`` (ml-1m, ml-10m): ``UserID::MovieID::Rating::Timestamp``, no header.

The format is detected from the first non-blank line (``::`` -> dat, ``,`` -> csv), not from the
file name.  LF and CRLF line ends and a UTF-8 byte-order mark are accepted; blank lines are
skipped.  Ids and timestamps must be non-negative decimal integers, ratings finite numbers in
[0.5, 5] (every MovieLens release uses that scale), every line exactly four fields, and every
(user, movie) pair must occur once; anything else raises ``ValueError`` naming the file and the
line.  ``path`` may be the file itself or a folder holding ``ratings.csv`` or ``ratings.dat``.

Preprocessing (shared by both instances, :func:`movielens_factors`)
--------------------------------------------------------------------
1. **Selection.**  The ``users`` users and the ``items`` movies with the most ratings (counted
   over the whole file, whatever the rating; ties broken by the smaller id) are kept.
2. **Binarisation.**  The user x item matrix A has A[i, j] = 1 if user i rated movie j at least
   ``like_threshold`` (default 4 stars: "liked"), and 0 if the rating is lower *or absent*
   (unobserved entries are treated as 0).  Liu et al. (2022) defer their exact MovieLens
   recipe to an appendix that the shared text does not contain; this follows the brief's
   FCLUB-style construction (top users/items, SVD, k-means of users into m clusters).  Binary
   feedback matches the Bernoulli (like / no like) rewards of the instances.
3. **Truncated SVD.**  The top d-1 singular triplets A ~ U S V^T are computed exactly
   (ARPACK on the sparse matrix, fixed start vector, so results are deterministic; each
   component's sign is fixed so that its largest-magnitude item loading is positive).  Raw
   factors: user u_i = U_i S^(1/2), item v_j = V_j S^(1/2), so <u_i, v_j> ~ A[i, j].
4. **Items** (the arms): x_j = (v_j / v_max, 1) / sqrt(2) with v_max = max_j ||v_j||, so
   ||x_j|| <= 1; the constant last entry is the bias entry (it also makes E[x x^T] full rank).
   The item's magnitude (how strongly its like-pattern is expressed) is kept.
5. **Users**: theta_i = (u_i / ||u_i||, 1) / sqrt(2), norm exactly 1: a user's *direction* of
   taste, i.e. which items they prefer, independent of how much they rate (a user with no like
   among the kept items gets the zero direction, theta_i = (0, ..., 0, 1/sqrt(2))).
6. **Expected reward** of item j for preference theta = (w, 1)/sqrt(2), ||w|| = 1:
   <x_j, theta> = 1/2 + <v_j, w> / (2 v_max), which lies in [0, 1] by Cauchy-Schwarz (the
   clip to [0, 1] only guards float round-off): 1/2 is indifference, larger is a stronger
   predicted like.  Rewards are Bernoulli(expected reward): like / no like, 1/2-sub-Gaussian.

Features and preference vectors are stored in float32 and the expected rewards are computed
(in float64, then rounded to float32) from exactly those float32 numbers, as in
:mod:`fedbandits.envs.synthetic`.

Caching: the parsed ratings (keyed by resolved file, size and modification time), the factors
(keyed by file + users, items, dim, like_threshold) and the clusterings (+ clusters, seed) are
cached in memory per process, so all runs and environments of a process share them.  Cached
arrays are read-only.  Per-run randomness comes only from each run's Generator.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from fedbandits.core.validation import check_choice, check_float, check_int
from fedbandits.envs.base import Environment, Round, env_entry, require_extra

# the ratings file reader; its public names stay importable from this module
from fedbandits.envs.movielens_ratings import (
    CSV_HEADER,  # noqa: F401
    DEFAULT_DATASET,
    RATING_RANGE,
    RATINGS_FILES,  # noqa: F401
    Ratings,
    find_ratings_file,  # noqa: F401
    load_ratings,
    resolve_path,
)

_HALF_SQRT2 = math.sqrt(0.5)
#: arrival models of ``movielens-clusters``
ARRIVALS = ("per-server", "single")


# -- loading (the reader: movielens_ratings) ---------------------------------------------------


def _file_key(path: str | Path) -> tuple[str, int, int]:
    file = resolve_path(path).resolve()
    st = file.stat()
    return str(file), st.st_size, st.st_mtime_ns


@lru_cache(maxsize=2)
def _cached_ratings(key: tuple[str, int, int]) -> Ratings:
    ratings = load_ratings(key[0])
    for a in (ratings.users, ratings.items, ratings.ratings, ratings.timestamps):
        a.flags.writeable = False
    return ratings


# -- factors -----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class MovieLensFactors:
    """The processed instance data shared by both environments (read-only arrays).

    ``item_features (items, d)`` are the arms x_j, ``user_vectors (users, d)`` the users' own
    preference vectors theta_i (see the module docstring); ``user_ids`` / ``item_ids`` the
    original MovieLens ids of rows 0.. of those arrays (most-rated first).
    """

    source: Path
    user_ids: np.ndarray
    item_ids: np.ndarray
    item_features: np.ndarray  # float32
    user_vectors: np.ndarray  # float32
    singular_values: np.ndarray  # float64, the d-1 kept
    like_rate: float  # fraction of ones in the binarised matrix


def movielens_factors(path: str | Path, users: int, items: int, dim: int, like_threshold: float) -> MovieLensFactors:
    """Processed factors of a ratings file (cached per process; see the module docstring)."""
    users = check_int("users", users, low=1)
    items = check_int("items", items, low=1)
    dim = check_int("dim", dim, low=2)
    like_threshold = check_float("like_threshold", like_threshold, low=RATING_RANGE[0], high=RATING_RANGE[1])
    return _cached_factors(_file_key(path), users, items, dim, like_threshold)


def _top_by_count(ids: np.ndarray, n: int, what: str, source: Path) -> tuple[np.ndarray, np.ndarray]:
    """(selected ids most-counted first, rank of every rating's id or -1)."""
    uniq, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    if n > uniq.size:
        raise ValueError(f"{what} = {n} exceeds the {uniq.size} {what} with ratings in {source}")
    order = np.lexsort((uniq, -counts))[:n]  # most ratings first, then smaller id
    rank = np.full(uniq.size, -1, dtype=np.int64)
    rank[order] = np.arange(n)
    return uniq[order], rank[inverse]


@lru_cache(maxsize=8)
def _cached_factors(
    key: tuple[str, int, int], users: int, items: int, dim: int, like_threshold: float
) -> MovieLensFactors:
    from scipy import sparse
    from scipy.sparse.linalg import svds

    data = _cached_ratings(key)
    k = dim - 1
    if k >= min(users, items):
        raise ValueError(f"dim = {dim} needs dim - 1 < min(users, items) = {min(users, items)}")
    user_ids, row = _top_by_count(data.users, users, "users", data.source)
    item_ids, col = _top_by_count(data.items, items, "items", data.source)
    keep = (row >= 0) & (col >= 0) & (data.ratings >= like_threshold)
    if not keep.any():
        raise ValueError(f"{data.source}: no rating >= {like_threshold} among the selected users and items")
    matrix = sparse.csr_array((np.ones(int(keep.sum())), (row[keep], col[keep])), shape=(users, items))
    v0 = np.random.default_rng(0).uniform(0.5, 1.5, size=min(users, items))
    u, s, vt = svds(matrix, k=k, v0=v0, tol=0, solver="arpack")
    top = np.argsort(-s, kind="stable")
    u, s, vt = u[:, top], s[top], vt[top]
    sign = np.sign(vt[np.arange(k), np.abs(vt).argmax(axis=1)])
    sign[sign == 0] = 1.0
    u, vt = u * sign, vt * sign[:, None]
    root = np.sqrt(np.clip(s, 0.0, None))
    user_raw = u * root
    item_raw = vt.T * root
    v_max = float(np.linalg.norm(item_raw, axis=1).max())
    items_x = np.empty((items, dim))
    items_x[:, :-1] = item_raw / v_max
    items_x[:, -1] = 1.0
    users_theta = np.empty((users, dim))
    users_theta[:, :-1] = _directions(user_raw)
    users_theta[:, -1] = 1.0
    factors = MovieLensFactors(
        source=data.source,
        user_ids=user_ids,
        item_ids=item_ids,
        item_features=_unit_ball_f32(items_x * _HALF_SQRT2),
        user_vectors=_unit_ball_f32(users_theta * _HALF_SQRT2),
        singular_values=s,
        like_rate=float(keep.sum()) / (users * items),
    )
    for a in (factors.user_ids, factors.item_ids, factors.item_features, factors.user_vectors, s):
        a.flags.writeable = False
    return factors


def _directions(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit norm (zero rows stay zero)."""
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


def _unit_ball_f32(vectors: np.ndarray) -> np.ndarray:
    """float32 copy with every row's norm (computed in float64) <= 1 despite rounding."""
    out = vectors.astype(np.float32)
    for _ in range(8):
        norms = np.linalg.norm(out.astype(np.float64), axis=-1)
        bad = norms > 1.0
        if not bad.any():
            return out
        out[bad] = (out[bad].astype(np.float64) / norms[bad, None] * (1.0 - 2.0**-23)).astype(np.float32)
    raise AssertionError("could not bring float32 rows into the unit ball")  # pragma: no cover


@dataclass(frozen=True, eq=False)
class UserClusters:
    """k-means clustering of the users' preference directions (read-only arrays)."""

    labels: np.ndarray  # (users,) int64, cluster 0 is the largest
    centres: np.ndarray  # (m, d) float32, norm 1
    sizes: np.ndarray  # (m,) int64
    gap: float  # min_{a != b} ||centres[a] - centres[b]||


def movielens_clusters(factors: MovieLensFactors, clusters: int, seed: int) -> UserClusters:
    """Cluster ``factors.user_vectors`` into ``clusters`` groups (cached per process)."""
    return _cached_clusters(factors, check_int("clusters", clusters, low=2), check_int("cluster_seed", seed, low=0))


@lru_cache(maxsize=16)
def _cached_clusters(factors: MovieLensFactors, m: int, seed: int) -> UserClusters:
    from sklearn.cluster import KMeans

    directions = factors.user_vectors[:, :-1].astype(np.float64) / _HALF_SQRT2
    if m > directions.shape[0]:
        raise ValueError(f"clusters = {m} exceeds the {directions.shape[0]} users")
    distinct = np.unique(directions, axis=0).shape[0]
    if distinct < m:
        raise ValueError(f"the users have only {distinct} distinct taste directions: fewer than {m} distinct centres")
    km = KMeans(n_clusters=m, n_init=10, random_state=seed).fit(directions)
    labels = np.asarray(km.labels_, dtype=np.int64)
    sizes = np.bincount(labels, minlength=m)
    first = np.array([np.flatnonzero(labels == c)[0] for c in range(m)])
    order = np.lexsort((first, -sizes))  # largest cluster first, ties by first member
    relabel = np.empty(m, dtype=np.int64)
    relabel[order] = np.arange(m)
    labels = relabel[labels]
    means = np.stack([directions[labels == c].mean(axis=0) for c in range(m)])
    if (np.linalg.norm(means, axis=1) == 0).any():
        raise ValueError("a k-means cluster has a zero mean direction; choose other clusters / cluster_seed")
    centres = np.empty((m, factors.user_vectors.shape[1]))
    centres[:, :-1] = _directions(means)
    centres[:, -1] = 1.0
    centres32 = _unit_ball_f32(centres * _HALF_SQRT2)
    c64 = centres32.astype(np.float64)
    dist = np.linalg.norm(c64[:, None] - c64[None], axis=-1)
    gap = float(dist[np.triu_indices(m, 1)].min())
    if gap <= 0.0:
        raise ValueError(f"k-means found fewer than {m} distinct centres; lower clusters")
    out = UserClusters(labels=labels, centres=centres32, sizes=np.bincount(labels, minlength=m), gap=gap)
    for a in (out.labels, out.centres, out.sizes):
        a.flags.writeable = False
    return out


def clear_cache() -> None:
    """Forget every cached ratings file, factorisation and clustering of this process."""
    _cached_ratings.cache_clear()
    _cached_factors.cache_clear()
    _cached_clusters.cache_clear()


# -- environments ------------------------------------------------------------------------------


def _path_field() -> str:
    return field(
        default="",
        metadata={
            "help": "ratings.csv / ratings.dat file or a folder holding one; "
            "empty = movielens-latest-small in $FEDBANDITS_DATA (default ~/.local/share/fedbandits)"
        },
    )


def _check_common(params: MovieLensLinearParams | MovieLensClustersParams) -> None:
    if not isinstance(params.path, str):
        raise ValueError(f"path must be a string (a file or folder), got {params.path!r}")
    check_int("agents", params.agents, low=1)
    check_int("arms", params.arms, low=1)
    check_int("users", params.users, low=1)
    check_int("items", params.items, low=1)
    check_int("dim", params.dim, low=2, high=min(params.users, params.items))
    check_float("like_threshold", params.like_threshold, low=RATING_RANGE[0], high=RATING_RANGE[1])


@dataclass(frozen=True)
class MovieLensLinearParams:
    path: str = _path_field()
    agents: int = field(default=10, metadata={"help": "number of agents (silos) M >= 1"})
    arms: int = field(default=20, metadata={"help": "items offered per agent per round K >= 1 (drawn i.i.d.)"})
    dim: int = field(
        default=10, metadata={"help": "feature dimension d in [2, min(users, items)]: d-1 SVD factors + bias"}
    )
    users: int = field(default=500, metadata={"help": "users with the most ratings kept (theta* is their mean taste)"})
    items: int = field(default=1000, metadata={"help": "movies with the most ratings kept: the item pool"})
    like_threshold: float = field(default=4.0, metadata={"help": "a rating >= this is a like (1), else 0; in [0.5, 5]"})

    def required_data(self) -> tuple[str, ...]:
        """Data sets read from the data folder (:mod:`fedbandits.envs.datahome`): ml-latest-small if no ``path``."""
        return (DEFAULT_DATASET,) if self.path == "" else ()

    def __post_init__(self) -> None:
        _check_common(self)

    #: whether rounds carry user ids (what user-level privacy needs): items are drawn for the kept users'
    #: mean taste, no user per round
    user_ids = False


@dataclass(frozen=True)
class MovieLensClustersParams:
    path: str = _path_field()
    agents: int = field(default=10, metadata={"help": "number of local servers L in [1, users]; users dealt evenly"})
    arms: int = field(default=20, metadata={"help": "items offered per server per round K >= 1 (drawn i.i.d.)"})
    dim: int = field(
        default=10, metadata={"help": "feature dimension d in [2, min(users, items)]: d-1 SVD factors + bias"}
    )
    users: int = field(default=500, metadata={"help": "users with the most ratings kept, n >= clusters"})
    items: int = field(default=1000, metadata={"help": "movies with the most ratings kept: the item pool"})
    clusters: int = field(default=5, metadata={"help": "k-means clusters m in [2, users]: distinct preference vectors"})
    like_threshold: float = field(default=4.0, metadata={"help": "a rating >= this is a like (1), else 0; in [0.5, 5]"})
    split_seed: int = field(default=0, metadata={"help": "seed of the fixed user permutation dealt to servers, >= 0"})
    cluster_seed: int = field(default=0, metadata={"help": "k-means random_state (10 restarts), >= 0"})
    arrivals: str = field(
        default="per-server",
        metadata={"help": "'per-server' (one user per server and round, M = L) or 'single' (one per round, M = 1)"},
    )

    def required_data(self) -> tuple[str, ...]:
        """Data sets read from the data folder (:mod:`fedbandits.envs.datahome`): ml-latest-small if no ``path``."""
        return (DEFAULT_DATASET,) if self.path == "" else ()

    def __post_init__(self) -> None:
        _check_common(self)
        check_int("clusters", self.clusters, low=2, high=self.users)
        require_extra("sklearn", "data", "environment 'movielens-clusters' (k-means of the users' tastes)")
        check_int("agents", self.agents, low=1, high=self.users)
        check_int("split_seed", self.split_seed, low=0)
        check_int("cluster_seed", self.cluster_seed, low=0)
        check_choice("arrivals", self.arrivals, ARRIVALS)

    #: whether rounds carry user ids (what user-level privacy needs): every round serves one of the kept (real) users
    user_ids = True


class _MovieLensEnvironment(Environment):
    """Item pool and per-round item draws shared by both MovieLens instances."""

    reward_range = (0.0, 1.0)

    def __init__(
        self, rngs: Sequence[np.random.Generator], params: MovieLensLinearParams | MovieLensClustersParams
    ) -> None:
        slots = 1 if getattr(params, "arrivals", "per-server") == "single" else params.agents
        super().__init__(rngs, slots, params.arms, params.dim)
        self.params = params
        self.factors = movielens_factors(params.path, params.users, params.items, params.dim, params.like_threshold)
        self.item_features = self.factors.item_features  # (n_items, d) float32, read-only
        self.n_items = self.item_features.shape[0]
        shape = (self.n_runs, self.n_agents, self.n_arms)
        #: pool indices of the items offered in the last round, (R, M, K); movieIds via ``item_ids``
        self.last_items = np.zeros(shape, dtype=np.int64)
        self._features = np.empty((*shape, self.dim), dtype=np.float32)
        self._means = np.empty(shape, dtype=np.float32)
        self._noise = np.empty((self.n_runs, self.n_agents))

    @property
    def item_ids(self) -> np.ndarray:
        return self.factors.item_ids

    @property
    def user_ids(self) -> np.ndarray:
        return self.factors.user_ids

    def _draw(self, r: int, rng: np.random.Generator) -> None:
        """Run r's draws of one round: the (M, K) item indices, then M uniforms (subclasses draw first)."""
        self.last_items[r] = rng.integers(0, self.n_items, size=(self.n_agents, self.n_arms))
        rng.random(out=self._noise[r])

    @abstractmethod
    def _fill_means(self) -> None:
        """Fill ``self._means`` from ``self.last_items`` (and the subclass's draws)."""

    def next_round(self) -> Round:
        for r, rng in enumerate(self.rngs):
            self._draw(r, rng)
        np.take(self.item_features, self.last_items, axis=0, out=self._features)
        self._fill_means()
        return Round(self._features, self._means, self._noise, users=self._round_users())

    def _round_users(self) -> np.ndarray | None:
        """The users this round serves (:attr:`Round.users`), if the instance has users per round."""
        return None

    @staticmethod
    def _reward_table(items: np.ndarray, prefs: np.ndarray) -> np.ndarray:
        """clip(<x_j, theta>, 0, 1) in float64 from the float32 numbers, rounded to float32."""
        table = np.clip(items.astype(np.float64) @ prefs.astype(np.float64).T, 0.0, 1.0)
        out = table.astype(np.float32)
        out.flags.writeable = False
        return out

    def rewards(self, means: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """Bernoulli(means): 1 (a like) when the round's uniform noise falls below the mean."""
        return (noise < means).astype(np.float64)

    def describe(self) -> dict[str, object]:
        p = self.params
        return {
            **super().describe(),
            "path": str(self.factors.source),
            "users": p.users,
            "items": p.items,
            "like_threshold": p.like_threshold,
        }


class MovieLensLinear(_MovieLensEnvironment):
    """MovieLens items as arms of one linear model: theta* is the kept users' mean taste.

    Every agent (silo) gets K items per round, drawn i.i.d. uniformly (with replacement, as
    the items of the FCLUB setting are i.i.d. draws) from the pool of the ``items`` most-rated
    movies; their features are the SVD item vectors x_j (module docstring, norm <= 1).  The
    silos' customers share one preference vector theta* = (w, 1)/sqrt(2), where w is the
    normalised mean of the ``users`` most active users' taste directions -- the centre of a
    single k-means cluster, i.e. the population's average taste (a least-squares fit to the
    like matrix would instead weight heavy likers more and need not have norm <= 1).
    Expected reward clip(<x, theta*>, 0, 1) (never actually clipped: it lies in [0, 1] by
    construction); reward Bernoulli(expected reward), from the round's uniform noise.  A
    Bernoulli reward is an unbiased like/no-like with exactly the pseudo-regret's mean, which
    a clipped Gaussian would not be.  Per run r and round the Generator draws the (M, K) item
    indices then M uniforms.  ``theta`` (R, d) repeats theta* for every run (the instance is
    the same in every run; only the item draws and noise differ).
    """

    name = "movielens"

    def __init__(self, rngs: Sequence[np.random.Generator], params: MovieLensLinearParams) -> None:
        super().__init__(rngs, params)
        users = self.factors.user_vectors.astype(np.float64)
        mean = users[:, :-1].mean(axis=0)
        if not np.linalg.norm(mean) > 0:
            raise ValueError("the users' mean taste direction is zero: no theta* can be defined")
        theta = np.empty(self.dim)
        theta[:-1] = mean / np.linalg.norm(mean) * _HALF_SQRT2
        theta[-1] = _HALF_SQRT2
        self.theta_star = _unit_ball_f32(theta[None])[0]
        self.theta_star.flags.writeable = False
        self.theta = np.broadcast_to(self.theta_star, (self.n_runs, self.dim))
        #: expected reward of every pool item, (n_items,) float32
        self.item_means = self._reward_table(self.item_features, self.theta_star[None])[:, 0]

    def _fill_means(self) -> None:
        np.take(self.item_means, self.last_items, out=self._means)


class MovieLensClusters(_MovieLensEnvironment):
    """MovieLens users in m clusters served by L local servers (FCLUB, Liu et al. 2022, section 5).

    The ``users`` most active users' taste vectors theta_i (module docstring) are clustered by
    k-means (scikit-learn, 10 restarts, ``cluster_seed``) on their directions; each cluster's
    centre -- the mean direction renormalised to unit length, with the bias entry appended,
    so ||centre|| = 1 -- is the true preference vector of all its users (FCLUB's assumption of
    m distinct vectors).  Clusters are numbered by size, largest first; ``gap`` is the minimum
    distance between two centres (FCLUB's gamma).

    Users are split evenly over the L agents (local servers): a fixed permutation of the users
    drawn from ``split_seed`` is dealt round-robin, so server l holds users perm[l::L] (sizes
    differ by at most one; the split is the same in every run).  Each round every server gets
    one arriving user, uniform over its own users (``arrivals = "per-server"``, M = L arrival
    slots, slot l is server l), or -- the paper's model, ``arrivals = "single"`` -- one user per
    round, uniform over all users (M = 1 slot); each slot gets K items drawn i.i.d. uniformly
    from the pool as arms.  Expected reward clip(<x_item, centre of the user's cluster>, 0, 1) (in [0, 1]
    by construction), reward Bernoulli from the round's uniform noise, as in
    :class:`~fedbandits.envs.synthetic.GapInstance`.  Per run r and round the Generator draws
    the M arriving users, then the (M, K) item indices, then M uniforms.

    Clustering algorithms read ``last_users (R, M)`` (indices into ``user_ids``) after each
    :meth:`next_round`, ``user_cluster (n_users,)``, ``user_server (n_users,)`` and
    ``server_users`` (the user indices of each server).
    """

    name = "movielens-clusters"

    def __init__(self, rngs: Sequence[np.random.Generator], params: MovieLensClustersParams) -> None:
        super().__init__(rngs, params)
        self.clustering = movielens_clusters(self.factors, params.clusters, params.cluster_seed)
        self.n_users = self.factors.user_vectors.shape[0]
        self.n_clusters = params.clusters
        self.split_seed = params.split_seed
        self.cluster_seed = params.cluster_seed
        self.user_cluster = self.clustering.labels
        self.centres = self.clustering.centres
        self.gap = self.clustering.gap
        self.n_servers = params.agents
        self.arrivals = params.arrivals
        perm = np.random.default_rng(params.split_seed).permutation(self.n_users)
        self.server_users = [np.sort(perm[j :: self.n_servers]) for j in range(self.n_servers)]
        self.user_server = np.empty(self.n_users, dtype=np.int64)
        for j, members in enumerate(self.server_users):
            self.user_server[members] = j
        self._server_sizes = np.array([len(m) for m in self.server_users], dtype=np.int64)
        self._server_table = np.zeros((self.n_servers, int(self._server_sizes.max())), dtype=np.int64)
        for j, members in enumerate(self.server_users):
            self._server_table[j, : len(members)] = members
        self._agent_index = np.arange(self.n_servers)
        #: expected reward of every (pool item, cluster), (n_items, m) float32
        self.item_means = self._reward_table(self.item_features, self.centres)
        #: user index (into ``user_ids``) arriving at every (run, slot) in the last round
        self.last_users = np.zeros((self.n_runs, self.n_agents), dtype=np.int64)

    def user_theta(self) -> np.ndarray:
        """The true preference vector of every user, (n_users, d): its cluster's centre."""
        return self.centres[self.user_cluster]

    def _draw(self, r: int, rng: np.random.Generator) -> None:
        if self.arrivals == "single":
            self.last_users[r] = rng.integers(0, self.n_users, size=self.n_agents)
        else:
            slot = rng.integers(0, self._server_sizes)
            self.last_users[r] = self._server_table[self._agent_index, slot]
        super()._draw(r, rng)

    def _round_users(self) -> np.ndarray | None:
        return self.last_users  # the real (kept) users, dense ids 0..n_users-1

    def _fill_means(self) -> None:
        cluster = self.user_cluster[self.last_users]
        self._means[...] = self.item_means[self.last_items, cluster[..., None]]

    def describe(self) -> dict[str, object]:
        return {
            **super().describe(),
            "clusters": self.n_clusters,
            "gap": self.gap,
            "split_seed": self.split_seed,
            "cluster_seed": self.cluster_seed,
            "arrivals": self.arrivals,
        }


#: the registry's entries (fedbandits' pyproject.toml names them)
LINEAR = env_entry(MovieLensLinear, MovieLensLinearParams)
CLUSTERS = env_entry(MovieLensClusters, MovieLensClustersParams)
