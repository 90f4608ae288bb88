"""A serving silo's own event log (``fedbandits serve silo --log-candidates``) as a
:class:`~fedbandits.evaluation.logs.BanditLog`.

Each decision the silo logged with its candidates (schema 3, opted in) and rewarded is one round:
its candidates' features, the arm chosen, the propensity it was chosen with, the reward.  Decisions
never rewarded (expired, or still pending) are left out and counted: when whether a user answers
depends on the arm shown, leaving them out biases every estimate, as it would any logged data.
Decisions logged without candidates (the default, or an earlier fedbandits) cannot be evaluated and
are counted too.  The file is read with the standard library's sqlite3 (no serve extra needed),
read-only.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedbandits.evaluation.logs import BanditLog

#: the event log's file in a silo's state folder
EVENTS = "events.sqlite"


@dataclass(frozen=True)
class ServeLog:
    log: BanditLog
    #: decisions left out: without a reward, without candidates
    unrewarded: int
    without_candidates: int


def read_serve_log(state_dir: Path) -> ServeLog:
    """The rewarded decisions a silo logged with their candidates, in decision order (checked)."""
    path = Path(state_dir) / EVENTS
    source = str(path)
    if not path.is_file():
        raise ValueError(f"{source}: no such file (a serving silo's --state-dir holds it)")
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            schema = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if schema is None or int(schema[0]) < 3:
                raise ValueError(
                    f"{source}: schema {schema[0] if schema else '?'} has no propensities (fedbandits >= #46)"
                )
            rows = db.execute(
                "SELECT d.number, d.arm, d.propensity, d.candidates, r.value, d.x FROM events d "
                "LEFT JOIN events r ON r.kind = 'reward' AND r.number = d.number "
                "WHERE d.kind = 'decision' ORDER BY d.seq"
            ).fetchall()
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise ValueError(f"{source}: not a readable event log ({exc})") from None
    kept = [row for row in rows if row[3] is not None and row[4] is not None]
    without = sum(1 for row in rows if row[3] is None)
    unrewarded = sum(1 for row in rows if row[3] is not None and row[4] is None)
    if not kept:
        raise ValueError(
            f"{source}: no rewarded decision with its candidates ({len(rows)} decisions; serve silo --log-candidates "
            "keeps them)"
        )
    return ServeLog(_rounds(source, kept), unrewarded, without)


def _rounds(source: str, rows: list[tuple[int, int, float, bytes, float, bytes]]) -> BanditLog:
    """The rounds, K and d read from the blobs (d from the chosen arm's logged features)."""
    dim = len(rows[0][5]) // 8
    k = len(rows[0][3]) // 8 // dim
    features = np.empty((len(rows), k, dim), dtype=np.float32)
    for i, (number, arm, _, shown, _, chosen) in enumerate(rows):
        candidates = np.frombuffer(shown, dtype=np.float64)
        if candidates.size != k * dim or len(chosen) != dim * 8:
            raise ValueError(
                f"{source}: decision {number}: {candidates.size // dim} candidates of d = "
                f"{len(chosen) // 8}, the log's first has {k} of d = {dim}; one K and d per log"
            )
        candidates = candidates.reshape(k, dim)
        if not np.array_equal(candidates[arm], np.frombuffer(chosen, dtype=np.float64)):
            raise ValueError(f"{source}: decision {number}: its arm's features are not its candidate {arm}'s")
        features[i] = candidates
    return BanditLog(
        np.array([row[1] for row in rows], dtype=np.int64),
        np.array([row[2] for row in rows], dtype=np.float64),
        np.array([row[4] for row in rows], dtype=np.float64),
        np.zeros((k, 0), np.float32),
        features,
        np.zeros(len(rows), dtype=np.int64),
        (Path(source).parent.name,),
        source,
    )
