"""Logged bandit feedback: what a silo recorded when its logging policy chose, and the formats read.

A :class:`BanditLog` holds n logged rounds.  Round i offered K candidates with features
``x[i, k]`` in R^d, the logging policy chose ``actions[i]`` with probability ``propensities[i]``
(recorded when it chose: never rebuilt afterwards), and ``rewards[i]`` was observed.  ``silos[i]``
names the silo that served the round (a file, a column value, or a seeded split; ``silo_names``).

Candidates' features are stored factored, ``x[i, k] = [static[k], dynamic[i, k]]``: features of the
arm alone (an item's one-hot code, its attributes; shared by every round) and features of the pair
(a user-item affinity).  A log whose features are all per round has ``static`` of width 0; the Open
Bandit Dataset's are an item's one-hot code (static) and the user's affinity to it (dynamic), so
10,000 rounds of 80 items take 3 MB, not the 260 MB of the dense (n, K, d) array.
:meth:`BanditLog.features` builds the dense block of any rows on demand.

Silos with catalogues of their own (the Open Bandit Dataset's three campaigns: 80, 34 and 46 items)
share one ``static`` table, every silo's items one after another, and a ``catalogue`` (S, K) maps
silo s's candidate k to its row of ``static``, or -1 where silo s has fewer than K candidates: a
round of silo s offers its candidates k < K_s (:meth:`BanditLog.available`), and its dynamic
features are zero beyond them.

Formats:

* **``.npz``** (one file per silo): arrays ``features`` (n, K, d), ``actions`` (n,) integers in
  [0, K), ``propensities`` (n,) in (0, 1], ``rewards`` (n,), all finite; ``static`` (K, q) optional
  (then ``features`` holds the dynamic part only).  Pickled objects are refused.
* **CSV** (one file per silo): :mod:`fedbandits.evaluation.csv_log`.
* **The Open Bandit Dataset** (:mod:`fedbandits.evaluation.obd`): its CSV as shipped.
* **A serving silo's event log**: :mod:`fedbandits.evaluation.serve_log`.

Every malformed input raises ``ValueError`` in one line naming the file, and the row and field
when there is one; nothing half-built is returned.
"""

from __future__ import annotations

import dataclasses
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: arrays of a generic .npz log: required, then optional
NPZ_REQUIRED = ("features", "actions", "propensities", "rewards")
NPZ_OPTIONAL = ("static",)


@dataclass(frozen=True)
class BanditLog:
    """n logged rounds of K candidates in dimension d = q + m (module docstring)."""

    actions: np.ndarray
    propensities: np.ndarray
    rewards: np.ndarray
    #: (K, q) float32: features of the arm alone
    static: np.ndarray
    #: (n, K, m) float32: features of the (round, arm) pair
    dynamic: np.ndarray
    #: (n,) int64 in [0, len(silo_names))
    silos: np.ndarray
    silo_names: tuple[str, ...] = ("0",)
    #: where the rows came from, for messages
    source: str = "log"
    #: (n,) int64 slot of the logged item on the page (the Open Bandit Dataset's 3 positions), or None
    positions: np.ndarray | None = field(default=None)
    #: (S, K) int64: silo s's candidate k is row catalogue[s, k] of ``static``, -1 when silo s has
    #: fewer than K candidates; None: every silo offers every row of ``static``, in order
    catalogue: np.ndarray | None = field(default=None)

    def __post_init__(self) -> None:
        n = len(self.actions)
        if n == 0:
            raise ValueError(f"{self.source}: the log has no rounds")
        if self.static.ndim != 2 or self.dynamic.ndim != 3 or self.dynamic.shape[:2] != (n, self.n_arms):
            raise ValueError(
                f"{self.source}: static must be (K, q) and dynamic (n, K, m) with the same K, "
                f"got {self.static.shape} and {self.dynamic.shape} for n = {n}"
            )
        if self.dim == 0:
            raise ValueError(f"{self.source}: the candidates have no features")
        check_rounds(self.source, self.actions, self.propensities, self.rewards, self.n_arms)
        if self.silos.shape != (n,) or self.silos.min() < 0 or self.silos.max() >= len(self.silo_names):
            raise ValueError(f"{self.source}: silos must be (n,) integers in [0, {len(self.silo_names)})")
        if self.catalogue is not None:
            self._check_catalogue(self.catalogue)

    def _check_catalogue(self, catalogue: np.ndarray) -> None:
        shape = (len(self.silo_names), catalogue.shape[1] if catalogue.ndim == 2 else -1)
        if catalogue.shape != shape or not np.issubdtype(catalogue.dtype, np.integer):
            raise ValueError(f"{self.source}: the catalogue must be (silos, K) integers, got {catalogue.shape}")
        count = (catalogue >= 0).sum(axis=1)
        if (catalogue < -1).any() or (catalogue >= self.static.shape[0]).any() or (count == 0).any():
            raise ValueError(f"{self.source}: the catalogue must name rows of static, or -1, and each silo one row")
        if ((catalogue >= 0) != (np.arange(shape[1]) < count[:, None])).any():
            raise ValueError(f"{self.source}: a silo's candidates must come first in its catalogue row")
        outside = np.flatnonzero(self.actions >= count[self.silos])
        if outside.size:
            i = int(outside[0])
            silo = self.silo_names[self.silos[i]]
            raise ValueError(
                f"{self.source}: round {i}: action must be in [0, {count[self.silos[i]]}) (silo {silo}'s candidates), "
                f"got {self.actions[i]}"
            )

    @property
    def n(self) -> int:
        return len(self.actions)

    @property
    def n_arms(self) -> int:
        """K: the most candidates of a round (every round's, without a catalogue)."""
        return int(self.static.shape[0] if self.catalogue is None else self.catalogue.shape[1])

    @property
    def silo_arms(self) -> np.ndarray:
        """K_s of every silo, (S,): its catalogue's candidates, or K for all without one."""
        if self.catalogue is None:
            return np.full(len(self.silo_names), self.n_arms)
        return (self.catalogue >= 0).sum(axis=1)  # type: ignore[no-any-return]

    def arms_of(self, rows: np.ndarray | slice) -> np.ndarray:
        """K_s of each round's silo, (len(rows),)."""
        return self.silo_arms[self.silos[rows]]  # type: ignore[no-any-return]

    def available(self, rows: np.ndarray | slice) -> np.ndarray | None:
        """Which candidates each of ``rows`` offers, (len(rows), K) bool; None when every round offers all K."""
        if self.catalogue is None:
            return None
        return self.catalogue[self.silos[rows]] >= 0  # type: ignore[no-any-return]

    def static_of(self, rows: np.ndarray | slice) -> np.ndarray:
        """The static features of every candidate of ``rows``, (len(rows), K, q) (a broadcast view without
        a catalogue; zeros for a candidate a silo lacks)."""
        count = len(self.silos[rows])
        if self.catalogue is None:
            return np.broadcast_to(self.static, (count, *self.static.shape))
        index = self.catalogue[self.silos[rows]]
        return np.where((index >= 0)[..., None], self.static[np.maximum(index, 0)], np.float32(0.0))

    @property
    def dim(self) -> int:
        return int(self.static.shape[1] + self.dynamic.shape[2])

    def features(self, rows: np.ndarray | slice) -> np.ndarray:
        """The dense candidates' features of ``rows``, (len(rows), K, d) float32."""
        return np.concatenate([self.static_of(rows), self.dynamic[rows]], axis=2)

    def logged_features(self, rows: np.ndarray | slice) -> np.ndarray:
        """The logged action's features of ``rows``, (len(rows), d) float32."""
        idx = np.arange(self.n)[rows]
        items = self.actions[idx] if self.catalogue is None else self.catalogue[self.silos[idx], self.actions[idx]]
        return np.concatenate([self.static[items], self.dynamic[idx, self.actions[idx]]], axis=1)

    def dealt(self, silos: int, seed: int) -> BanditLog:
        """The same rounds dealt to ``silos`` silos by a seeded permutation (silo m gets every round the
        permutation puts at a position congruent to m), each silo's rounds in log order."""
        owner = np.empty(self.n, dtype=np.int64)
        if self.catalogue is not None:
            raise ValueError(f"{self.source}: its silos have catalogues of their own: deal one silo's log")
        owner[np.random.default_rng(seed).permutation(self.n)] = np.arange(self.n) % silos
        return dataclasses.replace(self, silos=owner, silo_names=tuple(str(m) for m in range(silos)))

    def split(self, share: float) -> tuple[BanditLog, BanditLog]:
        """The first ``share`` of every silo's rounds (in log order: in time) and the rest, as two logs
        of the same silos (each silo keeps at least one round in each)."""
        first = np.zeros(self.n, dtype=bool)
        for m in range(len(self.silo_names)):
            rows = np.flatnonzero(self.silos == m)
            if len(rows) < 2:
                raise ValueError(f"{self.source}: silo {self.silo_names[m]} has {len(rows)} round(s): too few to split")
            first[rows[: min(max(round(share * len(rows)), 1), len(rows) - 1)]] = True
        return self.rows(first), self.rows(~first)

    def rows(self, keep: np.ndarray) -> BanditLog:
        """The log of the rounds ``keep`` (bool (n,)) selects, in order, with the same silos."""
        positions = None if self.positions is None else self.positions[keep]
        return dataclasses.replace(
            self,
            actions=self.actions[keep],
            propensities=self.propensities[keep],
            rewards=self.rewards[keep],
            dynamic=self.dynamic[keep],
            silos=self.silos[keep],
            positions=positions,
        )


def check_rounds(source: str, actions: np.ndarray, propensities: np.ndarray, rewards: np.ndarray, arms: int) -> None:
    """One line naming the first bad round (0-based) and field, if any."""
    n = len(actions)
    for name, arr in (("actions", actions), ("propensities", propensities), ("rewards", rewards)):
        if arr.shape != (n,):
            raise ValueError(f"{source}: {name} must have shape ({n},), got {arr.shape}")
    if not np.issubdtype(actions.dtype, np.integer):
        raise ValueError(f"{source}: actions must be integers, got {actions.dtype}")
    checks = (
        ("action", actions, (actions < 0) | (actions >= arms), f"in [0, {arms})"),
        ("propensity", propensities, ~((propensities > 0) & (propensities <= 1)), "in (0, 1]"),
        ("reward", rewards, ~np.isfinite(rewards), "finite"),
    )
    for name, values, bad, wanted in checks:
        rows = np.flatnonzero(bad)
        if rows.size:
            i = int(rows[0])
            raise ValueError(f"{source}: round {i}: {name} must be {wanted}, got {values[i]}")


def read_npz(path: Path) -> BanditLog:
    """One silo's generic log (module docstring), checked (its rounds all silo 0: :func:`concatenate`
    numbers the silos of several files)."""
    path = Path(path)
    source = str(path)
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{source}: not a readable .npz file (no such file, or not a zip archive)")
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [k for k in NPZ_REQUIRED if k not in data.files]
            if missing:
                raise ValueError(f"{source}: missing array {missing[0]!r} (a log has {', '.join(NPZ_REQUIRED)})")
            arrays = {k: data[k] for k in (*NPZ_REQUIRED, *NPZ_OPTIONAL) if k in data.files}
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"{source}: not a readable .npz file ({exc})") from None
    except ValueError as exc:
        if str(exc).startswith(source):
            raise
        raise ValueError(f"{source}: {exc}") from None  # object arrays: "Object arrays cannot be loaded ..."
    features = _finite_float(source, "features", arrays["features"], 3)
    n, arms = features.shape[:2]
    static = (
        _finite_float(source, "static", arrays["static"], 2) if "static" in arrays else np.zeros((arms, 0), np.float32)
    )
    return BanditLog(
        _integers(source, "actions", arrays["actions"]),
        np.asarray(arrays["propensities"], dtype=np.float64),
        np.asarray(arrays["rewards"], dtype=np.float64),
        static,
        features,
        np.zeros(n, dtype=np.int64),
        (path.stem,),
        source,
    )


def _finite_float(source: str, name: str, arr: np.ndarray, ndim: int) -> np.ndarray:
    if arr.ndim != ndim or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{source}: {name} must be a {ndim}-d array of numbers, got {arr.dtype} {arr.shape}")
    out = np.asarray(arr, dtype=np.float32)
    if not np.isfinite(out).all():
        raise ValueError(f"{source}: {name} must be finite (float32), row {int(np.argwhere(~np.isfinite(out))[0][0])}")
    return out


def _integers(source: str, name: str, arr: np.ndarray) -> np.ndarray:
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{source}: {name} must be integers, got {arr.dtype}")
    return arr.astype(np.int64)


def concatenate(logs: Sequence[BanditLog], names: Sequence[str] | None = None) -> BanditLog:
    """Several silos' logs as one (silo i the i-th log, named by ``names`` or its file), which must
    agree on the features' widths.  Logs with the same candidates share them; otherwise each silo keeps
    its own catalogue (module docstring), the rounds of a silo with fewer than K padded with zeros."""
    first = logs[0]
    for log in logs[1:]:
        if log.static.shape[1] != first.static.shape[1] or log.dynamic.shape[2] != first.dynamic.shape[2]:
            raise ValueError(
                f"{log.source}: d = {log.static.shape[1]} + {log.dynamic.shape[2]} (static + per round), but "
                f"{first.source} has d = {first.static.shape[1]} + {first.dynamic.shape[2]}: the silos' features "
                "must mean the same"
            )
        if len(log.silo_names) > 1 or log.catalogue is not None:
            raise ValueError(f"{log.source}: concatenate one-silo logs")
    if names is None:
        names = [log.silo_names[0] for log in logs]
    shared = all(log.static.shape == first.static.shape and np.array_equal(log.static, first.static) for log in logs)
    arms = max(log.n_arms for log in logs)
    catalogue = None
    if not shared:
        offsets = np.cumsum([0, *(log.n_arms for log in logs)])
        catalogue = np.full((len(logs), arms), -1, dtype=np.int64)
        for i, log in enumerate(logs):
            catalogue[i, : log.n_arms] = offsets[i] + np.arange(log.n_arms)
    dynamic = [np.pad(log.dynamic, ((0, 0), (0, arms - log.n_arms), (0, 0))) for log in logs]
    positions = [log.positions for log in logs]
    return BanditLog(
        np.concatenate([log.actions for log in logs]),
        np.concatenate([log.propensities for log in logs]),
        np.concatenate([log.rewards for log in logs]),
        first.static if shared else np.concatenate([log.static for log in logs]),
        np.concatenate(dynamic),
        np.concatenate([np.full(log.n, i, dtype=np.int64) for i, log in enumerate(logs)]),
        tuple(names),
        ", ".join(log.source for log in logs),
        None if any(p is None for p in positions) else np.concatenate(positions),  # type: ignore[arg-type]
        catalogue,
    )
