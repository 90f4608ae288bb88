"""Reading a MovieLens ratings file: finding it (a file, a folder holding one, or the data home's
default data set) and streaming every line, validated, into :class:`Ratings`.

The accepted formats and every check are described with the whole pipeline in the docstring of
:mod:`fedbandits.envs.movielens` (section "Data"), which re-exports every public name of this module.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedbandits.envs.datahome import require_dataset

#: the data set an empty ``path`` reads (:mod:`fedbandits.envs.datahome` finds its folder)
DEFAULT_DATASET = "movielens-latest-small"
RATINGS_FILES = ("ratings.csv", "ratings.dat")
CSV_HEADER = ("userid", "movieid", "rating", "timestamp")
RATING_RANGE = (0.5, 5.0)
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, eq=False)
class Ratings:
    """Every rating of a file, in file order.  Arrays are read-only when they come from the cache."""

    users: np.ndarray  # (N,) int64 userId
    items: np.ndarray  # (N,) int64 movieId
    ratings: np.ndarray  # (N,) float64 stars
    timestamps: np.ndarray  # (N,) int64 seconds since the epoch
    source: Path  # the file read
    format: str  # "csv" or "dat"

    def __len__(self) -> int:
        return int(self.users.size)


def find_ratings_file(path: str | Path) -> Path:
    """The ratings file ``path`` names: the file itself, or ``ratings.csv`` / ``ratings.dat`` in a folder."""
    p = Path(path).expanduser()
    if p.is_dir():
        for name in RATINGS_FILES:
            if (p / name).is_file():
                return p / name
        raise FileNotFoundError(f"{p}: folder holds neither {' nor '.join(RATINGS_FILES)}")
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such ratings file or folder")
    return p


def resolve_path(path: str | Path) -> Path:
    """``path``, or ml-latest-small in the data home when ``path`` is empty (one-line error if absent)."""
    return find_ratings_file(require_dataset(DEFAULT_DATASET) if str(path) == "" else path)


def load_ratings(path: str | Path) -> Ratings:
    """Stream and validate a MovieLens ratings file (format detected; see :mod:`fedbandits.envs.movielens`)."""
    file = find_ratings_file(path)
    users, items, stamps = array("q"), array("q"), array("q")
    stars = array("d")
    add_user, add_item, add_stamp, add_star = users.append, items.append, stamps.append, stars.append
    low, high = RATING_RANGE
    fmt = ""
    sep = b","
    first_data_line = 0
    blank: list[int] = []

    def fail(lineno: int, line: bytes, what: str) -> ValueError:
        return ValueError(f"{file}, line {lineno}: {what}: {line[:100].decode('utf-8', 'replace')!r}")

    with file.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip(b"\r\n")
            if lineno == 1 and line.startswith(_BOM):
                line = line[len(_BOM) :]
            if not line.strip():
                blank.append(lineno)
                continue
            if not fmt:
                fmt, sep = ("dat", b"::") if b"::" in line else ("csv", b",")
                if fmt == "csv" and b"," not in line:
                    raise fail(lineno, line, "not a MovieLens ratings line (neither ',' nor '::' separated)")
                if fmt == "csv" and not line.split(b",", 1)[0].isdigit():
                    names = tuple(s.strip().decode("utf-8", "replace").lower() for s in line.split(b","))
                    if names != CSV_HEADER:
                        raise fail(lineno, line, "header must be userId,movieId,rating,timestamp")
                    continue
            if not first_data_line:
                first_data_line = lineno
            fields = line.split(sep)
            if len(fields) != 4:
                cols = sep.decode().join(("userId", "movieId", "rating", "timestamp"))
                raise fail(lineno, line, f"expected 4 fields {cols}, got {len(fields)}")
            u, i, r, ts = fields
            if not (u.isdigit() and i.isdigit()):
                raise fail(lineno, line, "userId and movieId must be non-negative integers")
            if not ts.isdigit():
                raise fail(lineno, line, "timestamp must be a non-negative integer")
            try:
                star = float(r)
            except ValueError:
                raise fail(lineno, line, "rating must be a number") from None
            if not low <= star <= high:  # also rejects nan
                raise fail(lineno, line, f"rating must be in [{low}, {high}]")
            add_user(int(u))
            add_item(int(i))
            add_star(star)
            add_stamp(int(ts))
    if not users:
        raise ValueError(f"{file}: no ratings")
    out = Ratings(
        users=np.frombuffer(users, dtype=np.int64).copy(),
        items=np.frombuffer(items, dtype=np.int64).copy(),
        ratings=np.frombuffer(stars, dtype=np.float64).copy(),
        timestamps=np.frombuffer(stamps, dtype=np.int64).copy(),
        source=file,
        format=fmt,
    )
    _check_unique_pairs(out, first_data_line, blank)
    return out


def _check_unique_pairs(ratings: Ratings, first_data_line: int, blank: list[int]) -> None:
    order = np.lexsort((ratings.items, ratings.users))
    same = (ratings.users[order[1:]] == ratings.users[order[:-1]]) & (
        ratings.items[order[1:]] == ratings.items[order[:-1]]
    )
    if not same.any():
        return
    k = int(np.argmax(same))
    a, b = sorted((int(order[k]), int(order[k + 1])))
    skipped = [n for n in blank if n > first_data_line]

    def line_of(index: int) -> int:  # the index-th data line, counting skipped blank lines
        line = first_data_line + index
        for n in skipped:
            if n <= line:
                line += 1
        return line

    raise ValueError(
        f"{ratings.source}, line {line_of(b)}: user {ratings.users[a]} rated movie {ratings.items[a]} "
        f"again (first on line {line_of(a)})"
    )
