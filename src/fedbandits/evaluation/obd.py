"""The Open Bandit Dataset (Saito, Aihara, Matsutani & Narita 2021) as shipped, read into a
:class:`~fedbandits.evaluation.logs.BanditLog`.

Layout: ``{folder}/{behavior}/{campaign}/{campaign}.csv`` and ``.../item_context.csv``, behavior
``random`` (a uniform logger) or ``bts`` (Bernoulli Thompson sampling), campaign ``all`` (80 items),
``men`` (34) or ``women`` (46).  The small sample (10,000 rows per file) is in ``../shared/data``;
the full data has the same layout at a user's path.

Each row is one impression: ``item_id`` shown at ``position`` (1, 2, 3: left, centre, right),
``click``, ``propensity_score`` (the logging policy's probability of that item at that position,
recorded when it chose), four hashed ``user_feature_*`` and ``user-item_affinity_<k>`` for every
item k.  As the dataset's authors do (its Pipeline's ``pre_process``), each (row, position) is one
logged decision among the K items.

Candidates' features, ``features = "items"`` (d = K + 1): item k's one-hot code (static) and the
user's affinity to k (dynamic), so a linear reward model is a per-item click rate plus an affinity
slope.  ``"shared"`` (d = 3): a constant, the item's ``item_feature_0`` (the dataset's one numeric item
attribute, standardized within each campaign) and the affinity: features that mean the same in every
campaign (the campaigns' item ids and hashed categories do not: no hash of one campaign's
``item_feature_1..3`` occurs in another's), so three campaigns can share one model.

Silos: one (``silo_column = None``), or one per distinct value of a column (``user_feature_0``, 3
values, or ``position``), named by it; or (:func:`read_obd_campaigns`) one per campaign, each with its
own catalogue (80, 34 and 46 items) and the shared features.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from fedbandits.evaluation.logs import BanditLog, concatenate

BEHAVIORS = ("random", "bts")
CAMPAIGNS = ("all", "men", "women")
FIXED = ("", "timestamp", "item_id", "position", "click", "propensity_score")
USER_FEATURES = tuple(f"user_feature_{j}" for j in range(4))
AFFINITY = "user-item_affinity_"
POSITIONS = 3
FEATURES = ("items", "shared")


def obd_files(folder: Path, behavior: str, campaign: str) -> tuple[Path, Path]:
    """The log and the item file of one behavior policy and campaign, checked to exist."""
    if behavior not in BEHAVIORS:
        raise ValueError(f"behavior must be one of {', '.join(map(repr, BEHAVIORS))}, got {behavior!r}")
    if campaign not in CAMPAIGNS:
        raise ValueError(f"campaign must be one of {', '.join(map(repr, CAMPAIGNS))}, got {campaign!r}")
    base = Path(folder) / behavior / campaign
    log, items = base / f"{campaign}.csv", base / "item_context.csv"
    for path in (log, items):
        if not path.is_file():
            raise ValueError(
                f"{path}: no such file (the Open Bandit Dataset's layout: {{folder}}/{behavior}/{campaign}/)"
            )
    return log, items


def _items(path: Path) -> np.ndarray:
    """item_feature_0 of each item (K,): the item file's rows, whose item_id must run 0..K-1."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    if not rows or "item_id" not in rows[0]:
        raise ValueError(f"{path}: row 1: no item_id column")
    col = rows[0].index("item_id")
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(rows[0]) or row[col].strip() != str(line - 2):
            raise ValueError(
                f"{path}: row {line}: field item_id must be {line - 2}, got {row[col] if len(row) > col else ''!r}"
            )
    if len(rows) < 3:
        raise ValueError(f"{path}: fewer than 2 items")
    if "item_feature_0" not in rows[0]:
        raise ValueError(f"{path}: row 1: no item_feature_0 column")
    at = rows[0].index("item_feature_0")
    return np.array(
        [
            _number(path, line, "item_feature_0", row[at], float, None, None)
            for line, row in enumerate(rows[1:], start=2)
        ]
    )


def read_obd(
    folder: Path, behavior: str, campaign: str, silo_column: str | None = None, features: str = "items"
) -> BanditLog:
    """One behavior policy's log of one campaign (module docstring), checked field by field."""
    if features not in FEATURES:
        raise ValueError(f"features must be one of {', '.join(map(repr, FEATURES))}, got {features!r}")
    log_path, item_path = obd_files(folder, behavior, campaign)
    attribute = _items(item_path)
    arms = len(attribute)
    columns = (*FIXED, *USER_FEATURES, *(f"{AFFINITY}{k}" for k in range(arms)))
    with log_path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        given = tuple(h.strip() for h in header or [])
        if given != columns:
            where = next((j for j, (a, b) in enumerate(zip(given, columns, strict=False)) if a != b), None)
            got = f"{len(given)} columns" if where is None else f"{given[where]!r} in column {where + 1}"
            raise ValueError(
                f"{log_path}: row 1: the header must be the dataset's {len(columns)} columns "
                f"({', '.join(columns[1:6])}, user_feature_0..3, {AFFINITY}0..{arms - 1}), got {got}"
            )
        rows = list(reader)
    if not rows:
        raise ValueError(f"{log_path}: no rows")
    n = len(rows)
    actions = np.empty(n, np.int64)
    positions = np.empty(n, np.int64)
    clicks = np.empty(n, np.float64)
    propensities = np.empty(n, np.float64)
    affinity = np.empty((n, arms, 1), np.float32)
    keys: list[str] = []
    silo_at = None if silo_column is None else _silo_index(log_path, silo_column, columns)
    for i, row in enumerate(rows):
        line = i + 2
        if len(row) != len(columns):
            raise ValueError(f"{log_path}: row {line}: {len(row)} fields, the header has {len(columns)}")
        actions[i] = _number(log_path, line, "item_id", row[2], int, 0, arms - 1)
        positions[i] = _number(log_path, line, "position", row[3], int, 1, POSITIONS) - 1
        clicks[i] = _number(log_path, line, "click", row[4], int, 0, 1)
        propensities[i] = _number(log_path, line, "propensity_score", row[5], float, None, None)
        if not 0 < propensities[i] <= 1:
            raise ValueError(f"{log_path}: row {line}: field propensity_score must be in (0, 1], got {row[5]!r}")
        try:
            affinity[i, :, 0] = [float(v) for v in row[6 + len(USER_FEATURES) :]]
        except ValueError:
            raise ValueError(f"{log_path}: row {line}: a {AFFINITY}* field is not a number") from None
        if silo_at is not None:
            keys.append(row[silo_at].strip())
    if not np.isfinite(affinity).all():
        bad = int(np.argwhere(~np.isfinite(affinity))[0][0])
        raise ValueError(f"{log_path}: row {bad + 2}: a {AFFINITY}* field is not finite")
    names: tuple[str, ...] = ("0",)
    silos = np.zeros(n, np.int64)
    if silo_at is not None:
        values, silos = np.unique(np.array(keys), return_inverse=True)
        names = tuple(str(v) for v in values)
    if features == "items":
        static = np.eye(arms, dtype=np.float32)
    else:
        static = np.column_stack([np.ones(arms), attribute]).astype(np.float32)
    return BanditLog(
        actions,
        propensities,
        clicks,
        static,
        affinity,
        silos.astype(np.int64),
        names,
        str(log_path),
        positions,
    )


def _silo_index(path: Path, column: str, columns: tuple[str, ...]) -> int:
    allowed = (*USER_FEATURES, "position")
    if column not in allowed:
        raise ValueError(f"{path}: silos by column must be one of {', '.join(map(repr, allowed))}, got {column!r}")
    return columns.index(column)


def _number(path: Path, line: int, name: str, text: str, kind: type, low: int | None, high: int | None) -> float:
    try:
        value = kind(text.strip())
    except ValueError:
        raise ValueError(f"{path}: row {line}: field {name} must be a number, got {text!r}") from None
    if low is not None and high is not None and not low <= value <= high:
        raise ValueError(f"{path}: row {line}: field {name} must be in [{low}, {high}], got {text!r}")
    return float(value)


def read_obd_campaigns(folder: Path, behavior: str) -> BanditLog:
    """One behavior policy's logs of the three campaigns, one silo each (named by it), each silo with
    its own items and the shared features (module docstring)."""
    logs = [read_obd(folder, behavior, campaign, features="shared") for campaign in CAMPAIGNS]
    return concatenate(logs, names=CAMPAIGNS)
