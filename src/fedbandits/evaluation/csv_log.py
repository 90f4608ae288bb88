"""The generic log as CSV, one file per silo (beside the ``.npz`` of :mod:`fedbandits.evaluation.logs`).

A header ``round,arm,chosen,propensity,reward,<d feature names>`` (the first five names exactly
these, at least one feature column, names unique), then one line per (round, candidate)::

    round,arm,chosen,propensity,reward,x0,x1
    0,0,0,,,0.1,0.2
    0,1,1,0.25,1,0.3,0.4
    0,2,0,,,0.5,0.6

A round's lines are contiguous and its ``arm`` column runs 0, 1, ..., K-1 in order (the same K in
every round); ``round`` is an identifier compared as text.  Exactly one line of a round has
``chosen`` 1 and carries the logging policy's ``propensity`` in (0, 1] and the observed ``reward``;
the others have ``chosen`` 0 and both fields empty.  Numbers are plain decimals; no quoting; a
UTF-8 byte-order mark, CRLF line ends and a missing final newline are accepted, blank lines not.
Every malformed line raises ``ValueError`` naming the file, the line and the field.
:func:`write_csv_log` writes the format (``%.9g``: float32 features read back exactly).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from fedbandits.envs.csv_format import DECIMAL
from fedbandits.evaluation.logs import BanditLog

HEADER = ("round", "arm", "chosen", "propensity", "reward")


def read_csv_log(path: Path) -> BanditLog:
    """One silo's CSV log (module docstring), checked line by line."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{source}: not readable ({exc})") from None
    lines = text.splitlines()
    if not lines:
        raise ValueError(f"{source}: empty file")
    header = [h.strip() for h in lines[0].split(",")]
    if tuple(header[:5]) != HEADER or len(header) < 6 or len(set(header)) != len(header):
        raise ValueError(f"{source}: line 1: the header must be {','.join(HEADER)},<feature names> (unique)")
    dim = len(header) - 5
    rounds: list[tuple[str, list[list[float]], int, float, float]] = []
    for number, line in enumerate(lines[1:], start=2):
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != len(header):
            raise ValueError(f"{source}: line {number}: {len(fields)} fields, the header has {len(header)}")
        _row(source, number, fields, header, dim, rounds)
    if not rounds:
        raise ValueError(f"{source}: no rounds")
    arms = len(rounds[0][1])
    for key, candidates, chosen, _, _ in rounds:
        if chosen < 0:
            raise ValueError(f"{source}: round {key}: no line has chosen = 1")
        if len(candidates) != arms:
            raise ValueError(f"{source}: round {key}: {len(candidates)} candidates, the first round has {arms}")
    return BanditLog(
        np.array([r[2] for r in rounds], dtype=np.int64),
        np.array([r[3] for r in rounds], dtype=np.float64),
        np.array([r[4] for r in rounds], dtype=np.float64),
        np.zeros((arms, 0), np.float32),
        np.array([r[1] for r in rounds], dtype=np.float32),
        np.zeros(len(rounds), dtype=np.int64),
        (path.stem,),
        source,
    )


def _row(
    source: str,
    number: int,
    fields: list[str],
    header: list[str],
    dim: int,
    rounds: list[tuple[str, list[list[float]], int, float, float]],
) -> None:
    """Add one line to ``rounds`` (a new round when its key changes), or raise naming the field."""
    where = f"{source}: line {number}"
    key = fields[0]
    if not rounds or rounds[-1][0] != key:
        if any(r[0] == key for r in rounds):
            raise ValueError(
                f"{where}: field round: round {key!r} appears in two blocks; a round's lines are contiguous"
            )
        rounds.append((key, [], -1, math.nan, math.nan))
    current = rounds[-1]
    if fields[1] != str(len(current[1])):
        raise ValueError(
            f"{where}: field arm must be {len(current[1])} (arms run 0, 1, ... in order), got {fields[1]!r}"
        )
    features = [_number(where, header[5 + j], fields[5 + j]) for j in range(dim)]
    current[1].append(features)
    if fields[2] == "1":
        if current[2] >= 0:
            raise ValueError(f"{where}: field chosen: round {key} has a second chosen line")
        propensity = _number(where, "propensity", fields[3])
        if not 0 < propensity <= 1:
            raise ValueError(f"{where}: field propensity must be in (0, 1], got {fields[3]!r}")
        rounds[-1] = (key, current[1], len(current[1]) - 1, propensity, _number(where, "reward", fields[4]))
    elif fields[2] == "0":
        if fields[3] or fields[4]:
            raise ValueError(f"{where}: fields propensity and reward must be empty on a line not chosen")
    else:
        raise ValueError(f"{where}: field chosen must be 0 or 1, got {fields[2]!r}")


def _number(where: str, name: str, text: str) -> float:
    """A field in the data files' decimal grammar (:data:`fedbandits.envs.csv_format.DECIMAL`), finite."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: field {name} must be a number, got {text!r}") from None
    if not DECIMAL.match(text) or not math.isfinite(value):  # nan, inf, 1e999, hex, 1_0
        raise ValueError(f"{where}: field {name} must be a finite decimal number, got {text!r}")
    return value


def write_csv_log(path: Path, log: BanditLog, silo: int = 0) -> None:
    """Silo ``silo``'s rounds of ``log`` in the CSV format (module docstring)."""
    rows = np.flatnonzero(log.silos == silo)
    x = log.features(rows)
    names = [f"x{j}" for j in range(log.dim)]
    out = [",".join([*HEADER, *names])]
    arms = int(log.arms_of(rows[:1])[0]) if rows.size else log.n_arms  # this silo's own candidates
    for i, row in enumerate(rows):
        for k in range(arms):
            chosen = k == log.actions[row]
            extra = f"1,{float(log.propensities[row])!r},{float(log.rewards[row])!r}" if chosen else "0,,"
            out.append(f"{i},{k},{extra}," + ",".join(f"{v:.9g}" for v in x[i, k]))
    Path(path).write_text("\n".join(out) + "\n", encoding="utf-8")
