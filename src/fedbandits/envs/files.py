"""Bandit instances read from user-supplied data files, one file per agent (silo).

A silo of a real deployment serves its own users from its own file; the simulator runs exactly
the same instance from the same files.  Agent i's file holds N_i users; user n offers K arms with
features ``x[n, k]`` in R^d and *expected* rewards ``mu[n, k]``.  Round t of agent i serves one
user of agent i's file: in file order (``order = "file"``) or in a random permutation of the rows
(``"shuffle"``).  When a file runs out, ``cycle = true`` starts over (with a fresh permutation
under ``"shuffle"``); otherwise the environment has ``rounds_available = min_i N_i`` rounds and
asking for more raises ``ValueError``.

``paths`` lists the files (agent i reads ``paths[i]``), or names one folder or glob pattern:
its data files, sorted by name with numbers compared as numbers (:func:`find_data_files`), are
listed when the parameters are built, so the config saved with a run names the files it read.

File formats
------------
``.npz`` (``numpy.savez``): arrays ``features`` (N, K, d) and ``rewards`` (N, K), real and finite,
N, K, d >= 1; optionally ``user_ids`` (N,), non-negative integers naming the person behind each row
(returning users: rows with the same id are one user's visits, what user-level privacy bounds; ids
are per silo, and either every file has them or none); other arrays in the archive are ignored;
pickled objects are refused.

``.csv``: a header ``user,arm,reward,<d feature names>`` (the first three names exactly these, at
least one feature column, names unique), then one line per (user, arm)::

    user,arm,reward,x0,x1
    7,0,0.25,0.1,0.2
    7,1,0.75,0.3,0.4

A user's lines are contiguous, each user appears in one block only, and its ``arm`` column runs
0, 1, ..., K-1 in this order (the same K for every user).  ``user`` is an identifier compared as
text: it names one row (one visit), so a person who returns has several.  For returning users, a
column named ``user_id`` right after ``reward`` (``user,arm,reward,user_id,x0,...``) gives the
person behind each row: an integer >= 0, the same on all K lines of a row (it then means what
``.npz``'s ``user_ids`` means, and is renumbered the same way).  ``arm`` is a non-negative
integer; ``reward`` and the features plain decimal numbers (``-1.5``, ``2e-3``; no ``nan``/``inf``,
hex or ``_``).  Fields are separated by commas without
quoting; spaces around a field, a UTF-8 byte-order mark, CRLF line ends and a missing final
newline are accepted, blank lines are not.

Every malformed input raises ``ValueError`` naming the file (and, for CSV, the line); nothing
half-built is returned.  :func:`write_data_file` writes both formats (CSV with ``%.9g``, which
reads back to the same float32 numbers).

Numbers and pseudo-regret
-------------------------
Features and expected rewards are stored as float32: the instance *is* the float32 numbers, and
pseudo-regret -- the best expected reward of the round minus the chosen arm's, both from the file
-- is exact for it.  The observed reward is ``expected + reward_noise_sd * N(0, 1)``, unbiased, so
pseudo-regret is the regret of the reward process.  Feature vectors of norm above 1 and expected
rewards outside [0, 1] are counted, not refused (:meth:`DataFiles.describe`); ``feature_bound``
and ``reward_range`` of an instance cover its data, and private learners clip to their own bounds.

Randomness: one stream per agent
--------------------------------
Run r's Generator spawns exactly M children (``rngs[r].spawn(M)``, M = agents of the *whole*
federation) when the environment is built, and agent i draws everything -- its permutations and
its reward noise -- from child i alone.  So :meth:`DataFiles.for_agent`, which builds agent i's
one-agent environment from agent i's file only, serves bit for bit the rounds agent i is served
in the full simulation: same users, same order, same noise.  Noise is drawn in blocks of
:data:`BLOCK` rounds (the only Python loop over agents runs once per block), identically in both.
"""

from __future__ import annotations

import glob
import os
import re
import secrets
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedbandits.core.validation import check_choice, check_float, check_int
from fedbandits.envs.base import Environment, Round, env_entry
from fedbandits.envs.csv_format import CSV_HEADER, CSV_USER_ID, csv_text, parse_csv

SUFFIXES = (".npz", ".csv")
ORDERS = ("file", "shuffle")
#: rounds of row indices and reward noise drawn per agent at a time
BLOCK = 256
#: file names an error about a folder or a pattern lists
_NAMES_SHOWN = 4


@dataclass(frozen=True)
class DataFilesParams:
    paths: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "one .npz/.csv file per agent (agent i = paths[i]), or one folder or glob pattern: its data "
            "files in name order (numbers compared as numbers); relative to the working directory; empty only "
            "in a deployment's config (each silo passes its own file)"
        },
    )
    agents: int = field(
        default=0, metadata={"help": "number of agents M; 0 = the number of files (required without paths)"}
    )
    arms: int = field(default=0, metadata={"help": "arms per user K; 0 = from the files (required without paths)"})
    dim: int = field(default=0, metadata={"help": "feature dimension d; 0 = from the files (required without paths)"})
    order: str = field(
        default="file", metadata={"help": "'file' (users in file order) or 'shuffle' (a random permutation per run)"}
    )
    reward_noise_sd: float = field(
        default=0.0, metadata={"help": "sd >= 0 of the Gaussian noise added to the file's expected reward"}
    )
    cycle: bool = field(
        default=False, metadata={"help": "start a file over when its users run out (else T <= fewest users)"}
    )

    def __post_init__(self) -> None:
        paths = self.paths
        for name in ("agents", "arms", "dim"):
            check_int(name, getattr(self, name), low=0)
        if isinstance(paths, (str, os.PathLike)):
            # a folder or a pattern, expanded here (the config boundary): the saved config lists the files
            source = str(os.fspath(paths))
            clean = list(find_data_files(source))
            if self.agents and len(clean) != self.agents:
                raise ValueError(
                    f"paths = {source!r}: {_found(source, clean)}, but agents = {self.agents} (one file per agent)"
                )
        elif isinstance(paths, bytes) or not isinstance(paths, Sequence):
            raise ValueError(
                f"paths must be a list of file paths (one per agent), a folder or a glob pattern, got {paths!r}"
            )
        else:
            clean = []
            for i, p in enumerate(paths):
                if not isinstance(p, (str, os.PathLike)) or not os.fspath(p):
                    raise ValueError(f"paths[{i}] must be a non-empty file path, got {p!r}")
                clean.append(str(os.fspath(p)))
        object.__setattr__(self, "paths", tuple(clean))
        if not clean:
            missing = [n for n in ("agents", "arms", "dim") if getattr(self, n) < 1]
            if missing:
                raise ValueError(
                    "environment data-files without `paths` (a deployment's server has no data files) needs "
                    f"agents, arms and dim >= 1; missing: {', '.join(missing)}"
                )
        elif self.agents == 0:
            # known without reading a file; the rest of the code base reads params.agents
            object.__setattr__(self, "agents", len(clean))
        elif self.agents != len(clean):
            raise ValueError(f"agents = {self.agents} disagrees with the {len(clean)} file(s) in paths (one per agent)")
        check_choice("order", self.order, ORDERS)
        check_float("reward_noise_sd", self.reward_noise_sd, low=0.0)
        if not isinstance(self.cycle, bool):
            raise ValueError(f"cycle must be true or false, got {self.cycle!r}")


# -- finding the files of a folder or a pattern ------------------------------------------------


def find_data_files(source: str) -> tuple[str, ...]:
    """The data files (``.npz``/``.csv``) in folder ``source``, or matching glob pattern ``source``.

    Sorted by name with numbers compared as numbers (``silo-2`` before ``silo-10``, so that agent i
    reads the ``silo-<i>.npz`` that ``fedbandits data export`` writes); hidden files and folders are
    left out.  A relative ``source`` is relative to the working directory, like a listed path, and
    the paths returned keep its form.  Raises ``ValueError`` naming ``paths`` when nothing is found.
    """
    if not source:
        raise ValueError("paths must be a folder, a glob pattern or a list of file paths (one per agent), got ''")
    folder = os.path.isdir(source)
    if folder:
        try:
            candidates = [os.path.join(source, name) for name in os.listdir(source)]
        except OSError as exc:
            raise ValueError(f"paths = {source!r}: cannot list that folder: {exc.strerror or exc}") from None
    elif glob.escape(source) != source:  # a pattern (glob leaves out hidden names unless it spells them)
        candidates = glob.glob(source)
    elif os.path.exists(source):
        candidates = [source]
    else:
        raise ValueError(f"paths = {source!r}: no such folder or file{_relative_to(source)}")
    found = [
        p
        for p in candidates
        if Path(p).suffix.lower() in SUFFIXES and not Path(p).name.startswith(".") and os.path.isfile(p)
    ]
    if not found:
        if not folder and candidates == [source]:
            raise ValueError(f"paths = {source!r}: not a data file (supported: {', '.join(SUFFIXES)})")
        where = "in that folder" if folder else "matches that pattern"
        raise ValueError(f"paths = {source!r}: no data file ({', '.join(SUFFIXES)}) {where}{_relative_to(source)}")
    return tuple(sorted(found, key=_natural_key))


def _natural_key(path: str) -> tuple[list[str | int], str]:
    """Text and digit runs alternate (text first, digits at odd indices), so equal positions compare
    alike types; the path itself breaks ties (``a01`` vs ``a1``)."""
    parts: list[str | int] = [int(t) if i % 2 else t for i, t in enumerate(re.split(r"([0-9]+)", path))]
    return parts, path


def _relative_to(source: str) -> str:
    if os.path.isabs(source):
        return ""
    try:
        return f" (relative to the working directory {os.getcwd()})"
    except OSError:  # the working directory was removed
        return ""


def _found(source: str, found: list[str]) -> str:
    """'3 data files in that folder (a.npz, ...)': the count and where, for a count mismatch."""
    folder = os.path.isdir(source)
    names = [os.path.basename(p) if folder else p for p in found]
    shown = ", ".join(names[:_NAMES_SHOWN]) + (", ..." if len(names) > _NAMES_SHOWN else "")
    where = "in that folder" if folder else "match that pattern"
    return f"{len(found)} data file(s) {where} ({shown})"


# -- reading -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentData:
    """One agent's file: features (N, K, d) float32, expected rewards (N, K) float32."""

    path: str
    features: np.ndarray
    rewards: np.ndarray
    #: (N,) int64 in [0, distinct users): who is behind each row, numbered densely in order of first
    #: appearance (None: every row is its own user)
    user_ids: np.ndarray | None = None

    @property
    def users(self) -> int:
        return int(self.rewards.shape[0])


def read_data_file(path: str | os.PathLike[str]) -> AgentData:
    """Read and validate one agent's ``.npz`` or ``.csv`` file (see the module docstring)."""
    name = os.fspath(path)
    suffix = Path(name).suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(
            f"data file {name}: unsupported suffix {Path(name).suffix!r}; supported: {', '.join(SUFFIXES)}"
        )
    if suffix == ".npz":
        features, rewards, user_ids = _read_npz(name)
    else:
        features, rewards, user_ids = _read_csv(name)
    return AgentData(name, features, rewards, user_ids)


def _dense_user_ids(name: str, raw: np.ndarray, rows: int) -> np.ndarray:
    """A file's ``user_ids``: (N,) integers >= 0, renumbered 0.. in order of first appearance."""
    if raw.shape != (rows,) or raw.dtype.kind not in "iu":
        raise ValueError(
            f"data file {name}: user_ids must be an integer array of shape (N,) = ({rows},), got "
            f"{raw.dtype} {raw.shape}"
        )
    if raw.size and int(raw.min()) < 0:
        raise ValueError(f"data file {name}: user_ids must be >= 0, got {int(raw.min())}")
    _, first, inverse = np.unique(raw, return_index=True, return_inverse=True)
    rank = np.empty_like(first)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse].astype(np.int64)


def _as_float32(name: str, what: str, arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"data file {name}: {what} must be real numbers, got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"data file {name}: {what} must be finite, got {bad} NaN or infinite entries")
    with np.errstate(over="ignore"):  # reported just below
        out = arr.astype(np.float32)
    if not np.isfinite(out).all():
        raise ValueError(f"data file {name}: {what} has values beyond the float32 range (about 3.4e38)")
    return out


def _check_shapes(name: str, features: np.ndarray, rewards: np.ndarray) -> None:
    if features.ndim != 3 or min(features.shape) < 1:
        raise ValueError(
            f"data file {name}: features must have shape (N, K, d) with N, K, d >= 1, got {features.shape}"
        )
    if rewards.shape != features.shape[:2]:
        raise ValueError(
            f"data file {name}: rewards must have shape (N, K) = {features.shape[:2]} like the features, "
            f"got {rewards.shape}"
        )


def _read_npz(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    try:
        with open(name, "rb") as fh:
            if not zipfile.is_zipfile(fh):
                # np.load would try to unpickle it (and suggest allow_pickle) or return a .npy array
                raise ValueError("not an .npz archive (a zip file as numpy.savez writes)")
        with np.load(name, allow_pickle=False) as data:
            missing = [key for key in ("features", "rewards") if key not in data.files]
            if missing:
                raise ValueError(f"missing array(s) {missing}; found {sorted(data.files)}")
            arrays = []
            for key in ("features", "rewards"):
                try:
                    arrays.append(data[key])
                except ValueError as exc:  # object arrays: refused, never unpickled
                    raise ValueError(f"array {key!r}: {exc}; only numeric arrays are read") from None
            features, rewards = arrays
            raw_ids = data["user_ids"] if "user_ids" in data.files else None
    except OSError as exc:
        raise ValueError(f"data file {name}: cannot read it: {exc.strerror or exc}") from None
    except (ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"data file {name}: {exc}") from None
    _check_shapes(name, features, rewards)
    user_ids = None if raw_ids is None else _dense_user_ids(name, raw_ids, rewards.shape[0])
    return _as_float32(name, "features", features), _as_float32(name, "rewards", rewards), user_ids


def _read_csv(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    table, raw_ids = parse_csv(name)
    rewards = _as_float32(name, "rewards", table[..., 0])
    features = _as_float32(name, "features", table[..., 1:])
    user_ids = None if raw_ids is None else _dense_user_ids(name, raw_ids, table.shape[0])
    return features, rewards, user_ids


# -- writing -----------------------------------------------------------------------------------


def write_data_file(
    path: str | os.PathLike[str],
    features: np.ndarray,
    rewards: np.ndarray,
    feature_names: Sequence[str] | None = None,
    user_ids: np.ndarray | None = None,
) -> Path:
    """Write features (N, K, d) and expected rewards (N, K) as ``.npz`` or ``.csv`` (by suffix).

    Values are stored as float32 (what :func:`read_data_file` returns); CSV numbers use ``%.9g``,
    enough digits for every float32 to read back exactly.  Users are numbered 0..N-1 in CSV and
    features named ``feature_names`` (default x0, x1, ...).  ``user_ids`` (N,) non-negative integers:
    who is behind each row, for returning users (CSV: the ``user_id`` column).  The file is replaced
    atomically.
    """
    out = Path(path)
    name = str(out)
    suffix = out.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"data file {name}: unsupported suffix {out.suffix!r}; supported: {', '.join(SUFFIXES)}")
    x, mu = np.asarray(features), np.asarray(rewards)
    _check_shapes(name, x, mu)
    x, mu = _as_float32(name, "features", x), _as_float32(name, "rewards", mu)
    ids = None
    if user_ids is not None:
        ids = np.asarray(user_ids)
        _dense_user_ids(name, ids, x.shape[0])  # validates
        ids = ids.astype(np.int64)
    d = x.shape[2]
    names = [f"x{j}" for j in range(d)] if feature_names is None else [str(v) for v in feature_names]
    if len(names) != d or not all(names) or len(set(names)) != d:
        raise ValueError(f"data file {name}: feature_names must be {d} unique non-empty names, got {names!r}")
    if any(("," in v or v != v.strip()) for v in names) or any(v in (*CSV_HEADER, CSV_USER_ID) for v in names):
        raise ValueError(
            f"data file {name}: feature names must not contain commas or surrounding spaces, nor repeat "
            f"{', '.join((*CSV_HEADER, CSV_USER_ID))}; got {names!r}"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    # a fresh name opened exclusively (not mkstemp: its files are 0600, these are for sharing)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as fh:
            if suffix == ".npz":
                if ids is None:
                    np.savez_compressed(fh, features=x, rewards=mu)
                else:
                    np.savez_compressed(fh, features=x, rewards=mu, user_ids=ids)
            else:
                fh.write(csv_text(x, mu, names, ids).encode("utf-8"))
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


# -- the environment ---------------------------------------------------------------------------


class DataFiles(Environment):
    """Users read from data files, one .npz/.csv file per agent (silo); see docs/data.md.

    Agent i serves the users of ``paths[i]`` in file order or a per-run permutation, with
    expected rewards from the file plus ``reward_noise_sd`` Gaussian noise.  Everything agent i
    draws comes from child i of its run's Generator (``rngs[r].spawn(M)``), so
    :meth:`for_agent` reproduces agent i's rounds bit for bit from its file alone.

    Attributes: ``agent_ids`` (the federation's agent index of each local agent), ``users``
    (N_i per local agent), ``rounds_available`` (min N_i, or None with ``cycle``).
    """

    name = "data-files"

    def __init__(
        self,
        rngs: Sequence[np.random.Generator],
        params: DataFilesParams,
        *,
        agent: int | None = None,
        path: str | os.PathLike[str] | None = None,
    ) -> None:
        federation = params.agents
        if agent is None:
            if path is not None:
                raise ValueError("a data file path for one agent needs `agent` (use DataFiles.for_agent)")
            if not params.paths:
                raise ValueError(
                    "environment data-files needs `paths` (one file per agent) to be simulated; "
                    "in a deployment each silo passes its own file"
                )
            agent_ids = list(range(federation))
            paths = list(params.paths)
        else:
            check_int("agent", agent, low=0, high=federation - 1)
            if path is None:
                if not params.paths:
                    raise ValueError(f"agent {agent} needs its data file: pass `path` (the config has no paths)")
                path = params.paths[agent]
            agent_ids = [agent]
            paths = [os.fspath(path)]
        if len(rngs) < 1:
            raise ValueError("an environment needs at least one run (one Generator per run)")
        data = [read_data_file(p) for p in paths]
        self._check_agreement(params, data)
        _, k, d = data[0].features.shape
        super().__init__(rngs, len(data), k, d)
        self.params = params
        self.paths = tuple(paths)
        self.agent_ids = tuple(agent_ids)
        self.federation_agents = federation
        self.order = params.order
        self.noise_sd: float = params.reward_noise_sd
        self.cycle = params.cycle
        self.users = np.array([a.users for a in data], dtype=np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(self.users)[:-1]]).astype(np.intp)
        self._x = np.concatenate([a.features for a in data])  # (sum N_i, K, d)
        self._mu = np.concatenate([a.rewards for a in data])  # (sum N_i, K)
        with_ids = [a.user_ids is not None for a in data]
        if any(with_ids) and not all(with_ids):
            missing = next(a.path for a in data if a.user_ids is None)
            raise ValueError(
                f"data file {missing} has no user_ids, but other silos' files have: give every file its own"
            )
        ids = [a.user_ids for a in data if a.user_ids is not None]
        self._user_ids = np.concatenate(ids) if ids else None
        self.n_users = max(int(u.max()) + 1 for u in ids) if ids else 0
        self.rounds_available: int | None = None if self.cycle else int(self.users.min())

        norms = np.linalg.norm(self._x.astype(np.float64), axis=-1)
        self.max_feature_norm = float(norms.max())
        self.features_above_norm_1 = int(np.count_nonzero(norms > 1.0))
        self.rewards_outside_unit = int(np.count_nonzero((self._mu < 0) | (self._mu > 1)))
        self.feature_bound = max(1.0, self.max_feature_norm)
        self.reward_range = (min(0.0, float(self._mu.min())), max(1.0, float(self._mu.max())))

        # agent i of the federation draws from child i of its run's Generator, and only from it
        self._streams = [[children[i] for i in agent_ids] for children in (rng.spawn(federation) for rng in self.rngs)]
        self._perms: list[list[dict[int, np.ndarray]]] = [[{} for _ in agent_ids] for _ in self.rngs]
        self._next_epoch = np.zeros((self.n_runs, self.n_agents), dtype=np.int64)
        shape = (self.n_runs, self.n_agents)
        self._rows = np.zeros((self.n_runs, BLOCK, self.n_agents), dtype=np.intp)
        self._noise_block = np.zeros((self.n_runs, BLOCK, self.n_agents))
        self._features = np.empty((*shape, k, d), dtype=np.float32)
        self._means = np.empty((*shape, k), dtype=np.float32)
        self._noise = np.zeros(shape)
        self.t = 0  # rounds served

    @classmethod
    def for_agent(
        cls,
        rngs: Sequence[np.random.Generator],
        params: DataFilesParams,
        agent: int,
        path: str | os.PathLike[str] | None = None,
    ) -> DataFiles:
        """The one-agent environment of agent ``agent`` of the M-agent federation ``params``.

        Reads only ``path`` (default ``params.paths[agent]``).  With the same (fresh) ``rngs`` as
        the full environment, its rounds -- features, expected rewards, noise, rewards -- equal
        bit for bit agent ``agent``'s slice of the full environment's rounds.
        """
        return cls(rngs, params, agent=agent, path=path)

    @staticmethod
    def _check_agreement(params: DataFilesParams, data: list[AgentData]) -> None:
        first = data[0]
        for a in data:
            _, k, d = a.features.shape
            for what, value, expected in (("arms", k, params.arms), ("dim", d, params.dim)):
                if expected and value != expected:
                    raise ValueError(
                        f"data file {a.path} has {what} = {value}, but the config says {what} = {expected}"
                    )
            if a.features.shape[1:] != first.features.shape[1:]:
                raise ValueError(
                    f"data file {a.path} has K = {k} arms and d = {d} features per user, but {first.path} has "
                    f"K = {first.features.shape[1]}, d = {first.features.shape[2]} (all agents' files must agree)"
                )

    def _local_rows(self, r: int, j: int, t0: int) -> np.ndarray:
        """Agent j's rows (indices into its own file) for rounds t0 .. t0 + BLOCK - 1 of run r."""
        n = int(self.users[j])
        t = np.arange(t0, t0 + BLOCK)
        if self.order == "file":
            return t % n
        if not self.cycle:
            t = np.minimum(t, n - 1)  # past the end is never served (next_round raises first)
        first, last = int(t[0]) // n, int(t[-1]) // n
        perms = self._perms[r][j]
        while self._next_epoch[r, j] <= last:
            perms[int(self._next_epoch[r, j])] = self._streams[r][j].permutation(n)
            self._next_epoch[r, j] += 1
        for epoch in [e for e in perms if e < first]:
            del perms[epoch]
        order = np.concatenate([perms[e] for e in range(first, last + 1)])
        return order[t - first * n]

    def _refill(self) -> None:
        t0 = self.t
        for r in range(self.n_runs):
            for j in range(self.n_agents):
                self._rows[r, :, j] = self._offsets[j] + self._local_rows(r, j, t0)
                if self.noise_sd > 0:
                    self._noise_block[r, :, j] = self.noise_sd * self._streams[r][j].standard_normal(BLOCK)

    def next_round(self) -> Round:
        if self.rounds_available is not None and self.t >= self.rounds_available:
            j = int(np.argmin(self.users))
            raise ValueError(
                f"data file {self.paths[j]} has {int(self.users[j])} users, but round {self.t + 1} was asked for "
                "(set cycle = true to start a file over when its users run out)"
            )
        b = self.t % BLOCK
        if b == 0:
            self._refill()
        rows = self._rows[:, b, :]  # (R, M) rows of the concatenated files
        np.take(self._x, rows, axis=0, out=self._features)
        np.take(self._mu, rows, axis=0, out=self._means)
        self._noise[...] = self._noise_block[:, b, :]
        self.t += 1
        users = self._user_ids[rows] if self._user_ids is not None else None
        return Round(self._features, self._means, self._noise, users=users)

    def rewards(self, means: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """Expected reward plus the round's already scaled Gaussian noise, (R, M) float64."""
        return np.asarray(means, dtype=np.float64) + noise

    def describe(self) -> dict[str, object]:
        return {
            **super().describe(),
            "paths": list(self.paths),
            "agent_ids": list(self.agent_ids),
            "users": self.users.tolist(),
            "order": self.order,
            "cycle": self.cycle,
            "reward_noise_sd": self.noise_sd,
            "max_feature_norm": self.max_feature_norm,
            "features_above_norm_1": self.features_above_norm_1,
            "rewards_outside_0_1": self.rewards_outside_unit,
        }


#: the registry's entry (fedbandits' pyproject.toml names it)
ENTRY = env_entry(DataFiles, DataFilesParams)
