"""The ``.csv`` form of a data file (its format: :mod:`fedbandits.envs.files`): parsing, with every
malformed line refused in one line naming the file, the line and the field, and writing.

:func:`parse_csv` returns float64 numbers and ids as written; :mod:`fedbandits.envs.files` turns them
into the float32 instance and renumbers the ids, exactly as for ``.npz`` files.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

CSV_HEADER = ("user", "arm", "reward")
#: the optional fourth column: the person behind each row (returning users)
CSV_USER_ID = "user_id"
#: a plain decimal number (``-1.5``, ``2e-3``; no ``nan``/``inf``, hex or ``_``): every CSV the project reads
DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_ARM = re.compile(r"[0-9]+\Z")
_LINE_SHOWN = 120


def _read_text(name: str) -> list[str]:
    try:
        raw = Path(name).read_bytes()
    except OSError as exc:
        raise ValueError(f"data file {name}: cannot read it: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"data file {name}: not UTF-8 text (byte {exc.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _shown(line: str) -> str:
    return repr(line if len(line) <= _LINE_SHOWN else line[:_LINE_SHOWN] + "...")


def parse_csv(name: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The table ``(N, K, 1 + d)`` (reward, then the features; float64) and, with a ``user_id`` column, each
    row's id ``(N,)`` int64 (as written: renumbering is the caller's), of CSV data file ``name``; a
    ``ValueError`` naming the file, the line and the field otherwise."""
    lines = _read_text(name)
    if not lines:
        raise ValueError(f"data file {name}: empty file; expected a header line 'user,arm,reward,<features>'")
    header, with_ids = _parse_header(name, lines[0])
    first = 4 if with_ids else 3
    names = header[first:]
    width = len(header)
    users: list[str] = []
    arms: list[str] = []
    ids: list[str] = []
    numbers: list[str] = []
    for lineno, line in enumerate(lines[1:], start=2):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != width:
            what = "empty line" if not line.strip() else f"{len(parts)} field(s)"
            raise ValueError(
                f"data file {name}, line {lineno}: expected {width} comma-separated fields "
                f"(user, arm, reward and {width - 3} feature(s)), got {what}: {_shown(line)}"
            )
        if not parts[0]:
            raise ValueError(f"data file {name}, line {lineno}: empty user id: {_shown(line)}")
        if not _ARM.match(parts[1]):
            raise ValueError(f"data file {name}, line {lineno}: arm must be an integer >= 0, got {parts[1]!r}")
        if with_ids:
            if not _ARM.match(parts[3]):
                raise ValueError(f"data file {name}, line {lineno}: user_id must be an integer >= 0, got {parts[3]!r}")
            ids.append(parts[3])
        values = [parts[2], *parts[first:]]
        if not all(map(DECIMAL.match, values)):
            column = next(j for j, v in enumerate(values) if not DECIMAL.match(v))
            raise ValueError(
                f"data file {name}, line {lineno}: {header[2] if column == 0 else names[column - 1]} must be a "
                f"decimal number, got {values[column]!r}"
            )
        users.append(parts[0])
        arms.append(parts[1])
        numbers.extend(values)
    if not users:
        raise ValueError(f"data file {name}: no data lines after the header (need at least one user)")
    starts, k = _user_blocks(name, users, arms, ids if with_ids else None)
    table = np.array(numbers, dtype=np.float64).reshape(len(starts), k, len(names) + 1)
    if not with_ids:
        return table, None
    raw = [int(ids[a]) for a in starts]
    if max(raw) >= 2**63:
        raise ValueError(f"data file {name}: user_id must be below 2^63, got {max(raw)}")
    return table, np.array(raw, dtype=np.int64)


def _parse_header(name: str, line: str) -> tuple[list[str], bool]:
    """The header's column names (stripped) and whether its fourth column is ``user_id``; a
    ``ValueError`` naming line 1 unless it is ``user,arm,reward[,user_id]`` and unique feature names."""
    header = [h.strip() for h in line.split(",")]
    with_ids = len(header) > 3 and header[3] == CSV_USER_ID
    first = 4 if with_ids else 3
    if tuple(header[:3]) != CSV_HEADER or len(header) <= first:
        raise ValueError(
            f"data file {name}, line 1: the header must be 'user,arm,reward' (and optionally 'user_id') followed "
            f"by at least one feature column name, got {_shown(line)}"
        )
    names = header[first:]
    if not all(names) or len(set(names)) != len(names):
        raise ValueError(f"data file {name}, line 1: feature column names must be non-empty and unique")
    return header, with_ids


def _user_blocks(name: str, users: list[str], arms: list[str], ids: list[str] | None) -> tuple[list[int], int]:
    """The first row of every user's block and K: each user's rows are one contiguous block of arms
    0..K-1, K from the first user (and, with ``ids``, one ``user_id``); a ``ValueError`` naming the
    line otherwise."""
    starts = [0] + [i for i in range(1, len(users)) if users[i] != users[i - 1]]
    ends = [*starts[1:], len(users)]
    k = ends[0]
    seen: dict[str, int] = {}
    for a, b in zip(starts, ends, strict=True):
        user = users[a]
        if user in seen:
            raise ValueError(
                f"data file {name}, line {a + 2}: user {user!r} appears again (its block started at line "
                f"{seen[user] + 2}); a user's lines must be contiguous"
            )
        seen[user] = a
        for j in range(a, b):
            if int(arms[j]) != j - a:
                raise ValueError(
                    f"data file {name}, line {j + 2}: user {user!r}: expected arm {j - a}, got {arms[j]} "
                    f"(each user has one line per arm 0..K-1, in increasing order)"
                )
        if b - a != k:
            raise ValueError(
                f"data file {name}, line {a + 2}: user {user!r} has {b - a} arm line(s), expected K = {k} "
                f"like the first user {users[0]!r}"
            )
        if ids is None:
            continue
        other = next((i for i in range(a, b) if int(ids[i]) != int(ids[a])), None)
        if other is not None:
            raise ValueError(
                f"data file {name}, line {other + 2}: user {user!r}: user_id {ids[other]} differs from {ids[a]} on its "
                f"first line (one row is one person's visit: its K lines carry one user_id)"
            )
    return starts, k


def csv_text(x: np.ndarray, mu: np.ndarray, names: list[str], ids: np.ndarray | None = None) -> str:
    n, k, d = x.shape
    table = np.concatenate([mu[..., None], x], axis=-1).astype(np.float64).reshape(n * k, d + 1)
    user = np.repeat(np.arange(n), k)
    arm = np.tile(np.arange(k), n)
    header = (*CSV_HEADER, *(() if ids is None else (CSV_USER_ID,)), *names)
    person = [""] * (n * k) if ids is None else [f",{p}" for p in np.repeat(ids, k).tolist()]
    features = ",".join(["%.9g"] * d)
    rows = zip(user.tolist(), arm.tolist(), table.tolist(), person, strict=True)
    lines = [",".join(header)]
    lines.extend(f"{u},{a},{row[0]:.9g}{p},{features % tuple(row[1:])}" for u, a, row, p in rows)
    return "\n".join(lines) + "\n"
